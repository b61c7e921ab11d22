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
from dataclasses import dataclass, field
from typing import Any, Sequence, TYPE_CHECKING

import numpy as np

from .kernels import LexicalMatrix, TermCounts, bm25_weights
from .extract.tokens import lexical_tokens

if TYPE_CHECKING:  # annotations only (a protocol: this module sits below the index)
    from .types import IndexData as PropositionIndex

__all__ = ["SearchStructures", "LexicalIndex", "LEVELS", "passage_text"]


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


@dataclass(eq=False)
class LexicalIndex:
    """Term counts of an index's propositions and passages over one vocabulary."""

    #: the vocabulary, in first-seen order, and its lookup
    terms: list[str]
    props: TermCounts
    passages: TermCounts
    term_ids: dict[str, int] = field(default_factory=dict, repr=False)
    _weights: dict[str, LexicalMatrix] = field(default_factory=dict, repr=False)
    _lock: Any = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if not self.term_ids:
            self.term_ids = {t: i for i, t in enumerate(self.terms)}

    @property
    def n_terms(self) -> int:
        return len(self.terms)

    def counts(self, level: str) -> TermCounts:
        if level not in LEVELS:
            raise ValueError(f"level must be one of {LEVELS}; got {level!r}")
        return self.props if level == "props" else self.passages

    # ------------------------------------------------------------------ building
    @staticmethod
    def _rows(texts: Sequence[str], terms: list[str], ids: dict[str, int],
              block: int = 8192) -> TermCounts:
        """The term counts of ``texts``, new terms appended to ``terms`` / ``ids``; counted
        ``block`` texts at a time (the Python lists of a block, not of the corpus)."""
        parts: list[TermCounts] = []
        rows: list[list[int]] = []
        for text in texts:
            row = []
            for t in lexical_tokens(text):
                i = ids.get(t)
                if i is None:
                    i = ids[t] = len(terms)
                    terms.append(t)
                row.append(i)
            rows.append(row)
            if len(rows) == block:
                parts.append(TermCounts.from_rows(rows))
                rows = []
        if rows or not parts:
            parts.append(TermCounts.from_rows(rows))
        return TermCounts.concat(*parts)

    @classmethod
    def build(cls, index: PropositionIndex) -> "LexicalIndex":
        """Count the terms of every proposition and passage of ``index``."""
        terms: list[str] = []
        ids: dict[str, int] = {}
        props = cls._rows(index.prop_texts, terms, ids)
        passages = cls._rows([passage_text(p) for p in index.passages], terms, ids)
        return cls(terms, props, passages, ids)

    def added(self, index: PropositionIndex, n_props: int, n_passages: int) -> "LexicalIndex":
        """The counts of ``index``, made by adding to the index these counts are of (its
        first ``n_props`` propositions and ``n_passages`` passages): only the new texts are
        tokenized; new terms extend the vocabulary."""
        terms, ids = list(self.terms), dict(self.term_ids)
        new_p = self._rows(index.prop_texts[n_props:], terms, ids)
        new_d = self._rows([passage_text(index.passages[j])
                            for j in range(n_passages, index.n_passages)], terms, ids)
        return LexicalIndex(terms, TermCounts.concat(self.props, new_p),
                            TermCounts.concat(self.passages, new_d), ids)

    def subset(self, prop_mask: np.ndarray, passage_mask: np.ndarray) -> "LexicalIndex":
        """The counts of the propositions and passages kept (masks, in stored order); the
        vocabulary is kept whole (a term no kept document has counts nowhere)."""
        return LexicalIndex(self.terms, self.props.take(np.flatnonzero(prop_mask)),
                            self.passages.take(np.flatnonzero(passage_mask)), self.term_ids)

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
        for b, text in enumerate(texts):
            seen: set[int] = set()
            for t in lexical_tokens(text):
                i = self.term_ids.get(t)
                if i is not None and i not in seen:
                    seen.add(i)
                    flat.append(i)
            indptr[b + 1] = len(flat)
        return indptr, np.asarray(flat, np.int64), np.ones(len(flat), np.float64)
