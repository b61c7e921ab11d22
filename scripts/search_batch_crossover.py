"""Where batched exact search should leave the single-query kernel
(``kernels.config.SEARCH_SMALL_BATCH``): a few queries over the MuSiQue index's embeddings,
with the cache flushed before each call (as between a retrieval's steps), looped through the
single-query kernel and through the batch kernel; the two must agree bitwise.

    python scripts/search_batch_crossover.py [--data ../shared/data] [--repeat 30]
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args(argv)
    from evireform import kernels as K
    from evireform.cache import cached_index
    from evireform.embed import get_embedder
    from evireform.kernels import config
    idx, _, _ = cached_index(Path(args.data) / "musique/musique_corpus.json",
                             get_embedder("minilm"), show_progress=False)
    H = idx.embeddings
    rng = np.random.default_rng(0)
    junk = np.ones((64 << 20) // 8)  # larger than the last-level cache

    def cold(f):
        ts = []
        for _ in range(args.repeat):
            junk.sum()
            t = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t)
        return float(np.median(ts)) * 1e3

    saved = config.SEARCH_SMALL_BATCH
    print(f"{H.shape[0]:,} x {H.shape[1]} float32 embeddings, cache flushed before each call")
    print("| queries | looped single-query kernel | batch kernel | bitwise equal |")
    print("|---:|---:|---:|---|")
    try:
        for B in (1, 2, 3, 4, 8):
            Q = H[rng.choice(len(H), B)] + 0.01
            Q = (Q / np.linalg.norm(Q, axis=1, keepdims=True)).astype(np.float32)
            config.SEARCH_SMALL_BATCH = B
            loop, r1 = cold(lambda: K.cosine_topk_batch(H, Q, 2)), K.cosine_topk_batch(H, Q, 2)
            config.SEARCH_SMALL_BATCH = 0
            batch, r2 = cold(lambda: K.cosine_topk_batch(H, Q, 2)), K.cosine_topk_batch(H, Q, 2)
            same = np.array_equal(r1[0], r2[0]) and np.array_equal(r1[1], r2[1])
            print(f"| {B} | {loop:.2f} ms | {batch:.2f} ms | {same} |")
    finally:
        config.SEARCH_SMALL_BATCH = saved
    return 0


if __name__ == "__main__":
    sys.exit(main())
