"""The resident service (evireform.service.resident): hot swaps, micro-batches, overload,
updates and uploads that change everything or nothing."""

import asyncio
import threading

import numpy as np
import pytest
from service_common import (  # noqa: F401 (fixtures among them)
    EMB, HTTP, QUESTIONS, _records, _same, _service, httpx, index_dir, server
)

from evireform import PropositionIndex
from evireform.retriever import EviReform


def test_hot_swap_under_concurrent_queries(server, index_dir):
    """20 updates while 8 clients query: no failed request, each response equal to
    in-process retrieval on the generation it names."""
    gens = [PropositionIndex.load(index_dir)]
    adds = [_records(2, start=100 + 2 * u) for u in range(20)]
    for a in adds:
        gens.append(gens[-1].add(a, EMB))
    seen, failures = [], []
    stop = threading.Event()

    def client(n):
        with httpx.Client(timeout=30) as c:
            i = 0
            while not stop.is_set():
                q = QUESTIONS[(n + i) % len(QUESTIONS)]
                r = c.post(server.url + "/query", json={"question": q, "k": 5})
                if r.status_code != 200:
                    failures.append(r.text)
                else:
                    seen.append((q, r.json()))
                i += 1

    threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    try:
        for u, a in enumerate(adds, 1):
            r = HTTP.post(server.url + "/update", json={"add": a}, timeout=60)
            assert r.status_code == 200 and r.json()["generation"] == u, r.text
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not failures, failures[:3]
    used = {b["generation"] for _, b in seen}
    assert len(used) >= 2
    retrievers = {g: EviReform(gens[g], embedder=EMB) for g in used}
    for q, body in seen:
        assert _same(body, retrievers[body["generation"]].retrieve(q, 5)), (q, body["generation"])
    assert PropositionIndex.load(index_dir).n_passages == 40 + 40


def test_a_micro_batch_equals_single_calls(index_dir):
    svc = _service(index_dir, max_batch=32)
    r = EviReform(PropositionIndex.load(index_dir), embedder=EMB)

    async def run():
        await svc.start()
        try:
            # queued before the batcher runs: one batch
            return await asyncio.gather(*(svc.query(q, 4) for q in QUESTIONS * 2))
        finally:
            await svc.stop()
    out = asyncio.run(run())
    for q, (res, gen) in zip(QUESTIONS * 2, out):
        want = r.retrieve(q, 4)
        assert res.ids == want.ids and gen == 0
        np.testing.assert_allclose([p.score for p in res.passages],
                                   [p.score for p in want.passages], rtol=1e-6)
    text = svc.metrics.text().decode()
    assert "evireform_batch_size_count 1.0" in text  # all twelve in one retrieve_many


def test_a_full_queue_answers_503(index_dir):
    from evireform.service import create_app
    svc = _service(index_dir, max_queue=1)
    app = create_app(svc)

    async def run():
        svc._queue = asyncio.Queue(maxsize=1)  # no batcher: the queue stays full
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            first = asyncio.create_task(c.post("/query", json={"question": "Who met Alpha?"}))
            await asyncio.sleep(0.05)
            r = await c.post("/query", json={"question": "Who met Beta?"})
            first.cancel()
            return r
    r = asyncio.run(run())
    assert r.status_code == 503 and r.headers["retry-after"] == "1" and "error" in r.json()


def test_a_refused_update_changes_nothing_on_disk_and_keeps_the_generation(index_dir):
    """A /update refused (an unknown id to delete, a passage id taken by other content)
    leaves every file of the index as it was (names, bytes, modification times: no stamp
    rewritten) and the generation the service reports; an accepted one then bumps it."""
    import hashlib

    import httpx

    from evireform.service import create_app

    def files():
        return {f.name: (hashlib.sha256(f.read_bytes()).hexdigest(), f.stat().st_mtime_ns)
                for f in sorted(index_dir.iterdir())}
    taken_id = PropositionIndex.load(index_dir).passages[0].id
    svc = _service(index_dir)
    before = files()

    async def run():
        await svc.start()
        try:
            transport = httpx.ASGITransport(app=create_app(svc))
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                gone = await c.post("/update", json={"delete": ["no-such-id"]})
                taken = await c.post("/update", json={"add": [
                    {"id": taken_id, "text": "Other content under a taken id."}]})
                health = (await c.get("/health")).json()
                untouched = files() == before
                ok = await c.post("/update", json={"add": [{"text": "Omega 9 met Alpha 9."}]})
                return gone, taken, health, untouched, ok, (await c.get("/health")).json()
        finally:
            await svc.stop()
    gone, taken, health, untouched, ok, after = asyncio.run(run())
    assert gone.status_code == 404 and taken.status_code == 409, (gone.text, taken.text)
    assert health["index"]["generation"] == 0
    assert untouched
    assert ok.status_code == 200 and ok.json()["generation"] == 1
    assert after["index"]["generation"] == 1


# --------------------------------------------------------------------------- documents in
def test_files_come_in_through_the_service(tmp_path):
    """Issue 70: POST /documents reads uploaded files as `evireform index` does (each
    file's result: indexed with its passages, or skipped with the reason), the new
    generation answers from them, GET /sources lists them, GET /passages/{id} shows one,
    an upload of the same name replaces its passages, and /update's delete_where removes
    a source; names with folders are refused, the upload cap is its own."""
    from helpers import minimal_pdf

    from evireform.service import RetrievalService, create_app
    ix = PropositionIndex.build(_records(8), EMB, show_progress=False).save(tmp_path / "ix")
    svc = RetrievalService(ix, EMB)
    app = create_app(svc, max_body=4096, max_upload=1 << 20)
    pdf = minimal_pdf([["The Orvel archive moved to Quito in 1998."]], title="Archive note")

    async def run():
        await svc.start()
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                         base_url="http://t") as c:
                out = {}
                out["up"] = await c.post("/documents", files=[
                    ("files", ("note.md", b"# Dana\n\nDana Ruiz runs the build farm.\n")),
                    ("files", ("archive.pdf", pdf)),
                    ("files", ("blob.bin", b"\0\1")),
                    ("files", ("../evil.md", b"# x\n\ny\n")),
                    ("files", ("team/a/readme.md", b"# A\n\nThe alpha team meets on Monday.\n")),
                    ("files", ("team/b/readme.md", b"# B\n\nThe beta team meets on Friday.\n")),
                    ("files", ("team/.git/config", b"[core]\n")),
                    ("files", ("team//x.md", b"# x\n\ny\n")),
                    ("files", ("planted.jsonl", b'{"id": "planted", "text": "Trust me.", '
                                                b'"metadata": {"source": "note.md"}}\n'))])
                out["clash"] = await c.post("/documents", files=[
                    ("files", ("team", b"# t\n\nt\n")),
                    ("files", ("note.md/inside.md", b"# t\n\nt\n"))])
                out["q"] = await c.post("/query", json={"question": "Where did the Orvel "
                                                                    "archive move?", "k": 3})
                out["sources"] = await c.get("/sources")
                out["one"] = await c.get("/passages/uploads/archive.pdf%230")
                out["none"] = await c.get("/passages/no-such%23id")
                out["again"] = await c.post("/documents", files=[
                    ("files", ("note.md", b"# Dana\n\nDana Ruiz left; Kim runs it now.\n"))])
                out["after"] = await c.get("/sources")
                out["del"] = await c.post("/update", json={
                    "delete_where": {"source": "uploads/archive.pdf"}})
                out["gone"] = await c.get("/sources")
                out["big"] = await c.post("/documents", files=[
                    ("files", ("big.md", b"x " * (1 << 20)))])
                out["empty"] = await c.post("/documents", files=[])
                return out
        finally:
            await svc.stop()
    o = asyncio.run(run())
    up = o["up"].json()
    assert o["up"].status_code == 200, up
    res = {f["file"]: f for f in up["files"]}
    assert res["note.md"]["status"] == "indexed" and res["note.md"]["passages"] == 1
    assert {k: res["archive.pdf"].get(k) for k in ("status", "source", "passages")} == \
        {"status": "indexed", "source": "uploads/archive.pdf", "passages": 1}
    assert res["blob.bin"]["status"] == "skipped" and res["blob.bin"]["reason"]
    # issue 81: a corpus file's records are not planted through an upload
    assert res["planted.jsonl"]["status"] == "skipped" and \
        "/update" in res["planted.jsonl"]["reason"]
    assert not (svc.uploads_dir / "planted.jsonl").exists()
    assert res["../evil.md"]["status"] == "skipped" and "'..'" in res["../evil.md"]["reason"]
    # a folder from the page: its files keep their paths, two readme.md apart
    for team in "ab":
        assert res[f"team/{team}/readme.md"]["source"] == f"uploads/team/{team}/readme.md"
    for bad in ("team/.git/config", "team//x.md"):
        assert res[bad]["status"] == "skipped" and "relative path" in res[bad]["reason"]
    clash = {f["file"]: f for f in o["clash"].json()["files"]}
    assert clash["team"]["reason"] == "a folder of that name was uploaded before"
    assert "folders' names" in clash["note.md/inside.md"]["reason"]
    assert (svc.uploads_dir / "team" / "a" / "readme.md").is_file()
    assert up["generation"] == 1 and up["passages"] == 12
    assert o["q"].json()["passages"][0]["id"] == "uploads/archive.pdf#0"
    srcs = {s["source"]: s for s in o["sources"].json()["sources"]}
    assert srcs["uploads/archive.pdf"] == {"source": "uploads/archive.pdf", "passages": 1,
                                           "title": "Archive note"}
    assert o["one"].json()["text"].startswith("The Orvel archive moved")
    assert o["none"].status_code == 404
    assert "planted" not in {p.id for p in PropositionIndex.load(ix).passages}
    assert o["again"].json()["generation"] == 2
    assert o["again"].json()["passages"] == 12  # replaced, not added
    assert o["del"].status_code == 200
    assert "uploads/archive.pdf" not in {s["source"] for s in o["gone"].json()["sources"]}
    assert "uploads/note.md" in {s["source"] for s in o["gone"].json()["sources"]}
    assert o["big"].status_code == 413 and o["empty"].status_code in (400, 422)
    assert not (svc.uploads_dir / "blob.bin").exists()
    assert (svc.uploads_dir / "note.md").read_bytes().startswith(b"# Dana\n\nDana Ruiz left")


def test_an_uploads_files_are_what_it_reports_and_go_when_refused_or_deleted(tmp_path,
                                                                              monkeypatch):
    """Issue 81 (round 7, item 6): a name twice in one upload is read once (the later one
    skipped, saying why); a refused upload leaves none of its files and brings back the
    ones it replaced; a replacement no reader takes keeps the file the index still holds;
    a source deleted through /update takes its uploaded file (and emptied folders) along."""
    from helpers import minimal_pdf

    from evireform.service import RetrievalService, create_app
    ix = PropositionIndex.build(_records(8), EMB, show_progress=False).save(tmp_path / "ix")
    svc = RetrievalService(ix, EMB)
    app = create_app(svc, max_body=4096, max_upload=1 << 20)
    pdf = minimal_pdf([["The Orvel archive moved to Quito in 1998."]], title="Archive note")
    old = b"# Dana\n\nDana Ruiz runs the build farm.\n"

    async def run():
        await svc.start()
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                         base_url="http://t") as c:
                out = {}
                out["twice"] = await c.post("/documents", files=[
                    ("files", ("note.md", old)),
                    ("files", ("note.md", b"# Other\n\nSomething else entirely.\n")),
                    ("files", ("deep/er/archive.pdf", pdf))])
                real = svc._update_sync

                def refuse(*a, **k):
                    raise ValueError("refused for the test")
                monkeypatch.setattr(svc, "_update_sync", refuse)
                out["refused"] = await c.post("/documents", files=[
                    ("files", ("note.md", b"# Dana\n\nKim runs it now.\n")),
                    ("files", ("fresh.md", b"# Fresh\n\nA new file.\n"))])
                monkeypatch.setattr(svc, "_update_sync", real)
                out["garbage"] = await c.post("/documents", files=[
                    ("files", ("deep/er/archive.pdf", b"%PDF-1.4 not really"))])
                out["kept"] = (svc.uploads_dir / "deep" / "er" / "archive.pdf").read_bytes()
                out["del"] = await c.post("/update", json={
                    "delete_where": {"source": "uploads/deep/er/archive.pdf"}})
                return out
        finally:
            await svc.stop()
    o = asyncio.run(run())
    twice = {(f["file"], f["status"]): f for f in o["twice"].json()["files"]}
    assert len(o["twice"].json()["files"]) == 3
    assert twice[("note.md", "skipped")]["reason"] == \
        "the same name appears earlier in this upload"
    assert twice[("note.md", "indexed")]["passages"] == 1
    up = svc.uploads_dir
    assert (up / "note.md").read_bytes() == old
    assert o["refused"].status_code == 400
    assert (up / "note.md").read_bytes() == old and not (up / "fresh.md").exists()
    assert sorted(p.name for p in up.rglob("*") if p.name.startswith(".")) == []
    g = o["garbage"].json()["files"][0]
    assert g["status"] == "skipped"
    assert o["kept"] == pdf  # the index still holds its passages
    assert o["del"].status_code == 200
    assert not (up / "deep").exists() and (up / "note.md").is_file()
    srcs = {p.metadata.get("source") for p in PropositionIndex.load(ix).passages}
    assert "uploads/note.md" in srcs and "uploads/deep/er/archive.pdf" not in srcs


def test_uploads_read_under_the_services_read_limits(tmp_path):
    """Issue 69: `serve --read-limit` holds for POST /documents: a CSV of more rows than the
    service's setting is skipped with the reason naming the setting; the same file within
    it is indexed."""
    from evireform.cli import main
    from evireform.formats import ReadLimits
    from evireform.service import RetrievalService, create_app
    ix = PropositionIndex.build(_records(4), EMB, show_progress=False).save(tmp_path / "ix")
    csv = b"name,team\nAda,core\nBo,docs\nCy,ops\n"

    async def post(limits):
        svc = RetrievalService(ix, EMB, read_limits=limits)
        app = create_app(svc)
        await svc.start()
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                         base_url="http://t") as c:
                r = await c.post("/documents", files=[("files", ("people.csv", csv))])
                assert r.status_code == 200, r.text
                return r.json()["files"][0]
        finally:
            await svc.stop()
    tight = asyncio.run(post(ReadLimits(items=2)))
    assert tight["status"] == "skipped" and "more than 2 rows" in tight["reason"]
    assert "--read-limit items=" in tight["reason"]
    assert asyncio.run(post(ReadLimits(items=3)))["passages"] == 3
    with pytest.raises(SystemExit):  # serve refuses a bad setting before it loads anything
        main(["serve", str(ix), "--read-limit", "rows=3"])


def test_one_id_given_twice_in_an_update_is_a_conflict(tmp_path):
    """Two passages of one /update given one id (explicitly, or an explicit id equal to
    another's derived one) answer 409, as an id the index holds with other content does:
    the schema allows the request, the index cannot hold it (schemathesis found it)."""
    from evireform.service import RetrievalService, create_app
    ix = PropositionIndex.build(_records(4), EMB, show_progress=False).save(tmp_path / "ix")
    svc = RetrievalService(ix, EMB)
    app = create_app(svc)

    async def run():
        await svc.start()
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                         base_url="http://t") as c:
                return await c.post("/update", json={"add": [
                    {"id": "n1", "text": "One."}, {"id": "n1", "text": "Two."}]})
        finally:
            await svc.stop()
    r = asyncio.run(run())
    assert r.status_code == 409 and "not unique" in r.json()["error"], r.text
