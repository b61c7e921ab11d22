"""How OpenMP's wait policy moves the single-query exact search against numpy's.

    python scripts/wait_policy_cost.py [--rows 10000] [--reps 8]

For each policy (``OMP_WAIT_POLICY=PASSIVE``, which ``evireform bench`` sets; libgomp's
spin count at 1,000 / 10,000 / 100,000; the default), a fresh process times
``kernels.cosine_topk`` (top-100) and numpy's ``H @ q`` + ``argpartition`` + ``argsort`` on
random unit rows of dimension 384, as the bench does: each side in its own 0.25 s loop after
a short pause, both in turn, ``--reps`` times; then prints the median ratio numpy / ours
(above 1: ours faster), its range, and numpy's plain ``H @ q``.  The policy must be set
before the OpenMP runtime loads, hence one process per policy.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POLICIES = [("OMP_WAIT_POLICY=PASSIVE (evireform bench)", {"OMP_WAIT_POLICY": "PASSIVE"}),
            ("GOMP_SPINCOUNT=1000", {"GOMP_SPINCOUNT": "1000"}),
            ("GOMP_SPINCOUNT=10000", {"GOMP_SPINCOUNT": "10000"}),
            ("GOMP_SPINCOUNT=100000", {"GOMP_SPINCOUNT": "100000"}),
            ("unset (libgomp's default)", {})]


def measure(rows: int, reps: int) -> dict:
    """This process's ratios (its policy is whatever the environment set)."""
    sys.path.insert(0, str(ROOT))
    import numpy as np
    import evireform.kernels as K
    rng = np.random.default_rng(0)
    H = rng.standard_normal((rows, 384)).astype(np.float32)
    H /= np.linalg.norm(H, axis=1, keepdims=True)
    qs = rng.standard_normal((50, 384)).astype(np.float32)

    def numpy_topk(q):
        s = H @ q
        i = np.argpartition(-s, 100)[:100]
        return i[np.argsort(-s[i])]
    sides = {"ours": lambda q: K.cosine_topk(H, q, 100), "numpy": numpy_topk,
             "matvec": lambda q: H @ q}
    got: dict = {name: [] for name in sides}
    for _ in range(reps):
        for name, f in sides.items():
            time.sleep(0.05)
            f(qs[0])
            ts, i = [], 0
            end = time.perf_counter() + 0.25
            while time.perf_counter() < end:
                t = time.perf_counter()
                f(qs[i % 50])
                ts.append(time.perf_counter() - t)
                i += 1
            got[name].append(float(np.median(ts)))
    ratio = [n / o for n, o in zip(got["numpy"], got["ours"])]
    return {"ratio": float(np.median(ratio)), "lo": min(ratio), "hi": max(ratio),
            "ours_us": float(np.median(got["ours"])) * 1e6,
            "numpy_us": float(np.median(got["numpy"])) * 1e6,
            "matvec_us": float(np.median(got["matvec"])) * 1e6}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=10000)
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.rows, args.reps)))
        return 0
    print(f"top-100 of one query over {args.rows:,} x 384 float32 rows, numpy / ours "
          f"(above 1: ours faster), median of {args.reps} alternating 0.25 s loops:\n")
    print("| policy | ours | numpy (matvec + top-100) | ratio | range | numpy matvec alone |")
    print("|---|---:|---:|---:|---|---:|")
    for label, extra in POLICIES:
        env = {k: v for k, v in os.environ.items()
               if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
        env.update(extra)
        out = subprocess.run([sys.executable, __file__, "--child", "--rows", str(args.rows),
                              "--reps", str(args.reps)], env=env, capture_output=True,
                             text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"| {label} | {r['ours_us']:.0f} us | {r['numpy_us']:.0f} us | "
              f"{r['ratio']:.2f}x | {r['lo']:.2f}-{r['hi']:.2f} | {r['matvec_us']:.0f} us |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
