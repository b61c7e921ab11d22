"""The CPU engine: the numba kernels over an index, searching with its structures
(:mod:`evireform.engine.structures`) or a sharded searcher (:mod:`evireform.engine.shards`,
:mod:`evireform.distributed`)."""
from __future__ import annotations

import functools
import inspect
from typing import Any, Sequence, TYPE_CHECKING

import numpy as np

from .. import kernels as K
from ..filters import RestrictionCache
from .lexical import lexical_search
from .structures import lexical_of, scans_codes, search_index

if TYPE_CHECKING:  # annotations only
    from numpy.typing import ArrayLike
    from ..index import PropositionIndex

__all__ = ["CpuEngine"]


class CpuEngine:
    """The numba kernels over an index, searching with ``searcher`` (a sharded searcher) or
    the index's search structures (:mod:`evireform.engine.structures`: exact, int8 or
    HNSW).  Under a restriction the search reads the
    matching rows in place (float32; HNSW with a label filter at HNSW sizes), in each shard
    when sharded."""

    kind = "cpu"
    #: search_batch and rank_batch take ``restriction=`` (see the module docstring)
    takes_restriction = True
    #: rank_batch takes ``split=`` and then also returns the score parts (see
    #: :func:`evireform.engine.rank`)
    takes_split = True

    def __init__(self, index: PropositionIndex, searcher: Any=None, *, precision: str = "auto") -> None:
        if searcher is not None:
            if not callable(getattr(searcher, "search_batch", None)):
                raise TypeError(f"searcher {type(searcher).__name__} has no search_batch()")
            if getattr(searcher, "n_props", index.n_props) != index.n_props:
                raise ValueError(f"the searcher covers {searcher.n_props} propositions, the "
                                 f"index {index.n_props}")
            if precision != "auto":
                raise ValueError("a sharded searcher scans its shards as they were built; "
                                 "precision= applies to the index's own search")
        scans_codes(index, precision)  # an unknown precision, or int8 without codes
        #: the precision of the exact scan ("auto": int8 when the index has codes)
        self.precision: str = precision
        self.index: PropositionIndex = index
        self.searcher: Any = searcher
        #: this engine's restrictions, one per recent filter (evireform.filters)
        self.restrictions: RestrictionCache = RestrictionCache(index)

    @property
    def n_props(self) -> int:
        return self.index.n_props

    def search_batch(self, Q: ArrayLike, k: int, *, restriction: Any = None
                     ) -> tuple[np.ndarray, np.ndarray]:
        rows = None if restriction is None else restriction.props
        if self.searcher is None:
            return search_index(self.index, Q, k, rows=rows, precision=self.precision)
        if rows is None:
            return self.searcher.search_batch(Q, k)
        if not _takes_rows(self.searcher):
            raise ValueError(f"the searcher {type(self.searcher).__name__} cannot search some "
                             "rows only (its search_batch takes no rows=): a filtered query "
                             "needs one that does (ShardedSearcher, RayShardedSearcher)")
        return self.searcher.search_batch(Q, k, rows=rows)

    def rank_batch(self, indptr: ArrayLike, ids: Any, vals: ArrayLike, alpha: float, k: int, *, propagation: bool = True,
                   restriction: Any = None, split: ArrayLike | None = None
                   ) -> tuple[np.ndarray, ...]:
        idx, r, seeds = self.index, restriction, (indptr, ids, vals)
        if r is None and propagation:  # one pass: z stays in the kernel's workspace (bitwise)
            return K.rank_topk_batch(idx.graph, idx.pmap, indptr, ids, vals, alpha, k,
                                     backend="cpu", split=split)
        if propagation:
            indptr, ids, vals = K.propagate_batch(idx.graph if r is None else r.graph, indptr,
                                                  ids, vals, alpha, backend="cpu")
            if r is not None:
                indptr, ids, vals = r.keep_inside(indptr, ids, vals)
        P, S = K.readout_topk_batch(idx.pmap, indptr, ids, vals, k, backend="cpu")
        if r is not None:
            P, S = r.fill_batch(P, S, k)
        return (P, S) if split is None else \
            (P, S) + K.score_parts(idx.pmap, *seeds, split, alpha, P)


    def lexical_batch(self, texts: Sequence[str], k: int, *, level: str = "props",
                      restriction: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """BM25 top-``k`` of ``level`` (``"props"`` or ``"passages"``) for each text over the
        index's lexical index (:mod:`evireform.engine.lexical`), under ``restriction`` as
        the sub-index would score them."""
        return lexical_search(lexical_of(self.index), texts, k, level, restriction,
                              backend="cpu")


@functools.lru_cache(maxsize=64)
def _takes_rows_of(cls) -> bool:
    return "rows" in inspect.signature(cls.search_batch).parameters


def _takes_rows(searcher: Any) -> bool:
    """Whether a searcher's search_batch takes ``rows=`` (checked once per class)."""
    return _takes_rows_of(type(searcher))
