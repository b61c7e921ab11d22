"""evireform.client without a live service: retries on a full queue, typed refusals, and
what it does with answers that are not the service's (the live end-to-end test is in
test_openapi_clients)."""
import asyncio
import email.utils
import time

import pytest

httpx = pytest.importorskip("httpx")

from evireform.client import (  # noqa: E402
    AsyncClient, BadRequest, Client, Conflict, InsufficientStorage, InvalidRequest, NotFound,
    PayloadTooLarge, ServerError, ServiceError, ServiceUnavailable, Unauthorized)

ANSWER = {"question": "q", "passages": [], "trace": {"method": "evireform", "score": "",
                                                      "residual_queries": [],
                                                      "role_events": []},
          "generation": 0, "took_ms": 1.0}


def _transport(replies, seen):
    """A mock service answering ``replies`` in turn (status, headers, json body)."""
    it = iter(replies)

    def handle(request):
        seen.append((request.method, request.url.path, request.headers.get("authorization"),
                     request.content))
        status, headers, body = next(it)
        if isinstance(body, str):
            return httpx.Response(status, headers=headers, text=body)
        return httpx.Response(status, headers=headers, json=body)
    return httpx.MockTransport(handle)


def test_a_full_queue_is_retried_after_what_the_service_asks():
    seen = []
    full = (503, {"Retry-After": "0"}, {"error": "the queue is full"})
    c = Client("http://svc", api_key="k", transport=_transport([full, full, (200, {}, ANSWER)],
                                                                seen))
    assert c.query("q", k=3, filter={"year": 2000}) == ANSWER
    assert len(seen) == 3 and all(a == "Bearer k" for _, _, a, _ in seen)
    assert b'"filter": {"year": 2000}' in seen[0][3] or b'"filter":{"year":2000}' in seen[0][3]


def test_retries_are_bounded_and_the_last_refusal_raised():
    seen = []
    full = (503, {"Retry-After": "0"}, {"error": "the queue is full"})
    c = Client("http://svc", retries=2, transport=_transport([full] * 5, seen))
    with pytest.raises(ServiceUnavailable) as e:
        c.query_batch(["a", "b"])
    assert len(seen) == 3 and e.value.status == 503 and e.value.retry_after == 0
    assert e.value.message == "the queue is full"


def test_a_503_without_retry_after_is_not_retried():
    """Index files the service cannot serve: waiting a moment would not help."""
    seen = []
    c = Client("http://svc", transport=_transport([(503, {}, {"error": "files changed"})] * 3,
                                                  seen))
    with pytest.raises(ServiceUnavailable, match="files changed"):
        c.query("q")
    assert len(seen) == 1


def test_the_wait_is_capped_and_an_http_date_read():
    later = email.utils.formatdate(time.time() + 3600, usegmt=True)
    seen = []
    c = Client("http://svc", max_wait=0.01, transport=_transport(
        [(503, {"Retry-After": later}, {"error": "full"}), (200, {}, ANSWER)], seen))
    t0 = time.monotonic()
    assert c.query("q") == ANSWER
    assert time.monotonic() - t0 < 5 and len(seen) == 2


@pytest.mark.parametrize("status,cls", [
    (400, BadRequest), (401, Unauthorized), (404, NotFound), (409, Conflict),
    (413, PayloadTooLarge), (422, InvalidRequest), (500, ServerError), (507,
                                                                         InsufficientStorage)])
def test_each_refusal_raises_its_type(status, cls):
    seen = []
    c = Client("http://svc", transport=_transport([(status, {}, {"error": "why"})], seen))
    with pytest.raises(cls) as e:
        c.update([{"text": "x"}], delete=["a"], delete_where={"source": "a.md"})
    assert isinstance(e.value, ServiceError) and e.value.status == status
    assert e.value.message == "why" and len(seen) == 1
    assert seen[0][:2] == ("POST", "/update")


def test_a_page_that_is_not_the_services_error_is_reported_as_text():
    seen = []
    c = Client("http://svc", transport=_transport([(502, {}, "<h1>Bad gateway</h1>")], seen))
    with pytest.raises(ServerError, match="Bad gateway") as e:
        c.metrics()
    assert e.value.status == 502


def test_a_refused_connection_is_retried_then_raised():
    calls = []

    def refuse(request):
        calls.append(1)
        raise httpx.ConnectError("refused", request=request)
    c = Client("http://svc", retries=2, max_wait=0, transport=httpx.MockTransport(refuse))
    with pytest.raises(httpx.ConnectError):
        c.query("q")
    assert len(calls) == 3


def test_health_answers_an_unavailable_index_without_raising():
    seen = []
    c = Client("http://svc", transport=_transport(
        [(503, {}, {"status": "unavailable", "error": "a file changed"})], seen))
    assert c.health() == {"status": "unavailable", "error": "a file changed"}


def test_the_async_client_retries_and_raises_alike():
    seen = []
    full = (503, {"Retry-After": "0"}, {"error": "full"})

    async def run():
        async with AsyncClient("http://svc", api_key="k", transport=_transport(
                [full, (200, {}, ANSWER), (404, {}, {"error": "no such passage"})],
                seen)) as c:
            first = await c.query("q")
            with pytest.raises(NotFound, match="no such passage"):
                await c.update(delete=["x"])
            return first
    assert asyncio.run(run()) == ANSWER and len(seen) == 3


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        Client(retries=-1)


# ------------------------------------------------------------------ round 6 (issue 69)
def _trickler():
    """A server that sends a 200's head and then one byte every 0.2 s, forever: (port,
    stop)."""
    import socket
    import threading
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    stop = threading.Event()

    def serve():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100000\r\n\r\n")
            while not stop.is_set():
                try:
                    conn.sendall(b" ")
                except OSError:
                    break
                time.sleep(0.2)
            conn.close()
    threading.Thread(target=serve, daemon=True).start()
    return srv.getsockname()[1], lambda: (stop.set(), srv.close())


def test_one_deadline_per_call_however_slowly_the_answer_comes():
    """The timeout bounds the whole call (every byte trickled within httpx's per-read
    timeout): the call ends within a second of it, sync and async."""
    from evireform.client import DeadlineExceeded
    port, stop = _trickler()
    try:
        c = Client(f"http://127.0.0.1:{port}", timeout=1.0, retries=0)
        t = time.monotonic()
        with pytest.raises(DeadlineExceeded):
            c.query("q")
        assert time.monotonic() - t < 2.0

        async def run():
            async with AsyncClient(f"http://127.0.0.1:{port}", timeout=1.0, retries=0) as a:
                await a.query("q")
        t = time.monotonic()
        with pytest.raises(DeadlineExceeded):
            asyncio.run(run())
        assert time.monotonic() - t < 2.0
    finally:
        stop()


def test_an_answer_past_the_size_cap_a_redirect_and_a_page_are_typed_errors():
    from evireform.client import ResponseTooLarge, UnexpectedResponse
    big = Client("http://svc", max_response_bytes=1000, transport=_transport(
        [(200, {}, {"passages": ["x" * 5000]})], []))
    with pytest.raises(ResponseTooLarge):
        big.query("q")
    moved = Client("http://svc", transport=_transport(
        [(302, {"Location": "http://login.example/"}, "")], []))
    with pytest.raises(UnexpectedResponse, match="redirected to http://login.example/"):
        moved.query("q")
    page = Client("http://svc", transport=_transport(
        [(200, {"Content-Type": "text/html"}, "<html>proxy</html>")], []))
    with pytest.raises(UnexpectedResponse, match="not JSON"):
        page.query("q")
    with pytest.raises(ValueError):
        Client("http://svc", timeout=0)
