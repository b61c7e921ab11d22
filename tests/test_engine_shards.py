"""Sharded proposition search (evireform.engine.shards): equal to unsharded search at any
shard count, its bounds and merge edges, HNSW shards re-scored exactly, and a retriever
with a sharded searcher ranking as a plain one."""

import numpy as np
import pytest
from distributed_common import _emb  # noqa: F401

from evireform import EviReform
from evireform.corpus import load_corpus
from evireform.embed import HashingEmbedder
from evireform.engine.hnsw import merge_topk
from evireform.engine.shards import Shard, ShardedSearcher, shard_bounds
from evireform.index import PropositionIndex


# --------------------------------------------------------------------------- sharded search
@pytest.mark.parametrize("n,d,shards,k", [(1, 4, 3, 5), (50, 8, 1, 7), (257, 16, 4, 20),
                                          (1000, 32, 7, 64), (5, 8, 8, 10)])
def test_sharded_exact_search_equals_unsharded(rng, n, d, shards, k):
    H = _emb(rng, n, d)
    H[n // 2:n // 2 + 2] = H[0]  # exact ties across shards: lower id first
    Q = _emb(rng, 9, d)
    Q[0] = H[0]
    from evireform.kernels import cosine_topk_batch
    want_i, want_s = cosine_topk_batch(H, Q, k)
    for workers in (1, 3):
        got_i, got_s = ShardedSearcher([Shard.build(H[lo:hi], lo) for lo, hi in
                                        shard_bounds(n, shards)],
                                       max_workers=workers).search_batch(Q, k)
        np.testing.assert_array_equal(got_i, want_i)
        np.testing.assert_array_equal(got_s, want_s)


def test_shard_bounds_and_merge_edges():
    assert shard_bounds(10, 3) == [(0, 3), (3, 6), (6, 10)]
    assert shard_bounds(2, 4) == [(0, 0), (0, 1), (1, 1), (1, 2)]
    with pytest.raises(ValueError):
        shard_bounds(5, 0)
    i, s = merge_topk([], 3, 2)
    assert (i == -1).all() and (s == 0).all()
    a = (np.array([[4, 1, -1]]), np.array([[0.9, 0.5, 0]], np.float32))
    b = (np.array([[2, 3, -1]]), np.array([[0.9, 0.7, 0]], np.float32))
    i, s = merge_topk([a, b], 4, 1)
    assert i.tolist() == [[2, 4, 3, 1]]
    with pytest.raises(ValueError, match="contiguously"):
        ShardedSearcher([Shard(np.zeros((2, 4), np.float32), 1)])


def test_sharded_hnsw_recall_and_rescored_scores(rng):
    H = _emb(rng, 3000, 24)
    Q = _emb(rng, 20, 24)
    from evireform.kernels import cosine_topk_batch
    want_i, want_s = cosine_topk_batch(H, Q, 10)
    s = ShardedSearcher.from_index(type("I", (), {"embeddings": H})(), 3, hnsw=True)
    got_i, got_s = s.search_batch(Q, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got_i, want_i)])
    assert recall >= 0.9
    # every returned score is the exact score of that row
    for b in range(len(Q)):
        ok = got_i[b] >= 0
        np.testing.assert_allclose(got_s[b][ok], H[got_i[b][ok]] @ Q[b], rtol=1e-5, atol=1e-6)


def test_retriever_with_sharded_searcher_equals_plain(data_dir):
    ps = load_corpus(data_dir / "musique" / "musique_corpus.json")[:400]
    e = HashingEmbedder(128)
    idx = PropositionIndex.build(ps, e, show_progress=False, hnsw=False)
    qs = ["Who founded the company that made the film?", "Where was the author born?"]
    plain = EviReform(idx, embedder=e).retrieve_many(qs, k=10)
    sharded = EviReform(idx, embedder=e, searcher=ShardedSearcher.from_index(idx, 5))
    for a, b in zip(plain, sharded.retrieve_many(qs, k=10)):
        assert a.ids == b.ids
        assert [p.score for p in a.passages] == [p.score for p in b.passages]
    with pytest.raises(ValueError, match="covers"):
        EviReform(idx, embedder=e, searcher=ShardedSearcher([Shard(idx.embeddings[:5], 0)]))
    with pytest.raises(TypeError, match="search_batch"):
        EviReform(idx, embedder=e, searcher=object())
