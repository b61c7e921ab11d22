"""The structures the kernels read: the proposition-entity graph and the passage map.

Both are built once at index time.  They hold flat arrays only (CSR style), so they can be
memory-mapped from disk and shared by threads without copying.
"""
from __future__ import annotations

from typing import Any, Iterable
from typing import TYPE_CHECKING

from dataclasses import dataclass, field, fields
from functools import cached_property

import numpy as np

from . import config

if TYPE_CHECKING:  # annotations only
    from numpy.typing import ArrayLike


def _array(dtype: str, *shape: str):
    """A dataclass field holding an array of ``dtype`` whose shape is given in count symbols
    (M propositions, E entities, N passages, nnz incidences, dim)."""
    return field(metadata={"dtype": np.dtype(dtype), "shape": shape})


def array_fields(cls) -> tuple[Any, ...]:
    """``(name, dtype, shape symbols)`` for every array field of a graph dataclass."""
    return tuple((f.name, f.metadata["dtype"], f.metadata["shape"]) for f in fields(cls))


def rows_sorted_unique(indptr: np.ndarray, indices: np.ndarray) -> bool:
    """True when every CSR row lists strictly increasing column ids."""
    if len(indices) < 2:
        return True
    ok = np.diff(indices) > 0
    starts = indptr[1:-1]
    starts = starts[(starts > 0) & (starts < len(indices))]
    ok[starts - 1] = True  # a step across a row boundary may go down
    return bool(ok.all())


def _csr_transpose(indptr: np.ndarray, indices: np.ndarray, n_cols: int):
    """Transpose of a binary CSR pattern; rows of the result list ascending row ids."""
    n_rows = len(indptr) - 1
    rows = np.repeat(np.arange(n_rows, dtype=np.int32), np.diff(indptr))
    order = np.argsort(indices, kind="stable")
    t_indices = rows[order].astype(np.int32)
    counts = np.bincount(indices, minlength=n_cols)
    t_indptr = np.zeros(n_cols + 1, dtype=np.int64)
    np.cumsum(counts, out=t_indptr[1:])
    return t_indptr, t_indices


@dataclass(frozen=True)
class EntityGraph:
    """Binary proposition-entity incidence A (CSR and its transpose) plus the degree terms.

    ``inv_deg[e] = 1/d_e`` (0 for entities of degree 0), ``diag[i] = sum_{e in i} 1/d_e`` (the
    diagonal of A De+ A^T that W drops), and ``inv_w[i] = 1/w_i`` with
    ``w_i = sum_{e in i} (1 - 1/d_e)`` the row sum of W (0 when w_i is 0).  W itself is never built.
    """

    #: each field's metadata gives its dtype and shape (in the counts M propositions,
    #: E entities, nnz incidences); the on-disk format (:mod:`evireform.store`) reads them
    a_indptr: np.ndarray = _array("int64", "M+1")
    #: entity ids, ascending and unique per row
    a_indices: np.ndarray = _array("int32", "nnz")
    at_indptr: np.ndarray = _array("int64", "E+1")
    #: proposition ids, ascending per row
    at_indices: np.ndarray = _array("int32", "nnz")
    inv_deg: np.ndarray = _array("float64", "E")
    diag: np.ndarray = _array("float64", "M")
    inv_w: np.ndarray = _array("float64", "M")

    @property
    def n_props(self) -> int:
        return len(self.a_indptr) - 1

    @cached_property
    def kernel_args(self) -> tuple[Any, ...]:
        """The graph's arrays in the order the propagation kernels take them (field order)."""
        return tuple(getattr(self, name) for name, _, _ in array_fields(EntityGraph))

    @property
    def n_entities(self) -> int:
        return len(self.at_indptr) - 1

    @property
    def nnz(self) -> int:
        return int(self.a_indptr[-1])

    @classmethod
    def from_lists(cls, entity_lists: Iterable[Iterable[int]], n_entities: int | None = None
                   ) -> "EntityGraph":
        """Build from one iterable of entity ids per proposition (duplicates are merged)."""
        rows = [np.unique(np.asarray(list(e), dtype=np.int64)) for e in entity_lists]
        indptr = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum([len(r) for r in rows], out=indptr[1:])
        indices = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
        if n_entities is None:
            n_entities = int(indices.max()) + 1 if len(indices) else 0
        return cls.from_csr(indptr, indices, n_entities)

    @classmethod
    def from_csr(cls, indptr: ArrayLike, indices: ArrayLike, n_entities: int) -> "EntityGraph":
        """Build from a CSR pattern (rows = propositions).  Duplicates within a row are merged."""
        indptr = np.ascontiguousarray(indptr, dtype=np.int64)
        indices = np.ascontiguousarray(indices, dtype=np.int64)
        if indptr.ndim != 1 or len(indptr) < 1 or indptr[0] != 0 or np.any(np.diff(indptr) < 0) \
                or indptr[-1] != len(indices):
            raise ValueError("indptr must start at 0, be non-decreasing and end at len(indices)")
        if len(indices) and (indices.min() < 0 or indices.max() >= n_entities):
            raise ValueError(f"entity ids must lie in [0, {n_entities}); got "
                             f"[{indices.min()}, {indices.max()}]")
        M = len(indptr) - 1
        if rows_sorted_unique(indptr, indices):
            indices = indices.astype(np.int32)
        else:  # sort and deduplicate within each row: one in-place sort, then a diff
            rows = np.repeat(np.arange(M, dtype=np.int64), np.diff(indptr))
            key = rows * max(n_entities, 1) + indices
            del rows
            key.sort()
            if len(key) > 1:
                key = key[np.concatenate(([True], key[1:] != key[:-1]))]
            rows = key // max(n_entities, 1)
            indices = (key % max(n_entities, 1)).astype(np.int32)
            indptr = np.zeros(M + 1, dtype=np.int64)
            np.cumsum(np.bincount(rows, minlength=M), out=indptr[1:])
        at_indptr, at_indices = _csr_transpose(indptr, indices, n_entities)
        deg = np.diff(at_indptr).astype(np.float64)
        inv_deg = np.zeros(n_entities, dtype=np.float64)
        inv_deg[deg > 0] = 1.0 / deg[deg > 0]
        rows32 = np.repeat(np.arange(M), np.diff(indptr))
        diag = np.bincount(rows32, weights=inv_deg[indices], minlength=M).astype(np.float64)
        w = np.bincount(rows32, weights=1.0 - inv_deg[indices], minlength=M)
        inv_w = np.zeros(M, dtype=np.float64)
        ok = w > config.DEGREE_EPS
        inv_w[ok] = 1.0 / w[ok]
        return cls(indptr, indices, at_indptr, at_indices, inv_deg, diag, inv_w)


def _row_positions(indptr: ArrayLike, rows: Any):
    """Positions in the CSR arrays of every entry of ``rows``, row after row."""
    counts = indptr[rows + 1] - indptr[rows]
    starts = np.repeat(indptr[rows] - np.cumsum(np.r_[0, counts[:-1]]), counts)
    return starts + np.arange(int(counts.sum()))


def _row_terms(indptr: ArrayLike, indices: ArrayLike, inv_deg, props):
    """diag and w for the rows ``props`` (ascending), summed in the order :meth:`from_csr`
    sums them (row entries in stored order), so the results are bitwise the same."""
    counts = indptr[props + 1] - indptr[props]
    pos = _row_positions(indptr, props)
    rows = np.repeat(np.arange(len(props)), counts)
    ents = indices[pos]
    diag = np.bincount(rows, weights=inv_deg[ents], minlength=len(props)).astype(np.float64)
    w = np.bincount(rows, weights=1.0 - inv_deg[ents], minlength=len(props))
    inv_w = np.zeros(len(props), dtype=np.float64)
    ok = w > config.DEGREE_EPS
    inv_w[ok] = 1.0 / w[ok]
    return diag, inv_w


def append_rows(g: "EntityGraph", rows: Any, n_entities: int) -> "EntityGraph":
    """``g`` with propositions appended (``rows``: one array of entity ids per new
    proposition; ids >= g.n_entities are new entities, up to ``n_entities``).  Only what the
    new rows touch is recomputed: the degree terms of their entities, and diag and 1/w of the
    propositions that mention those entities; the rest is copied.  Equal, bitwise, to
    :meth:`EntityGraph.from_csr` of the combined incidence."""
    M, E = g.n_props, g.n_entities
    rows = [np.unique(np.asarray(r, dtype=np.int64)) for r in rows]
    m = len(rows)
    new_ptr = np.zeros(m + 1, dtype=np.int64)
    np.cumsum([len(r) for r in rows], out=new_ptr[1:])
    new_idx = np.concatenate(rows) if m else np.zeros(0, np.int64)
    if len(new_idx) and (new_idx.min() < 0 or new_idx.max() >= n_entities):
        raise ValueError(f"entity ids must lie in [0, {n_entities})")
    a_indptr = np.concatenate([g.a_indptr, g.a_indptr[-1] + new_ptr[1:]])
    a_indices = np.concatenate([g.a_indices, new_idx.astype(np.int32)])
    # transpose: every entity row keeps its old entries and gets the new propositions at
    # its end (their ids exceed every old one, so rows stay ascending)
    old_deg = np.zeros(n_entities, dtype=np.int64)
    old_deg[:E] = np.diff(g.at_indptr)
    add = np.bincount(new_idx, minlength=n_entities).astype(np.int64)
    deg = old_deg + add
    at_indptr = np.zeros(n_entities + 1, dtype=np.int64)
    np.cumsum(deg, out=at_indptr[1:])
    at_indices = np.empty(int(at_indptr[-1]), dtype=np.int32)
    shift = np.repeat(at_indptr[:-1] - np.r_[0, np.cumsum(old_deg)[:-1]], old_deg)
    at_indices[np.arange(len(g.at_indices)) + shift] = g.at_indices
    props_of_new = np.repeat(np.arange(M, M + m, dtype=np.int64), np.diff(new_ptr))
    order = np.argsort(new_idx, kind="stable")
    e_sorted = new_idx[order]
    first = np.searchsorted(e_sorted, e_sorted, side="left")
    slot = at_indptr[e_sorted] + old_deg[e_sorted] + (np.arange(len(e_sorted)) - first)
    at_indices[slot] = props_of_new[order]
    # degree terms: only the touched entities change ...
    touched = np.flatnonzero(add)
    inv_deg = np.zeros(n_entities, dtype=np.float64)
    inv_deg[:E] = g.inv_deg
    inv_deg[touched] = 1.0 / deg[touched]
    # ... and diag / 1/w only for the propositions that mention them (and the new ones)
    diag = np.concatenate([g.diag, np.zeros(m)])
    inv_w = np.concatenate([g.inv_w, np.zeros(m)])
    hit = np.zeros(M + m, dtype=bool)
    hit[M:] = True
    hit[at_indices[_row_positions(at_indptr, touched)]] = True
    props = np.flatnonzero(hit)
    if len(props):
        diag[props], inv_w[props] = _row_terms(a_indptr, a_indices, inv_deg, props)
    return EntityGraph(a_indptr, a_indices, at_indptr, at_indices, inv_deg, diag, inv_w)


def remove_rows(g: "EntityGraph", keep) -> tuple["EntityGraph", np.ndarray]:
    """``g`` without the propositions where ``keep`` is False; entities left without any
    proposition are dropped (the others keep their order).  Only what the removed rows
    touched is recomputed (the degree terms of their entities, diag and 1/w of the remaining
    propositions that mention them); the rest is copied and renumbered.  Returns the graph
    and the kept entities' old ids.  Equal, bitwise, to :meth:`EntityGraph.from_csr` of the
    remaining incidence."""
    keep = np.asarray(keep, dtype=bool)
    E = g.n_entities
    counts = np.diff(g.a_indptr)
    gone = np.flatnonzero(~keep)
    touched_old = np.unique(g.a_indices[_row_positions(g.a_indptr, gone)])
    deg_old = np.diff(g.at_indptr)
    ent_of = np.repeat(np.arange(E, dtype=np.int64), deg_old)
    entry_keep = keep[g.at_indices]
    deg = np.bincount(ent_of[entry_keep], minlength=E)
    ent_keep = deg > 0
    ent_ids = np.flatnonzero(ent_keep)
    ent_remap = np.cumsum(ent_keep) - 1
    prop_remap = np.cumsum(keep) - 1
    rows_keep = np.repeat(keep, counts)
    a_indptr = np.zeros(int(keep.sum()) + 1, dtype=np.int64)
    np.cumsum(counts[keep], out=a_indptr[1:])
    a_indices = ent_remap[g.a_indices[rows_keep]].astype(np.int32)
    at_indptr = np.zeros(len(ent_ids) + 1, dtype=np.int64)
    np.cumsum(deg[ent_keep], out=at_indptr[1:])
    at_indices = prop_remap[g.at_indices[entry_keep]].astype(np.int32)
    inv_deg = g.inv_deg[ent_keep].copy()
    touched = ent_remap[touched_old[ent_keep[touched_old]]]
    inv_deg[touched] = 1.0 / deg[ent_ids[touched]]
    diag, inv_w = g.diag[keep].copy(), g.inv_w[keep].copy()
    hit = np.zeros(len(diag), dtype=bool)
    hit[at_indices[_row_positions(at_indptr, touched)]] = True
    props = np.flatnonzero(hit)
    if len(props):
        diag[props], inv_w[props] = _row_terms(a_indptr, a_indices, inv_deg, props)
    return EntityGraph(a_indptr, a_indices, at_indptr, at_indices, inv_deg, diag, inv_w), ent_ids


@dataclass(frozen=True)
class PassageMap:
    """Proposition-to-passage ownership and the readout factor 1/sqrt(|P_j|) (0 when |P_j| = 0)."""

    owner: np.ndarray = _array("int32", "M")
    inv_sqrt: np.ndarray = _array("float64", "N")

    @property
    def n_passages(self) -> int:
        return len(self.inv_sqrt)

    @property
    def n_props(self) -> int:
        return len(self.owner)

    @classmethod
    def from_owner(cls, owner: ArrayLike, n_passages: int) -> "PassageMap":
        owner = np.ascontiguousarray(owner, dtype=np.int32)
        if len(owner) and (owner.min() < 0 or owner.max() >= n_passages):
            raise ValueError(f"owner passage ids must lie in [0, {n_passages})")
        sizes = np.bincount(owner, minlength=n_passages).astype(np.float64)
        inv_sqrt = np.zeros(n_passages, dtype=np.float64)
        inv_sqrt[sizes > 0] = 1.0 / np.sqrt(sizes[sizes > 0])
        return cls(owner, inv_sqrt)
