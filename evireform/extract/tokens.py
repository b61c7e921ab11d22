"""The tokenizer: sentences, words, names and identifiers, the text units every LLM-free
extractor and the lexical index read.

:func:`sentences` (Unicode sentences in any letter case, CJK included) and :func:`tokens`
(lower-cased words, a CJK character each) for the phrase and prose extractors and the
document reader; :func:`lexical_tokens` (identifiers whole and in their parts, CJK
bigrams, :data:`LEXICAL_STOPWORDS` left out) for the lexical index and BM25;
:func:`split_sentences` (the heuristic extractor's English splitter), :func:`name_spans` and
:func:`spot_entities` (capitalised names, dates, numbers), :func:`identifiers` (the words
that carry their own type: ``ssh-keygen``, ``login.defs``, ``SSH_AUTH_SOCK``),
:func:`placed` (a word capitalised by its place) and :data:`LOWER_WORD`; the stopword lists
(:data:`ENGLISH_STOPWORDS`, :data:`STOPWORDS`).  It imports nothing of the package, so the
lexical index's data (:mod:`evireform.search_data`) and the store's verification read text
through it too.
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


# --------------------------------------------------------------------------- Unicode text
# Sentences and words that do not assume capitalised English (the phrase and prose
# extractors, the document reader's chunks) and the lexical index's tokens: :func:`sentences`
# splits at ``. ! ?`` followed by whitespace whatever the next letter's case (abbreviations
# and single-letter initials excepted), at the full-width ``。 ！ ？ ；`` without needing a
# space, at blank lines and before Markdown headings and list items; :func:`tokens` gives
# lower-cased word tokens for spaced scripts and single characters for unspaced ones
# (Chinese, Japanese kana, Korean), so that phrases can be counted in any of them;
# :func:`lexical_tokens` what BM25 counts.

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


#: the version of :func:`lexical_tokens`' rules, written with an index's lexical counts
#: (``lexical_tokenizer`` in its manifest): counts made by other rules are recounted from
#: the texts when the index is loaded, never mixed with a query tokenized by these.
#: 1: identifiers whole and in parts, CJK bigrams; 2: plural ``-s`` folded (issue 67)
LEXICAL_TOKENIZER = 2


def fold_plural(word: str) -> str:
    """A plain lower-case ASCII word's plural ``-s`` folded away (``filters`` -> ``filter``,
    ``libraries`` -> ``library``); words of three letters or fewer and words ending in
    ``ss``, ``us`` or ``is`` (``class``, ``status``, ``analysis``) are kept, as is every
    other word.  Light on purpose: it joins a word's singular and plural and nothing else,
    so an option or a file name is never cut to a stem another word shares."""
    if len(word) <= 3 or word[-1] != "s" or word[-2] in "sui" or not word.isascii() \
            or not word.isalpha():
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    return word[:-1]


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
    * A plain ASCII word's (or part's) plural ``-s`` is folded (:func:`fold_plural`:
      ``filters`` and ``filter`` are one term); an identifier with punctuation in it
      (``login.defs``) is kept whole as written, its parts folded (``def``).
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
    # plurals folded once, over every term (a CJK bigram never ends in "s"); stopwords and
    # "a part is not its whole" were judged on the words as written
    return [x if x[-1] != "s" else fold_plural(x) for x in out]
