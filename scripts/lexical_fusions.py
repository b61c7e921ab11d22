"""Dense and lexical together (issue 67): how the lexical signal enters EviReform, each way
measured on every set in one process, beside BM25, the hybrid (reciprocal-rank fusion of BM25
and dense) and the paper's dense-only method.

    python scripts/lexical_fusions.py [--sets manpages,hotpotqa,musique,musique-lc,hotpotqa-lc]
    python scripts/lexical_fusions.py --llm   # the LLM path, the recorded replies answering

Prints Markdown (docs/results.md, "Dense and lexical together", regenerated through
scripts/update_readme.py), with BM25 (bm25s), the hybrid and BM25 with the engine's own
tokenizer (``bm25_engine``) first: A@5 and the two-hop questions' Chain@5 on the real-documents set,
R@5 / Chain@5 on the Wikipedia sets (``-lc``: their lower-cased copies).  The variants are
``EviReformConfig`` settings (the default first).  ``--llm``: HotpotQA and MuSiQue with the
LLM roles answered by the recorded replies (``../shared/llm-replies``), and the variants that
concern them.
"""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from evireform import load_corpus  # noqa: E402
from evireform.embed import get_embedder  # noqa: E402
from evireform.evaluation import DATASETS, run_eval  # noqa: E402
from evireform.evaluation.data import ANSWER_RECALL_SETS  # noqa: E402
from evireform.evaluation.metrics import per_question  # noqa: E402
from evireform.retriever import EviReformConfig  # noqa: E402

#: (label, EviReformConfig overrides): the default, then one change at a time
VARIANTS = [
    ("seed (default)", {}),
    ("dense only (the paper; `evireform_dense`)", {"lexical": False}),
    ("seed, residual hits dense", {"lexical_residual": False}),
    ("mix (candidates ranked by the mixed score)", {"lexical_fusion": "mix"}),
    ("rrf (candidates by reciprocal-rank fusion)", {"lexical_fusion": "rrf"}),
    ("seed + BM25's top 3 passages (weight 0.5)", {"lexical_passages": 3,
                                                   "lexical_passage_weight": 0.5}),
    ("seed + BM25's top passage (weight 0.25)", {"lexical_passages": 1,
                                                 "lexical_passage_weight": 0.25}),
    ("seed of 4 BM25 propositions", {"lexical_seed": 4}),
    ("seed of 12 BM25 propositions", {"lexical_seed": 12}),
    ("seed, lexical_weight 0.3", {"lexical_weight": 0.3}),
    ("seed, lexical_weight 0.45 (the default before pydoc-user)", {"lexical_weight": 0.45}),
    ("seed, lexical_weight 0.6", {"lexical_weight": 0.6}),
]

#: the LLM path's variants (the recorded replies answer the roles)
LLM_VARIANTS = [
    ("seed (default: an LLM's selection is the seed)", {}),
    ("dense only (the paper; `evireform_dense`)", {"lexical": False}),
    ("seed, BM25 also joins an LLM's selection", {"lexical_seed_llm": True}),
    ("seed, residual hits dense", {"lexical_residual": False}),
]


def _replay(ds: str, replies: Path):
    from evireform.llm import LLMClient, LLMConfig
    return LLMClient(LLMConfig.from_env(replay_paths=(str(replies / f"{ds}.jsonl"),),
                                        offline=True, model=None))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets",
                    default="manpages,pydoc,pydoc-user,readmes,hotpotqa,musique,hotpotqa-lc,"
                            "musique-lc")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--llm", action="store_true",
                    help="HotpotQA and MuSiQue with the recorded LLM replies")
    a = ap.parse_args(argv)
    replies = Path(a.data).parent / "llm-replies"
    variants = VARIANTS
    if a.llm:
        variants = LLM_VARIANTS
        if a.sets == ap.get_default("sets"):
            a.sets = "hotpotqa,musique"
    emb = get_embedder("minilm")
    sets = a.sets.split(",")
    cols: dict[str, dict[str, str]] = {}
    for name in sets:
        lc = name.endswith("-lc")
        ds = name.removesuffix("-lc")
        qf, cf = (Path(a.data) / x for x in DATASETS[ds])
        docs = ds in ANSWER_RECALL_SETS
        texts = [p.title + "\n" + p.text for p in load_corpus(cf)] if docs else None
        base = run_eval(qf, cf, ["bm25", "hybrid", "bm25_engine"], embedder=emb, dataset=ds,
                        lowercase=lc, show_progress=False, answer_recall=docs)
        two = [i for i, q in enumerate(base.questions) if q.type.startswith("bridge")]

        def cell(rankings, m):
            if not docs:
                v = m
                return f"{v['recall@5']:.2f} / {v['chain@5']:.2f}"
            per = per_question(rankings, base.questions, (5,), texts)
            return f"{m['answer@5']:.2f} / {100 * float(np.mean(per['chain@5'][two])):.2f}"
        for b in ("bm25", "hybrid", "bm25_engine"):
            cols.setdefault(b, {})[name] = cell(base.rankings[b], base.methods[b])
        for label, over in variants:
            rep = run_eval(qf, cf, ["evireform"], embedder=emb, dataset=ds, lowercase=lc,
                           show_progress=False, answer_recall=docs,
                           llm=_replay(ds, replies) if a.llm else None,
                           config=EviReformConfig(**over))
            cols.setdefault(label, {})[name] = cell(rep.rankings["evireform"],
                                                    rep.methods["evireform"])
        print(f"done {name}", file=sys.stderr, flush=True)
    heads = [(f"{s}: A@5 / two-hop C@5" if s in ANSWER_RECALL_SETS else f"{s}: R@5 / C@5")
             for s in sets]
    print("| method | " + " | ".join(heads) + " |")
    print("|---|" + "---:|" * len(sets))
    for label, row in cols.items():
        print(f"| {label} | " + " | ".join(row.get(s, "–") for s in sets) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
