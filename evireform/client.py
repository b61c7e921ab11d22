"""A client for a running ``evireform serve`` (extra ``client``: httpx).

:class:`Client` (blocking) and :class:`AsyncClient` call every endpoint of the HTTP API
(:mod:`evireform.service`) and return its JSON as typed dictionaries (the result record of
:mod:`evireform.records`, what ``query --json`` prints); a refusal raises the
:class:`ServiceError` subclass of its status, carrying the service's message.  A full queue
(503 with ``Retry-After``) and a connection the service never accepted are retried, at most
``retries`` times, waiting what the service asks (capped by ``max_wait``)::

    from evireform.client import Client, NotFound

    with Client("http://127.0.0.1:8000", api_key="…") as c:
        ans = c.query("Who directed the film that won …?", k=5)
        for p in ans["passages"]:
            print(p["score"], p["title"], p["metadata"].get("source"))
        c.update(delete_where={"source": "notes/old.md"})
"""
from __future__ import annotations

import asyncio
import email.utils
import time
from typing import Any, Sequence

from .records import TypedDict
# the result record as served (Answer: what query --json prints, and when it ran)
from .service.models import BatchOut as BatchAnswer, QueryOut as Answer

__all__ = ["Client", "AsyncClient", "ServiceError", "BadRequest", "Unauthorized",
           "NotFound", "Conflict", "PayloadTooLarge", "InvalidRequest", "ServerError",
           "ServiceUnavailable", "InsufficientStorage", "Answer", "BatchAnswer",
           "UpdateAnswer", "Health"]


# --- what the service answers (its OpenAPI schema's response models) ---------------------

class UpdateAnswer(TypedDict):
    """``POST /update``: the generation written (unchanged for a no-op) and the counts."""

    generation: int
    passages: int
    propositions: int
    changes: dict[str, int]


class Health(TypedDict, total=False):
    """``GET /health``: ``status`` "ok" with ``index`` (passages, propositions, embedder,
    generation), or "unavailable" with ``error``."""

    status: str
    index: dict[str, Any]
    error: str


# --- errors -------------------------------------------------------------------------------

class ServiceError(Exception):
    """A request the service refused or failed: ``status`` and the service's ``message``."""

    status = 0

    def __init__(self, status: int, message: str, retry_after: float | None = None):
        super().__init__(f"{status}: {message}")
        self.status, self.message, self.retry_after = status, message, retry_after


class BadRequest(ServiceError):
    """400: a request the index cannot answer (a malformed filter)."""
    status = 400


class Unauthorized(ServiceError):
    """401: a missing or wrong API key."""
    status = 401


class NotFound(ServiceError):
    """404: a passage id or metadata key the index lacks, or a delete_where matching none."""
    status = 404


class Conflict(ServiceError):
    """409: a passage id the index holds with other content (``upsert=True`` replaces it)."""
    status = 409


class PayloadTooLarge(ServiceError):
    """413: the request body is over the service's cap."""
    status = 413


class InvalidRequest(ServiceError):
    """422: a body that does not match the schema (a blank question, k out of range)."""
    status = 422


class ServerError(ServiceError):
    """500: the service failed (its message never holds a traceback)."""
    status = 500


class ServiceUnavailable(ServiceError):
    """503: a full queue (``retry_after`` seconds, after the client's retries) or index
    files the service cannot serve."""
    status = 503


class InsufficientStorage(ServiceError):
    """507: no space on the service's disk for the new generation."""
    status = 507


_BY_STATUS = {c.status: c for c in (BadRequest, Unauthorized, NotFound, Conflict,
                                    PayloadTooLarge, InvalidRequest, ServerError,
                                    ServiceUnavailable, InsufficientStorage)}


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _raise_for(r) -> None:
    """Nothing for a 2xx response; else the :class:`ServiceError` of its status."""
    if r.status_code < 400:
        return
    try:
        message = r.json()["error"]
    except Exception:  # not the service's JSON error (a proxy's page): its text
        message = r.text.strip()[:500] or r.reason_phrase
    cls = _BY_STATUS.get(r.status_code)
    if cls is None:
        cls = ServerError if r.status_code >= 500 else ServiceError
    raise cls(r.status_code, str(message), _retry_after(r.headers.get("retry-after")))


def _ask(k: int, method: str, filter: Any, namespace: str | None,
         graph: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"k": k, "method": method, "graph": graph}
    if filter is not None:
        body["filter"] = filter
    if namespace is not None:
        body["namespace"] = namespace
    return body


def _update_body(add, upsert, delete, delete_where) -> dict[str, Any]:
    body: dict[str, Any] = {"add": list(add or ()), "upsert": upsert,
                            "delete": list(delete or ())}
    if delete_where is not None:
        body["delete_where"] = delete_where
    return body


class _Base:
    def __init__(self, base_url: str, api_key: str | None, timeout: float, retries: int,
                 max_wait: float, headers: dict[str, str] | None, transport: Any, httpx_cls):
        if retries < 0 or max_wait < 0:
            raise ValueError("retries and max_wait must be at least 0")
        h = dict(headers or {})
        if api_key is not None:
            h["Authorization"] = f"Bearer {api_key}"
        self.retries, self.max_wait = retries, max_wait
        self._http = httpx_cls(base_url=base_url.rstrip("/"), headers=h, timeout=timeout,
                               transport=transport)

    def _wait(self, attempt: int, r) -> float | None:
        """Seconds to wait before retrying ``attempt`` (0-based), or None: give up.  ``r`` is
        the response (a 503 with Retry-After) or None (the connection was refused)."""
        if attempt >= self.retries:
            return None
        if r is None:
            return min(self.max_wait, 0.1 * 2 ** attempt)
        if r.status_code != 503:
            return None
        after = _retry_after(r.headers.get("retry-after"))
        return None if after is None else min(after, self.max_wait)


def _httpx():
    try:
        import httpx
    except ImportError as exc:
        raise ImportError("evireform.client needs httpx: pip install 'evireform[client]'"
                          ) from exc
    return httpx


class Client(_Base):
    """A blocking client of ``evireform serve`` at ``base_url``.

    ``api_key`` is sent as ``Authorization: Bearer``; ``timeout`` (seconds) bounds each
    request; a 503 with ``Retry-After`` (a full queue) and a refused connection are retried
    up to ``retries`` times, each wait at most ``max_wait`` seconds; ``transport`` is an
    httpx transport (tests, an ASGI app).  Use it as a context manager or call
    :meth:`close`."""

    def __init__(self, base_url: str = "http://127.0.0.1:8000", *, api_key: str | None = None,
                 timeout: float = 60.0, retries: int = 3, max_wait: float = 30.0,
                 headers: dict[str, str] | None = None, transport: Any = None):
        httpx = _httpx()
        self._errors = (httpx.ConnectError,)
        super().__init__(base_url, api_key, timeout, retries, max_wait, headers, transport,
                         httpx.Client)

    def _call(self, method: str, path: str, body: Any = None):
        attempt = 0
        while True:
            try:
                r = self._http.request(method, path, json=body)
            except self._errors:
                wait = self._wait(attempt, None)
                if wait is None:
                    raise
            else:
                wait = self._wait(attempt, r) if r.status_code == 503 else None
                if wait is None:
                    _raise_for(r)
                    return r
            time.sleep(wait)
            attempt += 1

    def health(self) -> Health:
        """The index the service holds (never needs the key)."""
        r = self._http.get("/health")  # 503 here is an answer (the files are unavailable)
        if r.status_code not in (200, 503):
            _raise_for(r)
        return r.json()

    def query(self, question: str, k: int = 10, *, method: str = "evireform",
              filter: dict[str, Any] | Sequence[str] | None = None,
              namespace: str | None = None, graph: bool = False) -> Answer:
        """One question's passages (``POST /query``): ``filter`` a where clause over
        metadata or a list of passage ids, ``namespace`` a tenant, ``graph`` the evidence
        graph."""
        return self._call("POST", "/query", {"question": question,
                                             **_ask(k, method, filter, namespace, graph)}).json()

    def query_batch(self, questions: Sequence[str], k: int = 10, *, method: str = "evireform",
                    filter: dict[str, Any] | Sequence[str] | None = None,
                    namespace: str | None = None, graph: bool = False) -> BatchAnswer:
        """Many questions in one request (``POST /query_batch``), answered in order."""
        return self._call("POST", "/query_batch", {
            "questions": list(questions), **_ask(k, method, filter, namespace, graph)}).json()

    def update(self, add: Sequence[dict[str, Any]] = (), *, upsert: bool = False,
               delete: Sequence[str] = (),
               delete_where: dict[str, Any] | None = None) -> UpdateAnswer:
        """Add passages (``{"text", "title"?, "id"?, "metadata"?}``; ``upsert`` replaces a
        taken id), delete ids, and delete what ``delete_where`` matches (a document's
        passages: ``{"source": "notes/a.md"}``), as one new generation."""
        return self._call("POST", "/update",
                          _update_body(add, upsert, delete, delete_where)).json()

    def metrics(self) -> str:
        """The Prometheus text exposition."""
        return self._call("GET", "/metrics").text

    def openapi(self) -> dict[str, Any]:
        """The service's OpenAPI schema."""
        return self._call("GET", "/openapi.json").json()

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class AsyncClient(_Base):
    """:class:`Client` for asyncio: the same calls, awaited (``async with``, or
    ``await aclose()``)."""

    def __init__(self, base_url: str = "http://127.0.0.1:8000", *, api_key: str | None = None,
                 timeout: float = 60.0, retries: int = 3, max_wait: float = 30.0,
                 headers: dict[str, str] | None = None, transport: Any = None):
        httpx = _httpx()
        self._errors = (httpx.ConnectError,)
        super().__init__(base_url, api_key, timeout, retries, max_wait, headers, transport,
                         httpx.AsyncClient)

    async def _call(self, method: str, path: str, body: Any = None):
        attempt = 0
        while True:
            try:
                r = await self._http.request(method, path, json=body)
            except self._errors:
                wait = self._wait(attempt, None)
                if wait is None:
                    raise
            else:
                wait = self._wait(attempt, r) if r.status_code == 503 else None
                if wait is None:
                    _raise_for(r)
                    return r
            await asyncio.sleep(wait)
            attempt += 1

    async def health(self) -> Health:
        r = await self._http.get("/health")
        if r.status_code not in (200, 503):
            _raise_for(r)
        return r.json()

    async def query(self, question: str, k: int = 10, *, method: str = "evireform",
                    filter: dict[str, Any] | Sequence[str] | None = None,
                    namespace: str | None = None, graph: bool = False) -> Answer:
        r = await self._call("POST", "/query", {"question": question,
                                                **_ask(k, method, filter, namespace, graph)})
        return r.json()

    async def query_batch(self, questions: Sequence[str], k: int = 10, *,
                          method: str = "evireform",
                          filter: dict[str, Any] | Sequence[str] | None = None,
                          namespace: str | None = None, graph: bool = False) -> BatchAnswer:
        r = await self._call("POST", "/query_batch", {
            "questions": list(questions), **_ask(k, method, filter, namespace, graph)})
        return r.json()

    async def update(self, add: Sequence[dict[str, Any]] = (), *, upsert: bool = False,
                     delete: Sequence[str] = (),
                     delete_where: dict[str, Any] | None = None) -> UpdateAnswer:
        r = await self._call("POST", "/update", _update_body(add, upsert, delete, delete_where))
        return r.json()

    async def metrics(self) -> str:
        return (await self._call("GET", "/metrics")).text

    async def openapi(self) -> dict[str, Any]:
        return (await self._call("GET", "/openapi.json")).json()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()
