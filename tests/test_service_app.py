"""The HTTP service's app (evireform.service.app): its answers equal the library's, its
errors are JSON, the contract it publishes is what it answers, the banner and CORS."""

import asyncio
import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from service_common import (  # noqa: F401 (fixtures among them)
    EMB, HTTP, QUESTIONS, REPO, _port, _records, _same, _service, httpx, index_dir, server,
    shared
)

from evireform import PropositionIndex
from evireform.retriever import EviReform


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
