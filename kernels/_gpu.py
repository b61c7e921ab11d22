"""The GPU kernels, written once against an array namespace.

Every function here takes a :class:`Namespace`: (cupy, cupyx.scipy.sparse) on a device, or
(numpy, scipy.sparse) on the CPU, where CI runs the very same code against the references.
Importing this module imports neither CuPy nor CUDA.

What is a library call and what is custom:

* exact cosine top-k: GEMM (cuBLAS through ``xp.matmul``) over row blocks sized by a memory
  budget; each block's scores go to the custom select kernel (``select.cu``, :mod:`._select`:
  one thread block per query row and slice, a shared-memory radix select over 64-bit keys of
  score bits and inverted id, so ties keep the lower id; k fixed slots a slice), the held
  candidate keys reduced by the same kernel and only the final k a query sorted (a bitonic
  network, ``sort_rows_desc``).  No host
  synchronisation in a float32 search.  float32, or float16 storage with float32
  accumulation (:func:`cosine_topk_batch` ``half=True``), or the fp16 scan whose float16
  tiles are selected as they are.  The array-namespace radix select (:func:`kth_key`,
  :func:`topk_rows`) is the reference, and the path above k = 1,024.
* batched propagation z = alpha s + (1 - alpha) (A De+ (A^T (Dw+ s)) - diag * Dw+ s): each
  seed expanded to its entities, then to their propositions (:func:`expand`: elementwise work
  and a searchsorted), the entries summed per (query, proposition) by a stable sort and the
  segment kernel (:func:`sum_by_key`); W is never formed and no sparse format is converted.
* readout: z's entries sorted by (query, passage), each run summed in z's order by the
  custom CUDA kernel ``segment.cu`` (one thread a run, no atomics: deterministic, and
  bitwise the CPU kernel's sums; ``add.reduceat`` on the CPU), then the top k per query from
  those entries (:func:`topk_from_entries`): nothing of size queries x passages is formed.
* fused propagation + readout: with C = R A (passages x entities, R = diag(1/sqrt|P_j|) B^T)
  precomputed (held as C^T), passage scores are alpha R s + (1 - alpha) (C De+ (A^T x) -
  R (diag * x)), x = Dw+ s: the second expansion goes through C^T straight to passages, so
  the (propositions x queries) z is never formed.

Conventions are the CPU kernels': positive cosine scores only, ties by lower id, passages
tie by stored order and passages without propositions score 0.
"""
from __future__ import annotations

from typing import Any
from typing import TYPE_CHECKING

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import _select
from ._backend import BackendUnavailable, gpu_missing_reason

if TYPE_CHECKING:  # annotations only
    from numpy.typing import ArrayLike

#: bytes of score block one search or readout step may allocate (queries x rows)
DEFAULT_BUDGET = 1 << 30
#: tiles' candidate lists (k each) held before they are reduced to k by one selection
MERGE_WIDTH = 16

#: the custom CUDA C sources shipped with the package (compiled by NVRTC in CI)
CU_SOURCES = sorted(Path(__file__).parent.glob("*.cu"))


@dataclass(frozen=True)
class Namespace:
    """An array module and its sparse module: numpy + scipy.sparse, or cupy + cupyx."""

    name: str
    xp: object
    sparse: object

    @property
    def on_device(self) -> bool:
        return self.name == "cupy"

    def asarray(self, a, dtype=None):
        return self.xp.asarray(a, dtype=dtype)

    def to_host(self, a) -> np.ndarray:
        return a.get() if self.on_device else np.asarray(a)

    def synchronize(self) -> None:
        if self.on_device:
            self.xp.cuda.Device().synchronize()


def cpu_namespace() -> Namespace:
    import scipy.sparse
    return Namespace("numpy", np, scipy.sparse)


def gpu_namespace() -> Namespace:
    """(cupy, cupyx.scipy.sparse), or :class:`BackendUnavailable` saying what is missing."""
    why = gpu_missing_reason()
    if why is not None:
        raise BackendUnavailable(f"backend='gpu' was requested but {why}")
    import cupy
    import cupyx.scipy.sparse
    return Namespace("cupy", cupy, cupyx.scipy.sparse)


def namespace(name: str) -> Namespace:
    if name == "numpy":
        return cpu_namespace()
    if name == "cupy":
        return gpu_namespace()
    raise ValueError(f"namespace must be 'numpy' or 'cupy'; got {name!r}")


# --------------------------------------------------------------------------- top-k rule
def order_keys(xp, S):
    """Order-preserving unsigned keys of float32 (uint32) or float64 (uint64) values: a
    larger value has a larger key; -0.0 and +0.0 get different keys (callers never rank
    zeros against each other)."""
    if S.dtype == xp.float32:
        u, top = S.view(xp.uint32), xp.uint32(0x80000000)
    else:
        S = S.astype(xp.float64, copy=False)
        u, top = S.view(xp.uint64), xp.uint64(0x8000000000000000)
    return xp.where(u & top, ~u, u | top)


def kth_key(ns: Namespace, keys, k: int):
    """Per row of ``keys`` (B, n unsigned, k <= n): the k-th largest key and how many entries
    equal to it belong to the top k, ``(t (B,), need (B,))``.  A radix select (8 bits per
    pass, most significant first): each pass is one histogram of the still-tied entries'
    next digit, so the cost is O(B n) a pass and nothing is sorted."""
    xp = ns.xp
    B, n = keys.shape
    bits = keys.dtype.itemsize * 8
    one = keys.dtype.type(1)
    rows = xp.arange(B, dtype=xp.int64)[:, None] * 256
    prefix = xp.zeros(B, dtype=keys.dtype)
    need = xp.full(B, int(k), dtype=xp.int64)
    for shift in range(bits - 8, -8, -8):
        digit = ((keys >> keys.dtype.type(shift)) & keys.dtype.type(0xFF)).astype(xp.int64)
        if shift == bits - 8:
            live = xp.ones((B, n), dtype=bool)
        else:
            hi_mask = ~((one << keys.dtype.type(shift + 8)) - one)
            live = (keys & hi_mask) == (prefix & hi_mask)[:, None]
        # weights instead of a mask index: no data-dependent size, so no host sync
        hist = xp.bincount((rows + digit).ravel(), weights=live.ravel(),
                           minlength=B * 256).reshape(B, 256).astype(xp.int64)
        ge = xp.cumsum(hist[:, ::-1], axis=1)[:, ::-1]  # ge[:, d] = live entries with digit >= d
        d = (ge >= need[:, None]).sum(axis=1) - 1        # the largest digit reaching the rank
        above = xp.where(d < 255, xp.take_along_axis(
            ge, xp.minimum(d + 1, 255)[:, None], axis=1)[:, 0], 0)
        need = need - above
        prefix = prefix | (d.astype(keys.dtype) << keys.dtype.type(shift))
    return prefix, need


def topk_rows(ns: Namespace, S, k: int):
    """Per row of ``S`` (B, n): the ``min(k, n)`` columns with the largest values, ordered by
    descending value, ties by lower column.  Returns (cols int64, vals), both (B, kk).

    Selection without sorting the row: :func:`kth_key` finds the k-th largest value t by a
    radix select; every entry > t is taken and, of the entries == t, the lowest columns fill
    the remaining places (the exact tie rule); the kk chosen entries are written to their
    slots by a scatter (no data-dependent sizes, so no host synchronisation) and only they are
    sorted."""
    xp = ns.xp
    B, n = S.shape
    kk = min(int(k), n)
    if kk == 0 or B == 0:
        return xp.zeros((B, kk), dtype=xp.int64), xp.zeros((B, kk), dtype=S.dtype)
    if kk == n:
        cols = xp.broadcast_to(xp.arange(n, dtype=xp.int64), (B, n))
    else:
        keys = order_keys(xp, S)
        t, need = kth_key(ns, keys, kk)
        gt = keys > t[:, None]
        eq = keys == t[:, None]
        sel = gt | (eq & (xp.cumsum(eq, axis=1) <= need[:, None]))
        slot = xp.cumsum(sel, axis=1) - 1                  # kk selected per row, in column order
        slot = xp.where(sel, slot, kk)                     # the rest go to a dump column
        out = xp.zeros((B, kk + 1), dtype=xp.int64)
        out[xp.arange(B)[:, None], slot] = xp.arange(n, dtype=xp.int64)[None, :]
        cols = out[:, :kk]
    vals = xp.take_along_axis(S, cols, axis=1)
    order = xp.argsort(-vals, axis=1, kind="stable")  # cols ascending: ties keep lower col
    return xp.take_along_axis(cols, order, axis=1), xp.take_along_axis(vals, order, axis=1)


def _merge(ns: Namespace, ids: Any, vals: ArrayLike, k: int):
    """Best ``k`` per row of candidate lists laid side by side (B, m) by (-value, id), where
    equal values appear in increasing id order from left to right (lists from tiles of
    increasing ids, each best first with ties by lower id): a select, then a sort of k."""
    cols, best = topk_rows(ns, vals, k)
    return ns.xp.take_along_axis(ids, cols, axis=1), best


# --------------------------------------------------------------------------- cosine top-k
def block_rows(n_queries: int, k: int, budget: int, itemsize: int = 4) -> int:
    """Embedding rows per GEMM block so that the (queries x rows) score block and its top-k
    scratch (about 3 x the block: scores, masks, cumsum) stay within ``budget`` bytes."""
    per_row = max(1, n_queries) * (itemsize + 1 + 8 + 1)
    return max(int(k), int(budget // per_row), 1)


def _no_hits(xp, B: int, kk: int):
    """A search's result with nothing found: ids -1, scores 0, (B, kk)."""
    return xp.full((B, kk), -1, dtype=xp.int64), xp.zeros((B, kk), dtype=xp.float32)


def _scan_candidates(ns: Namespace, H: ArrayLike, kk: int, rows: int, L: int, *, gemm,
                     positive_only: bool, rng: np.random.Generator | None=None):
    """The tiles' candidate keys of a scan, reduced to the final ``kk`` a query (no defined
    order): each tile's GEMM scores go to the select kernel as they are (float32, or the
    float16 of the fp16 GEMM), whose slices give ``kk`` keys each; the held keys are reduced by the
    same block select whenever they pass :data:`MERGE_WIDTH` x ``kk``."""
    xp = ns.xp
    n = H.shape[0]
    held, width = [], 0
    for lo in range(0, n, rows):
        S = gemm(H[lo:lo + rows])
        c = _select.select_scores(ns, S, lo, kk, L, positive_only=positive_only, rng=rng)
        held.append(c)
        width += c.shape[1]
        if width > MERGE_WIDTH * kk:  # bound the candidates held
            keys = _select.reduce_keys(ns, xp.concatenate(held, axis=1), kk, L,
                                       limit=MERGE_WIDTH * kk // 2, rng=rng)
            held, width = [keys], keys.shape[1]
    keys = held[0] if len(held) == 1 else xp.concatenate(held, axis=1)
    return _select.reduce_keys(ns, keys, kk, L, rng=rng)


def cosine_topk_batch(ns: Namespace, H: ArrayLike, Q: ArrayLike, k: int, *, budget: int = DEFAULT_BUDGET,
                      half: bool = False, rng: np.random.Generator | None=None):
    """Exact top-``k`` rows of ``H`` (n, d) for each query of ``Q`` (B, d), positive scores only.

    Returns (ids int64, scores float32) of shape (B, min(k, n)) on the namespace's device,
    padded with id -1 / score 0.  ``H`` may be float16 (``half=True`` storage): each block is
    widened to float32 before its GEMM, so accumulation stays float32.

    Each tile's scores go straight from the GEMM to the select kernel (select.cu; emulated
    block by block on the CPU, :mod:`._select`): no host synchronisation, no sort but the
    final k a query.  Above k = 1,024 (a slice would not fit in shared memory) the
    array-namespace radix select :func:`topk_rows` is used.  ``rng``: shuffle the emulated
    kernels' slot order (tests)."""
    xp = ns.xp
    n = H.shape[0]
    B = Q.shape[0]
    kk = min(int(k), n)
    if kk == 0 or B == 0:
        return _no_hits(xp, B, kk)
    Q = Q.astype(xp.float32)
    rows = block_rows(B, kk, budget)
    L = _select.slice_length(kk)

    def gemm(Hb):
        if half or Hb.dtype != xp.float32:
            Hb = Hb.astype(xp.float32)
        return Q @ Hb.T
    if L is None:
        return _cosine_topk_reference(ns, H, Q, kk, rows, gemm)
    keys = _scan_candidates(ns, H, kk, rows, L, gemm=gemm, positive_only=True, rng=rng)
    return _select.decode_keys(xp, _select.sort_keys(ns, keys))


def _cosine_topk_reference(ns: Namespace, H: ArrayLike, Q: ArrayLike, kk: int, rows: int, gemm, *,
                           positive_only: bool = True):
    """The array-namespace scan: each tile's top-k by :func:`topk_rows` (radix select in
    namespace calls), the held lists merged by the same selection (k > 1,024, and the
    reference the select kernel is tested against).  ``positive_only=False``: every score
    is a candidate (NaN excepted)."""
    xp = ns.xp
    n = H.shape[0]
    neg = xp.float32(-np.inf)
    cand_i, cand_v, width = [], [], 0
    for lo in range(0, n, rows):
        S = gemm(H[lo:lo + rows])
        S = xp.where((S > 0) if positive_only else ~xp.isnan(S), S, neg)
        ci, cv = topk_rows(ns, S, kk)
        cand_i.append(ci + lo)
        cand_v.append(cv)
        width += ci.shape[1]
        if width >= MERGE_WIDTH * kk and len(cand_i) > 1:  # bound the candidates held
            mi, mv = _merge(ns, xp.concatenate(cand_i, axis=1),
                            xp.concatenate(cand_v, axis=1), kk)
            cand_i, cand_v, width = [mi], [mv], kk
    if len(cand_i) > 1:  # one selection over every tile's candidates
        best_i, best_v = _merge(ns, xp.concatenate(cand_i, axis=1),
                                xp.concatenate(cand_v, axis=1), kk)
    else:
        best_i, best_v = cand_i[0], cand_v[0]
    keep = (best_v > 0) if positive_only else (best_v > neg)
    return xp.where(keep, best_i, -1), xp.where(keep, best_v, xp.float32(0))


def cosine_topk_reference(ns: Namespace, H: ArrayLike, Q: ArrayLike, k: int, *, budget: int = DEFAULT_BUDGET):
    """:func:`cosine_topk_batch` through the array-namespace selection only (the reference
    of the select kernel)."""
    xp = ns.xp
    n, B = H.shape[0], Q.shape[0]
    kk = min(int(k), n)
    if kk == 0 or B == 0:
        return _no_hits(xp, B, kk)
    Q = Q.astype(xp.float32)
    return _cosine_topk_reference(ns, H, Q, kk, block_rows(B, kk, budget),
                                  lambda Hb: Q @ Hb.astype(xp.float32).T)


#: precisions of the scan: exact float32, or a float16 GEMM (tensor cores, float32
#: accumulation) whose candidates are re-ranked exactly in float32
PRECISIONS = ("float32", "fp16")


def fp16_error_bound(xp, Q: ArrayLike):
    """Per query, the largest |q . h - fp16 GEMM score| for unit rows h: rounding q and h to
    float16 (2 x 2^-11 of sum |q_d h_d| <= ||q||), float32 accumulation over d terms, and the
    float16 output (2^-11 of |score| <= ||q||), with 25% to spare."""
    d = Q.shape[1]
    norm = xp.sqrt((Q.astype(xp.float64) ** 2).sum(axis=1))
    return 1.25 * norm * (2.0 ** -10 + 2.0 ** -11 + d * 2.0 ** -23) + 1e-7


def _gemm16(ns: Namespace, Q16, H16):
    """Q16 @ H16.T as float16 with float32 accumulation: on a device cuBLAS's COMPUTE_32F
    (tensor cores) set for this call; on the CPU the same arithmetic in float32."""
    xp = ns.xp
    if not ns.on_device:
        return (Q16.astype(xp.float32) @ H16.astype(xp.float32).T).astype(xp.float16)
    from cupy._core import _routines_linalg as L
    before = L.get_compute_type(xp.float16)
    L.set_compute_type(xp.float16, L.COMPUTE_TYPE_FP32)
    try:
        return Q16 @ H16.T
    finally:
        L.set_compute_type(xp.float16, before)


def cosine_topk_batch_fp16(ns: Namespace, H16, H: ArrayLike, Q: ArrayLike, k: int, *, budget: int = DEFAULT_BUDGET,
                           margin: int = 64, rng: np.random.Generator | None=None):
    """Exact top-``k`` (as :func:`cosine_topk_batch`, float32 scores of ``H``) found by
    scanning ``H16`` (float16 copy of ``H``; half the bytes, tensor-core GEMM) and
    re-ranking candidates with ``H``: the ``k + margin`` best float16 scores of each query are
    kept (the float16 tiles go to the select kernel without widening); every row within
    twice :func:`fp16_error_bound` of the k-th float16 score is among them, or the scan is
    repeated with four times the margin, so the re-ranked top k is the exact one (ties by
    lower id).  That check is the one host synchronisation of a call.  Returns (ids, scores)
    on the namespace's device."""
    xp = ns.xp
    n, B = H.shape[0], Q.shape[0]
    kk = min(int(k), n)
    if kk == 0 or B == 0:
        return _no_hits(xp, B, kk)
    Q = Q.astype(xp.float32)
    Q16 = Q.astype(xp.float16)
    eps = fp16_error_bound(xp, Q)
    kc = min(n, kk + int(margin))
    while True:
        rows = block_rows(B, kc, budget, itemsize=2)
        L = _select.slice_length(kc)
        if L is None:  # too many candidates for a selection block: the reference selection
            ci, cv = _cosine_topk_reference(
                ns, H16, Q16, kc, rows, lambda Hb: _gemm16(ns, Q16, Hb).astype(xp.float32),
                positive_only=False)
            cv = xp.where(ci >= 0, cv, xp.float32(-np.inf))
        else:
            keys = _scan_candidates(ns, H16, kc, rows, L,
                                    gemm=lambda Hb: _gemm16(ns, Q16, Hb),
                                    positive_only=False, rng=rng)
            ci, cv = _select.decode_keys(xp, _select.sort_keys(ns, keys), half=True)
            cv = xp.where(ci >= 0, cv, xp.float32(-np.inf))
        floor = cv[:, kk - 1] - 2.0 * eps          # every true top-k row scores above it
        if kc == n or bool(xp.all(cv[:, kc - 1] < floor)):  # the one check of a call
            break
        kc = min(n, 4 * kc)
    # exact float32 re-rank of the candidates: keys of (exact score, id), the k best sorted
    exact = xp.einsum("bcd,bd->bc", H[xp.maximum(ci, 0)].astype(xp.float32), Q)
    ok = (ci >= 0) & (cv >= floor[:, None]) & (exact > 0)
    keys = _select.sort_keys(ns, _select.value_keys(xp, exact, ci, ok))[:, :kk]
    return _select.decode_keys(xp, keys)


def full_scores_topk(ns: Namespace, H: ArrayLike, Q: ArrayLike, k: int):
    """The naive peer: the whole (B, n) score matrix, then a full stable argsort per row."""
    xp = ns.xp
    S = Q.astype(xp.float32) @ H.T
    o = xp.argsort(-S, axis=1, kind="stable")[:, :k]
    return o, xp.take_along_axis(S, o, axis=1)


# --------------------------------------------------------------------------- device arrays
@dataclass
class DeviceGraph:
    """The incidence A (M x Ne) and A^T as sparse matrices, with the degree terms, resident
    in the namespace (index dtype int32: cuSPARSE's)."""

    ns: Namespace
    A: object
    AT: object
    inv_deg: object
    diag: object
    inv_w: object

    @property
    def n_props(self) -> int:
        return int(self.A.shape[0])

    @property
    def n_entities(self) -> int:
        return int(self.A.shape[1])

    @classmethod
    def from_graph(cls, ns: Namespace, g) -> "DeviceGraph":
        xp, sp = ns.xp, ns.sparse
        M, Ne = g.n_props, g.n_entities
        A = sp.csr_matrix((xp.ones(g.nnz, dtype=xp.float64),
                           xp.asarray(g.a_indices, dtype=xp.int32),
                           xp.asarray(g.a_indptr, dtype=xp.int32)), shape=(M, Ne))
        AT = sp.csr_matrix((xp.ones(g.nnz, dtype=xp.float64),
                            xp.asarray(g.at_indices, dtype=xp.int32),
                            xp.asarray(g.at_indptr, dtype=xp.int32)), shape=(Ne, M))
        return cls(ns, A, AT, xp.asarray(g.inv_deg), xp.asarray(g.diag), xp.asarray(g.inv_w))

    def with_degrees(self, g) -> "DeviceGraph":
        """This incidence with the degree terms of the host graph ``g`` (the same A: a
        filter's degrees recounted over its matching propositions); A and A^T are shared."""
        xp = self.ns.xp
        return DeviceGraph(self.ns, self.A, self.AT, xp.asarray(g.inv_deg),
                           xp.asarray(g.diag), xp.asarray(g.inv_w))


@dataclass
class DevicePassageMap:
    """R = diag(1/sqrt|P_j|) B^T (passages x propositions) and the owner vector."""

    ns: Namespace
    owner: object          # int32 (M,)
    inv_sqrt: object       # float64 (N,)
    R: object              # sparse (N, M)

    @property
    def n_passages(self) -> int:
        return int(self.inv_sqrt.shape[0])

    @classmethod
    def from_pmap(cls, ns: Namespace, pm) -> "DevicePassageMap":
        xp, sp = ns.xp, ns.sparse
        M, N = pm.n_props, pm.n_passages
        owner = xp.asarray(pm.owner, dtype=xp.int32)
        inv_sqrt = xp.asarray(pm.inv_sqrt, dtype=xp.float64)
        R = sp.coo_matrix((inv_sqrt[owner], (owner, xp.arange(M, dtype=xp.int32))),
                          shape=(N, M))
        return cls(ns, owner, inv_sqrt, R.tocsr())


def seed_matrix(ns: Namespace, M: int, indptr: ArrayLike, ids: Any, vals: ArrayLike):
    """The seeds given as CSR rows, as a sparse (M x B) CSC matrix, duplicates summed (the
    materialised-W peer's input)."""
    xp, sp = ns.xp, ns.sparse
    B = int(indptr.shape[0]) - 1
    # copies: sum_duplicates sorts and sums in place, and the caller's arrays must not change
    S = sp.csc_matrix((xp.array(vals, dtype=xp.float64, copy=True),
                       xp.array(ids, dtype=xp.int32, copy=True),
                       xp.array(indptr, dtype=xp.int32, copy=True)), shape=(M, B))
    S.sum_duplicates()
    return S


def expand(ns: Namespace, ptr, src, total: int | None = None):
    """For entries pointing at CSR rows ``src`` of row pointers ``ptr``: one output entry
    per (entry, stored position of its row), as (entry index, position) int64 arrays.
    Elementwise work and a searchsorted; ``total`` (the output size, when the caller knows
    it) saves the one host read of the size."""
    xp = ns.xp
    src = xp.asarray(src, dtype=xp.int64)
    lo = ptr[src]
    ends = xp.cumsum(ptr[src + 1] - lo)
    if total is None:
        total = int(ends[-1]) if int(src.shape[0]) else 0
    t = xp.arange(int(total), dtype=xp.int64)
    entry = xp.searchsorted(ends, t, side="right")
    start = ends[entry] - (ptr[src[entry] + 1] - lo[entry])
    return entry, lo[entry] + (t - start)


def sum_by_key(ns: Namespace, key, vals: ArrayLike):
    """Entries (key, value) summed per key: (sorted keys, sums at each run's first entry and
    0 elsewhere, first-entry mask).  A stable sort by key and :func:`segment_sums` (one thread
    a run, no atomics): deterministic, no sparse format."""
    xp = ns.xp
    o = xp.argsort(key, kind="stable")
    ks = key[o]
    n = int(ks.shape[0])
    first = xp.ones(n, dtype=bool)
    if n > 1:
        first[1:] = ks[1:] != ks[:-1]
    return ks, segment_sums(ns, ks, vals[o]), first


def _propagation_entries(dg: DeviceGraph, indptr: ArrayLike, ids: Any, vals: ArrayLike, alpha: float, *, target=None):
    """The entries of z = alpha s + (1 - alpha) (A De+ A^T x - diag x), x = Dw+ s, before
    they are summed: (row, target id, value) with target ids the propositions (``target``
    None) or, for ``target=(ptr, idx, weight, owner, inv_sqrt)``, the passages of a CSR
    (entities x passages) matrix C^T (weight: C's values) with the seed and diagonal terms
    sent to their owner passage scaled by inv_sqrt.  Two expansions (seed -> its entities ->
    their propositions or passages) and elementwise work: W is never formed and nothing is
    converted between sparse formats."""
    ns = dg.ns
    xp = ns.xp
    ids = xp.asarray(ids, dtype=xp.int64)
    vals = xp.asarray(vals, dtype=xp.float64)
    rows = row_of_entries(ns, xp.asarray(indptr, dtype=xp.int64), ids.shape[0])
    x = vals * dg.inv_w[ids]
    a_ptr, a_idx = dg.A.indptr.astype(xp.int64), dg.A.indices.astype(xp.int64)
    i1, pos1 = expand(ns, a_ptr, ids)                  # (seed, entity)
    ent = a_idx[pos1]
    w1 = x[i1] * dg.inv_deg[ent] * (1.0 - alpha)
    if target is None:
        t_ptr, t_idx = dg.AT.indptr.astype(xp.int64), dg.AT.indices.astype(xp.int64)
        t_w = None
        own, scale = ids, 1.0
    else:
        t_ptr, t_idx, t_w, owner, inv_sqrt = target
        own = owner[ids].astype(xp.int64)
        scale = inv_sqrt[own]
    i2, pos2 = expand(ns, t_ptr, ent)                  # (seed, entity, proposition/passage)
    w2 = w1[i2] if t_w is None else w1[i2] * t_w[pos2]
    self_v = (alpha * vals - (1.0 - alpha) * dg.diag[ids] * x) * scale
    r = xp.concatenate([rows, rows[i1][i2]])
    c = xp.concatenate([own, t_idx[pos2]])
    v = xp.concatenate([self_v, w2])
    return r, c, v


def propagate_batch(dg: DeviceGraph, indptr: ArrayLike, ids: Any, vals: ArrayLike, alpha: float):
    """Batched propagation; z as CSR rows (indptr, ids ascending, vals) per seed.  The
    entries of :func:`_propagation_entries` summed per (row, proposition) by
    :func:`sum_by_key`; the output's size is the one host read besides the expansions'."""
    ns = dg.ns
    xp = ns.xp
    B = int(indptr.shape[0]) - 1
    if B == 0 or int(ids.shape[0]) == 0:
        return (xp.zeros(B + 1, xp.int64), xp.zeros(0, xp.int64), xp.zeros(0, xp.float64))
    M = dg.n_props
    r, c, v = _propagation_entries(dg, indptr, ids, vals, float(alpha))
    ks, sums, first = sum_by_key(ns, r * M + c, v)
    keep = xp.flatnonzero(first)
    zk, zv = ks[keep], sums[keep]
    zr = zk // M
    zp = xp.searchsorted(zr, xp.arange(B + 1, dtype=xp.int64))
    return zp.astype(xp.int64), zk - zr * M, zv


# --------------------------------------------------------------------------- readout
_RAW = {}


def row_of_entries(ns: Namespace, ptr, n: int | None = None):
    """For CSR row pointers ``ptr`` (starting at 0), the row of every entry (int64); a
    searchsorted, because cupy.repeat takes no array of counts.  ``n``: the number of
    entries when the caller knows it (else ``ptr[-1]`` is read: a host synchronisation)."""
    xp = ns.xp
    n = int(ptr[-1]) if n is None else int(n)
    return xp.searchsorted(ptr[1:], xp.arange(n, dtype=ptr.dtype), side="right").astype(xp.int64)


def _segment_sums_kernel(ns: Namespace):
    """``segment_sums`` from segment.cu, compiled once per process (device only)."""
    if "segment" not in _RAW:
        src = Path(__file__).with_name("segment.cu").read_text()
        mod = ns.xp.RawModule(code=src, options=("-std=c++14",))
        _RAW["segment"] = mod.get_function("segment_sums")
    return _RAW["segment"]


def segment_sums(ns: Namespace, keys, vals: ArrayLike):
    """For ``keys`` sorted ascending: at the first entry of each run of equal keys, the sum of
    the run's ``vals`` added one after another in order; 0 elsewhere.  Deterministic (no
    atomics): one thread walks each run on a device (segment.cu); ``add.reduceat`` here."""
    xp = ns.xp
    n = int(keys.shape[0])
    out = xp.zeros(n, dtype=xp.float64)
    if n == 0:
        return out
    if ns.on_device:
        threads = 256
        blocks = min(65535, (n + threads - 1) // threads)
        _segment_sums_kernel(ns)((blocks,), (threads,),
                                 (xp.ascontiguousarray(keys, dtype=xp.int64),
                                  xp.ascontiguousarray(vals, dtype=xp.float64), out,
                                  np.int64(n)))
    else:
        starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
        out[starts] = np.add.reduceat(np.asarray(vals, np.float64), starts)
    return out


def topk_from_entries(ns: Namespace, rows: Any, cols, scores: ArrayLike, B: int, N: int, k: int):
    """Top ``k`` passages per row from sparse entries (row, passage, score), at most one entry
    per (row, passage): positive scores best first, ties by lower passage, then the other
    passages in stored order at score 0 (the CPU readout's convention).  Sorts only the
    entries and (B, k) arrays, never a row of N passages; fixed output sizes, so no host
    synchronisation.  Returns (passages int64, scores float64), both (B, min(k, N))."""
    xp = ns.xp
    kk = min(int(k), N)
    out_i = xp.zeros((B, kk + 1), dtype=xp.int64)
    out_v = xp.zeros((B, kk + 1), dtype=xp.float64)
    if B == 0 or kk == 0:
        return out_i[:, :kk], out_v[:, :kk]
    valid = scores > 0
    rows = xp.asarray(rows, dtype=xp.int64)
    cols = xp.asarray(cols, dtype=xp.int64)
    # best first within each row, invalid entries last: (row, invalid, -score, passage)
    o = xp.lexsort(xp.stack([cols, -scores, (~valid).astype(xp.int64), rows]))
    r_o, c_o, s_o, v_o = rows[o], cols[o], scores[o], valid[o]
    first = xp.searchsorted(r_o, xp.arange(B, dtype=xp.int64))  # each row's first entry
    rank = xp.arange(r_o.shape[0], dtype=xp.int64) - first[r_o]
    slot = xp.where(v_o & (rank < kk), rank, kk)
    out_i[r_o, slot] = c_o
    out_v[r_o, slot] = s_o
    # positive entries a row: the run of (row, valid) keys, found by two searchsorted (a
    # bincount would synchronise with the host on CuPy)
    rv = r_o * 2 + (~v_o).astype(xp.int64)
    at = xp.arange(B, dtype=xp.int64) * 2
    npos = xp.minimum(xp.searchsorted(rv, at, side="right") - xp.searchsorted(rv, at), kk)
    # the zero-score fill: the f-th smallest passage id not among the row's positive ones is
    # f + #{i : p_i - i <= f} over the row's positive passages p_0 < p_1 < ... (sorted)
    o2 = xp.lexsort(xp.stack([cols, (~valid).astype(xp.int64), rows]))
    r2, c2, v2 = rows[o2], cols[o2], valid[o2]
    first2 = xp.searchsorted(r2, xp.arange(B, dtype=xp.int64))
    rank2 = xp.arange(r2.shape[0], dtype=xp.int64) - first2[r2]
    big = xp.int64(N + 1)
    gkey = xp.where(v2, r2 * big + (c2 - rank2), r2 * big + N)  # invalid: past every query
    f = xp.arange(kk, dtype=xp.int64)[None, :]
    q = xp.arange(B, dtype=xp.int64)[:, None] * big + f
    below = xp.searchsorted(gkey, q.ravel(), side="right").reshape(B, kk) - first2[:, None]
    fill = f + below
    pos = npos[:, None] + f                       # where the f-th filler goes
    put = pos < kk
    rr = xp.broadcast_to(xp.arange(B)[:, None], (B, kk))
    out_i[rr, xp.where(put, pos, kk)] = xp.where(put, fill, 0)
    out_v[rr, xp.where(put, pos, kk)] = 0.0
    return out_i[:, :kk], out_v[:, :kk]


def readout_topk_batch(dp: DevicePassageMap, indptr: ArrayLike, ids: Any, vals: ArrayLike, k: int, *,
                       budget: int = DEFAULT_BUDGET):
    """Passage scores from z given as CSR rows, then the top ``k`` per row (positive scores
    best first, ties by passage order, then zero-score passages in stored order).  Returns
    (passage ids int64, scores float64), both (B, min(k, N)).

    Sparse and deterministic: the entries are sorted by (row, passage) keeping z's order
    within a key, each run summed in that order (:func:`segment_sums`; the CPU kernel's
    order, so the scores are bitwise the CPU's) and scaled by 1/sqrt|P_j|, then
    :func:`topk_from_entries`.  No (rows x passages) block, no atomics.  ``budget`` is kept
    for the signature (the work is linear in z's entries)."""
    ns = dp.ns
    xp = ns.xp
    N = dp.n_passages
    B = int(indptr.shape[0]) - 1
    indptr = xp.asarray(indptr, dtype=xp.int64)
    ids = xp.asarray(ids, dtype=xp.int64)
    rows = row_of_entries(ns, indptr, ids.shape[0])
    j = dp.owner[ids].astype(xp.int64)
    key = rows * max(N, 1) + j
    o = xp.argsort(key, kind="stable")
    key_s = key[o]
    sums = segment_sums(ns, key_s, xp.asarray(vals, dtype=xp.float64)[o])
    j_s = j[o]
    scores = sums * dp.inv_sqrt[j_s]
    start = xp.concatenate([xp.ones(min(1, int(key_s.shape[0])), dtype=bool),
                            key_s[1:] != key_s[:-1]])
    scores = xp.where(start, scores, 0.0)  # one entry per (row, passage)
    return topk_from_entries(ns, rows[o], j_s, scores, B, N, k)


@dataclass
class DeviceIndex:
    """An index resident in a namespace (on the GPU once): embeddings, graph and passage map,
    plus C = R A, held transposed (C^T, entities x passages, CSR) for the fused propagate +
    readout.  Built by
    :meth:`evireform.index.PropositionIndex.to_device`."""

    ns: Namespace
    embeddings: object
    graph: DeviceGraph
    pmap: DevicePassageMap
    C: object
    half: bool = False
    budget: int = DEFAULT_BUDGET
    #: "float32" (exact scan) or "fp16" (float16 scan + exact float32 re-rank of candidates)
    precision: str = "float32"
    embeddings16: object = None

    @classmethod
    def from_arrays(cls, ns: Namespace, graph, pmap, embeddings: ArrayLike, *, half: bool = False,
                    budget: int = DEFAULT_BUDGET, precision: str = "float32") -> "DeviceIndex":
        precision = {"fp32": "float32"}.get(precision, precision)  # the older spelling
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}; got {precision!r}")
        if half and precision == "fp16":
            raise ValueError("half=True stores float16 only; precision='fp16' keeps the "
                             "float32 rows to re-rank with: give one of them")
        xp = ns.xp
        H = xp.asarray(np.asarray(embeddings), dtype=xp.float16 if half else xp.float32)
        H16 = H.astype(xp.float16) if precision == "fp16" else None
        dg = DeviceGraph.from_graph(ns, graph)
        dp = DevicePassageMap.from_pmap(ns, pmap)
        C = (dp.R @ dg.A).T.tocsr()  # C^T: entities x passages, for the fused readout
        return cls(ns, H, dg, dp, C, half, int(budget), precision, H16)

    @property
    def n_props(self) -> int:
        return int(self.embeddings.shape[0])

    # host in, host out: what the retriever calls
    def search_batch(self, Q: ArrayLike, k: int, *, rows: Any=None):
        """Top-``k`` propositions of each query row (host arrays).  ``rows`` (host, strictly
        ascending positions): only those rows are candidates; they are gathered on the
        device for the call (the index's own copy is never changed) and the ids are
        positions in the index."""
        ns = self.ns
        xp = ns.xp
        H, H16 = self.embeddings, self.embeddings16
        d_rows = None
        if rows is not None:
            d_rows = xp.asarray(np.asarray(rows, dtype=np.int64))
            H = H[d_rows]
            H16 = H16[d_rows] if H16 is not None else None
            if int(d_rows.shape[0]) == 0:
                B = int(np.asarray(Q).shape[0])
                return np.full((B, 0), -1, np.int64), np.zeros((B, 0), np.float32)
        if self.precision == "fp16":
            ids, sc = cosine_topk_batch_fp16(ns, H16, H, ns.asarray(Q, xp.float32), k,
                                             budget=self.budget)
        else:
            ids, sc = cosine_topk_batch(ns, H, ns.asarray(Q, xp.float32), k,
                                        budget=self.budget, half=self.half)
        if d_rows is not None:
            ids = xp.where(ids >= 0, d_rows[xp.maximum(ids, 0)], -1)
        return ns.to_host(ids), ns.to_host(sc)

    def rank_batch(self, indptr: ArrayLike, ids: Any, vals: ArrayLike, alpha: float, k: int, *, propagation: bool = True,
                   fused: bool = True, graph: DeviceGraph | None = None, passage_mask=None):
        """Propagate (unless ``propagation=False``) and read out; host (B, k') arrays.
        ``graph``: propagate with these degree terms (:meth:`DeviceGraph.with_degrees`)
        instead of the index's; ``passage_mask`` (host bool per passage): the passages
        outside it get no score (never ranked among the positive ones)."""
        ns = self.ns
        xp = ns.xp
        d_indptr, d_ids, d_vals = (ns.asarray(indptr, xp.int64), ns.asarray(ids, xp.int64),
                                   ns.asarray(vals, xp.float64))
        pm = None if passage_mask is None else xp.asarray(np.asarray(passage_mask, bool))
        dg = graph if graph is not None else self.graph
        if not propagation:
            if pm is not None:
                d_vals = xp.where(pm[self.pmap.owner[d_ids]], d_vals, 0.0)
            P, S = readout_topk_batch(self.pmap, d_indptr, d_ids, d_vals, k, budget=self.budget)
        elif fused:
            P, S = propagate_readout_batch(self, d_indptr, d_ids, d_vals, alpha, k, dg=dg,
                                           passage_mask=pm)
        else:
            zp, zi, zv = propagate_batch(dg, d_indptr, d_ids, d_vals, alpha)
            if pm is not None:
                zv = xp.where(pm[self.pmap.owner[zi]], zv, 0.0)
            P, S = readout_topk_batch(self.pmap, zp, zi, zv, k, budget=self.budget)
        return ns.to_host(P), ns.to_host(S)


def propagate_readout_batch(di: DeviceIndex, indptr: ArrayLike, ids: Any, vals: ArrayLike, alpha: float, k: int, *,
                            dg: DeviceGraph | None = None, passage_mask=None):
    """Fused propagation + readout at passage level (z never formed):
    scores = alpha R s + (1 - alpha) (C De+ (A^T x) - R (diag x)), x = Dw+ s, C = R A; then
    top ``k``.  The entries of :func:`_propagation_entries` sent through C^T (entities x
    passages, precomputed) straight to passages, summed per (row, passage) by
    :func:`sum_by_key`, then :func:`topk_from_entries`.  ``dg``: other degree terms over the
    same incidence; ``passage_mask`` (device bool per passage): passages outside it score 0
    (not ranked)."""
    ns = di.ns
    xp = ns.xp
    dg, dp = (dg if dg is not None else di.graph), di.pmap
    N = dp.n_passages
    B = int(indptr.shape[0]) - 1
    kk = min(int(k), N)
    if B == 0 or kk == 0:
        return xp.zeros((B, kk), dtype=xp.int64), xp.zeros((B, kk), dtype=xp.float64)
    if int(ids.shape[0]) == 0:
        z = xp.zeros(0, dtype=xp.int64)
        return topk_from_entries(ns, z, z, xp.zeros(0, dtype=xp.float64), B, N, kk)
    CT = di.C
    r, c, v = _propagation_entries(dg, indptr, ids, vals, float(alpha),
                                   target=(CT.indptr.astype(xp.int64),
                                           CT.indices.astype(xp.int64), CT.data,
                                           dp.owner, dp.inv_sqrt))
    ks, sums, first = sum_by_key(ns, r * N + c, v)
    rows, cols = ks // N, ks % N
    data = xp.where(first, sums, 0.0)  # one score per (row, passage)
    if passage_mask is not None:
        data = xp.where(passage_mask[cols], data, 0.0)
    # rounding can leave -1e-17 where a score cancels to 0: not positive, so not ranked
    return topk_from_entries(ns, rows, cols, data, B, N, kk)


def materialised_w_propagate(dg: DeviceGraph, indptr: ArrayLike, ids: Any, vals: ArrayLike, alpha: float):
    """The naive peer: W = A De+ A^T - diag built as a sparse matrix, then z = aS + (1-a) W X."""
    sp = dg.ns.sparse
    W = (dg.A @ sp.diags(dg.inv_deg) @ dg.AT).tocsr()
    W = W - sp.diags(W.diagonal())
    S = seed_matrix(dg.ns, dg.n_props, indptr, ids, vals)
    return alpha * S + (1.0 - alpha) * (W @ (sp.diags(dg.inv_w) @ S))


def compile_sources(arch: str = "compute_90") -> dict[str, str]:
    """Compile every ``.cu`` source of this package with NVRTC (no GPU or driver needed);
    returns {file name: PTX}.  Raises the NVRTC error, with the compiler log, on failure."""
    from cupy_backends.cuda.libs import nvrtc
    out = {}
    for f in CU_SOURCES:
        prog = nvrtc.createProgram(f.read_text(), f.name, [], [])
        try:
            nvrtc.compileProgram(prog, [f"-arch={arch}", "-std=c++14"])
        except Exception as exc:
            log = nvrtc.getProgramLog(prog)
            raise RuntimeError(f"{f.name} does not compile for {arch}:\n{log}") from exc
        out[f.name] = nvrtc.getPTX(prog)
    return out


def copy_bandwidth(ns: Namespace, nbytes: int = 1 << 30, repeat: int = 5) -> float:
    """Measured device-to-device copy bandwidth in bytes/s (read + write counted once, as
    in the bench's CPU memory-copy case: bytes copied / time)."""
    xp = ns.xp
    n = nbytes // 4
    a = xp.ones(n, dtype=xp.float32)
    b = xp.empty_like(a)
    xp.copyto(b, a)
    ns.synchronize()
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        xp.copyto(b, a)
        ns.synchronize()
        ts.append(time.perf_counter() - t)
    return nbytes / sorted(ts)[len(ts) // 2]


__all__ = ["Namespace", "cpu_namespace", "gpu_namespace", "namespace", "topk_rows",
           "cosine_topk_batch", "full_scores_topk", "DeviceGraph", "DevicePassageMap",
           "DeviceIndex", "seed_matrix", "propagate_batch", "readout_topk_batch",
           "propagate_readout_batch", "materialised_w_propagate", "segment_sums", "expand", "sum_by_key",
           "topk_from_entries", "kth_key", "order_keys",
           "compile_sources", "copy_bandwidth", "block_rows", "DEFAULT_BUDGET",
           "cosine_topk_batch_fp16", "fp16_error_bound", "PRECISIONS", "cosine_topk_reference"]


# --------------------------------------------------------------------------- lexical (BM25)
def bm25_topk_batch(ns: Namespace, w_indptr, w_indices, w_data, n_docs: int, q_indptr,
                    q_terms, q_weights, k: int):
    """BM25 top-k of a batch of queries over eager weights (CSR terms x documents), the
    twin of the CPU kernel: every (query, term, document) entry by two expansions, summed
    per (query, document) by :func:`sum_by_key` (a stable sort keeps the query's term order,
    and :func:`segment_sums` adds a run in order: the CPU kernel's sums), then the positive
    sums best first per query, ties by lower id.  Returns (ids int64, scores float64), both
    (batch, min(k, n_docs)), padded with -1 / 0."""
    xp = ns.xp
    B = int(q_indptr.shape[0]) - 1
    kk = min(int(k), int(n_docs))
    out_i = xp.full((B, kk + 1), -1, dtype=xp.int64)
    out_v = xp.zeros((B, kk + 1), dtype=xp.float64)
    nq = int(q_terms.shape[0])
    if B == 0 or kk == 0 or nq == 0:
        return out_i[:, :kk], out_v[:, :kk]
    q_indptr = xp.asarray(q_indptr, dtype=xp.int64)
    rows = row_of_entries(ns, q_indptr, nq)
    e, pos = expand(ns, xp.asarray(w_indptr, dtype=xp.int64),
                    xp.asarray(q_terms, dtype=xp.int64))
    if int(e.shape[0]) == 0:
        return out_i[:, :kk], out_v[:, :kk]
    r = rows[e]
    d = xp.asarray(w_indices, dtype=xp.int64)[pos]
    v = xp.asarray(q_weights, dtype=xp.float64)[e] * w_data[pos].astype(xp.float64)
    ks, sums, first = sum_by_key(ns, r * int(n_docs) + d, v)
    keep = xp.flatnonzero(first & (sums > 0))
    kr, kd, kv = ks[keep] // int(n_docs), ks[keep] % int(n_docs), sums[keep]
    o = xp.lexsort(xp.stack([kd, -kv, kr]))  # per query: best first, ties by lower id
    kr, kd, kv = kr[o], kd[o], kv[o]
    start = xp.searchsorted(kr, xp.arange(B, dtype=xp.int64))
    rank = xp.arange(kr.shape[0], dtype=xp.int64) - start[kr]
    slot = xp.where(rank < kk, rank, kk)
    out_i[kr, slot] = kd
    out_v[kr, slot] = kv
    out_i[:, kk] = -1
    return out_i[:, :kk], out_v[:, :kk]
