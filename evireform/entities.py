"""Canonical entity names.

Two mentions are the same entity when their canonical forms are equal.  The folding is:

1. Unicode NFKC normalisation, then case folding (``"Straße"`` -> ``"strasse"``);
2. every character that is not a letter or a digit becomes a space (punctuation, hyphens,
   quotes, brackets);
3. runs of whitespace collapse to one space, ends are stripped;
4. one leading English article (``the``, ``a``, ``an``) is dropped when something follows it.

A mention whose canonical form is empty is not an entity.
"""
from __future__ import annotations

from typing import Any

import re
import unicodedata

_NON_ALNUM = re.compile(r"[\W_]+", re.UNICODE)
_WORD = re.compile(r"\w+", re.UNICODE)
_ARTICLE = re.compile(r"^(?:the|a|an) (?=\S)")


def canonical_entity(mention: str) -> str:
    """Fold ``mention`` to its canonical form (see the module docstring)."""
    s = unicodedata.normalize("NFKC", str(mention)).casefold()
    s = _NON_ALNUM.sub(" ", s).strip()
    return _ARTICLE.sub("", s)


def words(text: str) -> list[str]:
    """The lower-cased word tokens of ``text`` (``\\w+``), in order: the one tokenizer of the
    LLM-free roles, the evidence-graph attribution and the hashing embedder."""
    return _WORD.findall(text.lower())


def fold_mentions(propositions: Any, names: list[str], ids: dict[str, int]) -> list[list[int]]:
    """Entity ids of each proposition's mentions, folded with :func:`canonical_entity`;
    mentions that fold to nothing are dropped, new names are appended to ``names`` / ``ids``
    in first-mention order (how a build numbers entities, and how an update extends it)."""
    rows = []
    for pr in propositions:
        row = []
        for mention in pr.entities:
            c = canonical_entity(mention)
            if not c:
                continue
            if c not in ids:
                ids[c] = len(names)
                names.append(c)
            row.append(ids[c])
        rows.append(row)
    return rows
