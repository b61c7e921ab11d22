"""Sentences, names and identifiers: the text units every LLM-free extractor reads.

:func:`split_sentences` (the heuristic extractor's English splitter; the Unicode one is
:func:`evireform.text.sentences`), :func:`name_spans` and :func:`spot_entities`
(capitalised names, dates, numbers), :func:`identifiers` (the words that carry their own
type: ``ssh-keygen``, ``login.defs``, ``SSH_AUTH_SOCK``), :func:`placed` (a word capitalised
by its place) and :data:`LOWER_WORD`.
"""
from __future__ import annotations

import re


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
        head = text[max(start, m.start() - 64):m.start()].rstrip()  # bounded: linear
        last = head.rsplit(" ", 1)[-1].rstrip(".!?").lower()
        if last in _ABBREV or (len(last) == 1 and last.isalpha()):
            continue
        pieces.append(text[start:m.end()].strip())
        start = m.end()
    pieces.append(text[start:].strip())
    return [p for p in pieces if p]


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

    def flush() -> None:
        while cur and cur[-1].lower() in _CONNECT:
            cur.pop()
        lead = 0  # leading stopwords dropped at once (pop(0) each would be quadratic)
        while lead < len(cur) and cur[lead].lower() in _STOP:
            lead += 1
        del cur[:lead]
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


#: a word written in lower case (not after a letter, digit, hyphen or underscore)
LOWER_WORD = re.compile(r"(?<![\w-])[a-z][a-z0-9_']*(?![\w-])")
#: what ends a sentence or clause, or opens a list item, before a word capitalised by its place
_PLACE_END = ".:;!?•*)]\"'“”(—–"


def placed(before: str) -> bool:
    """True when a word that follows the text ``before`` (in its sentence) stands where
    English capitalises any word: at the start, after a clause's end, a bullet, or an option
    flag ("-A Enables ...", "-b bits Specifies ...")."""
    before = before.rstrip()
    if not before or before[-1] in _PLACE_END:
        return True
    last = before.split()[-2:]
    return any(t.startswith("-") and len(t) > 1 for t in last)


_IDENT_TOKEN = re.compile(r"(?:(?<![\w-])--)?[~/\w][\w.+:/~-]*")
_JOINED = re.compile(r"[A-Za-z0-9](?:[-.+/]|::)[A-Za-z0-9]")
_CAMEL = re.compile(r"[a-z][A-Z]")
_NUMERIC = re.compile(r"^[\d.,:/+-]+$")
#: a manual page reference, "lexgrog(1)", "login.defs(5)", "pam_unix(8)": the name is a thing
_MAN_REF = re.compile(r"(?<![\w.+-])([A-Za-z][\w.+-]*)\([1-9][a-z]*\)")


def _IDENTISH(word: str) -> bool:
    """Whether :func:`identifiers` finds ``word`` by its form anyway (not listed twice)."""
    return bool(_JOINED.search(word) or "_" in word.strip("_") or _CAMEL.search(word)
                or (sum(c.isupper() for c in word) >= 2 and word.upper() == word)
                or (any(c.isdigit() for c in word) and any(c.isalpha() for c in word)))


def identifiers(sentence: str) -> list[str]:
    """The words of ``sentence`` that carry their own type, as documentation writes the
    things it is about: manual page references ("lexgrog(1)" gives "lexgrog", listed
    first), words joined by ``- _ . / + ::`` ("ssh-keygen", "login.defs",
    "SSH_AUTH_SOCK", "std::vector"), camelCase ("ProxyJump"), two or more capitals
    ("FIDO", "MANSECT"), letters with digits ("bzip2", "ed25519"), long options
    ("--shell") and paths ("/etc/shells", "~/.ssh/config").  Trailing punctuation is
    dropped; numbers, versions and abbreviations ("e.g", "i.e") are not identifiers."""
    out = [m.group(1) for m in _MAN_REF.finditer(sentence) if not _IDENTISH(m.group(1))]
    for m in _IDENT_TOKEN.finditer(sentence):
        t = m.group(0).rstrip(".:,;/-+~")
        if len(t) < 2 or _NUMERIC.match(t):
            continue
        body = t.lstrip("-~/")
        if not body:
            continue
        if t.startswith("--") and len(t) > 3 and body[:1].isalpha():
            out.append(t)
        elif t[0] in "/~" and any(c.isalpha() for c in t):
            out.append(t)
        elif _JOINED.search(t) or "_" in t.strip("_"):
            parts = re.split(r"[-_.+/:]+", t)
            if sum(len(x) > 1 for x in parts) >= 1 and not all(len(x) <= 1 for x in parts):
                out.append(t)
        elif _CAMEL.search(t) or (sum(c.isupper() for c in t) >= 2 and t.upper() == t
                                   and any(c.isalpha() for c in t)):
            out.append(t)
        elif any(c.isdigit() for c in t) and any(c.isalpha() for c in t) \
                and not re.fullmatch(r"\d+(?:st|nd|rd|th|s|k|m|g|kb|mb|gb|ms|px)", t.lower()):
            out.append(t)
    return out


_LETTER = re.compile(r"[^\W\d_]")
_CJK_CHAR = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
