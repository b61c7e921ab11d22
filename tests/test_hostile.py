"""The third round of hostile input: lost data, a crafted index that reaches the network,
crafted files that load and rank wrongly, silent wrong results, hangs and leaks, tracebacks.

Each test names the case it covers; crafted files get their manifest entry recomputed
(size and sha256), so only the loader's value checks can catch them.
"""
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from evireform import IndexFormatError, Passage, PropositionIndex
from evireform.cli import main
from evireform.corpus import load_corpus
from evireform.embed import HashingEmbedder, get_embedder
from evireform.store.hnsw_file import _HNSW_HEADER

from test_fuzz import refresh_manifest, server, small_index  # noqa: F401 (a fixture)
from evireform.engine import structures_of

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMB = HashingEmbedder(16)


def content_id(title, text):
    from evireform.corpus import content_id as cid
    return cid(title, text)


def _write(path, obj):
    path.write_text(json.dumps(obj))
    return path


def _records(n, start=0, word="Alpha"):
    return [{"title": f"{word} {i}", "text": f"{word} {i} met Gamma Ray in {1900 + i}."}
            for i in range(start, start + n)]


def _cli_index(tmp_path, records, name="ix"):
    c = _write(tmp_path / f"{name}.json", records)
    assert main(["index", str(c), str(tmp_path / name), "--embedder", "hashing-16",
                 "--quiet"]) == 0
    return tmp_path / name


def _run(*args, **kw):
    return subprocess.run([sys.executable, "-m", "evireform", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, **kw)


# =========================================================================== 1-5 lost data
def test_update_add_of_id_less_records_never_overwrites(tmp_path, capsys):
    ix = _cli_index(tmp_path, _records(3))
    before = {p.id: p.text for p in PropositionIndex.load(ix).passages}
    assert sorted(before) == sorted(content_id(r["title"], r["text"]) for r in _records(3))
    second = _write(tmp_path / "more.json", _records(2, start=10, word="Beta"))
    assert main(["update", str(ix), "--add", str(second), "--quiet"]) == 0
    assert main(["update", str(ix), "--add", str(second), "--quiet"]) == 0  # again: duplicates
    assert "already in the index" in capsys.readouterr().err
    assert main(["update", str(ix), "--add", str(second), "--upsert", "--quiet"]) == 0
    after = {p.id: p.text for p in PropositionIndex.load(ix).passages}
    assert len(after) == 5 and all(after[k] == v for k, v in before.items())
    idx = PropositionIndex.load(ix)
    up = idx.upsert(["A brand new text."], EMB)
    assert up.n_passages == 6 and all(up.passages[up.passage_index(k)].text == v
                                      for k, v in before.items())


def test_repeated_records_in_one_file_get_distinct_ids(tmp_path):
    f = _write(tmp_path / "c.json", [{"title": "T", "text": "same"}] * 3)
    ids = [p.id for p in load_corpus(f)]
    base = content_id("T", "same")
    assert ids == [base, f"{base}-2", f"{base}-3"]


def test_old_indexes_with_position_ids_keep_loading(tmp_path):
    idx = PropositionIndex.build([Passage("0", "A", "Alpha met Beta."),
                                  Passage("1", "B", "Beta met Gamma.")], EMB,
                                 show_progress=False)
    idx.save(tmp_path / "old")
    back = PropositionIndex.load(tmp_path / "old")
    assert [p.id for p in back.passages] == ["0", "1"]
    grown = back.add([{"title": "C", "text": "Gamma met Delta."}], EMB)
    assert [p.id for p in grown.passages] == ["0", "1", content_id("C", "Gamma met Delta.")]


_ADDER = """
import sys
from evireform.cli import main
sys.exit(main(["update", sys.argv[1], "--add", sys.argv[2], "--quiet"]))
"""


def test_concurrent_updates_lose_nothing(tmp_path):
    ix = _cli_index(tmp_path, _records(3))
    files = [_write(tmp_path / f"add{n}.json", _records(4, start=100 * (n + 1), word=f"W{n}"))
             for n in range(3)]
    procs = [subprocess.Popen([sys.executable, "-c", _ADDER, str(ix), str(f)], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for f in files]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()
    assert PropositionIndex.load(ix).n_passages == 3 + 3 * 4


def test_a_swap_is_seen_even_when_the_directory_inode_comes_back(tmp_path):
    """A read overlapping two saves must still see that the index changed: the directory's
    inode is reused at once by the next save's temporary directory (ext4 gives it back
    almost every time), so the reader's identity also covers the manifest; a CI run under
    load mixed two versions before (diag.npy of one, the manifest of the other)."""
    from evireform.store import verify
    small, big = small_index(n=20), small_index(n=40, seed=1)
    target = tmp_path / "ix"
    small.save(target)
    first = verify._identity(target)
    big.save(target)
    small.save(target)
    assert verify._identity(target) != first
    assert verify._identity(tmp_path / "missing") is None


def test_a_reader_sees_one_version_while_saves_swap(tmp_path):
    small, big = small_index(n=20), small_index(n=40, seed=1)
    target = tmp_path / "ix"
    small.save(target)
    stop = threading.Event()
    errors = []

    def writer():
        k = 0
        while not stop.is_set():
            (big if k % 2 else small).save(target)
            k += 1

    t = threading.Thread(target=writer)
    t.start()
    try:
        for _ in range(40):
            try:
                got = PropositionIndex.load(target)
            except IndexFormatError as exc:
                errors.append(str(exc))
                continue
            assert got.n_props in (20, 40)
    finally:
        stop.set()
        t.join()
    assert not errors, errors[:3]


def test_bare_strings_are_refused():
    idx = small_index()
    with pytest.raises(TypeError, match="must be a list"):
        idx.delete("p1")
    with pytest.raises(TypeError, match="must be a list"):
        idx.add("hey", EMB)
    with pytest.raises(TypeError, match="must be a list"):
        idx.upsert("hey", EMB)
    with pytest.raises(TypeError, match="must be a list"):
        PropositionIndex.build("hey", EMB, show_progress=False)
    from evireform.strategies import BGR, HiQ
    for s in (BGR(idx, EMB), HiQ(idx, EMB)):
        with pytest.raises(TypeError, match="must be a list"):
            s.retrieve_many("fact about e1")


class _TooMany:
    name, dim = EMB.name, EMB.dim

    def encode(self, texts, **kw):
        return EMB.encode(list(texts) + ["extra row"])


def test_an_embedder_with_extra_rows_is_refused_before_anything_is_kept(tmp_path):
    idx = PropositionIndex.build([Passage("a", "A", "Alpha met Beta.")], EMB,
                                 show_progress=False)
    idx.save(tmp_path / "ix")
    before = (tmp_path / "ix" / "manifest.json").read_bytes()
    with pytest.raises(ValueError, match="nothing was added"):
        idx.add([Passage("b", "B", "Beta met Gamma.")], _TooMany())
    assert (tmp_path / "ix" / "manifest.json").read_bytes() == before
    assert PropositionIndex.load(tmp_path / "ix").n_passages == 1


def test_llm_cache_export_never_overwrites_an_input(tmp_path, capsys):
    from evireform.llm import ReplyCache
    cache = tmp_path / "c.sqlite"
    rc = ReplyCache(str(cache))
    rc.put("k", "select", {"selected": [1]})
    rc._db.close()
    before = cache.read_bytes()
    assert main(["llm-cache", "export", str(cache), "--cache", str(cache)]) == 2
    assert cache.read_bytes() == before
    replies = tmp_path / "r.jsonl"
    replies.write_text('{"key": "x", "reply": {"a": 1}}\n')
    assert main(["llm-cache", "export", str(replies), "--cache", str(cache)]) == 2
    assert replies.read_text() == '{"key": "x", "reply": {"a": 1}}\n'
    assert main(["llm-cache", "export", str(replies), "--cache", str(cache), "--force"]) == 0
    assert json.loads(replies.read_text())["key"] == "k"
    assert main(["llm-cache", "export", str(tmp_path / "o.jsonl"), "--cache",
                 str(tmp_path / "missing.sqlite")]) == 2
    assert not (tmp_path / "missing.sqlite").exists()
    assert "no such reply cache" in capsys.readouterr().err


def test_query_outputs_never_overwrite_inputs_or_each_other(tmp_path, capsys):
    ix = _cli_index(tmp_path, _records(4))
    q = tmp_path / "q.txt"
    q.write_text("Who met Gamma Ray?\nWhen did Alpha 1 meet?\n")
    base = ["query", str(ix), "--questions", str(q), "--quiet", "--embedder", "hashing-16"]
    assert main(base + ["--out", str(q)]) == 2
    assert q.read_text().startswith("Who met")
    both = tmp_path / "both"
    assert main(base + ["--out", str(both), "--trec", str(both)]) == 2
    assert not both.exists()
    out = tmp_path / "out.jsonl"
    assert main(base + ["--out", str(out)]) == 0
    good = out.read_text()
    assert main(base + ["--out", str(out), "--trec", str(tmp_path / "no" / "run.trec")]) == 2
    assert out.read_text() == good  # the failed --trec left the previous --out whole
    assert main(base + ["--out", str(out), "--trec", str(tmp_path)]) == 2  # a directory
    err = capsys.readouterr().err
    assert "is the input file" in err and "same file" in err and "Traceback" not in err


# =========================================================================== 6 network
def test_an_index_cannot_send_the_key_to_a_host_it_names(tmp_path, monkeypatch):
    pytest.importorskip("openai")
    from scripted_server import Script, serve
    script = Script()
    srv, url = serve(script)
    try:
        ix = _cli_index(tmp_path, _records(3))
        m = ix / "manifest.json"
        man = json.loads(m.read_text())
        man["meta"]["embedder_spec"] = {"spec": f"openai:m@{url}", "dim": 16}
        man["embedder"] = f"openai:m@{url}"
        m.write_text(json.dumps(man))
        monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
        r = _run("query", ix, "Who met Gamma Ray?")
        assert r.returncode == 2 and "remote embedder" in r.stderr, r.stderr
        assert script.requests == []  # nothing left the machine
        from evireform.integrations._common import make_retriever
        with pytest.raises(ValueError, match="remote embedder"):
            make_retriever(index_dir=ix)
    finally:
        srv.shutdown()


# =========================================================================== 7-8 crafted files
def _hnsw_parts(ix):
    raw = bytearray((ix / "hnsw.bin").read_bytes())
    hd = np.frombuffer(bytes(raw[:_HNSW_HEADER.itemsize]), _HNSW_HEADER)[0]
    h, spe, count = _HNSW_HEADER.itemsize, int(hd["size_per_element"]), int(hd["count"])
    return raw, h, spe, count, int(hd["offset_data"]), int(hd["label_offset"])


def _elements(raw, h, spe, count):
    return np.frombuffer(bytes(raw[h:h + spe * count]), np.uint8).reshape(count, spe).copy()


def _put(raw, h, el):
    raw[h:h + el.size] = el.tobytes()
    return raw


def _crafts(ix):
    raw, h, spe, count, off_data, lab = _hnsw_parts(ix)
    el = _elements(raw, h, spe, count)
    dim = (lab - off_data) // 4
    out = {}
    e = el.copy()
    e[:, lab:lab + 8] = 0
    out["labels zeroed"] = (_put(bytearray(raw), h, e), "labels are not unique")
    e = el.copy()
    e[:, lab:lab + 8] = e[np.r_[1:count, 0], lab:lab + 8]  # shuffled: a permutation
    out["labels shuffled"] = (_put(bytearray(raw), h, e), "stored vector differs")
    e = el.copy()
    e[::2, 2] |= 1
    out["half deleted"] = (_put(bytearray(raw), h, e), "delete flag")
    e = el.copy()
    e[:, 2] |= 1
    out["all deleted"] = (_put(bytearray(raw), h, e), "delete flag")
    e = el.copy()
    e[:, off_data:off_data + 4 * dim] = 0
    out["vectors zeroed"] = (_put(bytearray(raw), h, e), "stored vector differs")
    e = el.copy()
    e[:, 0:2] = 0
    out["level-0 links cleared"] = (_put(bytearray(raw), h, e), "no level-0 neighbours")
    return out


@pytest.mark.parametrize("case", ["labels zeroed", "labels shuffled", "half deleted",
                                  "all deleted", "vectors zeroed", "level-0 links cleared"])
def test_crafted_hnsw_graphs_are_refused(tmp_path, case):
    small_index(n=60, hnsw=True).save(tmp_path / "ix")
    ix = tmp_path / "ix"
    raw, msg = _crafts(ix)[case]
    (ix / "hnsw.bin").write_bytes(bytes(raw))
    refresh_manifest(ix, "hnsw.bin")
    with pytest.raises(IndexFormatError, match=f"hnsw.bin: .*{msg}"):
        PropositionIndex.load(ix)


def test_a_reversed_label_map_is_refused(tmp_path):
    idx = small_index(n=60, hnsw=True).delete(["p0"])
    assert structures_of(idx).hnsw_ids is not None
    idx.save(tmp_path / "ix")
    ix = tmp_path / "ix"
    ids = np.load(ix / "hnsw_ids.npy")
    np.save(ix / "hnsw_ids.npy", ids[::-1].copy(), allow_pickle=False)
    refresh_manifest(ix, "hnsw_ids.npy")
    with pytest.raises(IndexFormatError, match="hnsw.bin: .*(delete flag|stored vector)"):
        PropositionIndex.load(ix)


def test_a_shard_graph_swapped_for_another_shards_is_refused(tmp_path):
    from evireform.engine.shards import ShardedSearcher
    idx = small_index(n=80)
    ShardedSearcher.from_index(idx, 2, hnsw=True).save(tmp_path / "sh")
    a, b = tmp_path / "sh" / "shard-0.hnsw", tmp_path / "sh" / "shard-1.hnsw"
    ra, rb = a.read_bytes(), b.read_bytes()
    a.write_bytes(rb)
    b.write_bytes(ra)
    from evireform.store import file_sha256
    m = tmp_path / "sh" / "shards.json"
    man = json.loads(m.read_text())
    for n, e in enumerate(man["shards"]):
        e["hnsw"]["sha256"] = file_sha256(tmp_path / "sh" / f"shard-{n}.hnsw")
    m.write_text(json.dumps(man))
    with pytest.raises(IndexFormatError, match="stored vector differs|holds"):
        ShardedSearcher.load(tmp_path / "sh", idx)


def test_a_scaled_embedding_row_is_refused(tmp_path):
    small_index().save(tmp_path / "ix")
    ix = tmp_path / "ix"
    e = np.load(ix / "embeddings.npy")
    e[3] *= 30
    np.save(ix / "embeddings.npy", e, allow_pickle=False)
    refresh_manifest(ix, "embeddings.npy")
    with pytest.raises(IndexFormatError, match="row 3 has L2 norm 30"):
        PropositionIndex.load(ix)


# =========================================================================== 9-13 silent results
def _dead_url():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens: connection refused
    return f"http://127.0.0.1:{port}/v1"


def test_llm_extraction_fallbacks_are_counted_and_strict_fails(tmp_path, capsys):
    pytest.importorskip("openai")
    c = _write(tmp_path / "c.json", _records(3))
    args = ["index", str(c), str(tmp_path / "ix"), "--embedder", "hashing-16", "--quiet",
            "--extractor", "llm", "--llm-base-url", _dead_url(), "--llm-retries", "0",
            "--llm-deadline", "2"]
    assert main(args + ["--strict-llm"]) == 3
    assert not (tmp_path / "ix").exists()
    assert main(args) == 0
    assert "3 of 3 passages were extracted by the LLM-free extractor" in capsys.readouterr().err
    assert PropositionIndex.load(tmp_path / "ix").meta["extraction_fallbacks"] == 3


def test_a_cache_that_cannot_be_written_keeps_the_paid_reply(server, tmp_path, capsys):
    from evireform.llm import LLMClient, LLMConfig, LLMSelector
    from evireform.roles import Candidate
    script, url = server
    cache = tmp_path / "ro.sqlite"
    sqlite3.connect(cache).execute("CREATE TABLE replies (key TEXT PRIMARY KEY, role TEXT, "
                                   "reply TEXT)").connection.commit()
    locker = sqlite3.connect(cache, timeout=0)
    locker.execute("BEGIN IMMEDIATE")  # another writer holds the write lock
    try:
        script.default = {"content": json.dumps({"selected": [2]})}
        client = LLMClient(LLMConfig(base_url=url, model="scripted", cache_path=str(cache),
                                     max_retries=0, timeout=5))
        client.cache._db.execute("PRAGMA busy_timeout = 50")
        out = LLMSelector(client).select("q", [Candidate(3, 0.9, "x", 0),
                                               Candidate(4, 0.5, "y", 0)], 2)
        assert list(out) == [4] and out.fallback is None  # the LLM's answer, not the fallback
        assert "cache" in capsys.readouterr().err
    finally:
        locker.rollback()
        locker.close()


@pytest.mark.parametrize("kind,msg", [("schema", "columns"), ("corrupt", "not a usable SQLite"),
                                      ("dir", "is a directory"),
                                      ("nodir", "does not exist")])
def test_bad_caches_are_named(tmp_path, kind, msg):
    from evireform.llm import ReplyCache
    p = tmp_path / "c.sqlite"
    if kind == "schema":
        sqlite3.connect(p).execute("CREATE TABLE replies (a, b)").connection.commit()
    elif kind == "corrupt":
        p.write_bytes(b"not a database at all" * 100)
    elif kind == "dir":
        p.mkdir()
    else:
        p = tmp_path / "no" / "c.sqlite"
    with pytest.raises(ValueError, match=msg) as err:
        ReplyCache(str(p))
    assert str(p) in str(err.value)


def test_bgr_and_hiq_clean_llm_queries(server):
    from evireform.llm import LLMClient, LLMReformulator
    from evireform.strategies import BGR
    from evireform.llm import LLMConfig
    script, url = server
    huge = ["q " * 50_000] + [f"bridge {i}" for i in range(5000)]
    script.default = {"content": json.dumps({"queries": huge})}
    client = LLMClient(LLMConfig(base_url=url, model="scripted", max_retries=0, timeout=10))
    seen = []
    bgr = BGR(small_index(), EMB, reformulator=LLMReformulator(client))
    real = bgr.search.rank

    def rank(texts, k, H=None):
        seen.append(list(texts))
        return real(texts, k, H)
    bgr.search.rank = rank
    res = bgr.retrieve("fact about e1", 5)
    assert all(len(t) <= 1000 for call in seen for t in call)
    assert all(len(call) <= 2 for call in seen)
    assert any(e.startswith("reformulate:dropped") for e in res.trace.role_events)


def test_trec_docids_are_single_distinct_tokens():
    from evireform.cli import trec_docid
    ids = ["a b", "a_b", "a\nb", "a%20b", "plain"]
    docs = [trec_docid(i) for i in ids]
    assert len(set(docs)) == len(ids) and all(len(d.split()) == 1 for d in docs)
    from urllib.parse import unquote
    assert [unquote(d) for d in docs] == ids


def test_integrations_refuse_non_integral_k():
    pytest.importorskip("llama_index.core")
    pytest.importorskip("langchain_core")
    from evireform.integrations.langchain import EviReformRetriever as LC
    from evireform.integrations.llama_index import EviReformRetriever as LI
    idx = small_index()
    with pytest.raises(ValueError, match="similarity_top_k"):
        LI.from_defaults(index=idx, embedder=EMB, similarity_top_k=2.5)
    with pytest.raises(ValueError, match="k must be a positive integer"):
        LC.from_index(idx, EMB, k=True)
    assert LC.from_index(idx, EMB, k=3).k == 3


# =========================================================================== 14-20 hangs, leaks
def test_a_dead_endpoint_trips_the_circuit_breaker():
    pytest.importorskip("openai")
    from evireform.llm import LLMClient, LLMConfig, LLMSelector
    from evireform.roles import Candidate
    client = LLMClient(LLMConfig(base_url=_dead_url(), model="m", max_retries=0, timeout=2,
                                 breaker_failures=3, breaker_cooldown=60))
    sel = LLMSelector(client)
    events = []
    for _ in range(8):
        events += sel.select("q", [Candidate(3, 0.9, "x", 0)], 1).events()
    assert events.count("select:fallback:CircuitOpen") == 5
    assert client.usage["select"].breaker_skips == 5


def test_a_hung_embedding_endpoint_meets_its_deadline(server):
    from evireform.embed import EmbedderUnavailable, OpenAIEmbedder
    script, url = server
    script.embed = lambda t: EMB.encode([t])[0].tolist()
    script.embed_delay = 5
    emb = OpenAIEmbedder("m", url, timeout=60, max_retries=3, dim=16, deadline=1.0)
    t0 = time.monotonic()
    with pytest.raises(EmbedderUnavailable, match="within 1 s"):
        emb.encode(["a question"])
    assert time.monotonic() - t0 < 4
    script.embed_delay = 0
    emb = OpenAIEmbedder("m", _dead_url(), max_retries=1, dim=16, deadline=3)
    with pytest.raises(EmbedderUnavailable, match="gave no embeddings"):
        emb.encode(["x"])


def _fds():
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0


def test_timed_out_calls_leave_no_thread_or_socket(server):
    from evireform.llm import LLMClient, LLMConfig, LLMSelector
    from evireform.roles import Candidate
    script, url = server
    script.default = {"content": "{}", "delay": 2}
    client = LLMClient(LLMConfig(base_url=url, model="scripted", max_retries=0, timeout=10,
                                 deadline=0.2, breaker_failures=0))
    sel = LLMSelector(client)
    sel.select("warm", [Candidate(3, 0.9, "x", 0)], 1)  # starts the client's loop thread
    time.sleep(2.5)  # the scripted server's own threads (in this process) finish

    def ours():  # every thread but the scripted server's request handlers
        return sum("process_request" not in t.name for t in threading.enumerate())
    threads, fds = ours(), _fds()
    for i in range(12):
        out = sel.select(f"q{i}", [Candidate(3, 0.9, "x", 0)], 1)
        assert out.fallback == "DeadlineExceeded"
    time.sleep(2.5)
    assert ours() <= threads
    assert _fds() <= fds + 2


def test_hashing_dimension_is_bounded():
    for spec in ("hashing-100000000", "hashing-0"):
        with pytest.raises(ValueError, match="hashing-DIM|dimension"):
            get_embedder(spec)


def test_import_is_one_transaction_in_wal_mode(tmp_path):
    from evireform.llm import ReplyCache
    f = tmp_path / "r.jsonl"
    f.write_text("".join(json.dumps({"key": f"k{i}", "reply": {"i": i}}) + "\n"
                         for i in range(2000)))
    cache = ReplyCache(str(tmp_path / "c.sqlite"))
    commits = []
    cache._db.set_trace_callback(lambda sql: commits.append(sql) if sql.startswith(
        ("COMMIT", "INSERT")) else None)
    assert cache.import_jsonl(f) == 2000
    assert sum(s.startswith("COMMIT") for s in commits) == 1
    assert cache._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert cache.get("k1999") == {"i": 1999}


# =========================================================================== tracebacks
def test_deep_json_never_crashes(tmp_path, capsys):
    deep = "[" * 100_000
    c = tmp_path / "c.json"
    c.write_text(deep)
    assert main(["index", str(c), str(tmp_path / "ix"), "--embedder", "hashing-16"]) == 2
    q = tmp_path / "q.json"
    q.write_text(deep)
    assert main(["eval", "--questions", str(q), "--corpus", str(c), "--embedder",
                 "hashing-16", "--quiet"]) == 2
    ix = _cli_index(tmp_path, _records(3), "good")
    assert main(["query", str(ix), "--questions", str(q), "--quiet"]) == 2
    r = tmp_path / "r.jsonl"
    r.write_text("{" * 50_000 + "\n")
    assert main(["llm-cache", "import", str(r), "--cache", str(tmp_path / "x.sqlite")]) == 2
    (ix / "manifest.json").write_text(deep)
    with pytest.raises(IndexFormatError):
        PropositionIndex.load(ix)
    err = capsys.readouterr().err
    assert "Traceback" not in err and "RecursionError" not in err


@pytest.mark.parametrize("line,msg", [
    ('{"key": "k", "messages": "text", "reply": {}}', "messages"),
    ('{"key": "k", "content": 5}', "content"),
    ('[1, 2]', "not an object"),
])
def test_malformed_replay_records_are_named(tmp_path, line, msg):
    from evireform.llm import read_reply_records
    f = tmp_path / "r.jsonl"
    f.write_text(line + "\n")
    with pytest.raises(ValueError, match=f"r.jsonl:1: .*{msg}"):
        list(read_reply_records(f))


def test_cli_errors_are_one_line(tmp_path, capsys):
    ix = _cli_index(tmp_path, _records(3))
    ids = tmp_path / "ids.txt"
    ids.write_text("no-such-id\n")
    assert main(["update", str(ix), "--delete", str(ids)]) == 2
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    assert main(["query", str(ix), "--questions", str(empty), "--quiet"]) == 2
    assert main(["query", str(ix), "--questions", str(tmp_path), "--quiet"]) == 2
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("Qui a vu l'\xe9t\xe9 ?\n".encode("latin-1"))
    assert main(["query", str(ix), "--questions", str(bad), "--quiet"]) == 2
    ids.write_bytes(b"\xff\xfe\n")
    assert main(["update", str(ix), "--delete", str(ids)]) == 2
    nothing = tmp_path / "nothing.jsonl"
    nothing.write_text("")
    assert main(["query", str(ix), "q", "--llm-replay", str(nothing)]) == 2
    if os.path.exists("/dev/full"):
        q = tmp_path / "q.txt"
        q.write_text("Who met Gamma Ray?\n")
        assert main(["query", str(ix), "--questions", str(q), "--quiet",
                     "--out", "/dev/full"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for want in ("no-such-id", "no questions", "is a directory", "not UTF-8",
                 "no reply records"):
        assert want in err, (want, err)


def test_update_on_an_openie_index_says_what_to_do(tmp_path, capsys):
    ix = _cli_index(tmp_path, _records(3))
    m = ix / "manifest.json"
    man = json.loads(m.read_text())
    man["meta"]["extractor"] = "openie:triples.json"
    m.write_text(json.dumps(man))
    more = _write(tmp_path / "more.json", _records(1, start=50))
    assert main(["update", str(ix), "--add", str(more), "--quiet"]) == 2
    assert "OpenIE" in capsys.readouterr().err


def test_llama_index_damaged_settings_are_named(tmp_path):
    pytest.importorskip("llama_index.core")
    from evireform.integrations.llama_index import EviReformRetriever
    r = EviReformRetriever.from_defaults(index=small_index(), embedder=EMB)
    r.persist(tmp_path / "p")
    s = tmp_path / "p" / "evireform_retriever.json"
    for text in ("{", '{"similarity_top_k": 2.5, "config": {}}', '{"config": {"nope": 1}}',
                 "[" * 100_000):
        s.write_text(text)
        with pytest.raises(ValueError, match="evireform_retriever.json"):
            EviReformRetriever.from_persist_dir(tmp_path / "p", embedder=EMB)


def test_load_embeddings_checks_what_load_checks(tmp_path):
    """What a Ray shard actor reads: the embeddings with the same checks as a full load."""
    from evireform.store import load_embeddings
    small_index().save(tmp_path / "ix")
    ix = tmp_path / "ix"
    np.testing.assert_array_equal(load_embeddings(ix), PropositionIndex.load(ix).embeddings)
    e = np.load(ix / "embeddings.npy")
    e[3] *= 30
    np.save(ix / "embeddings.npy", e, allow_pickle=False)
    with pytest.raises(IndexFormatError, match="sha256"):
        load_embeddings(ix)
    refresh_manifest(ix, "embeddings.npy")
    with pytest.raises(IndexFormatError, match="row 3 has L2 norm"):
        load_embeddings(ix)
