"""The README's main job: index HotpotQA (or reuse the cached index) and retrieve for a few of
its questions, marking the gold passages.

Run with ``make demo`` or ``python -m evireform.demo --data PATH`` where PATH holds
``hotpotqa/hotpotqa.json`` and ``hotpotqa/hotpotqa_corpus.json`` (the HippoRAG data layout).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from . import kernels as K
from .cache import cached_index
from .embed import MiniLMEmbedder


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default="../shared/data", help="folder with hotpotqa/")
    ap.add_argument("-n", type=int, default=3, help="how many questions to show")
    ap.add_argument("-k", type=int, default=5, help="passages per question")
    args = ap.parse_args(argv)
    data = Path(args.data)
    qfile, cfile = data / "hotpotqa/hotpotqa.json", data / "hotpotqa/hotpotqa_corpus.json"
    for f in (qfile, cfile):
        if not f.is_file():
            raise SystemExit(f"demo: {f} not found; pass --data pointing at the HippoRAG data "
                             "folder (see README, 'Data')")
    emb = MiniLMEmbedder()
    t0 = time.perf_counter()
    idx, path, built = cached_index(cfile, emb)
    print(f"index {'built' if built else 'reused'} at {path} in {time.perf_counter() - t0:.1f}s")
    st = idx.stats()
    print(", ".join(f"{k} {v:,}" for k, v in st.items() if isinstance(v, int)))
    questions = json.loads(qfile.read_text())[: args.n]
    Q = emb.encode([q["question"] for q in questions])
    for q, hq in zip(questions, Q):
        gold = {t for t, _ in q["supporting_facts"]}
        ids, u = idx.search(hq, 100)
        seed = ids[:12]
        b = u[:12] / u[:12].sum()
        z_ids, z = K.propagate(idx.graph, seed, b, 0.5)
        pids, scores = K.readout_topk(idx.pmap, z_ids, z, args.k)
        print(f"\nQ: {q['question']}\n   answer: {q['answer']}   gold: {sorted(gold)}")
        for r, (p, s) in enumerate(zip(pids, scores), 1):
            t = idx.passages[p].title
            print(f"   {r}. {'*' if t in gold else ' '} {s:.4f}  {t}")
    print("\n(* = gold passage; seed = top-12 propositions, one propagation step, readout)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
