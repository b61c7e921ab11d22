"""The bench harness: timing, machine facts, the case registry, the report table and the
floors that ``--check`` enforces."""
from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

#: Minimum speedups (peer / ours) that ``--check`` enforces, in one place.  Set at about half
#: the lowest ratio seen over three ``--quick`` runs and one full run on this project's 2-core
#: machine (README, "Performance"), where a quick run's ratios move by up to 3x; a floor whose
#: case a run does not produce (full-size cases in quick mode) is skipped.
FLOORS = {
    # Re-derived (issue 51) from runs under the library's own thread policy (no
    # OMP_WAIT_POLICY set, what a user gets): two full quick runs and two filter runs on this
    # 2-core Xeon gave the lowest ratios in the comments; each floor is about half of the
    # lowest, for CI under load (a case under its floor is measured once more).
    "propagate/musique vs scipy chain": 2.0,        # 18.4x
    "propagate/musique vs materialised W": 3.0,     # 25.5x
    "propagate/2wiki vs scipy chain": 8.0,          # 35.9x
    "propagate/synthetic vs scipy chain": 12.0,     # 27.2x
    "propagate_batch/synthetic 200 seeds": 0.8,     # 4.2x
    "propagate_batch/synthetic 1000 seeds": 0.7,    # full runs only: 3.2x (PASSIVE)
    "readout/10k vs bincount": 0.6,                 # 1.29x
    "readout/100k vs bincount": 2.0,                # 4.56x
    "readout/1M vs bincount": 5.0,                  # full runs only: 42.8x (PASSIVE)
    # hnswlib's wheel (generic SIMD) against our scan: 0.58x here, but 0.28x and 0.29x on
    # the CI host of stop 64 (hnswlib 1.92 ms, the exact scan 532 us), a host where the scan
    # is faster and hnswlib slower; the floor catches a search gone brute force, not a host
    "hnsw/20k vs exact": 0.15,                      # 0.28x
    "cosine_topk/100k b1 vs numpy": 0.5,            # 1.01x
    "cosine_topk/100k b64 vs numpy": 0.75,          # 1.72x
    "cosine_topk/100k b1 vs faiss": 1.0,            # 2.07x
    "cosine_topk/100k b64 vs faiss": 1.5,           # 7.9x
    "hnsw/1M vs exact": 20.0,                       # full runs only: 102.6x (PASSIVE)
    "retrieve_core/musique vs igraph PPR": 2.0,     # 9.3x
    "retrieve_core/synthetic hnsw vs igraph PPR": 50.0,  # full runs only: 250.7x (PASSIVE)
    # the share of a question spent in its own scans: 0.50x / 0.60x under load in CI (the
    # target, >= 0.67x in full runs, is in TARGETS)
    "retrieve_core/musique vs its scans": 0.25,
    "update/2wiki add 1% vs rebuild": 25.0,         # 50.2x
    # issue 28's goal: a filtered query costs at most 1.5x an unfiltered one (0.67x as a
    # ratio).  Under the default policy the filtered query pays for the pools' spinning
    # workers (its small scans run on the calling thread): 1.09x-1.24x cached and
    # 0.60x-1.0x cold, against 2.0x-2.2x and 1.1x under OMP_WAIT_POLICY=PASSIVE
    "filter/2wiki 10% vs unfiltered": 0.5,
    "filter/2wiki 10% cold vs unfiltered": 0.3,
    # issue 67: the BM25 top-k beside bm25s's numba backend (quick runs, the machine loaded:
    # 2.9x b1 (a 6 us call, since its input check is one kernel call; 0.8x-2.3x before),
    # 2.3x-4.5x b64; the build 0.9x-1.8x).  b1 at 1.0: the "at least as fast"
    "lexical/10k b1 vs bm25s": 1.0,
    "lexical/10k b64 vs bm25s": 1.4,
    "lexical_build/10k vs bm25s": 0.6,
    # issue 84: one file added to a folder index takes at most twice a cold query (fresh
    # processes both; quick runs, 500 passages: see docs/performance.md)
    "user/update-one-file vs cold query": 0.5,
    # the same on about 50,000 passages (full runs only; hashing-384): a cold query there
    # 1.6-2.0 s, the update 2.2-2.3 s (0.84) since its save copies the parent's embeddings
    # by the kernel and never joins them (4.1-5.2 s before: a ratio near 0.35)
    "user/update-one-file 50k vs cold query": 0.5,
    # one question on a small index answers on numpy (make_engine's one_shot): a cold query
    # at least 1.2x faster than the same one waiting for numba's start (about 2x quiet);
    # a change that loads numba on the one-shot path brings it to 1x
    "user/cold-query vs numba's start": 1.2,
    # a build's wall against a fresh process that only encodes its propositions: 0.86 on
    # 5,853 passages, 0.75 quick (584: a process's start and the extraction weigh more),
    # 0.43 in a fresh CI clone whose first build compiled the numba kernels (re-measured:
    # 0.96); the target is 0.9 (docs/performance.md)
    "user/build vs its encoder": 0.35,
    # an update through the service journalled (one record) beside the same update saved
    # in full: 4.3x quick (584 passages), 8.7x on 5,853, 40x on 62,928 (docs/performance.md)
    "user/service-update vs full save": 2.0,
    "user/service-update 50k vs full save": 5.0,
}


#: what a full run should show (issue 51), each a ratio (peer / ours) to reach: the kernels
#: at parity with or ahead of their numpy / scipy peers under the library's own thread
#: policy, and a question's work outside its exact scans at most half of them
#: (``retrieve_core`` vs its scans >= 1/1.5).  ``evireform bench --targets REPORT.json``
#: prints them beside a report's ratios (docs/performance.md).
TARGETS: dict[str, tuple[float, str]] = {
    **{f"cosine_topk/{s} b{b} vs numpy": (0.95, "numpy's matvec/matmul + argpartition")
       for s in ("10k", "100k", "1M") for b in (1, 64)},
    **{f"readout/{s} vs bincount": (1.0, "numpy's bincount + argpartition")
       for s in ("10k", "100k", "1M")},
    "propagate_batch/synthetic 1000 seeds": (1.5, "scipy's sparse chain, all seeds at once"),
    "retrieve_core/musique vs its scans": (1 / 1.5, "its own exact proposition scans"),
    "retrieve_core/synthetic hnsw vs its scans": (1 / 1.5, "its own proposition searches"),
    "build_encoder/2wiki index vs its encoder": (0.9, "the encoder alone on the same texts"),
    "build_encoder/synthetic 100k passages": (0.9, "the encoder's time for the same texts"),
    # issue 67: the lexical kernel at least as fast as bm25s at every size
    **{f"lexical/{s} b{b} vs bm25s": (1.0, "bm25s's numba backend")
       for s in ("10k", "100k", "1M") for b in (1, 64)},
}


def targets_table(report: dict[str, Any]) -> str:
    """A Markdown table of :data:`TARGETS` beside ``report``'s ratios."""
    rows = ["| case | floor (the peer) | target | this run | met |", "|---|---|---|---|---|"]
    for label, (need, peer) in TARGETS.items():
        c = report.get("cases", {}).get(label)
        got = None if c is None else c.get("speedup")
        want = f"≥ {need:.2f}x" if need != 1 / 1.5 else "≥ 0.67x (≤ 1.5x the scans)"
        rows.append(f"| {label} | {peer} | {want} | "
                    + ("not run" if got is None else f"{got:.2f}x") + " | "
                    + ("-" if got is None else "yes" if got >= need else "**no**") + " |")
    m = report.get("machine", {})
    rows.append("")
    rows.append(f"(machine: {m.get('cpu', m.get('processor', '?'))}, {m.get('cpus', '?')} cpus, "
                f"OpenMP waits {m.get('omp_wait_policy') or 'by default'}"
                + (", quick sizes" if report.get("quick") else "") + ")")
    return "\n".join(rows)


def median_time(fn: Any, repeat: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def times(fns: Any, repeat: int, min_s: float = 0.25, pause: float = 0.2,
          rounds: int = 1) -> list[Any]:
    """Median time of each of ``fns``, one after another: a pause (so that the thread pools of
    whatever ran before -- numba's, OpenBLAS's, faiss's OpenMP -- stop spinning on the 2 cores),
    one warm-up call, then calls until there are at least ``repeat`` and they add up to
    ``min_s`` seconds.  (Alternating the functions call by call was tried: the pools then
    fight for the cores and a 0.3 ms search took 13 ms.)  ``rounds`` > 1 splits that into
    blocks taken in turn (ours, the peer, ours, ...; each block with its pause and warm-up,
    ``repeat`` and ``min_s`` shared out), so a slow spell of a shared machine falls on every
    side alike; each median is over all of a function's calls."""
    rounds = max(1, int(rounds))
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for fn, ts in zip(fns, samples):
            time.sleep(pause)
            fn()
            block: list[float] = []
            while len(block) < -(-repeat // rounds) or sum(block) < min_s / rounds:
                t0 = time.perf_counter()
                fn()
                block.append(time.perf_counter() - t0)
            ts.extend(block)
    return [float(np.median(ts)) for ts in samples]


def machine() -> dict[str, Any]:
    import numba
    info = {"python": platform.python_version(), "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(), "numba_threads": numba.get_num_threads(),
            "numpy": np.__version__, "numba": numba.__version__,
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "")}
    try:  # what else the machine was doing as the run began
        info["load_avg_1m"] = round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        pass
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as fh:
            info["mem_gib"] = round(int(fh.readline().split()[1]) / 2**20, 1)
    except OSError:
        pass
    return info


@dataclass(frozen=True)
class Case:
    """A group of bench rows (``--only GROUP``), every label it may produce, and the backend
    it measures ("cpu" cases run by default, "gpu" cases with ``--backend gpu``)."""

    group: str
    labels: tuple[str, ...]
    fn: Callable[..., Any]
    backend: str = "cpu"


#: group name -> case, in run order (filled by :func:`case` as evireform.bench.cases loads)
CASES: dict[str, Case] = {}


def case(*labels: str, backend: str = "cpu"):
    """Register ``case_GROUP(inputs, out)`` with the labels it may write into ``out``."""
    def register(fn: Any):
        group = fn.__name__.removeprefix("case_")
        CASES[group] = Case(group, tuple(labels), fn, backend)
        return fn
    return register


def table(report: dict[str, Any]) -> str:
    rows = [("case", "size", "ours", "peer", "ratio", "agree")]
    for name, c in report["cases"].items():
        fmt = lambda s: "-" if s is None else (f"{s * 1e6:.1f} us" if s < 1e-3 else  # noqa: E731
                                              f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.2f} s")
        ratio = "-" if c.get("speedup") is None else f"{c['speedup']:.1f}x"
        rows.append((name, c["size"], fmt(c["ours_s"]), fmt(c.get("peer_s")), ratio,
                     "yes" if c["agree"] else "NO"))
    w = [max(len(r[i]) for r in rows) for i in range(6)]
    lines = ["  ".join(v.ljust(w[i]) for i, v in enumerate(r)) for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    for name, c in report["cases"].items():  # cases split into their parts
        if c.get("parts_ms"):
            lines.append(f"{name}, a question by part: " + ", ".join(
                f"{k} {v:.3f} ms" for k, v in c["parts_ms"].items()))
    return "\n".join(lines)
