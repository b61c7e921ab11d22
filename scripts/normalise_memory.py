"""Peak memory of normalising 1M x 384 float32 embeddings, as PropositionIndex does when it
is built.  Usage: ``python scripts/normalise_memory.py [ROWS] [DIM]``.
Prints the traced peak (tracemalloc; numpy reports its allocations there) beyond the input."""
import sys
import time
import tracemalloc

import numpy as np

from evireform.embed import normalise_rows

M = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
d = int(sys.argv[2]) if len(sys.argv) > 2 else 384
X = np.random.default_rng(0).standard_normal((M, d), dtype=np.float32)
tracemalloc.start()
t = time.perf_counter()
Y = normalise_rows(X)
took = time.perf_counter() - t
peak = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
print(f"{M:,} x {d} float32 ({X.nbytes / 2**20:.0f} MiB): peak {peak / 2**20:.0f} MiB beyond "
      f"the input (result {Y.nbytes / 2**20:.0f} MiB), {took:.2f} s")
