"""The compiled core of evireform: exact cosine top-k, sparse propagation, passage readout.

Each public function validates its input, picks a backend (``backend="auto" | "cpu" | "gpu"``)
and calls a private kernel.  The numpy/scipy references live in
:mod:`evireform.kernels.reference`; every backend is tested against them.

Ranking conventions (the paper's Appendix C.1): nonpositive similarities are excluded from
proposition top-k; ties are broken by the lower id; passages tie by stored order and passages
without propositions score 0.
"""
from __future__ import annotations

import os
import threading

import numpy as np

from . import config
from ._backend import BACKENDS, BackendUnavailable, resolve
from .graph import EntityGraph, PassageMap

__all__ = [
    "BACKENDS", "BackendUnavailable", "EntityGraph", "PassageMap", "config",
    "cosine_scores", "cosine_topk", "cosine_topk_batch", "propagate", "propagate_batch",
    "readout_topk", "readout_topk_batch", "w_nnz",
]


def _kernels():
    from . import _cpu as mod  # numba is imported on first use, not at package import
    return mod


def _n_threads() -> int:
    import numba
    return max(1, int(numba.get_num_threads()))


def _check_k(k, name: str = "k") -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k <= 0:
        raise ValueError(f"{name} must be a positive integer; got {k!r}")
    return int(k)


def _check_matrix(H) -> np.ndarray:
    H = np.asarray(H)
    if H.ndim != 2:
        raise ValueError(f"embeddings must be a 2-d (n, d) array; got shape {H.shape}")
    if H.dtype != np.float32:
        H = H.astype(np.float32)
    return np.ascontiguousarray(H)


def _check_queries(Q, d: int, ndim: int) -> np.ndarray:
    Q = np.ascontiguousarray(np.asarray(Q, dtype=np.float32))
    if Q.ndim != ndim or Q.shape[-1] != d:
        want = "(d,)" if ndim == 1 else "(batch, d)"
        raise ValueError(f"query must have shape {want} with d = {d}; got {Q.shape}")
    if not np.all(np.isfinite(Q)):
        raise ValueError("query embedding contains NaN or inf")
    return Q


# --------------------------------------------------------------------------- cosine top-k
def cosine_scores(H, Q, *, backend: str = "auto") -> np.ndarray:
    """All scores ``Q @ H.T`` as float32 (batch, n), by the same batch-invariant loop as
    :func:`cosine_topk`; for re-scoring a few rows, not for scanning an index."""
    H = _check_matrix(H)
    Q = _check_queries(Q, H.shape[1], 2)
    resolve(backend)
    Qp = _pad4(Q)
    S = np.empty((Qp.shape[0], H.shape[0]), dtype=np.float32)
    if S.size:
        _kernels().dot_scores(H, 0, H.shape[0], Qp, S)
    return S[:Q.shape[0]]


def _pad4(Q: np.ndarray) -> np.ndarray:
    """Queries padded with zero rows to a multiple of 4 (the scoring kernel's group size)."""
    B = Q.shape[0]
    if B % 4 == 0:
        return Q
    out = np.zeros((B + 4 - B % 4, Q.shape[1]), dtype=np.float32)
    out[:B] = Q
    return out


def cosine_topk(H, q, k: int, *, backend: str = "auto"):
    """Exact top-``k`` rows of ``H`` (float32, L2-normalised) by cosine with ``q``.

    Returns ``(ids, scores)``: int64 ids and float32 scores, best first, ties by lower id.
    Only positive scores are returned, so there may be fewer than ``k``.  Scores are computed
    by one compiled dot-product loop, so a query gets bitwise the same result here and in
    :func:`cosine_topk_batch`, whatever the batch.
    """
    H = _check_matrix(H)
    q = _check_queries(q, H.shape[1], 1)
    k = _check_k(k)
    resolve(backend)
    M = H.shape[0]
    if M == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    scores = np.empty((4, M), dtype=np.float32)
    _kernels().dot_scores(H, 0, M, _pad4(q[None, :]), scores)
    scores = scores[0]
    n_chunks = max(1, min(4 * _n_threads(), M // config.TOPK_MIN_CHUNK))
    ids, vals, n = _kernels().topk_positive(scores, min(k, M), n_chunks)
    return ids[:n], vals[:n]


def cosine_topk_batch(H, Q, k: int, *, backend: str = "auto"):
    """Batched :func:`cosine_topk`.

    Returns ``(ids, scores)`` of shape ``(batch, k)``; rows with fewer than ``k`` positive
    matches are padded with id -1 and score 0.  ``H`` is scanned in blocks of
    ``config.BATCH_BLOCK_ROWS`` rows so memory stays bounded for any index size.
    """
    H = _check_matrix(H)
    Q = _check_queries(Q, H.shape[1], 2)
    k = _check_k(k)
    resolve(backend)
    B, M = Q.shape[0], H.shape[0]
    heap_v = np.zeros((B, k), dtype=np.float32)
    heap_i = np.full((B, k), -1, dtype=np.int64)
    heap_n = np.zeros(B, dtype=np.int64)
    if B == 0:
        return heap_i, heap_v
    if B <= config.SMALL_BATCH:
        # a few queries: the single-query path (same scores bitwise, fewer parallel launches)
        for b in range(B):
            ids, vals = cosine_topk(H, Q[b], k)
            heap_i[b, :len(ids)] = ids
            heap_v[b, :len(ids)] = vals
        return heap_i, heap_v
    cpu = _kernels()
    step = config.BATCH_BLOCK_ROWS
    Qp = _pad4(Q)
    S = np.empty((Qp.shape[0], min(step, M)), dtype=np.float32)
    for r0 in range(0, M, step):
        r1 = min(M, r0 + step)
        cpu.dot_scores(H, r0, r1, Qp, S)
        cpu.topk_block_update(S[:B, :r1 - r0], r0, k, heap_v, heap_i, heap_n)
    cpu.heaps_finish(heap_v, heap_i, heap_n)
    return heap_i, heap_v


# --------------------------------------------------------------------------- propagation
class _Workspace(threading.local):
    """Per-thread scratch, reused across calls; kernels leave it zeroed."""

    def get(self, kind: str, n1: int, n2: int):
        key = (kind, n1, n2)
        if getattr(self, "key_" + kind, None) != key:
            if kind == "prop":
                arrays = (np.zeros(n1), np.zeros(n1), np.zeros(n1, np.bool_), np.zeros(n2),
                          np.zeros(n2, np.bool_), np.empty(n1, np.int64), np.empty(n2, np.int64))
            else:
                arrays = (np.zeros(n1), np.zeros(n1, np.bool_), np.empty(n1, np.int64))
            setattr(self, "arr_" + kind, arrays)
            setattr(self, "key_" + kind, key)
        return getattr(self, "arr_" + kind)


_WS = _Workspace()


def _check_alpha(alpha) -> float:
    alpha = float(alpha)
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1]; got {alpha}")
    return alpha


def _as1d(x, dtype) -> np.ndarray:
    """x as a contiguous 1-d array of ``dtype``; no copy when it already is one."""
    if type(x) is np.ndarray and x.dtype == dtype and x.ndim == 1 and x.flags.c_contiguous:
        return x
    return np.ascontiguousarray(np.asarray(x, dtype=dtype).ravel())


def _check_seed(seed_ids, seed_vals, M: int):
    ids = _as1d(seed_ids, np.int64)
    vals = _as1d(seed_vals, np.float64)
    if ids.shape != vals.shape:
        raise ValueError(f"seed ids and values differ in length: {len(ids)} vs {len(vals)}")
    return ids, vals


def _seed_error(code: int, M: int, what: str = "seed"):
    """Raise for a status returned by a kernel's input check (0 = fine)."""
    if code == 1:
        raise ValueError(f"{what} ids must lie in [0, {M})")
    if code == 2:
        raise ValueError(f"{what} values contain NaN or inf")


def _check_indptr(indptr, n: int, what: str) -> np.ndarray:
    indptr = np.ascontiguousarray(np.asarray(indptr, dtype=np.int64))
    if indptr.ndim != 1 or len(indptr) < 1 or indptr[0] != 0 or indptr[-1] != n \
            or np.any(np.diff(indptr) < 0):
        raise ValueError(f"{what} indptr must start at 0, be non-decreasing and end at {n}")
    return indptr


def propagate(graph: EntityGraph, seed_ids, seed_vals, alpha: float = 0.5, *,
              backend: str = "auto"):
    """One propagation step z = alpha s + (1 - alpha) W Dw+ s from a sparse seed s.

    ``s`` is given as ``(seed_ids, seed_vals)``; repeated ids are summed.  W = A De+ A^T - diag
    is never formed: only the incidence lists of the seed's propositions and entities are read.
    Returns z as ``(ids, values)``: every proposition reached (distinct ids, in the order they
    were first reached), float64 values; all other entries of z are 0.
    """
    ids, vals = _check_seed(seed_ids, seed_vals, graph.n_props)
    alpha = _check_alpha(alpha)
    resolve(backend)
    g = graph
    ws = _WS.get("prop", g.n_props, g.n_entities)
    ids, vals, code = _kernels().propagate_one(g.a_indptr, g.a_indices, g.at_indptr,
                                               g.at_indices, g.inv_deg, g.diag, g.inv_w, ids,
                                               vals, alpha, *ws)
    _seed_error(code, g.n_props)
    return ids, vals


def _concat_rows(rows):
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(r[0]) for r in rows])
    if not rows:
        return indptr, np.zeros(0, np.int64), np.zeros(0)
    return indptr, np.concatenate([r[0] for r in rows]), np.concatenate([r[1] for r in rows])


def propagate_batch(graph: EntityGraph, seed_indptr, seed_ids, seed_vals, alpha: float = 0.5,
                    *, backend: str = "auto"):
    """:func:`propagate` for many seeds given as CSR rows; returns z as CSR (indptr, ids, vals)."""
    ids, vals = _check_seed(seed_ids, seed_vals, graph.n_props)
    _seed_error(_kernels().check_seed(ids, vals, graph.n_props), graph.n_props)
    indptr = _check_indptr(seed_indptr, len(ids), "seed")
    alpha = _check_alpha(alpha)
    resolve(backend)
    g = graph
    B = len(indptr) - 1
    if B <= config.SMALL_BATCH:
        # a few seeds: the single-seed kernel with its reused per-thread workspace avoids
        # allocating fresh M-sized scratch per call
        rows = [propagate(g, ids[indptr[b]:indptr[b + 1]], vals[indptr[b]:indptr[b + 1]], alpha)
                for b in range(B)]
        return _concat_rows(rows)
    n_chunks = max(1, min(B, _n_threads()))
    return _kernels().propagate_many(g.a_indptr, g.a_indices, g.at_indptr, g.at_indices, g.inv_deg,
                                 g.diag, g.inv_w, indptr, ids, vals, alpha, n_chunks)


# --------------------------------------------------------------------------- readout
def _check_z(pmap: PassageMap, z_ids, z_vals):
    ids = _as1d(z_ids, np.int64)
    vals = _as1d(z_vals, np.float64)
    if ids.shape != vals.shape:
        raise ValueError(f"z ids and values differ in length: {len(ids)} vs {len(vals)}")
    return ids, vals


def readout_topk(pmap: PassageMap, z_ids, z_vals, k: int, *, backend: str = "auto"):
    """Passage scores sum_{i in P_j} z_i / sqrt(|P_j|) from a sparse z, then the top ``k``.

    Returns ``(passage_ids, scores)`` with ``min(k, n_passages)`` entries: positive scores best
    first (ties by stored passage order), then zero-score passages in stored order.
    For a dense z pass ``np.arange(len(z)), z``.
    """
    ids, vals = _check_z(pmap, z_ids, z_vals)
    k = min(_check_k(k), pmap.n_passages)
    resolve(backend)
    if k == 0:
        _seed_error(_kernels().check_seed(ids, vals, pmap.n_props), pmap.n_props, "z")
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    ws = _WS.get("read", pmap.n_passages, 0)
    pids, scores, code = _kernels().readout_one(pmap.owner, pmap.inv_sqrt, ids, vals, k, *ws)
    _seed_error(code, pmap.n_props, "z")
    return pids, scores


def readout_topk_batch(pmap: PassageMap, z_indptr, z_ids, z_vals, k: int, *,
                       backend: str = "auto"):
    """Batched :func:`readout_topk` over z given as CSR rows; returns (batch, k') arrays."""
    ids, vals = _check_z(pmap, z_ids, z_vals)
    _seed_error(_kernels().check_seed(ids, vals, pmap.n_props), pmap.n_props, "z")
    indptr = _check_indptr(z_indptr, len(ids), "z")
    k = min(_check_k(k), pmap.n_passages)
    resolve(backend)
    B = len(indptr) - 1
    if k == 0 or B == 0:
        return np.full((B, k), -1, np.int64), np.zeros((B, k))
    if B <= config.SMALL_BATCH:
        rows = [readout_topk(pmap, ids[indptr[b]:indptr[b + 1]], vals[indptr[b]:indptr[b + 1]], k)
                for b in range(B)]
        return np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows])
    n_chunks = max(1, min(B, _n_threads()))
    return _kernels().readout_many(pmap.owner, pmap.inv_sqrt, indptr, ids, vals, k, n_chunks)


def w_nnz(graph: EntityGraph) -> int:
    """Nonzeros W = A De+ A^T - diag would have if it were materialised (it never is)."""
    if graph.n_props == 0:
        return 0
    g = graph
    n_chunks = max(1, min(g.n_props, 2 * _n_threads()))
    return int(_kernels().w_row_nnz(g.a_indptr, g.a_indices, g.at_indptr, g.at_indices,
                                n_chunks).sum())
