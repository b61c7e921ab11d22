"""The proposition-entity index, as data: build, update, save, load.

An index holds the passages, their propositions (text and owner passage), canonical entities,
the binary incidence A as CSR plus its transpose with the precomputed degree terms
(:class:`~evireform.kernels.EntityGraph`), the passage map with 1/sqrt(|P_j|)
(:class:`~evireform.kernels.PassageMap`) and float32 unit-norm proposition embeddings, plus
metadata.  It does not search: the engines (:mod:`evireform.engine`) own every search
structure (the exact scan, int8 codes, the HNSW graph, shards, device copies), and keep
theirs in the index's ``search_state`` slot so that they are saved with it.

Three ways to build one:

* :meth:`PropositionIndex.build` - passages + an extractor + an embedder;
* :meth:`PropositionIndex.from_propositions` - your own propositions, entities, embeddings;
* :meth:`PropositionIndex.from_openie` - the HippoRAG OpenIE file (one triple = one proposition).

The on-disk format, its atomic save and its verified load live in :mod:`evireform.store`.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence, TYPE_CHECKING, TypeVar

import numpy as np

from ._checks import as_list, check_passage
from .build import (
    EmbeddingShapeError, embed_batch, embedded_propositions, proposition_batch,
    reduce_records)
from .corpus import as_passages
from .embed import Embedder, normalise_rows, spec_of
from .entities import fold_mentions
from .extract import (
    Extractor, HeuristicExtractor, extractor_recorded, make_extractor, read_openie)
from .kernels import EntityGraph, PassageMap, w_nnz as _w_nnz
from .kernels.graph import append_rows, remove_rows
from .store import (
    IndexFormatError, UnsafeTargetError, disk_bytes, index_arrays, load_index, save_index)
from .store.format import JOURNAL
from .search_data import passage_text
from .strings import Concat, Take
from .types import Passage, Proposition

if TYPE_CHECKING:  # annotations only
    from numpy.typing import ArrayLike
    from .embed import Embedder
    from .types import StrPath

log = logging.getLogger(__name__)
#: what :meth:`PropositionIndex.memo` keeps
T = TypeVar("T")

#: passages whose derived data (word sets, bridge candidates) :meth:`PropositionIndex.memo`
#: keeps at most, of each kind
WORDS_CACHED = 4096

__all__ = ["PropositionIndex", "PassageConflict", "IndexFormatError", "UnsafeTargetError",
           "arrays_equal",
           "disk_bytes", "subset_index"]


class PassageConflict(ValueError):
    """Passages to add whose ids the index holds with other content (``upsert`` replaces
    them; the service answers 409)."""


class AppendedRows:
    """An added index's embeddings kept as two parts until something reads them whole:
    ``head``, the parent's rows (often mapped from its file), and ``tail``, the new rows.
    A save writes them without joining them (the head copied from its file by the
    kernel): an update that only saves never makes a copy of the whole matrix (issue 84:
    joining 300 MB took a second of page faults)."""

    __slots__ = ("head", "tail", "buf")

    def __init__(self, head: Any, tail: np.ndarray, buf: "RowBuffer | None" = None) -> None:
        self.head, self.tail = head, np.asarray(tail, dtype=np.float32)
        #: the buffer ``head`` is the first rows of (:class:`RowBuffer`), or None
        self.buf = buf

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self.head) + len(self.tail), int(self.tail.shape[1]))

    dtype = np.dtype(np.float32)

    def __len__(self) -> int:
        return len(self.head) + len(self.tail)

    def rows(self, lo: int, hi: int) -> np.ndarray:
        """Rows ``lo:hi``, joined only where the range spans both parts."""
        n = len(self.head)
        if hi <= n:
            return np.asarray(self.head[lo:hi])
        if lo >= n:
            return self.tail[lo - n:hi - n]
        return np.concatenate([np.asarray(self.head[lo:]), self.tail[:hi - n]])

    def whole(self) -> tuple[np.ndarray, "RowBuffer"]:
        """The rows joined, and the buffer they are the first rows of: the head's own
        buffer when the tail fits after it and no other index wrote there (the rows of
        every earlier index stay as they were), else a new buffer with room for a quarter
        more, so that a chain of adds read whole after each (a journalled service's
        generations) copies the matrix once, not once an add."""
        n, t = len(self.head), len(self.tail)
        b = self.buf
        if b is not None and b.used == n and n + t <= len(b.data):
            b.data[n:n + t] = self.tail
            b.used = n + t
            return b.data[:n + t], b
        data = np.empty((max(n + t + 1024, (n + t) * 5 // 4), self.tail.shape[1]),
                        np.float32)
        data[:n] = np.asarray(self.head)
        data[n:n + t] = self.tail
        b = RowBuffer(data, n + t)
        return data[:n + t], b


class RowBuffer:
    """Rows with room after them: ``data[:used]`` are some index's embeddings; rows are
    only ever written after ``used`` (so an index reading ``data[:k]``, ``k <= used``,
    never sees them change)."""

    __slots__ = ("data", "used")

    def __init__(self, data: np.ndarray, used: int) -> None:
        self.data, self.used = data, int(used)


def _appended(held: Any, rows: np.ndarray, buf: RowBuffer | None = None) -> AppendedRows:
    """``rows`` after the embeddings ``held``: an added index's parts stay two (its head,
    its tail and the new rows), so a chain of adds never joins the head (a journalled
    service's updates, one on another); ``buf``: the buffer ``held`` is the first rows of
    (an index whose parts were joined: the next join writes after them)."""
    if isinstance(held, AppendedRows):
        return AppendedRows(held.head, np.concatenate([held.tail, np.asarray(
            rows, np.float32).reshape(-1, held.tail.shape[1])]), held.buf)
    if buf is not None and not (isinstance(held, np.ndarray) and len(held) <= buf.used
                                and held.__array_interface__["data"][0]
                                == buf.data.__array_interface__["data"][0]):
        buf = None
    return AppendedRows(held, rows, buf)


@dataclass
class PropositionIndex:
    passages: list[Passage]
    prop_texts: list[str]
    entity_names: list[str]
    graph: EntityGraph
    pmap: PassageMap
    embeddings: np.ndarray
    embedder_name: str
    meta: dict[str, Any] = field(default_factory=dict)
    #: what the update that made this index did ({"added", "duplicates", "replaced",
    #: "deleted"}: passage ids); empty for a built or loaded index
    changes: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    #: the verification tier a loaded index passed ("fast" or "full"; evireform.store);
    #: "" for an index built in this process
    verified: str = field(default="", repr=False, compare=False)
    #: the engine's search structures over this index
    #: (:class:`evireform.engine.structures.SearchStructures`: int8 codes, HNSW graph, device
    #: copies), kept here so that they travel and are saved with the index; the index never
    #: reads them.  None until an engine, a save or a load makes them
    #: (:func:`evireform.engine.structures.structures_of`)
    search_state: Any = field(default=None, repr=False, compare=False)
    #: how those structures are to be made when first needed: ``{"hnsw": True | False | None
    #: (the size rule)}``, and for an index made by add / delete / subset
    #: ``"derived": (operation, parent, ...)`` (delete and subset: the kept propositions and
    #: passages, as masks), so the parent's are carried over
    search_plan: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    #: the raw counts the extractor's corpus statistics came from (JSON data, or a loaded
    #: index's file, read when needed: :func:`carried_counts`), carried through adds and
    #: deletes and saved with the index, so that an update adds its passages' counts instead
    #: of fitting the extractor on every passage again; None for an extractor without
    #: statistics, or an index that has none (it is fitted, then carries them)
    extract_counts: Any = field(default=None, repr=False, compare=False)
    #: for an index made by :meth:`add`: its parent's embeddings, the first rows of this
    #: one's (a save copies them from the parent's file instead of writing them again)
    embedding_prefix: Any = field(default=None, repr=False, compare=False)
    #: float32 unit rows, one per passage (its title, a newline, its text embedded whole by
    #: the index's embedder), or None: what the question's own passage search reads
    #: (:attr:`EviReformConfig.own_search`, issue 85).  Made by :meth:`build` for ``prose``
    #: indexes (``passage_vectors``), kept through adds, deletes and saves
    passage_embeddings: Any = field(default=None, repr=False, compare=False)
    #: what this index derives on first use and keeps (passage id -> position, passage ->
    #: propositions, :meth:`memo`): true as long as the index, which never changes in place
    _derived: dict[str, Any] = field(default_factory=dict, init=False, repr=False,
                                     compare=False)

    # ------------------------------------------------------------------ basic facts
    @property
    def n_passages(self) -> int:
        return len(self.passages)

    @property
    def n_props(self) -> int:
        return len(self.prop_texts)

    @property
    def n_entities(self) -> int:
        return len(self.entity_names)

    @property
    def dim(self) -> int:
        return int(self.stored_embeddings().shape[1])

    def stored_embeddings(self) -> Any:
        """The embeddings as held: an array, or an added index's :class:`AppendedRows`
        not yet read whole (reading :attr:`embeddings` joins them, once)."""
        return self.__dict__["_embeddings"]

    def embedding_rows(self, lo: int, hi: int | None = None) -> np.ndarray:
        """Rows ``lo:hi`` of the embeddings, without joining an added index's parts when
        they lie in one."""
        e = self.stored_embeddings()
        hi = len(e) if hi is None else hi
        return e.rows(lo, hi) if isinstance(e, AppendedRows) else np.asarray(e)[lo:hi]

    @property
    def owner(self) -> np.ndarray:
        return self.pmap.owner

    @property
    def _pos(self) -> dict[str, Any]:
        """Passage id -> position, built on first use (adding, deleting, filtering by id) and
        kept: a loaded index holds no per-passage Python objects until then."""
        pos = self._derived.get("pos")
        if pos is None:
            from .strings import column
            ids = column(self.passages, "ids")
            pos = self._derived["pos"] = {pid: i for i, pid in enumerate(ids)}
        return pos

    @property
    def same_text(self) -> np.ndarray:
        """For each passage position, the first position whose text is the same, byte for
        byte (its own position when no earlier passage has that text): the groups of
        passages a result shows once (``EviReformConfig.fold_duplicates``).  Built on first
        use from the texts' bytes, without decoding them, and kept."""
        got = self._derived.get("same_text")
        if got is None:
            from .strings import column, first_equal
            got = self._derived["same_text"] = first_equal(column(self.passages, "texts"))
        return got

    @property
    def n_same_text(self) -> int:
        """How many passages repeat the text of an earlier one (:attr:`same_text`)."""
        got = self._derived.get("n_same_text")
        if got is None:
            got = self._derived["n_same_text"] = int(
                np.count_nonzero(self.same_text != np.arange(self.n_passages)))
        return got

    @property
    def same_text_groups(self) -> dict[int, list[int]]:
        """Each text several passages hold: its first position -> every position holding it
        (ascending).  Texts held once are not in it.  Built on first use and kept."""
        groups = self._derived.get("same_text_groups")
        if groups is None:
            same = self.same_text
            groups = {}
            for j in np.flatnonzero(same != np.arange(self.n_passages)).tolist():
                groups.setdefault(int(same[j]), [int(same[j])]).append(j)
            self._derived["same_text_groups"] = groups
        return groups

    def same_text_group(self, c: int) -> list[int]:
        """The positions whose :attr:`same_text` is ``c`` (ascending; ``[c]`` alone for a
        text no other passage has)."""
        return self.same_text_groups.get(int(c), [int(c)])

    def has_passage(self, passage_id: str) -> bool:
        """Whether the index holds a passage with this id."""
        return passage_id in self._pos

    def passage_index(self, passage_id: str) -> int:
        """Position of a passage id; ``KeyError`` if unknown."""
        try:
            return self._pos[passage_id]
        except KeyError:
            raise KeyError(f"unknown passage id {passage_id!r}") from None

    def propositions_of(self, j: int) -> np.ndarray:
        """Proposition ids of passage position ``j``, ascending (a passage -> propositions
        map is built on first use and kept: O(M log M) once, then O(|P_j|))."""
        csr = self._derived.get("by_passage")
        if csr is None:
            owner = np.asarray(self.owner)
            indptr = np.zeros(self.n_passages + 1, np.int64)
            np.cumsum(np.bincount(owner, minlength=self.n_passages), out=indptr[1:])
            csr = (indptr, np.argsort(owner, kind="stable").astype(np.int64))
            self._derived["by_passage"] = csr
        indptr, order = csr
        return order[indptr[j]:indptr[j + 1]]

    def passage_words(self, j: int) -> frozenset[Any]:
        """The lower-cased words of passage position ``j``'s title and text (what the LLM-free
        reformulators call covered), kept as :meth:`memo` keeps them."""
        def make(j):
            from .entities import words
            p = self.passage(j)
            return frozenset(words(p.title + " " + p.text))
        return self.memo("words", j, make)

    def passage(self, j: int) -> Passage:
        """The :class:`Passage` at position ``j``, decoded once (:meth:`memo`): what the
        retrieval loop reads of a passage it ranks, observes or asks the controller about."""
        return self.memo("passage", j, self.passages.__getitem__)

    def passages_at(self, js: Sequence[int]) -> list[Passage]:
        """:meth:`passage` of each position in ``js``, the cache looked up once for all (a
        ranking reads ten or more)."""
        cache = self._derived.setdefault("memo", {}).setdefault("passage", {})
        out = [cache.get(j) for j in js]
        for t, p in enumerate(out):
            if p is None:
                out[t] = self.passage(js[t])
        return out

    def memo(self, kind: str, j: int, make: Callable[[int], T]) -> T:
        """``make(j)``: data of passage position ``j`` that depends on this index alone (its
        word set, its bridge candidates, its decoded :class:`Passage`), computed on first use
        and kept for the last :data:`WORDS_CACHED` passages of each ``kind`` (bounded: a big
        index stays small).
        An index is never changed in place (``add`` / ``delete`` return a new one), so what
        is kept stays true; thread-safe (a race computes one twice)."""
        cache = self._derived.setdefault("memo", {}).setdefault(kind, {})
        v = cache.get(j)
        if v is None:
            v = make(j)
            if len(cache) >= WORDS_CACHED:
                cache.clear()
            cache[j] = v
        return v

    def check_embedder(self, embedder: Embedder) -> None:
        """Raise ``ValueError`` unless ``embedder`` embeds like the one this index was built
        with: the same name and dimension, and the same prompts where the index recorded
        them."""
        if self.embedder_name and embedder.name != self.embedder_name:
            raise ValueError(f"embedder {embedder.name!r} differs from the index's "
                             f"{self.embedder_name!r}; questions must be embedded alike")
        rec = self.meta.get("embedder_spec")
        if isinstance(rec, dict):
            mine = spec_of(embedder)
            for key in ("dim", "query_prompt", "document_prompt"):
                if key in rec and key in mine and rec[key] != mine[key]:
                    raise ValueError(f"embedder {key} {mine[key]!r} differs from the index's "
                                     f"{rec[key]!r} ({embedder.name}); questions must be "
                                     "embedded as the index expects")
        if self.n_props and int(embedder.dim) != self.dim:
            raise ValueError(f"embedder dimension {embedder.dim} differs from the index's "
                             f"{self.dim}")

    def stats(self, with_w: bool = True) -> dict[str, Any]:
        """Counts: passages, propositions, entities, incidence nonzeros and W's nonzeros."""
        out = {
            "passages": self.n_passages,
            "propositions": self.n_props,
            "entities": self.n_entities,
            "incidence_nnz": self.graph.nnz,
            "passages_without_propositions": int(np.sum(self.pmap.inv_sqrt == 0)),
            "isolated_propositions": int(np.sum(np.diff(self.graph.a_indptr) == 0)),
            "dim": self.dim,
            "embedder": self.embedder_name,
            "passage_vectors": self.passage_embeddings is not None,
        }
        if with_w:
            out["w_nnz_if_materialised"] = _w_nnz(self.graph)
        return out

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_propositions(cls, passages: Sequence[Passage], propositions: Sequence[Proposition],
                          embeddings: ArrayLike, embedder_name: str, *, meta: dict[str, Any] | None = None,
                          hnsw: bool | None = None,
                          passage_embeddings: ArrayLike | None = None) -> "PropositionIndex":
        """Build from user-supplied propositions (with entity mentions) and their embeddings.

        ``embeddings`` has one row per proposition; rows are L2-normalised here (NaN/inf,
        zero rows or a wrong shape raise ``ValueError``).  Entity mentions are folded with
        :func:`~evireform.entities.canonical_entity`; mentions that fold to nothing are dropped.
        ``hnsw``: whether the engine's search builds an HNSW graph over the propositions
        (None: at or above ``kernels.config.EXACT_SEARCH_MAX`` only); it is built when first
        needed (a search, a save: :mod:`evireform.engine.structures`).
        ``passage_embeddings``: one row per passage (its whole text embedded by the same
        embedder), for the question's own passage search (:attr:`passage_embeddings`);
        None: none.
        """
        passages = list(passages)
        if not passages:
            raise ValueError("passages is empty: an index needs at least one passage")
        pos: dict[str, int] = {}
        for i, p in enumerate(passages):
            check_passage(p, f"passages[{i}] {p.id!r:.60}")
            if p.id in pos:
                raise ValueError(f"duplicate passage id {p.id!r}")
            pos[p.id] = i
        props = list(propositions)
        emb = np.asarray(embeddings)
        if emb.ndim != 2 or emb.shape[0] != len(props):
            raise ValueError(f"embeddings must have shape ({len(props)}, dim), one row per "
                             f"proposition; got {emb.shape}")
        emb = normalise_rows(emb, "proposition embeddings") if len(props) else \
            np.zeros((0, emb.shape[1]), np.float32)
        owner = np.empty(len(props), dtype=np.int32)
        for i, pr in enumerate(props):
            try:
                owner[i] = pos[pr.passage]
            except KeyError:
                raise ValueError(f"proposition {i} names unknown passage id {pr.passage!r}") \
                    from None
        names: list[str] = []
        rows = fold_mentions(props, names, {})
        graph = EntityGraph.from_lists(rows, n_entities=len(names))
        pmap = PassageMap.from_owner(owner, len(passages))
        idx = cls(passages=passages, prop_texts=[p.text for p in props], entity_names=names,
                  graph=graph, pmap=pmap, embeddings=emb, embedder_name=str(embedder_name),
                  meta=dict(meta or {}), search_plan={"hnsw": hnsw})
        if passage_embeddings is not None:
            pe = np.asarray(passage_embeddings)
            if pe.ndim != 2 or pe.shape != (len(passages), emb.shape[1]):
                raise ValueError(f"passage_embeddings must have shape ({len(passages)}, "
                                 f"{emb.shape[1]}), one row per passage; got {pe.shape}")
            idx.passage_embeddings = normalise_rows(pe, "passage embeddings")
        return idx

    @classmethod
    def build(cls, passages: Sequence[Passage | str | dict[str, Any]], embedder: Embedder, *,
              extractor: Extractor | str | None = None, batch_size: int = 64,
              show_progress: bool = True, hnsw: bool | None = None,
              passage_vectors: bool | None = None) -> "PropositionIndex":
        """Extract propositions from ``passages``, embed them in batches with ``embedder``,
        and build the index.  ``passages`` may be :class:`Passage` objects, plain strings or
        ``{"id"?, "title"?, "text"}`` dicts.

        ``extractor``: an :class:`~evireform.extract.Extractor`, an LLM-free one's name
        (``"heuristic"``, ``"phrases"``), or ``"auto"`` / None (the default): the one
        :func:`~evireform.extract.choose_extractor` picks for the corpus's letter case
        (capitalised names for cased text, learnt phrases for lower-cased, all-capitals or
        caseless scripts), its measurement recorded as ``meta["extractor_choice"]``.

        ``passage_vectors``: also embed each passage whole (:attr:`passage_embeddings`, for
        the question's own passage search); None (the default) does so for indexes the
        ``prose`` extractor builds (documentation, prose: about a third more encoding),
        where that search keeps what the question finds (docs/results.md), and not for
        entity-titled text."""
        passages = as_passages(passages)
        if not passages:
            raise ValueError("passages is empty: an index needs at least one passage")
        if extractor is None or isinstance(extractor, str):
            extractor = make_extractor(extractor or "auto", passages=passages)
        choice = getattr(extractor, "choice", None)
        if choice:
            log.info("extractor auto: %s (capitalised share %.3f, caseless-script share "
                     "%.3f, over %d words)", choice["chosen"], choice["capitalised_share"],
                     choice["uncased_share"], choice["words"])
        if not callable(getattr(extractor, "extract_many", None)):
            raise TypeError(f"{type(extractor).__name__} lacks extract_many; subclass "
                            "evireform.extract.Extractor to inherit it from extract")
        fit = getattr(extractor, "fit", None)
        if callable(fit):  # corpus statistics (PhraseExtractor) from every passage
            fit(passages)
        # the same three batch steps as the distributed build (evireform.distributed)
        t0 = time.perf_counter()
        props, emb = embedded_propositions(passages, extractor, embedder,
                                           batch_size=batch_size, show_progress=show_progress)
        idx = cls.from_propositions(passages, props, emb, embedder.name, hnsw=hnsw,
                                    meta={"extractor": extractor.name,
                                          "embedder_spec": spec_of(embedder),
                                          **({"extractor_choice": dict(choice)}
                                             if choice else {})})
        idx.extract_counts = _counts_of(extractor)
        if passage_vectors is None:
            passage_vectors = wants_passage_vectors(extractor.name)
        if passage_vectors:
            idx.passage_embeddings = embedded_passages(passages, embedder, idx.dim,
                                                       batch_size, show_progress)
        log.info("built an index of %d passages: %d propositions, %d entities (%s, %s), "
                 "%.2f s", idx.n_passages, idx.n_props, idx.n_entities, extractor.name,
                 embedder.name, time.perf_counter() - t0)
        return idx

    @classmethod
    def from_batches(cls, passages: Sequence[Passage], batches: Iterable[dict[str, Any]],
                     embedder_name: str, dim: int,
                     *, meta: dict[str, Any] | None = None, hnsw: bool | None = None
                     ) -> "PropositionIndex":
        """The index of embedded proposition batches (the columnar batches of
        :mod:`evireform.build`, any order, any cut) over ``passages``: the reduce step of
        the local and the distributed build."""
        props, emb = reduce_records(passages, batches, dim)
        return cls.from_propositions(passages, props, emb, embedder_name, meta=meta, hnsw=hnsw)

    @classmethod
    def from_openie(cls, openie_path: StrPath, passages: Sequence[Passage], embedder: Embedder, *,
                    batch_size: int = 64, show_progress: bool = True,
                    hnsw: bool | None = None, plain: bool = False) -> "PropositionIndex":
        """Build from a HippoRAG OpenIE file over ``passages`` (one triple = one proposition;
        ``plain``: the triples as the file has them, else with the built-in extractors'
        title and name conventions, see :func:`~evireform.extract.read_openie`)."""
        passages = list(passages)
        if not passages:
            raise ValueError("passages is empty: an index needs at least one passage")
        props, skipped = read_openie(openie_path, passages, plain=plain)
        # the build's embed and reduce steps over the file's propositions
        rows = embed_batch(proposition_batch(props, passages), embedder,
                           batch_size=batch_size, show_progress=show_progress)
        return cls.from_batches(passages, [rows], embedder.name, int(embedder.dim), hnsw=hnsw,
                                meta={"extractor": f"openie:{Path(openie_path).name}",
                                           "openie_skipped_triples": skipped,
                                           "openie_plain": bool(plain),
                                           "embedder_spec": spec_of(embedder)})

    # ------------------------------------------------------------------ updates
    def add(self, passages: Sequence[Any], embedder: Embedder, *, extractor: Extractor | None = None,
            batch_size: int = 64, show_progress: bool = False,
            refit: bool = False) -> "PropositionIndex":
        """A new index with ``passages`` appended: only they are extracted and embedded; the
        entity table grows by the new names (in first-mention order, as a build would), and
        the incidence, its transpose and the degree terms are recomputed from the combined
        incidence in one vectorised pass (no re-embedding).  The engine's HNSW graph and int8
        codes, if any, get the new items when next needed (:mod:`evireform.engine.structures`).
        Only what the new propositions touch is recomputed: the degree terms of their
        entities and diag / 1/w of the propositions mentioning those
        (:func:`~evireform.kernels.graph.append_rows`).  Extraction and embedding are the
        build's steps (:func:`evireform.build.embedded_propositions`); ``extractor``
        defaults to the LLM-free extractor the index was built with.

        A passage whose id is already in the index with the same title and text is a
        duplicate and is skipped (listed in ``result.changes["duplicates"]``); one whose id is
        taken by a *different* passage is refused (see :meth:`upsert`).  Passages without an
        id get one from their content (:func:`evireform.corpus.content_id`), so adding the
        same file twice adds nothing and never replaces another passage.  The embedder must
        return one unit row of the index's dimension per proposition; nothing is kept
        otherwise.  This index is not changed, so retrievers using it keep working; save the
        result with :meth:`save`.

        An extractor with corpus statistics (prose, phrases, auto) starts from the raw
        counts the index carries (:attr:`extract_counts`) and adds the new passages' counts
        to them, reading no other passage; a namespace without counts, or whose counts have
        drifted past what they can say (:data:`~evireform.extract.base.DRIFT_SHARE`), is
        fitted again from every passage of it, as ``refit=True`` does for all."""
        new = as_passages(passages)
        if len({p.id for p in new}) != len(new):
            raise ValueError("duplicate passage ids among the passages to add")
        dups, clash = [], []
        for p in new:
            j = self._pos.get(p.id)
            if j is not None:
                old = self.passages[j]
                (dups if _same(old, p) else clash).append(p.id)
        if clash:
            raise PassageConflict(f"passage ids already in the index with other content: "
                             f"{clash[:5]}; use upsert() (CLI: --upsert) to replace them")
        if dups:
            skip = set(dups)
            new = [p for p in new if p.id not in skip]
        self.check_embedder(embedder)
        # default: the LLM-free extractor the index was built with
        extractor = extractor or extractor_recorded(
            self.meta.get("extractor"), self.meta.get("extractor_choice")) \
            or HeuristicExtractor()
        if self.meta.get("extractor") not in (None, extractor.name):
            raise ValueError(f"the index was built with extractor {self.meta['extractor']!r}; "
                             f"pass that extractor (got {extractor.name!r}; CLI: update "
                             "--extractor)")
        fit = getattr(extractor, "fit", None)
        if callable(fit) and new:  # corpus statistics over the index and the new passages
            carried = carried_counts(self)
            restore = getattr(extractor, "restore", None)
            restored = carried is not None and callable(restore) and restore(carried)
            if restored and not refit:  # the carried counts plus the new passages'
                extractor.grow(Concat(self.passages, new), new)  # type: ignore[attr-defined]
            else:
                fit(Concat(self.passages, new), new=new)
        # the build's three steps over the new passages (shape checked there)
        try:
            props, emb = embedded_propositions(new, extractor, embedder,
                                               batch_size=batch_size,
                                               show_progress=show_progress)
        except EmbeddingShapeError as exc:
            raise EmbeddingShapeError(f"{exc}; nothing was added") from None
        if emb.shape[1] != self.dim:
            raise ValueError(f"embedder {getattr(embedder, 'name', embedder)!r} returned "
                             f"embeddings of shape {emb.shape}; the index needs "
                             f"({len(props)}, {self.dim}); nothing was added")
        emb = normalise_rows(emb, "proposition embeddings") if len(props) else emb
        names = list(self.entity_names)
        pos = {p.id: self.n_passages + j for j, p in enumerate(new)}
        owner = np.asarray([pos[pr.passage] for pr in props], np.int32)
        # the parent's lookups extended, not rebuilt (a chain of adds: a journalled
        # service's updates, each as large as its change)
        known = self._derived.get("entity_pos")
        ent_pos = dict(known) if known is not None else {n: i for i, n in enumerate(names)}
        rows = [np.unique(np.asarray(r, dtype=np.int64))
                for r in fold_mentions(props, names, ent_pos)]
        out = PropositionIndex(
            passages=Concat(self.passages, new),  # read in place: save copies their bytes
            prop_texts=Concat(self.prop_texts, [p.text for p in props]),
            changes={"added": [p.id for p in new], "duplicates": dups},
            entity_names=names, graph=append_rows(self.graph, rows, len(names)),
            pmap=PassageMap.from_owner(np.concatenate([self.owner, owner]),
                                       self.n_passages + len(new)),
            embeddings=_appended(self.stored_embeddings(), emb,
                                 self.__dict__.get("_row_buffer")),
            embedder_name=self.embedder_name, meta=dict(self.meta),
            extract_counts=_counts_of(extractor) if callable(fit) and new
            else self.extract_counts)
        per = getattr(extractor, "choices", None)
        if isinstance(per, dict) and isinstance(self.meta.get("extractor_choice"), dict):
            # an auto-v* index: the namespaces this add measured are recorded with the rest
            out.meta["extractor_choice"] = {**self.meta["extractor_choice"],
                                            "namespaces": dict(sorted(per.items()))}
        # the engine's structures (codes, HNSW) are carried over when first needed
        out.search_plan = {**self.search_plan, "derived": ("add", self)}
        if self.passage_embeddings is not None:  # the new passages embedded whole too
            pe = embedded_passages(new, embedder, self.dim, batch_size, show_progress)
            out.passage_embeddings = np.concatenate([np.asarray(self.passage_embeddings), pe])
        out._derived["entity_pos"] = ent_pos
        if "pos" in self._derived:
            out._derived["pos"] = {**self._derived["pos"], **pos}
        # the rows before the new ones are this index's: a save copies them from its file
        # when they are mapped from one (evireform.store.format: work as large as the add)
        out.embedding_prefix = out.stored_embeddings().head
        return out

    def delete(self, passage_ids: Iterable[str]) -> "PropositionIndex":
        """A new index without the passages ``passage_ids`` (unknown ids raise ``KeyError``):
        their propositions and embeddings go, entities no longer mentioned go, and only what
        they touched is recomputed (no re-embedding).  Entities keep their relative order.
        The engine's HNSW graph marks the removed items deleted instead of being rebuilt; its
        labels are mapped to the renumbered propositions (``hnsw_ids``, saved with the
        index)."""
        passage_ids = [str(p) for p in as_list(passage_ids, "passage_ids")]
        unknown = [p for p in passage_ids if p not in self._pos]
        if unknown:
            raise KeyError(f"unknown passage ids: {unknown[:5]!r:.300}"
                           + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""))
        drop = {self._pos[pid] for pid in passage_ids}
        keep = [j for j in range(self.n_passages) if j not in drop]
        out = subset_index(self, keep)
        out.changes = {"deleted": list(dict.fromkeys(passage_ids))}
        out.extract_counts = _shrunk_counts(self, [self.passages[j] for j in sorted(drop)])
        kept = np.zeros(self.n_passages, dtype=bool)
        kept[keep] = True
        # the engine's HNSW graph marks the removed items deleted (evireform.engine.structures)
        out.search_plan = {**self.search_plan,
                           "derived": ("delete", self, kept[self.owner], kept)}
        return out

    def upsert(self, passages: Sequence[Any], embedder: Embedder, **kw: Any) -> "PropositionIndex":
        """Replace the passages whose ids exist with other content (delete, then add), skip
        those already there unchanged, and add the new ones.  Only passages with the same id
        are replaced; a passage without an id gets one from its content, so it replaces
        nothing but itself."""
        new = as_passages(passages)
        known = [p.id for p in new if p.id in self._pos
                 and not _same(self.passages[self._pos[p.id]], p)]
        base = self.delete(known) if known else self
        out = base.add(new, embedder, **kw)  # unchanged passages are skipped as duplicates
        out.changes = {"added": [p.id for p in new if p.id not in self._pos],
                       "replaced": known, "duplicates": out.changes.get("duplicates", [])}
        return out

    def with_passage_vectors(self, embedder: Embedder, *, batch_size: int = 64,
                             show_progress: bool = False) -> "PropositionIndex":
        """This index with each passage embedded whole (:attr:`passage_embeddings`) by
        ``embedder`` (the index's: checked), for an index built without them; the rest is
        shared, not copied.  Returns this index when it has them already."""
        if self.passage_embeddings is not None:
            return self
        self.check_embedder(embedder)
        out = replace(self, search_plan=dict(self.search_plan))
        out._derived.update(self._derived)
        out.passage_embeddings = embedded_passages(self.passages, embedder, self.dim,
                                                   batch_size, show_progress)
        return out

    # ------------------------------------------------------------------ persistence
    def save(self, path: StrPath, *, overwrite: bool = False) -> Path:
        """Write the index directory atomically (:func:`evireform.store.save_index`).

        Refuses (:class:`~evireform.store.UnsafeTargetError`) a file, the current directory or
        one of its parents, and a directory that is not an evireform index unless
        ``overwrite=True``.  A kill at any point leaves the previous or the new index."""
        return save_index(self, path, overwrite=overwrite)

    @classmethod
    def load(cls, path: StrPath, *, mmap: bool = True, verify: Any="auto",
             stamp: bool = True, recount: bool = False,
             journal: bool = True) -> "PropositionIndex":
        """Load a saved index, checked first (:func:`evireform.store.load_index`; any problem
        raises :class:`IndexFormatError` naming the file).  ``verify="auto"`` runs the fast
        tier (what the kernels trust: shapes, dtypes, bounds, sizes) when the index's stamp
        says its files are the ones last fully verified, else the full tier (checksums,
        derived arrays, embedding norms, HNSW vectors, texts) and stamps them; ``"full"`` or
        ``"fast"`` force one; ``stamp=False`` leaves the directory untouched (no stamp
        written).  ``recount=True`` (``evireform verify --full``) also counts every text's
        lexical terms again and compares them with the stored counts (derived data, checked
        by checksum otherwise: a recount tokenizes the whole corpus).  Texts stay in the
        memory-mapped string file until read.  ``journal``: the updates a service recorded
        in the directory's journal since its last save are made again (with the recorded
        embeddings: :mod:`evireform.store.journal`); False loads the saved index alone."""
        t0 = time.perf_counter()
        got = load_index(path, mmap=mmap, verify=verify, stamp=stamp, recount=recount)
        idx = cls(passages=got.passages, prop_texts=got.propositions,
                  entity_names=got.entities, graph=got.graph, pmap=got.pmap,
                  embeddings=got.embeddings, embedder_name=got.manifest.get("embedder", ""),
                  meta=dict(got.manifest.get("meta", {})),
                  verified=got.manifest.get("verified", ""))
        idx.search_state = got.search  # the structures the directory holds
        idx.extract_counts = got.extract_counts  # read when an update needs them
        idx.passage_embeddings = got.passage_embeddings
        if journal and os.path.exists(os.path.join(path, JOURNAL)):
            if not _JOURNAL_REPLAY:  # evireform's package import provides it
                raise RuntimeError("import evireform before loading an index with a journal")
            n = idx.n_passages
            idx = _JOURNAL_REPLAY[0](idx, path)
            log.info("%s: its journal replayed (%d -> %d passages)", path, n, idx.n_passages)
        log.info("loaded %s: %d passages, %d propositions, %s verification, %.2f s", path,
                 idx.n_passages, idx.n_props, idx.verified or "no", time.perf_counter() - t0)
        return idx


#: how a directory's journal is replayed over its saved index: the update code, which lives
#: in :mod:`evireform.application` (above this module) and hands it over when imported
_JOURNAL_REPLAY: list[Any] = []


def provide_journal_replay(fn: Any) -> None:
    """Tell :meth:`PropositionIndex.load` how to replay a journal (``fn(index, path)`` ->
    the index with the journal's updates made): :mod:`evireform.application` does."""
    _JOURNAL_REPLAY[:] = [fn]


def _get_embeddings(self: PropositionIndex) -> np.ndarray:
    e = self.__dict__["_embeddings"]
    if isinstance(e, AppendedRows):  # read whole: joined once, kept
        e, self.__dict__["_row_buffer"] = e.whole()
        self.__dict__["_embeddings"] = e
    return e


def _set_embeddings(self: PropositionIndex, value: Any) -> None:
    self.__dict__["_embeddings"] = value
    self.__dict__.pop("_row_buffer", None)


#: float32 unit rows, one per proposition (an added index's joined when first read)
PropositionIndex.embeddings = property(_get_embeddings, _set_embeddings)  # type: ignore


def wants_passage_vectors(extractor_name: Any) -> bool:
    """Whether an index built with this extractor embeds its passages whole by default
    (:meth:`PropositionIndex.build`): the ``prose`` extractor's (``prose``, ``prose-v2``)."""
    return str(extractor_name or "").startswith("prose")


def embedded_passages(passages: Sequence[Passage], embedder: Embedder, dim: int,
                      batch_size: int = 64, show_progress: bool = False) -> np.ndarray:
    """Each passage's title, a newline and its text embedded whole (float32 unit rows,
    ``(len(passages), dim)``; shape checked as the propositions' are)."""
    if not passages:
        return np.zeros((0, dim), np.float32)
    got = np.asarray(embedder.encode([passage_text(p) for p in passages],
                                     batch_size=batch_size, show_progress=show_progress))
    if got.shape != (len(passages), dim):
        raise EmbeddingShapeError(f"embedder {getattr(embedder, 'name', embedder)!r} returned "
                                  f"passage embeddings of shape {got.shape}; expected "
                                  f"({len(passages)}, {dim})")
    return normalise_rows(got, "passage embeddings")


def _same(a: Passage, b: Passage) -> bool:
    """The same passage content: title, text and metadata."""
    return (a.title, a.text, a.metadata) == (b.title, b.text, b.metadata)


def arrays_equal(a: "PropositionIndex", b: "PropositionIndex") -> bool:
    """True when two indexes hold identical arrays (same dtypes), strings and embedder."""
    xa, xb = index_arrays(a), index_arrays(b)
    pa, pb = a.passage_embeddings, b.passage_embeddings
    if (pa is None) != (pb is None) or (pa is not None and not np.array_equal(pa, pb)):
        return False
    return (all(xa[n].dtype == xb[n].dtype and np.array_equal(xa[n], xb[n]) for n in xa)
            and a.passages == b.passages and a.prop_texts == b.prop_texts
            and a.entity_names == b.entity_names and a.embedder_name == b.embedder_name)


def _counts_of(extractor: Any) -> Any:
    """The extractor's raw counts (JSON data), or None when it keeps none."""
    counts = getattr(extractor, "counts", None)
    return counts() if callable(counts) else None


def carried_counts(index: PropositionIndex) -> Any:
    """The raw counts ``index`` carries as JSON data (a loaded index's file read now), or
    None (none, or a file that changed or does not parse: the extractor is then fitted)."""
    c = index.extract_counts
    if c is None or isinstance(c, dict):
        return c
    got = c.read()
    if got is None:
        log.warning("%s: not read (changed or unreadable); the extractor is fitted again",
                    getattr(c, "path", c))
    return got


def _shrunk_counts(index: PropositionIndex, removed: Sequence[Passage]) -> Any:
    """The counts ``index`` carries less those of ``removed`` (a delete), or None."""
    carried = carried_counts(index)
    if carried is None:
        return None
    ext = extractor_recorded(index.meta.get("extractor"), index.meta.get("extractor_choice"))
    if ext is None or not callable(getattr(ext, "restore", None)) or not ext.restore(carried):
        return None
    ext.shrink(removed)  # type: ignore[attr-defined]
    return _counts_of(ext)


def subset_index(idx: PropositionIndex, keep_passages) -> PropositionIndex:
    """The index restricted to the passages ``keep_passages`` (positions, kept in stored
    order): their propositions, embeddings and entity mentions, entities no longer mentioned
    dropped (the others keep their relative order); only what the removed propositions
    touched is recomputed (:func:`~evireform.kernels.graph.remove_rows`).  It equals an
    index built from those passages alone up to the numbering of entities."""
    keep = np.zeros(idx.n_passages, dtype=bool)
    keep[np.asarray(list(keep_passages), dtype=np.int64)] = True
    new_pos = np.cumsum(keep) - 1
    mask = keep[idx.owner]
    props = np.flatnonzero(mask)
    graph, ents = remove_rows(idx.graph, mask)
    passages = Take(idx.passages, np.flatnonzero(keep))  # read in place (strings.pack)
    pmap = PassageMap.from_owner(new_pos[idx.owner[props]], len(passages))
    out = PropositionIndex(passages=passages, prop_texts=Take(idx.prop_texts, props),
                           entity_names=[idx.entity_names[e] for e in ents], graph=graph,
                           pmap=pmap,
                           embeddings=np.ascontiguousarray(np.asarray(idx.embeddings)[props]),
                           embedder_name=idx.embedder_name, meta=dict(idx.meta))
    if idx.passage_embeddings is not None:
        out.passage_embeddings = np.ascontiguousarray(np.asarray(idx.passage_embeddings)[keep])
    # the engine carries the codes over and builds HNSW by the size rule
    out.search_plan = {"derived": ("subset", idx, mask, keep)}
    return out
