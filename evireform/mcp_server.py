"""A saved index as an MCP server (``evireform mcp IDX``; extra ``mcp``: the official MCP
Python SDK, 2.x).

One tool and one resource, over stdio (what desktop assistants launch) or streamable HTTP
(``--transport http``, at ``/mcp``):

- ``retrieve(question, k=10, filter=None, method="evireform", namespace=None)``: the
  passages for a question, as the result record :mod:`evireform.records` defines (what
  ``query --json`` prints and ``POST /query`` answers: passages with their text, metadata
  and score parts, and the method's trace) with the index generation that answered it;
  ``filter`` is a where clause over metadata or a list of passage ids
  (:mod:`evireform.filters`).  A refused request (a malformed filter, a key the index
  lacks) is a tool error carrying the reason.
- ``evireform://index``: the index's stats (passages, propositions, embedder, generation),
  as ``GET /health`` reports them.

Questions go through the same :class:`~evireform.service.RetrievalService` as ``evireform
serve`` (micro-batches, a new generation written by ``evireform update`` picked up), so an
answer equals ``/query``'s for the same index.
"""
import asyncio
import json
from typing import Any

from .service.models import MAX_QUESTION_CHARS
from .service.resident import Overloaded, RetrievalService, Unavailable

INDEX_URI = "evireform://index"


def _sdk():
    try:
        from mcp.server.mcpserver import MCPServer
    except ImportError as exc:
        raise ImportError("evireform mcp needs the official MCP SDK 2.x: "
                          "pip install 'evireform[mcp]'") from exc
    return MCPServer


def create_server(service: RetrievalService, *, max_k: int = 1000):
    """An ``mcp.server.mcpserver.MCPServer`` answering from ``service`` (started on the
    first request, in the server's event loop)."""
    from mcp.server.mcpserver.exceptions import ToolError

    from typing import Annotated, Literal
    from pydantic import Field
    from .application import METHODS
    METHOD_NAMES = tuple(METHODS)  # noqa: N806 - the Literal's values
    MCPServer = _sdk()
    from . import __version__
    server = MCPServer(name="evireform", version=__version__,
                       instructions="Multi-hop passage retrieval over one document index: "
                                    "call retrieve with a question; each passage comes with "
                                    "its text, source metadata and score.")
    started: list[Any] = []
    lock = asyncio.Lock()

    async def ready() -> RetrievalService:
        async with lock:
            if not started:
                await service.start()
                started.append(True)
        return service

    @server.tool(description=(
        "Retrieve the passages that answer a question, multi-hop (EviReform: the first "
        "passages' bridge entities become residual queries). Returns the ranked passages "
        "with their text, metadata (source) and score parts, the method's trace, and the "
        "index generation. filter: a where clause over passage metadata, e.g. "
        "{\"source\": \"notes/a.md\"} or {\"year\": {\"$gte\": 2000}}, or a list of passage "
        f"ids. method: one of {', '.join(METHODS)}."))
    async def retrieve(
            question: Annotated[str, Field(
                strict=True, min_length=1, max_length=MAX_QUESTION_CHARS,
                description="the question, in words (at most "
                            f"{MAX_QUESTION_CHARS:,} characters)")],
            k: Annotated[int, Field(strict=True, ge=1, le=max_k,
                                    description="how many passages to return")] = 10,
            filter: Annotated[dict[str, Any] | list[str] | None, Field(
                description="a where clause over passage metadata ({\"source\": "
                            "\"notes/a.md\"}, {\"year\": {\"$gte\": 2000}}) or a list "
                            "of passage ids; null for the whole index")] = None,
            method: Annotated[Literal[METHOD_NAMES], Field(  # type: ignore[valid-type]
                description="the retrieval method (evireform: the default)")] = "evireform",
            namespace: Annotated[str | None, Field(
                strict=True, min_length=1, max_length=1000,
                description="a tenant's namespace: only its passages are searched")] = None
    ) -> dict[str, Any]:
        # a refusal reaches the caller as a tool error with its reason (what /query's 4xx
        # and 503 say); anything else stays a crash whose text stays on the server
        if not isinstance(question, str) or not question.strip():
            raise ToolError("question: give a non-blank question")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= max_k:
            raise ToolError(f"k: an integer from 1 to {max_k}")
        if method not in METHODS:
            raise ToolError(f"method: one of {', '.join(METHODS)}")
        svc = await ready()
        try:
            res, gen = await svc.query(question, k, method,
                                       svc.request_filter(filter, namespace))
        except (Overloaded, Unavailable, ValueError) as exc:  # FilterTargetMissing too
            raise ToolError(str(exc)) from None
        return {**res.to_dict(), "generation": gen}

    @server.resource(INDEX_URI, name="index", mime_type="application/json",
                     description="the index served: passages, propositions, embedder, "
                                 "generation")
    def index_stats() -> str:
        return json.dumps(service.health())

    return server


def bearer_only(app: Any, api_key: str) -> Any:
    """``app`` (ASGI) answering HTTP requests only with ``Authorization: Bearer
    <api_key>`` (compared in constant time); others get 401 with a JSON error."""
    import hmac
    want = api_key.encode()

    async def guarded(scope, receive, send):
        if scope["type"] == "http":
            header = dict(scope.get("headers") or ()).get(b"authorization") or b""
            scheme, _, token = header.partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(token.strip(), want):
                body = b'{"error": "missing or wrong bearer token"}'
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode()),
                                        (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)
    return guarded


def run(service: RetrievalService, *, transport: str = "stdio", host: str = "127.0.0.1",
        port: int = 8765, banner: str | None = None, api_key: str | None = None) -> None:
    """Serve until interrupted: over stdio (the protocol on stdout, nothing else there), or
    streamable HTTP on ``host:port`` at ``/mcp`` (``banner`` on stderr once bound;
    ``api_key``: every HTTP request must carry it as a bearer token)."""
    import sys

    server = create_server(service)
    if transport == "stdio":
        server.run("stdio")
        return
    if transport != "http":
        raise ValueError(f"transport: stdio or http, not {transport!r}")
    import uvicorn

    from .service.app import _bound_socket
    app = server.streamable_http_app(host=host)
    if api_key:
        app = bearer_only(app, api_key)
    sock = _bound_socket(host, port)
    if banner:
        print(banner, file=sys.stderr, flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
