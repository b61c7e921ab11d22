"""Paired bootstrap confidence intervals over questions (paper Appendix A.1 / C.3).

For a metric with per-question values a_q (EviReform) and b_q (the other method), the
statistic is the mean difference in points, 100 * mean(a - b).  Each of ``n_resamples``
resamples draws |Q| question indices with replacement (the same indices for both methods:
the pairing); the interval is the 2.5th and 97.5th percentile of the resampled statistic.
The generator is ``numpy.random.default_rng(base_seed + offset)`` with a deterministic offset
per dataset and metric, so every interval is reproducible.
"""
from __future__ import annotations

from typing import Any

import zlib

import numpy as np

BASE_SEED = 202707
N_RESAMPLES = 10_000


def seed_offset(dataset: str, metric: str) -> int:
    """A stable small offset from the dataset and metric names (crc32, not Python's hash)."""
    return zlib.crc32(f"{dataset}/{metric}".encode()) % 100_000


def paired_bootstrap(a, b, *, seed: int, n_resamples: int = N_RESAMPLES,
                     level: float = 0.95) -> dict[str, Any]:
    """Mean difference 100*(a-b) with its percentile interval."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    n = len(d)
    if n == 0:
        raise ValueError("paired_bootstrap needs at least one question")
    rng = np.random.default_rng(seed)
    means = np.empty(n_resamples)
    for lo in range(0, n_resamples, 1000):
        hi = min(n_resamples, lo + 1000)
        idx = rng.integers(0, n, size=(hi - lo, n))
        means[lo:hi] = d[idx].mean(axis=1)
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(means, [tail, 100 - tail])
    return {"diff": round(100 * float(d.mean()), 2), "ci": [round(100 * float(lo), 2),
                                                            round(100 * float(hi), 2)],
            "n_resamples": n_resamples, "seed": seed}
