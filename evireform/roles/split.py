"""Hi-Q's question split without an LLM: a question's dependent part and its first hop
(:func:`split_query`, :class:`HeuristicSplitter`) and the substitution of the first hop's
answer (:class:`SubstitutionRewriter`).
"""
from __future__ import annotations

import re

from ..entities import canonical_entity
from ..extract import name_spans
from .base import RoleResult
from .queries import _QSTOP, _words


def constraints(text: str) -> list[str]:
    """The named constraints of a text: its capitalised name spans, folded."""
    return [c for c in (canonical_entity(s) for s in name_spans(text)) if c]


_MARKERS = {"which", "that", "who", "whose", "whom", "where", "when", "of"}
_HEAD_STOP = {"the", "a", "an", "of", "in", "by", "for", "to", "from", "at", "on", "with",
              "which", "that", "who", "whose", "whom", "where", "when", "is", "was", "are",
              "were", "did", "does", "do", "what", "how", "many", "much"}
_CONNECT_OF = {"of", "and", "the", "&", ",", "-", "de", "la", "von", "van", "der", "du"}
_TOK = re.compile(r"#\d+|[\w'’.-]+|[^\w\s]")


def split_query(query: str) -> tuple[str, str] | None:
    """The LLM-free dependency-preserving split (see the module docstring): ``(independent,
    dependent with #1)`` or None when the query has no such split."""
    toks = _TOK.findall(query.strip().rstrip("?").strip())
    cons = constraints(query)
    if not cons:
        return None
    for m in range(len(toks) - 1, 0, -1):
        if toks[m].lower() not in _MARKERS:
            continue
        clause = " ".join(toks[m:])
        if not any(c in canonical_entity(clause) for c in cons):
            continue
        h = m
        while h > 0 and toks[h - 1].lower() not in _HEAD_STOP and toks[h - 1] not in ",;:":
            h -= 1
        if h == m and toks[m].lower() != "of":
            continue  # a clause without a head noun (e.g. "when he died"): not a split point
        # where the independent phrase ends: after the name an "of" introduces, or at the
        # clause's comma; what follows stays with the dependent side
        end = m + 1
        if toks[m].lower() == "of":
            while end < len(toks) and toks[end].lower() in ("the", "a", "an"):
                end += 1
            start = end
            while end < len(toks) and (toks[end][:1].isupper() or toks[end][:1].isdigit()
                                       or (end > start and toks[end].lower() in _CONNECT_OF)):
                end += 1
            while end > start and toks[end - 1].lower() in _CONNECT_OF:
                end -= 1
            if end == start:
                continue  # "of" without a name after it
        else:
            end = next((i for i in range(m + 1, len(toks)) if toks[i] in ",;"), len(toks))
        lo = h if h < m else m + 1
        first = " ".join(toks[lo:end])
        rest = toks[:h] if h < m else toks[:m + 1]
        while rest and rest[-1].lower() in ("the", "a", "an"):
            rest = rest[:-1]
        second = " ".join(rest + ["#1"] + toks[end:])
        if not [w for w in _words(" ".join(rest + toks[end:])) if w not in _QSTOP]:
            continue  # nothing left to ask of the answer
        if len(first) >= len(query.strip()) or not first:
            continue
        return first, second
    return None


def covers(query: str, first: str, second: str) -> bool:
    """LLM-free coverage verification: the two sides keep every content word and named
    constraint of ``query`` and the dependent side refers to the independent one (#1)."""
    if "#1" not in second or not first.strip():
        return False
    both = set(_words(first + " " + second.replace("#1", " ")))
    need = {w for w in _words(query) if w not in _QSTOP}
    cons_text = canonical_entity(first + " " + second)
    return need <= both and all(c in cons_text for c in constraints(query))


class HeuristicSplitter:
    """Hi-Q's LLM-free split and coverage test (:func:`split_query`, :func:`covers`) behind
    the splitter contract of :class:`evireform.llm.LLMSplitter`: ``split(query)`` gives a
    :class:`RoleResult` of at most one ``(independent, dependent with #1)`` pair,
    ``verify(query, first, second)`` a bool."""

    name = "heuristic-split"

    def split(self, query: str) -> "RoleResult":
        s = split_query(query)
        return RoleResult([s] if s else [], role="hiq-split")

    def verify(self, query: str, first: str, second: str) -> bool:
        return covers(query, first, second)


class SubstitutionRewriter:
    """Hi-Q's LLM-free rewriting: the prerequisite's answer put in place of ``#1`` in the
    dependent query (:class:`evireform.llm.LLMRewriter` is the LLM's)."""

    name = "substitution"

    def rewrite(self, dependent: str, prerequisite: str, answer: str) -> str:
        return dependent.replace("#1", answer)
