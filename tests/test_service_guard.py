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
    assert _host_name(b"[::1]") == "::1"
    for bad in (b"[::1]evil.example", b"[::1]:80x", b"[::1", b"[::1]:"):  # issue 81
        assert _host_name(bad) not in LOOPBACK_HOSTS, bad
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


def test_a_service_refuses_another_sites_pages(index_dir):
    """Issue 81 (cross-site writes): keyed or not, a request that is not a read sent by a
    page of another site (its Origin, or Sec-Fetch-Site: cross-site) is refused with 403:
    a multipart POST /documents needs no CORS preflight, and Host says localhost.  The
    service's own page (same origin), clients that are not browsers, and the origins named
    with --cors-origin go through; reads are CORS's; "*" names every origin on a keyed
    service and is refused without a key."""
    import asyncio

    import httpx
    import pytest

    from evireform.service import RetrievalService, create_app
    from evireform.service.guard import LOOPBACK_HOSTS
    svc = RetrievalService(index_dir, EMB)
    keyless = create_app(svc, allowed_hosts=LOOPBACK_HOSTS,
                         cors_origins=["https://app.example.org"])
    keyed = create_app(svc, api_key="s3cret", allowed_hosts=LOOPBACK_HOSTS)
    keyed_any = create_app(svc, api_key="s3cret", allowed_hosts=LOOPBACK_HOSTS,
                           cors_origins=["*"])
    q = {"question": QUESTIONS[0], "k": 2}
    upload = {"files": ("x.md", b"# Planted\n\nPlanted by a page.\n")}
    evil = {"Origin": "https://evil.example"}

    async def run():
        await svc.start()
        try:
            out = {}
            for name, app in (("keyless", keyless), ("keyed", keyed), ("any", keyed_any)):
                async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                             base_url="http://localhost:8000") as c:
                    auth = {"Authorization": "Bearer s3cret"} if name != "keyless" else {}
                    out[name] = {
                        "docs": await c.post("/documents", files=upload,
                                             headers={**evil, **auth}),
                        "fetch": await c.post("/update", json={"delete": ["p0"]}, headers={
                            "Sec-Fetch-Site": "cross-site", **auth}),
                        "null": await c.post("/query", json=q, headers={"Origin": "null",
                                                                       **auth}),
                        "own": await c.post("/query", json=q, headers={
                            "Origin": "http://localhost:8000", "Sec-Fetch-Site":
                            "same-origin", **auth}),
                        "named": await c.post("/query", json=q, headers={
                            "Origin": "https://app.example.org", **auth}),
                        "curl": await c.post("/query", json=q, headers=auth),
                        "read": await c.get("/sources", headers={**evil, **auth})}
            return out
        finally:
            await svc.stop()
    got = asyncio.run(run())
    k = {n: r.status_code for n, r in got["keyless"].items()}
    assert k["docs"] == k["fetch"] == k["null"] == 403, k
    assert "--cors-origin" in got["keyless"]["docs"].json()["error"]
    assert k["own"] == k["named"] == k["curl"] == k["read"] == 200, k
    keyed_codes = {n: r.status_code for n, r in got["keyed"].items()}
    assert keyed_codes["docs"] == keyed_codes["fetch"] == keyed_codes["null"] == \
        keyed_codes["named"] == 403, keyed_codes  # no origin named on this one
    assert "--api-key-env" not in got["keyed"]["docs"].json()["error"]
    assert keyed_codes["own"] == keyed_codes["curl"] == keyed_codes["read"] == 200
    any_codes = {n: r.status_code for n, r in got["any"].items()}
    assert 403 not in any_codes.values() and any_codes["docs"] == 200, any_codes
    with pytest.raises(ValueError, match="'\\*' on a service without a key"):
        create_app(svc, cors_origins=["*"])
    create_app(svc, api_key="s3cret", cors_origins=["*"])  # with a key: the key decides
