"""The cases of ``evireform bench --backend gpu``: each GPU kernel against the numba CPU
kernel and against the naive CuPy peer, on the same data, with the device's measured copy
bandwidth.  Every case takes its namespace from the inputs, so a test runs them all with
(numpy, scipy.sparse) at tiny sizes and they cannot rot on machines without a GPU.

Sizes (full run): exact top-k of 1,024 queries over 10M x 384 float32; batched propagation
of 10,000 seeds at 1M and 10M propositions; readout at 1M and 10M; retrieve_many at 1M and
10M.  ``--quick`` (and the CPU-namespace test) use 20k/100k.
"""
from __future__ import annotations

from typing import Any, Sequence, TYPE_CHECKING

import time

import numpy as np

from .. import kernels as K
from ..kernels import _gpu
from ..engine import to_device
from .harness import case

if TYPE_CHECKING:  # annotations only
    from numpy.typing import ArrayLike
    from ..roles import Reformulator
    from ..index import PropositionIndex

SIZE = {2_000: "2k", 20_000: "20k", 100_000: "100k", 1_000_000: "1M", 10_000_000: "10M"}


class GpuInputs:
    """Device data shared by the GPU cases, made once per run."""

    cos_size: int
    deadline: None
    log: Any
    n_queries: int
    n_questions: int
    n_seeds: int
    quick: bool
    sizes: tuple[int, int]
    w_size: int

    def __init__(self, quick: bool, ns: _gpu.Namespace, log: Any, tiny: bool = False) -> None:
        self.quick, self.ns, self.log = quick, ns, log
        self.tiny: bool = tiny  # the CPU-namespace smoke test: everything small
        self.rng = np.random.default_rng(20261201)
        self._cache: dict[str, Any] = {}
        #: set by :func:`evireform.bench.run` per case: the report's writer, the budget's end
        self.flush = lambda: None
        self.deadline = None
        if tiny:
            self.sizes, self.cos_size, self.w_size = (2_000,), 2_000, 2_000
            self.n_queries, self.n_seeds, self.n_questions = 16, 50, 4
        elif quick:
            self.sizes, self.cos_size, self.w_size = (100_000,), 100_000, 20_000
            self.n_queries, self.n_seeds, self.n_questions = 256, 2_000, 32
        else:
            self.sizes, self.cos_size, self.w_size = (1_000_000, 10_000_000), 10_000_000, 100_000
            self.n_queries, self.n_seeds, self.n_questions = 1024, 10_000, 256

    @property
    def batches(self) -> tuple[Any, ...]:
        """Query batches of the scans: 16 (memory-bound) and the run's full batch."""
        return tuple(dict.fromkeys((16, self.n_queries)))

    def out_of_time(self) -> bool:
        """The run's time budget is spent: a case stops before its next size."""
        return self.deadline is not None and time.perf_counter() > self.deadline

    def seeds_at(self, M: int) -> int:
        """Seeds for propagation at M propositions: the hubs (5% of M) make z of a seed hold
        up to ~M/20 entries, so 10M gets a tenth of the seeds to stay within memory."""
        return self.n_seeds if M <= 1_000_000 else self.n_seeds // 10

    def timed(self, fn: Any, repeat: int = 3) -> float:
        """Median seconds of ``fn`` after one warm-up call, the device synchronised."""
        fn()
        self.ns.synchronize()
        ts = []
        for _ in range(repeat):
            t = time.perf_counter()
            fn()
            self.ns.synchronize()
            ts.append(time.perf_counter() - t)
        return float(np.median(ts))

    def copy_bw(self) -> float:
        if "bw" not in self._cache:
            self._cache["bw"] = _gpu.copy_bandwidth(self.ns, (1 << 30) if not self.tiny
                                                    else (1 << 22))
        return self._cache["bw"]

    def embeddings(self, M: int, d: int = 384):
        """Clustered unit rows made on the device (see bench.synthetic), float32."""
        key = ("emb", M)
        if key not in self._cache:
            xp = self.ns.xp
            t = time.perf_counter()
            if self.ns.on_device:
                rs = xp.random.RandomState(M)
                normal = lambda shape: rs.standard_normal(shape, dtype=xp.float32)  # noqa
                ints = lambda hi, n: rs.randint(0, hi, n)  # noqa: E731
            else:
                g = np.random.default_rng(M)
                normal = lambda shape: g.standard_normal(shape, dtype=np.float32)  # noqa
                ints = lambda hi, n: g.integers(0, hi, n)  # noqa: E731
            C = normal((2048, d))
            C /= xp.linalg.norm(C, axis=1, keepdims=True)
            basis = normal((32, d)) / np.float32(np.sqrt(d))
            H = xp.empty((M, d), dtype=xp.float32)
            step = 1 << 20
            for lo in range(0, M, step):
                hi = min(M, lo + step)
                X = C[ints(2048, hi - lo)] + (normal((hi - lo, 32)) @ basis) / np.float32(
                    np.sqrt(32))
                H[lo:hi] = X / xp.linalg.norm(X, axis=1, keepdims=True)
            self.ns.synchronize()
            self.log(f"  made {M:,} x {d} embeddings on {self.ns.name} in "
                     f"{time.perf_counter() - t:.1f}s")
            self._cache[key] = H
        return self._cache[key]

    def graph(self, M: int):
        """(host graph, host pmap, device index) over synthetic data of M propositions."""
        key = ("graph", M)
        if key not in self._cache:
            t = time.perf_counter()
            g, pm = _synthetic_cached(M, self.tiny)
            H = self.embeddings(M)
            di = _gpu.DeviceIndex(self.ns, H, _gpu.DeviceGraph.from_graph(self.ns, g),
                                  _gpu.DevicePassageMap.from_pmap(self.ns, pm), None)
            self.log(f"  built synthetic graph of {M:,} propositions ({g.nnz:,} incidences) "
                     f"in {time.perf_counter() - t:.1f}s")
            self._cache[key] = (g, pm, di)
        return self._cache[key]

    def seeds(self, M: int, B: int):
        rng = np.random.default_rng(M + B)
        n = rng.integers(4, 19, B)
        indptr = np.r_[0, np.cumsum(n)].astype(np.int64)
        ids = rng.integers(0, M, int(indptr[-1])).astype(np.int64)
        return indptr, ids, rng.random(len(ids))


def _synthetic_cached(M: int, tiny: bool):
    """The synthetic graph and passage map of M propositions (seeded by M), built once and
    kept under ``~/.cache/evireform/bench`` (``$EVIREFORM_CACHE``): building the 10M graph
    costs minutes a device run should not pay twice.  Tiny sizes are not kept."""
    from ..kernels import EntityGraph, PassageMap
    from ..kernels.graph import array_fields
    from .synthetic import synthetic_graph, synthetic_passages
    f = None
    if not tiny:
        from ..cache import default_cache_dir
        f = default_cache_dir() / "bench" / f"synthetic-graph-{M}.npz"
        if f.is_file():
            try:
                z = np.load(f, allow_pickle=False)
                g = EntityGraph(**{n: z[n] for n, _, _ in array_fields(EntityGraph)})
                pm = PassageMap(**{n: z[n] for n, _, _ in array_fields(PassageMap)})
                return g, pm
            except Exception:  # a damaged cache is rebuilt
                pass
    rng = np.random.default_rng(M)
    g, pm = synthetic_graph(rng, M), synthetic_passages(rng, M)
    if f is not None:
        f.parent.mkdir(parents=True, exist_ok=True)
        tmp = f.with_name(f.name + ".part.npz")
        np.savez(tmp, **{n: getattr(g, n) for n, _, _ in array_fields(EntityGraph)},
                 **{n: getattr(pm, n) for n, _, _ in array_fields(PassageMap)})
        tmp.replace(f)
    return g, pm


def _dense_rows(M, indptr: ArrayLike, ids: Any, vals: ArrayLike, rows: Any):
    out = []
    for b in rows:
        z = np.zeros(M)
        np.add.at(z, ids[indptr[b]:indptr[b + 1]], vals[indptr[b]:indptr[b + 1]])
        out.append(z)
    return out


@case("gpu_copy/device memory copy", backend="gpu")
def case_gpu_copy(inp: Any, out: Any) -> None:
    bw = inp.copy_bw()
    nbytes = (1 << 30) if not inp.tiny else (1 << 22)
    out["gpu_copy/device memory copy"] = {
        "size": f"{nbytes / 2**20:.0f} MiB", "ours_s": nbytes / bw, "peer_s": None,
        "peer": "-", "speedup": None, "agree": True, "copy_gb_s": bw / 1e9}


@case(*[f"gpu_cosine_topk/{s} b{b} vs {p}" for s in SIZE.values() for b in (16, 256, 1024)
        for p in ("numba", "cupy full argsort")], backend="gpu")
def case_gpu_cosine(inp: Any, out: Any) -> None:
    _each_batch(inp, out, _cosine_at)


def _cosine_at(inp: Any, out: Any, B) -> None:
    ns, xp = inp.ns, inp.ns.xp
    M, k = inp.cos_size, 100
    H = inp.embeddings(M)
    Q = _queries(inp, H, B)
    t_ours = inp.timed(lambda: _gpu.cosine_topk_batch(ns, H, Q, k), 3)
    n_cpu = min(B, 32)
    H_host, Q_host = ns.to_host(H), ns.to_host(Q[:n_cpu])
    t_cpu = inp.timed(lambda: K.cosine_topk_batch(H_host, Q_host, k), 1)
    n_full = min(B, 8)
    t_full = inp.timed(lambda: _gpu.full_scores_topk(ns, H, Q[:n_full], k), 2)
    ids, vals = (ns.to_host(a) for a in _gpu.cosine_topk_batch(ns, H, Q[:n_cpu], k))
    rid, rvals = K.cosine_topk_batch(H_host, Q_host, k)
    agree = bool(np.allclose(vals, rvals, rtol=1e-5, atol=1e-6)
                 and np.mean(ids == rid) > 0.99)
    per_q = t_ours / B
    bw = inp.copy_bw()
    scan = H.nbytes / t_ours
    size = f"M={M:,}, d=384, {B} queries, k={k}"
    base = {"size": size, "ours_s": per_q, "agree": agree, "scan_gb_s": scan / 1e9,
            "fraction_of_copy": scan / bw, "batch_s": t_ours}
    out[f"gpu_cosine_topk/{SIZE[M]} b{B} vs numba"] = dict(
        base, peer_s=t_cpu / n_cpu, peer=f"numba cosine_topk_batch ({n_cpu} queries, host)",
        speedup=(t_cpu / n_cpu) / per_q)
    out[f"gpu_cosine_topk/{SIZE[M]} b{B} vs cupy full argsort"] = dict(
        base, peer_s=t_full / n_full, peer=f"full score matrix + argsort ({n_full} queries)",
        speedup=(t_full / n_full) / per_q)


@case(*[f"gpu_cosine_fp16/{s} b{b} vs fp32" for s in SIZE.values() for b in (16, 256, 1024)],
      backend="gpu")
def case_gpu_cosine_fp16(inp: Any, out: Any) -> None:
    """The float16 scan (tensor-core GEMM, float32 accumulation) with the exact float32
    re-rank of its candidates, against the exact float32 scan: same top-k (agree), and the
    share of fp16 tensor-core peak the batch reaches (989 TFLOP/s dense on an H200)."""
    _each_batch(inp, out, _cosine_fp16_at)


def _each_batch(inp: Any, out: Any, measure) -> None:
    """``measure(inp, out, B)`` for each of the run's batch sizes, each flushed to the
    report as it finishes; none started once the time budget is spent."""
    for B in inp.batches:
        if inp.out_of_time():
            return
        measure(inp, out, B)
        inp.flush()


def _queries(inp: Any, H: ArrayLike, B):
    """B unit queries near rows of H (half a row, half another synthetic row)."""
    xp = inp.ns.xp
    Q = H[:B] * 0.5 + inp.embeddings(max(20_000, B))[:B] * 0.5
    return Q / xp.linalg.norm(Q, axis=1, keepdims=True)


def _cosine_fp16_at(inp: Any, out: Any, B) -> None:
    ns, xp = inp.ns, inp.ns.xp
    M, k = inp.cos_size, 100
    H = inp.embeddings(M)
    if "h16" not in inp._cache:
        inp._cache["h16"] = H.astype(xp.float16)
    H16 = inp._cache["h16"]
    Q = _queries(inp, H, B)
    t16 = inp.timed(lambda: _gpu.cosine_topk_batch_fp16(ns, H16, H, Q, k), 3)
    t32 = inp.timed(lambda: _gpu.cosine_topk_batch(ns, H, Q, k), 2)
    a_i, a_v = (ns.to_host(x) for x in _gpu.cosine_topk_batch_fp16(ns, H16, H, Q, k))
    b_i, b_v = (ns.to_host(x) for x in _gpu.cosine_topk_batch(ns, H, Q, k))
    agree = bool(np.allclose(a_v, b_v, rtol=1e-5, atol=1e-6) and np.mean(a_i == b_i) > 0.99)
    flops = 2.0 * B * M * H.shape[1]
    out[f"gpu_cosine_fp16/{SIZE[M]} b{B} vs fp32"] = {
        "size": f"M={M:,}, d=384, {B} queries, k={k}", "ours_s": t16 / B, "peer_s": t32 / B,
        "peer": "the exact float32 scan", "speedup": t32 / t16, "agree": agree,
        "tflops": flops / t16 / 1e12, "fraction_of_fp16_peak": flops / t16 / 989e12,
        "scan_gb_s": H16.nbytes / t16 / 1e9}


@case(*[f"gpu_readout/{s} {n} rows vs numba" for s in SIZE.values()
        for n in (50, 1000, 2000)], backend="gpu")
def case_gpu_readout(inp: Any, out: Any) -> None:
    ns = inp.ns
    B = min(inp.n_seeds, 1000)
    for M in inp.sizes:
        if inp.out_of_time():
            return
        g, pm, di = inp.graph(M)
        # z: sparse rows of 4-18 propositions (the sparse readout's cost follows z's entries;
        # a propagated z at 10M would take the CPU peer longer to make than to read)
        zp, zi, zv = inp.seeds(M, B)
        d = (ns.asarray(zp), ns.asarray(zi), ns.asarray(zv))
        t_g = inp.timed(lambda: _gpu.readout_topk_batch(di.pmap, *d, 20, budget=di.budget), 3)
        t_c = inp.timed(lambda: K.readout_topk_batch(pm, zp, zi, zv, 20), 1)
        P, S = (ns.to_host(a) for a in _gpu.readout_topk_batch(di.pmap, *d, 20))
        P2, S2 = K.readout_topk_batch(pm, zp, zi, zv, 20)
        out[f"gpu_readout/{SIZE[M]} {B} rows vs numba"] = {
            "size": f"M={M:,}, N={pm.n_passages:,}, {B} rows, k=20", "ours_s": t_g,
            "peer_s": t_c, "peer": "numba readout_many", "speedup": t_c / t_g,
            "agree": bool(np.array_equal(P, P2) and np.allclose(S, S2, rtol=1e-12, atol=0)),
            "ms": t_g * 1e3}
        inp.flush()


@case(*[f"gpu_propagate/{s} {n} seeds vs {p}" for s in SIZE.values()
        for n in (50, 1000, 2000, 10000) for p in ("numba", "cupy materialised W")],
      backend="gpu")
def case_gpu_propagate(inp: Any, out: Any) -> None:
    ns = inp.ns
    for M in inp.sizes + ((inp.w_size,) if inp.w_size not in inp.sizes else ()):
        if inp.out_of_time():
            return
        B = inp.seeds_at(M)
        g, pm, di = inp.graph(M)
        indptr, ids, vals = inp.seeds(M, B)
        d = (ns.asarray(indptr), ns.asarray(ids), ns.asarray(vals))
        t_g = inp.timed(lambda: _gpu.propagate_batch(di.graph, *d, 0.5), 3)
        zp, zi, zv = (ns.to_host(a) for a in _gpu.propagate_batch(di.graph, *d, 0.5))
        rows = list(range(0, B, max(1, B // 10)))
        size = f"M={M:,}, nnz(A)={g.nnz:,}, {B} seeds"
        if M in inp.sizes:
            t_c = inp.timed(lambda: K.propagate_batch(g, indptr, ids, vals, 0.5), 1)
            cp, ci, cv = K.propagate_batch(g, indptr, ids, vals, 0.5)
            agree = all(np.allclose(a, b, atol=1e-12) for a, b in zip(
                _dense_rows(M, zp, zi, zv, rows), _dense_rows(M, cp, ci, cv, rows)))
            out[f"gpu_propagate/{SIZE[M]} {B} seeds vs numba"] = {
                "size": size, "ours_s": t_g, "peer_s": t_c,
                "peer": "numba propagate_batch (host threads)", "speedup": t_c / t_g,
                "agree": bool(agree)}
        if M == inp.w_size:
            t_w = inp.timed(lambda: _gpu.materialised_w_propagate(di.graph, *d, 0.5), 1)
            Z = _gpu.materialised_w_propagate(di.graph, *d, 0.5).tocsc()
            Zh = [ns.to_host(Z[:, b].toarray()).ravel() for b in rows]
            agree = all(np.allclose(a, b, atol=1e-12) for a, b in zip(
                _dense_rows(M, zp, zi, zv, rows), Zh))
            out[f"gpu_propagate/{SIZE[M]} {B} seeds vs cupy materialised W"] = {
                "size": size, "ours_s": t_g, "peer_s": t_w,
                "peer": "W = A De+ A^T - diag built in cupyx.scipy.sparse, then W x",
                "speedup": t_w / t_g, "agree": bool(agree)}
        inp.flush()


@case(*[f"gpu_retrieve_many/{s} vs cpu" for s in SIZE.values()], backend="gpu")
def case_gpu_retrieve(inp: Any, out: Any) -> None:
    from ..index import PropositionIndex
    from ..types import Passage
    from .synthetic import GivenReformulator
    ns = inp.ns
    for M in inp.sizes:
        if inp.out_of_time():
            return
        g, pm, di = inp.graph(M)
        H = ns.to_host(di.embeddings)
        idx = PropositionIndex(passages=[Passage(str(j), f"p{j}", "") for j in
                                         range(pm.n_passages)],
                               prop_texts=[""] * g.n_props, entity_names=[""] * g.n_entities,
                               graph=g, pmap=pm, embeddings=H, embedder_name="synthetic")
        rng = np.random.default_rng(7)
        nq = inp.n_questions
        Hq = H[rng.choice(M, nq)] + 0.05 * rng.standard_normal((nq, H.shape[1]),
                                                               dtype=np.float32)
        Hq /= np.linalg.norm(Hq, axis=1, keepdims=True)
        qs = [f"q{i}" for i in range(nq)]
        queries = {q: [f"{q}-r{j}" for j in range(3)] for q in qs}
        vecs = {x: H[rng.integers(M)] for v in queries.values() for x in v}
        table = dict(zip(qs, Hq))
        table.update(vecs)
        embed = _TableEmbedder(table, H.shape[1])
        gpu_r, cpu_r = retrieve_pair(idx, ns, embed, GivenReformulator(queries))
        n_cpu = min(nq, 16)
        t_g = inp.timed(lambda: gpu_r.retrieve_many(qs, 20), 2) / nq
        t_c = inp.timed(lambda: cpu_r.retrieve_many(qs[:n_cpu], 20), 1) / n_cpu
        a = gpu_r.retrieve_many(qs[:n_cpu], 20)
        b = cpu_r.retrieve_many(qs[:n_cpu], 20)
        agree = np.mean([x.ids[:5] == y.ids[:5] for x, y in zip(a, b)]) >= 0.9
        out[f"gpu_retrieve_many/{SIZE[M]} vs cpu"] = {
            "size": f"{M:,} propositions, {nq} questions (cpu: {n_cpu})", "ours_s": t_g,
            "peer_s": t_c, "peer": "the CPU path (numba kernels, exact search)",
            "speedup": t_c / t_g, "agree": bool(agree),
            "note": "agree = the top 5 equal for at least 90% of questions (float32 rounding "
                    "of GEMM vs the numba loops can swap near-tied candidates)"}
        inp.flush()


def retrieve_pair(idx: PropositionIndex, ns, embed, reformulator: Reformulator):
    """(device retriever, CPU retriever) over one index: the peer runs on
    ``backend="cpu"`` (the numba kernels), never on "auto", which at >= 1M propositions
    would pick the same device copy and compare the GPU with itself."""
    from ..retriever import EviReform, EviReformConfig
    cfg = EviReformConfig()
    gpu_r = EviReform(idx, cfg, embedder=embed, reformulator=reformulator,
                      backend=to_device(idx, ns.name))
    cpu_r = EviReform(idx, cfg, embedder=embed, reformulator=reformulator, backend="cpu")
    return gpu_r, cpu_r


class _TableEmbedder:
    """Texts to given vectors (the embedder's part is not timed)."""

    name = "synthetic"

    def __init__(self, table, dim) -> None:
        self.table, self.dim = table, dim

    def encode(self, texts: Sequence[str], batch_size=64, show_progress: bool=False):
        return np.stack([self.table[t] for t in texts]).astype(np.float32) if texts else \
            np.zeros((0, self.dim), np.float32)


#: the GPU targets on an H200, from the roofline (docs/performance.md, "GPU targets"):
#: (label, field, threshold, what, the floor's reason).  A batch of 16 queries over 10M x 384
#: float32 does 2 x 16 x 384 = 12 FLOP a byte of embeddings: memory-bound, so its target is
#: the scan reading the 15.4 GB at the measured copy bandwidth (a copy moves each byte twice,
#: a scan once: 1.0 leaves half of the read bandwidth to the select kernel's score traffic).
#: 1,024 queries do 768 FLOP a byte: compute-bound (7.9 TFLOP a batch), so its target is a
#: share of the fp16 tensor-core peak (989 TFLOP/s dense), with the select kernel reading each
#: float16 score once.  Propagation moves about 40 bytes an expanded entry through one sort:
#: 5x the numba kernel on 16 host threads.  The readout of 1,000 rows of 4-18 entries is
#: launch-bound: 5 ms.
TARGETS = [
    ("gpu_cosine_topk/10M b16 vs numba", "fraction_of_copy", 1.0,
     "exact top-k of 16 queries over 10M x 384 float32 at >= 1.0x copy bandwidth",
     "memory-bound: 12 FLOP a byte"),
    ("gpu_cosine_fp16/10M b1024 vs fp32", "fraction_of_fp16_peak", 0.25,
     "top-k of 1,024 queries over 10M x 384 (float16 scan + exact re-rank) at >= 25% of "
     "the fp16 tensor-core peak", "compute-bound: 768 FLOP a byte"),
    ("gpu_propagate/1M 10000 seeds vs numba", "speedup", 5.0,
     "batched propagation of 10,000 seeds >= 5x the numba CPU kernel (16 threads)",
     "one sort of the expanded entries"),
    ("gpu_readout/1M 1000 rows vs numba", "ms", 5.0,
     "readout of 1,000 rows at 1M propositions in <= 5 ms", "launch-bound"),
]


def targets(report: dict[str, Any]) -> str:
    """Each target with the measured value, or why it was not measured."""
    lines = ["targets:"]
    for label, fld, want, what, _why in TARGETS:
        c = report["cases"].get(label)
        if c is None or c.get(fld) is None:
            lines.append(f"  not measured  {what} ({label} did not run)")
            continue
        v = c[fld]
        met = v <= want if fld == "ms" else v >= want  # a time is met from below
        lines.append(f"  {'met' if met else 'MISSED':<12}  {what}: {v:.2f}")
    return "\n".join(lines)
