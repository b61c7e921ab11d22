"""Text handling that does not assume capitalised English: Unicode sentences and words.

:func:`sentences` splits at ``. ! ?`` followed by whitespace whatever the next letter's case
(abbreviations and single-letter initials excepted), at the full-width ``。 ！ ？ ；`` without
needing a space, at blank lines and before Markdown headings and list items.  :func:`tokens`
gives lower-cased word tokens for spaced scripts and single characters for unspaced ones
(Chinese, Japanese kana, Korean), so that phrases can be counted in any of them.
"""
from __future__ import annotations

import re

#: function words of the languages the phrase extractor meets most (English
#: (:data:`ENGLISH_STOPWORDS`), German, French, Spanish, Italian, Dutch) and Chinese function
#: characters: a phrase never starts or ends
#: with one, and none is an entity alone
ENGLISH_STOPWORDS = frozenset("""
a an the and or but if of in on at to for from by with as into onto over under about after
before during since until while than then so such not no nor is are was were be been being
am do does did done have has had having it its it's he she they them their his her him we us
our you your i me my this that these those there here who whom whose which what when where
why how all any both each few more most other some own same too very can could will would
shall should may might must one also only just s t said later first new well many much
between through against among per via within without upon up down out off again further
once based known called named became become including include includes
""".split())
STOPWORDS = ENGLISH_STOPWORDS | frozenset("""
der die das des dem den ein eine einer eines einem einen und oder aber nicht ist sind war
waren wird werden wurde wurden hat haben hatte im in am an auf aus bei mit nach von vor zu
zum zur für über unter durch als auch sich es er sie wir ihr ich du man dass daß wie wo was
wer so noch nur sehr schon dieser diese dieses jener kein keine einem sein seine ihre ihr
le la les un une des du de et ou mais est sont était au aux en dans par pour sur avec ce
cette ces il elle ils elles qui que quoi dont où ne pas plus se sa son ses leur leurs
el los las unos unas y o pero es son fue era del al con por para sobre como que se su sus
il lo gli della delle dei degli e è di da con per tra fra che non
het een en van op te dat die zijn was werd met voor aan bij ook om
的 了 是 在 和 与 及 或 也 都 就 而 被 把 对 从 到 为 以 之 其 这 那 有 个 中 上 下 不 人 他 她 它 们 我 你 年 月 日 一 于 由 等 着 过 将 并 但 该 此 所 后 前 时
""".split())

__all__ = ["sentences", "tokens", "is_cjk", "ABBREVIATIONS", "snippet", "lexical_tokens",
           "LEXICAL_STOPWORDS", "STOPWORDS", "ENGLISH_STOPWORDS"]

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
        # the end of the piece so far, not all of it: a run of initials ("A. A. A. ...")
        # keeps the piece open, and reading it whole at each match would be quadratic
        head = text[max(start, m.start() - 64):m.start()].rstrip()
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


# --------------------------------------------------------------------------- lexical tokens
#: what the lexical index (BM25) leaves out of plain words and identifier parts: the
#: function words of :data:`STOPWORDS` without the content words the phrase extractor also
#: keeps out of phrases ("new", "first", "named", "include", ...): a question asking for
#: "the first release" still matches on "first"
LEXICAL_STOPWORDS = STOPWORDS - frozenset("""
new first later well many much known called named became become including include includes
based said one
""".split())
#: a run of an unspaced script, or a word with the characters identifiers join their parts
#: with (``_ - . / : + ~ $ @``), with an optional manual section ``(1)`` after it
_LEX_CHUNK = re.compile(
    rf"[{_CJK_CHARS}]+|(?:--?|[~/$@])?[^\W_{_CJK_CHARS}](?:[\w.:/+~@$-]*[\w])?"
    r"(?:\([1-9][a-z]*\))?|_+[^\W_]\w*", re.UNICODE)
_LEX_PART = re.compile(r"[^\W_]+", re.UNICODE)
#: a lower-to-upper case step or an upper run before a capitalised word ("ProxyJump",
#: "HTTPServer"): where a camelCase word's parts meet
_LEX_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def _cjk_grams(run: str) -> list[str]:
    """A run of an unspaced script as overlapping character bigrams (the character itself
    when the run has one)."""
    if len(run) == 1:
        return [run]
    return [run[i:i + 2] for i in range(len(run) - 1)]


def lexical_tokens(text: str, stopwords: frozenset[str] = LEXICAL_STOPWORDS) -> list[str]:
    """The terms the lexical index (BM25) counts for ``text``, in order.

    * Plain words are case-folded; words of one character and ``stopwords`` are left out.
    * An identifier stays one term and its parts are terms too: ``SSH_AUTH_SOCK`` gives
      ``ssh_auth_sock``, ``ssh``, ``auth``, ``sock``; ``--shell`` gives ``--shell`` and
      ``shell``; ``/etc/login.defs`` gives the path, ``etc``, ``login``, ``defs``;
      ``lexgrog(1)`` gives ``lexgrog(1)`` and ``lexgrog``; ``ProxyJump`` gives
      ``proxyjump``, ``proxy``, ``jump`` (camelCase parts).  Trailing punctuation is not
      part of a word ("end." is "end").
    * Chinese, Japanese and Korean text (no spaces between words) as overlapping character
      bigrams, so that a two-character word matches without a segmenter.

    The same function tokenizes documents and queries."""
    out: list[str] = []
    for w in _LEX_CHUNK.findall(text):
        if ord(w[0]) >= 0x3040 and _CJK.match(w):
            out.extend(g for g in _cjk_grams(w) if g not in stopwords)
            continue
        if w.isalnum():  # letters and digits only: a plain word unless camelCase
            rest = w[1:]
            if rest == rest.lower():
                whole = w.casefold()
                if len(whole) > 1 and whole not in stopwords:
                    out.append(whole)
                continue
        parts = _LEX_PART.findall(w)
        camel = [] if len(parts) != 1 else _LEX_CAMEL.split(parts[0])
        whole = w.casefold()
        if len(parts) == 1 and len(camel) == 1 and whole == parts[0].casefold():
            if len(whole) > 1 and whole not in stopwords:
                out.append(whole)  # a plain word
            continue
        out.append(whole)  # an identifier: itself, then its parts
        for p in parts:
            pieces = _LEX_CAMEL.split(p)
            if len(pieces) > 1 and len(parts) > 1:
                pieces = [p] + pieces  # a camelCase part: itself, then its pieces
            for x in pieces:
                x = x.casefold()
                if len(x) > 1 and x not in stopwords and x != whole:
                    out.append(x)
    return out
