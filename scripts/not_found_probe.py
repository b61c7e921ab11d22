"""Precision and recall of the answer's LLM-free "not found" (issue 82, item 1).

Each corpus is asked its own questions (answerable: the corpus holds their evidence) and
another set's questions (unanswerable there, apart from the few whose subject the two
corpora happen to share). EviReform retrieves (LLM-free, the defaults), and
:func:`evireform.answer.answer_question` judges: "not found" when the share of the
question's content words the top 3 passages hold is below ``FOUND_COVERAGE`` and the
cosine of its best dense hit below ``FOUND_SIMILARITY``. Both thresholds are chosen on the
first pair (MuSiQue's corpus: its questions against HotpotQA's; the best F1 of "not
found" over a grid), and the others are held out: HotpotQA's corpus (its questions
against MuSiQue's), ``manpages`` (its questions against ``pydoc-user``'s) and
``pydoc-user`` (its questions against ``manpages``'). Each signal alone is shown too.

    python scripts/not_found_probe.py [--data ../shared/data] [--json out.json]
"""
import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evireform import EviReform, load_corpus  # noqa: E402
from evireform.answer import (  # noqa: E402
    FOUND_COVERAGE, FOUND_SIMILARITY, answer_question)
from evireform.cache import cached_index  # noqa: E402
from evireform.embed import get_embedder  # noqa: E402
from evireform.evaluation import DATASETS  # noqa: E402

#: (corpus set, its questions, the other set whose questions it is asked)
PAIRS = [("musique", "hotpotqa"), ("hotpotqa", "musique"), ("manpages", "pydoc-user"),
         ("pydoc-user", "manpages")]


def questions(data: Path, name: str) -> list[str]:
    f = Path(data) / DATASETS[name][0]
    raw = json.loads(f.read_text(encoding="utf-8"))
    return [r["question"] for r in raw]


def scores(data: Path, name: str, other: str, emb) -> dict[str, list[tuple]]:
    """(confidence, similarity) of every question, answerable and unanswerable."""
    cf = Path(data) / DATASETS[name][1]
    idx, _, _ = cached_index(cf, emb, show_progress=False)
    ev = EviReform(idx, embedder=emb)
    out = {}
    for kind, qs in (("answerable", questions(data, name)),
                     ("unanswerable", questions(data, other))):
        res = ev.retrieve_many(qs, 5)
        got = [answer_question(q, r) for q, r in zip(qs, res)]
        out[kind] = [(a.confidence, a.similarity) for a in got]
    return out


def judged(s: dict[str, list[tuple]], c: float, d: float) -> dict[str, float]:
    """Precision and recall of "not found" (confidence < c and similarity < d) and the
    share of answerable questions it wrongly withholds."""
    def nf(x):
        return x[0] < c and (x[1] is None or x[1] < d)
    tp = sum(map(nf, s["unanswerable"]))
    fp = sum(map(nf, s["answerable"]))
    fn = len(s["unanswerable"]) - tp
    p = tp / (tp + fp) if tp + fp else 1.0
    r = tp / (tp + fn) if tp + fn else 1.0
    return {"precision": 100 * p, "recall": 100 * r,
            "f1": 200 * p * r / (p + r) if p + r else 0.0,
            "answerable_withheld": 100 * fp / max(1, len(s["answerable"])),
            "answerable": len(s["answerable"]), "unanswerable": len(s["unanswerable"])}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args(argv)
    emb = get_embedder("minilm")
    got = {f"{c} vs {o}": scores(Path(a.data), c, o, emb) for c, o in PAIRS}
    first = got[f"{PAIRS[0][0]} vs {PAIRS[0][1]}"]
    grid = [(c / 20, d / 40) for c in range(1, 21) for d in range(4, 41)]
    best = max(grid, key=lambda cd: (judged(first, *cd)["f1"], -cd[0], -cd[1]))
    cov_only = max((c / 20 for c in range(1, 21)),
                   key=lambda c: (judged(first, c, 2.0)["f1"], -c))
    sim_only = max((d / 40 for d in range(4, 41)),
                   key=lambda d: (judged(first, 2.0, d)["f1"], -d))
    print(f"chosen on {PAIRS[0][0]} vs {PAIRS[0][1]}: confidence {best[0]:.2f}, similarity "
          f"{best[1]:.3f} (evireform.answer: FOUND_COVERAGE = {FOUND_COVERAGE}, "
          f"FOUND_SIMILARITY = {FOUND_SIMILARITY}); alone: confidence {cov_only:.2f}, "
          f"similarity {sim_only:.3f}")
    rules = {"both": (FOUND_COVERAGE, FOUND_SIMILARITY), "confidence alone": (cov_only, 2.0),
             "similarity alone": (2.0, sim_only)}
    rows = {}
    for rule, (c, d) in rules.items():
        print(f"\n{rule}: not found when confidence < {c:.2f}" if c <= 1 else
              f"\n{rule}:", f"similarity < {d:.3f}" if d <= 1 else "")
        print(f"{'corpus vs other questions':28} {'P':>6} {'R':>6} {'F1':>6} {'withheld':>9}  n")
        for name, s in got.items():
            row = judged(s, c, d)
            rows[f"{rule}: {name}"] = row
            print(f"{name:28} {row['precision']:6.2f} {row['recall']:6.2f} "
                  f"{row['f1']:6.2f} {row['answerable_withheld']:8.2f}%  "
                  f"{row['answerable']}+{row['unanswerable']}"
                  + ("  (chosen here)" if s is first else ""))
    if a.json:
        Path(a.json).write_text(json.dumps({"found_coverage": FOUND_COVERAGE,
                                            "found_similarity": FOUND_SIMILARITY,
                                            "best_on_first": best, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
