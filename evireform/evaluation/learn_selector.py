"""Fit an LLM-free selector to a strong LLM's recorded selections, and judge it on the other
data set (``evireform analyze selector``).

For each question of the training set the candidates are rebuilt exactly as the retriever
shows them, the recorded ``select`` reply (``../shared/llm-replies``) is mapped to candidate
ids (:class:`~evireform.llm.ReplayIndex`), and a logistic model over
:func:`~evireform.roles.selector_features` learns which candidates the LLM picks.  The seed
count n (3, 4 or 6) is chosen on the training set.  The learned selector is then run on the
*other* set with the LLM-free reformulator, beside ``TopScoreSelector(n=4)`` and the recorded
LLM selection (also with the LLM-free reformulator), all in one run.
"""
from __future__ import annotations

from typing import Any, Sequence, TYPE_CHECKING

from pathlib import Path

import numpy as np

from .data import DATASETS, load_questions
from .metrics import metrics

if TYPE_CHECKING:  # annotations only
    from ..embed import Embedder
    from ..roles import Selector
    from ..index import PropositionIndex

N_CHOICES = (3, 4, 6)


def _setup(data: Path, dataset: str, embedder: Embedder):
    from ..cache import cached_index
    qrel, crel = DATASETS[dataset]
    idx, _, _ = cached_index(data / crel, embedder, show_progress=False)
    qs = load_questions(data / qrel, idx.passages)
    return idx, qs


def _llm_choices(idx: PropositionIndex, qs: Sequence[str], embedder: Embedder, replies: Path):
    """(candidates, chosen ids) per question, from the recorded select replies."""
    from ..llm import LLMClient, LLMConfig, LLMSelector
    from ..retriever import EviReform, EviReformConfig
    from ..roles import Candidate

    client = LLMClient(LLMConfig(model="strong-llm", offline=True, replay_paths=(str(replies),)))
    sel = LLMSelector(client)
    res = EviReform(idx, EviReformConfig(reformulation=False, propagation=False),
                    embedder=embedder).retrieve_many([q.question for q in qs], 20)
    out = []
    for q, r in zip(qs, res):
        cands = [Candidate(i, u, idx.prop_texts[i], int(idx.owner[i]))
                 for i, u in r.trace.candidates]
        chosen = sel.select(q.question, cands, 12)
        out.append((cands, list(chosen) if not chosen.fallback else None))
    return out


def fit_logistic(X: np.ndarray, y: np.ndarray, l2: float = 1.0, iters: int = 50) -> np.ndarray:
    """L2-regularised logistic regression by Newton's method (the bias is the last column)."""
    w = np.zeros(X.shape[1])
    reg = l2 * np.eye(X.shape[1])
    reg[-1, -1] = 0.0
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-(X @ w)))
        g = X.T @ (p - y) + reg @ w
        H = (X * (p * (1 - p))[:, None]).T @ X + reg
        step = np.linalg.solve(H, g)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w


def _run(idx: PropositionIndex, qs: Sequence[str], embedder: Embedder, selector: Selector,
         config: Any = None) -> dict[str, Any]:
    from ..retriever import EviReform
    r = EviReform(idx, config, embedder=embedder, selector=selector)
    res = r.retrieve_many([q.question for q in qs], 20)
    return metrics([[p.index for p in x.passages] for x in res], qs)


def agreement(selector: Selector, rows: Sequence[Any], qs: Sequence[Any]) -> dict[str, float]:
    """How closely ``selector`` chooses as the LLM did, over the questions whose recorded
    choice ``rows`` holds (:func:`_llm_choices`: the same candidates): ``precision`` (of its
    picks, the share the LLM picked too), ``recall`` (of the LLM's picks, the share it
    picked), ``top`` (questions whose first pick the LLM picked), as percentages over
    questions, and ``ms`` (its mean wall time a question, in-process)."""
    import time
    prec, rec, top, took = [], [], [], []
    for (cands, chosen), q in zip(rows, qs):
        if chosen is None or not cands:
            continue
        t = time.perf_counter()
        got = [int(i) for i in selector.select(q.question, cands, 12)]
        took.append(time.perf_counter() - t)
        want = set(int(i) for i in chosen)
        prec.append(len(set(got) & want) / len(got) if got else 0.0)
        rec.append(len(set(got) & want) / len(want) if want else 1.0)
        top.append(float(bool(got) and got[0] in want))
    return {"precision": 100 * float(np.mean(prec)), "recall": 100 * float(np.mean(rec)),
            "top": 100 * float(np.mean(top)), "ms": 1e3 * float(np.mean(took))}


def selector_study(data: Path, embedder: Embedder, replies_dir: Path, config: Any = None) -> str:
    """Both directions (fit on one set, evaluate on the other) as a Markdown table;
    ``config``: the EviReformConfig the selectors are evaluated under (default: the
    defaults)."""
    from ..llm import LLMClient, LLMConfig, LLMSelector
    from ..roles import SELECTOR_FEATURES, LearnedSelector, TopScoreSelector, selector_features
    sets = {d: _setup(data, d, embedder) for d in ("hotpotqa", "musique")}
    lines = ["| fitted on → evaluated on | selector | R@5 | C@5 | agrees: precision | recall "
             "| first pick | ms a question |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    fitted = {}
    for train, test in (("hotpotqa", "musique"), ("musique", "hotpotqa")):
        idx, qs = sets[train]
        rows = _llm_choices(idx, qs, embedder, replies_dir / f"{train}.jsonl")
        X, y = [], []
        for (cands, chosen), q in zip(rows, qs):
            if chosen is None or not cands:
                continue
            X.append(selector_features(q.question, cands))
            y.append(np.isin([c.id for c in cands], chosen).astype(float))
        w = fit_logistic(np.concatenate(X), np.concatenate(y))
        picks = np.mean([len(c) for _, c in rows if c is not None])
        # the seed count, chosen on the training set
        n = max(N_CHOICES, key=lambda k: (_run(idx, qs, embedder, LearnedSelector(w, k), config)
                                           ["recall@5"], -k))
        fitted[train] = (w, n, picks)
        tidx, tqs = sets[test]
        learned = _run(tidx, tqs, embedder, LearnedSelector(w, n), config)
        top4 = _run(tidx, tqs, embedder, TopScoreSelector(4), config)
        client = LLMClient(LLMConfig(model="strong-llm", offline=True,
                                     replay_paths=(str(replies_dir / f"{test}.jsonl"),)))
        llm = _run(tidx, tqs, embedder, LLMSelector(client), config)
        label = f"{train} → {test}"
        # agreement with the LLM's recorded choice on the evaluated set's candidates
        trows = _llm_choices(tidx, tqs, embedder, replies_dir / f"{test}.jsonl")
        agree = {"learned": agreement(LearnedSelector(w, n), trows, tqs),
                 "top4": agreement(TopScoreSelector(4), trows, tqs)}
        for name, m, a in ((f"LearnedSelector(n={n})", learned, agree["learned"]),
                           ("TopScoreSelector(n=4)", top4, agree["top4"]),
                           ("recorded LLM selection", llm, None)):
            tail = ("– | – | – | – |" if a is None else
                    f"{a['precision']:.2f} | {a['recall']:.2f} | {a['top']:.2f} | "
                    f"{a['ms']:.3f} |")
            lines.append(f"| {label} | {name} | {m['recall@5']:.2f} | {m['chain@5']:.2f} | "
                         + tail)
    lines.append("")
    lines.append("All with the LLM-free reformulator and the paper's other defaults. The "
                 "agreement columns compare each selector's picks with the LLM's recorded "
                 "picks on the same candidates (mean over questions). Weights "
                 "(features: " + ", ".join(SELECTOR_FEATURES) + "):")
    for train, (w, n, picks) in fitted.items():
        lines.append(f"- fitted on {train} (n={n}; the LLM picked {picks:.1f} candidates per "
                     "question there): " + ", ".join(f"{v:+.2f}" for v in w))
    return "\n".join(lines)
