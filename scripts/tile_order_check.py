"""Do the vector tiles give bitwise the plain loops' dot products on this machine?

    python scripts/tile_order_check.py [--trials 50]

The exact search scores a dimension that is a multiple of 16 with the vector tiles of
``kernels/_cpu.py``, whose order of summation is written out; the plain loops they replaced
(``_rows8_loop``, ``_rows2q4``, still used for other dimensions) sum in whatever order LLVM
picks for the machine.  Where the two agree, scores, and so rankings, are bitwise what they
were before the tiles.  Prints, per dimension, how many of the loop's scores differ.
"""
import argparse

import numpy as np

from evireform.kernels import _cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=50)
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


if __name__ == "__main__":
    main()
