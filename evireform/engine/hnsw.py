"""Proposition search on plain arrays: query checks, the one HNSW builder, HNSW search
re-scored exactly, and the exact merge of partial top-k lists.

Everything here works on plain arrays (embeddings, queries, an hnswlib graph), so the
engine's structures (:mod:`evireform.engine.structures`), the shards
(:mod:`evireform.engine.shards`) and the distributed searcher share one implementation.
"""
from __future__ import annotations

from typing import Any
from typing import TYPE_CHECKING

import pickle

import numpy as np

from .._checks import positive_int
from ..kernels import config as kconfig, cosine_scores, cosine_topk_batch, merge_topk

if TYPE_CHECKING:  # annotations only
    from numpy.typing import ArrayLike

__all__ = ["check_queries", "build_hnsw", "copy_hnsw", "hnsw_topk_batch", "merge_topk",
           "search_rows", "uses_hnsw"]


def check_queries(Q: ArrayLike, k: int, dim: int) -> tuple[np.ndarray, int]:
    """``(Q as contiguous float32 (batch, dim), k as int)``, or ``ValueError``."""
    Q = np.ascontiguousarray(np.asarray(Q, dtype=np.float32))
    if Q.ndim != 2 or Q.shape[1] != dim:
        raise ValueError(f"queries must have shape (batch, {dim}); got {Q.shape}")
    return Q, positive_int(k, "k")


def build_hnsw(embeddings: ArrayLike, *, M: int | None = None, ef_construction: int | None = None,
               ef: int | None = None, threads: int | None = None) -> Any:
    """An hnswlib inner-product graph over the rows of ``embeddings`` (labels = rows), with
    the parameters of :mod:`evireform.kernels.config` unless given."""
    import hnswlib
    n, dim = int(embeddings.shape[0]), int(embeddings.shape[1])
    h = hnswlib.Index(space="ip", dim=dim)
    h.init_index(max_elements=max(n, 1), M=M or kconfig.HNSW_M,
                 ef_construction=ef_construction or kconfig.HNSW_EF_CONSTRUCTION,
                 random_seed=kconfig.HNSW_SEED)
    if n:
        h.add_items(np.asarray(embeddings), np.arange(n),
                    num_threads=threads or kconfig.HNSW_BUILD_THREADS)
    h.set_ef(ef or kconfig.HNSW_EF_SEARCH)
    return h


def copy_hnsw(h: Any) -> Any:
    """An independent copy of an hnswlib index (hnswlib indexes pickle)."""
    return pickle.loads(pickle.dumps(h))


def hnsw_topk_batch(h: Any, embeddings: ArrayLike, Q: ArrayLike, k: int,
                    label_ids: ArrayLike | None = None, allowed: ArrayLike | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """HNSW candidates of ``h`` over ``embeddings``, re-scored with the exact kernel so that
    scores and tie order match exact search: ``(ids, scores)`` of shape
    (batch, min(k, len(embeddings))), positive only, padded with -1 / 0.  ``label_ids`` maps
    HNSW labels to rows (after deletions); None when labels are rows.  ``allowed`` (bool per
    row) restricts the search to those rows (hnswlib's filter callback); when the graph
    cannot return ``k`` allowed items, the query is answered by an exact scan over them."""
    Q, k = check_queries(Q, k, int(embeddings.shape[1]))
    kk = min(k, int(embeddings.shape[0]))
    out_i = np.full((len(Q), kk), -1, np.int64)
    out_s = np.zeros((len(Q), kk), np.float32)
    if kk == 0 or len(Q) == 0:
        return out_i, out_s
    if allowed is not None:
        allowed = np.asarray(allowed, dtype=bool)
        ok = allowed if label_ids is None else \
            np.where(label_ids >= 0, allowed[np.maximum(label_ids, 0)], False)
        kk_allowed = min(kk, int(allowed.sum()))
        try:
            labels, _ = h.knn_query(Q, k=max(kk_allowed, 1), num_threads=1,
                                    filter=lambda label: bool(ok[label]))
        except RuntimeError:  # fewer reachable allowed items than k: scan them exactly
            from ..kernels import cosine_topk_batch
            ids, sc = cosine_topk_batch(embeddings, Q, kk, rows=np.flatnonzero(allowed))
            out_i[:, :ids.shape[1]] = ids
            out_s[:, :ids.shape[1]] = sc
            return out_i, out_s
    else:
        labels, _ = h.knn_query(Q, k=kk, num_threads=1)
    labels = labels.astype(np.int64)
    if label_ids is not None:
        labels = label_ids[labels]
    for b in range(len(Q)):
        lab = labels[b][labels[b] >= 0]
        sc = cosine_scores(embeddings[lab], Q[b:b + 1])[0]
        keep = sc > 0
        ids, sc = lab[keep], sc[keep]
        o = np.lexsort((ids, -sc.astype(np.float64)))
        out_i[b, :len(o)] = ids[o]
        out_s[b, :len(o)] = sc[o]
    return out_i, out_s


def uses_hnsw(n: int) -> bool:
    """The one size rule: search over ``n`` candidates goes through HNSW (where a graph is
    built) at or above ``kernels.config.EXACT_SEARCH_MAX``, exactly below it; a build makes
    a graph by the same rule (``hnsw=None``)."""
    return int(n) >= kconfig.EXACT_SEARCH_MAX


def search_rows(embeddings: ArrayLike, Q: ArrayLike, k: int, rows: Any, *, hnsw: Any = None,
                label_ids: ArrayLike | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` over the candidate ``rows`` only (a filter's matching propositions, strictly
    ascending), as an index of just those rows would search: exact, read in place by the
    kernel (``cosine_topk_batch(..., rows=)``), or, where ``hnsw`` is built and
    :func:`uses_hnsw` says so for ``len(rows)``, HNSW with the rows as its filter (re-scored
    exactly; approximate as HNSW is).  ``(ids, scores)``: positions in ``embeddings``,
    shape (batch, min(k, len(rows)))."""
    rows = np.asarray(rows, dtype=np.int64)
    if hnsw is not None and uses_hnsw(len(rows)):
        allowed = np.zeros(int(embeddings.shape[0]), dtype=bool)
        allowed[rows] = True
        return hnsw_topk_batch(hnsw, embeddings, Q, k, label_ids, allowed=allowed)
    return cosine_topk_batch(embeddings, Q, k, rows=rows)
