"""Do the vector tiles give bitwise the plain loops' dot products on this machine?

    python scripts/tile_order_check.py [--trials 50] [--time]

The exact search scores a dimension that is a multiple of 16 with the vector tiles of
``kernels/_cpu.py``, whose order of summation is written out; the plain loops they replaced
(``_rows8_loop``, ``_rows2q4``, still used for other dimensions) sum in whatever order LLVM
picks for the machine.  Where the two agree, scores, and so rankings, are bitwise what they
were before the tiles.  Prints, per dimension, how many of the loop's scores differ.
``--time``: also the scoring alone (no top-k) of 10,000 x 384 rows by one query and by 64,
loops against tiles on numba's threads, with numpy's matrix product beside them
(timed as ``evireform bench`` times its cases).
"""
import argparse

import numpy as np
from numba import njit, prange

from evireform.bench import times
from evireform.kernels import _cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--time", action="store_true", help="also time loops against tiles")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    total = 0
    for d in (16, 32, 64, 128, 384, 768, 1024):
        differ = 0
        for _ in range(args.trials):
            H = rng.standard_normal((8, d)).astype(np.float32)
            Q = rng.standard_normal((4, d)).astype(np.float32)
            tile = np.zeros(8, np.float32)
            loop = np.zeros(8, np.float32)
            _cpu._rows8(H, 0, Q[0], tile, 0)
            _cpu._rows8_loop(H, 0, Q[0], loop, 0)
            differ += int((tile.view(np.uint32) != loop.view(np.uint32)).sum())
            tb = np.zeros((4, 6), np.float32)
            _cpu._dot_block(H, 0, 6, Q, tb, np.zeros((2, d), np.float32))
            lb = np.zeros((4, 2), np.float32)
            _cpu._rows2q4(H, 0, Q, 0, lb, 0)
            differ += int((tb[:, :2].view(np.uint32) != lb.view(np.uint32)).sum())
        print(f"d = {d:4d}: {differ} of {args.trials * 16} loop scores differ from the tiles'")
        total += differ
    print("the tiles reproduce the loops bitwise here" if total == 0 else
          "the loops sum in another order here: scores moved in their last bits")
    if args.time:
        timing()


@njit(parallel=True)
def _loops1(H, q, S):
    for c in prange(H.shape[0] // 8):
        _cpu._rows8_loop(H, 8 * c, q, S, 8 * c)


@njit(parallel=True)
def _tiles1(H, q, S):
    for c in prange(H.shape[0] // 8):
        _cpu._T8x1(H, 8 * c, q, 0, S, 8 * c)


@njit(parallel=True)
def _loops64(H, Q, S):
    for c in prange(H.shape[0] // 6):
        for p in range(3):
            for b in range(0, Q.shape[0], 4):
                _cpu._rows2q4(H, 6 * c + 2 * p, Q, b, S, 6 * c + 2 * p)


@njit(parallel=True)
def _tiles64(H, Q, S):
    for c in prange(H.shape[0] // 6):
        for b in range(0, Q.shape[0], 4):
            _cpu._T6x4(H, 6 * c, Q, b, S, 6 * c)


def _median_us(f, reps: int = 7) -> float:
    """The median of ``reps`` timings by the bench's harness (a pause, a 0.25 s loop)."""
    return float(np.median([times([f], repeat=20, min_s=0.25)[0] for _ in range(reps)])) * 1e6


def timing() -> None:
    rng = np.random.default_rng(1)
    M = 9984  # a multiple of 6 and 8: every row in a full tile
    H = rng.standard_normal((M, 384)).astype(np.float32)
    Q = rng.standard_normal((64, 384)).astype(np.float32)
    s1, S64 = np.empty(M, np.float32), np.empty((64, M), np.float32)
    rows = [("one query", lambda: _loops1(H, Q[0], s1), lambda: _tiles1(H, Q[0], s1),
             lambda: H @ Q[0]),
            ("64 queries", lambda: _loops64(H, Q, S64), lambda: _tiles64(H, Q, S64),
             lambda: Q @ H.T)]
    print(f"\nscoring {M:,} x 384 float32 rows (no top-k), the median of 7 timings by "
          f"the bench's harness:\n")
    print("| queries | loops | tiles | loops / tiles | numpy |")
    print("|---|---:|---:|---:|---:|")
    for name, loops, tiles, peer in rows:
        a, b, c = (_median_us(f) for f in (loops, tiles, peer))
        print(f"| {name} | {a:.0f} us | {b:.0f} us | {a / b:.2f}x | {c:.0f} us |")


if __name__ == "__main__":
    main()
