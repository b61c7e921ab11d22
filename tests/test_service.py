"""The resident service (evireform.service): real uvicorn in a subprocess for the HTTP
contract, the engine in-process for what must be deterministic (micro-batches, overload)."""
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

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")
HTTP = httpx.Client(timeout=60)  # generous: a cold CI machine compiles kernels on first use

from evireform import PropositionIndex
from evireform.embed import HashingEmbedder
from evireform.retriever import EviReform

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMB = HashingEmbedder(64)
QUESTIONS = ["Who did Alpha 3 meet?", "When did Beta 7 meet Gamma Ray?",
             "Which city did Delta 2 visit?", "Who met Gamma Ray in 1905?",
             "What did Alpha 1 like?", "Where was Beta 4 born?"]


def _records(n, start=0):
    names = ["Alpha", "Beta", "Delta", "Gamma Ray", "Omega"]
    return [{"title": f"{names[i % 4]} {i}",
             "text": f"{names[i % 4]} {i} met {names[(i + 1) % 5]} in {1900 + i}. "
                     f"{names[(i + 2) % 5]} liked {names[(i + 3) % 5]} {i % 7}."}
            for i in range(start, start + n)]


@pytest.fixture
def index_dir(tmp_path):
    idx = PropositionIndex.build(_records(40), EMB, show_progress=False)
    return idx.save(tmp_path / "ix")


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One server for the tests that only read (an index of its own)."""
    d = tmp_path_factory.mktemp("shared")
    ix = PropositionIndex.build(_records(40), EMB, show_progress=False).save(d / "ix")
    s = Server(ix)
    yield s, ix
    s.close()


def _port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Server:
    def __init__(self, index_dir, *extra, env=None):
        self.port = _port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "evireform", "serve", str(index_dir), "--port",
             str(self.port), "--embedder", "hashing-64", *extra], cwd=REPO,
            env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        while True:
            try:
                if HTTP.get(self.url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(self.proc.stderr.read().decode())
            if time.monotonic() - self.t0 > 60:
                raise RuntimeError("the service did not start")
            time.sleep(0.05)
        self.ready_s = time.monotonic() - self.t0

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture
def server(index_dir):
    s = Server(index_dir)
    yield s
    s.close()


def _same(body, res):
    got = [(p["id"], round(p["score"], 5)) for p in body["passages"]]
    want = [(p.id, round(p.score, 5)) for p in res.passages]
    return got == want


def test_query_equals_in_process_retrieve(shared):
    server, index_dir = shared
    r = EviReform(PropositionIndex.load(index_dir), embedder=EMB)
    for q in QUESTIONS:
        body = HTTP.post(server.url + "/query", json={"question": q, "k": 5}).json()
        assert _same(body, r.retrieve(q, 5)), q
        assert body["generation"] == 0 and body["took_ms"] > 0
        assert all(p["text"] for p in body["passages"])
    batch = HTTP.post(server.url + "/query_batch", json={"questions": QUESTIONS, "k": 3}).json()
    assert all(_same(b, res) for b, res in zip(batch["results"], r.retrieve_many(QUESTIONS, 3)))
    g = HTTP.post(server.url + "/query", json={"question": QUESTIONS[0], "graph": True}).json()
    assert "nodes" in g["graph"]
    h = HTTP.get(server.url + "/health").json()
    assert h == {"status": "ok", "index": {"passages": 40, "propositions": r.index.n_props,
                                           "embedder": "hashing-64", "generation": 0}}
    text = HTTP.get(server.url + "/metrics").text
    assert "evireform_requests_total" in text and "evireform_batch_size_bucket" in text


@pytest.mark.parametrize("body,status", [
    (b"{not json", 422), (b'{"question": ""}', 422), (b'{"question": "q", "k": 2.5}', 422),
    (b'{"question": "q", "k": true}', 422), (b'{"question": "q", "k": 100000}', 422),
    (b'{"question": "q", "method": "magic"}', 422), (b'{"question": "q", "extra": 1}', 422),
    (b'[' * 5000, 400)])
def test_bad_requests_get_json_errors(shared, body, status):
    server = shared[0]
    r = HTTP.post(server.url + "/query", content=body,
                   headers={"Content-Type": "application/json"})
    assert r.status_code == status
    assert "error" in r.json() and "Traceback" not in r.text


def test_body_size_and_unknown_ids(shared):
    server = shared[0]
    r = HTTP.post(server.url + "/query", content=b'{"question": "' + b"x" * (2 << 20) + b'"}',
                   headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and "error" in r.json()
    r = HTTP.post(server.url + "/update", json={"delete": ["nope"]})
    assert r.status_code == 404 and "nope" in r.json()["error"]


def test_auth_is_required_when_configured(index_dir):
    s = Server(index_dir, "--api-key-env", "EVI_TEST_KEY", env={"EVI_TEST_KEY": "s3cret"})
    try:
        assert HTTP.get(s.url + "/health").status_code == 200  # liveness stays open
        r = HTTP.post(s.url + "/query", json={"question": "Who met Alpha?"})
        assert r.status_code == 401 and "error" in r.json()
        r = HTTP.post(s.url + "/query", json={"question": "Who met Alpha?"},
                       headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401
        r = HTTP.post(s.url + "/query", json={"question": "Who met Alpha?"},
                       headers={"Authorization": "Bearer s3cret"})
        assert r.status_code == 200
    finally:
        s.close()


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


# --------------------------------------------------------------------------- in-process engine
def _service(index_dir, **kw):
    from evireform.service import RetrievalService
    return RetrievalService(index_dir, EMB, **kw)


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


# --------------------------------------------------------------------------- ONNX encoder
def test_onnx_query_encoder_equals_torch_and_needs_no_torch(tmp_path, data_dir):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    pytest.importorskip("sentence_transformers")
    from evireform.embed import MiniLMEmbedder
    os.environ["EVIREFORM_CACHE"] = str(tmp_path)
    try:
        qs = [q["question"] for q in json.loads(
            (data_dir / "musique" / "musique.json").read_text())[:40]]
        qs += ["", "x" * 3000, "naïve café – 東京"]
        onnx = MiniLMEmbedder(encoder="onnx").encode_queries(qs)
        torch_ = MiniLMEmbedder(encoder="torch").encode_queries(qs)
        assert np.abs(onnx - torch_).max() <= 1e-5
        code = ("import sys; from evireform.embed import get_embedder\n"
                "e = get_embedder('minilm', encoder='onnx')\n"
                "e.encode_queries(['Who wrote Hamlet?'])\n"
                "print('torch' in sys.modules)")
        r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                           text=True, env={**os.environ, "EVIREFORM_CACHE": str(tmp_path)})
        assert r.stdout.strip() == "False", r.stderr
    finally:
        del os.environ["EVIREFORM_CACHE"]


def test_filters_and_namespaces_through_the_app(tmp_path):
    """Tenants by namespace: each answer equals in-process retrieval with the same filter;
    questions with different filters in one micro-batch are answered apart; metadata is
    returned and accepted by /update; malformed filters are 422s (the schema's), ones naming keys or ids the index lacks 404s."""
    from evireform.service import create_app
    recs = [{**r, "namespace": f"t{i % 3}", "year": 1900 + i} for i, r in enumerate(_records(30))]
    ix = PropositionIndex.build(recs, EMB, show_progress=False).save(tmp_path / "ix")
    svc = _service(ix, max_batch=32)
    app = create_app(svc)
    r = EviReform(PropositionIndex.load(ix), embedder=EMB)

    async def run():
        await svc.start()
        try:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                asks = [{"question": q, "k": 4, "namespace": f"t{n % 3}"}
                        for n, q in enumerate(QUESTIONS)]
                asks.append({"question": QUESTIONS[0], "k": 4, "namespace": "t1",
                             "filter": {"year": {"$gte": 1910}}})
                single = await asyncio.gather(*(c.post("/query", json=a) for a in asks))
                batch = await c.post("/query_batch", json={"questions": QUESTIONS, "k": 3,
                                                           "filter": {"year": {"$lt": 1915}}})
                bad = [await c.post("/query", json={"question": "q", "filter": f})
                       for f in ({"year": {"$near": 1}}, {"yaer": 1}, ["nope"])]
                upd = await c.post("/update", json={"add": [
                    {"id": "new", "text": "Omega met Alpha in 1999.",
                     "metadata": {"namespace": "t9"}}]})
                t9 = await c.post("/query", json={"question": "Who met Alpha?",
                                                  "namespace": "t9"})
                return single, batch, bad, upd, t9
        finally:
            await svc.stop()
    single, batch, bad, upd, t9 = asyncio.run(run())
    wants = [({"namespace": f"t{n % 3}"}, q) for n, q in enumerate(QUESTIONS)] + \
        [({"$and": [{"namespace": "t1"}, {"year": {"$gte": 1910}}]}, QUESTIONS[0])]
    for (flt, q), resp in zip(wants, single):
        body = resp.json()
        assert resp.status_code == 200, body
        assert _same(body, r.retrieve(q, 4, filter=flt)), (q, flt)
        ns = flt.get("namespace") or flt["$and"][0]["namespace"]
        assert all(p["metadata"]["namespace"] == ns for p in body["passages"])
    for b, res in zip(batch.json()["results"], r.retrieve_many(QUESTIONS, 3,
                                                               filter={"year": {"$lt": 1915}})):
        assert _same(b, res) and all(p["metadata"]["year"] < 1915 for p in b["passages"])
    assert [x.status_code for x in bad] == [422, 404, 404]  # malformed; absent key, ids
    assert "unknown operator" in bad[0].json()["error"] and "yaer" in bad[1].json()["error"]
    assert upd.status_code == 200, upd.text
    assert [p["id"] for p in t9.json()["passages"]] == ["new"]


def undescribed(doc):
    """Every schema property (at any depth of the components) without a description, as
    "Schema.path.name"."""
    out = []

    def walk(node, where):
        if isinstance(node, dict):
            for name, prop in (node.get("properties") or {}).items():
                if isinstance(prop, dict) and not prop.get("description"):
                    out.append(f"{where}.{name}")
                walk(prop, f"{where}.{name}")
            for key, v in node.items():
                if key != "properties":
                    walk(v, where)
        elif isinstance(node, list):
            for v in node:
                walk(v, where)
    for name, schema in doc["components"]["schemas"].items():
        walk(schema, name)
    return out


def test_the_api_explains_itself(index_dir):
    """Issue 70: every operation has its own id, a summary, a description and a tag, and
    every field of every schema is described; a field added without a description fails
    here (the companion check below shows the scan finds one)."""
    import re
    from evireform.service import RetrievalService, create_app
    doc = create_app(RetrievalService(index_dir, EMB)).app.openapi()
    ops = [(p, m, op) for p, v in doc["paths"].items() for m, op in v.items()]
    assert {p for p, _, _ in ops} >= {"/health", "/query", "/query_batch", "/update",
                                       "/metrics"}
    for path, method, op in ops:
        assert op.get("summary") and op.get("description") and op.get("tags"), path
        # not FastAPI's default (query_query_post): what generated clients name functions
        assert not re.search(r"_(get|post|put|delete)$", op["operationId"]), op["operationId"]
    assert undescribed(doc) == []
    doc["components"]["schemas"]["ErrorOut"]["properties"]["code"] = {"type": "integer"}
    assert undescribed(doc) == ["ErrorOut.code"]


def test_every_response_matches_the_published_openapi(index_dir):
    """What a client generator reads is what the service sends: for valid and hostile
    requests alike, each status is documented for its endpoint, with the content type it
    comes with, and the body validates against the documented schema (errors included:
    ``{"error": ...}``, never FastAPI's ``{"detail": ...}``).  The bearer scheme is
    published; ``k: 3.0`` is an integer as JSON Schema defines one."""
    jsonschema = pytest.importorskip("jsonschema")
    from evireform.service import RetrievalService, create_app
    svc = RetrievalService(index_dir, EMB)
    guard = create_app(svc, api_key="s3cret", max_body=4096)
    doc = guard.app.openapi()
    assert doc["components"]["securitySchemes"]["bearer"] == {"type": "http",
                                                              "scheme": "bearer"}
    auth = {"Authorization": "Bearer s3cret"}
    deep = {"year": 1}  # valid in the schema, nested past filters.MAX_DEPTH: a 400
    for _ in range(40):
        deep = {"$and": [deep]}
    cases = [("get", "/health", None, {}), ("get", "/metrics", None, auth),
             ("get", "/metrics", None, {}),
             ("post", "/query", {"question": QUESTIONS[0], "k": 3.0}, auth),
             ("post", "/query", {"question": QUESTIONS[0], "k": 3, "graph": True}, auth),
             ("post", "/query", {"question": QUESTIONS[0], "k": 2.5}, auth),
             ("post", "/query", {"question": QUESTIONS[0], "k": True}, auth),
             ("post", "/query", {"question": QUESTIONS[0], "k": "3"}, auth),
             ("post", "/query", {"question": "   "}, auth),
             ("post", "/query", {"question": "q", "filter": {"nope": 1}}, auth),
             ("post", "/query", {"question": "q", "filter": deep}, auth),
             ("post", "/query", {"question": "q", "extra": 1}, auth),
             ("post", "/query", {"question": "q" * 5000}, auth),
             ("post", "/query", {"question": QUESTIONS[1]}, {}),
             ("post", "/query_batch", {"questions": QUESTIONS[:3], "k": 2}, auth),
             ("post", "/query_batch", {"questions": []}, auth),
             ("post", "/update", {"delete": ["no-such-id"]}, auth),
             ("post", "/update", {"add": [{"text": "Omega 9 met Alpha 9 in 1990."}]}, auth),
             ("post", "/update", {}, auth)]

    async def run():
        await svc.start()
        try:
            transport = httpx.ASGITransport(app=guard)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                out = [(m, p, await c.request(m, p, json=b, headers=h))
                       for m, p, b, h in cases]
                out.append(("post", "/query", await c.post(
                    "/query", content=b"{not json", headers={**auth,
                                                            "Content-Type": "application/json"})))
                out.append(("post", "/query", await c.post(
                    "/query", content=b"[" * 5000, headers={**auth,
                                                           "Content-Type": "application/json"})))
                return out
        finally:
            await svc.stop()
    seen = set()
    got = asyncio.run(run())
    assert [r.status_code for _, _, r in got] == [
        200, 200, 401, 200, 200, 422, 422, 422, 422, 404, 400, 422, 413, 401, 200, 422, 404,
        200, 200, 422, 413]
    assert "graph" in got[4][2].json() and "graph" not in got[3][2].json()
    for m, path, r in got:
        documented = doc["paths"][path][m]["responses"]
        assert str(r.status_code) in documented, (m, path, r.status_code, r.text[:200])
        content = documented[str(r.status_code)]["content"]
        ctype = r.headers["content-type"]
        assert ctype in content, (path, r.status_code, ctype, list(content))
        if ctype == "application/json":
            schema = {**content[ctype]["schema"], "components": doc["components"]}
            jsonschema.validate(r.json(), schema)
        seen.add(r.status_code)
    assert {200, 400, 401, 404, 413, 422} <= seen


def test_the_banner_comes_after_the_bind_and_a_taken_port_is_named(index_dir):
    """``evireform serve`` binds its socket before it says where it serves: when the banner
    is read, a connection to the port succeeds; a port another process holds is refused
    with one line naming it, and no banner."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    taken = holder.getsockname()[1]
    try:
        r = subprocess.run([sys.executable, "-m", "evireform", "serve", str(index_dir),
                            "--port", str(taken), "--embedder", "hashing-64"], cwd=REPO,
                           capture_output=True, text=True, timeout=120)
    finally:
        holder.close()
    assert r.returncode == 2, r.stderr
    assert f"cannot listen on 127.0.0.1:{taken}" in r.stderr and "holds the port" in r.stderr
    assert "on http://" not in r.stderr and "Traceback" not in r.stderr
    port = _port()
    proc = subprocess.Popen([sys.executable, "-m", "evireform", "serve", str(index_dir),
                             "--port", str(port), "--embedder", "hashing-64"], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        line = ""
        t0 = time.monotonic()
        while "evireform serve:" not in line and time.monotonic() - t0 < 120:
            line = proc.stderr.readline()
            if not line and proc.poll() is not None:
                break
        assert f"on http://127.0.0.1:{port}" in line
        socket.create_connection(("127.0.0.1", port), timeout=5).close()  # bound already
    finally:
        proc.terminate()
        proc.wait(10)


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


def test_what_stock_schemathesis_asks_of_the_contract(index_dir, tmp_path):
    """A fresh tenant's namespace (no passage has one yet) answers an empty result, not 400;
    a namespace judges ids and keys inside itself (issue 69: another tenant's id is as
    unknown as a missing one, a key only another tenant's passages have is unknown, and the
    error lists this namespace's keys only); an empty /update is a no-op (200, the same
    generation, nothing written); an over-cap body is 413 in the schema."""
    import httpx
    from evireform.service import create_app
    svc = _service(index_dir)
    app = create_app(svc)
    spec = app.app.openapi()
    for path in ("/query", "/query_batch", "/update"):
        assert "413" in spec["paths"][path]["post"]["responses"], path
    pid = PropositionIndex.load(index_dir).passages[0].id
    tenants = [{"id": f"t{i}", "text": f"Alpha {i} met Beta in {1900 + i}.",
                "metadata": {"namespace": "a" if i % 2 else "b",
                             **({} if i % 2 else {"secret_key": i})}} for i in range(6)]

    async def run():
        await svc.start()
        try:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                fresh = await c.post("/query", json={"question": "Alpha", "namespace": "new"})
                batch = await c.post("/query_batch", json={"questions": ["Alpha"],
                                                           "namespace": "new"})
                noop = await c.post("/update", json={})
                gen0 = (await c.get("/health")).json()["index"]["generation"]
                await c.post("/update", json={"add": tenants})
                ids = await c.post("/query", json={"question": "Alpha", "k": 10,
                                                   "namespace": "a",
                                                   "filter": ["t1", "t3"]})
                unknown = await c.post("/query", json={"question": "Alpha", "namespace": "a",
                                                       "filter": ["nope"]})
                others = await c.post("/query", json={"question": "Alpha", "namespace": "a",
                                                      "filter": ["t0", "t1", pid]})
                key = await c.post("/query", json={"question": "Alpha", "namespace": "a",
                                                   "filter": {"secret_key": 2}})
                return fresh, batch, noop, gen0, ids, unknown, others, key
        finally:
            await svc.stop()
    fresh, batch, noop, gen0, ids, unknown, others, key = asyncio.run(run())
    assert fresh.status_code == 200 and fresh.json()["passages"] == []
    assert batch.status_code == 200 and batch.json()["results"][0]["passages"] == []
    assert noop.status_code == 200 and noop.json()["generation"] == gen0 == 0
    assert noop.json()["changes"] == {}
    assert ids.status_code == 200, ids.text
    assert [p["id"] for p in ids.json()["passages"]] and \
        {p["id"] for p in ids.json()["passages"]} <= {"t1", "t3"}
    assert unknown.status_code == 404 and "nope" in unknown.json()["error"]
    # another tenant's ids and keys: unknown here, and nothing of theirs named
    assert others.status_code == 404 and "'t0'" in others.json()["error"]
    assert "'t1'" not in others.json()["error"]
    assert key.status_code == 404 and "secret_key" in key.json()["error"]
    assert "the keys present are ['namespace']" in key.json()["error"]


def test_cors_is_off_unless_an_origin_is_named(index_dir):
    """Issue 70: ``serve --cors-origin`` lets a front end on another origin call the
    service (its preflight answered before the key check; the request itself still needs
    the key); without it, no CORS headers and OPTIONS is not allowed."""
    import asyncio
    import httpx
    from evireform.service import RetrievalService, create_app
    pre = {"Origin": "https://app.example.org", "Access-Control-Request-Method": "POST",
           "Access-Control-Request-Headers": "authorization,content-type"}

    async def ask(origins):
        svc = RetrievalService(index_dir, EMB)
        app = create_app(svc, api_key="s3cret", cors_origins=origins)
        await svc.start()
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                         base_url="http://t") as c:
                opt = await c.options("/query", headers=pre)
                bad = await c.options("/query", headers={**pre, "Origin": "https://evil.example"})
                q = await c.post("/query", json={"question": QUESTIONS[0], "k": 2},
                                 headers={"Origin": "https://app.example.org",
                                          "Authorization": "Bearer s3cret"})
                noauth = await c.post("/query", json={"question": QUESTIONS[0], "k": 2},
                                      headers={"Origin": "https://app.example.org"})
                return opt, bad, q, noauth
        finally:
            await svc.stop()
    opt, bad, q, noauth = asyncio.run(ask(["https://app.example.org"]))
    assert opt.status_code == 200
    assert opt.headers["access-control-allow-origin"] == "https://app.example.org"
    assert "access-control-allow-origin" not in bad.headers
    assert q.status_code == 200 and q.headers["access-control-allow-origin"] == \
        "https://app.example.org"
    assert noauth.status_code == 401
    opt, _, q, _ = asyncio.run(ask(()))
    assert opt.status_code != 200 and "access-control-allow-origin" not in opt.headers
    assert "access-control-allow-origin" not in q.headers


def test_a_loopback_service_refuses_other_host_names(index_dir):
    """Issue 69 (DNS rebinding): a service bound to loopback answers requests addressed to
    its loopback names only; a page whose name was rebound to 127.0.0.1 sends its own
    name in Host and gets 421, key or no key."""
    import asyncio
    import httpx
    from evireform.service import RetrievalService, create_app
    from evireform.service.guard import LOOPBACK_HOSTS, _host_name
    assert _host_name(b"[::1]:8000") == "::1" and _host_name(b"LocalHost:80") == "localhost"
    svc = RetrievalService(index_dir, EMB)
    app = create_app(svc, allowed_hosts=LOOPBACK_HOSTS)

    async def ask():
        await svc.start()
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                         base_url="http://127.0.0.1:8000") as c:
                ok = await c.post("/query", json={"question": QUESTIONS[0], "k": 2})
                v6 = await c.get("/health", headers={"Host": "[::1]:8000"})
                evil = await c.post("/query", json={"question": QUESTIONS[0], "k": 2},
                                    headers={"Host": "evil.example:8000"})
                evil_page = await c.get("/", headers={"Host": "evil.example"})
                return ok, v6, evil, evil_page
        finally:
            await svc.stop()
    ok, v6, evil, evil_page = asyncio.run(ask())
    assert ok.status_code == 200 and v6.status_code == 200
    assert evil.status_code == 421 and evil_page.status_code == 421
    assert "127.0.0.1" in evil.json()["error"]


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
                    ("files", ("team//x.md", b"# x\n\ny\n"))])
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
    assert o["again"].json()["generation"] == 2
    assert o["again"].json()["passages"] == 12  # replaced, not added
    assert o["del"].status_code == 200
    assert "uploads/archive.pdf" not in {s["source"] for s in o["gone"].json()["sources"]}
    assert "uploads/note.md" in {s["source"] for s in o["gone"].json()["sources"]}
    assert o["big"].status_code == 413 and o["empty"].status_code in (400, 422)
    assert not (svc.uploads_dir / "blob.bin").exists()
    assert (svc.uploads_dir / "note.md").read_bytes().startswith(b"# Dana\n\nDana Ruiz left")


def test_uploads_read_under_the_services_read_limits(tmp_path):
    """Issue 69: `serve --read-limit` holds for POST /documents: a CSV of more rows than the
    service's setting is skipped with the reason naming the setting; the same file within
    it is indexed."""
    from evireform.formats import ReadLimits
    from evireform.service import RetrievalService, create_app
    from evireform.cli import main
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
