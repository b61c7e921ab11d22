"""The LLM-free extractor for ordinary prose (documentation, READMEs): identifiers, names
less the words capitalised by their place, recurring CJK phrases; hubs left out.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

from ..strings import Take, column
from ..types import Passage, Proposition
from . import base as _base
from .base import _FittedExtractor, fit_sample, namespaces_of, tally
from .phrases import PhraseExtractor
from .tokens import (_CJK_CHAR, _CONNECT, _STOP, LOWER_WORD, identifiers, is_cjk, name_spans,
                     placed, tokens)


class ProseExtractor(_FittedExtractor):
    """LLM-free extraction for ordinary prose: documentation, READMEs, papers, notes, where
    capital letters start sentences more often than they mark names (issue 52).

    One proposition per sentence (:func:`evireform.text.sentences`; the title prefixed as
    :class:`HeuristicExtractor` does).  Its entities are

    * its identifiers (:func:`identifiers`: "ssh-keygen", "login.defs", "ProxyJump",
      "SSH_AUTH_SOCK", "--shell", "/etc/shells"), the things documentation is about;
    * its capitalised names (:func:`name_spans`), less the words capitalised only by their
      place: a name's first word that starts the sentence or a clause (:func:`placed`) and
      that the corpus also writes in lower case ("Note", "Specifies", "Additionally",
      "Try"), and its last words when the corpus writes them in lower case
      ("ConnectTimeout Specifies" -> "ConnectTimeout");
    * in scripts without case, the recurring character phrases of
      :class:`PhraseExtractor`;
    * the passage title.

    **Specificity.**  A name found in more than ``max(max_df_min, max_df_share * passages)``
    passages is a hub ("Table" in a paper, "SSH" in OpenSSH's manuals): it would link
    everything and bridge to nothing, so it is no entity.  :meth:`fit` learns the document
    frequencies and the lower-case words per namespace (metadata key ``group_by``, as
    :class:`PhraseExtractor` does): one tenant's text never changes another's graph.

    ``version=2`` (the default; ``prose-v2``): a sentence without a letter is no
    proposition, and a namespace's statistics come from at most :data:`FIT_SAMPLE` of its
    passages (:func:`fit_sample`: an update reads no more, whatever the namespace holds);
    ``version=1`` extracts as ``prose-v1`` did (an index recorded so is updated so).
    """

    name = "prose-v2"

    def __init__(self, max_df_share: float = 0.05, max_df_min: int = 5,
                 title_prefix: bool = True, title_entity: bool = True,
                 group_by: str | None = "namespace", version: int = 2) -> None:
        if version not in (1, 2):
            raise ValueError(f"version must be 1 or 2; got {version!r}")
        self.name = f"prose-v{version}"
        self.words_only = self.line_breaks = version >= 2
        self.fit_sample: int | None = _base.FIT_SAMPLE if version >= 2 else None
        self.max_df_share, self.max_df_min = float(max_df_share), int(max_df_min)
        self.title_prefix, self.title_entity = title_prefix, title_entity
        self.group_by: str | None = group_by
        #: per namespace: (hub names, lower-case words)
        self.stats: dict[Any, tuple[frozenset[str], frozenset[str]]] = {}
        #: per namespace: the counts its statistics come from (``n`` passages, each
        #: lower-case word's count, each name's passages counted with the lower-case words
        #: ``lower_fit``, ``sampled`` when the fit read a sample): :meth:`_tally`
        self.raw: dict[Any, dict[str, Any]] = {}
        self.cjk = PhraseExtractor(group_by=group_by, fit_sample=self.fit_sample)

    def _fitted(self) -> dict[Any, Any]:
        return self.stats

    def _mentions(self, sentence: str, lower: frozenset[str]) -> list[str]:
        """The sentence's identifiers and trimmed names (before the hub test)."""
        out = identifiers(sentence)
        for span in name_spans(sentence):
            toks = span.split()
            if toks and toks[0].lower() in lower:
                at = sentence.find(toks[0])
                if at >= 0 and placed(sentence[:at]):
                    toks = toks[1:]
            while toks and (toks[0].lower() in _STOP or toks[0].lower() in _CONNECT):
                toks = toks[1:]
            while len(toks) > 1 and toks[-1].lower() in lower:
                toks = toks[:-1]
            if toks and not (len(toks) == 1 and len(toks[0]) < 2):
                out.append(" ".join(toks))
        return out

    def fit(self, passages: Sequence[Passage], new: Sequence[Passage] | None = None
            ) -> "ProseExtractor":
        """Learn each namespace's hubs and lower-case words from its passages (with ``new``:
        only the namespaces those passages belong to), and the character phrases of the
        passages in caseless scripts."""
        groups = namespaces_of(passages, self.group_by)
        wanted = None if new is None else {self._group(p.metadata) for p in new}
        members: dict[Any, list[int]] = {}
        for i, g in enumerate(groups):
            if wanted is None or g in wanted:
                members.setdefault(g, []).append(i)
        texts = column(passages, "texts")
        read: list[int] = []  # the passages learnt from, every namespace's
        for g, all_pos in members.items():
            pos = fit_sample(passages, all_pos, self.fit_sample)
            read += pos
            lower_counts: Counter = Counter()
            for j in pos:
                lower_counts.update(LOWER_WORD.findall(texts[j]))
            lower = frozenset(w for w, n in lower_counts.items() if n >= 2)
            df: Counter = Counter()
            for j in pos:
                df.update(self._names(texts[j], lower))
            self.raw[g] = raw = {"n": len(pos), "lower_counts": lower_counts, "df": df,
                                 "lower_fit": lower, "sampled": len(pos) < len(all_pos)}
            self.stats[g] = self._from_raw(g, raw)
        cjk = [j for j in sorted(read) if _CJK_CHAR.search(texts[j])]
        if cjk:
            self.cjk.fit(Take(passages, cjk))
        return self

    def _names(self, text: str, lower: frozenset[str]) -> set[str]:
        """The canonical names a passage's text mentions (before the hub test)."""
        from ..entities import canonical_entity
        return {canonical_entity(m) for sent in self._sentences(text)
                for m in self._mentions(sent, lower)}

    def _from_raw(self, g: Any, raw: dict[str, Any]):
        cap = max(self.max_df_min, int(self.max_df_share * raw["n"]))
        return (frozenset(n for n, c in raw["df"].items() if c > cap),
                frozenset(w for w, n in raw["lower_counts"].items() if n >= 2))

    def _tally(self, g: Any, raw: dict[str, Any], passages: Sequence[Passage],
               sign: int) -> bool:
        """The counts of ``passages`` added (or removed) in place.  The lower-case words'
        counts and the number of passages are exact; a name's count is the number of
        passages that mention it as their text's lower-case words made it when they were
        counted, so it is exact while those words stay those of the last fit
        (``lower_fit``).  More than :data:`~evireform.extract.base.DRIFT_SHARE` of them
        joining or leaving: False (fitted again).  Passages in a caseless script: False
        (their phrases are fitted with the namespace)."""
        if any(_CJK_CHAR.search(p.text) for p in passages) or g in self.cjk.vocabs:
            return False
        lc: Counter = raw["lower_counts"]
        tally(lc, (LOWER_WORD.findall(p.text) for p in passages), sign)
        lower = frozenset(w for w, n in lc.items() if n >= 2)
        drift = len(lower ^ raw["lower_fit"])
        raw["n"] += sign * len(passages)
        if raw["n"] <= 0 or drift > max(1.0, _base.DRIFT_SHARE * len(raw["lower_fit"])):
            return False
        tally(raw["df"], (self._names(p.text, lower) for p in passages), sign)
        self.stats[g] = self._from_raw(g, raw)
        return True

    def _dump_raw(self, raw: dict[str, Any]) -> dict[str, Any]:
        return {"n": raw["n"], "lower_counts": dict(raw["lower_counts"]),
                "df": dict(raw["df"]), "lower_fit": sorted(raw["lower_fit"]),
                "sampled": bool(raw["sampled"])}

    def _load_raw(self, d: dict[str, Any]) -> dict[str, Any]:
        raw = {"n": int(d["n"]), "lower_counts": Counter(d["lower_counts"]),
               "df": Counter(d["df"]), "lower_fit": frozenset(d["lower_fit"]),
               "sampled": bool(d["sampled"])}
        if raw["n"] <= 0 or not all(isinstance(k, str) and isinstance(v, int) and v > 0
                                    for c in (raw["lower_counts"], raw["df"])
                                    for k, v in c.items()):
            raise ValueError("malformed prose counts")
        return raw

    def extract(self, passage: Passage) -> list[Proposition]:
        from ..entities import canonical_entity
        hubs, lower = self._stats(passage)
        cjk = self.cjk.vocabs.get(self.cjk._group(passage.metadata))

        def mentions(sent: str) -> list[str]:
            ents = [m for m in self._mentions(sent, lower) if canonical_entity(m) not in hubs]
            if cjk is not None and _CJK_CHAR.search(sent):
                ents += [x for x in self.cjk._spot(tokens(sent), *cjk) if x and is_cjk(x[0])]
            return ents
        return self._propositions(passage, mentions)


#: a letter of any script (not a digit, not "_")
