"""Sharded search on clustered synthetic embeddings: exact shards equal the unsharded search;
HNSW shards' recall@k against exact search, and the latency of each, side by side.

    python scripts/shard_recall.py --n 200000 --shards 1,4,8 --queries 200
"""
import argparse
import json
import time

import numpy as np

from evireform.bench.synthetic import clustered_embeddings
from evireform.kernels import cosine_topk_batch
from evireform.engine.shards import Shard, ShardedSearcher, shard_bounds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--shards", default="1,4,8")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    H = clustered_embeddings(rng, a.n, a.dim)
    Q = H[rng.choice(a.n, a.queries, replace=False)] + \
        0.05 * rng.standard_normal((a.queries, a.dim)).astype(np.float32)
    Q /= np.linalg.norm(Q, axis=1, keepdims=True)
    cosine_topk_batch(H[:1000], Q[:8], a.k)  # compile the kernels before any clock starts
    t = time.perf_counter()
    want_i, want_s = cosine_topk_batch(H, Q, a.k)
    t_exact = time.perf_counter() - t
    rows = []
    for S in [int(x) for x in a.shards.split(",")]:
        ex = ShardedSearcher([Shard.build(H[lo:hi], lo) for lo, hi in shard_bounds(a.n, S)])
        t = time.perf_counter()
        gi, gs = ex.search_batch(Q, a.k)
        t_ex = time.perf_counter() - t
        t = time.perf_counter()
        hn = ShardedSearcher.from_index(type("I", (), {"embeddings": H})(), S, hnsw=True)
        t_build = time.perf_counter() - t
        t = time.perf_counter()
        hi_, _ = hn.search_batch(Q, a.k)
        t_h = time.perf_counter() - t
        rec = float(np.mean([len(set(x[x >= 0]) & set(y[y >= 0])) / max(1, (y >= 0).sum())
                             for x, y in zip(hi_, want_i)]))
        rows.append({"shards": S, "exact_equal": bool(np.array_equal(gi, want_i)
                                                      and np.array_equal(gs, want_s)),
                     "exact_ms_per_query": 1e3 * t_ex / a.queries,
                     "hnsw_build_s": t_build, "hnsw_ms_per_query": 1e3 * t_h / a.queries,
                     f"hnsw_recall@{a.k}": rec})
        print(json.dumps(rows[-1]))
    out = {"n": a.n, "dim": a.dim, "k": a.k, "queries": a.queries,
           "unsharded_exact_ms_per_query": 1e3 * t_exact / a.queries, "rows": rows}
    print(json.dumps(out, indent=1))
    if a.json:
        open(a.json, "w").write(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
