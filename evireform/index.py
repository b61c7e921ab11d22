"""The proposition-entity index: build, search, save, load.

An index holds the passages, their propositions (text and owner passage), canonical entities,
the binary incidence A as CSR plus its transpose with the precomputed degree terms
(:class:`~evireform.kernels.EntityGraph`), the passage map with 1/sqrt(|P_j|)
(:class:`~evireform.kernels.PassageMap`) and float32 unit-norm proposition embeddings.
Candidate search is exact below ``kernels.config.EXACT_SEARCH_MAX`` propositions and HNSW
(hnswlib, re-scored exactly) above it.

Three ways to build one:

* :meth:`PropositionIndex.build` - passages + an extractor + an embedder;
* :meth:`PropositionIndex.from_propositions` - your own propositions, entities, embeddings;
* :meth:`PropositionIndex.from_openie` - the HippoRAG OpenIE file (one triple = one proposition).

The on-disk format, its atomic save and its verified load live in :mod:`evireform.store`.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
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
from .kernels import (
    EntityGraph, PassageMap, config as kconfig, cosine_topk, cosine_topk_batch,
    quantize_int8, quantized_topk_batch, w_nnz as _w_nnz)
from .kernels.graph import append_rows, remove_rows
from .search import (
    build_hnsw as _build_hnsw, copy_hnsw as _copy_hnsw, hnsw_topk_batch, search_rows,
    uses_hnsw)
from .store import (
    IndexFormatError, UnsafeTargetError, disk_bytes, index_arrays, load_index, save_index)
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

__all__ = ["PropositionIndex", "IndexFormatError", "UnsafeTargetError", "arrays_equal",
           "disk_bytes", "hnsw_topk_batch", "subset_index"]


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
    hnsw: object | None = None
    #: HNSW label -> proposition id (-1: deleted), once deletions have renumbered the
    #: propositions; None while labels are proposition ids
    hnsw_ids: np.ndarray | None = None
    #: what the update that made this index did ({"added", "duplicates", "replaced",
    #: "deleted"}: passage ids); empty for a built or loaded index
    changes: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    #: the verification tier a loaded index passed ("fast" or "full"; evireform.store);
    #: "" for an index built in this process
    verified: str = field(default="", repr=False, compare=False)
    #: int8 codes of the embeddings and their per-dimension scale (:meth:`quantize`), or None
    codes: np.ndarray | None = field(default=None, repr=False, compare=False)
    code_scale: np.ndarray | None = field(default=None, repr=False, compare=False)

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
        return int(self.embeddings.shape[1])

    @property
    def owner(self) -> np.ndarray:
        return self.pmap.owner

    @property
    def _pos(self) -> dict[str, Any]:
        """Passage id -> position, built on first use (adding, deleting, filtering by id) and
        kept: a loaded index holds no per-passage Python objects until then."""
        pos = self.__dict__.get("_pos_cache")
        if pos is None:
            from .strings import column
            ids = column(self.passages, "ids")
            pos = self.__dict__["_pos_cache"] = {pid: i for i, pid in enumerate(ids)}
        return pos

    def passage_index(self, passage_id: str) -> int:
        """Position of a passage id; ``KeyError`` if unknown."""
        try:
            return self._pos[passage_id]
        except KeyError:
            raise KeyError(f"unknown passage id {passage_id!r}") from None

    def propositions_of(self, j: int) -> np.ndarray:
        """Proposition ids of passage position ``j``, ascending (a passage -> propositions
        map is built on first use and kept: O(M log M) once, then O(|P_j|))."""
        csr = self.__dict__.get("_by_passage")
        if csr is None:
            owner = np.asarray(self.owner)
            indptr = np.zeros(self.n_passages + 1, np.int64)
            np.cumsum(np.bincount(owner, minlength=self.n_passages), out=indptr[1:])
            csr = (indptr, np.argsort(owner, kind="stable").astype(np.int64))
            self.__dict__["_by_passage"] = csr
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

    def memo(self, kind: str, j: int, make: Callable[[int], T]) -> T:
        """``make(j)``: data of passage position ``j`` that depends on this index alone (its
        word set, its bridge candidates, its decoded :class:`Passage`), computed on first use
        and kept for the last :data:`WORDS_CACHED` passages of each ``kind`` (bounded: a big
        index stays small).
        An index is never changed in place (``add`` / ``delete`` return a new one), so what
        is kept stays true; thread-safe (a race computes one twice)."""
        cache = self.__dict__.setdefault("_memo", {}).setdefault(kind, {})
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
            "search": "hnsw" if self.hnsw is not None else "exact",
        }
        if with_w:
            out["w_nnz_if_materialised"] = _w_nnz(self.graph)
        return out

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_propositions(cls, passages: Sequence[Passage], propositions: Sequence[Proposition],
                          embeddings: ArrayLike, embedder_name: str, *, meta: dict[str, Any] | None = None,
                          hnsw: bool | None = None) -> "PropositionIndex":
        """Build from user-supplied propositions (with entity mentions) and their embeddings.

        ``embeddings`` has one row per proposition; rows are L2-normalised here (NaN/inf,
        zero rows or a wrong shape raise ``ValueError``).  Entity mentions are folded with
        :func:`~evireform.entities.canonical_entity`; mentions that fold to nothing are dropped.
        ``hnsw=None`` builds HNSW only at or above ``kernels.config.EXACT_SEARCH_MAX``.
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
                  meta=dict(meta or {}))
        if hnsw or (hnsw is None and uses_hnsw(len(props))):
            idx.build_hnsw()
        return idx

    @classmethod
    def build(cls, passages: Sequence[Passage | str | dict[str, Any]], embedder: Embedder, *,
              extractor: Extractor | str | None = None, batch_size: int = 64,
              show_progress: bool = True, hnsw: bool | None = None) -> "PropositionIndex":
        """Extract propositions from ``passages``, embed them in batches with ``embedder``,
        and build the index.  ``passages`` may be :class:`Passage` objects, plain strings or
        ``{"id"?, "title"?, "text"}`` dicts.

        ``extractor``: an :class:`~evireform.extract.Extractor`, an LLM-free one's name
        (``"heuristic"``, ``"phrases"``), or ``"auto"`` / None (the default): the one
        :func:`~evireform.extract.choose_extractor` picks for the corpus's letter case
        (capitalised names for cased text, learnt phrases for lower-cased, all-capitals or
        caseless scripts), its measurement recorded as ``meta["extractor_choice"]``."""
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

    # ------------------------------------------------------------------ search
    def build_hnsw(self, *, M: int | None = None, ef_construction: int | None = None,
                   threads: int | None = None) -> None:
        """Build the HNSW graph over the proposition embeddings (inner product space)."""
        self.hnsw = _build_hnsw(self.embeddings, M=M, ef_construction=ef_construction,
                                threads=threads)
        self.hnsw_ids = None

    def quantize(self, precision: str = "int8") -> "PropositionIndex":
        """Store int8 codes of the embeddings beside them (in place; saved with the index):
        exact search then scans the codes (a quarter of the bytes) and re-scores a margin
        of candidates with the float32 rows, which returns the same top-k, ids and scores
        (:func:`~evireform.kernels.quantized_topk_batch`).  ``precision="float32"`` drops
        the codes.  Returns the index."""
        if precision == "float32":
            self.codes = self.code_scale = None
        elif precision == "int8":
            self.codes, self.code_scale = quantize_int8(self.embeddings)
        else:
            raise ValueError(f"precision must be 'int8' or 'float32'; got {precision!r}")
        self.meta["precision"] = precision
        return self

    def _scans_codes(self, precision: str) -> bool:
        """Whether an unfiltered exact search at ``precision`` scans the int8 codes
        (``"auto"``: when the index has them; ``"int8"``: they must be there;
        ``"float32"``: never)."""
        if precision not in ("auto", "float32", "int8"):
            raise ValueError(f"the index's own search runs at precision 'auto', 'float32' or "
                             f"'int8'; got {precision!r} (fp16 runs on the GPU: "
                             "make_engine(index, 'gpu', precision='fp16'))")
        if precision == "int8" and self.codes is None:
            raise ValueError("precision='int8' needs int8 codes: call quantize('int8') first "
                             "(CLI: index --precision int8)")
        return self.codes is not None and precision != "float32"

    def search(self, q: ArrayLike, k: int, *, exact: bool | None = None,
               precision: str = "auto") -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` propositions for one query embedding: ``(ids, scores)``, positive only,
        best first, ties by lower id.  Uses HNSW when built unless ``exact=True``;
        ``precision``: see :meth:`search_batch`."""
        if (exact or self.hnsw is None) and not self._scans_codes(precision):
            return cosine_topk(self.embeddings, q, k)
        ids, scores = self.search_batch(np.asarray(q, np.float32)[None, :], k, exact=exact,
                                        precision=precision)
        keep = ids[0] >= 0
        return ids[0][keep], scores[0][keep]

    def search_batch(self, Q: ArrayLike, k: int, *, exact: bool | None = None, rows: Any=None,
                     precision: str = "auto") -> tuple[np.ndarray, np.ndarray]:
        """Batched :meth:`search`: ``(ids, scores)`` of shape (batch, min(k, n_props)), padded
        with -1 / 0.  An exact scan reads the int8 codes when the index has them and
        ``precision`` is ``"auto"`` or ``"int8"`` (the codes are scanned, a margin re-scored
        exactly: the same top-k as ``"float32"``, which reads the float32 rows).  The
        search settings belong to the engine (:func:`evireform.engine.make_engine`), which
        passes its precision here; the index holds none.  ``rows`` (strictly ascending
        positions, a filter's matching propositions): only those are candidates
        (:func:`evireform.search.search_rows`: the float32 rows read in place, or HNSW with a
        label filter at HNSW sizes); the int8 codes serve full scans only (the results are
        the same)."""
        codes = self._scans_codes(precision)
        if rows is not None:
            return search_rows(self.embeddings, Q, k, rows,
                               hnsw=None if exact else self.hnsw, label_ids=self.hnsw_ids)
        if exact or self.hnsw is None:
            if codes:
                return quantized_topk_batch(self.codes, self.code_scale, self.embeddings, Q, k)
            return cosine_topk_batch(self.embeddings, Q, k)
        return hnsw_topk_batch(self.hnsw, self.embeddings, Q, k, self.hnsw_ids)

    # ------------------------------------------------------------------ updates
    def add(self, passages: Sequence[Any], embedder: Embedder, *, extractor: Extractor | None = None,
            batch_size: int = 64, show_progress: bool = False) -> "PropositionIndex":
        """A new index with ``passages`` appended: only they are extracted and embedded; the
        entity table grows by the new names (in first-mention order, as a build would), and
        the incidence, its transpose and the degree terms are recomputed from the combined
        incidence in one vectorised pass (no re-embedding).  HNSW, if built, gets the new
        items.  Only what the new propositions touch is recomputed: the degree terms of their
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
        result with :meth:`save`."""
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
            raise ValueError(f"passage ids already in the index with other content: "
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
        rows = [np.unique(np.asarray(r, dtype=np.int64))
                for r in fold_mentions(props, names, {n: i for i, n in enumerate(names)})]
        out = PropositionIndex(
            passages=Concat(self.passages, new),  # read in place: save copies their bytes
            prop_texts=Concat(self.prop_texts, [p.text for p in props]),
            changes={"added": [p.id for p in new], "duplicates": dups},
            entity_names=names, graph=append_rows(self.graph, rows, len(names)),
            pmap=PassageMap.from_owner(np.concatenate([self.owner, owner]),
                                       self.n_passages + len(new)),
            embeddings=np.concatenate([np.asarray(self.embeddings), emb]).astype(np.float32),
            embedder_name=self.embedder_name, meta=dict(self.meta))
        per = getattr(extractor, "choices", None)
        if isinstance(per, dict) and isinstance(self.meta.get("extractor_choice"), dict):
            # an auto-v1 index: the namespaces this add measured are recorded with the rest
            out.meta["extractor_choice"] = {**self.meta["extractor_choice"],
                                            "namespaces": dict(sorted(per.items()))}
        if self.codes is not None:  # the new rows on the same scale, or all re-quantized
            try:
                new_codes, _ = quantize_int8(emb, self.code_scale)
                out.codes = np.concatenate([np.asarray(self.codes), new_codes])
                out.code_scale = self.code_scale
            except ValueError:
                out.codes, out.code_scale = quantize_int8(out.embeddings)
        if self.hnsw is not None:
            h = _copy_hnsw(self.hnsw)  # the old index keeps its own graph
            n_labels = len(self.hnsw_ids) if self.hnsw_ids is not None else self.n_props
            if len(props):
                h.resize_index(n_labels + len(props))
                h.add_items(emb, np.arange(n_labels, n_labels + len(props)),
                            num_threads=kconfig.HNSW_BUILD_THREADS)
            out.hnsw = h
            if self.hnsw_ids is not None:
                out.hnsw_ids = np.concatenate([self.hnsw_ids,
                                               np.arange(self.n_props, out.n_props)])
        return out

    def delete(self, passage_ids: Iterable[str]) -> "PropositionIndex":
        """A new index without the passages ``passage_ids`` (unknown ids raise ``KeyError``):
        their propositions and embeddings go, entities no longer mentioned go, and only what
        they touched is recomputed (no re-embedding).  Entities keep their relative order.
        An HNSW graph marks the removed items deleted instead of being rebuilt; its labels
        are mapped to the renumbered propositions (``hnsw_ids``, saved with the index)."""
        passage_ids = [str(p) for p in as_list(passage_ids, "passage_ids")]
        unknown = [p for p in passage_ids if p not in self._pos]
        if unknown:
            raise KeyError(f"unknown passage ids: {unknown[:5]!r:.300}"
                           + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""))
        drop = {self._pos[pid] for pid in passage_ids}
        keep = [j for j in range(self.n_passages) if j not in drop]
        out = subset_index(self, keep)
        out.changes = {"deleted": list(dict.fromkeys(passage_ids))}
        if self.hnsw is not None:
            kept = np.zeros(self.n_passages, dtype=bool)
            kept[keep] = True
            alive = kept[self.owner]
            remap = np.where(alive, np.cumsum(alive) - 1, -1)
            labels_to_old = self.hnsw_ids if self.hnsw_ids is not None else \
                np.arange(self.n_props)
            ids = np.where(labels_to_old >= 0, remap[np.maximum(labels_to_old, 0)], -1)
            if ids.size and np.mean(ids < 0) > kconfig.HNSW_MAX_DELETED_SHARE:
                out.build_hnsw()  # compaction: a graph over the live items only
                return out
            h = _copy_hnsw(self.hnsw)
            for label in np.flatnonzero((ids < 0) & (labels_to_old >= 0)):
                h.mark_deleted(int(label))
            out.hnsw, out.hnsw_ids = h, ids.astype(np.int64)
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

    def to_device(self, namespace: str = "cupy", *, half: bool = False, budget: int | None = None,
                  precision: str = "float32") -> Any:
        """The index resident on the GPU (once: later calls return the same object):
        a :class:`~evireform.kernels._gpu.DeviceIndex` for ``EviReform(..., backend=...)``.

        ``namespace="cupy"`` needs CuPy and a CUDA device (else
        :class:`~evireform.kernels.BackendUnavailable` says what is missing);
        ``namespace="numpy"`` runs the same array code on the CPU (how CI verifies it).
        ``half=True`` stores the embeddings as float16 (scores still accumulate in float32);
        ``precision="fp16"`` keeps the float32 rows and a float16 copy that the search scans
        (tensor-core GEMM), re-ranking candidates exactly in float32: the same top-k as
        ``"float32"`` (also spelled ``"fp32"``); ``budget`` caps the bytes of one score block (default 1 GiB)."""
        from .kernels import _gpu  # the device code, only when asked for
        precision = {"fp32": "float32"}.get(precision, precision)  # the older spelling
        key = (namespace, bool(half), budget, precision)
        cache = self.__dict__.setdefault("_device", {})
        if key not in cache:
            ns = _gpu.namespace(namespace)
            cache[key] = _gpu.DeviceIndex.from_arrays(
                ns, self.graph, self.pmap, self.embeddings, half=half,
                budget=budget or _gpu.DEFAULT_BUDGET, precision=precision)
        return cache[key]

    # ------------------------------------------------------------------ persistence
    def save(self, path: StrPath, *, overwrite: bool = False) -> Path:
        """Write the index directory atomically (:func:`evireform.store.save_index`).

        Refuses (:class:`~evireform.store.UnsafeTargetError`) a file, the current directory or
        one of its parents, and a directory that is not an evireform index unless
        ``overwrite=True``.  A kill at any point leaves the previous or the new index."""
        return save_index(self, path, overwrite=overwrite)

    @classmethod
    def load(cls, path: StrPath, *, mmap: bool = True, verify: Any="auto") -> "PropositionIndex":
        """Load a saved index, checked first (:func:`evireform.store.load_index`; any problem
        raises :class:`IndexFormatError` naming the file).  ``verify="auto"`` runs the fast
        tier (what the kernels trust: shapes, dtypes, bounds, sizes) when the index's stamp
        says its files are the ones last fully verified, else the full tier (checksums,
        derived arrays, embedding norms, HNSW vectors, texts) and stamps them; ``"full"`` or
        ``"fast"`` force one.  Texts stay in the memory-mapped string file until read."""
        t0 = time.perf_counter()
        got = load_index(path, mmap=mmap, verify=verify)
        idx = cls(passages=got.passages, prop_texts=got.propositions,
                  entity_names=got.entities, graph=got.graph, pmap=got.pmap,
                  embeddings=got.embeddings, embedder_name=got.manifest.get("embedder", ""),
                  meta=dict(got.manifest.get("meta", {})),
                  verified=got.manifest.get("verified", ""))
        idx.hnsw = got.hnsw
        idx.hnsw_ids = got.hnsw_ids
        idx.codes, idx.code_scale = got.codes, got.code_scale
        log.info("loaded %s: %d passages, %d propositions, %s verification, %.2f s", path,
                 idx.n_passages, idx.n_props, idx.verified or "no", time.perf_counter() - t0)
        return idx


def _same(a: Passage, b: Passage) -> bool:
    """The same passage content: title, text and metadata."""
    return (a.title, a.text, a.metadata) == (b.title, b.text, b.metadata)


def arrays_equal(a: "PropositionIndex", b: "PropositionIndex") -> bool:
    """True when two indexes hold identical arrays (same dtypes), strings and embedder."""
    xa, xb = index_arrays(a), index_arrays(b)
    return (all(xa[n].dtype == xb[n].dtype and np.array_equal(xa[n], xb[n]) for n in xa)
            and a.passages == b.passages and a.prop_texts == b.prop_texts
            and a.entity_names == b.entity_names and a.embedder_name == b.embedder_name)


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
    if idx.codes is not None:  # the same scale still bounds the kept rows
        out.codes = np.ascontiguousarray(np.asarray(idx.codes)[props])
        out.code_scale = idx.code_scale
    return out
