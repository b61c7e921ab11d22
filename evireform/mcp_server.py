"""A saved index as an MCP server (``evireform mcp IDX``; extra ``mcp``: the official MCP
Python SDK, 2.x).

One tool, one prompt and one resource, over stdio (what desktop assistants launch) or
streamable HTTP (``--transport http``, at ``/mcp``):

- ``retrieve(question, k=10, filter=None, method="evireform", namespace=None,
  include_trace=False)`` (read-only): the passages for a question.  Its text content is a
  compact numbered rendering (rank, title, id, where the passage is, score, then its text)
  for the model to read; its structured content, typed by the tool's output schema, is the
  passages as the result record :mod:`evireform.records` defines them (what ``query
  --json`` prints and ``POST /query`` answers) with the index generation that answered,
  and the method's trace only with ``include_trace``.  The question is not echoed.
  ``filter`` is a where clause over metadata or a list of passage ids
  (:mod:`evireform.filters`).  A refused request (a malformed filter, a key the index
  lacks, a blank or overlong question) is a tool error carrying the reason.
- the ``answer_from_index`` prompt: a question to answer from the index's passages, citing
  them by id.
- ``evireform://index``: the index's stats (passages, propositions, embedder, generation),
  as ``GET /health`` reports them.

Questions go through the same :class:`~evireform.service.RetrievalService` as ``evireform
serve`` (micro-batches, a new generation written by ``evireform update`` picked up), so an
answer's passages equal ``/query``'s for the same index.
"""
import asyncio
import json
import re
from typing import Any

from .records import LOCATION_KEYS
from .service.models import MAX_QUESTION_CHARS
from .service.resident import Overloaded, RetrievalService, Unavailable

INDEX_URI = "evireform://index"


def sdk():
    try:
        from mcp.server.mcpserver import MCPServer
    except ImportError as exc:
        raise ImportError("evireform mcp needs the official MCP SDK 2.x: "
                          "pip install 'evireform[mcp]'") from exc
    return MCPServer


def create_server(service: RetrievalService, *, max_k: int = 1000):
    """An ``mcp.server.mcpserver.MCPServer`` answering from ``service`` (started on the
    first request, in the server's event loop)."""
    from mcp.server.mcpserver import Context
    from mcp.server.mcpserver.exceptions import ToolError

    from typing import Annotated, Literal
    from pydantic import Field
    from .application import METHODS
    METHOD_NAMES = tuple(METHODS)  # noqa: N806 - the Literal's values
    MCPServer = sdk()
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

    from mcp_types import CallToolResult, TextContent, ToolAnnotations
    from pydantic import BaseModel

    from .records import AnswerRecord, PassageRecord

    class RetrieveOut(BaseModel):
        """What ``retrieve`` answers, structured."""

        passages: list[PassageRecord] = Field(
            description="the passages, best first: id, title, text, metadata (source, "
                        "section, page, ...), score and its parts")
        generation: int = Field(description="the index generation that answered")
        trace: dict[str, Any] | None = Field(
            default=None, description="the method's trace (residual queries, candidates, "
                                      "timings), with include_trace only")
        answer: AnswerRecord | None = Field(
            default=None, description="with answer only: the passages' sentence that best "
            "matches the question (extractive; or the service's LLM's answer), or 'not "
            "found in these documents', with the passages it cites")

    @server.tool(description=(
        "Retrieve the passages that answer a question, multi-hop (EviReform: the first "
        "passages' bridge entities become residual queries). Returns the ranked passages, "
        "numbered, each with its title, id, source and section, score and text (structured: "
        "the passages and the index generation; the method's trace with include_trace). "
        "filter: a where clause over passage metadata, e.g. {\"source\": \"notes/a.md\"} "
        "or {\"year\": {\"$gte\": 2000}}, or a list of passage ids. method: one of "
        f"{', '.join(METHODS)}."),
        annotations=ToolAnnotations(title="Retrieve passages", readOnlyHint=True,
                                    destructiveHint=False, idempotentHint=True,
                                    openWorldHint=False))
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
                description="a tenant's namespace (the metadata value the index is "
                            "partitioned by): only its passages are searched; null for "
                            "all")] = None,
            include_trace: Annotated[bool, Field(
                strict=True, description="also return the method's trace (residual "
                                         "queries, candidates, timings)")] = False,
            answer: Annotated[bool, Field(
                strict=True, description="also answer from the passages: their sentence "
                                         "that best matches the question (or the service's "
                                         "LLM's answer) citing them, or 'not found in these "
                                         "documents'")] = False,
            ctx: Context = None,  # type: ignore[assignment]
    ) -> Annotated[CallToolResult, RetrieveOut]:
        # a refusal reaches the caller as a tool error with its reason (what /query's 4xx
        # and 503 say); anything else stays a crash whose text stays on the server
        if not isinstance(question, str) or not question.strip():
            raise ToolError("question: give a non-blank question")
        if any("\ud800" <= c <= "\udfff" for c in question):  # not echoed: it cannot be
            raise ToolError("question: a lone surrogate (\\ud800-\\udfff) is not text; "
                            "send valid Unicode")  # encoded, and a reply must be
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= max_k:
            raise ToolError(f"k: an integer from 1 to {max_k}")
        if method not in METHODS:
            raise ToolError(f"method: one of {', '.join(METHODS)}")
        tenant = _tenant_of(ctx)
        if tenant is not None:  # a tenant's key (HTTP): its namespace, whatever is asked
            if namespace is not None and namespace != tenant.namespace:
                raise ToolError(f"namespace: this key reads namespace "
                                f"{tenant.namespace!r} only")
            namespace = tenant.namespace
        svc = await ready()
        try:
            res, gen = await svc.query(question, k, method,
                                       svc.request_filter(filter, namespace,
                                                          tenant is not None))
        except (Overloaded, Unavailable, ValueError) as exc:  # FilterTargetMissing too
            # a reason quoting the request's text stays encodable (a reply for every call)
            raise ToolError(str(exc).encode("utf-8", "backslashreplace").decode()) from None
        rec = res.to_dict()
        if answer:
            rec["answer"] = (await svc.answer(question, res)).to_dict()
        if tenant is not None:  # as an index of the tenant's own would show it
            rec = svc.tenant_view(rec, tenant.namespace, gen)
        out: dict[str, Any] = {"passages": rec["passages"], "generation": gen}
        if include_trace:
            out["trace"] = rec["trace"]
        text = render_passages(rec["passages"], out.get("trace"))
        if answer:
            said = out["answer"] = rec["answer"]
            text = (f"Answer ({said['kind']}): {said['text']}\n" + "".join(
                f"  cites [{c['id']}] {c['title']}: {c['sentence']}\n" for c in said["cites"]
                if said["found"]) + "\n" + text)
        return CallToolResult(content=[TextContent(type="text", text=text)],
                              structured_content=out)

    @server.prompt(name="answer_from_index", description=(
        "Answer a question from this index's passages: retrieve them, answer from them "
        "alone and cite each passage used by its id."))
    def answer_from_index(question: str) -> str:
        return ("Answer the question below using only passages from the evireform index. "
                "Call the retrieve tool with the question (and again with a narrower "
                "question if the passages name something the answer depends on), answer "
                "from the passages alone, cite each passage you use by its id in square "
                "brackets, and say so when the passages do not answer it.\n\nQuestion: "
                + question)

    @server.resource(INDEX_URI, name="index", mime_type="application/json",
                     description="the index served: passages, propositions, embedder, "
                                 "generation")
    def index_stats() -> str:
        return json.dumps(service.health())

    return server


#: a JSON escape of a lone surrogate (a high one not followed by a low one, a low one not
#: after a high one), after an even number of backslashes (so an escape, not a literal)
_LONE_ESCAPE = re.compile(
    r"(?<!\\)((?:\\\\)*)(\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2})")


def clean_json_line(line: bytes) -> bytes:
    """A JSON-RPC line with each escaped lone surrogate as ``\ufffd``: the SDK's reader
    refuses such a line without a reply (it cannot know the request's id), so it becomes
    the replacement character, as bytes that are not UTF-8 already do."""
    if b"\\u" not in line:
        return line
    text = line.decode("utf-8", "surrogateescape")
    return _LONE_ESCAPE.sub(lambda m: m.group(1) + "\\ufffd", text).encode(
        "utf-8", "surrogateescape")


def _clean_stdin() -> None:
    """Put a pipe in front of fd 0 that passes each line through :func:`clean_json_line`
    (a thread copies the real stdin into it), so the SDK's stdio transport, which claims
    fd 0 as usual, answers every request."""
    import os
    import threading
    real = os.dup(0)
    r, w = os.pipe()
    os.dup2(r, 0)
    os.close(r)

    def pump() -> None:
        with os.fdopen(real, "rb", buffering=0) as src, os.fdopen(w, "wb") as dst:
            for line in iter(src.readline, b""):
                try:
                    dst.write(clean_json_line(line))
                    dst.flush()
                except BrokenPipeError:
                    return
    threading.Thread(target=pump, name="mcp-stdin", daemon=True).start()


def render_passages(passages: list[dict[str, Any]], trace: dict[str, Any] | None = None
                    ) -> str:
    """Passages as numbered text for a model to read: rank, title, id, where the passage
    is and its score on one line, its text below; the residual queries first when the
    trace is given."""
    lines = []
    if trace and trace.get("residual_queries"):
        lines.append("residual queries: " + "; ".join(trace["residual_queries"]))
    for n, p in enumerate(passages, 1):
        md = p.get("metadata") or {}
        where = [str(md["source"])] if md.get("source") is not None else []
        where += [f"{key} {md[key]}" for key in LOCATION_KEYS
                  if md.get(key) is not None]
        lines.append(f"[{n}] {p['title']} [{p['id']}]" + (f" ({' · '.join(where)})"
                                                          if where else "")
                     + f" score {p['score']:.4f}")
        lines.append(" ".join(str(p["text"]).split()))
    return "\n".join(lines) if lines else "no passage matches"


def _tenant_of(ctx: Any) -> Any:
    """The :class:`~evireform.service.guard.Tenant` whose key an HTTP request carried (set
    by :func:`bearer_only`), or None (the operator's key, or stdio)."""
    try:
        request = ctx.request_context.request
    except (AttributeError, ValueError):  # no context, or not in a request
        return None
    return getattr(getattr(request, "state", None), "tenant", None)


def bearer_only(app: Any, api_key: str | None, tenants: Any = None) -> Any:
    """``app`` (ASGI) answering HTTP requests only with ``Authorization: Bearer <key>``:
    ``api_key`` (the operator's) or one of ``tenants``' keys (a tenant's requests are then
    confined to its namespace: the tool reads it from ``request.state.tenant``), compared
    as :class:`~evireform.service.guard._Guard` compares them; others get 401 with a JSON
    error."""
    from .service.guard import Tenant, principal, tenant_digests
    want = api_key.encode() if api_key else None
    digests = tenant_digests(tenants)

    async def guarded(scope, receive, send):
        if scope["type"] == "http":
            header = dict(scope.get("headers") or ()).get(b"authorization") or b""
            who = principal(header, want, digests)
            scope.setdefault("state", {})["tenant"] = who if isinstance(who, Tenant) else None
            if who is None:
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
        port: int = 8765, banner: str | None = None, api_key: str | None = None,
        tenants: Any = None) -> None:
    """Serve until interrupted: over stdio (the protocol on stdout, nothing else there), or
    streamable HTTP on ``host:port`` at ``/mcp`` (``banner`` on stderr once bound;
    ``api_key``: every HTTP request must carry it as a bearer token)."""
    import sys

    server = create_server(service)
    if transport == "stdio":
        _clean_stdin()
        server.run("stdio")
        return
    if transport != "http":
        raise ValueError(f"transport: stdio or http, not {transport!r}")
    import uvicorn

    from .service.app import bound_socket
    app = server.streamable_http_app(host=host)
    if api_key or tenants:
        app = bearer_only(app, api_key, tenants)
    sock = bound_socket(host, port)
    if banner:
        print(banner, file=sys.stderr, flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
