"""The extractor chosen for a corpus (``--extractor auto``), per namespace, and the
extractors by name (:func:`make_extractor`, :func:`extractor_recorded`).
"""
from __future__ import annotations

import re
from typing import Any, Sequence

from ..strings import Take
from ..types import Passage, Proposition
from .base import COUNTS_VERSION, Extractor, _namespace_label, _namespace_of, namespaces_of
from .heuristic import HeuristicExtractor
from .phrases import PhraseExtractor
from .prose import ProseExtractor


#: the LLM-free extractors by their CLI name
EXTRACTORS = {"heuristic": HeuristicExtractor, "phrases": PhraseExtractor,
              "prose": ProseExtractor}
#: every name ``--extractor`` takes besides an OpenIE file: the corpus-measured choice, the
#: LLM-free extractors and the LLM one
EXTRACTOR_CHOICES = ("auto", *EXTRACTORS, "llm")


_LETTER_WORD = re.compile(r"[^\W\d_][\w'’-]*", re.UNICODE)

#: :func:`choose_extractor`'s rule: the heuristic (capitalised-name) extractor when the share
#: of capitalised words among words of cased scripts lies in this range and words of scripts
#: without case are under :data:`AUTO_MAX_UNCASED` of all words; the phrase extractor
#: otherwise.  Cased English Wikipedia text measures 0.29-0.34 (the shared MuSiQue, HotpotQA
#: and 2Wiki corpora), lower-cased text 0, all-capitals text 1.  Ordinary prose is capitalised
#: by its sentences, not its names (issue 52): Debian's manual pages measure 0.12 and 208
#: package READMEs 0.14, where capitalised words are sentence starts ("Note", "Specifies")
#: and the things a question bridges through are written in lower case ("ssh-keygen",
#: "login.defs"), so the range starts at 0.2 (0.05 before).
AUTO_CAPITALISED = (0.2, 0.8)
AUTO_MAX_UNCASED = 0.3
#: below the heuristic's range and from this share up (and caseless words under
#: AUTO_MAX_UNCASED), the text is ordinary cased prose: :class:`ProseExtractor`
AUTO_PROSE_MIN = 0.05
AUTO_RULE = (f"heuristic when {AUTO_CAPITALISED[0]} <= capitalised_share <= "
             f"{AUTO_CAPITALISED[1]} and uncased_share < {AUTO_MAX_UNCASED}; prose when "
             f"{AUTO_PROSE_MIN} <= capitalised_share < {AUTO_CAPITALISED[0]} and "
             f"uncased_share < {AUTO_MAX_UNCASED}; else phrases")
#: words :func:`choose_extractor` reads at most (spread over the corpus)
AUTO_SAMPLE_WORDS = 200_000


def measure_case(passages: Sequence[Passage], max_words: int = AUTO_SAMPLE_WORDS) -> dict[str, Any]:
    """How a corpus uses letter case: ``{"words", "capitalised_share", "uncased_share"}``
    over the words (tokens starting with a letter) of passages spread evenly over the
    corpus, until ``max_words`` are read.  ``capitalised_share``: the share of words of
    cased scripts (Latin, Greek, Cyrillic, ...) that start with a capital;
    ``uncased_share``: the share of all words in scripts without case (CJK, Arabic, Hebrew,
    Devanagari, Thai, ...)."""
    n = len(passages)
    cased = cap = unc = 0
    if n:
        step = max(1, n // max(1, max_words // 50))  # ~50 words a passage
        order = list(range(0, n, step)) + [j for j in range(n) if j % step]
        for j in order:
            for m in _LETTER_WORD.finditer(passages[j].text):
                ch = m.group(0)[0]
                if ch.upper() != ch.lower():
                    cased += 1
                    cap += ch.isupper()
                else:
                    unc += 1
            if cased + unc >= max_words:
                break
    total = cased + unc
    return {"words": total, "capitalised_share": round(cap / cased, 4) if cased else 0.0,
            "uncased_share": round(unc / total, 4) if total else 0.0}


def _rule(m: dict[str, Any]) -> str:
    lo, hi = AUTO_CAPITALISED
    share, cased = m["capitalised_share"], m["uncased_share"] < AUTO_MAX_UNCASED
    if cased and lo <= share <= hi:
        return "heuristic"
    if cased and AUTO_PROSE_MIN <= share < lo:
        return "prose"
    return "phrases"


class NamespaceAutoExtractor(Extractor):
    """``--extractor auto`` when the namespaces of a corpus call for different extractors:
    each namespace (metadata key ``group_by``, default ``"namespace"``; passages without it
    form one group) gets the extractor :func:`choose_extractor` picks for its own passages,
    so that one tenant's letter case never chooses another tenant's extractor, and a
    namespace of the index equals an index built from its passages alone.  ``choices``:
    namespace label (:func:`_namespace_label`) -> ``"heuristic"``, ``"prose"`` or ``"phrases"``, as
    recorded in ``meta["extractor_choice"]["namespaces"]``; an add measures the namespaces it
    has no choice for."""

    heuristic: HeuristicExtractor
    phrases: PhraseExtractor
    prose: "ProseExtractor"

    name = "auto-v3"

    def __init__(self, group_by: str | None = "namespace", choices: dict[str, Any] | None = None,
                 *, version: int = 3) -> None:
        """``version=2``: phrase namespaces keep sentences without a letter (``phrases-v3``:
        an index recorded ``auto-v2``); ``version=1``: also prose namespaces extracted as
        ``prose-v1`` and phrase vocabularies learnt from every passage (``auto-v1``).  The
        heuristic (Wikipedia's extractor) keeps such sentences in every version: the recorded
        LLM replies were asked about its propositions, four of them letterless."""
        if version not in (1, 2, 3):
            raise ValueError(f"version must be 1, 2 or 3; got {version!r}")
        self.group_by: str | None = group_by
        self.choices: dict[str, Any] = dict(choices or {})
        self.heuristic = HeuristicExtractor()
        self.phrases = PhraseExtractor(group_by=group_by,
                                       fit_sample="default" if version >= 2 else None,
                                       words_only=version >= 3)
        self.prose = ProseExtractor(group_by=group_by, version=min(version, 2))
        self.name = f"auto-v{version}"

    def _which(self, metadata: dict[str, Any]):
        return self.choices.get(_namespace_label(_namespace_of(metadata, self.group_by)),
                                "heuristic")

    def fit(self, passages: Sequence[Passage], new: Sequence[Passage] | None = None
            ) -> "NamespaceAutoExtractor":
        groups = namespaces_of(passages, self.group_by)
        members: dict[str, Any] = {}
        for i, g in enumerate(groups):
            members.setdefault(g, []).append(i)
        wanted = None if new is None else {_namespace_of(p.metadata, self.group_by)
                                          for p in new}
        rows: dict[str, list[int]] = {"phrases": [], "prose": []}
        for g, pos in members.items():
            label = _namespace_label(g)
            if label not in self.choices:
                self.choices[label] = _rule(measure_case(Take(passages, pos)))
            if self.choices[label] in rows and (wanted is None or g in wanted):
                rows[self.choices[label]] += pos
        for kind, pos in rows.items():  # corpus statistics, each of its own namespaces
            if pos:
                getattr(self, kind).fit(Take(passages, sorted(pos)), None if new is None else
                                        [p for p in new if self._which(p.metadata) == kind])
        return self

    # ------------------------------------------------------------ carried statistics
    def counts(self) -> dict[str, Any] | None:
        """The raw counts of its phrase and prose namespaces (see
        :meth:`evireform.extract.base._FittedExtractor.counts`)."""
        kinds = {k: c for k in ("phrases", "prose") if (c := getattr(self, k).counts())}
        return {"extractor": self.name, "version": COUNTS_VERSION, "kinds": kinds} \
            if kinds else None

    def restore(self, counts: Any) -> bool:
        if not isinstance(counts, dict) or counts.get("extractor") != self.name \
                or counts.get("version") != COUNTS_VERSION \
                or not isinstance(counts.get("kinds"), dict):
            return False
        return all(getattr(self, k).restore(c) for k, c in counts["kinds"].items()
                   if k in ("phrases", "prose"))

    def grow(self, passages: Sequence[Passage], new: Sequence[Passage]) -> list[Any]:
        """:meth:`fit` for an add, from the carried counts where they serve (each kind's
        :meth:`~evireform.extract.base._FittedExtractor.grow`); a namespace without a
        choice is measured first, from its passages, as :meth:`fit` does."""
        seen = {}
        for p in new:
            g = _namespace_of(p.metadata, self.group_by)
            seen.setdefault(_namespace_label(g), g)
        missing = {label: g for label, g in seen.items() if label not in self.choices}
        if missing:
            groups = namespaces_of(passages, self.group_by)
            for label, g in missing.items():
                pos = [i for i, x in enumerate(groups) if x == g]
                self.choices[label] = _rule(measure_case(Take(passages, pos)))
        again: list[Any] = []
        for kind in ("phrases", "prose"):
            mine = [p for p in new if self._which(p.metadata) == kind]
            if mine:
                again += getattr(self, kind).grow(passages, mine)
        return again

    def shrink(self, removed: Sequence[Passage]) -> None:
        for kind in ("phrases", "prose"):
            mine = [p for p in removed if self._which(p.metadata) == kind]
            if mine:
                getattr(self, kind).shrink(mine)

    def extract(self, passage: Passage) -> list[Proposition]:
        which = self._which(passage.metadata)
        ex = {"phrases": self.phrases, "prose": self.prose}.get(which, self.heuristic)
        return ex.extract(passage)


def choose_extractor(passages: Sequence[Passage]) -> tuple["Extractor", dict[str, Any]]:
    """``--extractor auto``: the LLM-free extractor for this corpus and why.  Returns
    ``(extractor, choice)`` with ``choice = {"chosen": "heuristic"|"phrases", "rule": ...,
    **measure_case(passages)}`` (recorded in the index manifest as
    ``meta["extractor_choice"]``).  Capitalised names mark entities in cased text only: a
    corpus that is lower-cased (chat, search logs, OCR), all capitals, or in a script without
    case gets :class:`PhraseExtractor`, whose vocabulary does not depend on case."""
    m = measure_case(passages)
    chosen = _rule(m)
    return make_extractor(chosen), {"chosen": chosen, "rule": AUTO_RULE, **m}


def make_extractor(name: str, recorded: str | None = None,
                   passages: Sequence[Passage] | None = None) -> Extractor:
    """``"heuristic"`` or ``"phrases"``: a fresh LLM-free extractor; ``"auto"`` (with the
    corpus ``passages``): the one :func:`choose_extractor` picks for them, carrying its
    measurement as ``extractor.choice``.  ``recorded``: the extractor name an index
    recorded, so an update extracts as its build did (an index recorded as ``phrases-v1``
    gets ``PhraseExtractor(group_by=None)``)."""
    if name == "auto":
        if passages is None:
            raise ValueError("extractor 'auto' measures the corpus: pass its passages")
        per = NamespaceAutoExtractor().fit(passages)
        picked = set(per.choices.values())
        m = measure_case(passages)
        if len(picked) > 1:  # tenants of different letter case: each its own extractor
            ex: Extractor = per
            choice = {"chosen": "per namespace", "rule": AUTO_RULE,
                      "namespaces": dict(sorted(per.choices.items())), **m}
        else:  # one choice for every namespace (one namespace: the corpus's own)
            chosen = picked.pop() if picked else _rule(m)
            ex = make_extractor(chosen)
            choice = {"chosen": chosen, "rule": AUTO_RULE, **m}
        ex.choice = choice
        return ex
    if name == "phrases" and recorded == "phrases-v1":
        return PhraseExtractor(group_by=None, fit_sample=None)
    if name == "phrases" and recorded == "phrases-v2":
        return PhraseExtractor(fit_sample=None)
    if name == "phrases" and recorded == "phrases-v3":
        return PhraseExtractor(words_only=False)
    if name == "prose" and recorded == "prose-v1":
        return ProseExtractor(version=1)
    try:
        return EXTRACTORS[name]()
    except KeyError:
        raise ValueError(f"unknown extractor {name!r}; the LLM-free ones are "
                         f"{sorted(EXTRACTORS)}") from None


def extractor_recorded(recorded, choice: dict[str, Any] | None = None) -> Extractor | None:
    """A fresh LLM-free extractor that writes the name ``recorded`` (from an index's
    ``meta["extractor"]``), or None when no LLM-free extractor does.  ``choice``: the index's
    ``meta["extractor_choice"]``, whose per-namespace choices an ``auto-v1`` index extracts
    new passages with."""
    if recorded in ("auto-v1", "auto-v2", "auto-v3"):
        got = (choice or {}).get("namespaces")
        return NamespaceAutoExtractor(choices={str(k): v for k, v in got.items()
                                               if v in ("heuristic", "phrases", "prose")}
                                      if isinstance(got, dict) else None,
                                      version=int(recorded[-1]))
    for key in EXTRACTORS:
        found = make_extractor(key, recorded)
        if found.name == recorded:
            return found
    return None
