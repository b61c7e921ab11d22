"""Text handling that does not assume capitalised English: Unicode sentences and words.

:func:`sentences` splits at ``. ! ?`` followed by whitespace whatever the next letter's case
(abbreviations and single-letter initials excepted), at the full-width ``。 ！ ？ ；`` without
needing a space, at blank lines and before Markdown headings and list items.  :func:`tokens`
gives lower-cased word tokens for spaced scripts and single characters for unspaced ones
(Chinese, Japanese kana, Korean), so that phrases can be counted in any of them.
"""
from __future__ import annotations

import re

__all__ = ["sentences", "tokens", "is_cjk", "ABBREVIATIONS", "snippet"]

#: tokens that a period does not end a sentence after (lower-cased, without the period)
ABBREVIATIONS = {
    "mr", "mrs", "ms", "dr", "st", "jr", "sr", "prof", "gen", "col", "lt", "sgt", "capt", "rev",
    "no", "vs", "etc", "inc", "ltd", "co", "corp", "mt", "ft", "jan", "feb", "mar", "apr", "jun",
    "jul", "aug", "sep", "sept", "oct", "nov", "dec", "u.s", "u.k", "e.g", "i.e", "approx", "op",
    "vol", "ed", "est", "ca", "c", "bzw", "z.b", "d.h", "usw", "ggf", "vgl", "nr", "hr", "fr",
    "dipl", "ing", "mio", "mrd", "bzgl", "ca", "st", "p", "pp", "fig", "cf", "al",
}
_CJK_CHARS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_CJK = re.compile(f"[{_CJK_CHARS}]")
_BLOCK = re.compile(r"\n\s*\n|\n(?=\s{0,3}(?:#{1,6}\s|[-*+]\s|\d+[.)]\s))")
_HEADING = re.compile(r"(?m)^(\s{0,3}#{1,6}\s[^\n]*)\n")
_LATIN_END = re.compile(r"(?<=[.!?])[\"”’')\]»]*\s+")
_CJK_END = re.compile(r"(?<=[。！？；!?])[\"”’')\]」』]*")
_WORD = re.compile(rf"[{_CJK_CHARS}]|[^\W_]+(?:['’\-][^\W_]+)*", re.UNICODE)


def is_cjk(ch: str) -> bool:
    """True for a character of an unspaced script (Chinese, Japanese, Korean)."""
    return bool(_CJK.match(ch))


def _split_latin(text: str) -> list[str]:
    pieces, start = [], 0
    for m in _LATIN_END.finditer(text):
        head = text[start:m.start()].rstrip()
        last = head.rsplit(" ", 1)[-1].rstrip(".!?\"”’')]»").lower()
        if head.endswith(".") and (last in ABBREVIATIONS or
                                   (len(last) == 1 and last.isalpha())):
            continue
        if text[m.end():m.end() + 1].isdigit() and head.endswith(".") and \
                head[-2:-1].isdigit():
            continue  # "3. 5" style numbering stays whole
        pieces.append(text[start:m.end()].strip())
        start = m.end()
    pieces.append(text[start:].strip())
    return [p for p in pieces if p]


def sentences(text: str) -> list[str]:
    """The sentences of ``text`` (see the module docstring), whitespace inside each
    collapsed."""
    out = []
    for block in _BLOCK.split(_HEADING.sub(lambda m: m.group(1) + "\n\n", text)):
        block = " ".join(block.split())
        if not block:
            continue
        start = 0
        for m in _CJK_END.finditer(block):
            if m.end() > start and _CJK.search(block[max(0, m.start() - 2):m.start()]):
                out.extend(_split_latin(block[start:m.end()]))
                start = m.end()
        out.extend(_split_latin(block[start:]))
    return [s for s in out if s.strip()]


def tokens(text: str) -> list[str]:
    """Lower-cased word tokens (``casefold``); each CJK character is a token of its own."""
    return [m.group(0).casefold() for m in _WORD.finditer(text)]


_SNIPPET_STOP = frozenset(
    "a an the of in on at to for from by with and or but is are was were be been who whom "
    "whose what which when where why how does did do this that these those it its as into "
    "than then there their they he she his her him we you your our i me my not no".split())


def snippet(text: str, question: str, width: int = 320) -> str:
    """A window of about ``width`` characters of ``text`` around the sentences that share
    the most words with ``question`` (lower-cased word tokens, common function words
    ignored); ``…`` marks what was cut.  Whitespace is collapsed; the whole text when it
    fits."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    want = {t for t in tokens(question) if t not in _SNIPPET_STOP}
    sents = sentences(text) or [flat]
    scores = [len(want & set(tokens(s))) for s in sents]
    best = max(range(len(sents)), key=lambda i: (scores[i], -i))
    lo = hi = best
    size = len(sents[best])
    while True:  # grow around the best sentence, the better neighbour first
        options = [i for i in (lo - 1, hi + 1) if 0 <= i < len(sents)
                   and size + 1 + len(sents[i]) <= width]
        if not options:
            break
        i = max(options, key=lambda j: (scores[j], -abs(j - best)))
        size += 1 + len(sents[i])
        lo, hi = min(lo, i), max(hi, i)
    body = " ".join(sents[lo:hi + 1])
    if len(body) > width:  # one sentence longer than the window: cut around its matches
        words = body.split()
        hit = next((n for n, w in enumerate(words) if set(tokens(w)) & want), 0)
        start = max(0, hit - 8)
        body, out = "", []
        for w in words[start:]:
            if len(body) + len(w) + 1 > width:
                break
            out.append(w)
            body = " ".join(out)
        return ("… " if start else "") + body + " …"
    return ("… " if lo > 0 else "") + body + (" …" if hi < len(sents) - 1 else "")
