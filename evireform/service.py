"""A resident retrieval service: the index and the embedder loaded once, concurrent questions
gathered into micro-batches, updates swapped in atomically (``evireform serve``).

:class:`RetrievalService` is the engine (no web framework): a bounded queue of single
questions that a batcher task drains into one :meth:`EviReform.retrieve_many` call per batch
(up to ``max_batch`` questions; under load, when the previous batch had more than one
question, it waits at most ``max_wait`` seconds for company, so a lone client pays no
batching delay), and
serialised updates that write a new index generation with the same atomic save and lock as
``evireform update`` and swap it in; questions already in a batch finish on the generation they
started on.  :func:`create_app` puts it behind FastAPI (extra ``serve``):

========================  ==================================================================
``GET /health``           ``{"status": "ok", "index": {passages, propositions, embedder,
                          generation}}``
``POST /query``           ``{"question", "k": 10, "method": "evireform", "graph": false,
                          "filter": null, "namespace": null}``
``POST /query_batch``     ``{"questions": [...], "k": 10, "method", "graph", "filter",
                          "namespace"}``
``POST /update``          ``{"add": [passages], "upsert": false, "delete": [ids]}``
                          (a passage: ``{"id"?, "title"?, "text", "metadata"?}``)
``GET /metrics``          Prometheus text: requests, errors, latency, queue depth, batch
                          sizes, index generation
========================  ==================================================================

``filter`` is a where clause over passage metadata or a list of passage ids
(:mod:`evireform.filters`); ``namespace`` is shorthand for ``{"namespace": value}`` (and-ed
with ``filter``): a tenant sees exactly what an index of its own passages would return.
Results carry each passage's ``metadata``.

Errors are JSON ``{"error": message}`` with a 4xx/5xx status, never a traceback or a server
path; a full queue answers 503 with ``Retry-After`` (single questions, batches and every
method count against one bound of ``max_queue`` questions); a full disk during ``/update``
answers 507; with an API key every endpoint but ``/health`` needs ``Authorization: Bearer
<key>`` (the scheme in any case, the key compared in constant time; a key with whitespace is
refused at start).  The body cap counts streamed bytes (a chunked body too); a client has
``header_timeout`` seconds to send a request head; connections are limited.

**The index on disk.**  Before each batch the service stats the index's files (manifest and
every listed file: inode, size, mtime).  A new generation written by ``evireform update``
(another process) is loaded and served from the next batch on; a file changed in place
(truncated, or copied over: never copy over a served index, write it with ``evireform
update`` or save to a new directory) makes the service refuse with 503 naming the cause
until a loadable index is back, instead of reading a changed memory map.  ``faulthandler``
is enabled, so a fatal signal still leaves a traceback in the log.
"""


import asyncio
import concurrent.futures
import errno
import faulthandler
import functools
import hmac
import json
import logging
import os
import sys
import threading
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Annotated, Literal

from ._checks import positive_int
from .application import METHODS, apply_update, llm_roles, make_method
from .embed import EmbedderOutputError, encode_queries
from .engine import make_engine
from .filters import compile_filter
from .index import PropositionIndex
from .kernels import warm_up
from .records import ResultRecord, TypedDict
from .store import MANIFEST, index_files

log = logging.getLogger(__name__)

__all__ = ["METHODS", "RetrievalService", "Overloaded", "Unavailable", "create_app", "serve"]


class QueryOut(ResultRecord):
    """The result record (:mod:`evireform.records`: what ``query --json`` prints) and when
    it ran; ``graph`` only when asked for."""

    generation: int
    took_ms: float


class BatchOut(TypedDict):
    results: list[QueryOut]
    generation: int
    took_ms: float


class Overloaded(RuntimeError):
    """The request queue is full: retry later (HTTP 503)."""


class Unavailable(RuntimeError):
    """The index files changed under the service and cannot be loaded (HTTP 503)."""


@dataclass
class Generation:
    """One index version with the retrievers over it."""

    number: int
    index: object
    retriever: object
    strategies: dict[str, Any] = field(default_factory=dict)
    #: the engine every method of this generation runs on (:func:`evireform.engine.make_engine`)
    engine: object = None


class RetrievalService:
    """See the module docstring.  ``embedder`` is the index's (or the user's); ``roles``
    (selector / reformulator / controller) and ``llm`` (an LLMClient, for the strategies)
    are optional LLM roles; ``backend`` and ``precision`` choose each generation's engine
    as ``evireform query`` does (:func:`evireform.engine.make_engine`), or ``backend`` is a
    function of the index returning its engine (a sharded searcher, a device of your own)."""

    def __init__(self, index_dir, embedder, *, config=None, roles=None, llm=None,
                 max_batch: int = 64, max_wait: float = 0.002, max_queue: int = 256,
                 index=None, backend: str = "auto", precision: str = "auto"):
        self.index_dir = Path(index_dir)
        self.backend, self.precision = backend, precision
        self.embedder, self.config = embedder, config
        # the LLM roles of ``llm`` unless given (``{}``: the LLM-free roles with an LLM
        # for the strategies)
        self.roles = llm_roles(llm) if roles is None else dict(roles)
        self.llm = llm
        self.max_batch = positive_int(max_batch, "max_batch")
        self.max_queue = positive_int(max_queue, "max_queue")
        if not 0 <= float(max_wait) <= 1:
            raise ValueError(f"max_wait must be in [0, 1] seconds; got {max_wait}")
        self.max_wait = float(max_wait)
        # ``index``: the index already loaded from ``index_dir`` (so it is not read twice)
        self._ident = self._files_identity()
        self.gen = self._generation(index if index is not None
                                    else PropositionIndex.load(self.index_dir), 0)
        self._broken: str | None = None  # why the files on disk cannot be served
        self._inflight = 0  # strategy questions and batch questions being answered
        self._queue: asyncio.Queue | None = None
        self._batcher: asyncio.Task | None = None
        # one thread runs retrieval (the kernels and the encoder are multi-threaded inside);
        # updates get their own so that queries go on while a new generation is built
        self._work = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="evireform-q")
        self._upd = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="evireform-u")
        self._update_lock = threading.Lock()
        self.metrics = Metrics()
        self.metrics.generation.set(0)

    # ------------------------------------------------------------------ generations
    def _generation(self, index, number: int) -> Generation:
        engine = self.backend(index) if callable(self.backend) else \
            make_engine(index, self.backend, precision=self.precision)
        return Generation(number, index, self._method("evireform", index, engine),
                          engine=engine)

    def _method(self, method: str, index, engine):
        """``method`` over ``index`` on ``engine`` (:func:`evireform.application.make_method`):
        EviReform with this service's config and roles, a strategy with its LLM."""
        if method == "evireform":
            return make_method("evireform", index, self.embedder, config=self.config,
                               roles=self.roles, engine=engine)
        return make_method(method, index, self.embedder, llm=self.llm, engine=engine)

    def _files_identity(self):
        """(inode, size, mtime_ns) of the manifest and of every file it lists: what changes
        when ``evireform update`` swaps in a new generation, or when someone truncates or
        overwrites a file in place (which would crash a reader of the old memory map)."""
        out = []
        for name in sorted(index_files(self.index_dir) or {MANIFEST}):
            try:
                st = os.stat(self.index_dir / name)
                out.append((name, st.st_ino, st.st_size, st.st_mtime_ns))
            except OSError:
                out.append((name, None))
        return tuple(out)

    def current(self) -> Generation:
        """The generation to answer with: the files on disk are checked (one stat each)
        and, when they changed (an update by another process, a file replaced), the new
        generation is loaded and swapped in; when they cannot be loaded the service refuses
        (:class:`Unavailable`) instead of reading a changed memory map."""
        ident = self._files_identity()
        if ident == self._ident:
            if self._broken:
                raise Unavailable(self._broken)
            return self.gen
        with self._update_lock:
            ident = self._files_identity()
            if ident != self._ident:
                try:
                    idx = PropositionIndex.load(self.index_dir)
                except Exception as exc:  # noqa: BLE001 - refused, named, until it is fixed
                    self._broken = ("the index files changed on disk and no longer load "
                                    f"({_no_paths(str(exc), self.index_dir)}); restore the "
                                    "index or write it with evireform update, never by "
                                    "copying over a served index")
                    self._ident = ident
                    log.error("%s", self._broken)
                    raise Unavailable(self._broken) from None
                self._broken = None
                self.gen = self._generation(idx, self.gen.number + 1)
                self._ident = ident
                self.metrics.generation.set(self.gen.number)
                log.info("serving generation %d of %s (written by another process): %d "
                         "passages", self.gen.number, self.index_dir, idx.n_passages)
        if self._broken:
            raise Unavailable(self._broken)
        return self.gen

    def _admit(self, n: int) -> None:
        """Count ``n`` questions against the bounded queue (``Overloaded`` when it is full):
        single questions, batches and every method share one bound."""
        waiting = (self._queue.qsize() if self._queue is not None else 0) + self._inflight
        if waiting + n > self.max_queue and (waiting > 0 or n > self.max_queue):
            self.metrics.rejected.inc()
            raise Overloaded(f"{waiting} questions are waiting (at most {self.max_queue}); "
                             "retry shortly")
        self._inflight += n

    def strategy(self, gen: Generation, method: str):
        if method == "evireform":
            return gen.retriever
        if method not in gen.strategies:
            gen.strategies[method] = self._method(method, gen.index, gen.engine)
        return gen.strategies[method]

    def health(self) -> dict[str, Any]:
        try:
            g = self.current()
        except Unavailable as exc:
            return {"status": "unavailable", "error": str(exc)}
        return {"status": "ok", "index": {"passages": g.index.n_passages,
                                          "propositions": g.index.n_props,
                                          "embedder": g.index.embedder_name,
                                          "generation": g.number}}

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Warm the embedder (so the first question does not pay the model load) and start
        the batcher."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._work, warm_up)  # single and batched kernels
        await loop.run_in_executor(self._work, encode_queries, self.embedder, ["warm-up"])
        await loop.run_in_executor(self._work, self.gen.retriever.retrieve, "warm-up", 1)
        self._queue = asyncio.Queue(maxsize=self.max_queue)
        self._batcher = asyncio.create_task(self._batch_loop())

    async def stop(self) -> None:
        if self._batcher is not None:
            self._batcher.cancel()
            try:
                await self._batcher
            except asyncio.CancelledError:
                pass
        self._work.shutdown(wait=False, cancel_futures=True)
        self._upd.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ queries
    async def query(self, question: str, k: int = 10, method: str = "evireform", filter=None):
        """``(RetrievalResult, generation number)`` for one question.  EviReform questions
        join a micro-batch (of questions with the same ``k`` and filter); the strategies run
        one at a time.  ``filter``: :mod:`evireform.filters` (checked here: ``ValueError``)."""
        filter = compile_filter(filter)
        if method != "evireform":
            return await self._run(1, lambda gen: functools.partial(
                self.strategy(gen, method).retrieve, question, k, filter=filter))
        fut = asyncio.get_running_loop().create_future()
        if self._queue.qsize() + self._inflight >= self.max_queue:
            self.metrics.rejected.inc()
            raise Overloaded(f"{self.max_queue} questions are waiting; retry shortly")
        try:
            self._queue.put_nowait((question, (int(k), filter), fut))
        except asyncio.QueueFull:
            self.metrics.rejected.inc()
            raise Overloaded(f"{self.max_queue} questions are waiting; retry shortly") from None
        self.metrics.queue_depth.set(self._queue.qsize())
        return await fut

    async def query_batch(self, questions, k: int = 10, method: str = "evireform",
                          filter=None):
        """``(results, generation number)`` for a list of questions: one ``retrieve_many``."""
        filter = compile_filter(filter)
        questions = list(questions)
        return await self._run(len(questions), lambda gen: functools.partial(
            self.strategy(gen, method).retrieve_many, questions, k, filter=filter))

    async def _run(self, n: int, call):
        """``(call(generation)(), generation number)`` on the query thread, ``n`` questions
        counted against the bounded queue while they wait and run."""
        self._admit(n)
        try:
            gen = self.current()
            res = await asyncio.get_running_loop().run_in_executor(self._work, call(gen))
            return res, gen.number
        finally:
            self._inflight -= n

    async def _batch_loop(self) -> None:
        loop = asyncio.get_running_loop()
        q = self._queue
        last = 1
        while True:
            items = [await q.get()]
            # wait for company only under load (the last batch had company): a lone client
            # pays no batching delay, concurrent ones share a retrieve_many
            until = loop.time() + (self.max_wait if last > 1 else 0.0)
            while len(items) < self.max_batch:
                try:
                    items.append(q.get_nowait())
                    continue
                except asyncio.QueueEmpty:
                    pass
                left = until - loop.time()
                if left <= 0:
                    break
                try:
                    items.append(await asyncio.wait_for(q.get(), left))
                except asyncio.TimeoutError:
                    break
            self.metrics.queue_depth.set(q.qsize())
            last = len(items)
            items = [it for it in items if not it[2].done()]  # a client that went away
            groups: dict[tuple, list] = {}  # one retrieve_many per (k, filter)
            for it in items:
                k, flt = it[1]
                groups.setdefault((k, flt.key if flt is not None else None), []).append(it)
            try:
                gen = self.current()  # the whole batch runs on one generation
            except Unavailable as exc:
                for it in items:
                    if not it[2].done():
                        it[2].set_exception(exc)
                continue
            for group in groups.values():
                k, flt = group[0][1]
                self.metrics.batch_size.observe(len(group))
                try:
                    results = await loop.run_in_executor(self._work, functools.partial(
                        gen.retriever.retrieve_many, [g[0] for g in group], k, filter=flt))
                except Exception as exc:  # handed to each waiting request
                    for g in group:
                        if not g[2].done():
                            g[2].set_exception(exc)
                    continue
                for g, res in zip(group, results):
                    if not g[2].done():
                        g[2].set_result((res, gen.number))

    # ------------------------------------------------------------------ updates
    async def update(self, add=None, upsert: bool = False, delete=None) -> dict[str, Any]:
        """Apply deletions then additions to the saved index under its lock, save the new
        generation atomically and swap it in; serialised."""
        return await asyncio.get_running_loop().run_in_executor(
            self._upd, self._update_sync, add, upsert, delete)

    def _update_sync(self, add, upsert, delete) -> dict[str, Any]:
        with self._update_lock:
            up = apply_update(self.index_dir, delete=delete, add=add, embedder=self.embedder,
                              upsert=upsert)
            # what was just saved, memory-mapped as a start loads it (the fast tier: the
            # save stamped the files it wrote from a fully verified load)
            new = self._generation(PropositionIndex.load(self.index_dir),
                                   self.gen.number + 1)
            self.gen, self._ident, self._broken = new, self._files_identity(), None
        self.metrics.generation.set(new.number)
        return {"generation": new.number, "passages": new.index.n_passages,
                "propositions": new.index.n_props, "changes": up.counts()}


class Metrics:
    """Prometheus metrics of one service (its own registry)."""

    def __init__(self):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
        self.registry = r = CollectorRegistry()
        self.requests = Counter("evireform_requests", "HTTP requests", ["endpoint", "status"],
                                registry=r)
        self.errors = Counter("evireform_errors", "requests answered with an error",
                              ["endpoint", "status"], registry=r)
        self.latency = Histogram("evireform_request_seconds", "request latency", ["endpoint"],
                                 registry=r, buckets=(.001, .0025, .005, .0075, .01, .015, .02,
                                                      .03, .05, .075, .1, .25, .5, 1, 2.5, 5))
        self.queue_depth = Gauge("evireform_queue_depth", "questions waiting for a batch",
                                 registry=r)
        self.batch_size = Histogram("evireform_batch_size", "questions per retrieve_many",
                                    registry=r, buckets=(1, 2, 4, 8, 16, 32, 64, 128))
        self.rejected = Counter("evireform_rejected", "questions refused: queue full",
                                registry=r)
        self.generation = Gauge("evireform_index_generation", "index generation served",
                                registry=r)

    def text(self) -> bytes:
        from prometheus_client import generate_latest
        return generate_latest(self.registry)


# =========================================================================== HTTP
def create_app(service: RetrievalService, *, api_key: str | None = None,
               max_body: int = 1 << 20, max_k: int = 1000, max_questions: int = 256):
    """The FastAPI application over ``service`` (see the module docstring)."""
    try:
        from fastapi import FastAPI
        from fastapi.exceptions import RequestValidationError
        from fastapi.openapi.utils import get_openapi
        from fastapi.responses import JSONResponse, Response
        from starlette.exceptions import HTTPException as StarletteHTTPException
        from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, StrictBool,
                              StrictStr)
    except ImportError as exc:
        raise ImportError("the service needs the 'serve' extra: "
                          "pip install 'evireform[serve]'") from exc

    Method = Literal[METHODS]  # every method of evireform.application.METHODS

    def json_integer(v):
        """JSON Schema's integer: 5 and 5.0 (a number whose fraction is zero), never true,
        5.5 or "5" (what the published schema promises a generated client)."""
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError("must be an integer")
        if isinstance(v, float):
            if not v.is_integer():
                raise ValueError("must be an integer")
            return int(v)
        return v

    Integer = Annotated[int, BeforeValidator(json_integer)]

    class Ask(BaseModel):  # what every query request sets besides its question(s)
        model_config = ConfigDict(extra="forbid")
        k: Integer = Field(10, ge=1, le=max_k)
        method: Method = "evireform"
        graph: StrictBool = False
        filter: dict[str, Any] | list[StrictStr] | None = None
        namespace: StrictStr | None = Field(None, min_length=1, max_length=1000)

        def where(self):
            """The request's filter with its namespace and-ed in."""
            if self.namespace is None:
                return self.filter
            ns = {"namespace": self.namespace}
            if self.filter is None:
                return ns
            if isinstance(self.filter, list):
                raise ValueError("give 'namespace' with a where clause, not with an id list")
            return {"$and": [ns, self.filter]}

    class QueryIn(Ask):
        question: StrictStr = Field(min_length=1, max_length=4000)

    class BatchIn(Ask):
        questions: list[Annotated[StrictStr, Field(min_length=1, max_length=4000)]] = Field(
            min_length=1, max_length=max_questions)

    class PassageIn(BaseModel):
        model_config = ConfigDict(extra="forbid")
        id: StrictStr | None = Field(None, min_length=1, max_length=1000)
        title: StrictStr = Field("", max_length=10_000)
        text: StrictStr = Field(min_length=1, max_length=200_000)
        metadata: dict[str, Any] | None = None

    class UpdateIn(BaseModel):
        model_config = ConfigDict(extra="forbid")
        add: list[PassageIn] = Field(default_factory=list, max_length=10_000)
        upsert: StrictBool = False
        delete: list[StrictStr] = Field(default_factory=list, max_length=100_000)

    # --- what the responses are (the OpenAPI schema; the handlers send plain JSON): the
    # result record is evireform.records' (QueryOut, module level), not restated here

    class UpdateOut(BaseModel):
        generation: int
        passages: int
        propositions: int
        changes: dict[str, int] = Field(description="passages per kind of change (added, "
                                                    "deleted, replaced, duplicates)")

    class IndexOut(BaseModel):
        passages: int
        propositions: int
        embedder: str
        generation: int

    class HealthOut(BaseModel):
        status: Literal["ok", "unavailable"]
        index: IndexOut | None = None
        error: str | None = None

    class ErrorOut(BaseModel):
        """Every error, whatever its status."""
        error: str

    class PrometheusText(Response):
        media_type = "text/plain; version=0.0.4; charset=utf-8"  # prometheus_client's

    why = {400: "a request the index cannot answer (a malformed filter, an unknown key or "
                "id, a blank question)",
           401: "missing or wrong bearer token",
           404: "an unknown passage id to delete",
           413: f"request body over {max_body} bytes",
           422: "a body that is not valid JSON or does not match the schema",
           500: "internal error (never a traceback)",
           503: "the queue is full (Retry-After) or the index files cannot be served",
           507: "no space left on the server's disk (or a file-size limit) for the new "
                "generation"}

    def errors(*codes):
        out = {}
        for c in codes:
            if c == 401 and api_key is None:
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

    from . import __version__
    app = FastAPI(title="evireform", version=__version__, lifespan=lifespan,
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
        where = ".".join(str(x) for x in first.get("loc", ()) if x != "body")
        return error(422, f"{where or 'body'}: {first.get('msg', 'invalid request')}")

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

    @app.get("/health", response_model=HealthOut,
             responses={503: {"model": HealthOut, "description": "the index files cannot be "
                              "served"}, 500: errors(500)[500]})
    async def health():
        h = service.health()
        return JSONResponse(h, status_code=200 if h["status"] == "ok" else 503)

    @app.post("/query", response_model=QueryOut,
              responses=errors(400, 401, 413, 422, 500, 503))
    async def query(body: QueryIn):
        t0 = time.perf_counter()
        try:
            res, gen = await service.query(body.question, body.k, body.method, body.where())
        except Overloaded as exc:
            return error(503, str(exc), {"Retry-After": "1"})
        except Unavailable as exc:
            return error(503, str(exc))
        except EmbedderOutputError as exc:  # the server's embedder, not the request
            return error(500, str(exc))
        except ValueError as exc:
            return error(400, str(exc))
        # a JSONResponse of plain types: FastAPI's encoder walk is skipped
        return JSONResponse(answer(res, gen, body.graph, time.perf_counter() - t0))

    @app.post("/query_batch", response_model=BatchOut,
              responses=errors(400, 401, 413, 422, 500, 503))
    async def query_batch(body: BatchIn):
        t0 = time.perf_counter()
        try:
            results, gen = await service.query_batch(body.questions, body.k, body.method,
                                                     body.where())
        except Overloaded as exc:
            return error(503, str(exc), {"Retry-After": "1"})
        except Unavailable as exc:
            return error(503, str(exc))
        except EmbedderOutputError as exc:  # the server's embedder, not the request
            return error(500, str(exc))
        except ValueError as exc:
            return error(400, str(exc))
        took = time.perf_counter() - t0
        return JSONResponse({"results": [answer(r, gen, body.graph, took) for r in results],
                             "generation": gen, "took_ms": round(took * 1e3, 3)})

    @app.post("/update", response_model=UpdateOut,
              responses=errors(400, 401, 404, 413, 422, 500, 507))
    async def update(body: UpdateIn):
        add = [{k: v for k, v in p.model_dump().items() if v is not None} for p in body.add]
        try:
            return JSONResponse(await service.update(add, body.upsert, body.delete))
        except KeyError as exc:
            return error(404, str(exc.args[0] if exc.args else exc))
        except (ValueError, TypeError) as exc:
            return error(400, _no_paths(str(exc), service.index_dir))

    @app.get("/metrics", response_class=PrometheusText,
             responses={200: {"description": "Prometheus text exposition",
                              "content": {PrometheusText.media_type: {
                                  "schema": {"type": "string"}}}},
                        **{c: {"description": r["description"], "content": {
                            "application/json": {"schema": {
                                "$ref": "#/components/schemas/ErrorOut"}}}}
                           for c, r in errors(401, 500).items()}})
    async def metrics():
        return PrometheusText(m.text())

    def openapi():
        """The schema, with the bearer scheme on every endpoint but /health when a key is
        set (what a client generator needs to send it)."""
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version,
                              description=app.description, routes=app.routes)
            if api_key is not None:
                doc.setdefault("components", {})["securitySchemes"] = {
                    "bearer": {"type": "http", "scheme": "bearer"}}
                for path, ops in doc["paths"].items():
                    for op in ops.values():
                        if path != "/health":
                            op["security"] = [{"bearer": []}]
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi

    return _Guard(app, m, api_key, max_body)


def _no_paths(message: str, index_dir) -> str:
    """``message`` without the server's absolute paths (the index directory's own path
    and its parent become "the index")."""
    real = os.path.realpath(index_dir)
    for p in sorted({str(Path(index_dir).absolute()), real, str(index_dir)}, key=len,
                    reverse=True):
        if p and p not in (".", "/"):
            message = message.replace(p, "<index>")
    for p in sorted({str(Path(index_dir).absolute().parent), os.path.dirname(real)}, key=len,
                    reverse=True):
        if len(p) > 1:
            message = message.replace(p, "<index folder>")
    return message


class _BodyTooLarge(Exception):
    """Raised by the guard's ``receive`` when a streamed body passes the cap."""


class _Guard:
    """Pure ASGI middleware (cheaper than Starlette's BaseHTTPMiddleware): bearer token,
    body-size limit, metrics per endpoint and status, and a JSON 500 for anything that
    escapes the application (never a traceback).

    The body cap counts the bytes as they arrive (a chunked body has no ``Content-Length``),
    so no request can make the process hold more than ``max_body`` bytes of it; the bearer
    scheme is matched case-insensitively (RFC 7235) and the key compared in constant time;
    one response per request whatever fails after it started."""

    ENDPOINTS = ("/health", "/query", "/query_batch", "/update", "/metrics")

    def __init__(self, app, metrics: Metrics, api_key, max_body: int):
        self.app, self.m, self.max_body = app, metrics, max_body
        if api_key is not None and (not api_key or api_key != api_key.strip()
                                    or any(c in api_key for c in " \t\r\n")):
            raise ValueError("the API key is empty or holds whitespace (a key read with its "
                             "newline would lock every client out); strip it")
        self.api_key = api_key.encode() if api_key is not None else None

    def _authorised(self, header: bytes | None) -> bool:
        if self.api_key is None:
            return True
        scheme, _, token = (header or b"").partition(b" ")
        ok_scheme = scheme.lower() == b"bearer"
        return hmac.compare_digest(token.strip(b" "), self.api_key) and ok_scheme

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
        endpoint = path if path in self.ENDPOINTS else "other"
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
                    await self._send_json(send, 413, f"request body over {self.max_body} bytes")
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
                if seen[0] > self.max_body:
                    over[0] = True
                    raise _BodyTooLarge()
            return msg
        try:
            headers = dict(scope.get("headers") or ())
            if path != "/health" and not self._authorised(headers.get(b"authorization")):
                await self._send_json(counting_send, 401, "missing or wrong bearer token",
                                      [(b"www-authenticate", b"Bearer")])
                return
            size = headers.get(b"content-length")
            if size is not None and (not size.isdigit() or int(size) > self.max_body):
                await self._send_json(counting_send, 413,
                                      f"request body over {self.max_body} bytes")
                return
            try:
                await self.app(scope, capped_receive, counting_send)
            except _BodyTooLarge:
                if not started[0]:
                    await self._send_json(counting_send, 413,
                                          f"request body over {self.max_body} bytes")
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
          max_connections: int = 1000, banner: str | None = None) -> None:
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
    app = create_app(service, api_key=api_key)
    sock = _bound_socket(host, port)
    if banner:
        print(banner, file=sys.stderr, flush=True)
    config = uvicorn.Config(app, log_level=log_level, access_log=False, lifespan="on",
                            http=_protocol(header_timeout), timeout_keep_alive=keep_alive,
                            limit_concurrency=max_connections)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()


def _bound_socket(host: str, port: int):
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
