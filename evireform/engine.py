"""The search-and-rank engine a retriever runs on, chosen once.

An engine answers two calls, host arrays in and out:

* ``search_batch(Q, k) -> (ids, scores)``: the top-``k`` propositions of each query row
  (best first, ties by lower id, padded with -1 / 0);
* ``rank_batch(indptr, ids, vals, alpha, k, *, propagation=True) -> (P, S)``: one propagation
  step of each seed (CSR rows over propositions), unless ``propagation=False``, then the
  top-``k`` passages of each.

:class:`CpuEngine` runs the numba kernels and the index's exact or HNSW search, or a sharded
searcher (:mod:`evireform.shards`, :mod:`evireform.distributed`) when given one; the GPU
engine is :class:`evireform.kernels._gpu.DeviceIndex` (``index.to_device()``).
:func:`make_engine` is the one place that picks between them; :class:`~evireform.EviReform`,
:class:`~evireform.strategies.BGR` and :class:`~evireform.strategies.HiQ` take ``engine=``
(or ``backend=``, which goes through :func:`make_engine`).

``backend="auto"`` picks the GPU when the index holds at least
:data:`evireform.kernels.config.GPU_AUTO_MIN_PROPS` propositions, no sharded searcher is
given, and a CUDA device is usable (CuPy imports and reports a device); otherwise the CPU.
Below that size a question's transfers and launches cost more than the CPU kernels take,
and a small index never pays for importing CuPy.
"""
from __future__ import annotations

import functools

import numpy as np

from . import kernels as K

__all__ = ["CpuEngine", "make_engine", "gpu_usable"]


class CpuEngine:
    """The numba kernels over an index, searching with ``searcher`` (a sharded searcher) or
    the index's own exact / HNSW search."""

    kind = "cpu"

    def __init__(self, index, searcher=None):
        if searcher is not None:
            if not callable(getattr(searcher, "search_batch", None)):
                raise TypeError(f"searcher {type(searcher).__name__} has no search_batch()")
            if getattr(searcher, "n_props", index.n_props) != index.n_props:
                raise ValueError(f"the searcher covers {searcher.n_props} propositions, the "
                                 f"index {index.n_props}")
        self.index, self.searcher = index, searcher

    @property
    def n_props(self) -> int:
        return self.index.n_props

    def search_batch(self, Q, k: int):
        if self.searcher is not None:
            return self.searcher.search_batch(Q, k)
        return self.index.search_batch(Q, k)

    def rank_batch(self, indptr, ids, vals, alpha: float, k: int, *, propagation: bool = True):
        idx = self.index
        if propagation:
            indptr, ids, vals = K.propagate_batch(idx.graph, indptr, ids, vals, alpha,
                                                  backend="cpu")
        return K.readout_topk_batch(idx.pmap, indptr, ids, vals, k, backend="cpu")


@functools.lru_cache(maxsize=1)
def gpu_usable() -> bool:
    """True when CuPy imports and reports a CUDA device (checked once per process)."""
    from .kernels._backend import gpu_missing_reason
    return gpu_missing_reason() is None


def make_engine(index, backend="auto", *, searcher=None):
    """The engine for ``index``: ``backend`` is ``"auto"``, ``"cpu"``, ``"gpu"`` (the
    index's :meth:`~evireform.index.PropositionIndex.to_device`, or
    :class:`~evireform.kernels.BackendUnavailable` naming what is missing), or an engine
    object itself (anything with ``search_batch`` and ``rank_batch``, e.g. a
    ``DeviceIndex``), returned as it is.  ``searcher`` (sharded search) runs on the CPU."""
    if not isinstance(backend, str):
        if not (callable(getattr(backend, "search_batch", None))
                and callable(getattr(backend, "rank_batch", None))):
            raise ValueError(f"backend must be 'auto', 'cpu', 'gpu' or an engine (with "
                             f"search_batch and rank_batch); got {backend!r}")
        if getattr(backend, "n_props", index.n_props) != index.n_props:
            raise ValueError(f"the engine covers {backend.n_props} propositions, the index "
                             f"{index.n_props}")
        return backend
    if backend not in K.BACKENDS:
        raise ValueError(f"backend must be one of {K.BACKENDS}; got {backend!r}")
    if backend == "gpu":
        if searcher is not None:
            raise ValueError("a sharded searcher runs on the CPU; use backend='cpu' (or "
                             "'auto') with searcher=")
        K.resolve("gpu")  # BackendUnavailable naming what is missing
        return index.to_device()
    if backend == "auto" and searcher is None \
            and index.n_props >= K.config.GPU_AUTO_MIN_PROPS and gpu_usable():
        return index.to_device()
    return CpuEngine(index, searcher)


def pack_seeds(seeds) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``[(ids, vals), ...]`` as CSR rows ``(indptr, ids int64, vals float64)``: the one
    packing of per-question seeds for :meth:`rank_batch`."""
    indptr = np.zeros(len(seeds) + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(i) for i, _ in seeds])
    if not seeds:
        return indptr, np.zeros(0, np.int64), np.zeros(0, np.float64)
    ids = np.concatenate([np.asarray(i) for i, _ in seeds]).astype(np.int64)
    vals = np.concatenate([np.asarray(v) for _, v in seeds]).astype(np.float64)
    return indptr, ids, vals
