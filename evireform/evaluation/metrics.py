"""Retrieval metrics (paper Eqs. 16-18), in percent, for K in 1, 5, 10, 20:
Recall@K = mean |G ∩ R_K| / |G|;  Chain@K = mean 1[G ⊆ R_K];  Hit@K = mean 1[G ∩ R_K ≠ ∅].
G is the gold evidence (:attr:`Question.evidence`): one passage each on the paper's sets; where a
supporting title is a document cut into several passages, that document is one piece of
evidence, found when any of its passages is in R_K (Recall and Chain count documents).
Answer F1/EM (Appendix C.4) are in :mod:`evireform.evaluation.qa`.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .data import Question

KS = (1, 5, 10, 20)


def _norm_text(text: str) -> str:
    return " ".join(str(text).lower().split())


def answer_found(question: Question, texts: Sequence[str]) -> bool:
    """True when the question's answer (or an alias) occurs in one of ``texts``, compared
    lower-cased with runs of white space as one space (answer-string recall)."""
    wants = [_norm_text(a) for a in (question.answer, *question.aliases) if str(a).strip()]
    return any(w in _norm_text(t) for t in texts for w in wants)


def per_question(rankings: Sequence[Sequence[int]], questions: Sequence[Question], ks: Sequence[int]=KS,
                 texts: Sequence[str] | None = None):
    """Per-question recall/chain/hit at each K, as arrays (0/1 or fractions); with ``texts``
    (each passage's title and text by corpus position) also ``answer@K``: the answer string
    in one of the top K passages."""
    out = {}
    for K in ks:
        if texts is not None:
            out[f"answer@{K}"] = np.array(
                [float(answer_found(q, [texts[int(j)] for j in list(ranked)[:K]]))
                 for ranked, q in zip(rankings, questions)])
        rec, ch, hit = [], [], []
        for ranked, q in zip(rankings, questions):
            top = set(int(j) for j in list(ranked)[:K])
            found, n = q.found(top), len(q.evidence)
            rec.append(found / n)
            ch.append(float(found == n))
            hit.append(float(found > 0))
        out[f"recall@{K}"] = np.array(rec)
        out[f"chain@{K}"] = np.array(ch)
        out[f"hit@{K}"] = np.array(hit)
    return out


def metrics(rankings: Any, questions: Sequence[str], ks: Sequence[int]=KS,
            texts: Sequence[str] | None = None) -> dict[str, float]:
    """Recall@K, Chain@K, Hit@K in percent (paper Eqs. 16-18); Answer@K with ``texts``."""
    return {k: round(100.0 * float(v.mean()), 2)
            for k, v in per_question(rankings, questions, ks, texts).items()}
