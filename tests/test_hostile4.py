"""The fourth round of hostile input: lost passages, crashes, resource exhaustion any client
can cause, wrong filter results, a crash at exit, tracebacks and unclear errors.

Each test names the item of the round it covers (the numbers of the report)."""
import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from evireform import Passage, PropositionIndex
from evireform.cli import main
from evireform.embed import HashingEmbedder
from evireform.filters import compile_filter
from evireform.engine import structures_of, quantize

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMB = HashingEmbedder(16)


def _run(*args, cwd=REPO, env=None, **kw):
    return subprocess.run([sys.executable, "-m", "evireform", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": REPO, **(env or {})}, **kw)


def _index(tmp_path, passages, name="ix"):
    return PropositionIndex.build(passages, EMB, show_progress=False).save(tmp_path / name)


def _ps(n, md=lambda i: {}):
    return [Passage(f"p{i}", f"Alpha {i}", f"Alpha {i} met Gamma Ray in {1900 + i}.", md(i))
            for i in range(n)]


# =========================================================================== 1. Unicode
@pytest.mark.parametrize("where", ["text", "title", "id", "metadata", "metadata key"])
def test_1_lone_surrogates_are_refused_naming_the_record(tmp_path, where):
    bad = "cut \ud800 emoji"
    p = {"text": Passage("a", "t", bad), "title": Passage("a", bad, "x"),
         "id": Passage(bad, "t", "x"), "metadata": Passage("a", "t", "x", {"k": bad}),
         "metadata key": Passage("a", "t", "x", {bad: 1})}[where]
    with pytest.raises(ValueError, match="lone surrogate"):
        PropositionIndex.build([p, Passage("b", "t", "fine")], EMB, show_progress=False)
    ix = _index(tmp_path, _ps(3))
    with pytest.raises(ValueError, match="lone surrogate"):
        PropositionIndex.load(ix).add([p], EMB)
    # a corpus file with the escape: refused by index, nothing written
    c = tmp_path / "c.json"
    c.write_text(json.dumps([{"id": "a", "text": "x \ud800 y"}]))
    assert main(["index", str(c), str(tmp_path / "out"), "--embedder", "hashing-16",
                 "--quiet"]) == 2
    assert not (tmp_path / "out").exists()


def test_1_a_latin1_file_name_is_refused_and_every_saved_index_is_valid_utf8(tmp_path,
                                                                           capsys):
    d = tmp_path / "notes"
    d.mkdir()
    (d / "good.txt").write_text("Alpha met Beta.")
    try:
        (d / os.fsdecode(b"caf\xe9.txt")).write_text("Gamma met Delta.")
    except (OSError, UnicodeError):
        pytest.skip("the file system refuses non-UTF-8 names")
    assert main(["index", str(d), str(tmp_path / "ix"), "--embedder", "hashing-16",
                 "--quiet"]) == 2
    assert "not valid UTF-8" in capsys.readouterr().err
    assert main(["index", str(d), str(tmp_path / "ix"), "--embedder", "hashing-16",
                 "--quiet", "--skip-errors"]) == 0
    blob = (tmp_path / "ix" / "strings.utf8").read_bytes()
    blob.decode("utf-8")  # strict: valid UTF-8
    import shutil
    shutil.copytree(tmp_path / "ix", tmp_path / "copy")
    assert PropositionIndex.load(tmp_path / "copy", verify="full").n_passages == 1


def test_1_the_service_refuses_a_surrogate_in_update_metadata(tmp_path):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient
    from evireform.service import RetrievalService, create_app
    ix = _index(tmp_path, _ps(4))
    with TestClient(create_app(RetrievalService(ix, EMB))) as c:
        body = '{"add": [{"text": "new text", "metadata": {"k": "\\ud800"}}]}'
        r = c.post("/update", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 400 and "lone surrogate" in r.json()["error"]
        assert c.post("/query", json={"question": "Alpha 1?"}).status_code == 200
    PropositionIndex.load(ix, verify="full")


# =========================================================================== 2-3. documents
def _folder(root):
    root.mkdir(parents=True, exist_ok=True)
    (root / "a.md").write_text("# A\n\nalice met bob in paris. bob met carol.\n")
    (root / "b.md").write_text("# B\n\ncarol founded delta inc.\n")
    (root / "sub").mkdir(exist_ok=True)
    (root / "sub" / "c.txt").write_text("dave joined delta inc in lyon.")


def _ids(ix):
    return sorted(p.id for p in PropositionIndex.load(ix).passages)


def test_2_update_of_a_file_never_deletes_records_whose_metadata_names_it(tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "x.md").write_text("first version of x.")
    corpus = tmp_path / "c.json"  # LangChain loaders set "source" on every record
    corpus.write_text(json.dumps([{"id": f"r{i}", "text": f"record {i} text.",
                                   "source": "notes/x.md"} for i in range(3)]))
    ix = tmp_path / "ix"
    assert main(["index", str(corpus), str(ix), "--embedder", "hashing-16", "--quiet"]) == 0
    (notes / "x.md").write_text("second version of x.")
    assert main(["update", str(ix), "--add", str(notes / "x.md"), "--quiet"]) == 0
    ids = _ids(ix)
    assert {"r0", "r1", "r2"} <= set(ids) and "notes/x.md#0" in ids


def test_3_update_of_a_folder_makes_the_index_match_it_from_any_directory(tmp_path):
    notes = tmp_path / "work" / "notes"
    _folder(notes)
    ix = tmp_path / "ix"
    r = _run("index", "notes", ix, "--embedder", "hashing-16", "--quiet",
             cwd=tmp_path / "work")
    assert r.returncode == 0, r.stderr
    before = _ids(ix)
    assert before == ["notes/a.md#0", "notes/b.md#0", "notes/sub/c.txt#0"]
    # from another directory: nothing added twice
    r = _run("update", ix, "--add", notes, "--quiet", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert _ids(ix) == before
    # deleted, renamed, emptied
    (notes / "b.md").unlink()
    (notes / "sub" / "c.txt").rename(notes / "sub" / "d.txt")
    (notes / "a.md").write_text("")
    r = _run("update", ix, "--add", notes, "--quiet", cwd=tmp_path / "work" / "notes")
    assert r.returncode == 0, r.stderr
    assert _ids(ix) == ["notes/sub/d.txt#0"]
    # a file of a subfolder named alone keeps the ids it has in the folder
    (notes / "sub" / "d.txt").write_text("dave moved to nice.")
    assert _run("update", ix, "--add", notes / "sub" / "d.txt", "--quiet").returncode == 0
    idx = PropositionIndex.load(ix)
    assert [p.id for p in idx.passages] == ["notes/sub/d.txt#0"]
    assert idx.passages[0].text == "dave moved to nice."


# =========================================================================== 8, 14, 19
def test_8_14_19_only_regular_files_under_the_root_are_read(tmp_path):
    from evireform.documents import load_paths
    notes = tmp_path / "notes"
    _folder(notes)
    os.symlink("/dev/zero", notes / "zero.txt")
    os.mkfifo(notes / "pipe.txt")
    outside = tmp_path / "secret.txt"
    outside.write_text("root password.")
    os.symlink(outside, notes / "passwd.txt")
    os.symlink(notes / "a.md", notes / "alias.md")  # inside the root: followed
    t0 = time.monotonic()
    got = load_paths([notes])
    assert time.monotonic() - t0 < 30  # neither /dev/zero nor the FIFO is read
    srcs = set(got.sources)
    assert "notes/alias.md" in srcs and not {"notes/zero.txt", "notes/pipe.txt",
                                             "notes/passwd.txt"} & srcs
    assert not any("root password" in p.text for p in got.passages)
    joined = "\n".join(got.warnings)
    assert "zero.txt" in joined and "pipe.txt" in joined and "passwd.txt" in joined
    with pytest.raises(ValueError, match="not a regular file"):
        load_paths([notes / "pipe.txt"])


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every folder")
def test_19_an_unreadable_subfolder_stops_the_command(tmp_path):
    from evireform.documents import load_paths
    notes = tmp_path / "notes"
    _folder(notes)
    locked = notes / "locked"
    locked.mkdir()
    (locked / "x.txt").write_text("hidden")
    locked.chmod(0)
    try:
        with pytest.raises(ValueError, match="locked.*cannot be read"):
            load_paths([notes])
        assert load_paths([notes], skip_errors=True).errors
    finally:
        locked.chmod(0o755)


def test_19_an_unlistable_entry_stops_the_walk_unless_skip_errors(tmp_path, monkeypatch):
    """The same rule tested as root too: os.walk's errors reach the caller."""
    from evireform import documents
    notes = tmp_path / "notes"
    _folder(notes)
    real_walk = os.walk

    def walk(top, onerror=None, followlinks=False):
        onerror(PermissionError(13, "Permission denied", str(notes / "sub")))
        yield from real_walk(top, onerror=onerror, followlinks=followlinks)
    monkeypatch.setattr(documents.os, "walk", walk)
    with pytest.raises(ValueError, match="sub.*cannot be read.*--skip-errors"):
        documents.load_paths([notes])
    assert documents.load_paths([notes], skip_errors=True).errors


def test_19_one_long_token_is_cut_and_front_matter_is_metadata(tmp_path):
    from evireform.documents import chunk_text, load_paths
    chunks = chunk_text("x" * 200_000, 50, 0)
    assert len(chunks) > 100 and max(map(len, chunks)) <= 50 * 16
    assert "".join(chunks) == "x" * 200_000
    uri = "data:image/png;base64," + "QUJD" * 100_000
    assert len(chunk_text(f"see {uri} here.", 200, 0)) > 10
    f = tmp_path / "n.md"
    f.write_text("---\ntitle: Plans\nsecret_token: abc123\ntags: [a, b]\n---\n"
                 "# Heading\n\nthe plan is simple.\n")
    got = load_paths([f])
    p = got.passages[0]
    assert "secret_token" not in p.text and "abc123" not in p.text
    assert p.metadata["secret_token"] == "abc123" and p.metadata["tags"] == ["a", "b"]
    assert p.title == "Plans" and p.metadata["title"] == "Plans"


# =========================================================================== 4, 7. service
def _svc(ix):
    from evireform.service import RetrievalService
    return RetrievalService(ix, EMB)


def test_4_the_service_serves_a_generation_written_by_the_cli(tmp_path):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient
    from evireform.service import create_app
    ix = _index(tmp_path, _ps(6))
    ids = tmp_path / "del.txt"
    ids.write_text("p1\n")
    with TestClient(create_app(_svc(ix))) as c:
        assert c.get("/health").json()["index"]["passages"] == 6
        assert main(["update", str(ix), "--delete", str(ids), "--quiet"]) == 0
        h = c.get("/health").json()
        assert h["index"]["passages"] == 5 and h["index"]["generation"] == 1
        got = c.post("/query", json={"question": "Alpha 1 met Gamma Ray?", "k": 6}).json()
        assert "p1" not in [p["id"] for p in got["passages"]]


def test_7_a_file_overwritten_under_the_service_is_refused_not_a_crash(tmp_path):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient
    from evireform.service import create_app
    ix = _index(tmp_path, _ps(6))
    with TestClient(create_app(_svc(ix))) as c:
        assert c.post("/query", json={"question": "Alpha 2?"}).status_code == 200
        with open(ix / "embeddings.npy", "r+b") as f:  # truncated in place
            f.truncate(64)
        r = c.post("/query", json={"question": "Alpha 2?"})
        assert r.status_code == 503 and "changed on disk" in r.json()["error"]
        assert str(tmp_path) not in r.json()["error"]
        assert c.get("/health").status_code == 503


# =========================================================================== 6, 15, 21
def _flt_index(values):
    ps = [Passage(f"p{i}", "t", f"text {i}.", {"v": v} if v is not None else {})
          for i, v in enumerate(values)]
    return PropositionIndex.build(ps, EMB, show_progress=False)


def test_6_in_with_many_values_is_linear(monkeypatch):
    idx = _flt_index(list(range(2000)) + ["s1", "s2", None])
    vals = list(range(0, 60_000, 3)) + ["s2", "zz"]
    calls = []
    import evireform.filters as F
    real = F._eq_mask
    monkeypatch.setattr(F, "_eq_mask", lambda *a: calls.append(1) or real(*a))
    mask = compile_filter({"v": {"$in": vals}}).passage_mask(idx)
    want = np.array([i % 3 == 0 for i in range(2000)] + [False, True, False])
    assert (mask == want).all() and not calls  # no per-value mask (no L x N block)
    nin = compile_filter({"v": {"$nin": vals}}).passage_mask(idx)
    assert (nin == ~want).all()


def test_15_integers_beyond_2_53_and_nul_strings_compare_exactly():
    big = 2 ** 53
    idx = _flt_index([big, big + 1, 1.5, "a", "a\x00", "b", 10 ** 18])
    m = lambda f: [p.id for p, k in zip(idx.passages, compile_filter(f).passage_mask(idx))
                   if k]
    assert m({"v": big + 1}) == ["p1"]
    assert m({"v": {"$in": [big + 1]}}) == ["p1"]
    assert m({"v": {"$gt": big}}) == ["p1", "p6"]
    assert m({"v": {"$gte": big + 1, "$lt": 10 ** 18}}) == ["p1"]
    assert m({"v": {"$gt": "a"}}) == ["p4", "p5"]
    assert m({"v": "a\x00"}) == ["p4"]
    assert m({"v": {"$lte": "a\x00"}}) == ["p3", "p4"]
    # the vectorised mask equals the per-passage rule on every such case
    for f in ({"v": {"$gt": big}}, {"v": {"$lt": "a\x00"}}, {"v": {"$ne": big}},
              {"v": {"$in": ["a", big + 1, 1.5]}}):
        c = compile_filter(f)
        assert list(c.passage_mask(idx)) == [c.predicate(p.metadata) for p in idx.passages]


@pytest.mark.parametrize("flt,msg", [
    ({"v": 10 ** 400}, "beyond the 64-bit range"),
    ({"v": {"$in": [1, 10 ** 30]}}, "beyond the 64-bit range"),
    ('{"v": 1e400}', "not finite"),
    ({"v": {"$gt": 1, "x": 2}}, "mixes operators and keys"),
    ("[" * 100_000, "nested too deeply"),
])
def test_21_bad_filters_are_refused_with_a_message(flt, msg):
    with pytest.raises(ValueError, match=msg):
        compile_filter(flt)


def test_21_deeply_nested_and_and_a_stored_huge_number():
    f = {"v": 1}
    for _ in range(600):
        f = {"$and": [f]}
    with pytest.raises(ValueError, match="nested more than"):
        compile_filter(f)
    with pytest.raises(ValueError, match="64-bit"):
        _flt_index([10 ** 400])


def test_21_cli_and_service_errors_are_one_line(tmp_path, capsys):
    ix = _index(tmp_path, _ps(3, lambda i: {"v": i}))
    assert main(["query", str(ix), "Alpha?", "--embedder", "hashing-16",
                 "--filter", '{"v": %d}' % 10 ** 400]) == 2
    assert "64-bit" in capsys.readouterr().err
    f = tmp_path / "f.json"
    f.write_text("[" * 100_000)
    assert main(["query", str(ix), "Alpha?", "--embedder", "hashing-16",
                 "--filter", f"@{f}"]) == 2
    assert "nested too deeply" in capsys.readouterr().err
    r = _run("serve", ix, "--port", "70000")
    assert r.returncode == 2 and "port number" in r.stderr and "Traceback" not in r.stderr
    r = _run("query", ix, "--questions", "/dev/zero", "--embedder", "hashing-16")
    assert r.returncode == 2 and "NUL" in r.stderr
    r = _run("update", ix, "--delete", "/dev/zero")
    assert r.returncode == 2 and "NUL" in r.stderr


# =========================================================================== 10. cache
def test_10_restrictions_hold_no_embedding_copies_and_absent_keys_leave_nothing(tmp_path):
    import evireform.filters as F
    idx = _flt_index([i % 7 for i in range(50)])
    cache = F.RestrictionCache(idx)  # what each engine keeps (evireform.engine)
    for v in range(7):
        r = cache.get({"v": v})
        assert not any(isinstance(x, np.ndarray) and x.dtype == np.float32
                       and x.ndim == 2 for x in vars(r).values())
    for i in range(50):
        with pytest.raises(ValueError, match="no passage of the index has"):
            cache.get({f"absent{i}": 1})
    assert set(cache.columns.cols) == {"v"} and len(cache) == 7
    cache.clear()  # the restrictions go, the columns they are built from stay
    assert len(cache) == 0 and set(cache.columns.cols) == {"v"}
    assert cache.get({"v": 3}).n_passages == 7
    assert not any(k.startswith("_restr") or k.startswith("_col") for k in vars(idx))
    old = F.CACHE_BYTES
    try:
        F.CACHE_BYTES = 1  # one restriction over the bound is used, not kept
        assert cache.get({"v": 99}) is not None
        assert {"v": 99} not in cache
    finally:
        F.CACHE_BYTES = old


# =========================================================================== 9, 11, 12, 22, 23
class _Live:
    """``evireform serve`` in a subprocess."""

    def __init__(self, ix, *extra, env=None):
        import httpx
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "evireform", "serve", str(ix), "--port", str(self.port),
             "--embedder", "hashing-16", *extra], cwd=REPO,
            env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        t0 = time.monotonic()
        while True:
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(self.proc.stderr.read().decode())
            assert time.monotonic() - t0 < 90, "the service did not start"
            time.sleep(0.1)

    def close(self):
        self.proc.terminate()
        try:
            return self.proc.communicate(timeout=10)[1].decode()
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return ""


@pytest.fixture
def live(tmp_path):
    pytest.importorskip("uvicorn")
    s = _Live(_index(tmp_path, _ps(6)), "--header-timeout", "1", "--api-key-env", "K4",
              env={"K4": "s3cret"})
    yield s
    s.close()


def test_9_a_chunked_body_is_capped_as_it_streams(live):
    import httpx
    sent = [0]

    def body():
        for _ in range(64):  # 4 MiB in 64 KiB chunks, no Content-Length
            sent[0] += 1
            yield b"x" * 65536
    r = httpx.post(live.url + "/query", content=body(), timeout=30,
                   headers={"authorization": "Bearer s3cret",
                            "content-type": "application/json"})
    assert r.status_code == 413 and "over" in r.json()["error"]


def test_11_clients_trickling_headers_are_dropped(live):
    import httpx
    socks = []
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", live.port))
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # never finished
        socks.append(s)
    time.sleep(2.5)
    closed = 0
    for s in socks:
        s.settimeout(2)
        try:
            closed += s.recv(1) == b""
        except OSError:
            closed += 1
        s.close()
    assert closed == 20
    assert httpx.get(live.url + "/health", timeout=5).status_code == 200


def test_23_bearer_scheme_any_case_and_padded_keys(live, tmp_path):
    import httpx
    q = {"question": "Alpha 1?"}
    for scheme in ("Bearer", "bearer", "BEARER"):
        r = httpx.post(live.url + "/query", json=q,
                       headers={"authorization": f"{scheme} s3cret"}, timeout=30)
        assert r.status_code == 200, scheme
    assert httpx.post(live.url + "/query", json=q, headers={"authorization": "Bearer nope"},
                      timeout=30).status_code == 401
    r = _run("serve", tmp_path / "ix", "--api-key-env", "K5", env={"K5": "s3cret\n"})
    assert r.returncode == 2 and "whitespace" in r.stderr


def test_22_one_response_per_error_and_disk_full_is_507(tmp_path, monkeypatch):
    pytest.importorskip("fastapi")
    import errno
    from fastapi.testclient import TestClient
    from evireform.service import create_app
    ix = _index(tmp_path, _ps(4))
    svc = _svc(ix)
    app = create_app(svc)

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(ix / "x"))
    monkeypatch.setattr(type(svc), "_update_sync", lambda self, *a: full())
    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.post("/update", json={"add": [{"text": "t"}]})
        assert r.status_code == 507 and "no space" in r.json()["error"]
        assert str(tmp_path) not in r.text
        r = c.post("/query", content=b"{bad", headers={"content-type": "application/json"})
        assert r.status_code == 422 and "not valid JSON" in r.json()["error"]
        r = c.post("/query_batch", json={"questions": ["x" * 5000]})
        assert r.status_code == 422
    # the guard never starts a second response
    from evireform.service import _Guard, Metrics
    sent = []

    async def broken_app(scope, receive, send):
        await send({"type": "http.response.start", "status": 500, "headers": []})
        await send({"type": "http.response.body", "body": b"x"})
        raise RuntimeError("after the response")

    async def go():
        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(m):
            sent.append(m)
        await _Guard(broken_app, Metrics(), None, 1 << 20)(
            {"type": "http", "path": "/query", "headers": []}, receive, send)
    asyncio.run(go())
    assert [m["type"] for m in sent].count("http.response.start") == 1


def test_12_batches_and_strategies_share_the_bounded_queue(tmp_path):
    from evireform.service import Overloaded, RetrievalService
    ix = _index(tmp_path, _ps(6))
    svc = RetrievalService(ix, EMB, max_queue=4)

    async def go():
        await svc.start()
        try:
            with pytest.raises(Overloaded):
                await svc.query_batch(["q"] * 5)
            gate = threading.Event()
            svc._work.submit(gate.wait)  # the query thread busy
            waiting = [asyncio.ensure_future(svc.query("Alpha 1?", 2, "bgr"))
                       for _ in range(4)]
            await asyncio.sleep(0.05)
            with pytest.raises(Overloaded):
                await svc.query("Alpha 2?", 2, "hiq")
            with pytest.raises(Overloaded):
                await svc.query("Alpha 2?", 2)
            gate.set()
            await asyncio.gather(*waiting)
            res, _ = await svc.query_batch(["Alpha 1?", "Alpha 2?"], 2)
            assert len(res) == 2
        finally:
            await svc.stop()
    asyncio.run(go())


# =========================================================================== 13. locks
@pytest.mark.parametrize("flag", ["--add", "--delete"])
def test_13_an_update_waiting_for_input_holds_no_lock(tmp_path, flag):
    """The reported case: ``update --add DIR`` of a folder holding a FIFO (opened, at
    c4363ba, under a lock on the index's parent folder, so every update in that folder hung
    behind it); and ``--delete FIFO``, which waits for its writer before taking any lock."""
    a = _index(tmp_path, _ps(3), "a")
    b = _index(tmp_path, _ps(3), "b")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "kept.txt").write_text("Omega Point met Sigma Ray.")
    fifo = notes / "pipe.txt" if flag == "--add" else tmp_path / "ids.fifo"
    os.mkfifo(fifo)
    blocked = subprocess.Popen([sys.executable, "-m", "evireform", "update", str(a), flag,
                                str(notes if flag == "--add" else fifo), "--quiet"],
                               cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env={**os.environ, "PYTHONPATH": REPO})
    try:
        time.sleep(3)  # it waits on the FIFO (--delete) or has skipped it (--add)
        ids = tmp_path / "del.txt"
        ids.write_text("p0\n")
        done = []
        t = threading.Thread(target=lambda: done.append(
            main(["update", str(a), "--delete", str(ids), "--quiet"])), daemon=True)
        t.start()
        t.join(60)
        assert done == [0], "an update of the same index waited for the blocked one"
        assert main(["update", str(b), "--delete", str(ids), "--quiet"]) == 0
    finally:
        try:  # release a reader still waiting (never block here if there is none)
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            os.write(fd, b"p1\n" if flag == "--delete" else b"[]")
            os.close(fd)
        except OSError:
            pass
        out, err = blocked.communicate(timeout=120)
    if flag == "--add":  # only regular files are read: the FIFO skipped with a warning
        assert blocked.returncode == 0, err.decode()[-400:]
        assert "pipe.txt" in err.decode()
        texts = [p.text for p in PropositionIndex.load(a).passages]
        assert "Omega Point met Sigma Ray." in texts and len(texts) == 3
    else:
        assert sorted(p.id for p in PropositionIndex.load(a).passages) == ["p2"]


def test_13_locks_are_per_index_not_per_folder(tmp_path):
    from evireform.store import index_lock
    a = _index(tmp_path, _ps(3), "a")
    b = _index(tmp_path, _ps(3), "b")
    with index_lock(a):
        code = ("import sys; sys.path.insert(0, %r)\n"
                "from evireform.store import index_lock\n"
                "with index_lock(%r): print('got it')" % (REPO, str(b)))
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=60)
        assert r.stdout.strip() == "got it"


# =========================================================================== 5. memory
def _big_index(tmp_path, mb: int):
    """An index whose first passage holds ``mb`` MiB of text (its propositions are small)."""
    from evireform import Proposition
    ps = [Passage("big", "Big", "lorem ipsum dolor " * (mb * 58254))] + _ps(20)
    props = [Proposition(f"Alpha {i} met Gamma Ray.", p.id, (f"Alpha {i}", "Gamma Ray"))
             for i, p in enumerate(ps)]
    emb = EMB.encode([p.text for p in props])
    return PropositionIndex.from_propositions(ps, props, emb, EMB.name).save(tmp_path / "ix")


@pytest.mark.parametrize("op", ["add", "delete", "upsert"])
def test_5_a_one_passage_update_never_decodes_the_texts_it_keeps(tmp_path, op):
    import tracemalloc
    ix = _big_index(tmp_path, 48)
    idx = PropositionIndex.load(ix, verify="fast")
    one = [Passage("new", "New", "Epsilon met Zeta Ray.")]
    tracemalloc.start()
    try:
        out = {"add": lambda: idx.add(one, EMB), "delete": lambda: idx.delete(["p3"]),
               "upsert": lambda: idx.upsert([Passage("p4", "T", "Changed text.")], EMB)}[op]()
        out.save(ix)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"{op} of one passage allocated {peak >> 20} MiB (the text: 48)"
    back = PropositionIndex.load(ix, verify="full")  # the copied bytes are the same strings
    assert back.passages[0] == Passage("big", "Big", "lorem ipsum dolor " * (48 * 58254))
    ids = [p.id for p in back.passages]
    assert {"add": "new" in ids, "delete": "p3" not in ids,
            "upsert": back.passages[ids.index("p4")].text == "Changed text."}[op]
    assert back.prop_texts == [t for t in back.prop_texts]  # every table reads back


def test_5_full_verification_of_a_large_text_runs_in_bounded_memory(tmp_path):
    import tracemalloc
    ix = _big_index(tmp_path, 48)
    tracemalloc.start()
    try:
        PropositionIndex.load(ix, verify="full")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 40 << 20, f"verifying a 48 MiB text allocated {peak >> 20} MiB"


def test_5_the_utf8_check_finds_a_character_cut_between_two_strings(tmp_path):
    """The blob decodes as a stream, so a character split across two strings would pass it:
    the check also refuses a string that starts with a continuation byte."""
    from evireform import IndexFormatError
    from evireform.store.verify import _check_utf8
    blob = np.frombuffer("aé".encode() + b"b", np.uint8)  # 'a', 0xC3 0xA9, 'b'
    _check_utf8(tmp_path / "s", blob, np.array([0, 1, 4], np.int64))
    with pytest.raises(IndexFormatError, match="at byte 2"):
        _check_utf8(tmp_path / "s", blob, np.array([0, 2, 4], np.int64))
    with pytest.raises(IndexFormatError, match="at byte 1"):  # an invalid byte, any step
        _check_utf8(tmp_path / "s", np.frombuffer(b"a\xffb", np.uint8),
                    np.array([0, 3], np.int64))


# =========================================================================== 16, 17
def _tenants(t2_text: str):
    """Two namespaces of lower-case text (what --extractor phrases is for)."""
    out = []
    for i in range(30):
        out.append(Passage(f"a{i}", f"item {i % 7}", f"the red fox {i % 5} ran with the "
                           f"blue heron by lake {i % 10}. it was seen by ann {i % 4}.",
                           {"namespace": "t1"}))
    for i in range(30):
        out.append(Passage(f"b{i}", f"item {i % 7}", t2_text.format(i=i % 6),
                           {"namespace": "t2"}))
    return out


def _ranks(idx, questions, flt):
    from evireform.retriever import EviReform, EviReformConfig
    r = EviReform(idx, EviReformConfig(n_candidates=8, k_residual=3), embedder=EMB)
    return [[(p.id, round(p.score, 12)) for p in r.retrieve(q, k=10, filter=flt).passages]
            for q in questions]


QS = ["where did the red fox run?", "who saw the blue heron?", "lake 2 and item 3",
      "what ran near lake 1 with ann 2?"]


def test_16_a_namespace_never_depends_on_another_namespaces_text():
    from evireform.extract import PhraseExtractor
    one = PropositionIndex.build(_tenants("a grey cat {i} sat on the mat."),
                                 EMB, extractor=PhraseExtractor(), show_progress=False)
    two = PropositionIndex.build(_tenants("ann walked past lake {i} today."),
                                 EMB, extractor=PhraseExtractor(), show_progress=False)
    t1 = {"namespace": "t1"}
    assert _ranks(one, QS, t1) == _ranks(two, QS, t1)
    # and t1 equals an index built from its passages alone, with the same extractor
    alone = PropositionIndex.build([p for p in _tenants("x") if p.id.startswith("a")], EMB,
                                   extractor=PhraseExtractor(), show_progress=False)
    assert _ranks(one, QS, t1) == _ranks(alone, QS, None)
    # group_by=None keeps the old behaviour (one vocabulary): there t2's text does reach t1
    old = [PropositionIndex.build(_tenants(t), EMB, extractor=PhraseExtractor(group_by=None),
                                  show_progress=False)
           for t in ("a grey cat {i} sat on the mat.",
                     "ann walked past lake {i} today.")]
    assert old[0].meta["extractor"] == "phrases-v1" and one.meta["extractor"] == "phrases-v2"
    assert old[0].prop_texts[:30] == old[1].prop_texts[:30]
    assert _entities_of_t1(old[0]) != _entities_of_t1(old[1])
    assert _entities_of_t1(one) == _entities_of_t1(two)


def _entities_of_t1(idx):
    g = idx.graph
    out = set()
    for i in np.flatnonzero(np.asarray(idx.owner) < 30):  # t1's propositions
        for e in np.asarray(g.a_indices)[g.a_indptr[i]:g.a_indptr[i + 1]]:
            out.add(idx.entity_names[int(e)])
    return out


def test_16_an_add_learns_only_the_namespaces_it_touches(tmp_path):
    from evireform.extract import PhraseExtractor
    ps = _tenants("a grey cat {i} sat on the mat.")
    idx = PropositionIndex.build(ps[:25] + ps[30:], EMB, extractor=PhraseExtractor(),
                                 show_progress=False)
    ex = PhraseExtractor()
    out = idx.add(ps[25:30], EMB, extractor=ex)
    assert set(ex.vocabs) == {("key", ("string", "t1"))}, "fitted a namespace it did not add"
    # the CLI keeps the recorded variant: an index built as phrases-v1 updates as v1
    from evireform.extract import extractor_recorded, make_extractor
    assert extractor_recorded("phrases-v1").name == "phrases-v1"
    assert make_extractor("phrases", "phrases-v1").group_by is None
    assert extractor_recorded("phrases-v2").group_by == "namespace"
    assert out.n_passages == 60


def test_17_filtered_hnsw_is_documented_and_exact_search_equals_the_sub_index(monkeypatch):
    """What the filters' docstring says, checked: below the HNSW threshold a filter equals
    the sub-index exactly; with HNSW (the threshold lowered so this small index uses it) the
    filtered candidates come from the same graph and the docstring calls it approximate."""
    import evireform.filters as F
    assert "HNSW" in F.__doc__ and "approximate" in F.__doc__
    ps = _ps(40, md=lambda i: {"namespace": f"t{i % 2}"})
    idx = PropositionIndex.build(ps, EMB, show_progress=False, hnsw=False)
    sub = PropositionIndex.build([p for p in ps if p.metadata["namespace"] == "t0"], EMB,
                                 show_progress=False, hnsw=False)
    qs = ["Alpha 4 met whom?", "Gamma Ray in 1910", "Alpha 12"]
    assert _ranks(idx, qs, {"namespace": "t0"}) == _ranks(sub, qs, None)
    q8 = PropositionIndex.build(ps, EMB, show_progress=False, hnsw=False)
    quantize(q8, "int8")  # the int8 scan re-scores exactly: the same rankings
    assert structures_of(q8).codes is not None
    assert _ranks(q8, qs, {"namespace": "t0"}) == _ranks(sub, qs, None)
    hn = PropositionIndex.build(ps, EMB, show_progress=False, hnsw=True)
    got = _ranks(hn, qs, {"namespace": "t0"})
    assert all(pid.endswith(("0", "2", "4", "6", "8")) for r in got for pid, _ in r)


# =========================================================================== 18. verify
def test_18_an_update_refuses_data_its_fast_tier_would_have_trusted(tmp_path):
    """Bit rot in the middle of a file over 128 KiB: outside the stamp's edge digest, so
    only a full verification sees it (c4363ba's update trusted the fast tier)."""
    wide = HashingEmbedder(256)
    ix = PropositionIndex.build(_ps(200), wide, show_progress=False).save(tmp_path / "ix")
    assert (ix / "embeddings.npy").stat().st_size > 3 << 16
    PropositionIndex.load(ix)
    # bit rot inside the embeddings, size and mtime kept: the stamp still matches
    f = ix / "embeddings.npy"
    st = f.stat()
    raw = bytearray(f.read_bytes())
    raw[len(raw) // 2] ^= 0x40
    f.write_bytes(bytes(raw))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert PropositionIndex.load(ix).verified == "fast"  # the stamp still vouches for it
    ids = tmp_path / "del.txt"
    ids.write_text("p0\n")
    assert main(["update", str(ix), "--delete", str(ids), "--quiet"]) == 2
    from evireform import IndexFormatError
    with pytest.raises(IndexFormatError):
        PropositionIndex.load(ix, verify="full")


# =========================================================================== 20. exit
def test_20_query_failing_while_the_warm_up_runs_exits_cleanly(tmp_path):
    ix = _index(tmp_path, _ps(3))
    cache = tmp_path / "numba-cache"
    for _ in range(3):
        r = _run("query", ix, "Alpha?", "--embedder", "no-such-embedder-xyz",
                 env={"NUMBA_CACHE_DIR": str(cache)}, timeout=600)
        assert r.returncode == 2, (r.returncode, r.stderr[-500:])
        assert "terminate called" not in r.stderr


# =========================================================================== 24. messages
def test_24_messages_say_what_is_wrong(tmp_path, capsys):
    ix = _index(tmp_path, _ps(3))
    assert main(["index", str(ix), str(tmp_path / "out"), "--embedder", "hashing-16",
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "is an evireform index" in err and "format_version" not in err
    assert main(["update", str(ix), "--add", str(ix)]) == 2
    err = capsys.readouterr().err
    assert "the index itself" in err and "format_version" not in err
    r = _run("serve", ix, "--max-wait-ms", "5000")
    assert r.returncode == 2 and "at most 1000" in r.stderr
    (tmp_path / "c.json").write_text(json.dumps([{"text": "Alpha met Beta."}]))
    r = _run("index", tmp_path / "c.json", tmp_path / "o2", "--extractor", "/dev/null",
             "--embedder", "hashing-16")
    assert r.returncode != 0 and "phrases" in r.stderr and "does not exist" not in r.stderr
    ro = tmp_path / "ro"
    import shutil
    shutil.copytree(ix, ro)
    if os.geteuid() != 0:
        os.chmod(ro, 0o555)
        r = _run("verify", ro)
        os.chmod(ro, 0o755)
        assert r.returncode == 0 and "no stamp written" in r.stdout
