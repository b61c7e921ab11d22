"""The README's main job: index HotpotQA (or reuse the cached index) and retrieve for a few of
its questions, showing the residual queries and the top passages, marking the gold ones and
saying how each passage was reached (its evidence-graph edge).

Run with ``make demo`` or ``python -m evireform.demo --data PATH`` where PATH holds
``hotpotqa/hotpotqa.json`` and ``hotpotqa/hotpotqa_corpus.json`` (the HippoRAG data layout).
"""
from __future__ import annotations

from typing import Any

import argparse
import time
from pathlib import Path

from .cache import cached_index
from .embed import MiniLMEmbedder
from .evaluation.data import load_questions
from .retriever import EviReform, EviReformConfig
from .roles import make_reformulator


def main(argv: Any=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default="../shared/data", help="folder with hotpotqa/ and musique/")
    ap.add_argument("-n", type=int, default=3, help="how many questions to show")
    ap.add_argument("-k", type=int, default=5, help="passages per question")
    ap.add_argument("--dataset", choices=("hotpotqa", "musique"), default="hotpotqa",
                    help="which data set's questions and corpus")
    ap.add_argument("--reformulator", choices=("graph", "spans"), default="graph",
                    help="the LLM-free reformulator: graph (bridges from the index's "
                         "entities, the default) or spans (capitalised name spans)")
    args = ap.parse_args(argv)
    data = Path(args.data)
    ds = args.dataset
    qfile, cfile = data / f"{ds}/{ds}.json", data / f"{ds}/{ds}_corpus.json"
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
    questions = load_questions(qfile, idx.passages)[: args.n]
    retriever = EviReform(idx, EviReformConfig(), embedder=emb,
                          reformulator=make_reformulator(args.reformulator))
    results = retriever.retrieve_many([q.question for q in questions], args.k)
    for q, res in zip(questions, results):
        print(f"\nQ: {q.question}\n   answer: {q.answer}")
        print(f"   observed: {', '.join(idx.passages[j].title for j in res.trace.observed)}")
        for rq in res.trace.residual_queries:
            print(f"   residual query: {rq}")
        rank = {p.index: r for r, p in enumerate(res.passages, 1)}
        how = {e.dst: e for e in res.evidence_graph().edges}
        for r, p in enumerate(res.passages, 1):
            mark = "*" if p.index in q.gold else " "
            print(f"   {r}. {mark} {p.score:.4f}  {p.title:<45.45} (question {p.from_question:.3f}, "
                  f"residual {p.from_residual:.3f}, propagation {p.from_propagation:.3f})")
            e = how.get(p.index)
            if e is not None and e.src in rank:
                print(f"            reached from [{rank[e.src]}] via {e.kind} {e.via!r}")
        found = len(q.gold & {p.index for p in res.passages})
        print(f"   gold found in top {args.k}: {found}/{len(q.gold)}")
    print(f"\n(* = gold passage.  Full evaluation: evireform eval --dataset {ds})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
