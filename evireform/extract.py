"""Proposition and entity extraction.

An extractor turns one passage into propositions, each with its entity mentions.  The
interface is :class:`Extractor`; the LLM extractor (another module) implements the same one.

:class:`HeuristicExtractor` is the LLM-free default: one proposition per sentence, entities
from capitalised name spans, numbers and dates, plus the passage title.  :func:`read_openie`
reads the HippoRAG OpenIE file instead (one triple = one proposition; subject and object are
its entities).
"""
from __future__ import annotations

from ._checks import loads as _json_loads

import json
import re
from pathlib import Path
from typing import Protocol, Sequence, runtime_checkable

from .types import Passage, Proposition


@runtime_checkable
class Extractor(Protocol):
    """Splits passages into propositions with entity mentions."""

    #: recorded in the index manifest and in cache keys
    name: str

    def extract(self, passage: Passage) -> list[Proposition]:
        """Propositions of one passage (``Proposition.passage`` = ``passage.id``)."""
        ...

    def extract_many(self, passages: Sequence[Passage],
                     show_progress: bool = False) -> list[list[Proposition]]:
        """Propositions of every passage, in input order.  The default calls :meth:`extract`
        one passage at a time with a progress bar; an LLM extractor overrides it with a
        bounded pool of requests."""
        it = passages
        if show_progress:
            from tqdm.auto import tqdm
            it = tqdm(passages, total=len(passages), desc="extract", unit="passage")
        return [self.extract(p) for p in it]


# --------------------------------------------------------------------------- sentences
_ABBREV = {
    "mr", "mrs", "ms", "dr", "st", "jr", "sr", "prof", "gen", "col", "lt", "sgt", "capt", "rev",
    "no", "vs", "etc", "inc", "ltd", "co", "corp", "mt", "ft", "jan", "feb", "mar", "apr", "jun",
    "jul", "aug", "sep", "sept", "oct", "nov", "dec", "u.s", "u.k", "e.g", "i.e", "approx", "op",
    "vol", "ed", "est", "ca", "c",
}
_SPLIT = re.compile(r"(?<=[.!?])[\"”')\]]?\s+(?=[\"“'(\[]?[A-Z0-9])")


def split_sentences(text: str) -> list[str]:
    """Split text into sentences; abbreviations and initials ("J. R. R.") do not end one."""
    text = " ".join(text.split())
    if not text:
        return []
    pieces, start = [], 0
    for m in _SPLIT.finditer(text):
        head = text[start:m.start()].rstrip()
        last = head.rsplit(" ", 1)[-1].rstrip(".!?").lower()
        if last in _ABBREV or (len(last) == 1 and last.isalpha()):
            continue
        pieces.append(text[start:m.end()].strip())
        start = m.end()
    pieces.append(text[start:].strip())
    return [p for p in pieces if p]


# --------------------------------------------------------------------------- entity spotting
_MONTHS = ("January|February|March|April|May|June|July|August|September|October|November|"
           "December")
_DATE = re.compile(
    rf"\b(?:\d{{1,2}} (?:{_MONTHS}),? \d{{3,4}}|(?:{_MONTHS}) \d{{1,2}}(?:st|nd|rd|th)?,? \d{{3,4}}"
    rf"|(?:{_MONTHS}) \d{{3,4}})\b")
_NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?![\w])")
_CONNECT = {"of", "the", "de", "la", "le", "du", "del", "della", "da", "von", "van", "der", "den",
            "for", "on", "in", "y", "al", "bin", "di", "&"}
_STOP = {
    "the", "a", "an", "in", "on", "at", "it", "he", "she", "they", "this", "that", "these",
    "those", "his", "her", "their", "its", "there", "after", "before", "during", "when", "while",
    "however", "although", "as", "for", "from", "with", "by", "of", "to", "and", "but", "or",
    "if", "since", "following", "born", "we", "i", "you", "our", "my", "one", "some", "many",
    "most", "both", "each", "other", "another", "also", "then", "thus", "later", "today", "here",
    "according", "despite", "between", "under", "over", "about", "after", "all", "any", "what",
    "who", "which", "where", "why", "how", "is", "was", "are", "were", "be", "not", "no", "yes",
}
_TOKEN = re.compile(r"[\w][\w'’.\-]*|[^\w\s]", re.UNICODE)
_POSSESSIVE = re.compile(r"['’]s$")
_MONTH_SET = set(_MONTHS.lower().split("|"))


def _is_name_token(tok: str) -> bool:
    return tok[:1].isupper() or (tok[:1].isdigit() and any(c.isalpha() for c in tok))


def name_spans(sentence: str) -> list[str]:
    """Capitalised multi-word names ("University of Copenhagen"), sentence-initial stopwords
    and lone connectors excluded."""
    toks = [_POSSESSIVE.sub("", m.group(0)).rstrip(".'’") for m in _TOKEN.finditer(sentence)]
    spans, cur = [], []

    def flush():
        while cur and cur[-1].lower() in _CONNECT:
            cur.pop()
        while cur and cur[0].lower() in _STOP:
            cur.pop(0)
        if cur and not (len(cur) == 1 and cur[0].lower() in _MONTH_SET):
            spans.append(" ".join(cur))
        cur.clear()

    for tok in toks:
        if not tok or (not tok[0].isalnum() and tok != "&"):
            flush()  # punctuation ends a name
            continue
        if _is_name_token(tok):
            cur.append(tok)
        elif cur and tok.lower() in _CONNECT:
            cur.append(tok)
        else:
            flush()
    flush()
    return spans


def spot_entities(sentence: str) -> list[str]:
    """Entity mentions in a sentence: names, dates, and numbers of three or more characters."""
    out = name_spans(sentence)
    for m in _DATE.finditer(sentence):
        out.append(m.group(0))
    for m in _NUMBER.finditer(sentence):
        num = m.group(0).replace(",", "")
        if len(num) >= 3:  # years, quantities; not days of the month
            out.append(num)
    return out


class HeuristicExtractor(Extractor):
    """LLM-free extraction: one proposition per sentence.

    Each proposition's text is its sentence, prefixed with ``"<title>: "`` when the sentence
    does not already mention the title, so that a proposition stays self-contained (pronouns
    keep their referent).  Its entities are the spotted names, dates and numbers plus the
    passage title, which links every proposition of a passage.
    """

    name = "heuristic-v1"

    def __init__(self, title_prefix: bool = True, title_entity: bool = True):
        self.title_prefix = title_prefix
        self.title_entity = title_entity

    def extract(self, passage: Passage) -> list[Proposition]:
        title = passage.title.strip()
        out = []
        for sent in split_sentences(passage.text):
            ents = spot_entities(sent)
            if title and self.title_entity:
                ents.append(title)
            text = sent
            if self.title_prefix and title and title.lower() not in sent.lower():
                text = f"{title}: {sent}"
            out.append(Proposition(text=text, passage=passage.id, entities=tuple(ents)))
        return out


# --------------------------------------------------------------------------- OpenIE file
def read_openie(path, passages: Sequence[Passage]) -> tuple[list[Proposition], int]:
    """Propositions from a HippoRAG OpenIE file (``{"docs": [{"passage"|"title"+"text",
    "extracted_triples": [[s, r, o], ...]}, ...]}``).

    Each triple becomes the proposition ``"s r o"`` with entities ``s`` and ``o``; docs are
    matched to ``passages`` by their text (then by title + text); a doc with no matching
    passage raises ``ValueError``.  Malformed triples (not three strings) are skipped.
    Returns ``(propositions, n_skipped_triples)``.
    """
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
    props: list[Proposition] = []
    skipped = 0
    for n, doc in enumerate(docs):
        key = " ".join(str(doc.get("text", doc.get("passage", ""))).split())
        ids = by_text.get(key) or by_text.get(" ".join(str(doc.get("passage", "")).split()))
        if not ids:
            raise ValueError(f"OpenIE doc {n} ({doc.get('title', '')!r}) matches no corpus passage")
        # identical texts map to their passages in order
        k = used.get(key, 0)
        used[key] = k + 1
        pid = ids[min(k, len(ids) - 1)]
        for t in doc.get("extracted_triples", []) or []:
            if not (isinstance(t, (list, tuple)) and len(t) == 3
                    and all(isinstance(x, (str, int, float)) for x in t)):
                skipped += 1
                continue
            s, r, o = (str(x).strip() for x in t)
            text = " ".join(x for x in (s, r, o) if x)
            if text:
                props.append(Proposition(text=text, passage=pid,
                                         entities=tuple(x for x in (s, o) if x)))
    return props, skipped
