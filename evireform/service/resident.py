"""The resident service without a web framework: generations of the index, the bounded
queue, micro-batches, updates (see :mod:`evireform.service`)."""

import asyncio
import concurrent.futures
import functools
import logging
import os
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._checks import positive_int
from ..application import apply_update, journal_update, llm_roles, make_method
from ..embed import encode_queries
from ..engine import make_engine
from ..filters import compile_filter
from ..index import PropositionIndex
from ..kernels import warm_up
from ..store import MANIFEST, STAMP, index_files
from .metrics import Metrics

log = logging.getLogger("evireform.service")


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
    #: namespace -> the metadata keys its passages have (filters are judged inside it)
    namespace_keys: dict[str, set[Any]] = field(default_factory=dict)
    #: namespace -> (each passage's position among the namespace's, each proposition's
    #: among the namespace's, passages, propositions): what a tenant reads
    #: (:meth:`RetrievalService.tenant_view`)
    namespace_positions: dict[str, tuple[Any, Any, int, int]] = field(default_factory=dict)
    #: the generations that may have changed every namespace (updates without one, another
    #: process's) and, per namespace, those that changed it alone: a tenant's generation
    #: number is their sum, as a service of its own would count (:meth:`tenant_view`)
    shared_changes: int = 0
    namespace_changes: dict[str, int] = field(default_factory=dict)


#: the answers' fields that hold passage ids (strings, or lists of them), which a tenant
#: reads as an index of its own would show them (:meth:`RetrievalService.tenant_view`)
_ID_FIELDS = frozenset({"id", "passage", "src", "dst", "forward", "backward", "duplicates",
                        "passages", "intersection", "own_search"})


class RetrievalService:
    """See the module docstring.  ``embedder`` is the index's (or the user's); ``roles``
    (selector / reformulator / controller) and ``llm`` (an LLMClient, for the strategies)
    are optional LLM roles; ``backend`` and ``precision`` choose each generation's engine
    as ``evireform query`` does (:func:`evireform.engine.make_engine`), or ``backend`` is a
    function of the index returning its engine (a sharded searcher, a device of your own)."""

    def __init__(self, index_dir, embedder, *, config=None, roles=None, llm=None,
                 max_batch: int = 64, max_wait: float = 0.002, max_queue: int = 256,
                 index=None, backend: str = "auto", precision: str = "auto",
                 read_limits=None, journal: bool = True, compact_after: float = 5.0):
        self.index_dir = Path(index_dir)
        #: the readers' bounds for uploaded files (:class:`~evireform.formats.ReadLimits`;
        #: None: the defaults)
        self.read_limits = read_limits
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
        #: the generations an answer being shown may come from (gone with their answers)
        self._generations: weakref.WeakValueDictionary[int, Generation] = \
            weakref.WeakValueDictionary()
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
        #: updates are journalled (one record appended and fsynced: work as large as the
        #: change) and saved in full once no update came for ``compact_after`` seconds
        #: (:mod:`evireform.store.journal`); False: every update saves in full
        self.journal = bool(journal)
        self.compact_after = float(compact_after)
        self._journalled = False  # the directory holds a journal this service wrote
        self._journal_records = 0
        self._compact_timer: asyncio.TimerHandle | None = None
        self.metrics = Metrics()
        self.metrics.generation.set(0)

    # ------------------------------------------------------------------ generations
    def _generation(self, index, number: int, namespace: str | None = None,
                    same: bool = False) -> Generation:
        """Generation ``number`` over ``index``, after the current one (if any) with an
        update confined to ``namespace`` (None: one that may have changed any); ``same``:
        the current one's content read again (its journal saved in full), no update."""
        engine = self.backend(index) if callable(self.backend) else \
            make_engine(index, self.backend, precision=self.precision)
        gen = Generation(number, index, self._method("evireform", index, engine),
                         engine=engine)
        prev = getattr(self, "gen", None)
        if prev is not None and same:
            gen.shared_changes = prev.shared_changes
            gen.namespace_changes = dict(prev.namespace_changes)
        elif prev is not None:
            gen.shared_changes = prev.shared_changes + (namespace is None)
            gen.namespace_changes = dict(prev.namespace_changes)
            if namespace is not None:
                gen.namespace_changes[namespace] = prev.namespace_changes.get(namespace, 0) + 1
        self._generations[number] = gen  # while an answer of it may still be shown
        return gen

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
        # the stamp records a verification, not data: rewriting it changes nothing served
        for name in sorted((index_files(self.index_dir) or {MANIFEST}) - {STAMP}):
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

    def request_filter(self, flt: Any, namespace: str | None, tenant: bool = False) -> Any:
        """The filter a request asks for: ``flt`` (a where clause or an id list) with
        ``namespace`` and-ed in.  A namespace in an index where no passage has one yet (a
        fresh tenant) matches nothing, so the answer is empty, as an index of the tenant's
        own (no) passages would give; with an id list, the ids outside the namespace go
        (unknown ids stay, for the filter to name).  ``tenant``: a tenant key's request,
        whose uploads' sources are named as it reads them
        (:func:`~evireform.application.tenant_source_filter`)."""
        if namespace is None:
            return flt
        if tenant and not isinstance(flt, list):
            from ..application import tenant_source_filter
            flt = tenant_source_filter(flt, namespace)
        gen = self.current()
        cache = getattr(gen.engine, "restrictions", None)
        columns = cache.columns if cache is not None else None
        if columns is not None and not columns.get("namespace")[0].any():
            return []  # no passage has a namespace: a fresh tenant's (empty) index
        from ..filters import compile_filter, missing_key_error, unknown_ids_error
        idx = gen.index
        if isinstance(flt, list):  # ids judged inside the namespace: another's is unknown
            from ..application import tenant_passage
            found = [tenant_passage(idx, namespace, pid) for pid in flt]
            unknown = [pid for pid, j in zip(flt, found) if j is None]
            if unknown:
                raise unknown_ids_error(unknown)
            return [idx.passage(j).id for j in found]  # as stored (NAMESPACE/id)
        ns = {"namespace": namespace}
        if flt is None:
            return ns
        # keys judged inside the namespace: one only another namespace's passages have is
        # as unknown as one no passage has, and the error lists this namespace's keys only
        mine = self._namespace_keys(gen, namespace)
        missing = sorted(k for k in compile_filter(flt).keys if k not in mine)
        if missing:
            raise missing_key_error(missing[0], mine, "namespace")
        return {"$and": [ns, flt]}

    def _namespace_keys(self, gen: Generation, namespace: str) -> set[Any]:
        """The metadata keys the namespace's passages have (kept per generation)."""
        cache = gen.namespace_keys
        got = cache.get(namespace)
        if got is None:
            from ..strings import PassageTable, column, metadata_values
            got = set()
            passages = gen.index.passages
            col = column(passages, "metadata")
            for j, v in enumerate(metadata_values(passages, "namespace")):
                if v == namespace:  # only the namespace's passages' metadata is decoded
                    got.update(PassageTable._meta(col[j]))
            cache[namespace] = got
        return got

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
        if self._compact_timer is not None:
            self._compact_timer.cancel()
        if self._journalled:  # the journal saved in full before the service goes
            await asyncio.get_running_loop().run_in_executor(self._upd, self._compact_sync)
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
            self.metrics.observe_stages(res if isinstance(res, list) else [res])
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
                self.metrics.observe_stages(results)
                for g, res in zip(group, results):
                    if not g[2].done():
                        g[2].set_result((res, gen.number))

    # ------------------------------------------------------------------ updates
    async def update(self, add=None, upsert: bool = False, delete=None,
                     delete_where=None, delete_all: bool = False,
                     namespace: str | None = None) -> dict[str, Any]:
        """Apply deletions then additions to the saved index under its lock, save the new
        generation atomically and swap it in; serialised.  ``namespace``: a tenant's update,
        confined to its passages (:func:`~evireform.application.apply_update`)."""
        out = await asyncio.get_running_loop().run_in_executor(
            self._upd, self._update_sync, add, upsert, delete, delete_where, delete_all,
            namespace)
        self._schedule_compaction()
        return out

    def _schedule_compaction(self) -> None:
        """Save the journal in full ``compact_after`` seconds after the last update (each
        update moves it later), on the update thread."""
        if not self._journalled:
            return
        loop = asyncio.get_running_loop()
        if self._compact_timer is not None:
            self._compact_timer.cancel()
        self._compact_timer = loop.call_later(
            self.compact_after, lambda: loop.run_in_executor(self._upd, self._compact_sync))

    def _compact_sync(self) -> None:
        """The served index saved in full (the swap drops the journal) and served again from
        its files, as the same generation; nothing when another process saved meanwhile
        (the next question loads its generation)."""
        with self._update_lock:
            self._compact_locked()

    #: the most journal records before an update saves in full itself (a replay on load,
    #: and the chains of added parts in memory, stay short under a steady stream)
    JOURNAL_MAX = 64

    def _compact_locked(self) -> None:
        """:meth:`_compact_sync` under the update lock the caller holds."""
        if not self._journalled:
            return
        from ..store import index_lock
        gen = self.gen
        try:
            with index_lock(self.index_dir):
                if self._files_identity() != self._ident:  # another process saved
                    self._journalled, self._journal_records = False, 0
                    return
                gen.index.save(self.index_dir)
            new = self._generation(PropositionIndex.load(self.index_dir), gen.number,
                                   same=True)
        except Exception as exc:  # the journal stays: every load replays it
            log.warning("%s: the journal was not saved in full (%s); it is replayed on "
                        "load until the next save", self.index_dir, exc)
            return
        self.gen, self._ident, self._journalled = new, self._files_identity(), False
        self._journal_records = 0
        log.info("%s: journal saved in full (generation %d)", self.index_dir, gen.number)

    def _update_sync(self, add, upsert, delete, delete_where=None,
                     delete_all: bool = False, namespace: str | None = None
                     ) -> dict[str, Any]:
        if not add and not delete and delete_where is None:  # nothing to do: no new generation
            g = self.current()
            return {"generation": g.number, "passages": g.index.n_passages,
                    "propositions": g.index.n_props, "changes": {}}
        with self._update_lock:
            up = None
            if self.journal and self._broken is None:  # one journal record: the change
                gen = self.gen
                up = journal_update(
                    self.index_dir, gen.index,
                    lambda: self.gen is gen and self._files_identity() == self._ident,
                    delete=delete, add=add, embedder=self.embedder,
                    delete_where=delete_where, delete_all=delete_all, upsert=upsert,
                    namespace=namespace)
            if up is not None:
                new = self._generation(up.index, self.gen.number + 1, namespace)
                self._journalled = True
                self._journal_records += 1
            else:
                up = apply_update(self.index_dir, delete=delete, add=add,
                                  embedder=self.embedder, delete_where=delete_where,
                                  delete_all=delete_all, upsert=upsert, namespace=namespace)
                # what was just saved, memory-mapped as a start loads it (the fast tier:
                # the save stamped the files it wrote from a load that checked them)
                new = self._generation(PropositionIndex.load(self.index_dir),
                                       self.gen.number + 1, namespace)
                self._journalled, self._journal_records = False, 0
            self.gen, self._ident, self._broken = new, self._files_identity(), None
            if self._journal_records >= self.JOURNAL_MAX:
                self._compact_locked()
            if up.changes.get("deleted") or up.changes.get("replaced"):
                self._drop_orphan_uploads(new.index)
        self.metrics.generation.set(new.number)
        return {"generation": new.number, "passages": new.index.n_passages,
                "propositions": new.index.n_props, "changes": up.counts()}


    # ------------------------------------------------------------------ documents
    #: the most files one upload may hold
    MAX_UPLOAD_FILES = 100

    @property
    def uploads_dir(self) -> Path:
        """Where uploaded files are kept (beside the index, hidden; their sources read
        ``uploads/NAME``): a later upload of the same name replaces that file's passages."""
        return self.index_dir.parent / f".{self.index_dir.name}.uploads" / "uploads"

    async def add_documents(self, files: list[tuple[str, bytes]],
                            namespace: str | None = None) -> dict[str, Any]:
        """Index uploaded ``(file name, bytes)`` with the readers and limits ``evireform
        index`` uses: each file's result (indexed with its passages, or skipped with the
        reason), then the new generation (a file read before replaces its passages).
        ``namespace`` (a tenant's upload): its files are kept under ``uploads/NAMESPACE/``
        and their passages land in the namespace."""
        out = await asyncio.get_running_loop().run_in_executor(
            self._upd, self._add_documents_sync, files, namespace)
        self._schedule_compaction()
        return out

    def _add_documents_sync(self, files: list[tuple[str, bytes]],
                            namespace: str | None = None) -> dict[str, Any]:
        from ..documents import CORPUS_SUFFIXES, load_paths, document_roots
        from ..formats import read_limit, reading_limits
        if not files:
            raise ValueError("no files: send one or more as multipart form field 'files'")
        if len(files) > self.MAX_UPLOAD_FILES:
            raise ValueError(f"{len(files)} files; at most {self.MAX_UPLOAD_FILES} an upload")
        up = self.uploads_dir
        up.mkdir(parents=True, exist_ok=True)
        if namespace is not None:  # a tenant's files in a folder of its own
            files = [(f"{namespace}/{n}" if upload_name_problem(n) is None else n, d)
                     for n, d in files]
        results: list[dict[str, Any]] = []
        paths = []
        with reading_limits(self.read_limits):
            cap = read_limit("document_bytes")
        seen: set[str] = set()
        #: what this upload wrote: (the file, what it replaced: a hidden copy, or None),
        #: undone when the upload is refused
        written: list[tuple[Path, Path | None]] = []
        for name, data in files:
            why = upload_name_problem(name)
            if why is None and name in seen:  # one file a name: the first is read
                why = "the same name appears earlier in this upload"
            if isinstance(name, str):
                seen.add(name)
            if why is None and Path(name).suffix.lower() in CORPUS_SUFFIXES:
                # a corpus file's records would carry any id, namespace and source they
                # name (issue 81): records go through /update, which checks them
                why = ("a corpus file (records, not a document): send its records to "
                       "/update")
            if why is None and len(data) > cap:
                why = f"{len(data):,} bytes, more than a document may have"
            if why:
                results.append({"file": str(name)[:200], "status": "skipped", "reason": why})
                continue
            target = up / name
            tmp = target.parent / f".{target.name}.part"
            prev = target.parent / f".{target.name}.prev"
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                tmp.write_bytes(data)
                kept = None
                if target.is_file():  # kept until the upload is saved (or refused)
                    os.replace(target, prev)
                    kept = prev
                os.replace(tmp, target)
                written.append((target, kept))
            except (IsADirectoryError, NotADirectoryError, FileExistsError) as exc:
                if tmp.parent.is_dir():
                    tmp.unlink(missing_ok=True)
                why = ("a folder of that name was uploaded before"
                       if isinstance(exc, IsADirectoryError) else
                       "a file of one of its folders' names was uploaded before")
                results.append({"file": name, "status": "skipped", "reason": why})
                continue
            paths.append((name, target))
        try:
            out = self._index_uploads(up, paths, results, namespace)
        except BaseException:  # refused: the files go, the ones they replaced come back
            for target, kept in reversed(written):
                target.unlink(missing_ok=True)
                if kept is not None:
                    os.replace(kept, target)
            raise
        if namespace is not None:  # each file as the tenant named it
            for r in out["files"]:
                if r["file"].startswith(f"{namespace}/"):
                    r["file"] = r["file"][len(namespace) + 1:]
        for target, kept in written:
            if kept is not None:  # replaced: the old copy goes; skipped: it comes back
                if target.exists():
                    kept.unlink(missing_ok=True)
                else:
                    os.replace(kept, target)
        return out

    def _index_uploads(self, up: Path, paths: list, results: list,
                       namespace: str | None = None) -> dict[str, Any]:
        """Read the uploaded files written to ``paths`` and save the update (the rest of
        :meth:`_add_documents_sync`, whose caller undoes the files when this raises)."""
        from ..documents import load_paths, document_roots
        loaded = None
        if paths:
            loaded = load_paths([t for _, t in paths], embedder=self.embedder,
                                skip_errors=True, roots=[str(up.resolve())] + document_roots(
                                    self.current().index), limits=self.read_limits,
                                empty_ok=True)
            failed = dict(loaded.errors)
            for name, target in paths:
                src = f"uploads/{name}"
                if src in loaded.sources:
                    results.append({"file": name, "status": "indexed", "source": src,
                                    "passages": loaded.sources[src]})
                else:  # unreadable, or a format with no reader: not kept on the server
                    extra = loaded.needs_extra.get(target.suffix.lower())
                    reason = failed.get(str(target)) or (
                        f"install 'evireform[{extra}]' to read it" if extra
                        else "no reader takes it")
                    results.append({"file": name, "status": "skipped",
                                    "reason": _no_paths(reason.replace(str(target), name),
                                                        self.index_dir)})
                    target.unlink(missing_ok=True)
                    loaded.skipped.discard(src)
        if loaded is None or not loaded.sources:
            g = self.current()
            return {"files": results, "generation": g.number,
                    "passages": g.index.n_passages, "propositions": g.index.n_props,
                    "changes": {}}
        done = self._update_sync(loaded, False, None, namespace=namespace)
        return {"files": results, **done}

    def _drop_orphan_uploads(self, index: Any) -> None:
        """Uploaded files whose source has no passage left (deleted with ``/update``'s
        ``delete_where {"source": "uploads/NAME"}``, or by id) removed from the uploads
        area, and their emptied folders; nothing else there is touched."""
        up = self.uploads_dir
        if not up.is_dir():
            return
        from ..strings import metadata_values
        held = {s for s in metadata_values(index.passages, "source") if isinstance(s, str)
                and s.startswith("uploads/")}
        for f in sorted(up.rglob("*"), reverse=True):  # files before their folders
            rel = f.relative_to(up).as_posix()
            if any(part.startswith(".") for part in rel.split("/")):
                continue  # an upload in flight (.part) or a replaced file's copy (.prev)
            if f.is_file() and not f.is_symlink() and f"uploads/{rel}" not in held:
                f.unlink(missing_ok=True)
            elif f.is_dir() and not f.is_symlink() and not any(f.iterdir()):
                f.rmdir()

    async def answer(self, question: str, result: Any) -> Any:
        """The :class:`~evireform.answer.Answer` to ``question`` from ``result``'s passages:
        the service's LLM's (``llm``) on a worker thread, else the extractive one."""
        from ..answer import answer_question
        if self.llm is None:
            return answer_question(question, result)
        return await asyncio.to_thread(answer_question, question, result, self.llm)

    def sources(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """The documents the index holds passages of: ``{"source", "passages", "title"}``
        per metadata ``source``, in name order (``namespace``: of its passages only)."""
        from ..strings import column, metadata_values
        idx = self.current().index
        out: dict[str, dict[str, Any]] = {}
        titles = column(idx.passages, "titles")  # no text decoded, no metadata but sources
        spaces = None if namespace is None else metadata_values(idx.passages, "namespace")
        for j, src in enumerate(metadata_values(idx.passages, "source")):
            if spaces is not None and spaces[j] != namespace:
                continue
            if isinstance(src, str):
                e = out.get(src)
                if e is None:
                    e = out[src] = {"source": src, "passages": 0, "title": titles[j]}
                e["passages"] += 1
        return [out[k] for k in sorted(out)]

    def tenant_view(self, out: Any, namespace: str, generation: int | None = None) -> Any:
        """``out`` (an answer's JSON: a result record, an update's or upload's report, a
        passage, the sources) as a tenant of ``namespace`` reads it: what an index of the
        tenant's own would show (issue 81).  Ids and uploads' sources as the tenant names
        them (:func:`~evireform.application.shown_id`: ``memo``, not the kept
        ``NAMESPACE/memo``; ``uploads/note.md``, not ``uploads/NAMESPACE/note.md``), the
        evidence graph's passage positions and the hits' proposition positions counted
        among the namespace's own, and an update's passage and proposition counts the
        namespace's, and generation numbers counting the updates that could have changed
        the namespace (its own, and those confined to none).  ``generation``: the one that
        answered (positions are its)."""
        import numpy as np
        from ..application import shown_id
        from ..strings import metadata_values
        gen = self._generations.get(generation) if generation is not None else None
        gen = gen or self.current()
        got = gen.namespace_positions.get(namespace)
        if got is None:
            idx = gen.index
            mine = np.fromiter((v == namespace for v in metadata_values(
                idx.passages, "namespace")), bool, idx.n_passages)
            props = mine[np.asarray(idx.owner)] if idx.n_props else np.zeros(0, bool)
            got = gen.namespace_positions[namespace] = (
                np.cumsum(mine) - 1, np.cumsum(props) - 1, int(mine.sum()), int(props.sum()))
        p_pos, i_pos, n_p, n_i = got

        def src(v: Any) -> Any:  # a source: only an upload's is kept otherwise
            return shown_id(v, namespace) if isinstance(v, str) and \
                v.startswith(f"uploads/{namespace}/") else v

        def number(n: int) -> int:  # a generation as the tenant's own service would count
            g = self._generations.get(n) or gen
            return g.shared_changes + g.namespace_changes.get(namespace, 0)

        def view(x: Any, key: str | None) -> Any:
            if key == "generation" and isinstance(x, int) and not isinstance(x, bool):
                return number(x)
            if isinstance(x, str):
                return shown_id(x, namespace) if key in _ID_FIELDS else \
                    src(x) if key == "source" else x
            if isinstance(x, list):
                return [view(v, key) for v in x]
            if not isinstance(x, dict):
                return x
            d = {}
            for k, v in x.items():
                if k == "metadata" and isinstance(v, dict):
                    d[k] = {m: src(w) if m == "source" else w for m, w in v.items()}
                elif k == "index" and key == "nodes" and isinstance(v, int):
                    d[k] = int(p_pos[v])
                elif k == "proposition" and isinstance(v, int):
                    d[k] = int(i_pos[v])
                else:
                    d[k] = view(v, k)
            return d
        out = view(out, None)
        if isinstance(out, dict) and isinstance(out.get("passages"), int) \
                and isinstance(out.get("propositions"), int):
            out["passages"], out["propositions"] = n_p, n_i
        return out

    def passage(self, pid: str, namespace: str | None = None) -> dict[str, Any]:
        """One passage by id (``KeyError`` when the index has none, or none in
        ``namespace``: another tenant's passage is as unknown as a missing one)."""
        idx = self.current().index
        if namespace is not None:  # the id as stored or as the tenant sent it
            from ..application import tenant_passage
            j = tenant_passage(idx, namespace, pid)
            if j is None:
                raise KeyError(f"no passage with id {pid!r:.200}")
        else:
            try:
                j = idx.passage_index(pid)
            except KeyError:
                raise KeyError(f"no passage with id {pid!r:.200}") from None
        p = idx.passage(j)
        return {"id": p.id, "title": p.title, "text": p.text, "metadata": dict(p.metadata)}


#: folders an uploaded file's name may hold ("notes/2024/a.md": three parts)
MAX_UPLOAD_DEPTH = 16


def upload_name_problem(name: Any) -> str | None:
    """Why an uploaded file's name cannot be stored (None when it can): a file name, or a
    relative path of such names joined by "/" (a folder uploaded from the page: at most
    ``MAX_UPLOAD_DEPTH`` parts), none empty, ".", ".." or hidden; valid text; each part at
    most 255 bytes."""
    if not isinstance(name, str) or not name:
        return "no file name"
    if any(ord(c) < 32 or 0xD800 <= ord(c) <= 0xDFFF for c in name):
        return "a file name of printable text"
    parts = name.split("/")
    if "\\" in name or len(parts) > MAX_UPLOAD_DEPTH or any(
            not p or p in (".", "..") or p.startswith(".") for p in parts):
        return (f"a file name, or a relative path of at most {MAX_UPLOAD_DEPTH} parts, "
                "none empty, '..' or starting with '.'")
    if any(len(p.encode("utf-8")) > 255 for p in parts):
        return "a file name of at most 255 bytes"
    return None


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
