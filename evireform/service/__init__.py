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
``POST /update``          ``{"add": [passages], "upsert": false, "delete": [ids],
                          "delete_where": filter}`` (``delete_where``: a document's
                          passages by ``{"source": ...}``, or any where clause)
                          (a passage: ``{"id"?, "title"?, "text", "metadata"?}``)
``GET /metrics``          Prometheus text: requests, errors, latency, queue depth, batch
                          sizes, index generation
``GET /``                 the search page (evireform/service/static; with ``/static/*``)
``GET /docs``, ``/redoc``  the OpenAPI docs, from bundled Swagger UI and ReDoc assets
========================  ==================================================================

``filter`` is a where clause over passage metadata or a list of passage ids
(:mod:`evireform.filters`); ``namespace`` is shorthand for ``{"namespace": value}`` (and-ed
with ``filter``): a tenant sees exactly what an index of its own passages would return.
Results carry each passage's ``metadata``.

Errors are JSON ``{"error": message}`` with a 4xx/5xx status, never a traceback or a server
path; a full queue answers 503 with ``Retry-After`` (single questions, batches and every
method count against one bound of ``max_queue`` questions); a full disk during ``/update``
answers 507; with an API key every data endpoint needs ``Authorization: Bearer <key>``
(``/health``, the search page, the docs and ``/openapi.json`` hold no index data and answer
without it; the scheme in any case, the key compared in constant time; a key with
whitespace is refused at start).  The body cap counts streamed bytes (a chunked body too); a client has
``header_timeout`` seconds to send a request head; connections are limited.

**The index on disk.**  Before each batch the service stats the index's files (manifest and
every listed file: inode, size, mtime).  A new generation written by ``evireform update``
(another process) is loaded and served from the next batch on; a file changed in place
(truncated, or copied over: never copy over a served index, write it with ``evireform
update`` or save to a new directory) makes the service refuse with 503 naming the cause
until a loadable index is back, instead of reading a changed memory map.  ``faulthandler``
is enabled, so a fatal signal still leaves a traceback in the log.
"""
from .app import create_app, serve
from .guard import _error_of, _Guard  # noqa: F401 - the tests reach them here
from .metrics import Metrics
from .models import BatchOut, QueryOut
from ..application import METHODS
from .resident import Generation, Overloaded, RetrievalService, Unavailable

__all__ = ["METHODS", "RetrievalService", "Generation", "Overloaded", "Unavailable",
           "Metrics", "QueryOut", "BatchOut", "create_app", "serve"]
