"""The measured cost curve: build, store, load and query synthetic indexes of growing size
with memory-mapped embeddings (``evireform bench --scale``).

Every size runs in two fresh subprocesses so that each figure is that size's own:

* **build**: the synthetic entity graph and passage map (:mod:`.synthetic`: power-law entity
  degrees, 4.7 mentions and 3.5 propositions per passage on average) and clustered 384-d
  float32 embeddings written chunk by chunk into a memory map, then
  :meth:`PropositionIndex.save` (which hashes every file for the manifest);
* **query**: :meth:`PropositionIndex.load` (memory-mapped; the default tier, which is the
  fast one since the save stamped the files) and Algorithm 1 with exact search over the
  memory-mapped embeddings for ``n_queries`` questions near the data, three residual queries
  each; the reformulator's output is given (as in the ``retrieve_core`` bench case), so the
  latency is search + selection + propagation + readout.  Then, apart, a load with the full
  verification tier (``evireform verify``: checksums, derived arrays, norms, texts).

Peak memory is reported twice: ``peak_rss`` (the kernel's high-water mark, which counts the
pages of the memory-mapped embeddings that were read) and ``peak_anon`` (sampled every 20 ms:
memory the process owns, which is what must fit; file pages are page cache the kernel can
drop).  Sizes that need more disk than is free are skipped and said so.
"""
from __future__ import annotations

from typing import Any

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

DEFAULT_SIZES = (100_000, 1_000_000, 3_000_000, 10_000_000)
DIM = 384


class _AnonPeak:
    """Samples RssAnon from /proc/self/status (Linux) in a thread; ``peak`` in bytes."""

    def __init__(self, every: float = 0.02) -> None:
        self.peak, self.every = 0, every
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def now() -> int:
        try:
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.now())
            time.sleep(self.every)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, self.now())


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def build_point(M: int, out: Path, seed: int = 0) -> dict[str, Any]:
    """Build and save a synthetic index of ``M`` propositions at ``out``."""
    from ..engine import quantize
    from ..index import PropositionIndex, disk_bytes
    from ..types import Passage
    from .synthetic import clustered_embeddings, synthetic_graph, synthetic_passages
    t0 = time.perf_counter()
    with _AnonPeak() as anon:
        rng = np.random.default_rng(seed)
        g = synthetic_graph(rng, M)
        pm = synthetic_passages(rng, M)
        work = Path(tempfile.mkdtemp(prefix=".scale-emb-", dir=out.parent))
        try:
            H = np.lib.format.open_memmap(work / "embeddings.npy", mode="w+",
                                          dtype=np.float32, shape=(M, DIM))
            clustered_embeddings(rng, M, DIM, out=H)
            H.flush()
            t_data = time.perf_counter() - t0
            idx = PropositionIndex(
                passages=[Passage(f"p{j}", f"P{j}", f"passage {j}") for j in range(pm.n_passages)],
                prop_texts=[f"proposition {i}" for i in range(M)],
                entity_names=[f"e{e}" for e in range(g.n_entities)], graph=g, pmap=pm,
                embeddings=H, embedder_name="synthetic-384")
            quantize(idx, "int8")  # the int8 codes beside the float32 rows
            idx.save(out, overwrite=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return {"propositions": M, "passages": pm.n_passages, "entities": g.n_entities,
            "incidence_nnz": g.nnz, "build_s": time.perf_counter() - t0,
            "synthesis_s": t_data, "disk_bytes": disk_bytes(out),
            "build_peak_rss": _peak_rss(), "build_peak_anon": anon.peak}


def query_point(path: Path, n_queries: int = 20, seed: int = 1) -> dict[str, Any]:
    """Load the index at ``path`` (memory-mapped, verified) and time Algorithm 1 per question."""
    from ..engine import make_engine
    from ..index import PropositionIndex
    from ..retriever import EviReform, EviReformConfig
    from .synthetic import GivenReformulator
    with _AnonPeak() as anon:
        t0 = time.perf_counter()
        idx = PropositionIndex.load(path, mmap=True)
        load_s = time.perf_counter() - t0
        tier = idx.verified
        anon_open = _AnonPeak.now()
        vocab = _vocabulary_share(path)
        rng = np.random.default_rng(seed)
        H = idx.embeddings
        rows = np.sort(rng.choice(idx.n_props, 4 * n_queries + 4, replace=False))
        V = np.asarray(H[rows]) + 0.05 * rng.standard_normal((len(rows), DIM)).astype(np.float32)
        V /= np.linalg.norm(V, axis=1, keepdims=True)
        qs = [f"q{i}" for i in range(n_queries + 1)]
        queries = {q: [f"{q}-r{j}" for j in range(3)] for q in qs}
        vecs = {x: V[n_queries + 1 + i] for i, x in
                enumerate(x for v in queries.values() for x in v)}
        given = lambda texts: (np.stack([vecs[t] for t in texts]) if texts  # noqa: E731
                               else np.zeros((0, DIM), np.float32))
        retr = EviReform(idx, EviReformConfig(), reformulator=GivenReformulator(queries))
        spent = [0.0]

        def timed(search):  # the proposition searches' share of each question
            def timed_search(*a, **kw: Any):
                t = time.perf_counter()
                try:
                    return search(*a, **kw)
                finally:
                    spent[0] += time.perf_counter() - t
            return timed_search
        runs = {}
        for precision in ("float32", "int8"):  # the same questions over each storage
            retr.engine = make_engine(idx, "cpu", precision=precision)
            retr.engine.search_batch = timed(retr.engine.search_batch)
            times, in_search, ranked = [], [], []
            for i, q in enumerate(qs):
                spent[0] = 0.0
                t = time.perf_counter()
                res = retr.retrieve_embedded(q, V[i], 10, residual_embed=given)
                times.append(time.perf_counter() - t)
                in_search.append(spent[0])
                assert len(res.passages) == 10
                _ = [p.text for p in res.passages]  # what a caller reads of each result
                ranked.append([(p.id, p.score) for p in res.passages])
            runs[precision] = (times, in_search, ranked)
        anon_query = _AnonPeak.now()
        lex = getattr(idx.search_state, "lexical", None)  # the BM25 weights the queries made
        weights = 0 if lex is None else sum(
            m.indptr.nbytes + m.docs.nbytes + m.weights.nbytes for m in lex._weights.values())
    times, in_search, _ = runs["float32"]
    i8_times, i8_search, i8_ranked = runs["int8"]
    same = i8_ranked == runs["float32"][2]
    del idx, retr, res
    import gc
    gc.collect()
    with _AnonPeak() as anon_full:
        t0 = time.perf_counter()
        PropositionIndex.load(path, mmap=True, verify="full")
        load_full_s = time.perf_counter() - t0
    first, rest = times[0], np.asarray(times[1:])
    other = rest - np.asarray(in_search[1:])
    return {"load_s": load_s, "load_tier": tier, "load_full_s": load_full_s,
            "anon_after_open": anon_open, "full_verify_peak_anon": anon_full.peak,
            "first_query_s": first,
            "p50_s": float(np.percentile(rest, 50)), "p95_s": float(np.percentile(rest, 95)),
            "search_p50_s": float(np.percentile(in_search[1:], 50)),
            "rest_p50_s": float(np.percentile(other, 50)),
            "int8_p50_s": float(np.percentile(i8_times[1:], 50)),
            "int8_search_p50_s": float(np.percentile(i8_search[1:], 50)),
            "int8_same_rankings": bool(same), "anon_after_queries": anon_query,
            "n_queries": n_queries, "query_peak_rss": _peak_rss(), "query_peak_anon": anon.peak,
            "lexical_weights_bytes": weights, **vocab}


def _vocabulary_share(path: Path) -> dict[str, Any]:
    """The lexical vocabulary's part of an open: its terms, the seconds and the anonymous
    memory its files take to open again on their own, and their bytes on disk (mapped)."""
    from ..store.format import VOCAB_FILES
    from ..store.verify import load_vocabulary
    if not (path / VOCAB_FILES[0]).is_file():
        return {}
    a0, t = _AnonPeak.now(), time.perf_counter()
    v = load_vocabulary(path, False)
    took = time.perf_counter() - t
    return {"vocab_terms": len(v), "vocab_open_s": took,
            "vocab_anon": max(0, _AnonPeak.now() - a0),
            "vocab_bytes": sum((path / n).stat().st_size for n in VOCAB_FILES)}


def _child(kind: str, M: int, path: Path, n_queries: int) -> dict[str, Any]:
    call = (f"scale.build_point({M}, Path({str(path)!r}))" if kind == "build"
            else f"scale.query_point(Path({str(path)!r}), {n_queries})")
    code = ("import json; from pathlib import Path; from evireform.bench import scale; "
            f"print('RESULT ' + json.dumps({call}))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"scale {kind} at {M:,} failed (rc {p.returncode}):\n{p.stderr[-3000:]}")


def run_scale(sizes=DEFAULT_SIZES, workdir=None, n_queries: int = 20, keep: bool = False,
              log: Any=print) -> list[dict]:
    """Measure every size in ``sizes`` (see the module docstring); one dict per size."""
    base = Path(workdir or tempfile.gettempdir()) / "evireform-scale"
    base.mkdir(parents=True, exist_ok=True)
    out = []
    for M in sizes:
        need = int(M * DIM * 4 * 2.3)  # the memory map and the saved copy, plus the rest
        free = shutil.disk_usage(base).free
        if need > free:
            log(f"scale: skipping {M:,} propositions: needs ~{need / 2**30:.1f} GiB of disk, "
                f"{free / 2**30:.1f} GiB free at {base}")
            out.append({"propositions": M, "skipped": f"needs ~{need / 2**30:.1f} GiB disk"})
            continue
        path = base / f"synthetic-{M}"
        log(f"scale: building {M:,} propositions at {path} ...")
        r = _child("build", M, path, n_queries)
        log(f"scale:   built in {r['build_s']:.1f} s; querying ...")
        r.update(_child("query", M, path, n_queries))
        r["cpus"] = os.cpu_count()
        out.append(r)
        log(f"scale:   p50 {r['p50_s'] * 1e3:.1f} ms, p95 {r['p95_s'] * 1e3:.1f} ms")
        if not keep:
            shutil.rmtree(path, ignore_errors=True)
    return out


def _gib(b) -> str:
    return f"{b / 2**30:.2f} GiB" if b >= 2**30 else f"{b / 2**20:.0f} MiB"


def scale_table(rows: list[dict]) -> str:
    head = ("| propositions | entities | incidence nnz | build | disk | build peak RSS / anon "
            "| open (fast tier) | open (full tier) | first query | p50 | p95 "
            "| p50 search / rest | int8: p50 (search), same top-k | query peak RSS / anon "
            "| lexical: terms, vocabulary open / anon, BM25 weights |")
    lines = [head, "|" + "---|" * 15]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['propositions']:,} | skipped: {r['skipped']} |" + " |" * 13)
            continue
        lines.append(
            f"| {r['propositions']:,} | {r['entities']:,} | {r['incidence_nnz']:,} "
            f"| {r['build_s']:.1f} s | {_gib(r['disk_bytes'])} "
            f"| {_gib(r['build_peak_rss'])} / {_gib(r['build_peak_anon'])} "
            f"| {r['load_s']:.2f} s ({r.get('load_tier', '?')}) "
            f"| {r.get('load_full_s', float('nan')):.2f} s "
            f"| {r['first_query_s'] * 1e3:.0f} ms "
            f"| {r['p50_s'] * 1e3:.1f} ms | {r['p95_s'] * 1e3:.1f} ms "
            f"| {r.get('search_p50_s', float('nan')) * 1e3:.1f} / "
            f"{r.get('rest_p50_s', float('nan')) * 1e3:.1f} ms "
            f"| {r.get('int8_p50_s', float('nan')) * 1e3:.1f} ms "
            f"({r.get('int8_search_p50_s', float('nan')) * 1e3:.1f} ms), "
            f"{'yes' if r.get('int8_same_rankings') else 'NO'} "
            f"| {_gib(r['query_peak_rss'])} / {_gib(r['query_peak_anon'])} "
            + (f"| {r['vocab_terms']:,}, {r['vocab_open_s'] * 1e3:.1f} ms / "
               f"{_gib(r['vocab_anon'])}, {_gib(r.get('lexical_weights_bytes', 0))} |"
               if "vocab_terms" in r else "| |"))
    return "\n".join(lines)
