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
        c.add_documents(["notes/new.md"])          # POST /documents, as `index` reads them
        print(c.sources(), c.passage("uploads/new.md#0")["text"])
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
           "ServiceUnavailable", "InsufficientStorage", "DeadlineExceeded", "ResponseTooLarge",
           "UnexpectedResponse", "Answer", "BatchAnswer",
           "UpdateAnswer", "DocumentsAnswer", "Health"]


# --- what the service answers (its OpenAPI schema's response models) ---------------------

class UpdateAnswer(TypedDict):
    """``POST /update``: the generation written (unchanged for a no-op) and the counts."""

    generation: int
    passages: int
    propositions: int
    changes: dict[str, int]


class DocumentsAnswer(TypedDict):
    """``POST /documents``: each file's fate and the generation written."""

    files: list[dict[str, Any]]
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
    """409: a passage id the index holds with other content (``upsert=True`` replaces it),
    or a delete_where matching every passage without ``all=True``."""
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


class DeadlineExceeded(ServiceError):
    """The call (connecting, sending, every retry and wait, reading the answer) passed the
    client's ``timeout``: status 0, no answer."""


class ResponseTooLarge(ServiceError):
    """The answer grew past the client's ``max_response_bytes`` (decoded): status 0."""


class UnexpectedResponse(ServiceError):
    """An answer that is not the service's: a redirect (the address is not the service's
    own) or a success that is not JSON (a proxy's page); ``status`` is its status."""


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


class _Reply:
    """A whole answer, read within the deadline and the size cap."""

    def __init__(self, status_code: int, headers: Any, content: bytes, reason: str):
        self.status_code, self.headers, self.content = status_code, headers, content
        self.reason_phrase = reason

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        import json
        try:
            return json.loads(self.content)
        except ValueError:
            kind = self.headers.get("content-type", "no content type")
            raise UnexpectedResponse(self.status_code, f"the answer is not JSON ({kind}: "
                                     f"{self.text.strip()[:120]!r}); is this the service's "
                                     "address?") from None


def _raise_for(r) -> None:
    """Nothing for a 2xx response; else the :class:`ServiceError` of its status (a
    redirect: :class:`UnexpectedResponse`)."""
    if 300 <= r.status_code < 400:
        raise UnexpectedResponse(r.status_code, "redirected to "
                                 f"{r.headers.get('location', '?')!s:.200}; give the "
                                 "service's own address (redirects are not followed)")
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


def _upload(files: Sequence[Any]) -> list[tuple[str, tuple[str, bytes]]]:
    """``POST /documents``' multipart parts: each path read (its name sent), or each
    ``(name, bytes)`` pair as it is."""
    from pathlib import Path
    if isinstance(files, (str, bytes, Path)) or (isinstance(files, tuple) and len(files) == 2
                                                 and isinstance(files[1], bytes)):
        files = [files]  # one file given alone
    out = []
    for f in files:
        if isinstance(f, tuple):
            name, data = f
            out.append(("files", (str(name), bytes(data))))
        else:
            p = Path(f)
            out.append(("files", (p.name, p.read_bytes())))
    if not out:
        raise ValueError("add_documents: give one or more files")
    return out


def _passage_path(passage_id: str) -> str:
    """``/passages/{id}`` with the id percent-encoded ('#' as %23; '/' kept: the route
    takes a path)."""
    from urllib.parse import quote
    return "/passages/" + quote(str(passage_id), safe="/")


def _update_body(add, upsert, delete, delete_where) -> dict[str, Any]:
    body: dict[str, Any] = {"add": list(add or ()), "upsert": upsert,
                            "delete": list(delete or ())}
    if delete_where is not None:
        body["delete_where"] = delete_where
    return body


#: the largest answer a client reads (decoded bytes)
MAX_RESPONSE_BYTES = 256 << 20


class _Base:
    def __init__(self, base_url: str, api_key: str | None, timeout: float, retries: int,
                 max_wait: float, headers: dict[str, str] | None, transport: Any, httpx_cls,
                 max_response_bytes: int = MAX_RESPONSE_BYTES):
        if retries < 0 or max_wait < 0:
            raise ValueError("retries and max_wait must be at least 0")
        if not timeout > 0 or max_response_bytes < 1:
            raise ValueError("timeout must be positive and max_response_bytes at least 1")
        h = dict(headers or {})
        if api_key is not None:
            h["Authorization"] = f"Bearer {api_key}"
        self.retries, self.max_wait, self.timeout = retries, max_wait, float(timeout)
        self.max_response_bytes = max_response_bytes
        self._http = httpx_cls(base_url=base_url.rstrip("/"), headers=h, timeout=timeout,
                               transport=transport, follow_redirects=False)

    def _late(self) -> "DeadlineExceeded":
        return DeadlineExceeded(0, f"no answer within the client's timeout ({self.timeout:g} s)")

    def _left(self, end: float) -> float:
        left = end - time.monotonic()
        if left <= 0:
            raise self._late()
        return left

    def _take(self, got: int, end: float) -> None:
        """After each piece of an answer: the deadline and the size cap."""
        if got > self.max_response_bytes:
            raise ResponseTooLarge(0, f"the answer passed {self.max_response_bytes:,} bytes")
        self._left(end)

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

    ``api_key`` is sent as ``Authorization: Bearer``; ``timeout`` (seconds) is one deadline
    per call: connecting, every retry and its wait, and reading the whole answer
    (:class:`DeadlineExceeded` past it, however slowly the bytes come); a 503 with
    ``Retry-After`` (a full queue) and a refused connection are retried up to ``retries``
    times, each wait at most ``max_wait`` seconds; an answer is read up to
    ``max_response_bytes`` (decoded; :class:`ResponseTooLarge` past it); a redirect or a
    success that is not JSON is :class:`UnexpectedResponse`; ``transport`` is an httpx
    transport (tests, an ASGI app).  Use it as a context manager or call
    :meth:`close`."""

    def __init__(self, base_url: str = "http://127.0.0.1:8000", *, api_key: str | None = None,
                 timeout: float = 60.0, retries: int = 3, max_wait: float = 30.0,
                 headers: dict[str, str] | None = None, transport: Any = None,
                 max_response_bytes: int = MAX_RESPONSE_BYTES):
        httpx = self._httpx = _httpx()
        self._errors = (httpx.ConnectError,)
        super().__init__(base_url, api_key, timeout, retries, max_wait, headers, transport,
                         httpx.Client, max_response_bytes)

    def _fetch(self, method: str, path: str, body: Any, end: float,
               files: Any = None) -> _Reply:
        httpx = self._httpx
        try:
            with self._http.stream(method, path, json=body, files=files,
                                   timeout=httpx.Timeout(self._left(end))) as r:
                parts, got = [], 0
                for piece in r.iter_bytes():
                    got += len(piece)
                    self._take(got, end)
                    parts.append(piece)
                return _Reply(r.status_code, r.headers, b"".join(parts), r.reason_phrase)
        except httpx.TimeoutException:
            self._left(end)  # past the deadline: DeadlineExceeded
            raise self._late() from None

    def _call(self, method: str, path: str, body: Any = None, raise_for: bool = True,
              files: Any = None):
        """One request within one deadline (``timeout``: connecting, retries and their
        waits, reading the whole answer), its answer read whole up to the size cap;
        ``files``: a multipart upload's ``[("files", (name, bytes)), ...]``."""
        end = time.monotonic() + self.timeout
        attempt = 0
        while True:
            try:
                r = self._fetch(method, path, body, end, files)
            except self._errors:
                wait = self._wait(attempt, None)
                if wait is None:
                    raise
            else:
                wait = self._wait(attempt, r) if r.status_code == 503 else None
                if wait is None:
                    if raise_for:
                        _raise_for(r)
                    return r
            time.sleep(min(wait, self._left(end)))
            attempt += 1

    def health(self) -> Health:
        """The index the service holds (never needs the key)."""
        r = self._call("GET", "/health", raise_for=False)
        if r.status_code not in (200, 503):  # 503 here is an answer (files unavailable)
            _raise_for(r)
        return r.json()

    def query(self, question: str, k: int = 10, *, method: str = "evireform",
              filter: dict[str, Any] | Sequence[str] | None = None,
              namespace: str | None = None, graph: bool = False,
              answer: bool = False) -> Answer:
        """One question's passages (``POST /query``): ``filter`` a where clause over
        metadata or a list of passage ids, ``namespace`` a tenant, ``graph`` the evidence
        graph, ``answer`` an answer from the passages citing them (the record's
        ``"answer"``)."""
        return self._call("POST", "/query", {"question": question,
                                             **_ask(k, method, filter, namespace, graph),
                                             **({"answer": True} if answer else {})}).json()

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

    def add_documents(self, files: Sequence[Any]) -> DocumentsAnswer:
        """Index files as ``evireform index`` reads them (``POST /documents``): paths, or
        ``(name, bytes)`` pairs (a name may be a relative path, ``notes/a.md``); each file's
        fate (indexed with its passages, or skipped with the reason) and the generation."""
        return self._call("POST", "/documents", files=_upload(files)).json()

    def sources(self) -> list[dict[str, Any]]:
        """The documents the index holds (``GET /sources``): source, passages, title."""
        return self._call("GET", "/sources").json()["sources"]

    def passage(self, passage_id: str) -> dict[str, Any]:
        """One passage by id (``GET /passages/{id}``): id, title, text, metadata;
        :class:`NotFound` for an id the index (or the key's namespace) does not hold."""
        return self._call("GET", _passage_path(passage_id)).json()

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
                 headers: dict[str, str] | None = None, transport: Any = None,
                 max_response_bytes: int = MAX_RESPONSE_BYTES):
        httpx = self._httpx = _httpx()
        self._errors = (httpx.ConnectError,)
        super().__init__(base_url, api_key, timeout, retries, max_wait, headers, transport,
                         httpx.AsyncClient, max_response_bytes)

    async def _fetch(self, method: str, path: str, body: Any, end: float,
                     files: Any = None) -> _Reply:
        httpx = self._httpx
        try:
            async with self._http.stream(method, path, json=body, files=files,
                                         timeout=httpx.Timeout(self._left(end))) as r:
                parts, got = [], 0
                async for piece in r.aiter_bytes():
                    got += len(piece)
                    self._take(got, end)
                    parts.append(piece)
                return _Reply(r.status_code, r.headers, b"".join(parts), r.reason_phrase)
        except httpx.TimeoutException:
            self._left(end)
            raise self._late() from None

    async def _call(self, method: str, path: str, body: Any = None, raise_for: bool = True,
                    files: Any = None):
        end = time.monotonic() + self.timeout
        attempt = 0
        while True:
            try:
                # the deadline holds even where a read blocks between pieces
                r = await asyncio.wait_for(self._fetch(method, path, body, end, files),
                                           self._left(end))
            except asyncio.TimeoutError:
                raise self._late() from None
            except self._errors:
                wait = self._wait(attempt, None)
                if wait is None:
                    raise
            else:
                wait = self._wait(attempt, r) if r.status_code == 503 else None
                if wait is None:
                    if raise_for:
                        _raise_for(r)
                    return r
            await asyncio.sleep(min(wait, self._left(end)))
            attempt += 1

    async def health(self) -> Health:
        r = await self._call("GET", "/health", raise_for=False)
        if r.status_code not in (200, 503):
            _raise_for(r)
        return r.json()

    async def query(self, question: str, k: int = 10, *, method: str = "evireform",
                    filter: dict[str, Any] | Sequence[str] | None = None,
                    namespace: str | None = None, graph: bool = False,
                    answer: bool = False) -> Answer:
        r = await self._call("POST", "/query", {"question": question,
                                                **_ask(k, method, filter, namespace, graph),
                                                **({"answer": True} if answer else {})})
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

    async def add_documents(self, files: Sequence[Any]) -> DocumentsAnswer:
        return (await self._call("POST", "/documents", files=_upload(files))).json()

    async def sources(self) -> list[dict[str, Any]]:
        return (await self._call("GET", "/sources")).json()["sources"]

    async def passage(self, passage_id: str) -> dict[str, Any]:
        return (await self._call("GET", _passage_path(passage_id))).json()

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
