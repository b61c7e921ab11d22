"""What the service's tests share (tests/test_service_*.py, and the page, MCP and OpenAPI
clients' tests): an index of numbered records, a served index in a thread, the HTTP client."""

import os
import socket
import subprocess
import sys
import time

import pytest

from evireform import PropositionIndex
from evireform.embed import HashingEmbedder

pytest.importorskip("fastapi")

pytest.importorskip("uvicorn")

httpx = pytest.importorskip("httpx")

HTTP = httpx.Client(timeout=60)  # generous: a cold CI machine compiles kernels on first use

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


# --------------------------------------------------------------------------- in-process engine
def _service(index_dir, **kw):
    from evireform.service import RetrievalService
    return RetrievalService(index_dir, EMB, **kw)
