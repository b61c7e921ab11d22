"""The FastAPI application over a :class:`~evireform.service.resident.RetrievalService`,
and the server that runs it (``evireform serve``)."""

import errno
import faulthandler
import logging
import sys
import time
from contextlib import asynccontextmanager
from typing import Any, Mapping, Sequence

from ..application import DeletesEverything
from ..corpus import DuplicatePassageIds
from ..embed import EmbedderOutputError
from ..filters import FilterTargetMissing, json_schemas
from ..index import PassageConflict
from .guard import LOOPBACK_HOSTS, Tenant, _error_of, _Guard
from .models import BatchOut, QueryOut, http_models, metadata_schemas
from .resident import Overloaded, RetrievalService, Unavailable, _no_paths

log = logging.getLogger("evireform.service")


def create_app(service: RetrievalService, *, api_key: str | None = None,
               max_body: int = 1 << 20, max_k: int = 1000, max_questions: int = 256,
               cors_origins: Sequence[str] = (), allowed_hosts: Sequence[str] | None = None,
               max_upload: int = 64 << 20, tenants: Mapping[str, Tenant] | None = None):
    """The FastAPI application over ``service`` (see the module docstring).
    ``cors_origins``: the web origins (``https://app.example.org``) whose pages may call the
    service from a browser (CORS; none by default): their preflight requests are answered
    before the key check, the requests themselves still need the key.  Keyed or not, a
    request that is not a read (POST ...) from another site's page (its ``Origin``, or
    ``Sec-Fetch-Site``) is refused with 403 unless its origin is one of these; ``"*"``
    names every origin, and is refused without a key.  ``allowed_hosts``:
    the names a request's ``Host`` may give, others answered 421 (None: any; :func:`serve`
    bound to loopback passes its loopback names).  ``max_upload``: the largest body
    ``POST /documents`` takes (files, bytes).  ``tenants``: tenant keys
    (:func:`~evireform.service.guard.read_tenant_keys`), each confined to its namespace on
    every endpoint: its questions search only it, its updates and uploads land only in it
    (uploads kept under ``uploads/NAMESPACE/``), ``/sources`` and ``/passages`` show only
    it, every answer reads as an index of its own would show it
    (:meth:`~evireform.service.RetrievalService.tenant_view`), a request naming another
    namespace is refused (403), a read-only key changes nothing, and ``/metrics`` is the
    operator's (``api_key``, which reads and writes everything)."""
    try:
        from fastapi import FastAPI, File, Request, UploadFile
        from fastapi.exceptions import RequestValidationError
        from fastapi.openapi.utils import get_openapi
        from fastapi.responses import JSONResponse, Response
        from starlette.exceptions import HTTPException as StarletteHTTPException
    except ImportError as exc:
        raise ImportError("the service needs the 'serve' extra: "
                          "pip install 'evireform[serve]'") from exc

    M = http_models(max_k, max_questions)
    QueryIn, BatchIn, UpdateIn = M.QueryIn, M.BatchIn, M.UpdateIn
    UpdateOut, HealthOut, ErrorOut = M.UpdateOut, M.HealthOut, M.ErrorOut
    DocumentsOut, SourcesOut, PassageOut = M.DocumentsOut, M.SourcesOut, M.PassageOut

    class PrometheusText(Response):
        media_type = "text/plain; version=0.0.4; charset=utf-8"  # prometheus_client's

    why = {400: "a request the index cannot answer (a malformed filter)",
           401: "missing or wrong bearer token",
           403: "a tenant key naming another namespace, changing the index with a read-only "
                "key, or reading /metrics",
           404: "a passage id or metadata key the index does not have (a filter's, one to "
                "delete), or a delete_where no passage matches",
           409: "a passage id the index holds with other content (upsert replaces it), "
                "one id given to two passages of the request, or a delete_where matching "
                "every passage (of the index or the namespace) without all: true",
           413: f"request body over {max_body} bytes ({max_upload} for /documents)",
           422: "a body that is not valid JSON or does not match the schema",
           500: "internal error (never a traceback)",
           503: "the queue is full (Retry-After) or the index files cannot be served",
           507: "no space left on the server's disk (or a file-size limit) for the new "
                "generation"}

    def errors(*codes):
        out = {}
        for c in codes:
            if (c == 401 and api_key is None and not tenants) or (c == 403 and not tenants):
                continue
            out[c] = {"model": ErrorOut, "description": why[c]}
            if c == 503:
                out[c]["headers"] = {"Retry-After": {
                    "description": "seconds to wait (a full queue)",
                    "schema": {"type": "integer"}}}
        return out

    @asynccontextmanager
    async def lifespan(app):
        await service.start()
        yield
        await service.stop()

    from .. import __version__
    app = FastAPI(title="evireform", version=__version__, lifespan=lifespan,
                  docs_url=None, redoc_url=None,  # bundled instead: _pages
                  description="EviReform multi-hop retrieval over one index")
    m = service.metrics

    def error(status: int, message: str, headers=None):
        return JSONResponse({"error": message}, status_code=status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request, exc):
        errs = exc.errors()
        first = errs[0] if errs else {}
        if first.get("type") == "json_invalid":
            return error(422, "the request body is not valid JSON "
                              f"({(first.get('ctx') or {}).get('error', 'decode error')})")
        # pydantic's own steps (a validator's name, a union member) are not the caller's
        where = ".".join(str(x) for x in first.get("loc", ()) if x != "body"
                         and not any(c in str(x) for c in "[("))
        msg = str(first.get("msg", "invalid request")).removeprefix("Value error, ")
        return error(422, f"{where or 'body'}: {msg}")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request, exc):
        return error(exc.status_code, str(exc.detail), getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def crashed(request, exc):
        code, msg = _error_of(exc)
        return error(code, msg)

    def answer(res, gen: int, graph: bool, took: float) -> dict[str, Any]:  # plain JSON types only
        # the result record every door prints (RetrievalResult.to_dict), and when it ran
        return {**res.to_dict(graph=graph), "generation": gen, "took_ms": round(took * 1e3, 3)}

    @app.get("/health", response_model=HealthOut, operation_id="health", tags=["service"],
             summary="Whether the service can answer",
             description="200 with the index served (passages, propositions, embedder, "
                         "generation) when questions are answered; 503 when the index files "
                         "cannot be served. Needs no API key.",
             responses={503: {"model": HealthOut, "description": "the index files cannot be "
                              "served"}, 500: errors(500)[500]})
    async def health():
        h = service.health()
        return JSONResponse(h, status_code=200 if h["status"] == "ok" else 503)

    class _OtherNamespace(Exception):
        """A tenant's request naming a namespace that is not its own."""

    def scoped(request, asked: str | None) -> str | None:
        """The namespace a request runs in: its tenant key's (a request naming another is
        refused), or the one it asks for under the operator's key."""
        t = getattr(request.state, "tenant", None)
        if t is None:
            return asked
        if asked is not None and asked != t.namespace:
            raise _OtherNamespace(f"this key reads namespace {t.namespace!r} only")
        return t.namespace

    def seen(request, out, generation: int | None = None):
        """``out`` as the request's key reads it: a tenant's as an index of its own would
        show it (ids, uploads' sources, positions, counts: ``service.tenant_view``)."""
        t = getattr(request.state, "tenant", None)
        return out if t is None else service.tenant_view(out, t.namespace, generation)

    def said(request, message: str) -> str:
        """An error message as the request's key reads it (a tenant: its ids)."""
        t = getattr(request.state, "tenant", None)
        if t is None:
            return message
        from ..application import tenant_message
        return tenant_message(message, t.namespace)

    def is_tenant(request) -> bool:
        return getattr(request.state, "tenant", None) is not None

    @app.exception_handler(_OtherNamespace)
    async def other_namespace(request, exc):
        return error(403, str(exc))

    def refused(exc: Exception):
        """The answer to a question the service could not answer: a full queue or files it
        cannot serve (503), its own embedder's fault (500), a filter naming what the index
        lacks (404), anything else the request got wrong (400)."""
        if isinstance(exc, Overloaded):
            return error(503, str(exc), {"Retry-After": "1"})
        if isinstance(exc, Unavailable):
            return error(503, str(exc))
        if isinstance(exc, EmbedderOutputError):  # the server's embedder, not the request
            return error(500, str(exc))
        return error(404 if isinstance(exc, FilterTargetMissing) else 400, str(exc))

    @app.post("/query", response_model=QueryOut, operation_id="query", tags=["retrieval"],
              summary="The passages that answer a question",
              description="One question's ranked passages and the method's trace (the "
                          "record `evireform query --json` prints), with the index "
                          "generation that answered; with answer: true, also an answer "
                          "from the passages citing them (or 'not found in these "
                          "documents'). A filter or namespace restricts the "
                          "search exactly; 404 when a filter names a key or id the index "
                          "lacks, 503 with Retry-After when the queue is full.",
              responses=errors(400, 401, 403, 404, 413, 422, 500, 503))
    async def query(body: QueryIn, request: Request):
        t0 = time.perf_counter()
        ns = scoped(request, body.namespace)
        try:
            res, gen = await service.query(body.question, body.k, body.method,
                                           service.request_filter(body.filter, ns,
                                                                  is_tenant(request)))
        except (Overloaded, Unavailable, EmbedderOutputError, ValueError) as exc:
            return refused(exc)
        reply = await service.answer(body.question, res) if body.answer else None
        # a JSONResponse of plain types: FastAPI's encoder walk is skipped
        out = answer(res, gen, body.graph, time.perf_counter() - t0)
        if reply is not None:
            out["answer"] = reply.to_dict()
        return JSONResponse(seen(request, out, gen))

    @app.post("/query_batch", response_model=BatchOut, operation_id="query_batch",
              tags=["retrieval"], summary="The passages for many questions at once",
              description="Every question's result record, in the order asked, answered in "
                          "one batched pass (the same rankings as one /query each).",
              responses=errors(400, 401, 403, 404, 413, 422, 500, 503))
    async def query_batch(body: BatchIn, request: Request):
        t0 = time.perf_counter()
        ns = scoped(request, body.namespace)
        try:
            results, gen = await service.query_batch(
                body.questions, body.k, body.method,
                service.request_filter(body.filter, ns, is_tenant(request)))
        except (Overloaded, Unavailable, EmbedderOutputError, ValueError) as exc:
            return refused(exc)
        took = time.perf_counter() - t0
        return JSONResponse(seen(request, {
            "results": [answer(r, gen, body.graph, took) for r in results],
            "generation": gen, "took_ms": round(took * 1e3, 3)}, gen))

    @app.post("/update", response_model=UpdateOut, operation_id="update", tags=["index"],
              summary="Add, replace or delete passages",
              description="Adds passages (upsert: an id the index holds is replaced, else "
                          "409), deletes by id (404 for an unknown one) or by a where clause "
                          "(matching every passage only with all: true), and serves the new "
                          "generation once it is written (507 when the disk is full).",
              responses=errors(400, 401, 403, 404, 409, 413, 422, 500, 507))
    async def update(body: UpdateIn, request: Request):
        add = [{k: v for k, v in p.model_dump().items() if v is not None} for p in body.add]
        ns = scoped(request, body.namespace)
        where = body.delete_where
        if is_tenant(request) and where is not None:  # uploads named as the tenant reads them
            from ..application import tenant_source_filter
            where = tenant_source_filter(where, ns)
        try:
            return JSONResponse(seen(request, await service.update(
                add, body.upsert, body.delete, where, body.all, ns)))
        except KeyError as exc:
            return error(404, said(request, str(exc.args[0] if exc.args else exc)))
        except (PassageConflict, DuplicatePassageIds, DeletesEverything) as exc:
            return error(409, said(request, str(exc)))
        except (ValueError, TypeError) as exc:
            return error(400, said(request, _no_paths(str(exc), service.index_dir)))

    @app.post("/documents", response_model=DocumentsOut, operation_id="add_documents",
              tags=["index"], summary="Index uploaded files",
              description="Files (multipart form field 'files', at most "
                          f"{service.MAX_UPLOAD_FILES} an upload, {max_upload:,} bytes in "
                          "all) read as `evireform index` reads them (Markdown, HTML, PDF, "
                          "DOCX, PPTX, XLSX, CSV, EPUB, reStructuredText, text): each file's "
                          "result, indexed with its passage count or skipped with the reason, "
                          "then the new generation. A file's name may be a relative path "
                          "(a folder's files: notes/2024/a.md); a name uploaded before "
                          "replaces its passages; its source reads uploads/NAME.",
              responses=errors(400, 401, 403, 413, 422, 500, 507))
    async def add_documents(request: Request, files: list[UploadFile] = File(
            ..., description="the files to index", min_length=1,
            max_length=service.MAX_UPLOAD_FILES)):
        got = [(f.filename or "", await f.read()) for f in files]
        try:
            return JSONResponse(seen(request, await service.add_documents(
                got, scoped(request, None))))
        except (ValueError, TypeError) as exc:
            return error(400, _no_paths(str(exc), service.index_dir))

    @app.get("/sources", response_model=SourcesOut, operation_id="sources", tags=["index"],
             summary="The documents the index holds",
             description="Each source (a file's path below its folder, uploads/NAME for an "
                         "upload) with its passage count and title; delete one with /update "
                         "and delete_where {\"source\": ...}.",
             responses=errors(401, 500))
    async def sources(request: Request):
        return JSONResponse(seen(request, {"sources": service.sources(scoped(request, None)),
                                           "generation": service.current().number}))

    @app.get("/passages/{passage_id:path}", response_model=PassageOut,
             operation_id="passage", tags=["index"], summary="One passage by id",
             description="The passage's title, text and metadata (its id URL-encoded: "
                         "'#' as %23).",
             responses=errors(401, 403, 404, 422, 500))
    async def passage(passage_id: str, request: Request):
        try:
            return JSONResponse(seen(request, service.passage(passage_id,
                                                              scoped(request, None))))
        except KeyError as exc:
            return error(404, str(exc.args[0] if exc.args else exc))

    @app.get("/metrics", response_class=PrometheusText, operation_id="metrics",
             tags=["service"], summary="Prometheus metrics",
             description="Requests, latencies, batch sizes, queue depth and updates in "
                         "Prometheus's text format.",
             responses={200: {"description": "Prometheus text exposition",
                              "content": {PrometheusText.media_type: {
                                  "schema": {"type": "string"}}}},
                        **{c: {"description": r["description"], "content": {
                            "application/json": {"schema": {
                                "$ref": "#/components/schemas/ErrorOut"}}}}
                           for c, r in errors(401, 403, 500).items()}})
    async def metrics():
        return PrometheusText(m.text())

    _pages(app, error)

    def openapi():
        """The schema, with the bearer scheme on every endpoint but /health when a key is
        set (what a client generator needs to send it)."""
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version,
                              description=app.description, routes=app.routes)
            # the filter language, which the request models reference
            doc.setdefault("components", {}).setdefault("schemas", {}).update(
                {**json_schemas(), **metadata_schemas()})
            describe_fields(doc)
            if api_key is not None or tenants:
                doc.setdefault("components", {})["securitySchemes"] = {
                    "bearer": {"type": "http", "scheme": "bearer"}}
                for path, ops in doc["paths"].items():
                    for op in ops.values():
                        if path != "/health":
                            op["security"] = [{"bearer": []}]
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi

    if api_key is None and not tenants and "*" in cors_origins:
        raise ValueError("cors_origins '*' on a service without a key would let every web "
                         "page read and change the index; name the origins, or set a key "
                         "(--api-key-env)")
    guarded = _Guard(app, m, api_key, max_body, allowed_hosts, max_upload, cors_origins,
                     tenants)
    if not cors_origins:
        return guarded
    from starlette.middleware.cors import CORSMiddleware
    return CORSMiddleware(guarded, allow_origins=list(cors_origins),
                          allow_methods=["GET", "POST"],
                          allow_headers=["Authorization", "Content-Type"], max_age=600)


def describe_fields(doc: dict[str, Any]) -> None:
    """Every property of the schema's result records described from the ``#:`` comments
    of their classes (:func:`evireform.records.field_docs`; the response models of
    :mod:`evireform.service.models` too): one source for the code's and the API's docs."""
    from .. import records
    from . import models
    classes = {n: c for mod in (records, models) for n, c in vars(mod).items()
               if isinstance(c, type) and hasattr(c, "__annotations__")
               and c.__module__ == mod.__name__}
    for name, schema in doc.get("components", {}).get("schemas", {}).items():
        cls = classes.get(name)
        props = schema.get("properties") if isinstance(schema, dict) else None
        if cls is None or not props:
            continue
        docs = records.field_docs(cls)
        for field, prop in props.items():
            if not prop.get("description") and docs.get(field):
                prop["description"] = docs[field]


#: the search page's security policy: its own files only, no inline script or style, no
#: framing (the page sets every value from the service as text)
PAGE_CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
            "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
            "frame-ancestors 'none'")

#: the API docs pages' policy: the bundles from the service only (their inline start-up
#: script and injected styles allowed), so nothing is fetched from a CDN (ReDoc's logo)
DOCS_CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' "
            "'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; worker-src 'self' "
            "blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
            "frame-ancestors 'none'")

#: the files served under /static/: the search page's (evireform/service/static) and the
#: API docs' Swagger UI and ReDoc bundles (the fastapi-offline package's); nothing else
_ASSETS = {"page.js": ("evireform.service", "text/javascript; charset=utf-8"),
           "page.css": ("evireform.service", "text/css; charset=utf-8"),
           "swagger-ui-bundle.js": ("fastapi_offline", "text/javascript; charset=utf-8"),
           "swagger-ui.css": ("fastapi_offline", "text/css; charset=utf-8"),
           "redoc.standalone.js": ("fastapi_offline", "text/javascript; charset=utf-8"),
           "favicon.png": ("fastapi_offline", "image/png")}


def _asset(name: str) -> bytes | None:
    """The bytes of a whitelisted file under /static/ (None when its package is missing)."""
    from importlib.resources import files
    package, _ = _ASSETS[name]
    try:
        body = (files(package) / "static" / name).read_bytes()
    except (ModuleNotFoundError, FileNotFoundError):
        return None
    for cdn, own in _OWN_COPIES.get(name, ()):  # the bundle's one CDN image: our own icon
        body = body.replace(cdn, own)
    return body


#: URLs a bundle would fetch from elsewhere, and what it fetches instead (the page's
#: relative paths): ReDoc's "API docs by Redocly" logo
_OWN_COPIES = {"redoc.standalone.js": [(b"https://cdn.redoc.ly/redoc/logo-mini.svg",
                                        b"static/favicon.png")]}


def _pages(app, error) -> None:
    """What a person opens in a browser: the search page at ``/``, the API docs at ``/docs``
    (Swagger UI) and ``/redoc``, all from files installed with the package (no CDN), and
    readable without the API key (they hold no index data; the page asks for the key)."""
    from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
    from fastapi.responses import HTMLResponse, Response
    from importlib.resources import files

    page = (files("evireform.service") / "static" / "index.html").read_bytes()
    cache: dict[str, bytes | None] = {}
    nosniff = {"X-Content-Type-Options": "nosniff"}

    @app.get("/", include_in_schema=False)
    async def search_page():
        return HTMLResponse(page, headers={"Content-Security-Policy": PAGE_CSP,
                                           "Referrer-Policy": "no-referrer", **nosniff})

    @app.get("/static/{name}", include_in_schema=False)
    async def static(name: str):
        if name not in _ASSETS:
            return error(404, f"no such file: /static/{name}")
        if name not in cache:
            cache[name] = _asset(name)
        body = cache[name]
        if body is None:
            return error(404, f"/static/{name} comes with the 'serve' extra "
                              "(pip install 'evireform[serve]': fastapi-offline)")
        return Response(body, media_type=_ASSETS[name][1],
                        headers={"Cache-Control": "public, max-age=3600", **nosniff})

    def own(resp):  # the bundles' own requests stay on the service (ReDoc's CDN logo)
        resp.headers["Content-Security-Policy"] = DOCS_CSP
        resp.headers["X-Content-Type-Options"] = "nosniff"
        return resp

    @app.get("/docs", include_in_schema=False)
    async def docs():
        return own(get_swagger_ui_html(openapi_url="openapi.json", title="evireform API",
                                       swagger_js_url="static/swagger-ui-bundle.js",
                                       swagger_css_url="static/swagger-ui.css",
                                       swagger_favicon_url="static/favicon.png",
                                       oauth2_redirect_url=None,
                                       swagger_ui_parameters={"validatorUrl": None}))

    @app.get("/redoc", include_in_schema=False)
    async def redoc():
        return own(get_redoc_html(openapi_url="openapi.json", title="evireform API",
                                  redoc_js_url="static/redoc.standalone.js",
                                  redoc_favicon_url="static/favicon.png",
                                  with_google_fonts=False))


def _protocol(header_timeout: float):
    """uvicorn's h11 protocol with a header deadline: a connection that has not sent a whole
    request head within ``header_timeout`` seconds of connecting (or of starting its next
    request) is closed, so clients trickling headers cannot hold connections."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderTimeoutProtocol(H11Protocol):
        _hdr = None

        def connection_made(self, transport):
            super().connection_made(transport)
            self._arm()

        def data_received(self, data):
            if self._hdr is None and (self.cycle is None or self.cycle.response_complete):
                self._arm()
            super().data_received(data)

        def connection_lost(self, exc):
            if self._hdr is not None:
                self._hdr.cancel()
                self._hdr = None
            super().connection_lost(exc)

        def _arm(self):
            cycle = self.cycle

            def expire():
                self._hdr = None
                if self.cycle is cycle and not self.transport.is_closing():
                    self.transport.close()  # no request head in time
            self._hdr = self.loop.call_later(header_timeout, expire)
    return HeaderTimeoutProtocol


def serve(service: RetrievalService, *, host: str = "127.0.0.1", port: int = 8000,
          api_key: str | None = None, log_level: str = "warning",
          header_timeout: float = 10.0, keep_alive: float = 5.0,
          max_connections: int = 1000, banner: str | None = None,
          cors_origins: Sequence[str] = (), tenants: Mapping[str, Tenant] | None = None
          ) -> None:
    """Run the service with uvicorn until interrupted: request heads within
    ``header_timeout`` seconds, idle keep-alive connections closed after ``keep_alive``
    seconds, at most ``max_connections`` connections (beyond, 503).  The socket is bound
    first: a port in use raises ``OSError`` naming it, and ``banner`` is printed to stderr
    only once the address is bound.  A fatal signal (a memory-mapped file truncated under
    the process) leaves a traceback on stderr (``faulthandler``)."""
    try:
        import uvicorn
    except ImportError as exc:
        raise ImportError("the service needs the 'serve' extra: "
                          "pip install 'evireform[serve]'") from exc
    faulthandler.enable(sys.stderr)
    # bound to loopback: only its loopback names (DNS rebinding); bound wider, any name
    loopback = host in LOOPBACK_HOSTS or host.startswith("127.")
    app = create_app(service, api_key=api_key, cors_origins=cors_origins, tenants=tenants,
                     allowed_hosts=(*LOOPBACK_HOSTS, host) if loopback else None)
    sock = bound_socket(host, port)
    if banner:
        print(banner, file=sys.stderr, flush=True)
    config = uvicorn.Config(app, log_level=log_level, access_log=False, lifespan="on",
                            http=_protocol(header_timeout), timeout_keep_alive=keep_alive,
                            limit_concurrency=max_connections)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()


def bound_socket(host: str, port: int):
    """A listening TCP socket on ``host:port`` (IPv6 for an address with a colon), or
    ``OSError`` saying the address is in use or cannot be bound."""
    import socket
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror or exc}"
                      + (" (another process holds the port; choose another with --port)"
                         if exc.errno == errno.EADDRINUSE else "")) from None
    sock.set_inheritable(True)
    return sock
