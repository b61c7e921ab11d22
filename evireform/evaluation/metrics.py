"""Retrieval metrics (paper Eqs. 16-18), in percent, for K in 1, 5, 10, 20:
Recall@K = mean |G ∩ R_K| / |G|;  Chain@K = mean 1[G ⊆ R_K];  Hit@K = mean 1[G ∩ R_K ≠ ∅].
Answer F1/EM (Appendix C.4) are in :mod:`evireform.evaluation.qa`.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .data import Question

KS = (1, 5, 10, 20)


def per_question(rankings: Sequence[Sequence[int]], questions: Sequence[Question], ks: Sequence[int]=KS):
    """Per-question recall/chain/hit at each K, as arrays (0/1 or fractions)."""
    out = {}
    for K in ks:
        rec, ch, hit = [], [], []
        for ranked, q in zip(rankings, questions):
            top = set(int(j) for j in list(ranked)[:K])
            inter = len(q.gold & top)
            rec.append(inter / len(q.gold))
            ch.append(float(q.gold <= top))
            hit.append(float(inter > 0))
        out[f"recall@{K}"] = np.array(rec)
        out[f"chain@{K}"] = np.array(ch)
        out[f"hit@{K}"] = np.array(hit)
    return out


def metrics(rankings: Any, questions: Sequence[str], ks: Sequence[int]=KS) -> dict[str, float]:
    """Recall@K, Chain@K, Hit@K in percent (paper Eqs. 16-18)."""
    return {k: round(100.0 * float(v.mean()), 2) for k, v in per_question(rankings, questions, ks).items()}
