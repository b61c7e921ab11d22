"""The query cleaning every role and strategy shares: the bounds on a residual query
(:func:`clean_queries`), the question words no query keeps, and the question's words a
residual query carries (:func:`residual_words`, :func:`focus_words`).
"""
from __future__ import annotations

import re
from typing import Sequence

from ..entities import words
from ..extract.tokens import ENGLISH_STOPWORDS


#: residual queries longer than this many characters are dropped (and counted in the trace):
#: a query is a search phrase, and a runaway LLM reply should not be embedded as one
MAX_QUERY_CHARS = 1000


def clean_queries(queries: Sequence[str], limit: int) -> tuple[list[str], int]:
    """Drop non-strings, queries without a letter or digit (blank, NUL-only, punctuation:
    nothing to search for), duplicates and queries over :data:`MAX_QUERY_CHARS` characters;
    control characters are removed first; cap at ``limit``.  Returns (kept, dropped): the
    retriever counts the dropped ones in ``Trace.dropped_queries``."""
    out, dropped = [], 0
    if isinstance(queries, str):
        queries = [queries]
    for q in queries or []:
        if not isinstance(q, str):
            dropped += 1
            continue
        if not q.isprintable():
            q = "".join(c for c in q if c.isprintable() or c.isspace())
        s = q.strip()
        if not any(c.isalnum() for c in q) or s in out or len(s) > MAX_QUERY_CHARS:
            dropped += 1
            continue
        out.append(s)
    dropped += max(0, len(out) - limit)
    return out[:limit], dropped


#: question words and function words: not content a residual query or a split must keep
QUESTION_STOPWORDS = _QSTOP = {
    "what", "which", "who", "whom", "whose", "when", "where", "why", "how", "is", "was", "are",
    "were", "did", "does", "do", "the", "a", "an", "of", "in", "on", "at", "to", "for", "by",
    "with", "from", "and", "or", "that", "this", "these", "those", "be", "been", "has", "have",
    "had", "it", "its", "as", "same", "both", "than", "there", "many", "much",
}


_words = words


#: words a residual query never keeps from the question (:func:`residual_words`): the
#: question words above and the English stopwords of the phrase extractor ("if", "into",
#: "his" are not content), less those that carry a question's meaning ("first", "new",
#: "known", "called", ...)
_RESIDUAL_STOP = frozenset(_QSTOP) | (ENGLISH_STOPWORDS - {
    "one", "later", "first", "new", "well", "based", "known", "called", "named", "became",
    "become", "including", "include", "includes"})


def residual_words(text: str) -> list[str]:
    """``text``'s words that a residual query carries: no question words, no English
    function words, no one-letter tokens (the "s" of a possessive), each once, in order."""
    return list(dict.fromkeys(w for w in _words(text)
                              if w not in _RESIDUAL_STOP and (len(w) > 1 or w.isdigit())))


#: between a question word and what it asks for ("what is the birthplace", "which of its
#: options"): skipped
_FOCUS_SKIP = frozenset({"is", "was", "are", "were", "the", "a", "an", "of", "its", "their",
                         "his", "her", "this", "these", "those"})
#: where what it asks for ends ("which hash algorithm is", "what exit status does it")
_FOCUS_END = frozenset({"does", "do", "did", "is", "was", "are", "were", "can", "could", "has",
                        "have", "had", "will", "would", "should", "it", "they", "its", "their"})


def focus_words(question: str, limit: int = 3) -> list[str]:
    """What ``question`` asks for: up to ``limit`` content words right after its first
    "what", "which" or "whose" ("how many", "how much"), past auxiliaries and determiners:
    "which hash algorithm is its default" gives ``["hash", "algorithm"]``, "what is the
    birthplace of X" gives ``["birthplace"]``.  A residual query keeps them even when the
    observed passage holds them: the second hop is about them."""
    # the asking clause: the question's start, or what follows its last ":" or ";" ("The
    # tool that ...: which option ..."); a "which" inside a clause is a relative pronoun
    ws = words(re.split(r"[:;]\s", question)[-1])
    rest: list[str] = []
    if ws and ws[0] in ("what", "which", "whose"):
        rest = ws[1:]
    elif len(ws) > 1 and ws[0] == "how" and ws[1] in ("many", "much"):
        rest = ws[2:]
    k = 0
    while k < len(rest) and (rest[k] in _FOCUS_SKIP or rest[k] in _RESIDUAL_STOP):
        k += 1
    out: list[str] = []
    while k < len(rest) and len(out) < limit and rest[k] not in _FOCUS_END \
            and rest[k] not in _RESIDUAL_STOP:
        if len(rest[k]) > 1 or rest[k].isdigit():
            out.append(rest[k])
        k += 1
    return out
