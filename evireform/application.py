"""The application layer: what the command line, the HTTP service and the framework adapters
share, so that each of them is a door and none holds library logic of its own.

* :data:`METHODS` and :func:`make_method` - the one registry of the methods a question can
  be answered with (EviReform and the strategies of :mod:`evireform.strategies`);
* :func:`llm_roles` - the LLM selector, reformulator and controller of one
  :class:`~evireform.llm.LLMClient`;
* :func:`index_embedder` - the embedder a saved index uses (its manifest's spec, or the
  user's embedder checked against it);
* :func:`apply_update` - deletions then additions applied to a saved index under its lock and
  saved atomically: ``evireform update`` and the service's ``/update`` run this one function,
  and the service serves any generation it writes (its own or another process's) from the
  next batch on;
* the result record is :meth:`evireform.retriever.RetrievalResult.to_dict`: ``query --json``,
  ``query --questions`` JSONL and the service's ``/query`` all print it.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, TYPE_CHECKING

from .documents import Loaded, replace_sources
from .embed import embedder_from_spec, get_embedder
from .extract import extractor_recorded, make_extractor
from .index import PassageConflict, PropositionIndex, provide_journal_replay
from .types import Passage
from .llm import LLMController, LLMReformulator, LLMSelector
from .retriever import EviReform
from .store import index_lock
from .strategies import STRATEGIES, make_strategy

if TYPE_CHECKING:  # annotations only
    from .embed import Embedder
    from .extract import Extractor
    from .index import PropositionIndex
    from .types import FilterSpec, StrPath

log = logging.getLogger(__name__)

__all__ = ["METHODS", "make_method", "llm_roles", "index_embedder", "Update", "apply_update"]

#: every method a question can be answered with, in the order the CLI and the service list
#: them: EviReform, then the strategies (BGR and its variants, Hi-Q and its variant)
METHODS: tuple[str, ...] = ("evireform", *STRATEGIES)


def llm_roles(client: Any) -> dict[str, Any]:
    """``{"selector", "reformulator", "controller"}``: the LLM roles over ``client`` (an
    :class:`~evireform.llm.LLMClient`); ``{}`` (the LLM-free roles) when it is None."""
    if client is None:
        return {}
    return dict(selector=LLMSelector(client), reformulator=LLMReformulator(client),
                controller=LLMController(client))


def make_method(name: str, index: PropositionIndex, embedder: Embedder | None=None, *, llm: Any=None, engine: Any=None, config: Any=None,
                roles: dict[str, Any] | None = None, max_workers: int = 1):
    """The retriever answering with ``name`` (one of :data:`METHODS`) over ``index``: an
    :class:`~evireform.retriever.EviReform` (its roles: ``roles``, else the LLM roles of
    ``llm`` when given, else the LLM-free ones) or a strategy
    (:func:`~evireform.strategies.make_strategy`, with ``llm`` for its LLM steps).  Every one
    of them has ``retrieve(question, k, filter=)`` and ``retrieve_many(questions, k,
    filter=)``."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; choose from {', '.join(METHODS)}")
    if name == "evireform":
        roles = llm_roles(llm) if roles is None else roles
        return EviReform(index, config, embedder=embedder, max_workers=max_workers,
                         engine=engine, **roles)
    return make_strategy(name, index, embedder, llm, engine=engine)


def index_embedder(index: PropositionIndex, embedder: str | None = None, *, device: str | None = None,
                   encoder: str = "auto", **options):
    """The embedder for the saved ``index``: the one its manifest records (with its prompts
    and dimension), or ``embedder`` (a name, e.g. ``"hashing-64"``, built with ``options``:
    :func:`evireform.embed.get_embedder`) when the user names a different one; the retriever
    then checks that it embeds like the index's.  An index file never chooses a remote
    embedder: one is used only when the user names it here."""
    spec = index.meta.get("embedder_spec") or index.embedder_name
    named = spec.get("spec") if isinstance(spec, dict) else spec
    if embedder and embedder != named:
        return get_embedder(embedder, device=device, encoder=encoder, **options)
    return embedder_from_spec(spec, device=device, allow_remote=bool(embedder),
                              encoder=encoder)


def update_extractor(index: PropositionIndex, extractor: Extractor | None=None):
    """The extractor that adds passages to ``index``: ``extractor`` (an
    :class:`~evireform.extract.Extractor`, or an LLM-free extractor's name such as
    ``"phrases"``) when given, else the LLM-free one the index was built with.  An index
    built from an OpenIE file cannot grow (its triples came from the file)."""
    built = index.meta.get("extractor")
    if isinstance(built, str) and built.startswith("openie:"):
        raise ValueError(f"the index was built from an OpenIE file ({built}); passages cannot "
                         "be added to it without their triples: rebuild it with the new "
                         "passages' triples in the OpenIE file")
    if isinstance(extractor, str):
        return make_extractor(extractor, built)
    return extractor if extractor is not None else extractor_recorded(
        built, index.meta.get("extractor_choice"))


class DeletesEverything(ValueError):
    """A delete filter that matches every passage (of the index, or of the namespace) while
    emptying it was not asked for (``--all``, ``"all": true``): nothing is deleted. The
    service answers it with 409, a refusal of the index's state, as it does a conflicting id."""


def _matching_ids(index: PropositionIndex, flt: FilterSpec, every: bool = False) -> list[str]:
    """The ids of the passages filter ``flt`` matches (``KeyError`` when none does;
    ``DeletesEverything`` when it matches every passage, unless ``every``)."""
    from .filters import FilterTargetMissing, restriction
    try:
        r = restriction(index, flt)
    except FilterTargetMissing:
        r = None  # a key no passage has, or unknown ids: nothing matches
    ids = [] if r is None else [index.passages[int(j)].id for j in r.passages]
    if not ids:
        raise KeyError(f"no passage matches the filter {flt!r:.300}; nothing was deleted")
    if len(ids) == index.n_passages and not every:
        raise DeletesEverything(f"the filter {flt!r:.300} matches every passage of the "
                                f"index ({len(ids):,}); nothing was deleted. To empty the "
                                "index on purpose, say so: --all (CLI) or \"all\": true "
                                "(/update)")
    return ids


def _matching_ids_or_none(index: PropositionIndex, flt: FilterSpec) -> list[str] | None:
    try:
        return _matching_ids(index, flt, True)
    except KeyError:
        return None


def scoped_id(pid: str, namespace: str) -> str:
    """Where a tenant's id ``pid`` is kept: ``NAMESPACE/pid``, so that two namespaces' ids
    never meet: one tenant's id cannot be refused as taken by another's, nor tell of it
    (issue 81).  :func:`shown_id` is its inverse: what the tenant reads back.  Ids made
    from content are scoped by their hash instead (:func:`evireform.corpus.content_id`)."""
    return f"{namespace}/{pid}"


def _unprefixed(s: str, namespace: str) -> str | None:
    """``s`` as a tenant of ``namespace`` names it (None when ``s`` is not kept in a
    tenant's form): an id kept as ``NAMESPACE/id`` is ``id``, an upload's source or chunk
    id kept as ``uploads/NAMESPACE/NAME`` is ``uploads/NAME``."""
    if s.startswith(f"{namespace}/"):
        return s[len(namespace) + 1:]
    if s.startswith(f"uploads/{namespace}/"):
        return "uploads/" + s[len(namespace) + 9:]
    return None


def shown_id(pid: str, namespace: str) -> str:
    """What a tenant of ``namespace`` reads where the index keeps ``pid`` (an id or an
    upload's source): what an index of the tenant's own would show (issue 81)."""
    got = _unprefixed(pid, namespace)
    return pid if got is None else got


def stored_source(src: Any, namespace: str) -> Any:
    """Where the index keeps the source a tenant names ``src``: its uploads are kept as
    ``uploads/NAMESPACE/NAME``; any other source as named."""
    if isinstance(src, str) and src.startswith("uploads/"):
        return f"uploads/{namespace}/" + src[len("uploads/"):]
    return src


def tenant_passage(index: PropositionIndex, namespace: str, pid: Any) -> int | None:
    """The position of the namespace's passage a tenant names ``pid`` (as :func:`shown_id`
    shows it: an id it sent, an upload's chunk ``uploads/NAME#N``; or as the index keeps
    it: the operator's view, and ids the namespace held before ids were scoped), or None
    when the namespace has no such passage (another namespace's is as unknown as a missing
    one)."""
    if not isinstance(pid, str):
        return None
    cands = [scoped_id(pid, namespace)]
    if pid.startswith("uploads/"):
        cands.append(stored_source(pid, namespace))
    cands.append(pid)
    for cand in cands:
        if index.has_passage(cand):
            j = index.passage_index(cand)
            if index.passage(j).metadata.get("namespace") == namespace:
                return j
    return None


def tenant_source_filter(flt: Any, namespace: str) -> Any:
    """A tenant's where clause as the index keeps its values: each ``source`` operand
    naming an upload (``uploads/NAME``) becomes where the upload is kept
    (:func:`stored_source`), so a tenant filters and deletes by the names it reads."""
    if isinstance(flt, list):
        return [tenant_source_filter(c, namespace) for c in flt]
    if not isinstance(flt, dict):
        return flt
    out = {}
    for key, val in flt.items():
        if key == "source":
            if isinstance(val, dict):
                val = {op: ([stored_source(v, namespace) for v in arg]
                            if isinstance(arg, list) else stored_source(arg, namespace))
                       for op, arg in val.items()}
            else:
                val = stored_source(val, namespace)
        elif key in ("$and", "$or"):
            val = tenant_source_filter(val, namespace)
        out[key] = val
    return out


def tenant_message(message: str, namespace: str) -> str:
    """An error message for a tenant: the ids and sources it quotes as the tenant names
    them (quoted ``'NAMESPACE/...`` or ``'uploads/NAMESPACE/...``)."""
    for q in ("'", '"'):
        message = message.replace(f"{q}uploads/{namespace}/", f"{q}uploads/").replace(
            f"{q}{namespace}/", q)
    return message


def _in_namespace(add: Any, namespace: str) -> Any:
    """``add`` with every passage in ``namespace`` (its metadata's ``namespace`` set; a
    passage naming another one refused) and every id given with a passage kept in it
    (:func:`scoped_id`; read files' ids name their source and stay)."""
    if add is None:
        return None
    from .corpus import as_passages

    def one(p: Passage, pid: str | None = None) -> Passage:
        have = p.metadata.get("namespace")
        if have is not None and have != namespace:
            raise ValueError(f"passage {p.id!r:.100}: its metadata names namespace "
                             f"{have!r:.100}, not this update's {namespace!r:.100}")
        return Passage(pid or p.id, p.title, p.text, {**p.metadata, "namespace": namespace})
    if isinstance(add, Loaded):  # a copy: the caller's read stays as it was
        from dataclasses import replace
        return replace(add, passages=[one(p) for p in add.passages])
    from ._checks import as_list
    items = as_list(add, "passages")
    given = [p.id if isinstance(p, Passage) else
             p.get("id") if isinstance(p, dict) and isinstance(p.get("id"), str) else None
             for p in items]
    # an id made from a record's content is made in the namespace: the same text added by
    # another tenant gets another id, so neither can learn of the other's text (issue 81)
    return [one(p, None if g is None else scoped_id(g, namespace))
            for p, g in zip(as_passages(items, scope=namespace), given)]


def _tenant_ids(index: PropositionIndex, namespace: str, delete: Any, add: Any
                ) -> tuple[Any, Any]:
    """A tenant's ids judged inside its namespace: each id to delete is the namespace's
    passage it names (:func:`tenant_passage`; another tenant's id is unknown, as if the
    index had no such passage); an id to add that the namespace holds unscoped (a passage
    added before ids were scoped) names that passage again.  Ids of different namespaces
    never meet, so an add is refused as taken (409) only by the namespace's own."""
    out = []
    for pid in delete or ():
        j = tenant_passage(index, namespace, pid)
        if j is None:
            raise KeyError(f"unknown passage id {pid!r:.200}")
        out.append(index.passage(j).id)
    if add is not None and not isinstance(add, Loaded):
        renamed = []
        for p in add:  # an id the namespace keeps otherwise (unscoped, an upload's chunk)
            raw = _unprefixed(p.id, namespace)
            j = None if raw is None or index.has_passage(p.id) else \
                tenant_passage(index, namespace, raw)
            if j is not None:
                p = Passage(index.passage(j).id, p.title, p.text, p.metadata)
            renamed.append(p)
        add = renamed
    passages = add.passages if isinstance(add, Loaded) else (add or ())
    for p in passages:
        if index.has_passage(p.id) and \
                index.passage(index.passage_index(p.id)).metadata.get("namespace") != namespace:
            raise PassageConflict(f"passage id {p.id!r:.200} is taken; choose another id")
    return (out if delete is not None else None), add


@dataclass
class Update:
    """What :func:`apply_update` did: the new ``index`` (saved unless ``saved`` is False),
    the counts ``before`` it, and ``changes`` (``{"deleted", "added", "replaced",
    "duplicates", ...}``: passage ids)."""

    index: PropositionIndex
    before: tuple[int, int]
    changes: dict[str, Any] = field(default_factory=dict)
    saved: bool = True
    extractor: object = None
    #: the passages embedded whole by this update (``passage_vectors``), 0 if none
    passage_vectors: int = 0

    def counts(self) -> dict[str, Any]:
        return {k: len(v) for k, v in self.changes.items()}


def _merge(changes: dict[str, Any], new: dict[str, Any]) -> None:
    for key, ids in new.items():
        changes[key] = changes.get(key, []) + list(ids)


def _prepared(add: Any, delete: Any, delete_where: Any, namespace: str | None,
              other: bool = False) -> tuple[Any, Any]:
    """An update's ``add`` and ``delete_where`` checked and put in its namespace, before
    the index's lock is taken (what :func:`compute_update` takes); ``other``: the update
    does something else too (``passage_vectors``), so it may add and delete nothing."""
    if not isinstance(add, Loaded) and not add:
        add = None  # an empty list adds nothing
    if add is None and not delete and delete_where is None and not other:
        raise ValueError("give passages to add and/or ids or a filter to delete")
    if delete_where is not None:
        from .filters import compile_filter
        compile_filter(delete_where)  # a malformed filter is refused before the lock
    if namespace is not None:
        if not isinstance(namespace, str) or not namespace:
            raise ValueError("namespace: a non-empty string")
        add = _in_namespace(add, namespace)
        if delete_where is not None:
            delete_where = {"$and": [{"namespace": namespace}, delete_where]}
    return add, delete_where


def compute_update(idx: PropositionIndex, *, delete: Sequence[str] | None = None,
                   add: Any = None, embedder: Embedder | None = None, upsert: bool = False,
                   extractor: Extractor | None = None, show_progress: bool = False,
                   delete_where: FilterSpec = None, delete_all: bool = False,
                   namespace: str | None = None, refit: bool = False,
                   passage_vectors: bool = False) -> Update:
    """The update :func:`apply_update` makes, on the index ``idx`` in memory (``add`` and
    ``delete_where`` as :func:`_prepared` gave them); nothing is saved.  The one place an
    update's deletes and adds are worked out: a save, a journal record and a journal's
    replay all run it.  ``passage_vectors``: an index without passage embeddings gets them
    after the deletes, before the adds (which then embed their passages too)."""
    out = Update(idx, (idx.n_passages, idx.n_props))
    if namespace is not None:
        delete, add = _tenant_ids(idx, namespace, delete, add)
    if delete_where is not None:
        every = delete_all
        if namespace is not None and not delete_all:  # every passage of the namespace
            mine = _matching_ids_or_none(idx, {"namespace": namespace})
            got = _matching_ids(idx, delete_where, True)
            if mine is not None and len(got) == len(mine):
                raise DeletesEverything(
                    f"the filter matches every passage of namespace {namespace!r:.100} "
                    f"({len(got):,}); nothing was deleted. To empty it on purpose, say "
                    "so: --all (CLI) or \"all\": true (/update)")
            every = True
        delete = list(delete or []) + _matching_ids(idx, delete_where, every)
    if delete:
        idx = idx.delete(list(delete))
        _merge(out.changes, idx.changes)
    if passage_vectors and idx.passage_embeddings is None:
        idx = idx.with_passage_vectors(embedder, show_progress=show_progress)
        out.passage_vectors = idx.n_passages
    if add is not None:
        out.extractor = ext = update_extractor(idx, extractor)
        kw = dict(show_progress=show_progress, extractor=ext, refit=refit)
        if isinstance(add, Loaded):
            def chunk(p):  # a chunk of a text file read (not a corpus record)
                src = p.metadata.get("source")
                return src in add.sources and p.id.startswith(src + "#")
            docs = [p for p in add.passages if chunk(p)]
            rest = [p for p in add.passages if not chunk(p)]
            if add.sources:  # chunked files: the index made to match them
                idx = replace_sources(idx, Loaded(docs, add.sources, files=add.files,
                                                  scopes=add.scopes, skipped=add.skipped,
                                                  skipped_dirs=add.skipped_dirs),
                                      embedder, **kw)
                _merge(out.changes, idx.changes)
        else:
            rest = list(add)
        if rest:
            idx = idx.upsert(rest, embedder, **kw) if upsert else \
                idx.add(rest, embedder, **kw)
            _merge(out.changes, idx.changes)
    out.index = idx
    return out


def _passage_json(p: Any) -> Any:
    if isinstance(p, Passage):
        return {"id": p.id, "title": p.title, "text": p.text, "metadata": dict(p.metadata)}
    return p


def _request_json(add: Any, delete: Any, upsert: bool, delete_where: Any, delete_all: bool,
                  namespace: str | None) -> dict[str, Any] | None:
    """An update as the journal records it (JSON data that reads back equal), or None when
    it cannot be (the caller saves in full)."""
    import json
    if isinstance(add, Loaded):
        add = {"loaded": {"passages": [_passage_json(p) for p in add.passages],
                          "sources": add.sources, "files": add.files,
                          "scopes": [list(x) for x in add.scopes],
                          "skipped": sorted(add.skipped),
                          "skipped_dirs": [list(x) for x in add.skipped_dirs]}}
    elif add is not None:
        from ._checks import as_list
        add = [_passage_json(p) for p in as_list(add, "passages")]
    req = {"add": add, "delete": None if delete is None else list(delete), "upsert": upsert,
           "delete_where": delete_where, "delete_all": delete_all, "namespace": namespace}
    try:  # what JSON keeps as it was (no tuples, no NaN, no objects)
        if json.loads(json.dumps(req, allow_nan=False)) != req:
            return None
    except (TypeError, ValueError):
        return None
    return req


def _request_args(req: dict[str, Any]) -> dict[str, Any]:
    """A journal record's request as :func:`apply_update`'s arguments."""
    add = req.get("add")
    if isinstance(add, dict) and "loaded" in add:
        d = add["loaded"]
        from .corpus import as_passages
        add = Loaded(as_passages(d["passages"]), dict(d["sources"]), files=dict(d["files"]),
                     scopes=[tuple(x) for x in d["scopes"]], skipped=set(d["skipped"]),
                     skipped_dirs=[tuple(x) for x in d["skipped_dirs"]])
    return {"add": add, "delete": req.get("delete"), "upsert": bool(req.get("upsert")),
            "delete_where": req.get("delete_where"),
            "delete_all": bool(req.get("delete_all")), "namespace": req.get("namespace")}


def journal_update(index_dir: StrPath, base: PropositionIndex, still: Callable[[], bool], *,
                   delete: Sequence[str] | None = None, add: Any = None,
                   embedder: Embedder | None = None, upsert: bool = False,
                   delete_where: FilterSpec = None, delete_all: bool = False,
                   namespace: str | None = None) -> Update | None:
    """:func:`apply_update` made on ``base`` (the index the directory holds, in memory:
    its saved files plus its journal) and written as one journal record
    (:mod:`evireform.store.journal`) instead of a full save: work as large as the change.
    ``still()`` runs under the index's lock and says whether the directory is still what
    ``base`` was read from; when it is not (another process saved meanwhile), or the update
    cannot be recorded as JSON, nothing is done and None is returned (update the classic
    way).  The returned update's ``index`` is the new one, in memory; a load of the
    directory replays the journal to the same index."""
    from .store.journal import RecordingEmbedder, append, manifest_digest
    raw = _request_json(add, delete, upsert, delete_where, delete_all, namespace)
    if raw is None:
        return None
    add, delete_where = _prepared(add, delete, delete_where, namespace)
    with index_lock(index_dir):
        if not still():
            return None
        rec = RecordingEmbedder(embedder)
        out = compute_update(base, delete=delete, add=add, embedder=rec, upsert=upsert,
                             delete_where=delete_where, delete_all=delete_all,
                             namespace=namespace)
        texts, rows = rec.recorded()
        append(index_dir, manifest_digest(index_dir), raw, texts, rows)
    return out


def replay_journal(idx: PropositionIndex, index_dir: StrPath) -> PropositionIndex:
    """``idx`` (the saved index at ``index_dir``) with the updates its journal holds made
    again, in order, with the recorded embeddings (no encoder): the index the service that
    wrote them served."""
    from .store.journal import ReplayEmbedder, read
    for req, texts, rows in read(index_dir):
        args = _request_args(req)
        add, where = _prepared(args["add"], args["delete"], args["delete_where"],
                               args["namespace"])
        emb = ReplayEmbedder(idx.embedder_name, idx.dim, texts, rows)
        idx = compute_update(idx, delete=args["delete"], add=add, embedder=emb,
                             upsert=args["upsert"], delete_where=where,
                             delete_all=args["delete_all"], namespace=args["namespace"]).index
    return idx


provide_journal_replay(replay_journal)  # PropositionIndex.load replays with it


def apply_update(index_dir: StrPath, *, delete: Sequence[str] | None = None, add: Any=None,
                 embedder: Embedder | None=None, upsert: bool = False, extractor: Extractor | None=None,
                 show_progress: bool = False,
                 before_save: Callable[[Update], bool] | None = None,
                 delete_where: FilterSpec = None, delete_all: bool = False,
                 namespace: str | None = None, refit: bool = False,
                 passage_vectors: bool = False) -> Update:
    """Delete the passages ``delete`` (ids; unknown ones raise ``KeyError``), then add ``add``
    (passages, records, or a :class:`~evireform.documents.Loaded` read from files and
    folders: the index is made to match those files) to the index saved at ``index_dir``,
    and save the new generation atomically (the old one stays until the new one is in place).

    Everything runs under the index's lock, from a load that checks every file's sha256
    and, unless the index's stamp says its files were fully verified, every value (a save
    would stamp data nobody checked; the lexical counts are checked by checksum, not
    recounted; ``verify="checksums"`` in :func:`evireform.store.load_index`) to the
    save, so concurrent updates queue instead of losing each other; read slow inputs *before* calling this (the lock is held throughout).
    ``upsert``: passages whose ids exist are replaced instead of refused.  ``extractor``:
    see :func:`update_extractor`.  ``before_save(update)`` returning False leaves the saved
    index as it was (``Update.saved`` False): the CLI's ``--strict-llm``.  ``delete_where``:
    a filter (:mod:`evireform.filters`, e.g. ``{"source": "notes/a.md"}`` to delete a
    document's passages) whose matching passages are deleted too; one that matches nothing
    raises ``KeyError``, and one that matches every passage (``{}`` among them) is refused
    unless ``delete_all`` (the CLI's ``--all``, ``/update``'s ``"all": true``).
    ``namespace``: a tenant's update, confined to its passages: added passages get it as
    their ``namespace`` metadata (another one is refused), ids to delete or replace are
    judged inside it (another tenant's id is unknown here, or taken), and ``delete_where``
    is and-ed with it ("every passage" then means every passage of the namespace).
    ``refit``: the extractor's corpus statistics learnt again from every passage of the
    namespaces added to, instead of updated from the counts the index carries
    (:meth:`PropositionIndex.add`).  ``passage_vectors``: every passage of an index built
    without passage embeddings embedded whole by ``embedder`` (the question's own search,
    :attr:`~evireform.retriever.EviReformConfig.own_search`)."""
    add, delete_where = _prepared(add, delete, delete_where, namespace, passage_vectors)
    with index_lock(index_dir):
        # the checksums tier: the full one unless the stamp says these files were fully
        # verified, and every file's sha256 either way (the save copies bytes and stamps
        # them again, so bit rot the stamp's edge digest misses must be caught here; the
        # lexical counts by checksum, not recounted); no stamp written: an update refused
        # below leaves the directory as it was
        idx = PropositionIndex.load(index_dir, verify="checksums", stamp=False)
        out = compute_update(idx, delete=delete, add=add, embedder=embedder, upsert=upsert,
                             extractor=extractor, show_progress=show_progress,
                             delete_where=delete_where, delete_all=delete_all,
                             namespace=namespace, refit=refit,
                             passage_vectors=passage_vectors)
        idx = out.index
        if before_save is not None and not before_save(out):
            out.saved = False
            log.warning("update of %s not saved (refused before the save)", index_dir)
            return out
        idx.save(index_dir)
    log.info("updated %s: %d -> %d passages (%s)", index_dir, out.before[0], idx.n_passages,
             ", ".join(f"{k} {v}" for k, v in out.counts().items() if v) or "no change")
    return out
