"""The LLM-free extractor for text that is not capitalised English: entities are phrases and
titles learnt from the corpus, per namespace.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

from ..strings import Take
from ..types import Passage, Proposition
from . import base as _base
from .base import _FittedExtractor, fit_sample, namespaces_of, tally
from .tokens import STOPWORDS, is_cjk, tokens


class PhraseExtractor(_FittedExtractor):
    """LLM-free extraction for text that is not capitalised English.

    One proposition per Unicode sentence (:func:`evireform.text.sentences`; the title
    prefixed as :class:`HeuristicExtractor` does).  Entities are found by greedy longest match
    of the sentence's tokens (:func:`evireform.text.tokens`: lower-cased words, single CJK
    characters) against a vocabulary learnt by :meth:`fit` from the corpus:

    * every passage title of at most ``max_title_tokens`` tokens (an entity name in the
      corpora this library meets, and the file heading of a document);
    * every phrase of 1 to ``max_n`` words (2 to ``max_n + 1`` characters in unspaced
      scripts) that starts and ends with a non-stopword, is not a number, and occurs in at
      least ``min_df`` passages and at most ``max(max_df_min, max_df_share * passages)``:
      recurring enough to link passages, rare enough to mean one thing;

    plus numbers of three or more digits and the passage title (which links every
    proposition of a passage).  Nothing depends on letter case, so a lower-cased corpus
    gives the same graph as its original up to the title prefix's case.

    **Namespaces.**  The vocabulary is learnt separately for each value of the metadata key
    ``group_by`` (default ``"namespace"``, the key the service's ``namespace`` field
    filters on; passages without it form one group of their own): a passage's propositions
    depend on the text of its own namespace only, so one tenant's rankings never depend on
    another tenant's passages, and a namespace of an index built with this extractor equals
    an index built from that namespace's passages alone.  ``group_by=None`` learns one
    vocabulary from the whole corpus.  A namespace's vocabulary is learnt from at most
    ``fit_sample`` of its passages (:data:`FIT_SAMPLE`, those whose ids hash lowest: the
    same ones for an update as for a rebuild); an add learns the vocabulary of the
    namespaces it touches again from those (old and new); the propositions already in the
    index are kept as they were extracted.
    """

    max_df_min: int
    max_df_share: float
    max_n: int
    min_df: int
    title_entity: bool
    title_prefix: bool

    #: ``"phrases-v4"``: a vocabulary per namespace, learnt from at most ``fit_sample``
    #: of its passages (:data:`FIT_SAMPLE`), a document's list item a sentence of its own,
    #: a sentence without a letter no proposition; ``"phrases-v3"`` (``words_only=False``):
    #: those sentences kept; ``"phrases-v2"`` (``fit_sample=None``): learnt from all of a
    #: namespace's passages, list items not split; ``"phrases-v1"`` (``group_by=None``): one
    #: vocabulary for the corpus, as before namespaces were fitted apart
    name = "phrases-v4"

    def __init__(self, max_n: int = 3, min_df: int = 2, max_df_share: float = 0.005,
                 max_df_min: int = 5, max_title_tokens: int = 8, title_prefix: bool = True,
                 title_entity: bool = True, stopwords=STOPWORDS,
                 group_by: str | None = "namespace",
                 fit_sample: int | None | str = "default", words_only: bool = True) -> None:
        self.max_n, self.min_df = int(max_n), int(min_df)
        self.group_by: str | None = group_by
        if fit_sample == "default":  # read now, so that a changed default counts
            fit_sample = _base.FIT_SAMPLE
        self.fit_sample: int | None = None if fit_sample is None else int(fit_sample)
        self.name = "phrases-v1" if group_by is None else \
            "phrases-v2" if fit_sample is None else "phrases-v4" if words_only else "phrases-v3"
        self.line_breaks = self.name in ("phrases-v3", "phrases-v4")
        self.words_only = self.name == "phrases-v4"
        #: the vocabulary and longest phrase of each namespace (see the class docstring)
        self.vocabs: dict[str, Any] = {}
        #: per namespace: the counts its vocabulary comes from (``n`` passages, each
        #: phrase's passages, each title's passages, ``sampled`` when the fit read a
        #: sample): exact under adds and deletes (:meth:`_tally`)
        self.raw: dict[Any, dict[str, Any]] = {}
        self.max_df_share, self.max_df_min = float(max_df_share), int(max_df_min)
        self.max_title_tokens: int = int(max_title_tokens)
        self.title_prefix, self.title_entity = title_prefix, title_entity
        self.stopwords = frozenset(stopwords)

    def _ok_edges(self, gram: tuple[Any, ...]) -> bool:
        return gram[0] not in self.stopwords and gram[-1] not in self.stopwords \
            and not all(t.isdigit() for t in gram)

    def _grams(self, toks: list[str]):
        """Candidate phrases of a token list: word n-grams, and character n-grams of CJK
        runs (which have no spaces to split at)."""
        n = len(toks)
        for i in range(n):
            cjk = is_cjk(toks[i])
            lo, hi = (2, self.max_n + 1) if cjk else (1, self.max_n)
            for m in range(lo, hi + 1):
                if i + m > n:
                    break
                gram = tuple(toks[i:i + m])
                if cjk and not all(is_cjk(t) for t in gram):
                    break
                if not cjk and any(is_cjk(t) for t in gram):
                    break
                yield gram

    def _fitted(self) -> dict[Any, Any]:
        return self.vocabs

    def fit(self, passages: Sequence[Passage], new: Sequence[Passage] | None = None
            ) -> "PhraseExtractor":
        """Learn the vocabulary (titles and recurring phrases) of each namespace from its
        ``passages``; with ``new``, only the namespaces of those passages (reading the text
        of no other passage)."""
        groups = namespaces_of(passages, self.group_by)
        wanted = None if new is None else {self._group(p.metadata) for p in new}
        members: dict[str, Any] = {}
        for i, g in enumerate(groups):
            if wanted is None or g in wanted:
                members.setdefault(g, []).append(i)
        for g, pos in members.items():
            sample = fit_sample(passages, pos, self.fit_sample)
            self.raw[g] = raw = {"n": 0, "df": Counter(), "titles": Counter(),
                                 "sampled": len(sample) < len(pos)}
            self._tally(g, raw, Take(passages, sample), 1)
        return self

    def _count(self, raw: dict[str, Any], passages: Sequence[Passage], sign: int) -> None:
        """Add (or remove) each passage's title and its phrases (once a passage)."""
        titles = [[t] for p in passages if 0 < len(t := tuple(tokens(p.title)))
                  <= self.max_title_tokens and not all(x in self.stopwords for x in t)]
        tally(raw["titles"], titles, sign)
        tally(raw["df"], ({g for sent in self._sentences(p.text)
                           for g in self._grams(tokens(sent)) if self._ok_edges(g)}
                          for p in passages), sign)
        raw["n"] += sign * len(passages)

    def _from_raw(self, g: Any, raw: dict[str, Any]) -> tuple[set, int]:
        cap = max(self.max_df_min, int(self.max_df_share * raw["n"]))
        vocab: set[Any] = {t for t, c in raw["titles"].items() if c > 0}
        vocab.update(x for x, c in raw["df"].items() if self.min_df <= c <= cap)
        return vocab, max((len(x) for x in vocab), default=1)

    def _tally(self, g: Any, raw: dict[str, Any], passages: Sequence[Passage],
               sign: int) -> bool:
        """Exact: a phrase's count is the number of passages that hold it, whatever the
        others hold."""
        self._count(raw, passages, sign)
        if raw["n"] <= 0:
            return False
        self.vocabs[g] = self._from_raw(g, raw)
        return True

    #: joins a phrase's tokens in the saved counts (no token holds it)
    _SEP = "\x1f"

    def _dump_raw(self, raw: dict[str, Any]) -> dict[str, Any]:
        return {"n": raw["n"], "sampled": bool(raw["sampled"]),
                "df": {self._SEP.join(k): v for k, v in raw["df"].items()},
                "titles": {self._SEP.join(k): v for k, v in raw["titles"].items()}}

    def _load_raw(self, d: dict[str, Any]) -> dict[str, Any]:
        raw = {"n": int(d["n"]), "sampled": bool(d["sampled"]),
               "df": Counter({tuple(k.split(self._SEP)): v for k, v in d["df"].items()}),
               "titles": Counter({tuple(k.split(self._SEP)): v
                                  for k, v in d["titles"].items()})}
        if raw["n"] <= 0 or not all(isinstance(v, int) and v > 0
                                    for c in (raw["df"], raw["titles"]) for v in c.values()):
            raise ValueError("malformed phrase counts")
        return raw

    def _spot(self, toks: list[str], vocab: set[Any], longest: int) -> list[str]:
        out, i, n = [], 0, len(toks)
        while i < n:
            for m in range(min(longest, n - i), 0, -1):
                gram = tuple(toks[i:i + m])
                if gram in vocab:
                    out.append(("" if is_cjk(gram[0]) else " ").join(gram))
                    i += m
                    break
            else:
                if toks[i].isdigit() and len(toks[i]) >= 3:
                    out.append(toks[i])
                i += 1
        return out

    def extract(self, passage: Passage) -> list[Proposition]:
        vocab, longest = self._stats(passage)
        return self._propositions(passage,
                                  lambda sent: self._spot(tokens(sent), vocab, longest))
