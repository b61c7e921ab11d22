"""The LLM-free controller: sufficient once every name the question mentions is found in the
observed passages.
"""
from __future__ import annotations

from typing import Sequence

from ..entities import canonical_entity
from ..extract import name_spans
from ..types import Passage
from .base import Controller


class ObservationController(Controller):
    """LLM-free sufficiency: sufficient once every name the question mentions is found in the
    passages (a proxy for "no entity of the question is left unresolved")."""

    name = "observation-v1"

    def sufficient(self, question: str, passages: Sequence[Passage]) -> bool:
        names = [canonical_entity(s) for s in name_spans(question)]
        text = canonical_entity(" ".join(p.title + " " + p.text for p in passages))
        return all(n in text for n in names if n)
