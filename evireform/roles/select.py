"""The LLM-free selectors: the question's best candidates (:class:`TopScoreSelector`, the
default) and a logistic model over candidate features (:class:`LearnedSelector`).
"""
from __future__ import annotations

from typing import Any, Sequence

from .._checks import positive_int
from ..entities import canonical_entity
from ..extract import name_spans
from .base import Candidate, Selector
from .queries import _QSTOP, _words


class TopScoreSelector(Selector):
    """Select the ``n`` highest-scoring candidates (never more than ``max_selected``).

    The paper's selector is an LLM that picks *up to* 12 propositions that jointly clarify the
    question; filling the whole budget with the top 12 spreads the question's seed thinly.
    ``n=4`` is the LLM-free default; ``n=None`` fills the budget (the literal reading).  On the
    shared data 4 has the best R@5 on HotpotQA and MuSiQue and every n from 3 to 8 beats 12 on
    HotpotQA (docs/results.md, "The LLM-free selector's seed count").
    """

    #: it ranks by score alone: the retriever shows it candidates without their text
    #: (a selector without this attribute, or with it True, gets every candidate's text)
    reads_text = False

    def __init__(self, n: int | None = 4) -> None:
        if n is not None:
            positive_int(n, "n (or None)")
        self.n: int | None = n
        self.name: str = f"top-score-{n or 'all'}"

    def select(self, question: str, candidates: Sequence[Candidate], max_selected: int
               ) -> list[int]:
        limit = max_selected if self.n is None else min(self.n, max_selected)
        return [c.id for c in candidates[:limit]]


#: the features :class:`LearnedSelector` scores, in order
SELECTOR_FEATURES = ("score", "score_rel", "rank", "passage_rank", "first_of_passage",
                     "names_in_question", "new_names", "word_overlap", "passage_size",
                     "links_earlier_passage", "bias")


def selector_features(question: str, candidates: Sequence[Candidate]):
    """One row of :data:`SELECTOR_FEATURES` per candidate, from what the selector sees without
    an LLM: the cosine score and rank, the candidate's passage (its rank among distinct
    passages, whether this is its best candidate, how many candidates it has), the names the
    candidate shares with the question and the names it adds (bridge candidates), word
    overlap, and whether it names something a higher-ranked candidate of another passage
    also names."""
    import numpy as np
    n = len(candidates)
    out = np.zeros((n, len(SELECTOR_FEATURES)))
    if n == 0:
        return out
    qtext = canonical_entity(question)
    qwords = {w for w in _words(question) if w not in _QSTOP}
    umax = max(c.score for c in candidates) or 1.0
    p_rank: dict[int, int] = {}
    p_size: dict[int, int] = {}
    for c in candidates:
        p_rank.setdefault(c.passage, len(p_rank))
        p_size[c.passage] = p_size.get(c.passage, 0) + 1
    seen_p: set[Any] = set()
    earlier: dict[str, set[Any]] = {}
    for i, c in enumerate(candidates):
        names = {canonical_entity(x) for x in name_spans(c.text)} - {""}
        inq = sum(1 for x in names if x in qtext)
        words = {w for w in _words(c.text) if w not in _QSTOP}
        links = any(earlier.get(x, set()) - {c.passage} for x in names)
        out[i] = (c.score, c.score / umax, i / n, min(p_rank[c.passage], 20) / 20,
                  float(c.passage not in seen_p), inq / max(1, len(names)),
                  min(len(names) - inq, 5) / 5, len(qwords & words) / max(1, len(qwords)),
                  min(p_size[c.passage], 10) / 10, float(links), 1.0)
        seen_p.add(c.passage)
        for x in names:
            earlier.setdefault(x, set()).add(c.passage)
    return out


class LearnedSelector(Selector):
    """An LLM-free selector fitted to a strong LLM's recorded selections: a logistic model
    over :func:`selector_features`; it takes the ``n`` candidates the model rates most likely
    to be chosen, in candidate order.  Fitted and evaluated by
    ``evireform analyze selector`` (fitted on one data set, evaluated on the other)."""

    def __init__(self, weights, n: int = 4) -> None:
        import numpy as np
        self.weights = np.asarray(weights, dtype=np.float64)
        if self.weights.shape != (len(SELECTOR_FEATURES),):
            raise ValueError(f"weights must have {len(SELECTOR_FEATURES)} entries")
        positive_int(n, "n")
        self.n: int = n
        self.name: str = f"learned-{n}"

    def select(self, question: str, candidates: Sequence[Candidate], max_selected: int
               ) -> list[int]:
        import numpy as np
        if not candidates:
            return []
        z = selector_features(question, candidates) @ self.weights
        top = np.argsort(-z, kind="stable")[:min(self.n, max_selected)]
        return [candidates[i].id for i in sorted(top)]
