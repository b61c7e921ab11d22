"""Answer snippets, and the tokenizer's names where they were first published.

The tokenizer itself (sentences, word tokens, the lexical index's tokens, the stopword
lists) is :mod:`evireform.extract.tokens`, the one module every extractor and the lexical
index read text through; its public names are re-exported here, so ``from evireform.text
import sentences`` keeps working.  :func:`snippet` cuts an answer's excerpt around the
sentences that share the most words with the question.
"""
from __future__ import annotations

from .extract.tokens import (  # noqa: F401 (re-exported)
    ABBREVIATIONS, ENGLISH_STOPWORDS, LEXICAL_STOPWORDS, STOPWORDS, is_cjk, lexical_tokens,
    sentences, tokens)

__all__ = ["sentences", "tokens", "is_cjk", "ABBREVIATIONS", "snippet", "lexical_tokens",
           "LEXICAL_STOPWORDS", "STOPWORDS", "ENGLISH_STOPWORDS"]


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
