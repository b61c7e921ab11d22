"""The data of an index's search structures, below both the store (which saves and loads
it) and the engine (which makes and searches it): :class:`SearchStructures` (the HNSW
graph, the int8 codes, device copies, the lexical index) and :class:`LexicalIndex` (the term
counts of every proposition and passage, and the BM25 weights made from them).

The engine makes them (:func:`evireform.engine.structures.structures_of`, its carrying
across add / delete / subset, the searches of :mod:`evireform.engine.lexical`); the store
writes and reads them with the index directory (:mod:`evireform.store`), and so never
imports the engine.
"""
from __future__ import annotations

import threading
from itertools import islice
from dataclasses import dataclass, field
from typing import Any, Sequence, TYPE_CHECKING

import numpy as np

from .kernels import LexicalMatrix, SortedTerms, TermCounts, bm25_weights, vocab_lookup
from .extract.tokens import lexical_tokens

if TYPE_CHECKING:  # annotations only (a protocol: this module sits below the index)
    from .types import IndexData as PropositionIndex

__all__ = ["SearchStructures", "LexicalIndex", "Vocabulary", "LEVELS", "passage_text"]


@dataclass(eq=False)
class SearchStructures:
    """What the engines search besides the float32 rows (see the module docstring)."""

    #: the hnswlib graph, or None (exact search)
    hnsw: Any = None
    #: HNSW label -> proposition id (-1: deleted), once deletions renumbered the
    #: propositions; None while labels are proposition ids
    hnsw_ids: np.ndarray | None = None
    #: int8 codes of the embeddings and their per-dimension scale, or None
    codes: np.ndarray | None = None
    code_scale: np.ndarray | None = None
    #: device copies (:func:`evireform.engine.device.to_device`), by their settings
    devices: dict[Any, Any] = field(default_factory=dict, repr=False)
    #: the lexical index (:class:`evireform.engine.lexical.LexicalIndex`: term counts of
    #: every proposition and passage), or None until :func:`lexical_of` makes it
    lexical: Any = None

    @property
    def kind(self) -> str:
        """``"hnsw"`` or ``"exact"``: how an unfiltered CPU search runs."""
        return "hnsw" if self.hnsw is not None else "exact"



#: what a lexical search ranks: the index's propositions or its passages
LEVELS = ("props", "passages")


def passage_text(p: Any) -> str:
    """A passage's lexical text: its title, a newline, its text (as the BM25 baseline)."""
    return f"{p.title}\n{p.text}"


class Vocabulary:
    """The lexical vocabulary: term ids in first-seen order, found by their text.

    A saved index's vocabulary is mapped from its files (``base``, a
    :class:`~evireform.kernels.lexical.SortedTerms`: the terms' bytes and their order,
    searched by :func:`~evireform.kernels.vocab_lookup`), so opening an index builds nothing
    per term and a query pays for its own terms only.  Terms added since (an index built
    here, or the new terms of an update) follow it as a list and a dict."""

    __slots__ = ("base", "extra", "extra_ids")

    def __init__(self, base: SortedTerms | None = None, extra: Sequence[str] = ()) -> None:
        self.base = base if base is not None and len(base) else None
        nb = len(self.base) if self.base is not None else 0
        self.extra: list[str] = list(extra)
        self.extra_ids: dict[str, int] = {t: nb + i for i, t in enumerate(self.extra)}

    def __len__(self) -> int:
        return (len(self.base) if self.base is not None else 0) + len(self.extra)

    def __getitem__(self, t: Any) -> str:
        t = int(t)
        nb = len(self.base) if self.base is not None else 0
        if not 0 <= t < nb + len(self.extra):
            raise IndexError(f"term {t} of a vocabulary of {len(self)}")
        return self.base.term(t) if t < nb else self.extra[t - nb]  # type: ignore[union-attr]

    def __iter__(self):
        return (self[t] for t in range(len(self)))

    def copy(self) -> "Vocabulary":
        """A vocabulary that can grow without changing this one (the mapped part shared)."""
        out = Vocabulary.__new__(Vocabulary)
        out.base, out.extra, out.extra_ids = self.base, list(self.extra), dict(self.extra_ids)
        return out

    def find(self, tokens: Any) -> dict[str, int]:
        """The ids of those of ``tokens`` that are terms (each looked up once)."""
        out: dict[str, int] = {}
        rest = []
        for t in set(tokens):
            i = self.extra_ids.get(t)
            if i is not None:
                out[t] = i
            elif self.base is not None:
                rest.append(t)
        if rest:
            _, ids = vocab_lookup(self.base, rest)
            out.update((t, i) for t, i in zip(rest, ids.tolist()) if i >= 0)
        return out

    def assign(self, docs: Sequence[Sequence[str]]) -> list[list[int]]:
        """Each document's term ids, terms not yet in the vocabulary added to it in the
        order the documents first name them."""
        ids = self.extra_ids
        known = ids if self.base is None else self.find(t for d in docs for t in d)
        rows = []
        for doc in docs:
            row = []
            for t in doc:
                i = known.get(t)
                if i is None:
                    i = ids.get(t)  # added by an earlier document of this call
                    if i is None:
                        i = ids[t] = len(self)
                        self.extra.append(t)
                row.append(i)
            rows.append(row)
        return rows

    def sorted_terms(self) -> SortedTerms:
        """The whole vocabulary as the files store it: the mapped part's arrays, with the
        added terms' bytes appended and their places merged into the order."""
        if self.base is None:
            return SortedTerms.from_terms(self.extra)
        if not self.extra:
            return self.base
        b = self.base
        new = SortedTerms.from_terms(self.extra)
        pos, _ = vocab_lookup(b, self.extra)  # none is in the mapped part: lower bounds
        new_ids = new.order.astype(np.int64)  # the added terms by their bytes
        order = np.insert(b.order, pos[new_ids], (new_ids + len(b)).astype(np.int32))
        blob = np.concatenate([np.asarray(b.blob), new.blob])
        off = np.concatenate([b.offsets, b.offsets[-1] + new.offsets[1:]])
        return SortedTerms(blob, off, order)


@dataclass(eq=False)
class LexicalIndex:
    """Term counts of an index's propositions and passages over one vocabulary."""

    #: the vocabulary (:class:`Vocabulary`: ``terms[t]`` is term ``t``'s text)
    terms: Vocabulary
    props: TermCounts
    passages: TermCounts
    _weights: dict[str, LexicalMatrix] = field(default_factory=dict, repr=False)
    _lock: Any = field(default_factory=threading.Lock, repr=False)

    @property
    def n_terms(self) -> int:
        return len(self.terms)

    def counts(self, level: str) -> TermCounts:
        if level not in LEVELS:
            raise ValueError(f"level must be one of {LEVELS}; got {level!r}")
        return self.props if level == "props" else self.passages

    # ------------------------------------------------------------------ building
    @staticmethod
    def _rows(texts: Sequence[str], vocab: Vocabulary, block: int = 8192) -> TermCounts:
        """The term counts of ``texts``, new terms added to ``vocab``; counted ``block``
        texts at a time (the Python lists of a block, not of the corpus)."""
        parts: list[TermCounts] = []
        it = iter(texts)
        while docs := [lexical_tokens(t) for t in islice(it, block)]:
            parts.append(TermCounts.from_rows(vocab.assign(docs)))
        if not parts:
            parts.append(TermCounts.from_rows([]))
        return TermCounts.concat(*parts)

    @classmethod
    def build(cls, index: PropositionIndex) -> "LexicalIndex":
        """Count the terms of every proposition and passage of ``index``."""
        vocab = Vocabulary()
        props = cls._rows(index.prop_texts, vocab)
        passages = cls._rows([passage_text(p) for p in index.passages], vocab)
        return cls(vocab, props, passages)

    def added(self, index: PropositionIndex, n_props: int, n_passages: int) -> "LexicalIndex":
        """The counts of ``index``, made by adding to the index these counts are of (its
        first ``n_props`` propositions and ``n_passages`` passages): only the new texts are
        tokenized; new terms extend the vocabulary."""
        vocab = self.terms.copy()
        new_p = self._rows(index.prop_texts[n_props:], vocab)
        new_d = self._rows([passage_text(index.passages[j])
                            for j in range(n_passages, index.n_passages)], vocab)
        return LexicalIndex(vocab, TermCounts.concat(self.props, new_p),
                            TermCounts.concat(self.passages, new_d))

    def subset(self, prop_mask: np.ndarray, passage_mask: np.ndarray) -> "LexicalIndex":
        """The counts of the propositions and passages kept (masks, in stored order); the
        vocabulary is kept whole (a term no kept document has counts nowhere)."""
        return LexicalIndex(self.terms, self.props.take(np.flatnonzero(prop_mask)),
                            self.passages.take(np.flatnonzero(passage_mask)))

    # ------------------------------------------------------------------ scoring
    def weights(self, level: str, restriction: Any = None) -> LexicalMatrix:
        """The BM25 weights of ``level``, over the whole index or, with a
        :class:`~evireform.filters.Restriction`, recounted over its matching documents
        (kept with the restriction)."""
        cache = self._weights if restriction is None else restriction.lexical
        m = cache.get(level)
        if m is None:
            with self._lock:
                m = cache.get(level)
                if m is None:
                    docs = None if restriction is None else \
                        (restriction.prop_mask if level == "props" else restriction.pmask)
                    m = cache[level] = bm25_weights(self.counts(level), self.n_terms,
                                                    docs=docs)
        return m

    def query(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Queries as CSR rows of term ids (each distinct known term once, in the order the
        query first names it) and weights (1 each)."""
        indptr = np.zeros(len(texts) + 1, np.int64)
        flat: list[int] = []
        docs = [lexical_tokens(text) for text in texts]
        known = self.terms.find(t for d in docs for t in d)
        for b, doc in enumerate(docs):
            seen: set[int] = set()
            for t in doc:
                i = known.get(t)
                if i is not None and i not in seen:
                    seen.add(i)
                    flat.append(i)
            indptr[b + 1] = len(flat)
        return indptr, np.asarray(flat, np.int64), np.ones(len(flat), np.float64)
