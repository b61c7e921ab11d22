"""Every kernel backend against the numpy/scipy reference, degenerate cases included."""
import os

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import evireform.kernels as K
import evireform.kernels.runtime as KR
from evireform.kernels import EntityGraph, PassageMap, reference as R

from helpers import random_graph, random_passages, random_seed, random_seed_rows, unit_rows

BACKENDS = ["cpu", "auto"]


# ------------------------------------------------------------------ cosine top-k
def _assert_topk_equal(H, q, ids, vals, rids, rvals):
    """Same ranking as the reference up to float32 rounding: scores agree, and where the ids
    differ the two candidates' exact scores are tied within rounding."""
    np.testing.assert_allclose(vals, rvals, rtol=1e-5, atol=1e-6)
    assert len(ids) == len(rids)
    bad = ids != rids
    if bad.any():
        exact = H.astype(np.float64) @ q.astype(np.float64)
        np.testing.assert_allclose(exact[ids[bad]], exact[rids[bad]], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("M,d,k", [(1, 4, 1), (7, 3, 10), (100, 16, 5), (40000, 32, 100),
                                   (70001, 8, 3)])
def test_cosine_topk_matches_reference(rng, backend, M, d, k):
    H = unit_rows(rng, M, d)
    q = unit_rows(rng, 1, d)[0]
    ids, vals = K.cosine_topk(H, q, k, backend=backend)
    rids, rvals = R.cosine_topk(H, q, k)
    _assert_topk_equal(H, q, ids, vals, rids, rvals)
    assert np.all(vals > 0)
    assert ids.dtype == np.int64 and vals.dtype == np.float32


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("M,d,B,k,block", [(5, 4, 3, 10, 977), (5, 4, 9, 10, 2),
                                           (300, 16, 7, 20, 977), (301, 16, 13, 20, 7),
                                           (70000, 8, 4, 50, 977), (70001, 8, 9, 50, 977)])
def test_cosine_topk_batch_matches_reference(rng, backend, M, d, B, k, block, monkeypatch):
    # blocks of an odd size: many blocks, odd rows through the padded path, a ragged last one
    monkeypatch.setattr(K.config, "BATCH_BLOCK_ROWS", block)
    H = unit_rows(rng, M, d)
    Q = unit_rows(rng, B, d)
    ids, vals = K.cosine_topk_batch(H, Q, k, backend=backend)
    rids, rvals = R.cosine_topk_batch(H, Q, k)
    for b in range(B):
        _assert_topk_equal(H, Q[b], ids[b], vals[b], rids[b], rvals[b])


@pytest.mark.parametrize("M,d,share,B", [(1, 4, 1.0, 1), (9, 3, 0.5, 2), (300, 16, 0.1, 1),
                                          (300, 16, 0.1, 7), (40000, 32, 0.3, 3),
                                          (40000, 32, 0.02, 9), (50, 8, 0.0, 2)])
def test_cosine_topk_over_rows_equals_the_sub_matrix_bitwise(rng, M, d, share, B,
                                                             monkeypatch):
    """``rows=``: a search over some rows read in place equals, score for score and bit for
    bit, the search of a matrix of just those rows (ids mapped back); small batches read the
    rows eight at a time, larger ones copy blocks (a tiny block size: many blocks)."""
    monkeypatch.setattr(K.config, "SUBSET_BLOCK_BYTES", 64 * d * 4)
    H = unit_rows(rng, M, d)
    H.setflags(write=False)  # as a memory-mapped index
    rows = np.flatnonzero(rng.random(M) < share).astype(np.int64)
    Q = unit_rows(rng, B, d)
    for k in (1, 5, 50):
        ids, vals = K.cosine_topk_batch(H, Q, k, rows=rows)
        sub_i, sub_v = K.cosine_topk_batch(np.ascontiguousarray(H[rows]), Q, k)
        np.testing.assert_array_equal(vals, sub_v)
        np.testing.assert_array_equal(ids, np.where(sub_i >= 0, rows[np.maximum(sub_i, 0)], -1))
        rids, rvals = R.cosine_topk_batch(H, Q, k, rows)
        for b in range(B):
            _assert_topk_equal(H, Q[b], ids[b], vals[b], rids[b], rvals[b])
        i1, v1 = K.cosine_topk(H, Q[0], k, rows=rows)
        n = int(np.sum(ids[0] >= 0))
        np.testing.assert_array_equal(i1, ids[0][:n])
        np.testing.assert_array_equal(v1, vals[0][:n])


def test_cosine_topk_rows_are_checked(rng):
    H = unit_rows(rng, 10, 4)
    for bad in ([3, 2], [1, 1], [-1, 2], [2, 10], [0.5]):
        with pytest.raises(ValueError, match="rows"):
            K.cosine_topk(H, H[0], 3, rows=np.asarray(bad))
    ids, vals = K.cosine_topk(H, H[0], 3, rows=np.zeros(0, np.int64))
    assert ids.size == 0 and vals.size == 0
    bi, _ = K.cosine_topk_batch(H, H[:2], 3, rows=[])
    assert bi.shape == (2, 0)


def test_cosine_topk_ties_and_nonpositive():
    # exact ties (duplicated rows) resolve to the lower id; zero and negative scores are excluded
    H = np.array([[0, 1], [1, 0], [0, 1], [-1, 0], [1, 0], [0, -1]], dtype=np.float32)
    q = np.array([1, 0], dtype=np.float32)
    ids, vals = K.cosine_topk(H, q, 10)
    np.testing.assert_array_equal(ids, [1, 4])
    np.testing.assert_array_equal(vals, [1, 1])
    ids, vals = K.cosine_topk(H, q, 1)
    np.testing.assert_array_equal(ids, [1])
    bi, bv = K.cosine_topk_batch(H, np.stack([q, -q, np.zeros(2, np.float32)]), 3)
    np.testing.assert_array_equal(bi, [[1, 4, -1], [3, -1, -1], [-1, -1, -1]])
    np.testing.assert_array_equal(bv[2], [0, 0, 0])
    # the same over whole vector blocks (scores compared 16 at a time): zero scores stay out
    E = np.eye(16, dtype=np.float32)
    pick = np.random.default_rng(7).integers(0, 3, 4000)
    H = np.ascontiguousarray(np.stack([E[0], E[1], -E[0]])[pick])
    want = np.flatnonzero(pick == 0)
    for k in (5, 700, 4000):
        ids, vals = K.cosine_topk(H, E[0], k)
        np.testing.assert_array_equal(ids, want[:k])
        np.testing.assert_array_equal(vals, np.ones(min(k, len(want)), np.float32))
        bi, _ = K.cosine_topk_batch(H, np.stack([E[0]] * 6 + [E[2]]), k)
        np.testing.assert_array_equal(bi[0, :min(k, len(want))], want[:k])
        assert (bi[0, len(want):] == -1).all() and (bi[6] == -1).all()


def test_kth_largest_matches_a_sort(rng):
    # the candidate buffers' cut: quickselect on a copy, duplicates, runs and sorted input
    from evireform.kernels import _cpu
    for trial in range(3000):
        n = int(rng.integers(1, 700))
        k = int(rng.integers(1, n + 1))
        kind = trial % 5
        a = (rng.random(n) if kind == 0 else rng.integers(0, 4, n) if kind == 1
             else np.full(n, 0.25) if kind == 2 else np.sort(rng.random(n))
             if kind == 3 else np.sort(rng.random(n))[::-1]).astype(np.float32)
        a = np.ascontiguousarray(a)
        before = a.copy()
        assert _cpu._kth_largest(a, n, k) == np.sort(a)[n - k]
        np.testing.assert_array_equal(a, before)  # the buffer itself is not reordered


@pytest.mark.parametrize("k", [1, 7, 300, 1000, 6000])
@pytest.mark.parametrize("block", [128, 600])
def test_cosine_topk_keeps_the_lowest_ids_among_ties_across_buffer_cuts(rng, k, block,
                                                                          monkeypatch):
    # every row is one of six vectors, so scores tie exactly in long runs: the candidate
    # buffers are cut to their best k many times with ties at the bar, and a later row equal
    # to the bar must stay out; the result must be the (score desc, id asc) order exactly
    monkeypatch.setattr(K.config, "BATCH_BLOCK_ROWS", block)
    d, M = 16, 5000
    V = unit_rows(rng, 6, d)
    H = np.ascontiguousarray(V[rng.integers(0, 6, M)])
    Q = unit_rows(rng, 9, d)
    sc = K.cosine_scores(H, Q)  # one value per vector and query, bitwise
    for b in range(len(Q)):
        keep = np.flatnonzero(sc[b] > 0)
        want = keep[np.lexsort((keep, -sc[b][keep].astype(np.float64)))][:k]
        ids, vals = K.cosine_topk(H, Q[b], k)
        np.testing.assert_array_equal(ids, want)
        np.testing.assert_array_equal(vals, sc[b][want])
        rows = np.arange(0, M, 3)
        kr = keep[keep % 3 == 0]
        want_r = kr[np.lexsort((kr, -sc[b][kr].astype(np.float64)))][:k]
        np.testing.assert_array_equal(K.cosine_topk(H, Q[b], k, rows=rows)[0], want_r)
    bi, bv = K.cosine_topk_batch(H, Q, k)
    for b in range(len(Q)):
        ids, vals = K.cosine_topk(H, Q[b], k)
        np.testing.assert_array_equal(bi[b, :len(ids)], ids)
        np.testing.assert_array_equal(bv[b, :len(ids)], vals)
        assert (bi[b, len(ids):] == -1).all()


def test_cosine_topk_empty_and_bad_input(rng):
    H = np.zeros((0, 8), np.float32)
    ids, vals = K.cosine_topk(H, np.ones(8, np.float32), 5)
    assert len(ids) == 0 and len(vals) == 0
    bi, _ = K.cosine_topk_batch(H, np.ones((2, 8), np.float32), 5)
    assert (bi == -1).all()
    H = unit_rows(rng, 10, 8)
    with pytest.raises(ValueError, match="k must be a positive integer"):
        K.cosine_topk(H, H[0], 0)
    with pytest.raises(ValueError, match="d = 8"):
        K.cosine_topk(H, np.ones(7, np.float32), 3)
    with pytest.raises(ValueError, match="NaN"):
        K.cosine_topk(H, np.full(8, np.nan, np.float32), 3)
    with pytest.raises(ValueError, match="backend"):
        K.cosine_topk(H, H[0], 3, backend="tpu")


@pytest.mark.parametrize("serial", [False, True])
def test_cosine_topk_refuses_a_nan_or_inf_query_on_every_path(rng, monkeypatch, serial):
    """The whole-index scan checks the query inside its kernel (threaded or on the calling
    thread); a row subset, an empty index and a batch check it before: each refuses one
    NaN or inf anywhere in the query, and returns nothing."""
    monkeypatch.setattr(K.config, "SERIAL_SCAN_BYTES", 1 << 40 if serial else -1)
    H = unit_rows(rng, 300, 16)
    for bad in (np.nan, np.inf, -np.inf):
        for at in (0, 7, 15):
            q = H[3].copy()
            q[at] = bad
            for call in (lambda: K.cosine_topk(H, q, 5),
                         lambda: K.cosine_topk(H, q, 5, rows=[1, 2, 40]),
                         lambda: K.cosine_topk(H[:0], q, 5),
                         lambda: K.cosine_topk_batch(H, np.stack([H[0], q]), 5)):
                with pytest.raises(ValueError, match="NaN or inf"):
                    call()
    ids, vals = K.cosine_topk(H, H[3], 5)  # a finite query still scans
    assert ids[0] == 3 and len(ids) == 5


def test_gpu_backend_raises_clear_error(rng):
    H = unit_rows(rng, 10, 8)
    with pytest.raises(K.BackendUnavailable, match="backend='gpu'"):
        K.cosine_topk(H, H[0], 3, backend="gpu")


# ------------------------------------------------------------------ propagation
def _dense(M, ids, vals):
    z = np.zeros(M)
    np.add.at(z, ids, vals)
    return z


def _check_propagate(graph, seed_ids, seed_vals, alpha, backend="cpu"):
    ids, vals = K.propagate(graph, seed_ids, seed_vals, alpha, backend=backend)
    assert len(np.unique(ids)) == len(ids)
    A = R.incidence_matrix(graph.a_indptr, graph.a_indices, graph.n_entities)
    s = R.seed_vector(graph.n_props, seed_ids, seed_vals)
    want = R.propagate_dense(A, s, alpha)
    np.testing.assert_allclose(_dense(graph.n_props, ids, vals), want, rtol=1e-10, atol=1e-12)
    return ids, vals


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("M,Ne,n_seed", [(1, 1, 1), (10, 3, 4), (200, 50, 18), (3000, 400, 18),
                                         (500, 5, 12)])
def test_propagate_matches_reference(rng, backend, M, Ne, n_seed):
    g = random_graph(rng, M, Ne)
    for alpha in (0.5, 0.0, 1.0, 0.3):
        _check_propagate(g, *random_seed(rng, M, n_seed), alpha, backend)


def test_propagate_degenerate(rng):
    # p0 isolated; e0 degree 0; e1 degree 1 (only p1); e2 shared by p2, p3
    g = EntityGraph.from_lists([[], [1], [2, 2], [2, 3]], n_entities=4)
    assert g.inv_deg[0] == 0 and g.inv_w[0] == 0 and g.inv_w[1] == 0
    # an isolated proposition and a degree-1-only proposition pass nothing on
    ids, vals = _check_propagate(g, [0, 1], [1.0, 2.0], 0.5)
    np.testing.assert_allclose(_dense(4, ids, vals), [0.5, 1.0, 0, 0])
    # empty seed
    ids, vals = K.propagate(g, [], [], 0.5)
    assert len(ids) == 0
    # repeated seed ids are summed
    _check_propagate(g, [2, 2, 3], [0.25, 0.25, 0.5], 0.5)
    # a graph with no entities at all
    g0 = EntityGraph.from_lists([[], []], n_entities=0)
    _check_propagate(g0, [1], [1.0], 0.5)
    with pytest.raises(ValueError, match="seed ids"):
        K.propagate(g, [4], [1.0])
    with pytest.raises(ValueError, match="alpha"):
        K.propagate(g, [1], [1.0], alpha=1.5)
    with pytest.raises(ValueError, match="alpha"):
        K.propagate(g, [1], [1.0], alpha=float("nan"))
    with pytest.raises(ValueError, match="differ in length"):
        K.propagate(g, [1, 2], [1.0])
    with pytest.raises(ValueError, match="NaN or inf"):
        K.propagate(g, [1], [np.inf])
    with pytest.raises(ValueError, match="backend"):
        K.propagate(g, [1], [1.0], backend="tpu")
    with pytest.raises(K.BackendUnavailable):
        K.propagate(g, [1], [1.0], backend="gpu")
    # alpha as an int or a numpy scalar, values as float32: the same z
    ref = _dense(4, *K.propagate(g, [1, 2], [0.5, 0.25], 1.0))
    for alpha in (1, np.float64(1.0), np.float32(1.0)):
        np.testing.assert_allclose(_dense(4, *K.propagate(g, [1, 2], [0.5, 0.25], alpha)), ref)
    np.testing.assert_allclose(
        _dense(4, *K.propagate(g, np.array([1, 2]), np.array([0.5, 0.25], np.float32), 1.0)), ref)


@pytest.mark.parametrize("backend", BACKENDS)
def test_propagate_batch_matches_single(rng, backend):
    M, Ne = 2000, 300
    g = random_graph(rng, M, Ne)
    seeds = [random_seed(rng, M, int(n)) for n in rng.integers(0, 19, size=37)]
    indptr = np.zeros(len(seeds) + 1, np.int64)
    indptr[1:] = np.cumsum([len(s[0]) for s in seeds])
    ids = np.concatenate([s[0] for s in seeds])
    vals = np.concatenate([s[1] for s in seeds])
    zp, zi, zv = K.propagate_batch(g, indptr, ids, vals, 0.4, backend=backend)
    assert len(seeds) > K.config.SMALL_BATCH  # the parallel kernel, not the small-batch path
    A = R.incidence_matrix(g.a_indptr, g.a_indices, Ne)
    for b, (si, sv) in enumerate(seeds):
        got = _dense(M, zi[zp[b]:zp[b + 1]], zv[zp[b]:zp[b + 1]])
        want = R.propagate_dense(A, R.seed_vector(M, si, sv), 0.4)
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_worked_example_propagation():
    """shared/docs/worked-example.md, to the sixth decimal."""
    g = EntityGraph.from_lists([[0, 1], [0], [1, 2], [3], [3, 2], [2], []], n_entities=4)
    np.testing.assert_allclose(g.diag, [1, .5, .833333, .5, .833333, .333333, 0], atol=1e-6)
    np.testing.assert_allclose(1 / g.inv_w[:6], [1, .5, 1.166667, .5, 1.166667, .666667],
                               atol=1e-6)
    s = np.array([0.642857142857 / 2, 0.357142857143 / 2, 0, .125, .1875, .0625, .125])
    ids, vals = K.propagate(g, np.arange(7), s, 0.5)
    z = _dense(7, ids, vals)
    np.testing.assert_allclose(z, [0.25, 0.169643, 0.122768, 0.102679, 0.171875, 0.058036,
                                   0.0625], atol=1e-6)
    pm = PassageMap.from_owner([0, 0, 1, 2, 2, 1, 2], 3)
    pids, sc = K.readout_topk(pm, ids, vals, 3)
    np.testing.assert_array_equal(pids, [0, 2, 1])
    np.testing.assert_allclose(sc, [0.296732, 0.194598, 0.127847], atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_propagate_property(data):
    M = data.draw(st.integers(1, 30))
    Ne = data.draw(st.integers(0, 8))
    lists = [data.draw(st.lists(st.integers(0, Ne - 1), max_size=4)) if Ne else []
             for _ in range(M)]
    g = EntityGraph.from_lists(lists, n_entities=Ne)
    seed_ids = data.draw(st.lists(st.integers(0, M - 1), max_size=6))
    seed_vals = data.draw(st.lists(st.floats(0, 1), min_size=len(seed_ids),
                                   max_size=len(seed_ids)))
    alpha = data.draw(st.floats(0, 1))
    _check_propagate(g, seed_ids, seed_vals, alpha)


# ------------------------------------------------------------------ readout
def _check_readout(pm, z_ids, z_vals, k, got_ids, got_scores):
    z = _dense(pm.n_props, z_ids, z_vals)
    full = R.readout_scores(z, pm.owner, pm.n_passages)
    rids, rsc = R.readout_topk(z, pm.owner, pm.n_passages, k)
    assert len(got_ids) == len(rids) == min(k, pm.n_passages)
    np.testing.assert_allclose(got_scores, rsc, rtol=1e-12, atol=1e-15)
    # ids agree wherever the reference scores are not tied within float tolerance
    mismatch = got_ids != rids
    np.testing.assert_allclose(full[got_ids[mismatch]], full[rids[mismatch]], rtol=1e-12)
    assert len(np.unique(got_ids)) == len(got_ids)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("M,N,nz,k", [(1, 1, 1, 1), (20, 10, 5, 3), (20, 10, 5, 50),
                                      (5000, 800, 300, 20), (5000, 800, 0, 10), (0, 4, 0, 3)])
def test_readout_matches_reference(rng, backend, M, N, nz, k):
    pm = random_passages(rng, M, N)
    z_ids = rng.choice(M, size=min(nz, M), replace=False) if M else np.zeros(0, int)
    z_vals = rng.random(len(z_ids))
    z_vals[::5] = 0  # touched but zero
    got = K.readout_topk(pm, z_ids, z_vals, k, backend=backend)
    _check_readout(pm, z_ids, z_vals, k, *got)


def test_readout_ties_and_empty_passages():
    # passages 1 and 3 have no propositions; passages 0 and 2 tie
    pm = PassageMap.from_owner([0, 2, 2, 4], 5)
    assert pm.inv_sqrt[1] == 0 and pm.inv_sqrt[3] == 0
    ids, sc = K.readout_topk(pm, [0, 1, 2], [1.0, 2 ** -0.5, 2 ** -0.5], 5)
    np.testing.assert_array_equal(ids, [0, 2, 1, 3, 4])
    np.testing.assert_allclose(sc, [1, 1, 0, 0, 0])
    ids, sc = K.readout_topk(pm, [], [], 2)
    np.testing.assert_array_equal(ids, [0, 1])
    with pytest.raises(ValueError, match="k must be"):
        K.readout_topk(pm, [], [], -1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_readout_batch_matches_single(rng, backend):
    M, N, B, k = 3000, 500, 23, 15
    pm = random_passages(rng, M, N)
    rows = [rng.choice(M, size=int(n), replace=False) for n in rng.integers(0, 200, size=B)]
    indptr = np.zeros(B + 1, np.int64)
    indptr[1:] = np.cumsum([len(r) for r in rows])
    ids = np.concatenate(rows)
    vals = rng.random(len(ids))
    bi, bs = K.readout_topk_batch(pm, indptr, ids, vals, k, backend=backend)
    for b in range(B):
        lo, hi = indptr[b], indptr[b + 1]
        _check_readout(pm, ids[lo:hi], vals[lo:hi], k, bi[b], bs[b])


@pytest.mark.parametrize("indptr", [[1, 3], [0, 2], [0, 4], [0, 3, 1, 3], [], [[0, 3]],
                                    np.array([0, 3], np.int32), [0.0, 3.0]])
def test_batched_kernels_check_the_seeds_csr_rows(rng, indptr):
    """The batched propagation, ranking and readout refuse a CSR indptr that does not start
    at 0, decreases, or does not end at the number of ids (one kernel call checks ids,
    values and indptr); an int32 or float indptr that is right is read as int64."""
    M, Ne = 50, 20
    g = random_graph(rng, M, Ne)
    pm = random_passages(rng, M, 10)
    ids, vals = np.array([1, 4, 7]), np.array([0.2, 0.3, 0.5])
    calls = [lambda p: K.propagate_batch(g, p, ids, vals, 0.5),
             lambda p: K.rank_topk_batch(g, pm, p, ids, vals, 0.5, 5),
             lambda p: K.readout_topk_batch(pm, p, ids, vals, 5)]
    ok = np.asarray(indptr).ndim == 1 and len(indptr) == 2 and list(indptr) == [0, 3]
    for call in calls:
        if ok:
            call(indptr)  # read as int64
        else:
            with pytest.raises(ValueError, match="indptr must start at 0"):
                call(indptr)
    # the ids and values are checked before the indptr, as before
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 50\)"):
        K.rank_topk_batch(g, pm, [1, 3], np.array([1, 4, 99]), vals, 0.5, 5)
    with pytest.raises(ValueError, match="NaN or inf"):
        K.rank_topk_batch(g, pm, [0, 3], ids, np.array([0.2, np.nan, 0.5]), 0.5, 5)


@pytest.mark.parametrize("B", [1, 2, K.config.SMALL_BATCH + 5])
def test_rank_topk_batch_checks_every_row_on_either_path(rng, B, monkeypatch):
    """A few rows are ranked on the calling thread, the kernel checking the seeds itself;
    more go to threads, checked first: either way a bad id, value or indptr in the last row
    is refused, nothing is returned, and a good batch ranks the same on both paths."""
    M, Ne = 60, 25
    g = random_graph(rng, M, Ne)
    pm = random_passages(rng, M, 12)
    indptr = np.arange(B + 1, dtype=np.int64) * 2
    ids = rng.integers(0, M, 2 * B)
    vals = rng.random(2 * B)
    P, S = K.rank_topk_batch(g, pm, indptr, ids, vals, 0.5, 6)
    for busy in (False, True):  # busy: every row on the calling thread
        monkeypatch.setattr(KR, "machine_busy", lambda busy=busy: busy)
        P2, S2 = K.rank_topk_batch(g, pm, indptr, ids, vals, 0.5, 6)
        assert np.array_equal(P, P2) and np.array_equal(S, S2)
        bad = ids.copy()
        bad[-1] = M
        with pytest.raises(ValueError, match=r"ids must lie in \[0, 60\)"):
            K.rank_topk_batch(g, pm, indptr, bad, vals, 0.5, 6)
        nan = vals.copy()
        nan[-1] = np.inf
        with pytest.raises(ValueError, match="NaN or inf"):
            K.rank_topk_batch(g, pm, indptr, ids, nan, 0.5, 6)
        short = indptr.copy()
        short[-1] -= 1
        with pytest.raises(ValueError, match="indptr must start at 0"):
            K.rank_topk_batch(g, pm, short, ids, vals, 0.5, 6)


def test_w_nnz_matches_materialised(rng):
    for M, Ne in [(1, 1), (50, 10), (800, 120)]:
        g = random_graph(rng, M, Ne)
        W = R.transition_W(R.incidence_matrix(g.a_indptr, g.a_indices, Ne))
        assert K.w_nnz(g) == W.nnz


def test_entity_graph_validation():
    with pytest.raises(ValueError, match="entity ids"):
        EntityGraph.from_csr([0, 1], [5], 3)
    with pytest.raises(ValueError, match="indptr"):
        EntityGraph.from_csr([0, 2], [1], 3)
    with pytest.raises(ValueError, match="owner"):
        PassageMap.from_owner([0, 3], 3)


def _fma32(a, b, c):
    """float32 a * b + c rounded once (exactly, through fractions)."""
    from fractions import Fraction
    exact = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    x = np.float32(float(exact))
    near = [x, np.nextafter(x, np.float32(np.inf)), np.nextafter(x, np.float32(-np.inf))]
    err = [abs(Fraction(float(y)) - exact) for y in near]
    best = min(err)
    tied = [y for y, e in zip(near, err) if e == best]
    return min(tied, key=lambda y: int(np.float32(y).view(np.uint32)) & 1)  # ties to even


def _documented_dot(h, q):
    """The order kernels/_simd.py documents: sixteen fused running sums, then pairwise."""
    lanes = [np.float32(0)] * 16
    for t in range(len(h)):
        lanes[t % 16] = _fma32(h[t], q[t], lanes[t % 16])
    v8 = [np.float32(lanes[i] + lanes[i + 8]) for i in range(8)]
    v4 = [np.float32(v8[i] + v8[i + 4]) for i in range(4)]
    return np.float32(np.float32(v4[0] + v4[2]) + np.float32(v4[1] + v4[3]))


@pytest.mark.parametrize("d", [16, 48, 384])
def test_vector_tiles_sum_in_the_documented_order(rng, d):
    # the tiles (d a multiple of 16) define the scores on every machine: single query and
    # batch, head and tail rows, all equal the written-out order bitwise
    H = rng.standard_normal((13, d)).astype(np.float32)
    Q = rng.standard_normal((5, d)).astype(np.float32)
    S = K.cosine_scores(H, Q)
    for b in range(len(Q)):
        want = np.array([_documented_dot(H[r], Q[b]) for r in range(len(H))], np.float32)
        np.testing.assert_array_equal(S[b], want)
        np.testing.assert_array_equal(K.cosine_scores(H, Q[b:b + 1])[0], want)


@pytest.mark.parametrize("M,d", [(20000, 384), (1003, 5), (517, 33), (64, 768), (3, 7),
                                 (1001, 16), (259, 48)])
def test_single_and_batch_scores_are_bitwise_equal(rng, M, d):
    """A query's scores do not depend on the batch it is searched in (unlike BLAS): the
    single-query kernel and the batch kernel (vector tiles of the machine's family when d is
    a multiple of 16, 8 rows x 1 query and 2 rows x 4 queries as loops otherwise) must
    accumulate in the same order, for any d and for the tail rows."""
    from evireform.kernels import _cpu
    H = unit_rows(rng, M, d)
    Q = unit_rows(rng, 37, d)
    k = min(25, M)
    bi, bv = K.cosine_topk_batch(H, Q, k)
    S = K.cosine_scores(H, Q)
    for b in range(len(Q)):
        i, v = K.cosine_topk(H, Q[b], k)
        np.testing.assert_array_equal(i, bi[b][:len(i)])
        np.testing.assert_array_equal(v, bv[b][:len(i)])
        np.testing.assert_array_equal(S[b][i], v)
        one = np.empty(M, np.float32)
        _cpu.dot_one(H, Q[b], one)
        np.testing.assert_array_equal(one, S[b])
    np.testing.assert_array_equal(K.cosine_scores(H, Q[3:4])[0], S[3])
    np.testing.assert_allclose(S, Q @ H.T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("B", [1, 2, 3, 5])
def test_a_few_queries_search_alike_looped_or_batched(rng, B):
    """Up to config.SEARCH_SMALL_BATCH queries loop over the single-query kernel, more take
    the batch kernel: either way every query gets bitwise its single search's result."""
    H = unit_rows(rng, 3001, 48)
    Q = unit_rows(rng, B, 48)
    bi, bv = K.cosine_topk_batch(H, Q, 9)
    saved = K.config.SEARCH_SMALL_BATCH
    try:
        K.config.SEARCH_SMALL_BATCH = B  # the loop
        li, lv = K.cosine_topk_batch(H, Q, 9)
    finally:
        K.config.SEARCH_SMALL_BATCH = saved
    np.testing.assert_array_equal(bi, li)
    np.testing.assert_array_equal(bv, lv)
    for b in range(B):
        i, v = K.cosine_topk(H, Q[b], 9)
        np.testing.assert_array_equal(i, bi[b][:len(i)])
        np.testing.assert_array_equal(v, bv[b][:len(i)])


def test_small_batches_use_single_kernels_with_same_results(rng):
    g = random_graph(rng, 500, 60)
    pm = random_passages(rng, 500, 90)
    for B in (0, 1, K.config.SMALL_BATCH, K.config.SMALL_BATCH + 1):
        seeds = [random_seed(rng, 500, 6) for _ in range(B)]
        indptr = np.arange(B + 1) * 6
        ids = np.concatenate([s[0] for s in seeds]) if B else np.zeros(0, int)
        vals = np.concatenate([s[1] for s in seeds]) if B else np.zeros(0)
        zp, zi, zv = K.propagate_batch(g, indptr, ids, vals, 0.5)
        assert len(zp) == B + 1
        for b in range(B):
            si, sv = K.propagate(g, *seeds[b], 0.5)
            np.testing.assert_allclose(_dense(500, zi[zp[b]:zp[b + 1]], zv[zp[b]:zp[b + 1]]),
                                       _dense(500, si, sv), rtol=1e-12)
        bi, bs = K.readout_topk_batch(pm, zp, zi, zv, 7)
        assert bi.shape == (B, 7)
        for b in range(B):
            oi, os_ = K.readout_topk(pm, zi[zp[b]:zp[b + 1]], zv[zp[b]:zp[b + 1]], 7)
            np.testing.assert_array_equal(bi[b], oi)


def test_workspaces_are_left_clean(rng):
    """The packed workspace contract (_cpu.ws_views): after any propagation call, single or
    batched, acc/sbuf/yent are 0 and mark/emark False, so the next call starts clean."""
    from evireform.kernels import _WS, PropWorkspace, ReadWorkspace
    g = random_graph(rng, 400, 50)
    pm = random_passages(rng, 400, 70)
    for n in (0, 1, 7):
        K.propagate(g, *random_seed(rng, 400, n), 0.5)
        assert _WS.get(PropWorkspace, g.n_props, g.n_entities).is_clean()
    seeds = [random_seed(rng, 400, 5) for _ in range(K.config.SMALL_BATCH + 3)]
    indptr = np.r_[0, np.cumsum([len(s[0]) for s in seeds])]
    K.propagate_batch(g, indptr, np.concatenate([s[0] for s in seeds]),
                      np.concatenate([s[1] for s in seeds]), 0.5)
    assert _WS.get(PropWorkspace, g.n_props, g.n_entities).is_clean()
    K.readout_topk(pm, *random_seed(rng, 400, 9), 5)
    ws = _WS.get(ReadWorkspace, pm.n_passages)
    assert not ws.pacc.any() and not ws.pmark.any()


@pytest.mark.parametrize("M,Ne,m,Ne2", [(0, 0, 3, 4), (50, 10, 0, 10), (300, 40, 25, 55),
                                        (300, 40, 25, 40), (1, 1, 1, 1)])
def test_append_rows_equals_from_csr(rng, M, Ne, m, Ne2):
    """Appending propositions recomputes only what they touch, and equals a full build."""
    from evireform.kernels.graph import append_rows
    g = random_graph(rng, M, Ne) if M else EntityGraph.from_lists([], n_entities=Ne)
    new = [list(rng.integers(0, max(Ne2, 1), int(rng.integers(0, 4)))) if Ne2 else []
           for _ in range(m)]
    got = append_rows(g, new, Ne2)
    rows = [g.a_indices[g.a_indptr[i]:g.a_indptr[i + 1]] for i in range(M)] + new
    want = EntityGraph.from_lists(rows, n_entities=Ne2)
    for name in ("a_indptr", "a_indices", "at_indptr", "at_indices", "inv_deg", "diag",
                 "inv_w"):
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name


@pytest.mark.parametrize("M,Ne,p_drop", [(300, 40, 0.3), (300, 40, 0.0), (300, 40, 1.0),
                                         (50, 200, 0.5), (1, 1, 1.0)])
def test_remove_rows_equals_from_csr(rng, M, Ne, p_drop):
    from evireform.kernels.graph import remove_rows
    g = random_graph(rng, M, Ne)
    keep = rng.random(M) >= p_drop
    got, ents = remove_rows(g, keep)
    rows = [g.a_indices[g.a_indptr[i]:g.a_indptr[i + 1]] for i in range(M) if keep[i]]
    used = np.unique(np.concatenate(rows)) if rows else np.zeros(0, np.int64)
    np.testing.assert_array_equal(ents, used)
    remap = np.full(Ne, -1)
    remap[used] = np.arange(len(used))
    want = EntityGraph.from_lists([remap[r] for r in rows], n_entities=len(used))
    for name in ("a_indptr", "a_indices", "at_indptr", "at_indices", "inv_deg", "diag",
                 "inv_w"):
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name


@pytest.mark.parametrize("M,d,k", [(1, 8, 1), (5, 8, 10), (300, 16, 7), (2000, 32, 50),
                                   (5000, 64, 100), (400, 1024, 20), (9000, 384, 100)])
def test_int8_scan_with_exact_rescore_equals_the_exact_scan(rng, M, d, k):
    from evireform.kernels import cosine_topk_batch, quantize_int8, quantized_topk_batch
    H = unit_rows(rng, M, d)
    if M > 10:  # exact duplicates and near-duplicates: ties across the margin
        H[3] = H[7]
        H[11] = H[7] * np.float32(1 - 1e-7)
        H = (H / np.linalg.norm(H, axis=1, keepdims=True)).astype(np.float32)
    codes, scale = quantize_int8(H)
    assert codes.dtype == np.int8 and np.all(np.abs(H - codes * scale) <= scale / 2 + 1e-7)
    Q = np.concatenate([H[rng.integers(0, M, 3)] + 0.1 * unit_rows(rng, 3, d),
                        unit_rows(rng, 4, d), H[7:8]])
    Q = (Q / np.linalg.norm(Q, axis=1, keepdims=True)).astype(np.float32)
    # a query with no positive match, one with few, and the zero vector
    Q = np.concatenate([Q, -H.max(axis=0, keepdims=True), -Q[:1],
                        np.zeros((1, d), np.float32)]).astype(np.float32)
    want = cosine_topk_batch(H, Q, k)
    for margin in (0, 3, 64):  # a small margin must widen, not lose rows
        got = quantized_topk_batch(codes, scale, H, Q, k, margin=margin)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    with pytest.raises(ValueError, match="exceeds the int8 range"):
        quantize_int8(H * 2, scale)


@pytest.mark.parametrize("M,Ne", [(1, 1), (40, 0), (600, 90), (3000, 400)])
def test_batch_propagation_is_the_one_seed_kernel_bitwise(rng, M, Ne):
    """The batched kernel (rows written into their own slots from the expansion bounds,
    then moved together) gives every row exactly what the one-seed kernel gives that seed:
    the same ids in the same order, the same value bits, with repeated seeds, empty seeds,
    isolated propositions and zero-degree entities."""
    g = random_graph(rng, M, Ne)
    seeds = [random_seed(rng, M, int(n)) for n in rng.integers(0, 12, size=23)]
    seeds[3] = (np.zeros(0, np.int64), np.zeros(0))
    indptr = np.r_[0, np.cumsum([len(s[0]) for s in seeds])].astype(np.int64)
    ids = np.concatenate([s[0] for s in seeds]).astype(np.int64)
    vals = np.concatenate([s[1] for s in seeds])
    zp, zi, zv = K.propagate_batch(g, indptr, ids, vals, 0.35)
    assert len(zp) == len(seeds) + 1 and zp[-1] == len(zi) == len(zv)
    for b, (si, sv) in enumerate(seeds):
        oi, ov = K.propagate(g, si, sv, 0.35)
        np.testing.assert_array_equal(zi[zp[b]:zp[b + 1]], oi)
        np.testing.assert_array_equal(zv[zp[b]:zp[b + 1]].view(np.int64), ov.view(np.int64))
    from evireform.kernels import _WS, PropWorkspace
    assert _WS.get(PropWorkspace, g.n_props, g.n_entities).is_clean()


def test_batch_propagation_reuses_its_output_only_when_no_result_holds_it(rng, monkeypatch):
    """The kept output arrays are reused by the next call once the earlier result is gone,
    never while a caller still holds it (its values stay intact), and not at all above
    config.PROPAGATE_KEEP_BYTES."""
    g = EntityGraph.from_lists([[i % 30] for i in range(600)], n_entities=30)  # disjoint lists
    seeds = [random_seed(rng, 600, 6) for _ in range(K.config.SMALL_BATCH + 5)]
    indptr = np.r_[0, np.cumsum([len(s[0]) for s in seeds])].astype(np.int64)
    ids = np.concatenate([s[0] for s in seeds]).astype(np.int64)
    vals = np.concatenate([s[1] for s in seeds])
    want = [a.copy() for a in K.propagate_batch(g, indptr, ids, vals, 0.5)]

    def kept():
        return id(K._OUT_KEPT["pair"][0])

    def check(res):
        for a, b in zip(res, want):
            np.testing.assert_array_equal(a, b)
    K.release_buffers()
    r1 = K.propagate_batch(g, indptr, ids, vals, 0.5)
    assert r1[1].base is K._OUT_KEPT["pair"][0]  # a view of the kept buffer
    k1 = kept()
    r2 = K.propagate_batch(g, indptr, ids, vals, 0.5)  # r1 still held: a fresh buffer
    k2 = kept()
    assert k2 != k1
    check(r1)
    check(r2)
    del r1, r2
    r3 = K.propagate_batch(g, indptr, ids, vals, 0.5)  # nothing held: r2's buffer again
    assert kept() == k2
    check(r3)
    monkeypatch.setattr(K.config, "PROPAGATE_KEEP_BYTES", 0)
    K.release_buffers()
    check(K.propagate_batch(g, indptr, ids, vals, 0.5))
    assert not K._OUT_KEPT


@pytest.mark.parametrize("M,B", [(1, 1), (700, 1), (5000, 3), (9000, 9)])
def test_serial_twins_are_the_parallel_kernels_bitwise(rng, monkeypatch, M, B):
    """Small scans and readouts run the same kernels without threads: every public result
    is bitwise the same whichever side of config.SERIAL_SCAN_BYTES /
    SERIAL_READOUT_ENTRIES the input falls (both sides forced here)."""
    H = unit_rows(rng, M, 24)
    Q = unit_rows(rng, B, 24)
    pm = random_passages(rng, M, max(1, M // 3))
    indptr = np.r_[0, np.cumsum(rng.integers(0, 30, B))].astype(np.int64)
    zi = rng.integers(0, M, int(indptr[-1])).astype(np.int64)
    zv = rng.random(int(indptr[-1]))
    got = []
    monkeypatch.setattr(K.config, "BUSY_LOAD_PER_CPU", None)  # the pool side, even when busy
    for serial in (True, False):
        monkeypatch.setattr(K.config, "SERIAL_SCAN_BYTES", 1 << 40 if serial else -1)
        monkeypatch.setattr(K.config, "SERIAL_READOUT_ENTRIES", 1 << 40 if serial else -1)
        monkeypatch.setattr(K.config, "SEARCH_SMALL_BATCH", 1)
        got.append([K.cosine_topk(H, Q[0], 50), K.cosine_topk_batch(H, Q, 50),
                    K.readout_topk_batch(pm, indptr, zi, zv, 7)])
    for a, b in zip(*got):
        for x, y in zip(a, b):
            assert x.dtype == y.dtype
            np.testing.assert_array_equal(x, y)
    kern = K._kernels()
    assert kern.topk_one_serial.py_func.__qualname__ == "topk_one_serial"  # own cache files
    assert not kern.topk_batch_serial.targetoptions.get("parallel")


@pytest.mark.parametrize("B", [0, 1, 3, K.config.SMALL_BATCH + 3, 40])
def test_rank_topk_batch_is_propagate_then_readout_bitwise(rng, B):
    """The one-pass rank (z kept in the workspace) against propagate_batch followed by
    readout_topk_batch: the same passages and score bits, empty seeds and k > N included."""
    M = 900
    g, pm = random_graph(rng, M, 120), random_passages(rng, M, 200)
    indptr, ids, vals = random_seed_rows(rng, M, B)
    for k in (1, 10, 500):
        want = K.readout_topk_batch(pm, *K.propagate_batch(g, indptr, ids, vals, 0.3), k)
        got = K.rank_topk_batch(g, pm, indptr, ids, vals, 0.3, k)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1].view(np.int64), want[1].view(np.int64))
    with pytest.raises(ValueError, match="passage map covers"):
        K.rank_topk_batch(g, random_passages(rng, M + 1, 20), indptr, ids, vals, 0.3, 5)
    from evireform.kernels import _WS, PropWorkspace, ReadWorkspace
    assert _WS.get(PropWorkspace, g.n_props, g.n_entities).is_clean()
    ws = _WS.get(ReadWorkspace, pm.n_passages)
    assert not ws.pacc.any() and not ws.pmark.any()


@pytest.fixture(params=["numba", "numpy"])
def twin_path(request, monkeypatch):
    """Both paths of a kernel with a numpy twin (score_parts, mentions_outside): the numba
    kernel, and the twin a process that has not loaded numba runs for a small call (a
    one-shot question on a small index)."""
    monkeypatch.setattr(K, "_numba_free", lambda size, most: request.param == "numpy")
    return request.param


@pytest.mark.parametrize("B", [0, 1, 4, 30])
@pytest.mark.parametrize("M,N", [(1, 1), (40, 6), (900, 200)])
def test_score_parts_matches_reference_bitwise(rng, B, M, N, twin_path):
    """Each ranked passage's question and residual parts against the reference's
    dictionaries: empty seeds, repeated ids, splits of 0, of the whole row, past its end and
    negative, passages without propositions, -1 slots; the kernel's sums bit for bit."""
    from evireform.kernels import reference as R
    g, pm = random_graph(rng, M, max(1, M // 7)), random_passages(rng, M, N)
    indptr, ids, vals = random_seed_rows(rng, M, B)
    split = [int(x) for x in rng.integers(-2, 11, B)]
    for k in (1, 5, N + 3):
        P, _ = K.rank_topk_batch(g, pm, indptr, ids, vals, 0.5, k)
        P = P.copy()
        if P.size:
            P[rng.random(P.shape) < 0.1] = -1
        for alpha in (0.5, 1.0, 0.0):
            got = K.score_parts(pm, indptr, ids, vals, split, alpha, P)
            want = R.score_parts(pm.owner, pm.inv_sqrt, indptr, ids, vals, split, alpha, P)
            for x, y in zip(got, want):
                assert x.shape == P.shape and x.dtype == np.float64
                np.testing.assert_array_equal(x.view(np.int64), y.view(np.int64))
            if B and alpha > 0:  # the two parts add up to alpha * s read out per passage
                full = K.score_parts(pm, indptr, ids, vals, [10 ** 6] * B, alpha, P)[0]
                np.testing.assert_allclose(got[0] + got[1], full, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("B", [0, 1, 4, K.config.SMALL_BATCH + 3])
@pytest.mark.parametrize("M,N", [(1, 1), (40, 6), (900, 200)])
def test_rank_topk_batch_with_split_gives_score_parts_in_its_pass(rng, B, M, N, twin_path):
    """``split=`` makes the one-pass ranking return each ranked passage's parts too: the
    same passages and scores as without, and parts bitwise score_parts' over them, on the
    calling thread and in threads (B past SMALL_BATCH), splits of 0, past the row and
    negative, empty seeds, k past N; a split of the wrong length is refused."""
    g, pm = random_graph(rng, M, max(1, M // 7)), random_passages(rng, M, N)
    indptr, ids, vals = random_seed_rows(rng, M, B)
    split = [int(x) for x in rng.integers(-2, 11, B)]
    for k in (1, 5, N + 3):
        for alpha in (0.5, 1.0, 0.0):
            P, S = K.rank_topk_batch(g, pm, indptr, ids, vals, alpha, k)
            got = K.rank_topk_batch(g, pm, indptr, ids, vals, alpha, k, split=split)
            assert len(got) == 4
            np.testing.assert_array_equal(got[0], P)
            np.testing.assert_array_equal(got[1].view(np.int64), S.view(np.int64))
            want = K.score_parts(pm, indptr, ids, vals, split, alpha, P)
            for x, y in zip(got[2:], want):
                assert x.shape == P.shape and x.dtype == np.float64
                np.testing.assert_array_equal(x.view(np.int64), y.view(np.int64))
    with pytest.raises(ValueError, match="one entry per row"):
        K.rank_topk_batch(g, pm, indptr, ids, vals, 0.5, 3, split=[0] * (B + 1))


def test_check_csr_numpy_twin_gives_the_kernels_codes(rng):
    from evireform.kernels import _cpu
    for _ in range(400):
        n = int(rng.integers(0, 6))
        ids = rng.integers(-1, 5, n).astype(np.int64)
        vals = rng.choice([0.5, 1.0, np.nan, np.inf], n).astype(np.float64)
        indptr = np.sort(rng.integers(0, n + 1, int(rng.integers(0, 4)))).astype(np.int64)
        if rng.random() < 0.5:
            indptr = np.r_[0, indptr, n].astype(np.int64)
        if rng.random() < 0.2 and len(indptr) > 2:
            indptr = indptr[::-1].copy()
        assert K._check_csr_numpy(indptr, ids, vals, 4) == _cpu.check_csr(indptr, ids, vals, 4)


def test_score_parts_refuses_bad_input(rng, twin_path):
    g, pm = random_graph(rng, 30, 5), random_passages(rng, 30, 6)
    ids, vals = np.array([1, 2, 3]), np.array([0.2, 0.3, 0.5])
    P = np.array([[0, 1, -1]])
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 30\)"):
        K.score_parts(pm, [0, 3], np.array([1, 2, 30]), vals, [1], 0.5, P)
    with pytest.raises(ValueError, match="NaN or inf"):
        K.score_parts(pm, [0, 3], ids, np.array([0.2, np.nan, 0.5]), [1], 0.5, P)
    with pytest.raises(ValueError, match="indptr must start at 0"):
        K.score_parts(pm, [0, 2], ids, vals, [1], 0.5, P)
    with pytest.raises(ValueError, match=r"passages must lie in \[0, 6\)"):
        K.score_parts(pm, [0, 3], ids, vals, [1], 0.5, np.array([[0, 6]]))
    with pytest.raises(ValueError, match="one row per seed row"):
        K.score_parts(pm, [0, 3], ids, vals, [1], 0.5, np.array([0, 1]))
    with pytest.raises(ValueError, match="one entry per row"):
        K.score_parts(pm, [0, 3], ids, vals, [1, 2], 0.5, P)
    with pytest.raises(ValueError, match="alpha"):
        K.score_parts(pm, [0, 3], ids, vals, [1], 1.5, P)


# ------------------------------------------------------------------ mentions outside passages
@pytest.mark.parametrize("M,Ne,N", [(1, 1, 1), (10, 3, 4), (300, 50, 40), (3000, 400, 200),
                                    (40, 7, 1)])
def test_mentions_outside_matches_reference(rng, M, Ne, N, twin_path):
    g = random_graph(rng, M, Ne)  # isolated propositions, entities of degree 0 included
    owner = np.sort(rng.integers(0, N, M)).astype(np.int32)
    for _ in range(6):
        rows = rng.integers(0, Ne, int(rng.integers(0, 12)))  # repeats and empty lists too
        excluded = rng.integers(0, N, int(rng.integers(0, 5)))
        allowed = None if rng.random() < 0.4 else rng.random(int(rng.integers(0, N + 1))) < 0.6
        limit = int(rng.integers(1, 6))
        got = K.mentions_outside(g.at_indptr, g.at_indices, owner, rows, excluded, allowed,
                                 limit=limit)
        want = R.mentions_outside(g.at_indptr, g.at_indices, owner, rows, excluded, allowed,
                                  limit)
        for a, b in zip(got, want):
            assert a.dtype == np.int64 and np.array_equal(a, b)
        assert got[1].sum() == len(got[0]) and (got[1] <= limit).all()


def test_mentions_outside_numpy_twin_reads_and_refuses_as_the_kernel(rng):
    """The numpy twin gives the kernel's entries, counts and error codes on bad input too (an
    entry past ``owner``, a negative owner, before or after a row's ``limit`` kept ones)."""
    from evireform.kernels import _cpu
    for _ in range(300):
        n_own, n_rows = int(rng.integers(1, 8)), int(rng.integers(1, 5))
        lens = rng.integers(0, 5, n_rows)
        indptr = np.r_[0, np.cumsum(lens)].astype(np.int64)
        indices = rng.integers(-1, n_own + 1, int(indptr[-1])).astype(np.int32)
        owner = rng.integers(-1, 4, n_own).astype(np.int32)
        rows = rng.integers(0, n_rows, int(rng.integers(0, 4))).astype(np.int64)
        excluded = rng.integers(0, 4, int(rng.integers(0, 3))).astype(np.int64)
        allowed = rng.random(int(rng.integers(0, 5))) < 0.6
        limit = int(rng.integers(1, 4))
        a = K._mentions_outside_numpy(indptr, indices, owner, rows, excluded, allowed, limit)
        b = _cpu.mentions_outside(indptr, indices, owner, rows, excluded, allowed, limit)
        assert a[2] == b[2]
        if a[2] == 0:
            assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def test_mentions_outside_degenerate_and_bad_input(twin_path):
    # e0 has no mention; e1 is mentioned by p0 (passage 0) and p2 (passage 1); e2 by p1, p2
    g = EntityGraph.from_lists([[1], [2], [1, 2]], n_entities=3)
    owner = np.array([0, 0, 1], np.int32)
    ids, counts = K.mentions_outside(g.at_indptr, g.at_indices, owner, [0, 1, 2], limit=5)
    assert ids.tolist() == [0, 2, 1, 2] and counts.tolist() == [0, 2, 2]
    ids, counts = K.mentions_outside(g.at_indptr, g.at_indices, owner, [1, 2], [0], limit=5)
    assert ids.tolist() == [2, 2] and counts.tolist() == [1, 1]
    ids, counts = K.mentions_outside(g.at_indptr, g.at_indices, owner, [1, 2], [],
                                     np.array([True]), limit=1)  # passage 1 past the mask
    assert ids.tolist() == [0, 1] and counts.tolist() == [1, 1]
    ids, counts = K.mentions_outside(g.at_indptr, g.at_indices, owner, [], limit=1)
    assert ids.shape == (0,) and counts.shape == (0,)
    ids, counts = K.mentions_outside(g.at_indptr, g.at_indices, owner, [1, 2], [],
                                     np.zeros(0, bool), limit=5)  # an empty mask: nothing
    assert ids.shape == (0,) and counts.tolist() == [0, 0]
    for bad in ([3], [-1]):
        with pytest.raises(ValueError, match="rows must lie"):
            K.mentions_outside(g.at_indptr, g.at_indices, owner, bad, limit=1)
    with pytest.raises(ValueError, match="limit"):
        K.mentions_outside(g.at_indptr, g.at_indices, owner, [0], limit=0)
    # what the kernel reads is checked (numba does not check bounds): a row past indices,
    # a decreasing row, an entry past owner, a negative owner
    ind = np.asarray(g.at_indices)
    for ptr, idx, own, what in ([[0, 0, 9, 9], ind, owner, "indptr"],
                                [[0, 0, 2, 1], ind, owner, "indptr"],
                                [g.at_indptr, ind + 5, owner, "indices must lie"],
                                [g.at_indptr, ind, np.array([0, -1, 1], np.int32), "owners"]):
        with pytest.raises(ValueError, match=what):
            K.mentions_outside(np.asarray(ptr, np.int64), idx, own, [1, 2], limit=5)


def _busy(monkeypatch, load: float):
    """A machine whose 1-minute load average is ``load``, seen at the next check."""
    monkeypatch.setattr(KR.os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(KR, "_LOAD_SEEN", [-1e18, False, 0.0])


def test_machine_busy_reads_the_load_per_usable_core(monkeypatch):
    monkeypatch.setattr(K.config, "BUSY_LOAD_PER_CPU", 1.5)
    cpus = KR._usable_cpus()
    _busy(monkeypatch, 1.5 * cpus + 0.1)
    assert K.machine_busy()
    _busy(monkeypatch, 1.5 * cpus - 0.1)
    assert not K.machine_busy()
    # the load this process makes itself is not other work: 2 CPU seconds in 1 s of wall
    times = [os.times_result((10.0, 1.0, 0, 0, 0)), os.times_result((12.0, 1.0, 0, 0, 0))]
    monkeypatch.setattr(KR.os, "times", lambda: times.pop(0))
    clock = [100.0, 101.0]
    monkeypatch.setattr(KR.time, "monotonic", lambda: clock[0])
    _busy(monkeypatch, 1.5 * cpus + 1.0)
    assert K.machine_busy()  # the first check cannot tell its own share
    clock[0] = 101.0
    assert not K.machine_busy()  # 1.5 * cpus + 1 - 2 own cores
    monkeypatch.undo()
    monkeypatch.setattr(K.config, "BUSY_LOAD_PER_CPU", 1.5)
    _busy(monkeypatch, 1.5 * cpus - 0.1)
    assert not K.machine_busy()
    # read at most once a second: a load that changes now is seen only later
    monkeypatch.setattr(KR.os, "getloadavg", lambda: (99.0, 99.0, 99.0))
    assert not K.machine_busy()
    KR._LOAD_SEEN[0] -= 1.0
    assert K.machine_busy()
    monkeypatch.setattr(K.config, "BUSY_LOAD_PER_CPU", None)
    assert not K.machine_busy()

    def no_load():
        raise OSError("no load average here")
    monkeypatch.setattr(K.config, "BUSY_LOAD_PER_CPU", 1.5)
    monkeypatch.setattr(KR.os, "getloadavg", no_load)
    monkeypatch.setattr(KR, "_LOAD_SEEN", [-1e18, True, 0.0])
    assert not K.machine_busy()


def test_a_busy_machine_runs_every_kernel_on_the_calling_thread_bitwise(rng, monkeypatch):
    """Above config.BUSY_LOAD_PER_CPU the scans, readouts and batched propagation and rank
    never touch a thread pool (the threaded kernels and the pool raise here), whatever the
    size, and give bitwise what the threaded ones give on a quiet machine."""
    M, B = 9000, 9
    H, Q = unit_rows(rng, M, 24), unit_rows(rng, B, 24)
    g, pm = random_graph(rng, M, 700), random_passages(rng, M, 3000)
    seeds = [random_seed(rng, M, 6) for _ in range(B)]
    indptr = np.r_[0, np.cumsum([len(s[0]) for s in seeds])].astype(np.int64)
    ids = np.concatenate([s[0] for s in seeds]).astype(np.int64)
    vals = np.concatenate([s[1] for s in seeds])
    rows = np.arange(0, M, 2)
    monkeypatch.setattr(K.config, "SERIAL_SCAN_BYTES", -1)  # pool-sized inputs
    monkeypatch.setattr(K.config, "SERIAL_READOUT_ENTRIES", -1)
    monkeypatch.setattr(K.config, "BUSY_LOAD_PER_CPU", 1.5)

    def run():
        zp, zi, zv = K.propagate_batch(g, indptr, ids, vals, 0.5)
        return [K.cosine_topk(H, Q[0], 50), K.cosine_topk(H, Q[0], 50, rows=rows),
                K.cosine_topk_batch(H, Q, 50), (zp, zi, zv),
                K.readout_topk_batch(pm, zp, zi, zv, 7),
                K.rank_topk_batch(g, pm, indptr, ids, vals, 0.5, 7)]
    _busy(monkeypatch, 0.0)
    quiet = run()
    _busy(monkeypatch, 1e6)
    kern = K._kernels()

    def pool_used(*a, **kw):
        raise AssertionError("a thread pool was used on a busy machine")
    for name in ("topk_one", "topk_batch", "topk_rows", "readout_many"):
        monkeypatch.setattr(kern, name, pool_used)
    monkeypatch.setattr(K, "_pool", pool_used)
    busy = run()
    for a, b in zip(quiet, busy):
        for x, y in zip(a, b):
            assert x.dtype == y.dtype
            np.testing.assert_array_equal(x, y)


def test_warm_up_loads_every_kernel_a_retrieval_calls(tmp_path):
    """After warm_up, questions on a loaded index (one alone, and a batch past the small-batch
    size) compile or load no kernel of their own: a process's first answer does not pay
    for one (the retriever's ranking and its score parts included).  In a fresh process:
    in this one earlier tests have loaded the kernels already."""
    import subprocess
    import sys
    import textwrap
    code = textwrap.dedent(f"""
        from numba.core.registry import CPUDispatcher
        from evireform import EviReform, EviReformConfig
        from evireform.embed import HashingEmbedder
        from evireform.index import PropositionIndex
        from evireform.kernels import _cpu, runtime
        from evireform.types import Passage
        emb = HashingEmbedder(16)
        names = ["Ada Lovelace", "Charles Babbage", "Analytical Engine", "London", "Paris"]
        passages = [Passage(f"p{{i}}", names[i % 5],
                            f"{{names[i % 5]}} met {{names[(i + 1) % 5]}} in "
                            f"{{names[(i + 2) % 5]}}. {{names[(i + 3) % 5]}} wrote to "
                            f"{{names[i % 5]}}.") for i in range(40)]
        PropositionIndex.build(passages, emb, show_progress=False).save({str(tmp_path / "ix")!r})
        idx = PropositionIndex.load({str(tmp_path / "ix")!r})
        runtime.warm_up()
        def compiled():
            return {{n: len(d.signatures) for n, d in vars(_cpu).items()
                    if isinstance(d, CPUDispatcher)}}
        before = compiled()
        r = EviReform(idx, EviReformConfig(), embedder=emb)
        r.retrieve("Who met Charles Babbage?", 5)
        r.retrieve_many([f"Who wrote to {{n}}?" for n in names] * 4, 5)
        after = compiled()
        print({{n: (before.get(n), c) for n, c in after.items() if c != before.get(n)}})
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "{}", out.stdout[-2000:]


@pytest.mark.parametrize("R,NQ,split", [(8, 1, False), (1, 1, False), (6, 4, False),
                                        (1, 4, False), (6, 2, True), (8, 1, True),
                                        (3, 4, True), (1, 1, True)])
def test_every_tile_shape_sums_in_the_documented_order(rng, R, NQ, split):
    """Which tiles a scan uses depends on the machine's vector width (kernels._cpu.WIDE), so a
    machine of one kind never runs the other kind's tiles through the scans: each shape of
    both families, one-pass and split (two 8-lane passes), is compiled here on whatever
    machine runs the suite and must give the written-out order bit for bit."""
    from numba import njit
    from evireform.kernels import _cpu
    tile = _cpu.make_tile(R, NQ, split)

    @njit
    def run(H, Q, S):
        tile(H, 1, Q, 0, S, 2)  # from row 1 into columns 2.., so offsets are exercised

    for d in (16, 48):
        H = rng.standard_normal((R + 2, d)).astype(np.float32)
        Q = rng.standard_normal((NQ, d)).astype(np.float32)
        S = np.full((NQ, R + 3), 7.0, np.float32)
        run(H, Q, S)
        want = np.array([[_documented_dot(H[1 + i], Q[j]) for i in range(R)]
                         for j in range(NQ)], np.float32)
        np.testing.assert_array_equal(S[:, 2:2 + R], want)
        assert (S[:, :2] == 7.0).all() and (S[:, 2 + R:] == 7.0).all()  # nothing else written
        if NQ == 1:  # the single-query form: 1-D query and scores
            s1 = np.full(R + 3, 7.0, np.float32)
            run(H, Q[0], s1)
            np.testing.assert_array_equal(s1[2:2 + R], want[0])


@pytest.mark.parametrize("features,name,wide", [
    ("+avx512f,+avx2,+fma", "", True), ("+avx2,+fma,-avx512f", "", False),
    ("", "generic", False), ("", "znver1", False)])
def test_the_vector_width_follows_numbas_target(monkeypatch, features, name, wide):
    """The tile family follows the CPU numba compiles for: the features or CPU name set in
    numba's configuration (NUMBA_CPU_FEATURES / NUMBA_CPU_NAME) before the host's."""
    from numba.core import config as nconfig
    from evireform.kernels import _cpu
    monkeypatch.setattr(nconfig, "CPU_FEATURES", features or None)
    monkeypatch.setattr(nconfig, "CPU_NAME", name or None)
    assert _cpu.wide_vectors() is wide


def test_the_gather_loops_prefetch_ahead_and_the_hint_changes_nothing(rng):
    """Propagation and readout ask for the cache lines of the ids PF_AHEAD steps on
    (``llvm.prefetch`` in the compiled code); a hint changes no value, so a gather with it
    equals one without (the kernels' results against the reference are the tests above)."""
    from numba import njit
    from evireform.kernels import _cpu

    def gather(owner, z_ids, z_vals, pacc, ahead):
        n = z_ids.shape[0]
        for t in range(n):
            if ahead and t + ahead < n:
                _cpu._prefetch(owner, z_ids[t + ahead])
            pacc[owner[z_ids[t]]] += z_vals[t]

    fn = njit(cache=False)(gather)
    owner = np.sort(rng.integers(0, 500, 20_000))
    z_ids = rng.permutation(20_000)[:5_000]
    z_vals = rng.random(5_000)
    with_hint, without = np.zeros(500), np.zeros(500)
    fn(owner, z_ids, z_vals, with_hint, 16)
    fn(owner, z_ids, z_vals, without, 0)
    np.testing.assert_array_equal(with_hint.view(np.int64), without.view(np.int64))
    ir = next(iter(fn.inspect_llvm().values()))
    assert "llvm.prefetch" in ir
    import inspect
    for kern in (_cpu._spread, _cpu._finish, _cpu._readout_into):
        assert "_prefetch(" in inspect.getsource(kern.py_func), kern


def test_propagation_and_readout_over_an_index_large_enough_to_prefetch(rng):
    """Above PF_MIN_ROWS propositions the gather loops run with their prefetch hints: the
    same results as the reference, the one-pass rank bitwise the two kernels, the
    workspaces clean after."""
    from evireform.kernels import _cpu, _WS, PropWorkspace, ReadWorkspace
    M = _cpu.PF_MIN_ROWS + 4_000
    g, pm = random_graph(rng, M, 3_000, p_isolated=0.05), random_passages(rng, M, 20_000)
    assert int(np.diff(g.at_indptr).max()) > 4 * _cpu.PF_AHEAD  # hubs: long inner loops
    seeds = [random_seed(rng, M, 18) for _ in range(3)]
    for ids, vals in seeds:
        z_ids, z_vals = _check_propagate(g, ids, vals, 0.5, "cpu")
        assert len(z_ids) > 4 * _cpu.PF_AHEAD
        for k in (5, 30_000):  # a full heap, and a fill past the scored passages
            _check_readout(pm, z_ids, z_vals, k, *K.readout_topk(pm, z_ids, z_vals, k))
    indptr = np.r_[0, np.cumsum([len(s[0]) for s in seeds])].astype(np.int64)
    ids = np.concatenate([s[0] for s in seeds]).astype(np.int64)
    vals = np.concatenate([s[1] for s in seeds])
    want = K.readout_topk_batch(pm, *K.propagate_batch(g, indptr, ids, vals, 0.5), 50)
    got = K.rank_topk_batch(g, pm, indptr, ids, vals, 0.5, 50)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1].view(np.int64), want[1].view(np.int64))
    assert _WS.get(PropWorkspace, g.n_props, g.n_entities).is_clean()
    ws = _WS.get(ReadWorkspace, pm.n_passages)
    assert not ws.pacc.any() and not ws.pmark.any()
