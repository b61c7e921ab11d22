"""The lexical (BM25) structures the kernels read: term counts per document and the eager
BM25 weights made from them.

:class:`TermCounts` holds, per document (a proposition or a passage), its terms and their
counts as CSR rows over a vocabulary; :func:`bm25_weights` turns them into a
:class:`LexicalMatrix`, the (terms x documents) CSR of BM25 weights computed once (as
``bm25s`` scores eagerly), so that a query's scores are a sum of a few rows
(:func:`evireform.kernels.lexical_topk_batch`).  The weights depend on the collection's
statistics (document frequencies, the mean length): over a subset of the documents
(``docs=``) they are recounted over that subset alone, which is what a filter's restriction
needs.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from . import config

__all__ = ["TermCounts", "LexicalMatrix", "SortedTerms", "bm25_weights", "K1", "B"]

#: the numba kernels' module: a process that has not loaded it computes small weight
#: matrices with numpy (:func:`bm25_weights`)
_CPU_MODULE = __name__.rsplit(".", 1)[0] + "._cpu"

#: BM25's term-frequency saturation and length normalisation (bm25s's and Lucene's defaults)
K1, B = 1.5, 0.75


@dataclass(frozen=True)
class TermCounts:
    """Term counts per document as CSR rows: ``indptr`` (n_docs + 1, int64), ``terms``
    (int32, ascending within a row) and ``counts`` (float32, positive)."""

    indptr: np.ndarray
    terms: np.ndarray
    counts: np.ndarray

    @property
    def n_docs(self) -> int:
        return len(self.indptr) - 1

    @classmethod
    def from_rows(cls, rows: Sequence[Sequence[int]]) -> "TermCounts":
        """From each document's term ids (repeats count): one sort of all (document, term)
        pairs, then the runs counted."""
        n = len(rows)
        lens = np.fromiter((len(r) for r in rows), np.int64, n)
        flat = np.fromiter((t for r in rows for t in r), np.int64, int(lens.sum()))
        if len(flat) and flat.min() < 0:
            raise ValueError(f"term ids must be >= 0; got {int(flat.min())}")
        doc = np.repeat(np.arange(n, dtype=np.int64), lens)
        key = doc * (int(flat.max()) + 1 if len(flat) else 1) + flat
        key.sort()
        first = np.ones(len(key), bool)
        first[1:] = key[1:] != key[:-1]
        starts = np.flatnonzero(first)
        counts = np.diff(np.r_[starts, len(key)]).astype(np.float32)
        width = int(flat.max()) + 1 if len(flat) else 1
        d, terms = np.divmod(key[starts], width)
        indptr = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(d, minlength=n), out=indptr[1:])
        return cls(indptr, terms.astype(np.int32), counts)

    def lengths(self) -> np.ndarray:
        """Each document's number of terms (float64)."""
        out = np.zeros(self.n_docs, np.float64)
        rows = np.repeat(np.arange(self.n_docs), np.diff(self.indptr))
        np.add.at(out, rows, self.counts.astype(np.float64))
        return out

    def take(self, docs: np.ndarray) -> "TermCounts":
        """The rows ``docs`` (positions, in the order given)."""
        docs = np.asarray(docs, np.int64)
        lens = np.diff(self.indptr)[docs]
        indptr = np.zeros(len(docs) + 1, np.int64)
        np.cumsum(lens, out=indptr[1:])
        if len(docs) and indptr[-1]:
            src = np.repeat(self.indptr[docs] - indptr[:-1], lens) + np.arange(indptr[-1])
        else:
            src = np.zeros(0, np.int64)
        return TermCounts(indptr, self.terms[src], self.counts[src])

    @staticmethod
    def concat(*parts: "TermCounts") -> "TermCounts":
        """The rows of ``parts`` one after another (one copy of each)."""
        if not parts:
            return TermCounts.from_rows([])
        offsets = np.cumsum([0] + [int(p.indptr[-1]) for p in parts[:-1]])
        indptr = np.concatenate([parts[0].indptr[:1]]
                                + [p.indptr[1:] + o for p, o in zip(parts, offsets)])
        return TermCounts(indptr.astype(np.int64), np.concatenate([p.terms for p in parts]),
                          np.concatenate([p.counts for p in parts]))


@dataclass(frozen=True)
class LexicalMatrix:
    """Eager BM25 weights, (terms x documents) CSR: ``indptr`` (n_terms + 1, int64),
    ``docs`` (int32 document ids, ascending within a row), ``weights`` (float32, positive),
    and ``n_docs`` (the documents' id space)."""

    indptr: np.ndarray
    docs: np.ndarray
    weights: np.ndarray
    n_docs: int

    @property
    def n_terms(self) -> int:
        return len(self.indptr) - 1

    @property
    def nnz(self) -> int:
        return len(self.docs)


@dataclass(frozen=True)
class SortedTerms:
    """A vocabulary as the kernels read it (:func:`evireform.kernels.vocab_lookup`): term
    ``t`` is the UTF-8 ``blob[offsets[t]:offsets[t + 1]]`` and ``order`` lists the term ids
    by their bytes, ascending (so a term is found by binary search, and a saved vocabulary
    is opened by mapping three arrays, nothing built per term).

    Made, the arrays are checked in O(n) vectorised passes (dtypes, shapes, the offsets
    within the blob and never decreasing, every entry of ``order`` a term id), which is what
    keeps the kernel's reads inside the arrays; that the terms ascend strictly is
    :func:`evireform.kernels.vocab_unsorted`'s (the full verification tier's) to check."""

    blob: np.ndarray
    offsets: np.ndarray
    order: np.ndarray

    def __post_init__(self) -> None:
        blob, off, order = (np.asarray(self.blob), np.asarray(self.offsets),
                            np.asarray(self.order))
        if blob.dtype != np.uint8 or blob.ndim != 1:
            raise ValueError(f"blob must be a 1-d uint8 array; got {blob.dtype} {blob.shape}")
        if off.dtype != np.int64 or off.ndim != 1 or len(off) < 1:
            raise ValueError("offsets must be a 1-d int64 array of n_terms + 1 entries")
        if order.dtype != np.int32 or order.shape != (len(off) - 1,):
            raise ValueError(f"order must be int32 of shape ({len(off) - 1},) (one entry per "
                             f"term); got {order.dtype} {order.shape}")
        if off[0] != 0 or off[-1] != len(blob):
            raise ValueError(f"offsets must start at 0 and end at the blob's {len(blob)} "
                             f"bytes; got {off[0]} .. {off[-1]}")
        if len(off) > 1 and np.any(off[1:] < off[:-1]):
            i = int(np.argmax(off[1:] < off[:-1]))
            raise ValueError(f"offsets must not decrease; entry {i + 1} is {off[i + 1]} "
                             f"after {off[i]}")
        if len(order) and (int(order.min()) < 0 or int(order.max()) >= len(order)):
            raise ValueError(f"order holds {int(order.min())} .. {int(order.max())}, outside "
                             f"the term ids [0, {len(order)})")
        for name, a in (("blob", blob), ("offsets", off), ("order", order)):
            a = np.ascontiguousarray(a).view()  # read-only views (as a loaded index's
            a.setflags(write=False)              # maps): one compiled kernel for both
            object.__setattr__(self, name, a)

    @classmethod
    def from_terms(cls, terms: Sequence[str]) -> "SortedTerms":
        """The vocabulary of ``terms`` (term ids their positions; no repeats)."""
        enc = [t.encode("utf-8") for t in terms]
        off = np.zeros(len(enc) + 1, np.int64)
        np.cumsum(np.fromiter(map(len, enc), np.int64, len(enc)), out=off[1:])
        order = np.array(sorted(range(len(enc)), key=enc.__getitem__), np.int32)
        return cls(np.frombuffer(b"".join(enc), np.uint8), off, order)

    def __len__(self) -> int:
        return len(self.order)

    def term(self, t: int) -> str:
        """Term ``t``'s text."""
        return bytes(self.blob[self.offsets[t]:self.offsets[t + 1]]).decode("utf-8",
                                                                            "replace")


def _read_only(*arrays: np.ndarray) -> list[np.ndarray]:
    """Read-only views (as a loaded index's maps are): one compiled kernel serves counts
    made in this process and counts read from disk."""
    out = []
    for a in arrays:
        v = np.ascontiguousarray(a).view()
        v.setflags(write=False)
        out.append(v)
    return out


def bm25_weights(counts: TermCounts, n_terms: int, *, k1: float = K1, b: float = B,
                 docs: Any = None) -> LexicalMatrix:
    """The BM25 weight of every (term, document) pair of ``counts``:
    ``idf(t) * tf / (tf + k1 * (1 - b + b * dl / avgdl))`` with
    ``idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))`` (Lucene's form, as bm25s's "lucene"
    method: the classic ``(k1 + 1)`` factor, which ranks alike, left out), ``dl`` a
    document's number of terms and ``avgdl`` their mean.  ``docs`` (a boolean mask or
    positions): only those documents count, N, df and avgdl recounted over them, the others
    without weights (ids keep their place)."""
    n_docs = counts.n_docs
    if docs is None:
        keep = None
    else:
        keep = np.zeros(n_docs, bool)
        d = np.asarray(docs)
        keep[d if d.dtype != bool else np.flatnonzero(d)] = True
    if len(counts.terms) and int(counts.terms.max()) >= n_terms:
        raise ValueError(f"n_terms is {n_terms} but the counts have term id "
                         f"{int(counts.terms.max())}")
    numpy_path = (len(counts.terms) <= config.BM25_NUMPY_POSTINGS
                  and _CPU_MODULE not in sys.modules)
    if numpy_path:  # a small index in a process without numba (a one-shot question)
        kern = None
        rows = np.repeat(np.arange(n_docs, dtype=np.int64), np.diff(counts.indptr))
        dl = np.bincount(rows, weights=counts.counts.astype(np.float64), minlength=n_docs)
    else:
        from . import _cpu as kern  # numba, loaded on first use (as runtime._kernels does)
        dl = np.empty(n_docs, np.float64)
        kern.doc_lengths(*_read_only(counts.indptr, counts.counts), dl)
    if keep is None:
        keep = np.ones(n_docs, bool)
        N, total = n_docs, float(dl.sum())
    else:
        N, total = int(keep.sum()), float(dl[keep].sum())
    avgdl = total / N if N and total > 0 else 1.0
    # document frequencies of the kept documents (a term appears once in a row)
    kept_terms = counts.terms if docs is None else \
        counts.terms[np.repeat(keep, np.diff(counts.indptr))]
    df = np.bincount(kept_terms, minlength=n_terms)
    idf = np.log(1.0 + (N - df.astype(np.float64) + 0.5) / (df + 0.5))
    indptr = np.zeros(n_terms + 1, np.int64)
    np.cumsum(df, out=indptr[1:])
    nnz = int(indptr[-1])
    out_docs, out_w = np.empty(nnz, np.int32), np.empty(nnz, np.float32)
    if kern is None:
        # the kernel's operations in its order, elementwise (the same float32 weights: dl
        # sums integers, exact in float64 either way); a stable sort by term keeps the
        # documents ascending within a term, as the kernel's counting sort does
        sel = np.repeat(keep, np.diff(counts.indptr))
        t, r = counts.terms[sel], rows[sel]
        tf = counts.counts[sel].astype(np.float64)
        norm = k1 * (1.0 - b + b * dl[r] / avgdl)
        o = np.argsort(t, kind="stable")
        out_docs[:] = r[o]
        out_w[:] = (idf[t] * tf / (tf + norm))[o].astype(np.float32)
        return LexicalMatrix(indptr, out_docs, out_w, int(n_docs))
    kern.bm25_fill(*_read_only(counts.indptr, counts.terms, counts.counts), keep, idf, dl,
                   float(avgdl), float(k1), float(b), indptr, out_docs, out_w)
    return LexicalMatrix(indptr, out_docs, out_w, int(n_docs))
