"""The extractor interface and what the extractors that learn from their corpus share.

:class:`Extractor` is the protocol every extractor implements (the LLM-free ones here, the
LLM extractor in :mod:`evireform.llm`); :class:`_FittedExtractor` fits statistics per
namespace (:func:`_namespace_of`) from at most :data:`FIT_SAMPLE` passages of each
(:func:`fit_sample`) and makes one proposition per sentence.
"""
from __future__ import annotations

import json
from typing import Any, Protocol, Sequence, runtime_checkable

from .._checks import canonical_value
from ..strings import MISSING, column, metadata_values
from ..types import Passage, Proposition
from ..formats import BULLET as _ITEM
from .tokens import _LETTER, sentences


@runtime_checkable
class Extractor(Protocol):
    """Splits passages into propositions with entity mentions."""

    #: recorded in the index manifest and in cache keys
    name: str

    def extract(self, passage: Passage) -> list[Proposition]:
        """Propositions of one passage (``Proposition.passage`` = ``passage.id``)."""
        ...

    def fit(self, passages: Sequence[Passage], new: Sequence[Passage] | None = None
            ) -> "Extractor":
        """Learn what extraction needs from the whole corpus (the passages of the index being
        built, or of the index plus those being added) before :meth:`extract_many`; a no-op
        unless the extractor uses corpus statistics.  ``new``: the passages an add is about
        to extract (among ``passages``), so an extractor may learn only what they need.
        Returns the extractor."""
        return self

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


#: the most passages of one namespace the fitted extractors (phrases-v3 and -v4, prose-v2) learn
#: their statistics from: those whose ids hash lowest (:func:`fit_sample`), a property of
#: the set of passages, so that an updated index learns what a rebuilt one does and an
#: update reads at most this many old passages, whatever its namespace holds
FIT_SAMPLE = 20_000

#: the layout of the raw counts an index carries (``extract_counts.json``)
COUNTS_VERSION = 1

#: a prose namespace is fitted again, not updated from its counts, once more than this share
#: of its lower-case words joined or left the words it had when its names were last counted
#: (:meth:`evireform.extract.prose.ProseExtractor._tally`)
DRIFT_SHARE = 0.01


def tally(counter: Any, groups: Any, sign: int) -> None:
    """Add (``sign`` 1) or remove (-1) each group's items in ``counter``; counts that fall to
    zero or below are dropped."""
    for items in groups:
        if sign > 0:
            counter.update(items)
        else:
            counter.subtract(items)
    if sign < 0:
        for k in [k for k, v in counter.items() if v <= 0]:
            del counter[k]


def fit_sample(passages: Sequence[Passage], positions: Sequence[int], limit: int | None
               ) -> list[int]:
    """``positions`` (of ``passages``) when at most ``limit`` (None: no limit), else the
    ``limit`` of them whose ids hash lowest (blake2b), in ascending order."""
    if limit is None or len(positions) <= limit:
        return list(positions)
    import hashlib
    import numpy as np
    ids = column(passages, "ids")
    keys = np.fromiter((int.from_bytes(hashlib.blake2b(
        ids[j].encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big") >> 1
        for j in positions), dtype=np.int64, count=len(positions))
    pos = np.asarray(positions, dtype=np.int64)
    keep = np.argpartition(keys, limit - 1)[:limit]
    return sorted(pos[keep].tolist())


def _namespace_of(metadata: dict[str, Any], group_by: str | None):
    """The namespace a passage belongs to for corpus statistics (JSON equality, as filters;
    None: the passages without ``group_by``)."""
    if group_by is None or group_by not in metadata:
        return None
    return _namespace_key(metadata[group_by])


def _namespace_key(value: Any):
    try:
        return ("key", canonical_value(value))
    except TypeError:  # unhashable (never from JSON): its own spelling
        return ("repr", repr(value))


def namespaces_of(passages: Sequence[Passage], group_by: str | None) -> list[Any]:
    """:func:`_namespace_of` of every passage, decoding no metadata that does not name
    ``group_by`` (:func:`~evireform.strings.metadata_values`)."""
    if group_by is None:
        return [None] * len(passages)
    return [None if v is MISSING else _namespace_key(v)
            for v in metadata_values(passages, group_by)]


def _namespace_label(g) -> str:
    """A namespace key as it is recorded in ``meta["extractor_choice"]`` (JSON text)."""
    return "" if g is None else json.dumps(_plain(g[1]) if g[0] == "key" else g[1],
                                           sort_keys=True, ensure_ascii=False)


def _plain(c):
    """A canonical JSON value (:func:`evireform._checks.canonical_value`) as plain JSON data, equal
    values spelt alike (``1`` and ``1.0`` both ``1``)."""
    kind, v = c
    if kind == "l":
        return [_plain(x) for x in v]
    if kind == "o":
        return {k: _plain(x) for k, x in v}
    if kind == "n" and isinstance(v, float) and v.is_integer():
        return int(v)
    return v


class _FittedExtractor(Extractor):
    """What the extractors that learn from their corpus share: statistics per namespace
    (``_fitted``: namespace -> what :meth:`fit` learnt), fitted on first use for a namespace
    not seen, and one proposition per Unicode sentence with the title prefixed and the title
    as an entity (:meth:`_propositions`)."""

    title_entity: bool
    title_prefix: bool
    #: sentences without a letter ("...", ">>>", '"""', "2.", "[1]": list numbers, prompts and
    #: markup a splitter leaves) are no propositions (issue 68); False: every sentence is
    words_only: bool = False
    #: a document's list item (a line opening with a bullet) ends a sentence: "bison (for
    #: datetime parser in certtool)" in a list of tools is a proposition of its own, not a
    #: piece of one that runs the whole list (phrases-v3 and -v4, prose-v2)
    line_breaks: bool = False

    def _group(self, metadata: dict[str, Any]):
        return _namespace_of(metadata, self.group_by)

    def _fitted(self) -> dict[Any, Any]:
        raise NotImplementedError

    # ------------------------------------------------------------ carried statistics
    #: namespace -> the raw counts :meth:`fit` derived its statistics from (``counts``
    #: below): an index keeps them, so that an update adds its passages' counts to them
    #: instead of reading every passage of the namespace again
    raw: dict[Any, Any]

    def _tally(self, g: Any, raw: Any, passages: Sequence[Passage], sign: int) -> bool:
        """Add (``sign`` 1) or remove (-1) ``passages``' counts in namespace ``g``'s
        ``raw`` counts and set its statistics from them; False when the counts cannot say
        what a fit would (the caller then fits the namespace again)."""
        return False

    def _dump_raw(self, raw: Any) -> dict[str, Any]:
        raise NotImplementedError

    def _load_raw(self, d: dict[str, Any]) -> Any:
        raise NotImplementedError

    def _from_raw(self, g: Any, raw: Any) -> Any:
        raise NotImplementedError

    def counts(self) -> dict[str, Any] | None:
        """The raw counts of every namespace fitted, as JSON data (what an index saves as
        ``extract_counts.json``); None when there are none."""
        out = {}
        for g, raw in self.raw.items():
            if g is None or g[0] == "key":  # a namespace a label gives back
                out[_namespace_label(g)] = self._dump_raw(raw)
        if not out:
            return None
        return {"extractor": self.name, "version": COUNTS_VERSION, "namespaces": out}

    def restore(self, counts: Any) -> bool:
        """Take the raw counts :meth:`counts` gave (of an extractor of this name) and the
        statistics they make; False, taking nothing, for counts of another extractor or
        version, or malformed ones."""
        if not isinstance(counts, dict) or counts.get("extractor") != self.name \
                or counts.get("version") != COUNTS_VERSION:
            return False
        try:
            got = {(None if label == "" else _namespace_key(json.loads(label))):
                   self._load_raw(d) for label, d in counts["namespaces"].items()}
        except (ValueError, TypeError, KeyError, AttributeError):
            return False
        self.raw.update(got)
        for g, raw in got.items():
            self._fitted()[g] = self._from_raw(g, raw)
        return True

    def grow(self, passages: Sequence[Passage], new: Sequence[Passage]) -> list[Any]:
        """``fit(passages, new=new)`` where the carried raw counts allow: a namespace with
        counts gets ``new``'s added to them; the others (no counts, or counts that drifted
        past what they can say: :meth:`_tally`) are fitted again from ``passages``.
        Returns the namespaces fitted again."""
        by: dict[Any, list[Passage]] = {}
        for p in new:
            by.setdefault(self._group(p.metadata), []).append(p)
        again = [g for g, ps in by.items()
                 if g not in self.raw or not self._tally(g, self.raw[g], ps, 1)]
        if again:
            wanted = set(again)
            self.fit(passages, new=[p for p in new if self._group(p.metadata) in wanted])
        return again

    def shrink(self, removed: Sequence[Passage]) -> None:
        """Remove the counts of ``removed`` (passages deleted from the index); a namespace
        whose counts cannot say what a fit would loses them (and its statistics: the next
        add fits it again)."""
        by: dict[Any, list[Passage]] = {}
        for p in removed:
            by.setdefault(self._group(p.metadata), []).append(p)
        for g, ps in by.items():
            raw = self.raw.get(g)
            if raw is not None and not self._tally(g, raw, ps, -1):
                del self.raw[g]
                self._fitted().pop(g, None)

    def extract_many(self, passages: Sequence[Passage],
                     show_progress: bool = False) -> list[list[Proposition]]:
        fitted = self._fitted()
        missing = [p for p in passages if self._group(p.metadata) not in fitted]
        if missing:  # namespaces not fitted: learn them from these passages
            self.fit(passages, new=missing)
        return super().extract_many(passages, show_progress)

    def _stats(self, passage: Passage):
        """What the passage's namespace learnt (fitted from the passage alone if new)."""
        g = self._group(passage.metadata)
        if g not in self._fitted():
            self.fit([passage])
        return self._fitted()[g]

    def _sentences(self, text: str) -> list[str]:
        """The text's sentences (:func:`evireform.text.sentences`); with ``line_breaks``, a
        list item of a document (a line opening with :data:`~evireform.formats.BULLET`)
        is a sentence of its own, its bullet dropped, however it ends."""
        if not (self.line_breaks and "\n" in text and _ITEM in text):
            return sentences(text)
        parts, cur = [], []
        for line in text.split("\n"):
            item = line.startswith(_ITEM)
            if cur and (item or cur[-1].startswith(_ITEM)):
                parts.append("\n".join(cur))
                cur = []
            cur.append(line)
        parts.append("\n".join(cur))
        return [s for p in parts for s in sentences(p.removeprefix(_ITEM))]

    def _propositions(self, passage: Passage, mentions) -> list[Proposition]:
        """One proposition per sentence of ``passage``, its entities ``mentions(sentence)``
        (then the title), its text prefixed with the title unless it names it."""
        title = passage.title.strip()
        out = []
        for sent in self._sentences(passage.text):
            if self.words_only and not _LETTER.search(sent):
                continue
            ents = mentions(sent)
            if title and self.title_entity:
                ents.append(title)
            text = sent
            if self.title_prefix and title and title.casefold() not in sent.casefold():
                text = f"{title}: {sent}"
            out.append(Proposition(text=text, passage=passage.id,
                                   entities=tuple(dict.fromkeys(ents))))
        return out
