"""The retriever's three decision roles and their LLM-free implementations.

* :class:`Selector` picks seed propositions among the question's candidates (paper Eq. 7);
* :class:`Reformulator` turns the question and the observed passages into residual queries
  (section 3.6);
* :class:`Controller` decides, between rounds, whether the evidence is sufficient (Eq. 19).

The LLM implementations (another module) plug into the same interfaces.  Whatever a role
returns is validated by the retriever (Appendix C.1), so a role can never crash retrieval.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable

from .entities import canonical_entity
from .extract import name_spans
from .types import Passage


@dataclass(frozen=True)
class Candidate:
    """A candidate proposition shown to the selector."""

    id: int
    score: float
    text: str
    passage: int


@runtime_checkable
class Selector(Protocol):
    name: str

    def select(self, question: str, candidates: Sequence[Candidate], max_selected: int) -> list[int]:
        """Proposition ids chosen among ``candidates`` (invalid ids are dropped later)."""
        ...


@runtime_checkable
class Reformulator(Protocol):
    name: str

    def reformulate(self, question: str, observed: Sequence[Passage], max_queries: int) -> list[str]:
        """Residual queries for what ``observed`` leaves unresolved (empty ones are dropped)."""
        ...


@runtime_checkable
class Controller(Protocol):
    name: str

    def sufficient(self, question: str, passages: Sequence[Passage]) -> bool:
        """True when ``passages`` suffice to answer ``question`` (stop adding rounds)."""
        ...


class TopScoreSelector:
    """Select the highest-scoring candidates (the paper's fallback, generalised)."""

    name = "top-score"

    def select(self, question, candidates, max_selected):
        return [c.id for c in candidates[:max_selected]]


_WORD = re.compile(r"\w+", re.UNICODE)
_QSTOP = {
    "what", "which", "who", "whom", "whose", "when", "where", "why", "how", "is", "was", "are",
    "were", "did", "does", "do", "the", "a", "an", "of", "in", "on", "at", "to", "for", "by",
    "with", "from", "and", "or", "that", "this", "these", "those", "be", "been", "has", "have",
    "had", "it", "its", "as", "same", "both", "than", "there", "many", "much",
}


def _words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower())]


class BridgeReformulator:
    """LLM-free residual queries: the question's unresolved relation plus a bridge entity.

    For each observed passage (in observation order) the bridge is the passage title when the
    question does not name it, else the first name span of the passage that the question does
    not contain.  The unresolved relation is the question's content words that the observed
    passage does not contain.  Query = ``"<bridge> <unresolved words>"``.
    """

    name = "bridge-v1"

    def reformulate(self, question, observed, max_queries):
        q_canon = canonical_entity(question)
        q_words = [w for w in _words(question) if w not in _QSTOP]
        out: list[str] = []
        for p in observed:
            bridge = None
            if p.title and canonical_entity(p.title) not in q_canon:
                bridge = p.title
            else:
                for span in name_spans(p.text):
                    c = canonical_entity(span)
                    if c and c not in q_canon:
                        bridge = span
                        break
            if bridge is None:
                continue
            covered = set(_words(p.title + " " + p.text))
            rest = [w for w in q_words if w not in covered]
            query = " ".join([bridge] + (rest or q_words))
            if query not in out:
                out.append(query)
            if len(out) >= max_queries:
                break
        return out


class ObservationController:
    """LLM-free sufficiency: sufficient once every name the question mentions is found in the
    passages (a proxy for "no entity of the question is left unresolved")."""

    name = "observation-v1"

    def sufficient(self, question, passages):
        names = [canonical_entity(s) for s in name_spans(question)]
        text = canonical_entity(" ".join(p.title + " " + p.text for p in passages))
        return all(n in text for n in names if n)
