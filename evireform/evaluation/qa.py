"""Answer scoring (paper Appendix C.4); the reader itself is :class:`evireform.llm.LLMReader`.

Normalisation: lower-case, drop punctuation, drop the articles a/an/the, collapse whitespace.
Token F1 over multisets (0 when nothing overlaps); EM = equality after normalisation.  When
either side is one of the special answers yes / no / noanswer and they differ, F1 is 0.  With
several gold answers (MuSiQue aliases) a prediction gets its best score over them.  An
"unknown" prediction is scored as an ordinary (incorrect) answer.
"""
from __future__ import annotations

import re
import string
from collections import Counter
from typing import Any, Sequence

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
SPECIAL = {"yes", "no", "noanswer"}


def normalize_answer(s: str) -> str:
    s = str(s).lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def f1_score(pred: str, gold: str) -> float:
    p, g = normalize_answer(pred), normalize_answer(gold)
    if (p in SPECIAL or g in SPECIAL) and p != g:
        return 0.0
    pt, gt = p.split(), g.split()
    common = sum((Counter(pt) & Counter(gt)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pt), common / len(gt)
    return 2 * precision * recall / (precision + recall)


def exact_match(pred: str, gold: str) -> float:
    return float(normalize_answer(pred) == normalize_answer(gold))


def best_scores(pred: str, golds: Sequence[str]) -> tuple[float, float]:
    """(F1, EM) of ``pred`` against its best-matching gold answer."""
    golds = [g for g in golds if g is not None] or [""]
    return max(f1_score(pred, g) for g in golds), max(exact_match(pred, g) for g in golds)


def qa_metrics(preds: Sequence[str], golds: Sequence[Sequence[str]]) -> dict[str, Any]:
    """Mean F1 and EM in percent."""
    if not preds:
        return {"f1": 0.0, "em": 0.0}
    s = [best_scores(p, g) for p, g in zip(preds, golds)]
    return {"f1": round(100 * sum(x for x, _ in s) / len(s), 2),
            "em": round(100 * sum(y for _, y in s) / len(s), 2)}
