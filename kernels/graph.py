"""The structures the kernels read: the proposition-entity graph and the passage map.

Both are built once at index time.  They hold flat arrays only (CSR style), so they can be
memory-mapped from disk and shared by threads without copying.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from . import config


def _array(dtype: str, *shape: str):
    """A dataclass field holding an array of ``dtype`` whose shape is given in count symbols
    (M propositions, E entities, N passages, nnz incidences, dim)."""
    return field(metadata={"dtype": np.dtype(dtype), "shape": shape})


def array_fields(cls) -> tuple:
    """``(name, dtype, shape symbols)`` for every array field of a graph dataclass."""
    from dataclasses import fields
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
    def kernel_args(self) -> tuple:
        """The graph's arrays in the order the propagation kernels take them (field order)."""
        return tuple(getattr(self, name) for name, _, _ in array_fields(EntityGraph))

    @property
    def n_entities(self) -> int:
        return len(self.at_indptr) - 1

    @property
    def nnz(self) -> int:
        return int(self.a_indptr[-1])

    @classmethod
    def from_lists(cls, entity_lists, n_entities: int | None = None) -> "EntityGraph":
        """Build from one iterable of entity ids per proposition (duplicates are merged)."""
        rows = [np.unique(np.asarray(list(e), dtype=np.int64)) for e in entity_lists]
        indptr = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum([len(r) for r in rows], out=indptr[1:])
        indices = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
        if n_entities is None:
            n_entities = int(indices.max()) + 1 if len(indices) else 0
        return cls.from_csr(indptr, indices, n_entities)

    @classmethod
    def from_csr(cls, indptr, indices, n_entities: int) -> "EntityGraph":
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
        else:  # sort and deduplicate within each row
            rows = np.repeat(np.arange(M, dtype=np.int64), np.diff(indptr))
            key = np.unique(rows * max(n_entities, 1) + indices)
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
    def from_owner(cls, owner, n_passages: int) -> "PassageMap":
        owner = np.ascontiguousarray(owner, dtype=np.int32)
        if len(owner) and (owner.min() < 0 or owner.max() >= n_passages):
            raise ValueError(f"owner passage ids must lie in [0, {n_passages})")
        sizes = np.bincount(owner, minlength=n_passages).astype(np.float64)
        inv_sqrt = np.zeros(n_passages, dtype=np.float64)
        inv_sqrt[sizes > 0] = 1.0 / np.sqrt(sizes[sizes > 0])
        return cls(owner, inv_sqrt)
