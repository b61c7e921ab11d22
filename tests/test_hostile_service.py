"""Hostile clients of the service: surrogates in update metadata, generations written by another process, files overwritten under it, streamed bodies, trickled headers, bearer schemes, errors after the response started, a full disk, and one bounded queue for every method."""
import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
import pytest
from evireform import PropositionIndex
from evireform.cli import main

from hostile_common import REPO, EMB, _run, _index, _ps, _ranks  # noqa: F401


def _svc(ix):
    from evireform.service import RetrievalService
    return RetrievalService(ix, EMB)


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


def test_the_service_refuses_a_surrogate_in_update_metadata(tmp_path):
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


def test_the_service_serves_a_generation_written_by_the_cli(tmp_path):
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


def test_a_file_overwritten_under_the_service_is_refused_not_a_crash(tmp_path):
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


def test_a_chunked_body_is_capped_as_it_streams(live):
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


def test_clients_trickling_headers_are_dropped(live):
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


def test_bearer_scheme_any_case_and_padded_keys(live, tmp_path):
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


def test_one_response_per_error_and_disk_full_is_507(tmp_path, monkeypatch):
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


def test_batches_and_strategies_share_the_bounded_queue(tmp_path):
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
