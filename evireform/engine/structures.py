"""The search structures over an index's proposition embeddings, owned by the engine.

A :class:`~evireform.index.PropositionIndex` is data (texts, propositions, entities, the
incidence, the embeddings, metadata).  What a search runs over besides the embeddings lives
here, in one :class:`SearchStructures` per index:

* the exact scan (always: the float32 rows themselves, read in place);
* the int8 codes of the rows and their per-dimension scale (:func:`quantize`);
* the HNSW graph (hnswlib, inner product) and its label map after deletions;
* the index's device copies (:func:`evireform.engine.device.to_device`).

:func:`structures_of` is the one way to reach them.  An index keeps them in its
``search_state`` slot so that they travel with it and are saved with it (the on-disk format
keeps ``hnsw.bin``, ``hnsw_ids.npy``, ``codes.npy`` and ``code_scale.npy`` in the index
directory); the index itself never reads that slot.  They are made on first use:

* a loaded index brings the ones its directory holds (:mod:`evireform.store` loads them);
* an index made by ``add``, ``delete`` or ``subset_index`` records where it came from
  (``search_plan["derived"]``), and its structures are carried over from its parent's: the
  new rows added to the graph and the codes, deleted items marked in the graph (rebuilt when
  more than ``kernels.config.HNSW_MAX_DELETED_SHARE`` of it is deleted);
* a built index gets the HNSW graph its plan asks for (``search_plan["hnsw"]``: True, False,
  or None for the size rule :func:`~evireform.engine.hnsw.uses_hnsw`).
"""
from __future__ import annotations

import threading
from typing import Any, TYPE_CHECKING

import numpy as np

from ..kernels import (
    config as kconfig, cosine_topk_batch, quantize_int8, quantized_topk_batch)
from ..search_data import SearchStructures
from ..store.format import provide_structures
from .hnsw import build_hnsw as _build_graph, copy_hnsw, hnsw_topk_batch, search_rows, uses_hnsw

if TYPE_CHECKING:  # annotations only
    from numpy.typing import ArrayLike
    from ..index import PropositionIndex

__all__ = ["SearchStructures", "structures_of", "lexical_of", "build_hnsw", "quantize", "scans_codes",
           "search_index", "PRECISIONS", "PRECISION_BACKENDS", "CPU_PRECISIONS",
           "DEVICE_PRECISIONS", "STORED_PRECISIONS"]

#: every precision of a proposition scan, the one registry (``make_engine``, ``query`` and
#: ``serve --precision``, the device, the docs): the backends it runs on.  ``"auto"``: int8
#: on the CPU when the index has codes, else float32; ``"int8"``: the CPU scans the codes,
#: re-scoring a margin exactly; ``"fp16"``: the GPU scans a float16 copy, re-ranking exactly
PRECISION_BACKENDS: dict[str, tuple[str, ...]] = {
    "auto": ("cpu", "gpu"), "float32": ("cpu", "gpu"), "int8": ("cpu",), "fp16": ("gpu",)}
PRECISIONS = tuple(PRECISION_BACKENDS)
#: the precisions of the CPU's exact scan
CPU_PRECISIONS = tuple(p for p, on in PRECISION_BACKENDS.items() if "cpu" in on)
#: the precisions a device index scans at
DEVICE_PRECISIONS = tuple(p for p, on in PRECISION_BACKENDS.items()
                          if "gpu" in on and p != "auto")
#: what an index stores (:func:`quantize`; ``evireform index --precision``)
STORED_PRECISIONS = ("float32", "int8")

_LOCK = threading.RLock()


def structures_of(index: PropositionIndex) -> SearchStructures:
    """The index's search structures, made on first use (see the module docstring) and kept
    in its ``search_state`` slot; thread-safe."""
    s = index.search_state
    if s is not None:
        return s
    with _LOCK:
        if index.search_state is not None:
            return index.search_state
        plan = index.search_plan
        derived = plan.get("derived")
        if derived is not None:
            s = _carried(derived, index)
        else:
            s = SearchStructures()
            want = plan.get("hnsw", False)  # absent: none (an index made by hand)
            if want or (want is None and uses_hnsw(index.n_props)):
                s.hnsw = _build_graph(index.embeddings)
        index.search_state = s
        # the parent is not needed any more: a chain of derived indexes is released here
        index.search_plan = {k: v for k, v in plan.items() if k != "derived"}
        return s


def lexical_of(index: PropositionIndex) -> Any:
    """The index's lexical index (:class:`evireform.engine.lexical.LexicalIndex`), counted
    from its texts on first use and kept with its search structures; thread-safe."""
    s = structures_of(index)
    if s.lexical is None:
        with _LOCK:
            if s.lexical is None:
                from ..search_data import LexicalIndex
                s.lexical = LexicalIndex.build(index)
    return s.lexical


def _carried(derived: tuple[Any, ...], index: PropositionIndex) -> SearchStructures:
    """The parent's structures carried over to ``index`` (made by add, delete or a subset)."""
    op, parent = derived[0], derived[1]
    ps = structures_of(parent)
    s = SearchStructures()
    if ps.lexical is not None:  # the counts: new texts tokenized, removed rows dropped
        if op == "add":
            s.lexical = ps.lexical.added(index, parent.n_props, parent.n_passages)
        elif op in ("delete", "subset"):
            # (operation, parent, kept propositions, kept passages)
            s.lexical = ps.lexical.subset(np.asarray(derived[2], dtype=bool),
                                          np.asarray(derived[3], dtype=bool))
    if op == "add":
        n_old = parent.n_props
        new_rows = index.embedding_rows(n_old)  # an add's parts are not joined
        if ps.codes is not None:  # the new rows on the same scale, or all re-quantized
            try:
                new_codes, _ = quantize_int8(new_rows, ps.code_scale)
                s.codes = np.concatenate([np.asarray(ps.codes), new_codes])
                s.code_scale = ps.code_scale
            except ValueError:
                s.codes, s.code_scale = quantize_int8(index.embeddings)
        if ps.hnsw is not None:
            h = copy_hnsw(ps.hnsw)  # the parent keeps its own graph
            n_labels = len(ps.hnsw_ids) if ps.hnsw_ids is not None else n_old
            if len(new_rows):
                h.resize_index(n_labels + len(new_rows))
                h.add_items(new_rows, np.arange(n_labels, n_labels + len(new_rows)),
                            num_threads=kconfig.HNSW_BUILD_THREADS)
            s.hnsw = h
            if ps.hnsw_ids is not None:
                s.hnsw_ids = np.concatenate([ps.hnsw_ids,
                                             np.arange(n_old, index.n_props)])
        return s
    if op not in ("delete", "subset"):
        raise ValueError(f"unknown derivation {op!r}")
    alive = np.asarray(derived[2], dtype=bool)  # per parent proposition
    if ps.codes is not None:  # the same scale still bounds the kept rows
        s.codes = np.ascontiguousarray(np.asarray(ps.codes)[alive])
        s.code_scale = ps.code_scale
    if op == "subset" or ps.hnsw is None:
        want = index.search_plan.get("hnsw", False)
        if op == "subset" and (want or (want is None and uses_hnsw(index.n_props))):
            s.hnsw = _build_graph(index.embeddings)
        return s
    remap = np.where(alive, np.cumsum(alive) - 1, -1)
    labels_to_old = ps.hnsw_ids if ps.hnsw_ids is not None else np.arange(parent.n_props)
    ids = np.where(labels_to_old >= 0, remap[np.maximum(labels_to_old, 0)], -1)
    if ids.size and np.mean(ids < 0) > kconfig.HNSW_MAX_DELETED_SHARE:
        s.hnsw = _build_graph(index.embeddings)  # compaction: the live items only
        return s
    h = copy_hnsw(ps.hnsw)
    for label in np.flatnonzero((ids < 0) & (labels_to_old >= 0)):
        h.mark_deleted(int(label))
    s.hnsw, s.hnsw_ids = h, ids.astype(np.int64)
    return s


def build_hnsw(index: PropositionIndex, *, M: int | None = None,
               ef_construction: int | None = None, threads: int | None = None
               ) -> PropositionIndex:
    """Build the HNSW graph over ``index``'s proposition embeddings (inner product) into its
    search structures, replacing any graph it had.  Returns the index."""
    s = structures_of(index)
    s.hnsw = _build_graph(index.embeddings, M=M, ef_construction=ef_construction,
                          threads=threads)
    s.hnsw_ids = None
    s.devices.clear()
    return index


def quantize(index: PropositionIndex, precision: str = "int8") -> PropositionIndex:
    """Keep int8 codes of ``index``'s embeddings in its search structures (saved with it):
    an exact search then scans the codes (a quarter of the bytes) and re-scores a margin of
    candidates with the float32 rows, which returns the same top-k, ids and scores
    (:func:`~evireform.kernels.quantized_topk_batch`).  ``precision="float32"`` drops the
    codes.  Records ``meta["precision"]``; returns the index."""
    s = structures_of(index)
    if precision not in STORED_PRECISIONS:
        raise ValueError(f"precision must be one of {STORED_PRECISIONS}; got {precision!r}")
    if precision == "float32":
        s.codes = s.code_scale = None
    else:
        s.codes, s.code_scale = quantize_int8(index.embeddings)
    index.meta["precision"] = precision
    return index


def scans_codes(index: PropositionIndex, precision: str) -> bool:
    """Whether an unfiltered exact search of ``index`` at ``precision`` scans the int8
    codes (``"auto"``: when it has them; ``"int8"``: they must be there; ``"float32"``:
    never)."""
    if precision not in CPU_PRECISIONS:
        raise ValueError(f"the CPU's own search runs at precision {', '.join(map(repr, CPU_PRECISIONS))}; "
                         f"got {precision!r} (fp16 runs on the GPU: "
                         "make_engine(index, 'gpu', precision='fp16'))")
    s = structures_of(index)
    if precision == "int8" and s.codes is None:
        raise ValueError("precision='int8' needs int8 codes: call evireform.engine.quantize("
                         "index, 'int8') first (CLI: index --precision int8)")
    return s.codes is not None and precision != "float32"


def search_index(index: PropositionIndex, Q: ArrayLike, k: int, *, rows: Any = None,
                 precision: str = "auto", exact: bool | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` propositions of each query row over ``index`` with its structures:
    ``(ids, scores)`` of shape (batch, min(k, n_props)), positive only, best first, ties by
    lower id, padded with -1 / 0.  The exact scan reads the int8 codes when the index has
    them and ``precision`` allows (:func:`scans_codes`; the same top-k as float32), HNSW
    runs where a graph is built unless ``exact``.  ``rows`` (strictly ascending positions,
    a filter's matching propositions): only those are candidates
    (:func:`~evireform.engine.hnsw.search_rows`)."""
    s = structures_of(index)
    codes = scans_codes(index, precision)
    if rows is not None:
        return search_rows(index.embeddings, Q, k, rows,
                           hnsw=None if exact else s.hnsw, label_ids=s.hnsw_ids)
    if exact or s.hnsw is None:
        if codes:
            return quantized_topk_batch(s.codes, s.code_scale, index.embeddings, Q, k)
        return cosine_topk_batch(index.embeddings, Q, k)
    return hnsw_topk_batch(s.hnsw, index.embeddings, Q, k, s.hnsw_ids)


def _saved(index: Any) -> SearchStructures:
    """What the store writes with an index: its structures, the lexical index counted."""
    s = structures_of(index)
    lexical_of(index)
    return s


# the store saves what the engine made, without importing the engine: it is handed them
provide_structures(_saved)
