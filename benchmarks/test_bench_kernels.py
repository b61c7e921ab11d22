"""pytest-benchmark suite for the kernels, each next to its obvious peer.

Run: ``make bench`` (or ``pytest benchmarks --benchmark-only``).  JIT compilation is kept out
of the timings by a warm-up round (``benchmark.pedantic``).  Compare ours/peer within one run.
"""
import numpy as np
import pytest

import evireform.kernels as K
from evireform.kernels import reference as R

from helpers import random_graph, random_passages, unit_rows

RNG = np.random.default_rng(20261130)


def _run(benchmark, fn, *args):
    return benchmark.pedantic(fn, args=args, warmup_rounds=1, rounds=20, iterations=1)


@pytest.fixture(scope="module")
def emb():
    return unit_rows(RNG, 100_000, 384), unit_rows(RNG, 1, 384)[0]


@pytest.mark.benchmark(group="cosine_topk 100k x 384")
def test_cosine_topk_ours(benchmark, emb):
    H, q = emb
    _run(benchmark, K.cosine_topk, H, q, 100)


@pytest.mark.benchmark(group="cosine_topk 100k x 384")
def test_cosine_topk_numpy_argpartition(benchmark, emb):
    H, q = emb

    def peer():
        s = H @ q
        top = np.argpartition(-s, 100)[:100]
        return top[np.argsort(-s[top], kind="stable")]
    _run(benchmark, peer)


@pytest.fixture(scope="module")
def graph():
    M, Ne = 200_000, 40_000
    g = random_graph(RNG, M, Ne, max_ents=4, p_isolated=0.05)
    seed_ids = RNG.choice(M, 18, replace=False)
    return g, seed_ids, RNG.random(18)


@pytest.mark.benchmark(group="propagate 200k props, 18-nonzero seed")
def test_propagate_ours(benchmark, graph):
    g, i, v = graph
    _run(benchmark, K.propagate, g, i, v, 0.5)


@pytest.mark.benchmark(group="propagate 200k props, 18-nonzero seed")
def test_propagate_scipy_chain(benchmark, graph):
    g, i, v = graph
    A = R.incidence_matrix(g.a_indptr, g.a_indices, g.n_entities)
    AT = A.T.tocsr()
    s = R.seed_vector(g.n_props, i, v)

    def peer():
        x = g.inv_w * s
        return 0.5 * s + 0.5 * (A @ (g.inv_deg * (AT @ x)) - g.diag * x)
    _run(benchmark, peer)


@pytest.fixture(scope="module")
def readout_case():
    M, N = 1_000_000, 150_000
    pm = random_passages(RNG, M, N)
    ids = RNG.choice(M, 5000, replace=False)
    return pm, ids, RNG.random(5000)


@pytest.mark.benchmark(group="readout 1M props, sparse z")
def test_readout_ours(benchmark, readout_case):
    pm, i, v = readout_case
    _run(benchmark, K.readout_topk, pm, i, v, 20)


@pytest.mark.benchmark(group="readout 1M props, sparse z")
def test_readout_bincount(benchmark, readout_case):
    pm, i, v = readout_case

    def peer():
        z = np.zeros(pm.n_props)
        z[i] = v
        sc = np.bincount(pm.owner, weights=z, minlength=pm.n_passages) * pm.inv_sqrt
        top = np.argpartition(-sc, 20)[:20]
        return top[np.argsort(-sc[top], kind="stable")]
    _run(benchmark, peer)


@pytest.fixture(scope="module")
def batch64(emb):
    return unit_rows(RNG, 64, 384)


@pytest.mark.benchmark(group="cosine_topk_batch 100k x 384, 64 queries")
def test_cosine_topk_batch_ours(benchmark, emb, batch64):
    _run(benchmark, K.cosine_topk_batch, emb[0], batch64, 100)


@pytest.mark.benchmark(group="cosine_topk_batch 100k x 384, 64 queries")
def test_cosine_topk_batch_numpy_argpartition(benchmark, emb, batch64):
    H = emb[0]

    def peer():
        S = batch64 @ H.T
        top = np.argpartition(-S, 100, axis=1)[:, :100]
        return np.take_along_axis(top, np.argsort(-np.take_along_axis(S, top, 1), 1,
                                                  kind="stable"), 1)
    _run(benchmark, peer)


@pytest.fixture(scope="module")
def seed_batch(graph):
    g = graph[0]
    B = 256
    ids = np.concatenate([RNG.choice(g.n_props, 18, replace=False) for _ in range(B)])
    return np.arange(B + 1) * 18, ids, RNG.random(len(ids))


@pytest.mark.benchmark(group="propagate_batch 200k props, 256 seeds")
def test_propagate_batch_ours(benchmark, graph, seed_batch):
    _run(benchmark, K.propagate_batch, graph[0], *seed_batch, 0.5)


@pytest.mark.benchmark(group="propagate_batch 200k props, 256 seeds")
def test_propagate_batch_scipy(benchmark, graph, seed_batch):
    import scipy.sparse as sp
    g = graph[0]
    indptr, ids, vals = seed_batch
    A = R.incidence_matrix(g.a_indptr, g.a_indices, g.n_entities)
    AT = A.T.tocsr()
    cols = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    S = sp.csr_matrix((vals, (ids, cols)), shape=(g.n_props, len(indptr) - 1))
    Dw, De, Dg = sp.diags(g.inv_w), sp.diags(g.inv_deg), sp.diags(g.diag)

    def peer():
        X = Dw @ S
        return 0.5 * S + 0.5 * (A @ (De @ (AT @ X)) - Dg @ X)
    _run(benchmark, peer)
