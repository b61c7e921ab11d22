"""The GPU kernels, written once against an array namespace.

Every function here takes a :class:`Namespace`: (cupy, cupyx.scipy.sparse) on a device, or
(numpy, scipy.sparse) on the CPU, where CI runs the very same code against the references.
Importing this module imports neither CuPy nor CUDA.

What is a library call and what is custom:

* exact cosine top-k: GEMM (cuBLAS through ``xp.matmul``) over row blocks sized by a memory
  budget; per-query top-k of each block by ``argpartition`` plus an exact tie rule (lower id
  wins at the k-th score), merged across blocks with two stable sorts.  float32, or float16
  storage with float32 accumulation (:func:`cosine_topk_batch` ``half=True``).
* batched propagation z = alpha s + (1 - alpha) (A De+ (A^T (Dw+ s)) - diag * Dw+ s): sparse
  products (cuSPARSE SpGEMM through ``cupyx.scipy.sparse``) on the seed matrix; W is never
  formed.
* readout: a segment-sum of z into a dense (queries x passages) block -- on a device by the
  custom CUDA kernel ``readout.cu`` (``scatter_readout``, atomicAdd; loaded with
  ``cupy.RawModule``), on the CPU by ``np.add.at`` -- then the same exact top-k rule.
* fused propagation + readout: with C = R A (passages x entities, R = diag(1/sqrt|P_j|) B^T)
  precomputed, passage scores are alpha R s + (1 - alpha) (C De+ (A^T x) - R (diag * x)),
  x = Dw+ s, so the (propositions x queries) matrix z is never formed.

Conventions are the CPU kernels': positive cosine scores only, ties by lower id, passages
tie by stored order and passages without propositions score 0.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._backend import BackendUnavailable

#: bytes of score block one search or readout step may allocate (queries x rows)
DEFAULT_BUDGET = 1 << 30

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
    from ._backend import gpu_missing_reason
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
def topk_rows(ns: Namespace, S, k: int):
    """Per row of ``S`` (B, n): the ``min(k, n)`` columns with the largest values, ordered by
    descending value, ties by lower column.  Returns (cols int64, vals), both (B, kk).

    ``argpartition`` picks the k-th largest value t; every entry > t is taken, and of the
    entries == t the lowest columns fill the remaining places -- the exact tie rule, without
    sorting whole rows."""
    xp = ns.xp
    B, n = S.shape
    kk = min(int(k), n)
    if kk == 0 or B == 0:
        return xp.zeros((B, kk), dtype=xp.int64), xp.zeros((B, kk), dtype=S.dtype)
    if kk == n:
        cols = xp.broadcast_to(xp.arange(n, dtype=xp.int64), (B, n))
    else:
        part = xp.argpartition(-S, kk - 1, axis=1)[:, :kk]
        t = xp.take_along_axis(S, part, axis=1).min(axis=1)[:, None]
        gt = S > t
        eq = S == t
        need = kk - gt.sum(axis=1, keepdims=True)
        sel = gt | (eq & (xp.cumsum(eq, axis=1) <= need))
        cols = xp.nonzero(sel)[1].reshape(B, kk).astype(xp.int64)
    vals = xp.take_along_axis(S, cols, axis=1)
    order = xp.argsort(-vals, axis=1, kind="stable")  # cols ascending: ties keep lower col
    return xp.take_along_axis(cols, order, axis=1), xp.take_along_axis(vals, order, axis=1)


def _merge(ns: Namespace, ids_a, vals_a, ids_b, vals_b, k: int):
    """Best ``k`` of two candidate lists per row by (-value, id)."""
    xp = ns.xp
    ids = xp.concatenate([ids_a, ids_b], axis=1)
    vals = xp.concatenate([vals_a, vals_b], axis=1)
    o = xp.argsort(ids, axis=1, kind="stable")
    ids, vals = xp.take_along_axis(ids, o, axis=1), xp.take_along_axis(vals, o, axis=1)
    o = xp.argsort(-vals, axis=1, kind="stable")[:, :k]
    return xp.take_along_axis(ids, o, axis=1), xp.take_along_axis(vals, o, axis=1)


# --------------------------------------------------------------------------- cosine top-k
def block_rows(n_queries: int, k: int, budget: int, itemsize: int = 4) -> int:
    """Embedding rows per GEMM block so that the (queries x rows) score block and its top-k
    scratch (about 3 x the block: scores, masks, cumsum) stay within ``budget`` bytes."""
    per_row = max(1, n_queries) * (itemsize + 1 + 8 + 1)
    return max(int(k), int(budget // per_row), 1)


def cosine_topk_batch(ns: Namespace, H, Q, k: int, *, budget: int = DEFAULT_BUDGET,
                      half: bool = False):
    """Exact top-``k`` rows of ``H`` (n, d) for each query of ``Q`` (B, d), positive scores only.

    Returns (ids int64, scores float32) of shape (B, min(k, n)) on the namespace's device,
    padded with id -1 / score 0.  ``H`` may be float16 (``half=True`` storage): each block is
    widened to float32 before its GEMM, so accumulation stays float32."""
    xp = ns.xp
    n = H.shape[0]
    B = Q.shape[0]
    kk = min(int(k), n)
    if kk == 0 or B == 0:
        return (xp.full((B, kk), -1, dtype=xp.int64), xp.zeros((B, kk), dtype=xp.float32))
    Q = Q.astype(xp.float32)
    rows = block_rows(B, kk, budget)
    best_i = best_v = None
    neg = xp.float32(-np.inf)
    for lo in range(0, n, rows):
        Hb = H[lo:lo + rows]
        if half or Hb.dtype != xp.float32:
            Hb = Hb.astype(xp.float32)
        S = Q @ Hb.T
        S = xp.where(S > 0, S, neg)
        ci, cv = topk_rows(ns, S, kk)
        ci = ci + lo
        if best_i is None:
            best_i, best_v = ci, cv
        else:
            best_i, best_v = _merge(ns, best_i, best_v, ci, cv, kk)
    keep = best_v > 0
    return xp.where(keep, best_i, -1), xp.where(keep, best_v, xp.float32(0))


def full_scores_topk(ns: Namespace, H, Q, k: int):
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


def seed_matrix(ns: Namespace, M: int, indptr, ids, vals):
    """The seeds given as CSR rows, as a sparse (M x B) CSC matrix, duplicates summed."""
    xp, sp = ns.xp, ns.sparse
    B = int(indptr.shape[0]) - 1
    # copies: sum_duplicates sorts and sums in place, and the caller's arrays must not change
    S = sp.csc_matrix((xp.array(vals, dtype=xp.float64, copy=True),
                       xp.array(ids, dtype=xp.int32, copy=True),
                       xp.array(indptr, dtype=xp.int32, copy=True)), shape=(M, B))
    S.sum_duplicates()
    return S


def _propagate_matrix(dg: DeviceGraph, S, alpha: float):
    """Z = alpha S + (1 - alpha) (A De+ (A^T X) - diag X), X = Dw+ S, as sparse products."""
    sp = dg.ns.sparse
    X = sp.diags(dg.inv_w) @ S
    Y = dg.A @ (sp.diags(dg.inv_deg) @ (dg.AT @ X)) - sp.diags(dg.diag) @ X
    return (alpha * S + (1.0 - alpha) * Y).tocsc()


def propagate_batch(dg: DeviceGraph, indptr, ids, vals, alpha: float):
    """Batched propagation; z as CSR rows (indptr, ids ascending, vals) per seed."""
    xp = dg.ns.xp
    B = int(indptr.shape[0]) - 1
    if B == 0:
        return xp.zeros(1, xp.int64), xp.zeros(0, xp.int64), xp.zeros(0, xp.float64)
    Z = _propagate_matrix(dg, seed_matrix(dg.ns, dg.n_props, indptr, ids, vals), float(alpha))
    Z.sort_indices()
    return (Z.indptr.astype(xp.int64), Z.indices.astype(xp.int64), Z.data)


# --------------------------------------------------------------------------- readout
_RAW = {}


def _scatter_kernel(ns: Namespace):
    """``scatter_readout`` from readout.cu, compiled once per process (device only)."""
    if "scatter" not in _RAW:
        src = Path(__file__).with_name("readout.cu").read_text()
        mod = ns.xp.RawModule(code=src, options=("-std=c++14",))
        _RAW["scatter"] = mod.get_function("scatter_readout")
    return _RAW["scatter"]


def scatter_readout(dp: DevicePassageMap, rows, ids, vals, out) -> None:
    """out[rows[t], owner[ids[t]]] += inv_sqrt[owner[ids[t]]] * vals[t] for every entry t
    (out is a dense (queries x passages) float64 block).  Device: readout.cu; CPU: add.at."""
    ns = dp.ns
    xp = ns.xp
    if int(ids.shape[0]) == 0:
        return
    if ns.on_device:
        n = int(ids.shape[0])
        threads = 256
        blocks = min(65535, (n + threads - 1) // threads)
        _scatter_kernel(ns)((blocks,), (threads,),
                            (xp.ascontiguousarray(rows, dtype=xp.int64),
                             xp.ascontiguousarray(ids, dtype=xp.int64),
                             xp.ascontiguousarray(vals, dtype=xp.float64),
                             dp.owner, dp.inv_sqrt, out, np.int64(n),
                             np.int64(out.shape[1])))
    else:
        j = dp.owner[ids]
        np.add.at(out, (rows, j), dp.inv_sqrt[j] * vals)


def row_of_entries(ns: Namespace, ptr):
    """For CSR row pointers ``ptr`` (starting at 0), the row of every entry (int64); a
    searchsorted, because cupy.repeat takes no array of counts."""
    xp = ns.xp
    n = int(ptr[-1])
    return xp.searchsorted(ptr[1:], xp.arange(n, dtype=ptr.dtype), side="right").astype(xp.int64)


def _query_block(n_passages: int, budget: int) -> int:
    return max(1, int(budget // max(1, n_passages * 8 * 3)))


def readout_topk_batch(dp: DevicePassageMap, indptr, ids, vals, k: int, *,
                       budget: int = DEFAULT_BUDGET):
    """Passage scores from z given as CSR rows, then the top ``k`` per row (positive scores
    best first, ties by passage order, then zero-score passages in stored order).  Returns
    (passage ids int64, scores float64), both (B, min(k, N))."""
    xp = dp.ns.xp
    N = dp.n_passages
    B = int(indptr.shape[0]) - 1
    kk = min(int(k), N)
    out_i = xp.zeros((B, kk), dtype=xp.int64)
    out_v = xp.zeros((B, kk), dtype=xp.float64)
    if B == 0 or kk == 0:
        return out_i, out_v
    indptr = xp.asarray(indptr, dtype=xp.int64)
    step = _query_block(N, budget)
    for q0 in range(0, B, step):
        q1 = min(B, q0 + step)
        lo, hi = int(indptr[q0]), int(indptr[q1])
        rows = row_of_entries(dp.ns, indptr[q0:q1 + 1] - lo)
        D = xp.zeros((q1 - q0, N), dtype=xp.float64)
        scatter_readout(dp, rows, ids[lo:hi], vals[lo:hi], D)
        out_i[q0:q1], out_v[q0:q1] = topk_rows(dp.ns, D, kk)
    return out_i, out_v


@dataclass
class DeviceIndex:
    """An index resident in a namespace (on the GPU once): embeddings, graph and passage map,
    plus C = R A for the fused propagate + readout.  Built by
    :meth:`evireform.index.PropositionIndex.to_device`."""

    ns: Namespace
    embeddings: object
    graph: DeviceGraph
    pmap: DevicePassageMap
    C: object
    half: bool = False
    budget: int = DEFAULT_BUDGET

    @classmethod
    def from_arrays(cls, ns: Namespace, graph, pmap, embeddings, *, half: bool = False,
                    budget: int = DEFAULT_BUDGET) -> "DeviceIndex":
        xp = ns.xp
        H = xp.asarray(np.asarray(embeddings), dtype=xp.float16 if half else xp.float32)
        dg = DeviceGraph.from_graph(ns, graph)
        dp = DevicePassageMap.from_pmap(ns, pmap)
        C = (dp.R @ dg.A).tocsr()
        return cls(ns, H, dg, dp, C, half, int(budget))

    @property
    def n_props(self) -> int:
        return int(self.embeddings.shape[0])

    # host in, host out: what the retriever calls
    def search_batch(self, Q, k: int):
        ns = self.ns
        ids, sc = cosine_topk_batch(ns, self.embeddings, ns.asarray(Q, ns.xp.float32), k,
                                    budget=self.budget, half=self.half)
        return ns.to_host(ids), ns.to_host(sc)

    def rank_batch(self, indptr, ids, vals, alpha: float, k: int, *, propagation: bool = True,
                   fused: bool = True):
        """Propagate (unless ``propagation=False``) and read out; host (B, k') arrays."""
        ns = self.ns
        d_indptr, d_ids, d_vals = (ns.asarray(indptr, ns.xp.int64), ns.asarray(ids, ns.xp.int64),
                                   ns.asarray(vals, ns.xp.float64))
        if not propagation:
            P, S = readout_topk_batch(self.pmap, d_indptr, d_ids, d_vals, k, budget=self.budget)
        elif fused:
            P, S = propagate_readout_batch(self, d_indptr, d_ids, d_vals, alpha, k)
        else:
            zp, zi, zv = propagate_batch(self.graph, d_indptr, d_ids, d_vals, alpha)
            P, S = readout_topk_batch(self.pmap, zp, zi, zv, k, budget=self.budget)
        return ns.to_host(P), ns.to_host(S)


def propagate_readout_batch(di: DeviceIndex, indptr, ids, vals, alpha: float, k: int):
    """Fused propagation + readout at passage level (z never formed):
    scores = alpha R S + (1 - alpha) (C De+ (A^T X) - R (diag X)), X = Dw+ S; then top ``k``."""
    ns = di.ns
    xp, sp = ns.xp, ns.sparse
    dg, dp = di.graph, di.pmap
    N = dp.n_passages
    B = int(indptr.shape[0]) - 1
    kk = min(int(k), N)
    if B == 0 or kk == 0:
        return xp.zeros((B, kk), dtype=xp.int64), xp.zeros((B, kk), dtype=xp.float64)
    S = seed_matrix(ns, dg.n_props, indptr, ids, vals)
    X = sp.diags(dg.inv_w) @ S
    P = alpha * (dp.R @ S) + (1.0 - alpha) * (di.C @ (sp.diags(dg.inv_deg) @ (dg.AT @ X))
                                              - dp.R @ (sp.diags(dg.diag) @ X))
    P = P.tocsc()  # (N x B): column b holds query b's passage scores
    out_i = xp.zeros((B, kk), dtype=xp.int64)
    out_v = xp.zeros((B, kk), dtype=xp.float64)
    step = _query_block(N, di.budget)
    for q0 in range(0, B, step):
        q1 = min(B, q0 + step)
        D = xp.asarray(P[:, q0:q1].T.toarray())
        xp.maximum(D, 0.0, out=D)  # rounding can leave -1e-17 where a score cancels to 0
        out_i[q0:q1], out_v[q0:q1] = topk_rows(ns, D, kk)
    return out_i, out_v


def materialised_w_propagate(dg: DeviceGraph, indptr, ids, vals, alpha: float):
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
    import time
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
           "propagate_readout_batch", "materialised_w_propagate", "scatter_readout",
           "compile_sources", "copy_bandwidth", "block_rows", "DEFAULT_BUDGET"]
