"""The compiled core of evireform: exact cosine top-k, sparse propagation, passage readout.

Each public function validates its input, picks a backend (``backend="auto" | "cpu" | "gpu"``)
and calls a private kernel: the numba kernels of :mod:`._cpu`, or the CuPy kernels of
:mod:`._gpu` (array-namespace code, verified with numpy/scipy where no GPU is at hand).
The numpy/scipy references live in
:mod:`evireform.kernels.reference`; every backend is tested against them.

Ranking conventions (the paper's Appendix C.1): nonpositive similarities are excluded from
proposition top-k; ties are broken by the lower id; passages tie by stored order and passages
without propositions score 0.
"""
from __future__ import annotations

import sys
import threading
from typing import Any, NamedTuple, TYPE_CHECKING

import numpy as np

from . import config
from ._backend import BACKENDS, BackendUnavailable, resolve
from .graph import EntityGraph, PassageMap
from .lexical import LexicalMatrix, SortedTerms, TermCounts, bm25_weights
from .runtime import (  # noqa: F401 - the policy is runtime's; these names are public here
    _DEVICE_COPIES, _OUT_KEPT, _device, _keep_buffers, _kernels, _n_threads, _on_caller,
    _out_buffers, _pool, join_warm_up, machine_busy, release_buffers, start_native_thread,
    warm_up, warm_up_in_background)

if TYPE_CHECKING:  # annotations only
    from numpy.typing import ArrayLike

__all__ = [
    "BACKENDS", "BackendUnavailable", "EntityGraph", "PassageMap", "config",
    "cosine_scores", "cosine_topk", "cosine_topk_batch", "propagate", "propagate_batch",
    "readout_topk", "readout_topk_batch", "w_nnz", "quantize_int8", "quantized_topk_batch",
    "merge_topk", "release_buffers", "rank_topk_batch", "mentions_outside", "machine_busy",
    "score_parts", "lexical_topk_batch", "LexicalMatrix", "TermCounts", "bm25_weights",
    "SortedTerms", "vocab_lookup", "vocab_unsorted",
]


_I64, _F64, _F32 = np.dtype(np.int64), np.dtype(np.float64), np.dtype(np.float32)


def _check_k(k, name: str = "k") -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k <= 0:
        raise ValueError(f"{name} must be a positive integer; got {k!r}")
    return int(k)


def _check_matrix(H: ArrayLike) -> np.ndarray:
    if type(H) is np.ndarray and H.ndim == 2 and H.dtype == _F32 and H.flags.c_contiguous:
        return H  # an index's own matrix: no numpy call (each costs after a scan)
    H = np.asarray(H)
    if H.ndim != 2:
        raise ValueError(f"embeddings must be a 2-d (n, d) array; got shape {H.shape}")
    if H.dtype != np.float32:
        H = H.astype(np.float32)
    return np.ascontiguousarray(H)


def _check_queries(Q: ArrayLike, d: int, ndim: int, finite: bool = True) -> np.ndarray:
    """``Q`` as a contiguous float32 array of ``ndim`` dimensions, the last ``d`` (no copy
    when it is one); with ``finite`` its values are checked here (without, the kernel that
    reads it checks them: :func:`cosine_topk`)."""
    if not (type(Q) is np.ndarray and Q.dtype == _F32 and Q.flags.c_contiguous):
        Q = np.ascontiguousarray(np.asarray(Q, dtype=np.float32))
    if Q.ndim != ndim or Q.shape[-1] != d:
        want = "(d,)" if ndim == 1 else "(batch, d)"
        raise ValueError(f"query must have shape {want} with d = {d}; got {Q.shape}")
    if finite and not np.all(np.isfinite(Q)):
        _bad_query()
    return Q


def _bad_query() -> None:
    raise ValueError("query embedding contains NaN or inf")


# --------------------------------------------------------------------------- cosine top-k
def cosine_scores(H: ArrayLike, Q: ArrayLike, *, backend: str = "auto") -> np.ndarray:
    """All scores ``Q @ H.T`` as float32 (batch, n), by the same batch-invariant loops as
    :func:`cosine_topk`; for re-scoring a few rows, not for scanning an index."""
    H = _check_matrix(H)
    Q = _check_queries(Q, H.shape[1], 2)
    if resolve(backend) == "gpu":
        from . import _gpu
        ns = _gpu.gpu_namespace()
        return ns.to_host(ns.asarray(Q) @ ns.asarray(H).T)
    if Q.shape[0] == 1:
        S = np.empty((1, H.shape[0]), dtype=np.float32)
        if S.size:
            _kernels().dot_one(H, Q[0], S[0])
        return S
    Qp = _pad4(Q)
    S = np.empty((Qp.shape[0], H.shape[0]), dtype=np.float32)
    if S.size:
        _kernels().dot_scores(H, Qp, S, _block_rows())
    return S[:Q.shape[0]]


def _block_rows() -> int:
    rows = int(config.BATCH_BLOCK_ROWS)
    if rows < 1:
        raise ValueError(f"config.BATCH_BLOCK_ROWS must be positive; got {rows}")
    return rows


def _pad4(Q: np.ndarray) -> np.ndarray:
    """Queries padded with zero rows to a multiple of 4 (the batch kernel's group size)."""
    B = Q.shape[0]
    if B % 4 == 0:
        return Q
    out = np.zeros((B + 4 - B % 4, Q.shape[1]), dtype=np.float32)
    out[:B] = Q
    return out


def _check_rows(rows: Any, M: int) -> np.ndarray | None:
    """Candidate rows: int64 positions in [0, M), strictly ascending (ties resolve by lower
    id, as in a matrix of just those rows); None for every row."""
    if rows is None:
        return None
    r = np.ascontiguousarray(np.asarray(rows), dtype=np.int64).reshape(-1) \
        if np.asarray(rows).dtype.kind in "iu" or len(rows) == 0 else None
    if r is None:
        raise ValueError("rows must be integer positions")
    if len(r) and (r[0] < 0 or r[-1] >= M or np.any(r[1:] <= r[:-1])):
        raise ValueError(f"rows must be strictly ascending positions in [0, {M})")
    return r


def cosine_topk(H: ArrayLike, q: ArrayLike, k: int, *, rows: Any = None,
                backend: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` rows of ``H`` (float32, L2-normalised) by cosine with ``q``.

    Returns ``(ids, scores)``: int64 ids and float32 scores, best first, ties by lower id.
    Only positive scores are returned, so there may be fewer than ``k``.  The single-query
    and batched kernels accumulate every dot product in the same order, so a query gets
    bitwise the same result here and in :func:`cosine_topk_batch`, whatever the batch.

    ``rows`` (strictly ascending positions): only those rows are candidates, read in place
    (a memory-mapped ``H`` is not copied); the ids are positions in ``H`` and the scores
    bitwise those of a search over ``H[rows]`` alone: how a filter searches its matching
    propositions.
    """
    H = _check_matrix(H)
    M = H.shape[0]
    # the whole-index scan checks the query's values itself (a numpy check after the last
    # scan runs with cold caches: ~10 us of a 0.3 ms search); other paths check them here
    whole = rows is None and M > 0 and backend != "gpu"
    q = _check_queries(q, H.shape[1], 1, finite=not whole)
    k = _check_k(k)
    rows = _check_rows(rows, M)
    if resolve(backend) == "gpu":
        ids, vals = cosine_topk_batch(H, q[None, :], k, rows=rows, backend="gpu")
        keep = ids[0] >= 0
        return ids[0][keep], vals[0][keep]
    if rows is not None:
        return _topk_rows_one(H, q, k, rows)
    if M == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    # one row range per thread (numba splits a prange evenly, so more would only unbalance);
    # a small scan runs the same ranges on the calling thread (bitwise the same result)
    n_chunks = max(1, min(_n_threads(), M // config.TOPK_MIN_CHUNK))
    kern = _kernels()
    scan = (kern.topk_one_serial if _on_caller(H.nbytes <= config.SERIAL_SCAN_BYTES)
            else kern.topk_one)
    ids, vals, n = scan(H, q, min(k, M), n_chunks)
    if n < 0:
        _bad_query()
    return ids[:n], vals[:n]


def _topk_rows_one(H: ArrayLike, q: ArrayLike, k: int, rows: Any):
    """:func:`cosine_topk` over checked ``rows`` (one range per thread; one range on the
    calling thread when there are few rows)."""
    M = len(rows)
    if M == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    n_chunks = max(1, min(_n_threads(), M // config.TOPK_MIN_CHUNK))
    if _on_caller(n_chunks == 1):  # one range on the calling thread (same top-k)
        ids, vals, n = _kernels().topk_rows_serial(H, rows, q, min(k, M))
    else:
        ids, vals, n = _kernels().topk_rows(H, rows, q, min(k, M), n_chunks)
    return ids[:n], vals[:n]


#: Queries per call of the fused batch kernel (bounds its per-thread score blocks and
#: candidate buffers).
_QUERY_GROUP = 1024


def cosine_topk_batch(H: ArrayLike, Q: ArrayLike, k: int, *, rows: Any = None,
                      backend: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """Batched :func:`cosine_topk`.

    Returns ``(ids, scores)`` of shape ``(batch, min(k, n))`` (memory scales with the index,
    not with ``k``); rows with fewer positive matches are padded with id -1 and score 0.
    Each thread scores ``config.BATCH_BLOCK_ROWS``
    rows at a time against the whole batch and folds the block into per-query candidate
    buffers at once (cut to the best k whenever full),
    so no (batch x n) score matrix is ever formed.

    ``rows``: only those rows (see :func:`cosine_topk`; n is their number).  Up to
    ``config.SMALL_BATCH`` queries read them in place; a larger batch copies them into blocks
    of ``config.SUBSET_BLOCK_BYTES`` and merges the blocks' top-k.
    """
    H = _check_matrix(H)
    Q = _check_queries(Q, H.shape[1], 2)
    k = _check_k(k)
    rows = _check_rows(rows, H.shape[0])
    if rows is not None:
        return _topk_batch_rows(H, Q, k, rows, backend)
    if resolve(backend) == "gpu":
        from . import _gpu
        ns = _gpu.gpu_namespace()
        ids, vals = _gpu.cosine_topk_batch(ns, ns.asarray(H), ns.asarray(Q), k)
        return ns.to_host(ids), ns.to_host(vals)
    B, M = Q.shape[0], H.shape[0]
    k = min(k, M)
    if B == 0 or M == 0:
        return np.full((B, k), -1, np.int64), np.zeros((B, k), np.float32)
    if B <= config.SEARCH_SMALL_BATCH:
        # one query: the single-query kernel (same scores bitwise, no padded queries)
        heap_i = np.full((B, k), -1, np.int64)
        heap_v = np.zeros((B, k), np.float32)
        for b in range(B):
            ids, vals = cosine_topk(H, Q[b], k)
            heap_i[b, :len(ids)] = ids
            heap_v[b, :len(ids)] = vals
        return heap_i, heap_v
    block = _block_rows()
    n_chunks = max(1, min(_n_threads(), M // (2 * block)))
    kern = _kernels()
    scan = (kern.topk_batch_serial if _on_caller(H.nbytes * min(B, 4) <= config.SERIAL_SCAN_BYTES)
            else kern.topk_batch)  # a small scan on the calling thread (bitwise the same)
    parts = [scan(H, _pad4(Q[g:g + _QUERY_GROUP]), min(B - g, _QUERY_GROUP), k, n_chunks,
                  block)
             for g in range(0, B, _QUERY_GROUP)]
    if len(parts) == 1:
        return parts[0]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def merge_topk(parts: Any, k: int, n_queries: int) -> tuple[np.ndarray, np.ndarray]:
    """Merge per-shard (or per-block) ``(ids, scores)`` pairs (global ids, shape
    (batch, k_s), padded with -1 / 0) into ``(ids, scores)`` of shape (batch, k): best score first, ties by lower id,
    padded with -1 / 0."""
    out_i = np.full((n_queries, k), -1, np.int64)
    out_s = np.zeros((n_queries, k), np.float32)
    parts = [(np.asarray(i, np.int64), np.asarray(s, np.float32)) for i, s in parts
             if np.asarray(i).size]
    if not parts or k == 0:
        return out_i, out_s
    ids = np.concatenate([p[0] for p in parts], axis=1)
    sc = np.concatenate([p[1] for p in parts], axis=1)
    for b in range(n_queries):
        keep = ids[b] >= 0
        i, s = ids[b][keep], sc[b][keep]
        o = np.lexsort((i, -s.astype(np.float64)))[:k]
        out_i[b, :len(o)] = i[o]
        out_s[b, :len(o)] = s[o]
    return out_i, out_s


def _topk_batch_rows(H: ArrayLike, Q: ArrayLike, k: int, rows: np.ndarray, backend: str):
    """:func:`cosine_topk_batch` over the candidate ``rows`` only."""
    B, R = Q.shape[0], len(rows)
    k = min(k, R)
    if B == 0 or R == 0:
        return np.full((B, k), -1, np.int64), np.zeros((B, k), np.float32)
    if B <= config.SMALL_BATCH and resolve(backend) != "gpu":
        heap_i = np.full((B, k), -1, np.int64)
        heap_v = np.zeros((B, k), np.float32)
        for b in range(B):  # the inputs are checked once, above: straight to the kernel
            ids, vals = _topk_rows_one(H, Q[b], k, rows)
            heap_i[b, :len(ids)] = ids
            heap_v[b, :len(ids)] = vals
        return heap_i, heap_v
    step = max(1, int(config.SUBSET_BLOCK_BYTES) // max(1, H.shape[1] * 4))
    parts = []
    for lo in range(0, R, step):
        part = rows[lo:lo + step]
        ids, vals = cosine_topk_batch(H[part], Q, k, backend=backend)
        parts.append((np.where(ids >= 0, part[np.maximum(ids, 0)], -1), vals))
    return parts[0] if len(parts) == 1 else merge_topk(parts, k, B)


# --------------------------------------------------------------------------- int8 storage
def quantize_int8(H: ArrayLike, scale: ArrayLike | None = None, *, block: int = 1 << 16
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, scale)``: int8 codes of the rows of ``H`` with one float32 scale per
    dimension (``max |H[:, d]| / 127`` unless ``scale`` is given), code = round(h / scale).
    Every |h - scale * code| <= scale / 2 as long as no |h| exceeds 127.5 * scale (the
    caller re-quantizes when new rows would); ``ValueError`` otherwise.  Streams ``H`` in
    blocks, so a memory-mapped matrix is not copied."""
    H = _check_matrix(H)
    M, d = H.shape
    if scale is None:
        top = np.zeros(d, np.float32)
        for lo in range(0, M, block):
            np.maximum(top, np.abs(np.asarray(H[lo:lo + block])).max(axis=0), out=top)
        scale = np.where(top > 0, top / np.float32(127.0), np.float32(1.0)).astype(np.float32)
    scale = np.ascontiguousarray(scale, dtype=np.float32)
    codes = np.empty((M, d), np.int8)
    for lo in range(0, M, block):
        x = np.asarray(H[lo:lo + block], np.float32) / scale
        if x.size and np.abs(x).max() > 127.5:
            raise ValueError("a value exceeds the int8 range of the given scale; "
                             "re-quantize with a new scale")
        codes[lo:lo + block] = np.rint(x).astype(np.int8)
    return codes, scale


def int8_error_bound(Q: ArrayLike, scale: ArrayLike) -> np.ndarray:
    """Per query, the largest |q . h - q . (scale * code)| the int8 codes allow:
    sum_d |q_d| scale_d / 2, plus float32 summation slack."""
    Q = np.atleast_2d(np.asarray(Q, np.float32))
    e = 0.5 * (np.abs(Q).astype(np.float64) @ np.asarray(scale, np.float64))
    return e * (1.0 + 1e-4) + 1e-5 * (np.abs(Q).sum(axis=1) * float(np.max(scale)) * 127 + 1)


def quantized_topk_batch(codes: ArrayLike, scale: ArrayLike, H: ArrayLike, Q: ArrayLike, k: int,
                         *, margin: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` of :func:`cosine_topk_batch` (bitwise the same ids and scores), found
    by scanning the int8 ``codes`` (4x fewer bytes than float32 ``H``) and re-scoring the
    candidates with ``H``.

    Per query, q x scale is rounded to int16 steps of t (the largest that keeps an int32
    sum of d products exact), so each row's approximate score t * sum(code * q_int) is an
    exact integer sum (any order, vectorised), within ``eps`` = :func:`int8_error_bound` +
    t / 2 x 127 d of the row's score.  Every row within 2 eps of the k-th approximate score
    is re-scored by the float32 kernel over those rows (:func:`cosine_topk`'s ``rows``,
    bitwise the full scan's scores), which provably contains the exact top-k, ties and the
    positive-only rule included.  ``margin`` is accepted for compatibility and unused."""
    H = _check_matrix(H)
    Q = _check_queries(Q, H.shape[1], 2)
    k = _check_k(k)
    codes = np.asarray(codes)
    if codes.dtype != np.int8 or codes.shape != H.shape:
        raise ValueError(f"codes must be int8 of shape {H.shape}; got {codes.dtype} "
                         f"{codes.shape}")
    B, (M, d) = Q.shape[0], H.shape
    k = min(k, M)
    out_i = np.full((B, k), -1, np.int64)
    out_v = np.zeros((B, k), np.float32)
    if B == 0 or M == 0 or k == 0:
        return out_i, out_v
    eps = int8_error_bound(Q, scale)
    scale = np.asarray(scale, np.float64)
    steps = min(32767, (2**31 - 1) // (127 * max(1, d)))  # |sum| <= 127 d steps < 2^31
    kern = _kernels()
    n_chunks = max(1, min(_n_threads(), M // config.TOPK_MIN_CHUNK))
    scan = (kern.scores_i8_serial if _on_caller(codes.nbytes <= config.SERIAL_SCAN_BYTES)
            else kern.scores_i8)
    for b in range(B):
        qs = Q[b].astype(np.float64) * scale
        top = float(np.abs(qs).max())
        if top == 0.0:
            continue  # every score is 0: no positive match
        t = top / steps
        qi = np.rint(qs / t).astype(np.int16)
        S = scan(codes, qi, n_chunks)
        tau = int(np.partition(S, M - k)[M - k])  # the k-th approximate score, in steps
        reach = 2.0 * (float(eps[b]) + 0.5 * t * 127 * d) / t
        cand = np.flatnonzero(S >= tau - int(np.ceil(reach)) - 1)  # ascending positions
        ids, vals = _topk_rows_one(H, Q[b], k, cand)
        out_i[b, :len(ids)] = ids
        out_v[b, :len(ids)] = vals
    return out_i, out_v


# --------------------------------------------------------------------------- propagation
class PropWorkspace(NamedTuple):
    """Scratch for propagation on M propositions and Ne entities, packed into three arrays
    (``wf``, ``wb``, ``wi``; layout and the leave-it-zeroed contract in
    :func:`evireform.kernels._cpu.ws_views`); ``out_ids``/``out_vals`` are the views that
    receive a single seed's z."""

    wf: np.ndarray
    wb: np.ndarray
    wi: np.ndarray
    out_ids: np.ndarray
    out_vals: np.ndarray

    @classmethod
    def new(cls, M: int, Ne: int) -> "PropWorkspace":
        wf, wb, wi = np.zeros(3 * M + Ne), np.zeros(M + Ne, np.bool_), \
            np.empty(2 * M + Ne, np.int64)
        return cls(wf, wb, wi, wi[M:2 * M], wf[2 * M:3 * M])

    def is_clean(self) -> bool:
        """The contract after any kernel call: acc, sbuf, yent 0 and mark, emark False."""
        M = len(self.out_ids)
        return (not self.wf[:2 * M].any() and not self.wf[3 * M:].any()
                and not self.wb.any())


class ReadWorkspace(NamedTuple):
    """Scratch for readout over N passages: accumulators (left 0), marks (left False) and
    the touched-passage list."""

    pacc: np.ndarray
    pmark: np.ndarray
    ptouched: np.ndarray

    @classmethod
    def new(cls, N: int, _unused: int = 0) -> "ReadWorkspace":
        return cls(np.zeros(N), np.zeros(N, np.bool_), np.empty(N, np.int64))


class _Workspace(threading.local):
    """Per-thread scratch, reused across calls: one workspace per kind, rebuilt when the index
    size changes."""

    def get(self, kind, n1: int, n2: int = 0):
        held = self.__dict__.get(kind.__name__)
        if held is not None and held[0] == (n1, n2):
            return held[1]
        ws = kind.new(n1, n2)
        self.__dict__[kind.__name__] = ((n1, n2), ws)
        return ws


_WS = _Workspace()


def _check_alpha(alpha) -> float:
    alpha = float(alpha)
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1]; got {alpha}")
    return alpha


def _as1d(x, dtype: np.dtype, also: np.dtype | None = None) -> np.ndarray:
    """x as a contiguous 1-d array of ``dtype`` (or of ``also``, kept as it is); no copy when it
    already is one.  (The fast path matters: propagation of one seed takes a few microseconds.)"""
    if type(x) is np.ndarray and x.ndim == 1 and (x.dtype == dtype or x.dtype == also) \
            and x.flags.c_contiguous:
        return x
    return np.ascontiguousarray(np.asarray(x, dtype=dtype).ravel())


def _check_seed(seed_ids: ArrayLike, seed_vals: ArrayLike):
    ids = _as1d(seed_ids, _I64)
    vals = _as1d(seed_vals, _F64, _F32)  # float32 values are read as they are
    if ids.shape != vals.shape:
        raise ValueError(f"seed ids and values differ in length: {len(ids)} vs {len(vals)}")
    return ids, vals


def _seed_error(code: int, M: int, what: str = "seed", n: int = 0) -> None:
    """Raise for a status returned by a kernel's input check (0 = fine; ``n``: the number of
    ids a CSR indptr must end at)."""
    if code == 1:
        raise ValueError(f"{what} ids must lie in [0, {M})")
    if code == 2:
        raise ValueError(f"{what} values contain NaN or inf")
    if code == 3:
        raise ValueError(f"{what} indptr must start at 0, be non-decreasing and end at {n}")


def _checked_csr(indptr: ArrayLike, ids: np.ndarray, vals: np.ndarray, M: int,
                 what: str) -> np.ndarray:
    """The int64 indptr of CSR rows over checked ``(ids, vals)``: ids in [0, M), finite
    values, an indptr from 0, non-decreasing, to ``len(ids)``; one kernel call (a question's
    ranking pays for every microsecond of Python around its kernels)."""
    indptr = _csr_indptr(indptr, ids, M, what)
    _seed_error(_kernels().check_csr(indptr, ids, vals, M), M, what, len(ids))
    return indptr


def _csr_indptr(indptr: ArrayLike, ids: np.ndarray, M: int, what: str) -> np.ndarray:
    """``indptr`` as a contiguous 1-d int64 array (its values not checked yet)."""
    if not (type(indptr) is np.ndarray and indptr.dtype == _I64
            and indptr.flags.c_contiguous):
        indptr = np.ascontiguousarray(np.asarray(indptr, dtype=np.int64))
    if indptr.ndim != 1:
        _seed_error(3, M, what, len(ids))
    return indptr


def propagate(graph: EntityGraph, seed_ids: ArrayLike, seed_vals: ArrayLike, alpha: float = 0.5, *,
              backend: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """One propagation step z = alpha s + (1 - alpha) W Dw+ s from a sparse seed s.

    ``s`` is given as ``(seed_ids, seed_vals)``; repeated ids are summed.  W = A De+ A^T - diag
    is never formed: only the incidence lists of the seed's propositions and entities are read.
    Returns z as ``(ids, values)``: every proposition reached (distinct ids, in the order they
    were first reached), float64 values; all other entries of z are 0.
    """
    # kept lean: on a small index the checks and the call cost more than the walk itself
    ids, vals = _check_seed(seed_ids, seed_vals)
    if type(alpha) is not float or not 0.0 <= alpha <= 1.0:
        alpha = _check_alpha(alpha)
    if backend != "auto" and resolve(backend) == "gpu":
        zp, zi, zv = propagate_batch(graph, [0, len(ids)], ids, vals, alpha, backend="gpu")
        return zi, zv
    M = len(graph.a_indptr) - 1
    ws = _WS.get(PropWorkspace, M, len(graph.at_indptr) - 1)
    n = _kernels().propagate_one(*graph.kernel_args, ids, vals, alpha, ws.wf, ws.wb, ws.wi)
    if n < 0:
        _seed_error(-n, M)
    return ws.out_ids[:n].copy(), ws.out_vals[:n].copy()


def _concat_rows(rows: Any):
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(r[0]) for r in rows])
    if not rows:
        return indptr, np.zeros(0, np.int64), np.zeros(0)
    return indptr, np.concatenate([r[0] for r in rows]), np.concatenate([r[1] for r in rows])


def _checked_seeds(graph: EntityGraph, seed_indptr, seed_ids: ArrayLike, seed_vals: ArrayLike, alpha):
    """A batch of seeds as the batched kernels take it: ``(indptr, ids, vals, alpha)``
    checked (ids inside the graph, finite values, a CSR indptr over them, alpha in [0, 1])."""
    ids, vals = _check_seed(seed_ids, seed_vals)
    indptr = _checked_csr(seed_indptr, ids, vals, graph.n_props, "seed")
    return indptr, ids, vals, _check_alpha(alpha)


def propagate_batch(graph: EntityGraph, seed_indptr: ArrayLike, seed_ids: ArrayLike,
                    seed_vals: ArrayLike, alpha: float = 0.5, *, backend: str = "auto"
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`propagate` for many seeds given as CSR rows; returns z as CSR (indptr, ids, vals)."""
    indptr, ids, vals, alpha = _checked_seeds(graph, seed_indptr, seed_ids, seed_vals, alpha)
    if resolve(backend) == "gpu":
        from . import _gpu
        dg = _device(graph, "graph")
        ns = dg.ns
        out = _gpu.propagate_batch(dg, ns.asarray(indptr), ns.asarray(ids), ns.asarray(vals),
                                   alpha)
        return tuple(ns.to_host(a) for a in out)
    g = graph
    B = len(indptr) - 1
    if B <= config.SMALL_BATCH:
        # a few seeds: the single-seed kernel with its reused per-thread workspace avoids
        # allocating fresh M-sized scratch per call
        rows = [propagate(g, ids[indptr[b]:indptr[b + 1]], vals[indptr[b]:indptr[b + 1]], alpha)
                for b in range(B)]
        return _concat_rows(rows)
    # every row's bound first (its seeds plus its distinct entities' propositions), so each
    # row has its own output slots; then seed ranges side by side on Python threads (the
    # kernel releases the GIL), each with its thread's reused workspace, more ranges than
    # threads to even out heavy seeds; then the rows moved together in place
    kern = _kernels()
    ws0 = _WS.get(PropWorkspace, g.n_props, g.n_entities)
    M = g.n_props
    offs = kern.expansion_bounds(g.a_indptr, g.a_indices, g.at_indptr, indptr, ids,
                                 ws0.wb[M:], ws0.wi[2 * M:])
    out_i, out_v = _out_buffers(int(offs[-1]))
    counts = np.zeros(B, dtype=np.int64)
    n_ranges = max(1, min(B, 4 * _n_threads()))
    bounds = np.linspace(0, B, n_ranges + 1).astype(np.int64)

    def run(r) -> None:
        ws = _WS.get(PropWorkspace, g.n_props, g.n_entities)
        kern.propagate_into(*g.kernel_args, indptr, ids, vals, alpha, bounds[r],
                            bounds[r + 1], offs, out_i, out_v, counts, ws.wf, ws.wb, ws.wi)

    if _on_caller(False):  # busy: the same ranges in turn on the calling thread
        for r in range(n_ranges):
            run(r)
    else:
        list(_pool().map(run, range(n_ranges)))
    m = int(kern.compact_rows(offs, counts, out_i, out_v))
    out_ptr = np.zeros(B + 1, dtype=np.int64)
    np.cumsum(counts, out=out_ptr[1:])
    _keep_buffers(out_i, out_v)
    if 2 * m < len(out_i):  # the bound was loose (rows whose entities share propositions)
        return out_ptr, out_i[:m].copy(), out_v[:m].copy()
    return out_ptr, out_i[:m], out_v[:m]


def rank_topk_batch(graph: EntityGraph, pmap: PassageMap, seed_indptr: ArrayLike,
                    seed_ids: ArrayLike, seed_vals: ArrayLike, alpha: float, k: int, *,
                    backend: str = "auto", split: ArrayLike | None = None) -> tuple[np.ndarray, ...]:
    """:func:`propagate_batch` then :func:`readout_topk_batch` in one pass: each row's z
    stays in its thread's workspace and goes straight to the readout (no z arrays, one
    validation).  Returns (passage ids, scores), both (batch, min(k, n_passages)), bitwise
    what the two calls give.  With ``split`` (one count per row) it also returns each
    ranked passage's score parts, bitwise :func:`score_parts` for that ``split``:
    ``(P, S, FQ, FR)``, on the CPU in the same pass."""
    if pmap.n_props != graph.n_props:
        raise ValueError(f"the passage map covers {pmap.n_props} propositions, the graph "
                         f"{graph.n_props}")
    M = graph.n_props
    ids, vals = _check_seed(seed_ids, seed_vals)
    indptr = _csr_indptr(seed_indptr, ids, M, "seed")
    alpha = _check_alpha(alpha)
    k = min(_check_k(k), pmap.n_passages)
    B = len(indptr) - 1
    if split is not None:
        split = _check_split(split, B)
    # on the calling thread the kernel checks the seeds itself (one call: a question's
    # ranking pays for every microsecond around its kernels); otherwise they are checked
    # here, before any thread or device starts
    here = backend != "gpu" and k > 0 and B > 0 and _on_caller(B <= config.SMALL_BATCH) \
        and resolve(backend) == "cpu"
    if not here:
        _seed_error(_kernels().check_csr(indptr, ids, vals, M), M, "seed", len(ids))
    if resolve(backend) == "gpu":
        zp, zi, zv = propagate_batch(graph, indptr, ids, vals, alpha, backend="gpu")
        P, S = readout_topk_batch(pmap, zp, zi, zv, k, backend="gpu")
        if split is None:
            return P, S
        return (P, S) + score_parts(pmap, indptr, ids, vals, split, alpha, P)
    out_i = np.full((B, k), -1, np.int64)
    if split is None:  # the kernel writes no parts into arrays without columns
        out_v, split, out_q, out_r = np.zeros((B, k)), _NO_SPLIT, _NO_PARTS, _NO_PARTS
    else:  # one allocation for the scores and their two parts
        out_v, out_q, out_r = np.zeros((3, B, k))
    if k > 0 and B > 0:
        kern, g = _kernels(), graph

        def run(b0, b1, check=False) -> int:
            ws = _WS.get(PropWorkspace, g.n_props, g.n_entities)
            rs = _WS.get(ReadWorkspace, pmap.n_passages)
            return kern.rank_rows(*g.kernel_args, pmap.owner, pmap.inv_sqrt, indptr, ids,
                                  vals, alpha, b0, b1, ws.wf, ws.wb, ws.wi, rs.pacc, rs.pmark,
                                  rs.ptouched, out_i, out_v, check, split, out_q, out_r)
        if here:  # a few questions, or a busy machine
            _seed_error(run(0, B, True), M, "seed", len(ids))
        else:  # ranges side by side (the kernel releases the GIL), rows never shared
            bounds = np.linspace(0, B, max(1, min(B, 4 * _n_threads())) + 1).astype(np.int64)
            list(_pool().map(lambda r: run(bounds[r], bounds[r + 1]), range(len(bounds) - 1)))
    return (out_i, out_v) if split is _NO_SPLIT else (out_i, out_v, out_q, out_r)


#: rank_rows' ``split`` and parts when no score parts are asked for
_NO_SPLIT, _NO_PARTS = np.zeros(0, np.int64), np.zeros((0, 0))


def _check_split(split: ArrayLike, B: int) -> np.ndarray:
    """``split`` as int64, one entry per row of a batch of ``B``."""
    split = _as1d(split, _I64)
    if len(split) != B:
        raise ValueError(f"split needs one entry per row: {len(split)} for {B}")
    return split


def score_parts(pmap: PassageMap, seed_indptr: ArrayLike, seed_ids: ArrayLike,
                seed_vals: ArrayLike, split: ArrayLike, alpha: float, P: ArrayLike
                ) -> tuple[np.ndarray, np.ndarray]:
    """Where each ranked passage's score came from: for the passages ``P`` (batch, k) of
    :func:`rank_topk_batch` over CSR seeds whose row b starts with ``split[b]`` entries of
    the question's part (the rest: the residual queries'), the two parts alpha * s reads
    out per passage, each (batch, k) float64: ``inv_sqrt[j]`` times the sum, in seed order,
    of ``alpha * v`` over the part's entries in passage j (0 where ``P`` holds -1).  One
    call for a batch; bitwise :func:`~evireform.kernels.reference.score_parts`.  CPU."""
    ids, vals = _check_seed(seed_ids, seed_vals)
    M = pmap.n_props
    indptr = _csr_indptr(seed_indptr, ids, M, "seed")
    P = np.asarray(P)
    if P.ndim != 2 or P.dtype.kind not in "iu" or len(indptr) != len(P) + 1:
        raise ValueError(f"P must be a (batch, k) integer array with one row per seed row; "
                         f"got shape {P.shape} for {len(indptr) - 1} rows")
    split = _check_split(split, len(P))
    out_q = np.empty(P.shape)
    out_r = np.empty(P.shape)
    twin = (_score_parts_numpy if _numba_free(len(ids), config.PARTS_NUMPY_ENTRIES)
            else _kernels().score_parts)
    code = twin(pmap.owner, pmap.inv_sqrt, indptr, ids, vals, split, _check_alpha(alpha),
                P.astype(np.int64, copy=False), out_q, out_r)
    if code == 4:
        raise ValueError(f"P's passages must lie in [0, {pmap.n_passages}) (-1: none)")
    _seed_error(code, M, "seed", len(ids))
    return out_q, out_r


def _check_csr_numpy(indptr, ids, vals, M) -> int:
    """The kernels' ``check_csr`` with numpy: 1 for the first bad id, 2 for the first
    value that is not finite (whichever comes first; an id before a value), 3 for indptr."""
    bad_id = np.flatnonzero((ids < 0) | (ids >= M))
    bad_val = np.flatnonzero(~np.isfinite(vals))
    if len(bad_id) or len(bad_val):
        return 1 if len(bad_id) and (not len(bad_val) or bad_id[0] <= bad_val[0]) else 2
    if len(indptr) < 1 or indptr[0] != 0 or indptr[-1] != len(ids) \
            or np.any(indptr[1:] < indptr[:-1]):
        return 3
    return 0


def _score_parts_numpy(owner, inv_sqrt, indptr, ids, vals, split, alpha, P, out_q,
                       out_r) -> int:
    """The kernels' ``score_parts`` with numpy, bitwise: each part's float64 sum of
    ``alpha * v`` per passage in seed order from 0.0 (``np.add.at`` adds its entries in
    order, unbuffered), times ``inv_sqrt``."""
    code = _check_csr_numpy(indptr, ids, vals, len(owner))
    if code:
        return code
    if P.size and (P.max() >= len(inv_sqrt) or P.min() < -1):
        return 4
    for b in range(P.shape[0]):
        lo, hi = int(indptr[b]), int(indptr[b + 1])
        mid = lo + min(max(int(split[b]), 0), hi - lo)
        row, have = P[b], P[b] >= 0
        w = (np.asarray(inv_sqrt)[np.maximum(row, 0)].astype(np.float64) if len(inv_sqrt)
             else np.zeros(len(row)))
        for a, z, out in ((lo, mid, out_q[b]), (mid, hi, out_r[b])):
            u, inv = np.unique(np.asarray(owner)[ids[a:z]].astype(np.int64),
                               return_inverse=True)
            sums = np.zeros(len(u))
            np.add.at(sums, inv, alpha * vals[a:z].astype(np.float64))
            at = np.minimum(np.searchsorted(u, row), max(len(u) - 1, 0))
            found = have & (u[at] == row) if len(u) else np.zeros(len(row), bool)
            out[:] = np.where(found, sums[at] if len(u) else 0.0, 0.0) * w
            out[~have] = 0.0
    return 0


# --------------------------------------------------------------------------- readout
def _check_z(pmap: PassageMap, z_ids, z_vals):
    ids = _as1d(z_ids, _I64)
    vals = _as1d(z_vals, _F64, _F32)
    if ids.shape != vals.shape:
        raise ValueError(f"z ids and values differ in length: {len(ids)} vs {len(vals)}")
    return ids, vals


def readout_topk(pmap: PassageMap, z_ids: ArrayLike, z_vals: ArrayLike, k: int, *,
                 backend: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """Passage scores sum_{i in P_j} z_i / sqrt(|P_j|) from a sparse z, then the top ``k``.

    Returns ``(passage_ids, scores)`` with ``min(k, n_passages)`` entries: positive scores best
    first (ties by stored passage order), then zero-score passages in stored order.
    For a dense z pass ``np.arange(len(z)), z``.
    """
    ids, vals = _check_z(pmap, z_ids, z_vals)
    k = min(_check_k(k), pmap.n_passages)
    if resolve(backend) == "gpu":
        P, S = readout_topk_batch(pmap, [0, len(ids)], ids, vals, k, backend="gpu")
        return P[0], S[0]
    if k == 0:
        _seed_error(_kernels().check_seed(ids, vals, pmap.n_props), pmap.n_props, "z")
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    ws = _WS.get(ReadWorkspace, pmap.n_passages)
    pids, scores = np.empty(k, np.int64), np.empty(k, np.float64)
    n = _kernels().readout_one(pmap.owner, pmap.inv_sqrt, ids, vals, ws.pacc, ws.pmark,
                               ws.ptouched, pids, scores)
    if n < 0:
        _seed_error(-n, pmap.n_props, "z")
    return pids[:n], scores[:n]


def readout_topk_batch(pmap: PassageMap, z_indptr: ArrayLike, z_ids: ArrayLike,
                       z_vals: ArrayLike, k: int, *, backend: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """Batched :func:`readout_topk` over z given as CSR rows; returns (batch, k') arrays."""
    ids, vals = _check_z(pmap, z_ids, z_vals)
    indptr = _checked_csr(z_indptr, ids, vals, pmap.n_props, "z")
    k = min(_check_k(k), pmap.n_passages)
    if resolve(backend) == "gpu":
        from . import _gpu
        dp = _device(pmap, "pmap")
        ns = dp.ns
        P, S = _gpu.readout_topk_batch(dp, ns.asarray(indptr), ns.asarray(ids),
                                       ns.asarray(vals), k)
        return ns.to_host(P), ns.to_host(S)
    B = len(indptr) - 1
    if k == 0 or B == 0:
        return np.full((B, k), -1, np.int64), np.zeros((B, k))
    if B <= config.SMALL_BATCH:
        rows = [readout_topk(pmap, ids[indptr[b]:indptr[b + 1]], vals[indptr[b]:indptr[b + 1]], k)
                for b in range(B)]
        return np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows])
    n_chunks = max(1, min(B, _n_threads()))
    kern = _kernels()
    read = (kern.readout_many_serial if _on_caller(len(ids) <= config.SERIAL_READOUT_ENTRIES)
            else kern.readout_many)  # a few rows on the calling thread (bitwise the same)
    return read(pmap.owner, pmap.inv_sqrt, indptr, ids, vals, k, n_chunks)


def mentions_outside(indptr: ArrayLike, indices: ArrayLike, owner: ArrayLike, rows: Any,
                     excluded: Any = (), allowed: ArrayLike | None = None, *,
                     limit: int) -> tuple[np.ndarray, np.ndarray]:
    """For each row r of ``rows``, the first ``limit`` entries i of the CSR row
    ``indices[indptr[r]:indptr[r + 1]]`` (stored order) whose ``owner[i]`` is not in
    ``excluded`` and, when ``allowed`` (a boolean mask over owners) is given, is allowed.
    Returns (the kept entries of all rows, concatenated; their count per row), both int64.

    With A^T's CSR, the propositions' owners and an entity list, it is the graph
    reformulator's look one step ahead: an entity's mentions outside the passages a question
    has already observed (and inside a filter's passages).  ``excluded`` is meant to be short
    (it is scanned per entry); an owner past the end of ``allowed`` counts as not allowed.
    CPU only; :func:`~evireform.kernels.reference.mentions_outside` is its reference."""
    limit = _check_k(limit, "limit")
    indptr = np.asarray(indptr)
    rows = _as1d(rows, np.int64)
    n_rows = len(indptr) - 1
    if len(rows) and (rows.min() < 0 or rows.max() >= n_rows):
        raise ValueError(f"rows must lie in [0, {n_rows}); got {rows.min()}..{rows.max()}")
    excluded = _as1d(excluded, np.int64)
    owner = np.asarray(owner)
    if allowed is None:
        allowed = np.zeros(0, np.bool_)  # the kernel reads an empty mask as "no mask"
    else:  # an owner past the mask's end is not allowed (the kernel checks: no O(M) scan)
        allowed = _as1d(allowed, np.bool_)
        if len(allowed) == 0:  # a mask of nothing allows nothing
            return np.zeros(0, np.int64), np.zeros(len(rows), np.int64)
    if _numba_free(len(rows), config.MENTIONS_NUMPY_ROWS):
        got, counts, code = _mentions_outside_numpy(indptr, np.asarray(indices), owner, rows,
                                                    excluded, allowed, limit)
    else:
        got, counts, code = _kernels().mentions_outside(indptr, np.asarray(indices), owner,
                                                        rows, excluded, allowed, limit)
    if code == 1:
        raise ValueError(f"indptr's rows must lie within indices (0 to {len(indices)}) and "
                         "not decrease")
    if code == 2:
        raise ValueError(f"indices must lie in [0, {len(owner)}) (owner's length) and their "
                         "owners be >= 0")
    return got, counts


def _mentions_outside_numpy(indptr, indices, owner, rows, excluded, allowed, limit):
    """The kernel's :func:`mentions_outside` with numpy, a row at a time (the same checks and
    codes, the same entries)."""
    n_ind, n_own = len(indices), len(owner)
    check = len(allowed) > 0
    got, counts = [], np.zeros(len(rows), np.int64)
    for t, r in enumerate(rows.tolist()):
        lo, hi = int(indptr[r]), int(indptr[r + 1])
        if lo < 0 or hi < lo or hi > n_ind:
            return np.zeros(0, np.int64), counts, 1
        seg = np.asarray(indices[lo:hi], np.int64)
        valid = (seg >= 0) & (seg < n_own)
        o = np.full(len(seg), -1, np.int64)
        o[valid] = owner[seg[valid]]
        valid &= o >= 0
        ok = valid & ~np.isin(o, excluded)
        if check:
            ok &= o < len(allowed)
            ok[ok] = allowed[o[ok]]
        # the kernel reads a row's entries until it has kept `limit`: a bad entry counts
        # only when fewer were kept before it
        before = np.cumsum(ok) - ok
        if np.any(~valid & (before < limit)):
            return np.zeros(0, np.int64), counts, 2
        kept = seg[ok][:limit]
        got.append(kept)
        counts[t] = len(kept)
    return (np.concatenate(got) if got else np.zeros(0, np.int64)), counts, 0


def _numba_free(size: int, most: int) -> bool:
    """True when a call of ``size`` (at most ``most``) comes in a process that has not
    loaded the numba kernels: a small call then runs its numpy twin (the same results), so
    that a one-shot command on a small index (an update, a question) does not pay numba's
    start, about a second, for microseconds of work."""
    return size <= most and _CPU_MODULE not in sys.modules


def w_nnz(graph: EntityGraph) -> int:
    """Nonzeros W = A De+ A^T - diag would have if it were materialised (it never is)."""
    if graph.n_props == 0:
        return 0
    g = graph
    n_chunks = max(1, min(g.n_props, 2 * _n_threads()))
    return int(_kernels().w_row_nnz(g.a_indptr, g.a_indices, g.at_indptr, g.at_indices,
                                n_chunks).sum())


# --------------------------------------------------------------------------- lexical (BM25)
def _check_terms(q_indptr: ArrayLike, q_terms: ArrayLike, q_weights: ArrayLike | None,
                 matrix: Any):
    """The queries' (indptr, terms, weights) checked against ``matrix`` in one kernel call
    (:func:`~evireform.kernels._cpu.check_terms`: numpy's checks cost a single query more
    than its scoring), and the number of postings they read."""
    terms = _as1d(q_terms, _I64)
    weights = np.ones(len(terms)) if q_weights is None else _as1d(q_weights, _F64)
    if len(weights) != len(terms):
        raise ValueError(f"q_weights has {len(weights)} entries, q_terms {len(terms)}")
    indptr = _csr_indptr(q_indptr, terms, matrix.n_terms, "query terms")
    n_terms = int(matrix.n_terms)
    postings = _kernels().check_terms(indptr, terms, weights, n_terms, matrix.indptr)
    if postings == -3:
        _seed_error(3, n_terms, "query terms", len(terms))
    if postings == -1:
        raise ValueError(f"query term ids must lie in [0, {n_terms}); got "
                         f"[{terms.min()}, {terms.max()}]")
    if postings == -2:
        raise ValueError("query term weights must be positive and finite")
    return indptr, terms, weights, int(postings)


def lexical_topk_batch(matrix: Any, q_indptr: ArrayLike, q_terms: ArrayLike,
                       q_weights: ArrayLike | None, k: int, *, backend: str = "auto"
                       ) -> tuple[np.ndarray, np.ndarray]:
    """BM25 top-``k`` documents of a batch of queries over eager weights.

    ``matrix``: a :class:`~evireform.kernels.lexical.LexicalMatrix` (terms x documents);
    the queries are CSR rows (``q_indptr``, ``q_terms``: term ids, ``q_weights``: positive
    weights, None for 1 each).  A document's score is ``sum_t weight_t * matrix[t, doc]``,
    added in the query's term order in float64.  Returns (ids int64, scores float64) of
    shape (batch, min(k, n_docs)): positive scores best first, ties by lower id, padded with
    -1 / 0.  The numpy/scipy reference is :func:`evireform.kernels.reference.bm25_topk_batch`."""
    indptr, terms, weights, postings = _check_terms(q_indptr, q_terms, q_weights, matrix)
    k = min(_check_k(k), int(matrix.n_docs))
    B = len(indptr) - 1
    if resolve(backend) == "gpu":
        from . import _gpu
        ns = _gpu.gpu_namespace()
        dm = _device(matrix, "lexical")
        P, S = _gpu.bm25_topk_batch(ns, *dm, matrix.n_docs, ns.asarray(indptr),
                                    ns.asarray(terms), ns.asarray(weights), k)
        return ns.to_host(P), ns.to_host(S)
    out_i = np.full((B, k), -1, np.int64)
    out_v = np.zeros((B, k), np.float64)
    if B == 0 or k == 0:
        return out_i, out_v
    kern = _kernels()
    args = (matrix.indptr, matrix.docs, matrix.weights, int(matrix.n_docs), indptr, terms,
            weights, k)
    if B <= config.SMALL_BATCH or \
            _on_caller(postings <= config.SERIAL_LEXICAL_POSTINGS):  # bitwise the same
        kern.bm25_topk_serial(*args, out_i, out_v)
    else:
        kern.bm25_topk_batch(*args, max(1, min(B, _n_threads())), out_i, out_v)
    return out_i, out_v


# --------------------------------------------------------------------------- vocabulary
_CPU_MODULE = __name__ + "._cpu"


def vocab_lookup(vocab: SortedTerms, queries: Any) -> tuple[np.ndarray, np.ndarray]:
    """Each query string's place in a :class:`~evireform.kernels.lexical.SortedTerms`, by
    binary search over its bytes: (positions, ids), int64 arrays of ``len(queries)``:
    the number of terms before the query in byte order, and its term id or -1 when it is
    not a term.  Costs O(log n) comparisons a query, nothing per term of the vocabulary.
    The reference is :func:`evireform.kernels.reference.vocab_search`."""
    if not isinstance(vocab, SortedTerms):
        raise TypeError(f"vocab must be a SortedTerms; got {type(vocab).__name__}")
    enc = [q.encode("utf-8") if isinstance(q, str) else bytes(q) for q in queries]
    n = len(enc)
    pos, ids = np.zeros(n, np.int64), np.full(n, -1, np.int64)
    if n and len(vocab) and _numba_free(n, config.VOCAB_LOOKUP_PYTHON):
        # a few terms in a process that has not loaded numba (an update of one file): the
        # same binary search in Python costs microseconds a term, loading numba a second
        blob, off, order = vocab.blob, vocab.offsets, vocab.order
        for j, q in enumerate(enc):
            lo, hi = 0, len(order)
            while lo < hi:
                mid = (lo + hi) >> 1
                t = int(order[mid])
                if bytes(blob[off[t]:off[t + 1]]) < q:
                    lo = mid + 1
                else:
                    hi = mid
            pos[j] = lo
            if lo < len(order):
                t = int(order[lo])
                if bytes(blob[off[t]:off[t + 1]]) == q:
                    ids[j] = t
        return pos, ids
    if n and len(vocab):
        q_off = np.zeros(n + 1, np.int64)
        np.cumsum(np.fromiter(map(len, enc), np.int64, n), out=q_off[1:])
        _kernels().vocab_search(vocab.blob, vocab.offsets, vocab.order,
                                np.frombuffer(b"".join(enc), np.uint8), q_off, pos, ids)
    return pos, ids


def vocab_unsorted(vocab: SortedTerms) -> int:
    """The first position of ``vocab.order`` whose term does not come strictly after the
    one before it (a repeated or misplaced term), or -1 when the order is right."""
    if not isinstance(vocab, SortedTerms):
        raise TypeError(f"vocab must be a SortedTerms; got {type(vocab).__name__}")
    if len(vocab) < 2:
        return -1
    if len(vocab) >= config.VOCAB_CHECK_KERNEL:
        return int(_kernels().first_unsorted(vocab.blob, vocab.offsets, vocab.order))
    # a small vocabulary's check in Python: loading numba costs a command that needs no
    # other kernel (an update) more than the comparisons
    blob, off = bytes(vocab.blob), vocab.offsets.tolist()
    prev = None
    for i, t in enumerate(vocab.order.tolist()):
        cur = blob[off[t]:off[t + 1]]
        if prev is not None and cur <= prev:
            return i
        prev = cur
    return -1
