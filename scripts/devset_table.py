"""The real-documents development set (issue 52): Answer@5 (all, single-hop and two-hop
questions apart: issue 85), R@5 and the two-hop questions' Chain@5 of dense, BM25, the hybrid (RRF of BM25 and dense), EviReform's question-only base
filled by the question's dense order (``base_dense_fill``), EviReform (dense and lexical
together, issue 67), its dense-only form as the paper has it (``evireform_dense``) and its
variants (``evireform_no_own``: without the question's own search, issue 85), with the
extractor ``--extractor auto``
picks (the prose extractor) and with the heuristic one, and EviReform's paired bootstrap
differences against BM25, the hybrid, dense, ``base_dense_fill`` and ``evireform_dense``.

Usage: ``python scripts/devset_table.py [--dataset manpages]``; prints Markdown
(docs/results.md, "Real documents", regenerated through scripts/update_readme.py).
``--rule-only --dataset hotpotqa`` (or musique, from ``--data``): EviReform with and
without the do-no-harm beta rule and how often the rule fired.
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
from evireform.evaluation.metrics import per_question  # noqa: E402
from evireform.evaluation.stats import BASE_SEED, paired_bootstrap, seed_offset  # noqa: E402
from evireform.extract import make_extractor  # noqa: E402

METHODS = ["dense", "bm25", "hybrid", "base_dense_fill", "evireform", "evireform_no_own",
           "evireform_dense", "evireform_v1", "evireform_evidence"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="manpages")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--rule-only", action="store_true")
    a = ap.parse_args(argv)
    qf, cf = (Path(a.data) / x for x in DATASETS[a.dataset])
    emb = get_embedder("minilm")
    if a.rule_only:
        rep = run_eval(qf, cf, ["evireform", "evireform_evidence"], embedder=emb,
                       dataset=a.dataset, show_progress=False)
        print("| set | method | R@5 / C@5 | rule fired |")
        print("|---|---|---|---:|")
        for m in ("evireform", "evireform_evidence"):
            v = rep.methods[m]
            fired = sum(_fired(r) for r in rep.traces[m])
            print(f"| {a.dataset} | {m} | {v['recall@5']:.2f} / {v['chain@5']:.2f} | "
                  f"{fired} of {rep.n_questions} |")
        return 0
    rows, boot = [], []
    for label, extractor in (("auto (prose)", None), ("heuristic", "heuristic")):
        kw = {} if extractor is None else {"extractor": make_extractor(extractor)}
        rep = run_eval(qf, cf, METHODS, embedder=emb, dataset=a.dataset, show_progress=False,
                       answer_recall=True, **kw)
        texts = [p.title + "\n" + p.text for p in load_corpus(cf)]
        two = [i for i, q in enumerate(rep.questions) if q.type.startswith("bridge")]
        one = [i for i in range(len(rep.questions)) if i not in set(two)]
        per = {m: per_question(rep.rankings[m], rep.questions, (5,), texts) for m in METHODS}
        for m in METHODS:
            v = rep.methods[m]
            c2 = 100 * float(np.mean(per[m]["chain@5"][two]))
            a1 = 100 * float(np.mean(per[m]["answer@5"][one])) if one else float("nan")
            a2 = 100 * float(np.mean(per[m]["answer@5"][two])) if two else float("nan")
            fired = sum(_fired(r) for r in rep.traces.get(m, []))
            rows.append(f"| {label} | {m} | {v['answer@5']:.2f} | {a1:.2f} | {a2:.2f} | "
                        f"{v['recall@5']:.2f} | {v['chain@5']:.2f} | {c2:.2f} | "
                        + (f"{fired} |" if m == "evireform_evidence" else "– |"))
        for other in ("bm25", "hybrid", "dense", "base_dense_fill", "evireform_no_own",
                      "evireform_dense"):
            for metric, sel, what in (("answer@5", slice(None), "answer@5"),
                                      ("answer@5", one, "single-hop answer@5"),
                                      ("chain@5", two, "two-hop chain@5")):
                if not len(sel if isinstance(sel, list) else [0]):
                    continue
                r = paired_bootstrap(per["evireform"][metric][sel], per[other][metric][sel],
                                     seed=BASE_SEED + seed_offset(a.dataset, metric))
                boot.append(f"| {label} | evireform − {other} | {what} | {r['diff']:+.2f} | "
                            f"[{r['ci'][0]:+.2f}, {r['ci'][1]:+.2f}] |")
    print(f"{a.dataset}: {len(rep.questions)} questions ({len(two)} two-hop), "
          f"{rep.n_passages} passages, embedder {rep.embedder}")
    print()
    print("| extractor | method | A@5 | single-hop A@5 | two-hop A@5 | R@5 | C@5 | "
          "two-hop C@5 | rule fired |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))
    print()
    print("Paired bootstrap (10,000 resamples, base seed 202707):")
    print()
    print("| extractor | difference | metric | mean | 95% CI |")
    print("|---|---|---|---:|---|")
    print("\n".join(boot))
    return 0


def _fired(result) -> bool:
    """Whether the do-no-harm rule set this question's beta to 1."""
    return "reformulate:no-credible-bridge" in result.trace.role_events


if __name__ == "__main__":
    sys.exit(main())
