"""Evaluation on the HippoRAG data formats: loaders, the paper's metrics, the dense baseline.

* MuSiQue format: records with ``question`` and ``paragraphs`` (``is_supporting``); gold =
  the supporting paragraphs, matched to the corpus by exact text.
* HotpotQA format (also 2WikiMultiHopQA): ``question`` and ``supporting_facts`` ([title, i]);
  gold = the distinct supporting titles, matched to the corpus by title; ``context`` may be absent.

Metrics (paper Eqs. 16-18), in percent, for K in 1, 5, 10, 20:
Recall@K = mean |G ∩ R_K| / |G|;  Chain@K = mean 1[G ⊆ R_K];  Hit@K = mean 1[G ∩ R_K ≠ ∅].
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from .types import Passage

KS = (1, 5, 10, 20)


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    answer: str
    gold: frozenset[int]          # corpus positions of the gold passages
    type: str = ""


def _norm(text: str) -> str:
    return " ".join(str(text).split())


def load_questions(path, passages: Sequence[Passage]) -> list[Question]:
    """Read MuSiQue- or HotpotQA-format questions and match gold passages to ``passages``.

    A gold passage missing from the corpus raises ``ValueError`` naming the question.
    """
    recs = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(recs, list) or not recs:
        raise ValueError(f"{path}: expected a non-empty JSON list of questions")
    by_text: dict[str, int] = {}
    by_title: dict[str, list[int]] = {}
    for j, p in enumerate(passages):
        by_text.setdefault(_norm(p.text), j)
        by_title.setdefault(p.title, []).append(j)
    out = []
    for n, r in enumerate(recs):
        qid = str(r.get("id", r.get("_id", n)))
        if "paragraphs" in r:
            gold = set()
            for para in r["paragraphs"]:
                if para.get("is_supporting"):
                    j = by_text.get(_norm(para.get("paragraph_text", "")))
                    if j is None:
                        raise ValueError(f"question {qid}: gold paragraph "
                                         f"{para.get('title')!r} is not in the corpus")
                    gold.add(j)
            qtype = f"{len(r.get('question_decomposition', []))}hop"
        elif "supporting_facts" in r:
            gold = set()
            for title in {t for t, _ in r["supporting_facts"]}:
                if title not in by_title:
                    raise ValueError(f"question {qid}: gold title {title!r} is not in the corpus")
                gold.update(by_title[title])
            qtype = str(r.get("type", ""))
        else:
            raise ValueError(f"{path}: record {n} has neither 'paragraphs' nor 'supporting_facts'")
        if not gold:
            raise ValueError(f"question {qid} has no gold passage")
        out.append(Question(qid, r["question"], str(r.get("answer", "")), frozenset(gold), qtype))
    return out


def per_question(rankings: Sequence[Sequence[int]], questions: Sequence[Question], ks=KS):
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


def metrics(rankings, questions, ks=KS) -> dict[str, float]:
    """Recall@K, Chain@K, Hit@K in percent (paper Eqs. 16-18)."""
    return {k: round(100.0 * float(v.mean()), 2) for k, v in per_question(rankings, questions, ks).items()}


def passage_texts(passages: Sequence[Passage]) -> list[str]:
    """Dense passage baseline text: title + newline + text."""
    return [f"{p.title}\n{p.text}" for p in passages]


def dense_rankings(P: np.ndarray, Q: np.ndarray, k: int) -> list[list[int]]:
    """Exact dense passage ranking (cosine, ties by lower id)."""
    from .kernels import cosine_topk_batch
    ids, _ = cosine_topk_batch(P, Q, k)
    return [[int(j) for j in row if j >= 0] for row in ids]
