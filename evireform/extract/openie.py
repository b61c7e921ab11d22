"""HippoRAG's OpenIE file read as propositions: one triple is one proposition, its subject
and object its entities (:func:`read_openie`, :func:`openie_triples`).
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Sequence, TYPE_CHECKING

from .._checks import loads as _json_loads
from ..types import Passage, Proposition

if TYPE_CHECKING:  # annotations only
    from ..types import StrPath


def openie_triples(path: StrPath, passages: Sequence[Passage]) -> tuple[dict[str, list[Any]], int]:
    """The triples of a HippoRAG OpenIE file (``{"docs": [{"passage"|"title"+"text",
    "extracted_triples": [[s, r, o], ...]}, ...]}``) per passage id, as the file has them
    (each ``(s, r, o)`` stripped; malformed ones, not three strings or numbers, skipped), in
    the file's order.

    Docs are matched to ``passages`` by their text (then by title + text); a doc with no
    matching passage raises ``ValueError``.  Returns ``(triples by passage id, n_skipped)``."""
    triples, _, skipped = _openie_docs(path, passages)
    return triples, skipped


def _openie_docs(path: StrPath, passages: Sequence[Passage]):
    """``(triples by passage id, named entities by passage id, n_skipped)`` of a HippoRAG
    OpenIE file (see :func:`openie_triples`); the named entities are the docs'
    ``"extracted_entities"`` (strings or numbers, stripped, in the file's order)."""
    path = Path(path)
    try:
        obj = _json_loads(path.read_text(encoding="utf-8"), str(path))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read OpenIE file {path}: {exc}") from None
    docs = obj.get("docs") if isinstance(obj, dict) else None
    if not isinstance(docs, list):
        raise ValueError(f"OpenIE file {path} has no 'docs' list")
    by_text: dict[str, list[str]] = {}
    for p in passages:
        by_text.setdefault(" ".join(p.text.split()), []).append(p.id)
        by_text.setdefault(" ".join(f"{p.title}\n{p.text}".split()), []).append(p.id)
    used: dict[str, int] = {}
    out: dict[str, list[Any]] = {}
    named: dict[str, list[Any]] = {}
    skipped = repeated = empty = 0
    for n, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise ValueError(f"OpenIE file {path}: doc {n} is not an object")
        for field in ("extracted_triples", "extracted_entities"):
            if doc.get(field) is not None and not isinstance(doc.get(field), list):
                raise ValueError(f"OpenIE file {path}: doc {n} ({doc.get('title', '')!r:.60}): "
                                 f"'{field}' must be a list, not "
                                 f"{type(doc.get(field)).__name__}")
        key = " ".join(str(doc.get("text", doc.get("passage", ""))).split())
        ids = by_text.get(key) or by_text.get(" ".join(str(doc.get("passage", "")).split()))
        if not ids:
            raise ValueError(f"OpenIE file {path}: doc {n} ({doc.get('title', '')!r}) matches "
                             "no corpus passage")
        # identical texts map to their passages in order; a doc beyond them repeats one
        k = used.get(key, 0)
        used[key] = k + 1
        if k >= len(ids):
            repeated += 1
            continue
        pid = ids[k]
        got = out.setdefault(pid, [])
        if not doc.get("extracted_triples"):
            empty += 1
        for t in doc.get("extracted_triples", []) or []:
            if not (isinstance(t, (list, tuple)) and len(t) == 3
                    and all(isinstance(x, (str, int, float)) for x in t)):
                skipped += 1
                continue
            got.append(tuple(str(x).strip() for x in t))
        ents = doc.get("extracted_entities") or []
        named.setdefault(pid, []).extend(
            s for s in (str(e).strip() for e in (ents if isinstance(ents, list) else [])
                        if isinstance(e, (str, int, float))) if s)
    missing = len({p.id for p in passages} - set(out))
    if repeated or empty or missing:
        import logging
        logging.getLogger(__name__).warning(
            "OpenIE file %s: %s", path, "; ".join(x for x in (
                f"{repeated} docs repeat a passage an earlier doc gave (their triples are "
                "not read twice)" if repeated else "",
                f"{empty} docs have no triples" if empty else "",
                f"{missing} of {len(passages)} passages have no doc (no propositions)"
                if missing else "") if x))
    return out, named, skipped


def read_openie(path: StrPath, passages: Sequence[Passage], *,
                plain: bool = False) -> tuple[list[Proposition], int]:
    """Propositions from a HippoRAG OpenIE file (:func:`openie_triples`), one per triple
    ``(s, r, o)``.

    ``plain=True``: the triple as the file has it, text ``"s r o"``, entities ``s`` and
    ``o``.  Default: the conventions of the built-in extractors (:class:`HeuristicExtractor`)
    on top: the text is prefixed with ``"<title>: "`` when it does not mention its
    passage's title (a triple out of its passage often names neither the passage's subject
    nor its context), the title is an entity (linking the passage's triples), and so is
    each of the doc's named entities (``"extracted_entities"``) that occurs, as whole words
    and in any case, in ``s`` or ``o`` (so "monthly publication in 1963" meets "1963").
    On the shared MuSiQue file LLM-free EviReform retrieves R@5 73.08 with these against
    69.92 plain (``python scripts/case_table.py``).  Returns ``(propositions,
    n_skipped_triples)``."""
    triples, named, skipped = _openie_docs(path, passages)
    titles = {p.id: p.title.strip() for p in passages}
    props: list[Proposition] = []
    for pid, found in triples.items():  # in the file's order
        title = titles.get(pid, "")
        spot = None if plain else _WholeWords(named.get(pid, []))
        for s_, r, o in found:
            text = " ".join(x for x in (s_, r, o) if x)
            if not text:
                continue
            ents = tuple(x for x in (s_, o) if x)
            if not plain and title:
                if title.casefold() not in text.casefold():
                    text = f"{title}: {text}"
                if title not in ents:
                    ents += (title,)
            if spot:
                have = set(ents)
                ents += tuple(e for e in spot.found(s_.casefold(), o.casefold())
                              if e not in have)
            props.append(Proposition(text=text, passage=pid, entities=ents))
    return props, skipped


_TOKEN_RUN = re.compile(r"\w+|\W", re.UNICODE)
_WORD_START = re.compile(r"\w", re.UNICODE)


class _WholeWords:
    r"""A doc's named entities found as whole words (``(?<!\w)name(?!\w)``, case-folded) in
    a triple's arguments, in time linear in the arguments: each name is indexed by its
    tokens (runs of word characters, single other characters), and an argument's token
    spans up to the longest name's are looked up, instead of one pattern per name per
    triple (quadratic: 20,000 names x 2,000 triples)."""

    def __init__(self, names: Sequence[str]) -> None:
        self.order: dict[str, int] = {}
        self.by_tokens: dict[tuple, list[str]] = {}
        for e in names:
            if e in self.order:
                continue
            self.order[e] = len(self.order)
            toks = tuple(_TOKEN_RUN.findall(e.casefold()))
            if toks:
                self.by_tokens.setdefault(toks, []).append(e)
        self.longest = max(map(len, self.by_tokens), default=0)

    def __bool__(self) -> bool:
        return bool(self.by_tokens)

    def found(self, *args: str) -> list[str]:
        """The names occurring in any of ``args`` (case-folded), in the names' order."""
        hit: set[Any] = set()
        for a in args:
            toks = _TOKEN_RUN.findall(a)
            n = len(toks)
            for i in range(n):
                for j in range(i + 1, min(n, i + self.longest) + 1):
                    names = self.by_tokens.get(tuple(toks[i:j]))
                    if names and self._bounded(toks, i, j):
                        hit.update(names)
        return sorted(hit, key=self.order.__getitem__)

    @staticmethod
    def _bounded(toks, i: int, j: int) -> bool:
        """No word character touches the span ``toks[i:j]`` from outside (a token is a whole
        word run, so only a span edge that is not a word character can be touched)."""
        def word(t) -> bool:
            return _WORD_START.match(t) is not None
        if i > 0 and not word(toks[i]) and word(toks[i - 1]):
            return False
        if j < len(toks) and not word(toks[j - 1]) and word(toks[j]):
            return False
        return True
