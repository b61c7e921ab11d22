"""The GPU path, verified without a GPU.

The GPU kernels are array-namespace code: here they run with (numpy, scipy.sparse) and are
compared with the references on the same kinds of inputs as the CPU kernels (fresh random
shapes, empty seeds, isolated propositions, zero-degree entities, passages without
propositions, blocks that split a query's top-k).  The CUDA C sources are compiled with
NVRTC for compute_80 and compute_90 (skipped only when CuPy's NVRTC binding is not
installed).  Where a device exists, the last tests run the same checks on it.
"""
import re
from pathlib import Path
import subprocess
import sys

import numpy as np
import pytest

import evireform.kernels as K
from evireform.kernels import _gpu, reference as R

from gpu_common import HAVE_GPU, IDS  # noqa: F401
from helpers import random_graph, random_passages, random_seed, unit_rows

NS = _gpu.cpu_namespace()
NAMESPACES = [NS] + ([_gpu.gpu_namespace()] if HAVE_GPU else [])


def _host(ns, a):
    return ns.to_host(a)


# ------------------------------------------------------------------ the exact top-k rule
def test_topk_rows_tie_rule():
    S = np.array([[1, 3, 3, 2, 3, 0], [0, 0, 0, 0, 0, 0], [5, 4, 3, 2, 1, 0]], float)
    cols, vals = _gpu.topk_rows(NS, S, 2)
    np.testing.assert_array_equal(cols, [[1, 2], [0, 1], [0, 1]])  # ties: lower column
    cols, vals = _gpu.topk_rows(NS, S, 4)
    np.testing.assert_array_equal(cols, [[1, 2, 4, 3], [0, 1, 2, 3], [0, 1, 2, 3]])
    cols, vals = _gpu.topk_rows(NS, S, 50)  # k > n: every column, sorted
    np.testing.assert_array_equal(cols[0], [1, 2, 4, 3, 0, 5])
    assert _gpu.topk_rows(NS, np.zeros((0, 4)), 3)[0].shape == (0, 3)
    assert _gpu.topk_rows(NS, np.zeros((2, 0)), 3)[0].shape == (2, 0)


# ------------------------------------------------------------------ cosine top-k
def _check_topk(H, Q, ids, vals, k):
    rids, rvals = R.cosine_topk_batch(H, Q, k)
    assert ids.shape == rids.shape
    np.testing.assert_allclose(vals, rvals, rtol=1e-5, atol=1e-6)
    exact = Q.astype(np.float64) @ H.astype(np.float64).T
    for b in range(len(Q)):
        bad = ids[b] != rids[b]
        if bad.any():  # only where the two candidates tie within float32 rounding
            assert np.all(ids[b][bad] >= 0) and np.all(rids[b][bad] >= 0)
            np.testing.assert_allclose(exact[b, ids[b][bad]], exact[b, rids[b][bad]],
                                       rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("ns", NAMESPACES, ids=IDS)
@pytest.mark.parametrize("M,d,B,k,budget", [(1, 4, 1, 1, 1 << 20), (7, 3, 5, 10, 1 << 20),
                                            (300, 16, 7, 20, 2000), (3001, 8, 9, 50, 40_000),
                                            (5000, 32, 3, 100, 1 << 30), (64, 5, 70, 3, 1)])
def test_cosine_topk_matches_reference(rng, ns, M, d, B, k, budget):
    H = unit_rows(rng, M, d)
    Q = unit_rows(rng, B, d)
    rows = _gpu.block_rows(B, min(k, M), budget)
    ids, vals = _gpu.cosine_topk_batch(ns, ns.asarray(H), ns.asarray(Q), k, budget=budget)
    _check_topk(H, Q, _host(ns, ids), _host(ns, vals), k)
    if budget < 1 << 20 and M > k:
        assert rows < M  # the case really splits the rows into blocks


@pytest.mark.parametrize("ns", NAMESPACES, ids=IDS)
def test_cosine_topk_ties_nonpositive_and_empty(ns):
    H = np.array([[0, 1], [1, 0], [0, 1], [-1, 0], [1, 0], [0, -1]], np.float32)
    Q = np.array([[1, 0], [-1, 0], [0, 0]], np.float32)
    for budget in (1, 1 << 20):  # one row per block, and one block
        ids, vals = _gpu.cosine_topk_batch(ns, ns.asarray(H), ns.asarray(Q), 3, budget=budget)
        np.testing.assert_array_equal(_host(ns, ids), [[1, 4, -1], [3, -1, -1], [-1, -1, -1]])
        np.testing.assert_array_equal(_host(ns, vals)[2], [0, 0, 0])
    ids, vals = _gpu.cosine_topk_batch(ns, ns.asarray(np.zeros((0, 2), np.float32)),
                                       ns.asarray(Q), 3)
    assert ids.shape == (3, 0)


@pytest.mark.parametrize("ns", NAMESPACES, ids=IDS)
def test_cosine_topk_half_storage(rng, ns):
    H = unit_rows(rng, 2000, 24)
    Q = unit_rows(rng, 6, 24)
    H16 = H.astype(np.float16)
    ids, vals = _gpu.cosine_topk_batch(ns, ns.asarray(H16), ns.asarray(Q), 30, half=True,
                                       budget=20_000)
    _check_topk(H16.astype(np.float32), Q, _host(ns, ids), _host(ns, vals), 30)


def test_full_scores_peer_agrees(rng):
    H, Q = unit_rows(rng, 500, 8), unit_rows(rng, 4, 8)
    o, v = _gpu.full_scores_topk(NS, H, Q, 10)
    _check_topk(H, Q, o, v, 10)


# ------------------------------------------------------------------ propagation
def _seed_batch(rng, M, B, n=6):
    seeds = [random_seed(rng, M, int(rng.integers(0, n + 1))) for _ in range(B)]
    indptr = np.r_[0, np.cumsum([len(s[0]) for s in seeds])].astype(np.int64)
    ids = np.concatenate([s[0] for s in seeds]).astype(np.int64) if B else np.zeros(0, np.int64)
    vals = np.concatenate([s[1] for s in seeds]) if B else np.zeros(0)
    return seeds, indptr, ids, vals


@pytest.mark.parametrize("ns", NAMESPACES, ids=IDS)
@pytest.mark.parametrize("M,Ne,B,alpha", [(1, 1, 1, 0.5), (40, 0, 3, 0.5), (300, 40, 9, 0.3),
                                          (2000, 400, 17, 0.5), (500, 60, 0, 0.5),
                                          (500, 60, 5, 1.0), (500, 60, 5, 0.0)])
def test_propagate_batch_matches_reference(rng, ns, M, Ne, B, alpha):
    g = random_graph(rng, M, Ne)  # isolated propositions, degree-0 and degree-1 entities
    dg = _gpu.DeviceGraph.from_graph(ns, g)
    seeds, indptr, ids, vals = _seed_batch(rng, M, B)
    zp, zi, zv = (_host(ns, a) for a in _gpu.propagate_batch(
        dg, ns.asarray(indptr), ns.asarray(ids), ns.asarray(vals), alpha))
    assert len(zp) == B + 1
    A = R.incidence_matrix(g.a_indptr, g.a_indices, g.n_entities)
    for b, (si, sv) in enumerate(seeds):
        want = R.propagate_dense(A, R.seed_vector(M, si, sv), alpha)
        got = np.zeros(M)
        np.add.at(got, zi[zp[b]:zp[b + 1]], zv[zp[b]:zp[b + 1]])
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-13)
        # and the same as the numba kernel
        ci, cv = K.propagate(g, si, sv, alpha)
        cpu = np.zeros(M)
        np.add.at(cpu, ci, cv)
        np.testing.assert_allclose(got, cpu, rtol=1e-10, atol=1e-13)


def test_materialised_w_peer_agrees(rng):
    g = random_graph(rng, 400, 50)
    dg = _gpu.DeviceGraph.from_graph(NS, g)
    _, indptr, ids, vals = _seed_batch(rng, 400, 6)
    Z = _gpu.materialised_w_propagate(dg, indptr, ids, vals, 0.5).toarray()
    zp, zi, zv = _gpu.propagate_batch(dg, indptr, ids, vals, 0.5)
    for b in range(6):
        got = np.zeros(400)
        np.add.at(got, zi[zp[b]:zp[b + 1]], zv[zp[b]:zp[b + 1]])
        np.testing.assert_allclose(got, Z[:, b], atol=1e-13)


# ------------------------------------------------------------------ readout
def _check_readout_rows(pm, seeds_z, P, S, k):
    for b, z in enumerate(seeds_z):
        full = R.readout_scores(z, pm.owner, pm.n_passages)
        rids, rsc = R.readout_topk(z, pm.owner, pm.n_passages, k)
        np.testing.assert_allclose(S[b], rsc, rtol=1e-10, atol=1e-14)
        bad = P[b] != rids
        np.testing.assert_allclose(full[P[b][bad]], full[rids[bad]], rtol=1e-10, atol=1e-14)
        assert len(np.unique(P[b])) == len(P[b])


@pytest.mark.parametrize("ns", NAMESPACES, ids=IDS)
@pytest.mark.parametrize("M,N,B,k,budget", [(1, 1, 1, 1, 1 << 30), (20, 10, 4, 3, 1 << 30),
                                            (20, 10, 4, 50, 1 << 30), (3000, 500, 23, 15, 1),
                                            (3000, 500, 23, 15, 50_000), (0, 4, 2, 3, 1 << 30),
                                            (300, 80, 0, 5, 1 << 30)])
def test_readout_matches_reference(rng, ns, M, N, B, k, budget):
    pm = random_passages(rng, M, N)  # some passages without propositions
    dp = _gpu.DevicePassageMap.from_pmap(ns, pm)
    zs, rows = [], []
    for _ in range(B):
        n = int(rng.integers(0, min(M, 40) + 1)) if M else 0
        zi = rng.choice(M, n, replace=False) if n else np.zeros(0, np.int64)
        zv = rng.random(n)
        zv[::4] = 0  # touched but zero
        rows.append((zi, zv))
        zs.append(R.seed_vector(M, zi, zv))
    indptr = np.r_[0, np.cumsum([len(r[0]) for r in rows])].astype(np.int64)
    ids = np.concatenate([r[0] for r in rows]).astype(np.int64) if B else np.zeros(0, np.int64)
    vals = np.concatenate([r[1] for r in rows]) if B else np.zeros(0)
    P, S = _gpu.readout_topk_batch(dp, ns.asarray(indptr), ns.asarray(ids), ns.asarray(vals),
                                   k, budget=budget)
    P, S = _host(ns, P), _host(ns, S)
    assert P.shape == (B, min(k, N))
    _check_readout_rows(pm, zs, P, S, min(k, N))


# ------------------------------------------------------------------ fused and the device index
def _index(rng, M=600, N=150, Ne=90, d=16):
    g = random_graph(rng, M, Ne)
    pm = random_passages(rng, M, N)
    H = unit_rows(rng, M, d)
    return g, pm, H


@pytest.mark.parametrize("ns", NAMESPACES, ids=IDS)
@pytest.mark.parametrize("alpha", [0.5, 0.2, 1.0])
def test_fused_equals_unfused_equals_reference(rng, ns, alpha):
    g, pm, H = _index(rng)
    di = _gpu.DeviceIndex.from_arrays(ns, g, pm, H, budget=30_000)
    seeds, indptr, ids, vals = _seed_batch(rng, g.n_props, 12)
    P1, S1 = di.rank_batch(indptr, ids, vals, alpha, 20, fused=True)
    P2, S2 = di.rank_batch(indptr, ids, vals, alpha, 20, fused=False)
    A = R.incidence_matrix(g.a_indptr, g.a_indices, g.n_entities)
    zs = [R.propagate_dense(A, R.seed_vector(g.n_props, si, sv), alpha) for si, sv in seeds]
    _check_readout_rows(pm, zs, P1, S1, 20)
    _check_readout_rows(pm, zs, P2, S2, 20)
    P3, S3 = di.rank_batch(indptr, ids, vals, alpha, 20, propagation=False)
    _check_readout_rows(pm, [R.seed_vector(g.n_props, si, sv) for si, sv in seeds], P3, S3, 20)


# ------------------------------------------------------------------ CUDA C and the backend switch
def _nvrtc():
    try:
        from cupy_backends.cuda.libs import nvrtc
        nvrtc.getVersion()
        return nvrtc
    except Exception as exc:  # CuPy or the NVRTC wheel not installed
        pytest.skip(f"CuPy's NVRTC is not available ({type(exc).__name__}: {exc})")


@pytest.mark.parametrize("arch", ["compute_80", "compute_90"])
def test_cuda_sources_compile_with_nvrtc(arch):
    _nvrtc()
    assert _gpu.CU_SOURCES, "no .cu sources found next to the kernels"
    ptx = _gpu.compile_sources(arch)
    assert set(ptx) == {f.name for f in _gpu.CU_SOURCES}
    for f in _gpu.CU_SOURCES:
        text = ptx[f.name]
        text = text.decode() if isinstance(text, bytes) else text
        entries = re.findall(r'extern "C" __global__ void (\w+)', f.read_text())
        assert entries and f".target sm_{arch[-2:]}" in text
        assert all(f".entry {e}" in text for e in entries), (f.name, entries)


def test_nvrtc_reports_a_broken_source(tmp_path, monkeypatch):
    _nvrtc()
    bad = tmp_path / "bad.cu"
    bad.write_text('extern "C" __global__ void f() { undefined_thing; }')
    monkeypatch.setattr(_gpu, "CU_SOURCES", [bad])
    with pytest.raises(RuntimeError, match="undefined_thing"):
        _gpu.compile_sources("compute_90")


def test_importing_evireform_needs_no_cuda():
    code = ("import sys, evireform, evireform.kernels, evireform.retriever\n"
            "print(any(m == 'cupy' or m.startswith('cupy.') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"


@pytest.mark.skipif(not HAVE_GPU, reason="no CUDA device")
def test_public_kernels_on_the_device_match_cpu(rng):
    H, Q = unit_rows(rng, 5000, 32), unit_rows(rng, 8, 32)
    ids, vals = K.cosine_topk_batch(H, Q, 20, backend="gpu")
    _check_topk(H, Q, ids, vals, 20)
    g, pm = random_graph(rng, 800, 100), random_passages(rng, 800, 200)
    _, indptr, sids, svals = _seed_batch(rng, 800, 10)
    zp, zi, zv = K.propagate_batch(g, indptr, sids, svals, 0.5, backend="gpu")
    cp, ci, cv = K.propagate_batch(g, indptr, sids, svals, 0.5)
    for b in range(10):
        a, c = np.zeros(800), np.zeros(800)
        np.add.at(a, zi[zp[b]:zp[b + 1]], zv[zp[b]:zp[b + 1]])
        np.add.at(c, ci[cp[b]:cp[b + 1]], cv[cp[b]:cp[b + 1]])
        np.testing.assert_allclose(a, c, rtol=1e-10, atol=1e-13)
    P, S = K.readout_topk_batch(pm, zp, zi, zv, 10, backend="gpu")
    P2, S2 = K.readout_topk_batch(pm, zp, zi, zv, 10)
    np.testing.assert_allclose(S, S2, rtol=1e-10, atol=1e-14)


def test_inputs_are_not_modified(rng):
    g = random_graph(rng, 300, 40)
    pm = random_passages(rng, 300, 60)
    di = _gpu.DeviceIndex.from_arrays(NS, g, pm, unit_rows(rng, 300, 8))
    _, indptr, ids, vals = _seed_batch(rng, 300, 7)
    before = (indptr.copy(), ids.copy(), vals.copy())
    di.rank_batch(indptr, ids, vals, 0.5, 5)
    di.rank_batch(indptr, ids, vals, 0.5, 5, fused=False)
    _gpu.materialised_w_propagate(di.graph, indptr, ids, vals, 0.5)
    for a, b in zip(before, (indptr, ids, vals)):
        np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------ selection, not sorting
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("B,n,k", [(1, 1, 1), (3, 10, 1), (4, 50, 7), (2, 9, 9), (5, 8, 20),
                                   (6, 300, 64), (1, 1000, 999)])
def test_radix_select_equals_a_full_sort(rng, dtype, B, n, k):
    S = rng.integers(-3, 4, (B, n)).astype(dtype) / 2  # many ties, negatives, zeros
    S[0, : n // 2] += rng.random(n // 2).astype(dtype) * (n > 20)
    if B > 2:
        S[2] = -np.inf  # a row with nothing valid
    cols, vals = _gpu.topk_rows(NS, S, k)
    kk = min(k, n)
    want = np.stack([np.lexsort((np.arange(n), -S[b]))[:kk] for b in range(B)])
    np.testing.assert_array_equal(cols, want)
    np.testing.assert_array_equal(vals, np.take_along_axis(S, want, axis=1))
    keys = _gpu.order_keys(np, S)
    assert np.all((keys[:, :, None] > keys[:, None, :]) == (S[:, :, None] > S[:, None, :]))


def test_many_tiles_merge_once_and_stay_exact(rng, monkeypatch):
    H = unit_rows(rng, 4000, 8)
    Q = unit_rows(rng, 5, 8)
    monkeypatch.setattr(_gpu, "MERGE_WIDTH", 3)  # reduce the held candidates often
    ids, vals = _gpu.cosine_topk_batch(NS, H, Q, 25, budget=5 * 14 * 40)  # 40 rows a tile
    _check_topk(H, Q, ids, vals, 25)


class _Guarded(np.ndarray):
    """A numpy array standing for a device array: every conversion to a host value (what
    synchronises a CUDA stream: ``int()``, ``float()``, ``bool()``, ``.item()``,
    ``.tolist()``, ``.get()``, use as an index) is logged."""

    log: list = []

    def __array_finalize__(self, obj):
        _Guarded.log.append(("array", self.shape))

    def __array_wrap__(self, arr, context=None, return_scalar=False):
        return np.asarray(arr).view(_Guarded)  # 0-d results stay arrays, as on CuPy

    def __getitem__(self, key):
        out = super().__getitem__(key)
        return np.asarray(out).view(_Guarded) if isinstance(out, np.generic) else out

    def _sync(self, what):
        _Guarded.log.append(("sync", what))
        return self.view(np.ndarray)

    def __int__(self):
        return int(self._sync("int"))

    def __float__(self):
        return float(self._sync("float"))

    def __bool__(self):
        return bool(self._sync("bool"))

    def __index__(self):
        return self._sync("index").__index__()

    def item(self, *a):
        return self._sync("item").item(*a)

    def tolist(self):
        return self._sync("tolist").tolist()

    def get(self):
        return self._sync("get").copy()


class _Counting:
    """numpy as a device namespace: its results are :class:`_Guarded` arrays, its sorts are
    logged with their length, and so are the calls that synchronise with the host on CuPy
    (a data-dependent size: ``nonzero`` and its kin; ``bincount``, which checks its input's
    sign and maximum on the host) and every allocation's size."""

    SORTS = ("sort", "argsort", "lexsort", "partition", "argpartition", "unique")
    SYNCS = ("nonzero", "flatnonzero", "argwhere", "unique", "bincount", "extract",
             "compress", "count_nonzero")
    ALLOCS = ("zeros", "empty", "full", "ones")

    def __init__(self):
        self.calls = _Guarded.log = []

    @staticmethod
    def _wrap(out):
        if isinstance(out, (np.ndarray, np.generic)) and not isinstance(out, _Guarded):
            return np.asarray(out).view(_Guarded)
        if isinstance(out, tuple):
            return tuple(_Counting._wrap(o) for o in out)
        return out

    def __getattr__(self, name):
        f = getattr(np, name)
        if not callable(f) or isinstance(f, type):
            return f
        calls = self.calls

        def counted(*args, **kw):
            if name in self.ALLOCS:
                calls.append(("alloc", int(np.prod(args[0]))))
            if name in self.SORTS:
                arr = np.asarray(args[0])
                axis = kw.get("axis", args[1] if len(args) > 1 and name in ("sort", "argsort")
                              else -1)
                calls.append((name, int(arr.shape[axis] if arr.ndim and axis is not None
                                        else arr.size)))
            if name in self.SYNCS:
                calls.append(("sync", name))
            return self._wrap(f(*args, **kw))
        return counted

    def syncs(self):
        return [c for c in self.calls if c[0] == "sync"]

    def allocs(self):
        return [n for name, n in self.calls if name == "alloc"]

    def longest_sort(self):
        return max((n for name, n in self.calls if name in self.SORTS), default=0)


def _counting_ns():
    import scipy.sparse
    xp = _Counting()
    return xp, _gpu.Namespace("numpy", xp, scipy.sparse)


def test_the_cost_guard_sees_every_kind_of_sync():
    """The guard itself: each way of synchronising is caught (so a 0 below means 0)."""
    xp, ns = _counting_ns()
    a = ns.asarray(np.arange(5.0))
    int(a[0]), float(a[1]), bool(a[2]), a[3].item(), a.tolist(), a.get()
    xp.bincount(xp.asarray([1, 2])), xp.nonzero(a), list(range(10))[a[1].astype(int)]
    assert [w for _, w in xp.syncs()] == ["int", "float", "bool", "item", "tolist", "get",
                                          "bincount", "nonzero", "index"]
    xp.calls.clear()
    _gpu.kth_key(ns, _gpu.order_keys(xp, ns.asarray(np.random.rand(3, 50))), 5)
    assert xp.syncs(), "the namespace radix select (bincount) was not caught"


@pytest.mark.parametrize("half", [False, True])
def test_cost_guard_a_search_never_syncs_and_sorts_only_k(rng, half):
    """The search: no host synchronisation inside it (float32; the fp16 scan has its one
    certification check), no sort longer than k (fp16: its k + margin candidates), no
    allocation of a (queries x rows) block, and the exact result."""
    xp, ns = _counting_ns()
    M, k = 6000, 20
    H, Q = unit_rows(rng, M, 8), unit_rows(rng, 6, 8)
    budget = 6 * 14 * 500  # 12 tiles
    if half:
        ids, vals = _gpu.cosine_topk_batch_fp16(ns, ns.asarray(H.astype(np.float16)),
                                                ns.asarray(H), ns.asarray(Q), k, margin=16,
                                                budget=budget)
        assert [w for _, w in xp.syncs()] == ["bool"], xp.syncs()
        assert xp.longest_sort() <= k + 16, xp.calls
    else:
        ids, vals = _gpu.cosine_topk_batch(ns, ns.asarray(H), ns.asarray(Q), k, budget=budget)
        assert xp.syncs() == [], xp.syncs()
        assert xp.longest_sort() <= k, xp.calls
    _check_topk(H, Q, np.asarray(ids), np.asarray(vals), k)
    widest = max(s[-1] for name, s in xp.calls if name == "array" and len(s) == 2)
    assert 500 <= widest < M // 2, widest  # a tile's scores (500 rows), no (B x M) block


def test_cost_guard_readout_never_syncs_nor_sorts_passages(rng):
    """The readout: sorts over z's entries (the candidates), never over the N passages, no
    (B x N) block, no host synchronisation."""
    xp, ns = _counting_ns()
    M, N = 6000, 900
    pm = random_passages(rng, M, N)
    dp = _gpu.DevicePassageMap.from_pmap(ns, pm)
    indptr = np.array([0, 5, 5, 17], np.int64)
    zi = rng.integers(0, M, 17).astype(np.int64)
    zv = rng.random(17)
    xp.calls.clear()
    P, S = _gpu.readout_topk_batch(dp, ns.asarray(indptr), ns.asarray(zi), ns.asarray(zv), 10)
    assert xp.syncs() == [], xp.syncs()
    assert xp.longest_sort() <= 17 + 3 * 10, xp.calls
    assert max(xp.allocs()) < N, xp.calls  # no (B x N)
    P2, S2 = K.readout_topk_batch(pm, indptr, zi, zv, 10)
    np.testing.assert_array_equal(np.asarray(P), P2)
    np.testing.assert_allclose(np.asarray(S), S2, rtol=1e-12)


def test_propagation_uses_no_sparse_operation_on_the_hot_path(rng):
    """Propagation and the fused readout read the incidence's CSR arrays only: the sparse
    matrices are swapped for bare holders of (indptr, indices, data, shape), so any sparse
    product, transpose or format conversion would fail.  Host reads: the two expansions'
    sizes (and the output's in propagate_batch); the results equal the CPU kernels'."""
    from types import SimpleNamespace
    xp, ns = _counting_ns()
    M, N = 400, 90
    g, pm = random_graph(rng, M, 60), random_passages(rng, M, N)
    di = _gpu.DeviceIndex.from_arrays(ns, g, pm, unit_rows(rng, M, 4))

    def bare(X):
        return SimpleNamespace(indptr=X.indptr, indices=X.indices, data=X.data, shape=X.shape)
    di.graph = _gpu.DeviceGraph(ns, bare(di.graph.A), bare(di.graph.AT), di.graph.inv_deg,
                                di.graph.diag, di.graph.inv_w)
    di.C = bare(di.C)
    di.pmap.R = None
    indptr, ids, vals = np.array([0, 3, 3, 9]), rng.integers(0, M, 9), rng.random(9)
    ids[4] = ids[3]  # a duplicated seed
    xp.calls.clear()
    zp, zi, zv = _gpu.propagate_batch(di.graph, ns.asarray(indptr), ns.asarray(ids),
                                      ns.asarray(vals), 0.4)
    assert len(xp.syncs()) <= 3, xp.syncs()
    xp.calls.clear()
    P, S = _gpu.propagate_readout_batch(di, ns.asarray(indptr), ns.asarray(ids),
                                        ns.asarray(vals), 0.4, 12)
    assert len(xp.syncs()) <= 2, xp.syncs()
    cp, ci, cv = K.propagate_batch(g, indptr, ids, vals, 0.4)
    zp, zi, zv = (np.asarray(a) for a in (zp, zi, zv))
    for b in range(3):
        want = R.seed_vector(M, ci[cp[b]:cp[b + 1]], cv[cp[b]:cp[b + 1]])
        got = R.seed_vector(M, zi[zp[b]:zp[b + 1]], zv[zp[b]:zp[b + 1]])
        np.testing.assert_allclose(got, want, atol=1e-12)
        assert np.all(np.diff(zi[zp[b]:zp[b + 1]]) > 0)  # ids ascending, one entry each
    P2, S2 = K.readout_topk_batch(pm, cp, ci, cv, 12)
    np.testing.assert_allclose(np.asarray(S), S2, atol=1e-12)


def test_expand_and_sum_by_key(rng):
    ptr = np.array([0, 2, 2, 5, 6], np.int64)      # row 1 is empty
    e, pos = _gpu.expand(NS, ptr, np.array([2, 1, 0, 2, 3]))
    assert e.tolist() == [0, 0, 0, 2, 2, 3, 3, 3, 4]
    assert pos.tolist() == [2, 3, 4, 0, 1, 2, 3, 4, 5]
    e, pos = _gpu.expand(NS, ptr, np.zeros(0, np.int64))
    assert e.shape == pos.shape == (0,)
    ks, sums, first = _gpu.sum_by_key(NS, np.array([5, 1, 5, 5, 2]), np.array([1., 2, 3, 4, 5]))
    assert ks.tolist() == [1, 2, 5, 5, 5] and first.tolist() == [1, 1, 1, 0, 0]
    assert sums[first].tolist() == [2, 5, 8]


@pytest.mark.parametrize("ns", NAMESPACES, ids=IDS)
@pytest.mark.parametrize("M,d,B,k,margin,budget", [(1, 4, 1, 1, 64, 1 << 20),
                                                   (500, 16, 5, 20, 0, 4000),
                                                   (3000, 32, 7, 50, 5, 1 << 30),
                                                   (2000, 384, 3, 100, 64, 300_000)])
def test_fp16_scan_with_exact_rerank_equals_fp32(rng, ns, M, d, B, k, margin, budget):
    H = unit_rows(rng, M, d)
    if M > 20:
        H[5] = H[9]  # an exact tie
    Q = np.concatenate([unit_rows(rng, B - 1, d), H[9:10]]) if B > 1 else unit_rows(rng, 1, d)
    want_i, want_v = _gpu.cosine_topk_batch(ns, ns.asarray(H), ns.asarray(Q), k)
    got_i, got_v = _gpu.cosine_topk_batch_fp16(ns, ns.asarray(H.astype(np.float16)),
                                               ns.asarray(H), ns.asarray(Q), k, margin=margin,
                                               budget=budget)
    _check_topk(H, Q, _host(ns, got_i), _host(ns, got_v), k)
    np.testing.assert_allclose(_host(ns, got_v), _host(ns, want_v), rtol=1e-5, atol=1e-6)
    di = _gpu.DeviceIndex.from_arrays(ns, random_graph(rng, M, 10), random_passages(rng, M, 7),
                                      H, precision="fp16")
    np.testing.assert_array_equal(di.search_batch(Q, k)[0], _host(ns, got_i))
    with pytest.raises(ValueError, match="precision must be one of"):
        _gpu.DeviceIndex.from_arrays(ns, random_graph(rng, M, 10), random_passages(rng, M, 7),
                                     H, precision="bf16")


def test_the_per_call_gpu_door_writes_nothing_into_the_graph(rng, monkeypatch):
    """``backend="gpu"`` per call (run here on the numpy namespace): the same results as the
    CPU kernels, one device copy per object held by the kernels package (not in the
    object's ``__dict__``), dropped when the object goes."""
    import gc
    monkeypatch.setattr(K, "resolve", lambda b: b if b == "gpu" else "cpu")
    monkeypatch.setattr(_gpu, "gpu_namespace", lambda: NS)
    g, pm = random_graph(rng, 300, 40), random_passages(rng, 300, 60)
    _, indptr, ids, vals = _seed_batch(rng, 300, 6)
    sids = ids
    want = K.propagate_batch(g, indptr, sids, vals, 0.5, backend="cpu")
    K.readout_topk_batch(pm, *want, 5, backend="cpu")
    before = (set(g.__dict__), set(pm.__dict__))  # what the CPU kernels cache on them
    for _ in range(2):
        got = K.propagate_batch(g, indptr, sids, vals, 0.5, backend="gpu")
        P, S = K.readout_topk_batch(pm, *got, 5, backend="gpu")
    for b in range(6):  # the same z per question (the CSR entries may come in other order)
        dense = []
        for zp, zi, zv in (got, want):
            z = np.zeros(300)
            np.add.at(z, zi[zp[b]:zp[b + 1]], zv[zp[b]:zp[b + 1]])
            dense.append(z)
        np.testing.assert_allclose(dense[0], dense[1], rtol=1e-10, atol=1e-13)
    P2, S2 = K.readout_topk_batch(pm, *want, 5, backend="cpu")
    np.testing.assert_allclose(S, S2, rtol=1e-10, atol=1e-14)
    assert (set(g.__dict__), set(pm.__dict__)) == before
    keys = {(id(g), "graph"), (id(pm), "pmap")}
    assert keys <= set(K._DEVICE_COPIES)
    del g, pm
    gc.collect()
    assert not keys & set(K._DEVICE_COPIES)


# ------------------------------------------------------------------ the select kernel (emulated)
from evireform.kernels import _select  # noqa: E402


def _reference_topk(S, k, positive_only=True):
    """Columns of the k best scores a row, ties by lower column; -1 / 0 padding."""
    B, n = S.shape
    out = np.full((B, min(k, n)), -1, np.int64)
    for b in range(B):
        ok = np.flatnonzero((S[b] > 0) if positive_only else ~np.isnan(S[b]))
        o = ok[np.lexsort((ok, -S[b, ok].astype(np.float64)))][:k]
        out[b, :len(o)] = o
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("B,n,k,L", [(1, 1, 1, 4), (3, 10, 1, 4), (4, 50, 7, 32),
                                     (2, 9, 9, 64), (5, 300, 20, 128), (3, 5000, 100, 2048),
                                     (2, 700, 64, 256), (6, 40, 40, 4096)])
def test_block_select_emulation_equals_the_reference(rng, dtype, B, n, k, L):
    """Scores with many ties (few distinct values), zeros, negatives, -inf and NaN masks and
    a row with nothing valid, cut into slices of L: the select kernel's emulation, its slots
    shuffled, then the candidate reduction and the final sort give the reference's top k."""
    S = (rng.integers(-3, 6, (B, n)) / 4).astype(dtype)
    S[0, : n // 2] += (rng.random(n // 2) * (n > 20)).astype(dtype)
    S[:, ::7] = -np.inf
    if n > 3:
        S[-1, 3] = np.nan
    if B > 2:
        S[2] = -np.inf
    for positive_only in (True, False):
        keys = _gpu.cpu_namespace()
        ns = keys
        kk = min(k, n)
        c = _select.select_scores(ns, S, 1000, kk, L, positive_only=positive_only,
                                  rng=np.random.default_rng(1))
        assert c.shape == (B, -(-n // L) * kk)
        c = _select.reduce_keys(ns, c, kk, L, rng=np.random.default_rng(2))
        assert c.shape[1] <= max(kk, L)
        c = _select.reduce_keys(ns, c, kk, L)
        ids, vals = _select.decode_keys(np, _select.sort_keys(ns, c), half=dtype == np.float16)
        want = _reference_topk(S, kk, positive_only)
        np.testing.assert_array_equal(ids, np.where(want >= 0, want + 1000, -1))
        got_v = np.where(want >= 0, np.take_along_axis(S, np.maximum(want, 0), 1), 0)
        np.testing.assert_array_equal(vals, got_v.astype(np.float32))


def test_block_select_slots_and_early_exit():
    """One block by hand: fewer valid keys than k (all taken, the rest 0), exactly k, and
    keys that differ only in the last byte (all eight passes run)."""
    few = np.array([[0, 5, 0, 9, 0, 0]], np.uint64)
    assert sorted(_select.emulate_block_select(few, 4)[0].tolist()) == [0, 0, 5, 9]
    base = np.uint64(0xABCDEF0123456700)
    close = (base + np.arange(16, dtype=np.uint64))[None, ::-1].copy()
    got = _select.emulate_block_select(close, 3)[0]
    assert sorted(got.tolist()) == [int(base) + 13, int(base) + 14, int(base) + 15]
    assert _select.emulate_block_select(np.zeros((2, 8), np.uint64), 3).tolist() == [[0] * 3] * 2


def test_keys_order_scores_then_lower_id(rng):
    S = np.array([[0.5, 0.25, 0.5, -0.5, 0.0, np.inf]], np.float32)
    k = _select.score_keys(S, 7, positive_only=False)
    order = np.argsort(-k[0].astype(np.float64), kind="stable")
    assert (k[0][order][:-1] > k[0][order][1:]).all()  # unique
    ids, vals = _select.decode_keys(np, np.sort(k, axis=1)[:, ::-1])
    np.testing.assert_array_equal(ids[0], [12, 7, 9, 8, 11, 10])
    np.testing.assert_array_equal(vals[0], [np.inf, 0.5, 0.5, 0.25, 0.0, -0.5])
    h = S.astype(np.float16)
    ids16, vals16 = _select.decode_keys(np, np.sort(_select.score_keys(h, 7), axis=1)[:, ::-1],
                                        half=True)
    np.testing.assert_array_equal(ids16[0], [12, 7, 9, 8, -1, -1])
    np.testing.assert_array_equal(vals16[0], [np.inf, 0.5, 0.5, 0.25, 0, 0])
    assert _select.slice_length(100) == 2048 and _select.slice_length(1000) == 4096
    assert _select.slice_length(1025) is None


@pytest.mark.parametrize("k", [5, 100, 1500])
def test_search_through_the_select_kernel_equals_the_namespace_reference(rng, k):
    """cosine_topk_batch (select kernel, emulated, slot order shuffled) against the
    array-namespace scan it replaced, tile for tile: bitwise the same ids and scores, with
    exact ties (duplicated rows) and k above the kernel's limit (the reference path)."""
    H = unit_rows(rng, 6000, 12)
    H[100:140] = H[3000]  # 41 identical rows: ties across tiles
    Q = np.concatenate([unit_rows(rng, 4, 12), H[3000:3001]])
    for budget in (5 * 14 * 700, 1 << 30):
        got = _gpu.cosine_topk_batch(NS, H, Q, k, budget=budget, rng=np.random.default_rng(3))
        want = _gpu.cosine_topk_reference(NS, H, Q, k, budget=budget)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    kk = min(k, 41)
    assert got[0][4, :kk].tolist() == (list(range(100, 140)) + [3000])[:kk]


def test_select_source_and_emulation_name_the_same_kernels():
    """The emulation dispatches to the kernels select.cu defines, with their parameters."""
    src = (Path(_gpu.__file__).with_name("select.cu")).read_text()
    names = set(re.findall(r'extern "C" __global__ void (\w+)', src))
    assert names == {"select_f32", "select_f16", "select_keys", "sort_rows_desc"}
    used = set(re.findall(r'"((?:select|sort_rows)_\w+)"', Path(_select.__file__).read_text()))
    used -= {"select_scores"}  # a Python name in __all__
    assert used == names


@pytest.mark.parametrize("B,k", [(1, 1), (3, 2), (4, 5), (2, 64), (3, 100), (2, 1000)])
def test_bitonic_sort_emulation_sorts_rows_largest_first(rng, B, k):
    """The sort kernel's network (emulated stage by stage): each row largest first, with
    zero keys (empty slots) last, for k from 1 to 1,000 (padding to a power of two)."""
    keys = rng.integers(1, 1 << 62, (B, k), dtype=np.uint64)
    keys[:, ::3] = 0
    got = _select.emulate_sort_rows_desc(keys)
    np.testing.assert_array_equal(got, np.sort(keys, axis=1)[:, ::-1])
    np.testing.assert_array_equal(_select.sort_keys(NS, keys), got)
