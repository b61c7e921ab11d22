"""The ASGI guard in front of the application: bearer token, body cap, metrics per
endpoint and status, and a JSON answer for anything that escapes."""

import errno
import hashlib
import hmac
import json
import logging
import re
import time
from dataclasses import dataclass

from .metrics import Metrics

log = logging.getLogger("evireform.service")


class _BodyTooLarge(Exception):
    """Raised by the guard's ``receive`` when a streamed body passes the cap."""


def _host_name(header: bytes | None) -> str:
    """The host name of a ``Host`` header, without its port ("[::1]:8000" -> "::1")."""
    h = (header or b"").decode("latin-1").strip().lower()
    if h.startswith("["):  # an IPv6 literal: only ":port" may follow its bracket
        end = h.find("]")
        rest = h[end + 1:] if end > 0 else None
        if rest is None or not (rest == "" or (rest[:1] == ":" and rest[1:].isdigit())):
            return h  # "[::1]evil.example": no loopback name
        return h[1:end]
    return h.rsplit(":", 1)[0] if h.count(":") == 1 else h


#: a loopback service's own names
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")

#: what a tenant's namespace may be named: its uploads are kept in a folder of that name
TENANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class Tenant:
    """Whom a tenant key lets in: one namespace, read-only unless ``write``."""

    namespace: str
    write: bool = False


def read_tenant_keys(text: str, where: str = "the tenant keys") -> dict[str, Tenant]:
    """Tenant keys from JSON: ``{"KEY": {"namespace": "acme", "write": true}, ...}`` (or
    ``"KEY": "acme"``, read-only).  Every key at least 16 characters without whitespace, every
    namespace a name of letters, digits, ``.``, ``_`` and ``-`` (at most 64, not starting
    with a dot or dash); ``ValueError`` naming ``where`` and what is wrong, never the key."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(raw, dict) or not raw:
        raise ValueError(f"{where}: a JSON object of key -> {{\"namespace\": ..., "
                         "\"write\": true|false}, with at least one key")
    out: dict[str, Tenant] = {}
    for n, (key, spec) in enumerate(raw.items(), 1):
        if len(key) < 16 or any(c.isspace() for c in key):
            raise ValueError(f"{where}: key {n} is shorter than 16 characters or holds "
                             "whitespace")
        if isinstance(spec, str):
            spec = {"namespace": spec}
        if not isinstance(spec, dict) or set(spec) - {"namespace", "write"}:
            raise ValueError(f"{where}: key {n}: give {{\"namespace\": NAME, \"write\": "
                             "true|false}")
        ns, write = spec.get("namespace"), spec.get("write", False)
        if not isinstance(ns, str) or not TENANT_NAME.fullmatch(ns):
            raise ValueError(f"{where}: key {n}: namespace {ns!r:.80} is not a name of "
                             "letters, digits, '.', '_' and '-' (at most 64, not starting "
                             "with '.', '_' or '-')")
        if not isinstance(write, bool):
            raise ValueError(f"{where}: key {n}: write must be true or false")
        out[key] = Tenant(ns, write)
    return out


def tenant_digests(tenants) -> dict[bytes, Tenant]:
    """Tenant keys by their SHA-256 digest (what :func:`principal` looks them up by)."""
    return {hashlib.sha256(k.encode()).digest(): t for k, t in (tenants or {}).items()}


def principal(header: bytes | None, api_key: bytes | None, tenants: dict[bytes, Tenant]):
    """Who an ``Authorization`` header is: ``"operator"`` (``api_key``, or anyone when
    there are no keys at all), the :class:`Tenant` whose key (by SHA-256 digest, compared
    in constant time) it carries, or None."""
    if api_key is None and not tenants:
        return _Guard.OPERATOR
    scheme, _, token = (header or b"").partition(b" ")
    if scheme.lower() != b"bearer":
        return None
    token = token.strip(b" ")
    if api_key is not None and hmac.compare_digest(token, api_key):
        return _Guard.OPERATOR
    digest = hashlib.sha256(token).digest()
    for known, tenant in tenants.items():
        if hmac.compare_digest(digest, known):
            return tenant
    return None


class _Guard:
    """Pure ASGI middleware (cheaper than Starlette's BaseHTTPMiddleware): bearer token,
    body-size limit, metrics per endpoint and status, and a JSON 500 for anything that
    escapes the application (never a traceback).

    The body cap counts the bytes as they arrive (a chunked body has no ``Content-Length``),
    so no request can make the process hold more than ``max_body`` bytes of it; the bearer
    scheme is matched case-insensitively (RFC 7235) and the key compared in constant time;
    one response per request whatever fails after it started."""

    ENDPOINTS = ("/health", "/query", "/query_batch", "/update", "/metrics", "/documents",
                 "/sources")
    #: the paths whose bodies are files (multipart uploads): capped at ``max_upload``
    UPLOADS = ("/documents",)
    #: answered without the key: the health probe, and what a browser or a client generator
    #: opens first (the search page and its files, the API docs, the schema), none of which
    #: holds index data
    PUBLIC = ("/health", "/", "/docs", "/redoc", "/openapi.json")

    @classmethod
    def public(cls, path: str) -> bool:
        return path in cls.PUBLIC or (path.startswith("/static/") and "/" not in path[8:])

    #: what a tenant key may not do: the service's metrics are the operator's (all tenants)
    OPERATOR_ONLY = ("/metrics",)
    #: the paths that change the index: a read-only tenant key is refused there
    WRITES = ("/update", "/documents")

    def __init__(self, app, metrics: Metrics, api_key, max_body: int, allowed_hosts=None,
                 max_upload: int | None = None, cors_origins=(), tenants=None):
        self.app, self.m, self.max_body = app, metrics, max_body
        #: the web origins whose pages may call the service (CORS), which a cross-site
        #: request of a keyless service may come from
        self.cors_origins = frozenset(o.rstrip("/").lower() for o in cors_origins)
        self.max_upload = max_body if max_upload is None else max_upload
        #: the names a request's Host header may give (None: any): a service bound to
        #: loopback answers only its loopback names, so a page on another site whose name
        #: was rebound to 127.0.0.1 (DNS rebinding) is refused
        self.allowed_hosts = None if allowed_hosts is None else \
            frozenset(h.lower() for h in allowed_hosts)
        if api_key is not None and (not api_key or api_key != api_key.strip()
                                    or any(c in api_key for c in " \t\r\n")):
            raise ValueError("the API key is empty or holds whitespace (a key read with its "
                             "newline would lock every client out); strip it")
        self.api_key = api_key.encode() if api_key is not None else None
        #: tenant keys by their SHA-256 (a lookup that compares digests, not keys)
        self.tenants = tenant_digests(tenants)
        if self.api_key is not None and hashlib.sha256(self.api_key).digest() in self.tenants:
            raise ValueError("the operator's key (--api-key-env) is also a tenant key")

    #: the methods that change nothing (a browser's cross-site reads are CORS's to allow)
    SAFE_METHODS = ("GET", "HEAD", "OPTIONS")

    def _cross_site(self, headers: dict[bytes, bytes]) -> bool:
        """Whether a browser marks the request as sent by a page of another site: an
        ``Origin`` that is neither the service's own (its ``Host``) nor one of
        ``cors_origins``, or ``Sec-Fetch-Site`` other than same-origin / none.  Clients
        that are not browsers send neither."""
        if "*" in self.cors_origins:  # every origin named (a keyed service only)
            return False
        origin = headers.get(b"origin")
        if origin is not None:
            o = origin.decode("latin-1").strip().rstrip("/").lower()
            if o in self.cors_origins:
                return False
            own = (headers.get(b"host") or b"").decode("latin-1").strip().lower()
            return o == "null" or o.partition("://")[2] != own
        site = (headers.get(b"sec-fetch-site") or b"").strip().lower()
        return site not in (b"", b"same-origin", b"none")

    #: who a request is: the operator (the ``api_key``, or anyone without keys), a
    #: :class:`Tenant`, or nobody
    OPERATOR = "operator"

    def _principal(self, header: bytes | None):
        """:attr:`OPERATOR`, the :class:`Tenant` whose key the bearer token is, or None."""
        return principal(header, self.api_key, self.tenants)

    async def _send_json(self, send, status: int, message: str, headers=()):
        body = json.dumps({"error": message}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()), *headers]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        path = scope.get("path", "")
        endpoint = path if path in self.ENDPOINTS else \
            "/passages" if path.startswith("/passages/") else "other"
        cap = self.max_upload if path in self.UPLOADS else self.max_body
        status = [500]
        started = [False]
        seen = [0]

        over = [False]

        async def counting_send(msg):
            if msg["type"] == "http.response.start":
                if started[0]:
                    return  # one response per request
                if over[0]:  # the body passed the cap: 413, whatever the framework said
                    started[0] = True
                    status[0] = 413
                    await self._send_json(send, 413, f"request body over {cap} bytes")
                    return
                started[0] = True
                status[0] = msg["status"]
            elif over[0]:
                return
            await send(msg)

        async def capped_receive():
            msg = await receive()
            if msg.get("type") == "http.request":
                seen[0] += len(msg.get("body") or b"")
                if seen[0] > cap:
                    over[0] = True
                    raise _BodyTooLarge()
            return msg
        try:
            headers = dict(scope.get("headers") or ())
            if self.allowed_hosts is not None and \
                    _host_name(headers.get(b"host")) not in self.allowed_hosts:
                await self._send_json(counting_send, 421, "this service answers requests "
                                      "addressed to " + ", ".join(sorted(self.allowed_hosts))
                                      + " only")
                return
            if scope.get("method") not in self.SAFE_METHODS and self._cross_site(headers):
                # a browser reaches a local service for any page it shows: a write (or a
                # question) sent by another site's page is refused, keyed or not (issue 81:
                # a multipart POST /documents needs no CORS preflight, and the Host check
                # cannot tell, the browser says localhost); the origins named with
                # --cors-origin go through ("*": any, with a key only)
                keyless = self.api_key is None and not self.tenants
                await self._send_json(counting_send, 403, "a request from another site's "
                                      "web page is refused; name its origin with "
                                      "--cors-origin" + (", or set a key (--api-key-env)"
                                                         if keyless else ""))
                return
            who = self._principal(headers.get(b"authorization"))
            if not self.public(path) and who is None:
                await self._send_json(counting_send, 401, "missing or wrong bearer token",
                                      [(b"www-authenticate", b"Bearer")])
                return
            if isinstance(who, Tenant):
                if path in self.OPERATOR_ONLY:
                    await self._send_json(counting_send, 403, "a tenant key does not read "
                                          "the service's metrics (the operator's key does)")
                    return
                if path in self.WRITES and not who.write:
                    await self._send_json(counting_send, 403, "this key reads namespace "
                                          f"{who.namespace!r} and changes nothing")
                    return
            # the endpoints read whom they answer (request.state.tenant: None for the
            # operator) and confine a tenant to its namespace
            scope.setdefault("state", {})["tenant"] = who if isinstance(who, Tenant) else None
            size = headers.get(b"content-length")
            if size is not None and (not size.isdigit() or int(size) > cap):
                await self._send_json(counting_send, 413, f"request body over {cap} bytes")
                return
            try:
                await self.app(scope, capped_receive, counting_send)
            except _BodyTooLarge:
                if not started[0]:
                    await self._send_json(counting_send, 413, f"request body over {cap} bytes")
            except Exception as exc:
                if not started[0]:
                    code, msg = _error_of(exc)
                    await self._send_json(counting_send, code, msg)
        finally:
            code = str(status[0])
            self.m.requests.labels(endpoint, code).inc()
            if status[0] >= 400:
                self.m.errors.labels(endpoint, code).inc()
            self.m.latency.labels(endpoint).observe(time.perf_counter() - t0)


def _error_of(exc) -> tuple[int, str]:
    """The status and message an unexpected exception is answered with: a full disk is 507
    naming the cause, anything else a plain 500 (never a traceback or a server path)."""
    seen = set()
    while exc is not None and id(exc) not in seen:  # the cause may be wrapped
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return 507, "the index could not be written: no space left on the server's disk"
        if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
            return 507, ("the index could not be written: a file would pass the server's "
                         "file-size limit")
        if isinstance(exc, _BodyTooLarge):
            return 413, "request body too large"
        exc = exc.__cause__ or exc.__context__
    return 500, "internal error"
