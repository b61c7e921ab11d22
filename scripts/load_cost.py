"""What the load-time validation of an index costs.

Usage: ``python scripts/load_cost.py INDEX_DIR [--repeat 7] [--hnsw]``

Times :meth:`PropositionIndex.load` as it is, and with the value checks switched off (the
array bound/consistency checks, the JSON item checks and the hnsw.bin check replaced by
no-ops), and prints both medians, their difference and its share of the load.  ``--hnsw``
builds an HNSW graph over the index's embeddings in a temporary copy first, so that the
hnsw.bin check is measured too.
"""
import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from evireform import PropositionIndex
from evireform.engine import build_hnsw, structures_of
from evireform.kernels import EntityGraph, PassageMap
from evireform.store import hnsw_file, verify
from evireform.store.format import SPECS


def _median_load(path, repeat):
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        PropositionIndex.load(path)
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def _unchecked_arrays(path, arr, sizes, full=True):
    graph = EntityGraph(**{s.name: arr[s.name] for s in SPECS if s.owner == "graph"})
    pmap = PassageMap(**{s.name: arr[s.name] for s in SPECS if s.owner == "pmap"})
    return graph, pmap


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("index_dir")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--hnsw", action="store_true")
    args = ap.parse_args()
    path = Path(args.index_dir)
    tmp = None
    if args.hnsw:
        tmp = Path(tempfile.mkdtemp())
        idx = PropositionIndex.load(path)
        idx.embeddings = np.ascontiguousarray(idx.embeddings)
        t = time.perf_counter()
        build_hnsw(idx)
        print(f"built HNSW over {idx.n_props:,} propositions in {time.perf_counter() - t:.1f} s")
        path = idx.save(tmp / "ix")
    try:
        PropositionIndex.load(path)  # warm the page cache and numba
        checked = _median_load(path, args.repeat)
        saved = (verify._check_arrays, hnsw_file.check_hnsw_file, verify._load_json)
        verify._check_arrays = _unchecked_arrays
        hnsw_file.check_hnsw_file = lambda f, n, dim, *a: None
        real_json = saved[2]
        verify._load_json = lambda p, name, n, ok, what: real_json(p, name, n, lambda xs: True,
                                                                   what)
        try:
            bare = _median_load(path, args.repeat)
        finally:
            verify._check_arrays, hnsw_file.check_hnsw_file, verify._load_json = saved
        cost = checked - bare
        idx = PropositionIndex.load(path)
        print(f"index {path}: {idx.n_passages:,} passages, {idx.n_props:,} propositions, "
              f"{idx.n_entities:,} entities, {idx.graph.nnz:,} incidences, "
              f"hnsw {'yes' if structures_of(idx).hnsw is not None else 'no'}")
        print(f"load with value checks    {checked * 1e3:8.1f} ms (median of {args.repeat})")
        print(f"load without value checks {bare * 1e3:8.1f} ms")
        print(f"validation                {cost * 1e3:8.1f} ms = {100 * cost / checked:.1f}% "
              "of the load")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
