"""Print the LLM-free residual queries EviReform makes on a question set, with the answer's
rank before (the question-only base) and after (the full method): what the closing notes of
issue 52 quote.

    python scripts/residual_queries.py [--dataset manpages] [-n 20] [--data ../shared/data]
        [--extractor auto|heuristic|phrases|prose] [--reformulator graph|graph-v1|spans]

``--extractor heuristic --reformulator graph-v1`` reads bridges as before issue 52.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evireform.cache import cached_index  # noqa: E402
from evireform.embed import get_embedder  # noqa: E402
from evireform.evaluation import DATASETS, load_questions  # noqa: E402
from evireform.evaluation.metrics import answer_found  # noqa: E402
from evireform.extract import make_extractor  # noqa: E402
from evireform.retriever import EviReform, EviReformConfig  # noqa: E402
from evireform.roles import make_reformulator  # noqa: E402


def answer_rank(q, idx, ranked) -> int | None:
    for r, p in enumerate(ranked, 1):
        if answer_found(q, [idx.passages[p.index].title + "\n" + idx.passages[p.index].text]):
            return r
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="manpages", choices=sorted(DATASETS))
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("-n", type=int, default=20, help="questions shown (two-hop first)")
    ap.add_argument("--extractor", default="auto")
    ap.add_argument("--reformulator", default="graph")
    a = ap.parse_args()
    qrel, crel = DATASETS[a.dataset]
    emb = get_embedder("minilm")
    ex = None if a.extractor == "auto" else make_extractor(a.extractor)
    idx, _, _ = cached_index(Path(a.data) / crel, emb, show_progress=False, extractor=ex)
    qs = load_questions(Path(a.data) / qrel, idx.passages)
    qs = sorted(qs, key=lambda q: not q.type.startswith("bridge"))[:a.n]
    full = EviReform(idx, EviReformConfig(), embedder=emb,
                     reformulator=make_reformulator(a.reformulator)).retrieve_many(
        [q.question for q in qs], 20)
    base = EviReform(idx, EviReformConfig(reformulation=False, propagation=False),
                     embedder=emb).retrieve_many([q.question for q in qs], 20)
    for q, f, b in zip(qs, full, base):
        print(f"Q [{q.type}] {q.question}\n  answer {q.answer!r}: rank {answer_rank(q, idx, b.passages)}"
              f" (base) -> {answer_rank(q, idx, f.passages)} (full)")
        scores = f.trace.bridges
        for t, rq in enumerate(f.trace.residual_queries):
            extra = f"  [{scores[t]['score']:.3f}]" if t < len(scores) else ""
            print(f"    - {rq}{extra}")


if __name__ == "__main__":
    main()
