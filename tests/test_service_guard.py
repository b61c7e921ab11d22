"""The service's guard (evireform.service.guard): body size, the API key, the Host check."""

from service_common import EMB, HTTP, QUESTIONS, Server, httpx, index_dir, shared  # noqa: F401


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
