"""Hostile input and faults: each case asserts a clear error or a bounded result.

Crafted index files have their manifest entry fixed (size and sha256 recomputed), so the
checksum alone cannot catch them: the loader's value checks must.
"""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import tracemalloc

import numpy as np
import pytest

from evireform import IndexFormatError, Passage, Proposition, PropositionIndex
from evireform.cli import main, parse_setting
from evireform.corpus import load_corpus, passages_from_json
from evireform.embed import HashingEmbedder
from evireform.evaluation import load_questions
from evireform.retriever import EviReform, EviReformConfig
from evireform.store import UnsafeTargetError, file_sha256

from helpers import unit_rows
from evireform.engine import structures_of, search_index

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMB = HashingEmbedder(16)


def small_index(n=27, hnsw=False, seed=0):
    """27 propositions over 9 passages, shared entities, a passage without propositions."""
    rng = np.random.default_rng(seed)
    passages = [Passage(f"p{j}", f"Title {j}", f"text {j}") for j in range(10)]
    props = [Proposition(f"fact {i} about e{i % 5}", f"p{i % 9}", (f"e{i % 5}", f"t{i % 9}"))
             for i in range(n)]
    return PropositionIndex.from_propositions(passages, props, unit_rows(rng, n, 16),
                                              EMB.name, hnsw=hnsw)


def refresh_manifest(ix, name):
    """Recompute a file's size and sha256 in the manifest (what anyone can do)."""
    m = ix / "manifest.json"
    man = json.loads(m.read_text())
    f = ix / name
    man["files"][name] = {"sha256": file_sha256(f), "bytes": f.stat().st_size}
    m.write_text(json.dumps(man))


def craft(ix, name, edit):
    a = np.load(ix / f"{name}.npy")
    a = edit(a)
    np.save(ix / f"{name}.npy", a, allow_pickle=False)
    refresh_manifest(ix, f"{name}.npy")


# --------------------------------------------------------------------------- 1. data loss
def test_save_refuses_a_directory_that_is_not_an_index(tmp_path):
    target = tmp_path / "notes"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    with pytest.raises(UnsafeTargetError, match=r"notes.*not an evireform index.*notes.txt"):
        small_index().save(target)
    assert (target / "notes.txt").read_text() == "mine"
    small_index().save(target, overwrite=True)  # the explicit override
    assert PropositionIndex.load(target).n_props == 27
    assert not (target / "notes.txt").exists()


def test_save_refuses_extra_files_inside_an_index(tmp_path):
    small_index().save(tmp_path / "ix")
    (tmp_path / "ix" / "README.txt").write_text("mine")
    with pytest.raises(UnsafeTargetError, match="also holds other files.*README.txt"):
        small_index().save(tmp_path / "ix")


def test_save_refuses_files_and_the_current_directory(tmp_path, monkeypatch):
    f = tmp_path / "corpus.json"
    f.write_text("[]")
    with pytest.raises(UnsafeTargetError, match="is a file"):
        small_index().save(f, overwrite=True)
    assert f.read_text() == "[]"
    monkeypatch.chdir(tmp_path)
    for target in (".", tmp_path, tmp_path.parent):
        with pytest.raises(UnsafeTargetError, match="current directory"):
            small_index().save(target, overwrite=True)
    assert f.read_text() == "[]"


def _corpus(tmp_path):
    c = tmp_path / "corpus.json"
    c.write_text(json.dumps([{"title": f"T{i}", "text": f"Alpha Beta {i} met Gamma."}
                             for i in range(5)]))
    return c


def test_cli_index_never_touches_the_corpus_or_cwd(tmp_path, monkeypatch, capsys):
    c = _corpus(tmp_path)
    before = c.read_bytes()
    monkeypatch.chdir(tmp_path)
    for out in (".", "corpus.json", str(tmp_path)):
        for extra in ([], ["--force"]):
            rc = main(["index", "corpus.json", out, "--embedder", "hashing-16", "--quiet",
                       *extra])
            assert rc == 2
            assert c.read_bytes() == before
    assert "error" in capsys.readouterr().err
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "a.txt").write_text("keep")
    assert main(["index", "corpus.json", "mine", "--embedder", "hashing-16", "--quiet"]) == 2
    assert (tmp_path / "mine" / "a.txt").read_text() == "keep"
    assert main(["index", "corpus.json", "ix", "--embedder", "hashing-16", "--quiet"]) == 0
    assert main(["index", "corpus.json", "ix", "--embedder", "hashing-16", "--quiet"]) == 0


_KILLER = textwrap.dedent("""
    import os, signal, sys
    import numpy as np
    sys.path.insert(0, {tests!r})
    from test_fuzz import small_index
    import evireform.store.atomic as store
    point, path = sys.argv[1], sys.argv[2]
    real_replace, real_save = store._replace, np.save
    calls = []
    def die():
        os.kill(os.getpid(), signal.SIGKILL)
    def replace(src, dst):
        calls.append(1)
        if point == "before-first-rename" and len(calls) == 1:
            die()
        real_replace(src, dst)
        if point == "between-renames" and len(calls) == 1:
            die()
        if point == "after-second-rename" and len(calls) == 2:
            die()
    def save(*a, **k):
        real_save(*a, **k)
        if point == "mid-write":
            die()
    store._replace = replace
    np.save = save
    small_index(n=30).save(path)
""")


@pytest.mark.parametrize("point", ["mid-write", "before-first-rename", "between-renames",
                                   "after-second-rename"])
def test_a_kill_at_any_point_leaves_the_old_or_the_new_index(tmp_path, point):
    target = tmp_path / "ix"
    small_index().save(target)
    script = tmp_path / "kill.py"
    script.write_text(_KILLER.format(tests=os.path.join(REPO, "tests")))
    r = subprocess.run([sys.executable, str(script), point, str(target)], cwd=REPO,
                       capture_output=True)
    assert r.returncode == -signal.SIGKILL, r.stderr.decode()
    if point == "between-renames":
        assert not target.exists()  # the window the next load/save must repair
    n = PropositionIndex.load(target).n_props  # recovers if needed
    assert n == (30 if point == "after-second-rename" else 27)
    small_index(n=31).save(target)  # the next save cleans every leftover
    # nothing left but the index and its lock file (.ix-lock, kept beside it by design)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".ix-lock", "ix", "kill.py"]
    assert PropositionIndex.load(target).n_props == 31


# --------------------------------------------------------------------------- 2. memory safety
CRAFTED = [
    ("a_indices", lambda a: np.where(np.arange(len(a)) == 0, 1_000_000, a).astype(a.dtype),
     r"a_indices.npy: entry 0 is 1000000, outside the entity id range"),
    ("owner", lambda a: np.full_like(a, -5), r"owner.npy: entry 0 is -5, outside the passage"),
    ("at_indices", lambda a: np.where(np.arange(len(a)) == 3, 999, a).astype(a.dtype),
     r"at_indices.npy: entry 3 is 999, outside the proposition id range"),
    ("embeddings", lambda a: np.where(np.arange(a.shape[0])[:, None] == 2, np.nan, a)
     .astype(np.float32), r"embeddings.npy: row 2 holds NaN or inf"),
    ("a_indices", lambda a: a.astype(np.float64), r"a_indices.npy: dtype float64, the format "
                                                  r"stores int32"),
    ("a_indptr", lambda a: a[::-1].copy(), r"a_indptr.npy: row pointers must start at 0"),
    ("a_indptr", lambda a: np.r_[a[:1], a[2:3], a[1:2], a[3:]].astype(a.dtype),
     r"a_indptr.npy: row pointers must not decrease"),
    ("inv_deg", lambda a: a * 2, r"inv_deg.npy: does not agree with the incidence"),
    ("a_indices", lambda a: a[::-1].copy(), r"a_indices.npy: rows not sorted and unique"),
    ("at_indices", lambda a: np.roll(a, 1), r"at_indices.npy: does not agree"),
    ("inv_sqrt", lambda a: a + 1, r"inv_sqrt.npy: does not agree"),
    ("owner", lambda a: a[:-1].copy(), r"owner.npy: shape \(26,\), the manifest counts give"),
    ("embeddings", lambda a: a[:, :8].copy(), r"embeddings.npy: shape \(27, 8\)"),
]


@pytest.mark.parametrize("name,edit,msg", CRAFTED)
def test_crafted_arrays_are_refused_at_load(tmp_path, name, edit, msg):
    small_index().save(tmp_path / "ix")
    craft(tmp_path / "ix", name, edit)
    with pytest.raises(IndexFormatError, match=msg):
        PropositionIndex.load(tmp_path / "ix")


@pytest.mark.parametrize("name,edit,msg", CRAFTED)
def test_crafted_arrays_cannot_crash_the_fast_tier(tmp_path, name, edit, msg):
    """The fast tier forced on crafted files (their stamp forged to match): each is refused
    by the checks the kernels rely on, or loads and answers without crashing."""
    from evireform.store import write_stamp
    small_index().save(tmp_path / "ix")
    craft(tmp_path / "ix", name, edit)
    man = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    write_stamp(tmp_path / "ix", list(man["files"]), "forged")
    try:
        idx = PropositionIndex.load(tmp_path / "ix")  # auto: the forged stamp matches
    except IndexFormatError:
        return
    assert idx.verified == "fast"
    r = EviReform(idx, EviReformConfig(n_candidates=10), embedder=EMB)
    for q in ("fact about e1", "fact 3"):
        res = r.retrieve(q, 5)
        assert len(res.passages) == 5


def test_crafted_index_cannot_crash_evireform_query(tmp_path):
    """The original report: a_indices out of range made `evireform query` die of SIGSEGV."""
    small_index().save(tmp_path / "ix")
    craft(tmp_path / "ix", "a_indices", lambda a: np.full_like(a, 1_000_000))
    r = subprocess.run([sys.executable, "-m", "evireform", "query", str(tmp_path / "ix"),
                        "fact about e1"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 2 and "a_indices.npy" in r.stderr, r.stderr


def _hnsw_index(tmp_path):
    idx = small_index(n=60, hnsw=True)
    idx.save(tmp_path / "ix")
    return tmp_path / "ix"


def test_crafted_hnsw_file_is_refused_before_hnswlib(tmp_path):
    from evireform.store.hnsw_file import _HNSW_HEADER
    ix = _hnsw_index(tmp_path)
    f = ix / "hnsw.bin"
    good = f.read_bytes()
    hd = np.frombuffer(good[:_HNSW_HEADER.itemsize], _HNSW_HEADER)[0]
    h = _HNSW_HEADER.itemsize
    cases = []
    raw = bytearray(good)
    raw[h + 4:h + 8] = np.uint32(10 ** 6).tobytes()  # first neighbour of element 0
    cases.append((raw, "level-0 neighbour id is out of range"))
    raw = bytearray(good)
    lab = h + int(hd["label_offset"])
    raw[lab:lab + 8] = np.uint64(10 ** 9).tobytes()
    cases.append((raw, "label is outside"))
    raw = bytearray(good)
    raw[h - 8 - 8 - 8 - 8 - 8 - 4:h - 8 - 8 - 8 - 8 - 8] = np.uint32(10 ** 6).tobytes()  # entry
    cases.append((raw, "entry point"))
    cases.append((good[:h + 10], "truncated level-0"))
    cases.append((good + b"\0" * 8, "after the last element"))
    for raw, msg in cases:
        f.write_bytes(bytes(raw))
        refresh_manifest(ix, "hnsw.bin")
        with pytest.raises(IndexFormatError, match=f"hnsw.bin: .*{msg}"):
            PropositionIndex.load(ix)
    f.write_bytes(good)
    refresh_manifest(ix, "hnsw.bin")
    assert structures_of(PropositionIndex.load(ix)).hnsw is not None


# --------------------------------------------------------------------------- 3. path escape
@pytest.mark.parametrize("name", ["../../etc/passwd", "/etc/passwd", "sub/owner.npy", ".."])
def test_manifest_file_names_are_confined(tmp_path, name):
    small_index().save(tmp_path / "ix")
    m = tmp_path / "ix" / "manifest.json"
    man = json.loads(m.read_text())
    man["files"][name] = {"sha256": "0" * 64, "bytes": 1}
    m.write_text(json.dumps(man))
    with pytest.raises(IndexFormatError, match="not a file of the index format") as err:
        PropositionIndex.load(tmp_path / "ix")
    assert "bytes" not in str(err.value)  # nothing outside the directory was stat'ed


# --------------------------------------------------------------------------- 4. huge settings
def test_huge_settings_are_clipped_to_the_index():
    idx = small_index()
    q = EMB.encode(["fact about e1"])[0]
    huge = EviReform(idx, EviReformConfig(k_residual=10 ** 9, n_candidates=10 ** 9,
                                          max_selected=10 ** 9), embedder=EMB)
    exact = EviReform(idx, EviReformConfig(k_residual=idx.n_props, n_candidates=idx.n_props,
                                           max_selected=idx.n_props), embedder=EMB)
    tracemalloc.start()
    got = huge.retrieve_embedded("fact about e1", q, k=10 ** 9)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 20 * 2 ** 20, peak  # it once asked for 22.7 GB
    want = exact.retrieve_embedded("fact about e1", q, k=idx.n_passages)
    assert got.ids == want.ids and len(got.passages) == idx.n_passages
    ids, _ = search_index(idx, q[None, :], 10 ** 9)
    assert ids.shape == (1, idx.n_props)


# --------------------------------------------------------------------------- 5. LLM deadline
@pytest.fixture
def server():
    pytest.importorskip("openai")
    from scripted_server import Script, serve
    script = Script()
    srv, url = serve(script)
    yield script, url
    srv.shutdown()


def _selector(url, **cfg):
    from evireform.llm import LLMClient, LLMConfig, LLMSelector
    return LLMSelector(LLMClient(LLMConfig(base_url=url, model="scripted", **cfg)))


def test_slow_drip_endpoint_meets_the_deadline(server):
    from evireform.roles import Candidate
    script, url = server
    script.default = {"content": json.dumps({"selected": [1]}), "drip": 1.0}
    sel = _selector(url, timeout=5, max_retries=3, deadline=1.5)
    t0 = time.monotonic()
    out = sel.select("q", [Candidate(3, 0.9, "x", 0), Candidate(4, 0.5, "y", 0)], 2)
    took = time.monotonic() - t0
    assert out.events() == ["select:fallback:DeadlineExceeded"] and list(out) == [3, 4][:len(out)]
    assert took < 10, took  # it used to hang for as long as the body kept dripping


def test_silent_endpoint_with_retries_meets_the_deadline(server):
    from evireform.roles import Candidate
    script, url = server
    script.default = {"content": "{}", "delay": 3}
    sel = _selector(url, timeout=2, max_retries=3, deadline=1.0)
    t0 = time.monotonic()
    out = sel.select("q", [Candidate(3, 0.9, "x", 0)], 2)
    assert out.fallback == "DeadlineExceeded"
    assert time.monotonic() - t0 < 8  # 2 s timeout x 4 attempts + backoff cost 24.5 s before


def test_llm_dropped_and_overlong_queries_are_counted(server):
    from evireform.llm import LLMClient, LLMConfig, LLMReformulator
    script, url = server
    long_q = "x " * 50_000
    script.default = {"content": json.dumps({"queries": ["", "a bridge", "a bridge", long_q,
                                                        "another"]})}
    idx = small_index()
    client = LLMClient(LLMConfig(base_url=url, model="scripted", timeout=5, max_retries=0))
    r = EviReform(idx, embedder=EMB, reformulator=LLMReformulator(client)).retrieve("fact e1")
    assert r.trace.residual_queries == ["a bridge", "another"]
    assert r.trace.dropped_queries == 3


# --------------------------------------------------------------------------- 6. parsing
def test_set_parses_booleans_strictly():
    for v in ("on", "true", "1", "yes", "TRUE"):
        assert parse_setting(f"propagation={v}") == ("propagation", True)
    for v in ("off", "false", "0", "no"):
        assert parse_setting(f"propagation={v}") == ("propagation", False)
    with pytest.raises(ValueError, match="boolean"):
        parse_setting("propagation=maybe")
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_setting("propagation")
    with pytest.raises(ValueError, match="must be a float"):
        parse_setting("alpha=half")
    assert parse_setting("beta=0.75") == ("beta", 0.75)


@pytest.mark.parametrize("n", ["0", "-1", "x"])
def test_cli_n_must_be_positive(n, capsys):
    with pytest.raises(SystemExit) as e:
        main(["eval", "--dataset", "hotpotqa", "-n", n])
    assert e.value.code == 2 and "-n" in capsys.readouterr().err


@pytest.mark.parametrize("obj,msg", [
    ({"a": 1, "b": [1, 2]}, r"corpus entry 'a': the text must be a string"),
    ({"b": [1, 2]}, r"corpus entry 'b'"),
    ([{"title": "t", "text": 5}], "corpus record 0: the text"),
    ([{"title": ["t"], "text": "x"}], "corpus record 0: its title"),
    ([{"id": {"x": 1}, "title": "t", "text": "x"}], "corpus record 0: its id"),
])
def test_corpus_values_must_be_text(obj, msg):
    with pytest.raises(ValueError, match=msg):
        passages_from_json(obj)


def test_config_types_are_strict():
    for bad in (dict(alpha="0.5"), dict(beta=True), dict(alpha=float("nan")),
                dict(n_candidates=2.5), dict(k_residual="2"), dict(propagation="on")):
        with pytest.raises(ValueError):
            EviReformConfig(**bad)
    assert EviReformConfig(alpha=1, n_candidates=np.int64(5)).alpha == 1.0


def test_retrieve_many_refuses_a_bare_string():
    r = EviReform(small_index(), embedder=EMB)
    with pytest.raises(TypeError, match="not one string"):
        r.retrieve_many("Nature")


# --------------------------------------------------------------------------- 7. clear errors
@pytest.mark.parametrize("field,value", [("meta", []), ("counts", []), ("files", []),
                                         ("counts", {"passages": "10"}), ("dim", "16"),
                                         ("embedder", 5), ("files", {"owner.npy": 3})])
def test_manifest_field_types(tmp_path, field, value):
    small_index().save(tmp_path / "ix")
    m = tmp_path / "ix" / "manifest.json"
    man = json.loads(m.read_text())
    man[field] = value
    m.write_text(json.dumps(man))
    with pytest.raises(IndexFormatError, match="manifest.json: "):
        PropositionIndex.load(tmp_path / "ix")


def test_json_files_of_the_wrong_shape(tmp_path):
    from helpers import as_old_format
    small_index().save(tmp_path / "ix")
    as_old_format(tmp_path / "ix", 2)
    f = tmp_path / "ix" / "passages.json"
    ps = json.loads(f.read_text())
    ps[1]["text"] = 7
    f.write_text(json.dumps(ps))
    refresh_manifest(tmp_path / "ix", "passages.json")
    with pytest.raises(IndexFormatError, match="passages.json: entry 1 is not an object"):
        PropositionIndex.load(tmp_path / "ix")


def test_bad_question_and_corpus_files_are_named(tmp_path):
    ps = [Passage("a", "A", "alpha")]
    q = tmp_path / "q.json"
    q.write_text(json.dumps([{"id": "x", "supporting_facts": [["A", 0]]}]))
    with pytest.raises(ValueError, match=r"q.json: record 0 \(id x\) has no 'question'"):
        load_questions(q, ps)
    q.write_text("{oops")
    with pytest.raises(ValueError, match="questions file .*q.json is not valid JSON"):
        load_questions(q, ps)
    c = tmp_path / "c.json"
    c.write_bytes(b'[{"title": "t", "text": "caf\xe9"}]')
    with pytest.raises(ValueError, match="corpus .*c.json is not UTF-8"):
        load_corpus(c)


def test_crafted_string_files(tmp_path):
    """String offsets are checked on every load; invalid UTF-8 is refused by the full tier
    and decoded with U+FFFD by a forced fast tier."""
    from evireform.store import write_stamp
    for edit, msg in [(lambda a: a[::-1].copy(), "row pointers must start at 0"),
                      (lambda a: np.r_[a[:-1], a[-1] + 1000], "end at nnz"),
                      (lambda a: np.r_[a[:3], a[4:5], a[3:4], a[5:]], "must not decrease"),
                      (lambda a: a[:-1].copy(), "must be int64 of shape")]:
        small_index().save(tmp_path / "ix")
        craft(tmp_path / "ix", "string_offsets", edit)
        with pytest.raises(IndexFormatError, match=f"string_offsets.npy: .*{msg}"):
            PropositionIndex.load(tmp_path / "ix", verify="fast")
    small_index().save(tmp_path / "ix")
    f = tmp_path / "ix" / "strings.utf8"
    raw = bytearray(f.read_bytes())
    raw[0] = 0xFF  # the first passage id's first byte
    f.write_bytes(bytes(raw))
    refresh_manifest(tmp_path / "ix", "strings.utf8")
    with pytest.raises(IndexFormatError, match="strings.utf8: not valid UTF-8 at byte 0"):
        PropositionIndex.load(tmp_path / "ix")
    man = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    write_stamp(tmp_path / "ix", list(man["files"]), "forged")
    idx = PropositionIndex.load(tmp_path / "ix")
    assert idx.verified == "fast" and idx.passages[0].id == "\ufffd0"
