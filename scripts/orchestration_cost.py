"""What ``retrieve()`` costs besides the encoder, on MuSiQue (or another eval set) with the
default embedder.

    python scripts/orchestration_cost.py [--data ../shared/data] [-n 100] [--repeat 5]
        [--dataset musique] [--own-search auto|on|off]

The questions and their residual queries are embedded once by MiniLM; a second pass serves
those vectors from memory (an embedder that looks texts up), so each timed ``retrieve()`` is
everything but the two encoder calls: candidate search, selection, reformulation, the
residual searches, propagation, readout and record building.  Prints the p50 / p90 per
question for ``retrieve`` one question at a time (after the first pass, whose p50 is shown
apart: there each passage's bridge candidates, :class:`PropositionIndex.memo`, are made) and for ``retrieve_many`` (per question),
then the mean time of its parts (search, selection, reformulation, ranking) from wall
clocks around them, as a Markdown table.  Run it on a quiet machine and under load.
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class Replay:
    """An embedder that answers from vectors the real one computed before."""

    def __init__(self, real, vectors: dict):
        self.name, self.dim, self.vectors = real.name, real.dim, vectors

    def encode(self, texts):
        return np.stack([self.vectors[t] for t in texts])

    encode_queries = encode


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("-n", type=int, default=100)
    ap.add_argument("--dataset", default="musique",
                    help="an eval dataset (nodejs, pydoc-user, manpages: prose indexes, where "
                         "the question's own search runs)")
    ap.add_argument("--own-search", default="auto", choices=("auto", "on", "off"),
                    help="EviReformConfig.own_search")
    ap.add_argument("--repeat", type=int, default=5,
                    help="timed passes over the questions (the first reported apart: it "
                         "meets each observed passage for the first time)")
    args = ap.parse_args(argv)
    from evireform import EviReform, EviReformConfig
    from evireform.evaluation import DATASETS
    from evireform.evaluation.data import load_questions
    from evireform.cache import cached_index
    from evireform.embed import encode_queries, get_embedder
    data = Path(args.data)
    qf, cf = (data / x for x in DATASETS[args.dataset])
    from evireform import load_corpus
    qs = [q.question for q in load_questions(qf, load_corpus(cf))][:args.n]
    emb = get_embedder("minilm")
    idx, _, _ = cached_index(cf, emb, show_progress=False)
    cfg = EviReformConfig(own_search=args.own_search)
    first = EviReform(idx, cfg, embedder=emb)
    texts = list(qs)
    for res in first.retrieve_many(qs, 10):
        texts.extend(res.trace.residual_queries)
    vectors = dict(zip(texts, encode_queries(emb, texts)))
    rp = Replay(emb, vectors)
    r = EviReform(idx, cfg, embedder=rp)
    parts: dict[str, list] = {}

    def clock(name, fn):
        def timed(*a, **kw):
            t = time.perf_counter()
            out = fn(*a, **kw)
            parts.setdefault(name, []).append(time.perf_counter() - t)
            return out
        return timed
    for q in qs[:8]:
        r.retrieve(q, 10)  # warm: compiled kernels, per-index caches
    idx.__dict__.pop("_memo", None)  # but the first pass meets every passage anew
    one, many, cold = [], [], []
    for rep in range(args.repeat):
        for q in qs:
            t = time.perf_counter()
            r.retrieve(q, 10)
            (cold if rep == 0 else one).append(time.perf_counter() - t)
        t = time.perf_counter()
        r.retrieve_many(qs, 10)
        many.append((time.perf_counter() - t) / len(qs))
    ms = lambda v, p: np.percentile(v, p) * 1e3  # noqa: E731
    import os
    from evireform import kernels
    from evireform.kernels import runtime
    print(f"{args.dataset} ({idx.n_passages:,} passages, extractor {idx.meta.get('extractor')}, "
          f"own_search={args.own_search}, passage embeddings: "
          f"{idx.passage_embeddings is not None}), {len(qs)} questions x {args.repeat} passes, everything but the encoder "
          f"(load average {os.getloadavg()[0]:.2f} over {runtime._usable_cpus()} cores: "
          f"busy, so kernels on the calling thread: {kernels.machine_busy()}):\n")
    print("| measure | ms |\n|---|---:|")
    print(f"| retrieve() p50 | {ms(one, 50):.2f} |\n| retrieve() p90 | {ms(one, 90):.2f} |")
    print(f"| retrieve() p50, first pass (passages' bridge data made on first sight) | "
          f"{ms(cold, 50):.2f} |")
    print(f"| retrieve_many, per question, p50 over passes | {ms(many, 50):.2f} |")
    r.engine.search_batch = clock("search", r.engine.search_batch)  # every dense search
    r._queries = clock("reformulation", r._queries)
    r._rank_many = clock("ranking (propagation, readout, records)", r._rank_many)
    r._select = clock("selection", r._select)
    r._own_search = clock("own search (dense and BM25 passages, fusion)", r._own_search)
    for q in qs:
        r.retrieve(q, 10)
    for name, v in parts.items():
        print(f"| retrieve(), {name}, mean a question | {np.sum(v) / len(qs) * 1e3:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
