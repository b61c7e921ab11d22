"""The exact search of an int8 index (``index --precision int8``) against the float32 scan.

    python scripts/int8_search_cost.py [--rows 10000,100000] [--queries 20]

For each size: random unit rows of dimension 384 (as the bench's synthetic data), their int8
codes (``kernels.quantize_int8``), then per query the median time of
``kernels.quantized_topk_batch`` (an exact integer scan of the codes, the candidates
re-scored in float32) and of ``kernels.cosine_topk`` (the float32 scan), top-100, and
whether every result is bitwise the same.
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
    ap.add_argument("--rows", default="10000,100000")
    ap.add_argument("--queries", type=int, default=20)
    args = ap.parse_args(argv)
    import evireform.kernels as K
    rng = np.random.default_rng(0)
    print("| rows | int8 codes + exact re-score | float32 scan | ratio | bitwise equal |")
    print("|---:|---:|---:|---:|---|")
    for M in (int(x) for x in args.rows.split(",")):
        H = rng.standard_normal((M, 384)).astype(np.float32)
        H /= np.linalg.norm(H, axis=1, keepdims=True)
        codes, scale = K.quantize_int8(H)
        Q = rng.standard_normal((args.queries, 384)).astype(np.float32)
        Q /= np.linalg.norm(Q, axis=1, keepdims=True)
        same = True
        for q in Q:
            a = K.quantized_topk_batch(codes, scale, H, q[None], 100)
            b = K.cosine_topk_batch(H, q[None], 100)
            same &= all(np.array_equal(x, y) for x, y in zip(a, b))

        def median(f):
            ts = []
            for _ in range(5):
                for q in Q:
                    t = time.perf_counter()
                    f(q)
                    ts.append(time.perf_counter() - t)
            return float(np.median(ts))
        t8 = median(lambda q: K.quantized_topk_batch(codes, scale, H, q[None], 100))
        t32 = median(lambda q: K.cosine_topk(H, q, 100))
        print(f"| {M:,} | {t8 * 1e6:.0f} us | {t32 * 1e6:.0f} us | {t32 / t8:.2f}x | "
              f"{'yes' if same else 'NO'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
