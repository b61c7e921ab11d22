"""The search-and-rank engine a retriever runs on, chosen once; it owns every search
structure.

The package, one subject per module:

* :mod:`~evireform.engine.structures` - what a search runs over besides the float32 rows
  (int8 codes, the HNSW graph, device copies), made, carried across updates and saved with
  the index; :func:`~evireform.engine.structures.quantize` and
  :func:`~evireform.engine.structures.build_hnsw` set them up;
* :mod:`~evireform.engine.hnsw` - the HNSW graph builder and its search re-scored exactly,
  query checks and the exact merge of partial top-k lists;
* :mod:`~evireform.engine.cpu` - :class:`CpuEngine` (the numba kernels);
* :mod:`~evireform.engine.device` - :class:`DeviceEngine` and
  :func:`~evireform.engine.device.to_device` (the GPU);
* :mod:`~evireform.engine.shards` - the index's propositions searched in shards;
* :mod:`~evireform.engine.lexical` - the lexical index (term counts of every proposition
  and passage) and its BM25 search, beside the dense structures.

An engine answers two calls, host arrays in and out:

* ``search_batch(Q, k, *, restriction=None) -> (ids, scores)``: the top-``k`` propositions
  of each query row (best first, ties by lower id, padded with -1 / 0);
* ``rank_batch(indptr, ids, vals, alpha, k, *, propagation=True, restriction=None) -> (P, S)``:
  one propagation step of each seed (CSR rows over propositions), unless
  ``propagation=False``, then the top-``k`` passages of each.  An engine with
  ``takes_split = True`` also takes ``split=`` and then returns ``(P, S, FQ, FR)``, the
  score parts of each ranked passage (:func:`rank`).

The CPU and device engines also answer ``lexical_batch(texts, k, *, level="props" |
"passages", restriction=None) -> (ids, scores)``: BM25's top-``k`` propositions or passages
of each text over the index's lexical index (:mod:`~evireform.engine.lexical`);
:func:`lexical` calls it, or the CPU kernel for an engine object of your own.

A retriever or strategy runs a batch of questions in one :class:`Scope`: the engine, the
filter's restriction and the passage count ``k``, checked and clipped there once; every
search, BM25 search and ranking of the batch is a method of the scope.

``restriction`` (a :class:`~evireform.filters.Restriction`, what a filter compiles to) makes
both calls answer as an index of the matching passages alone would: the search sees only the
matching propositions, the propagation uses the entity degrees recounted over them and drops
what lies outside, the readout fills with matching passages.  Every engine here takes it and
runs a filtered question itself, where it runs an unfiltered one: nothing swaps the engine
under a filter.

:class:`CpuEngine` runs the numba kernels and the exact, int8 or HNSW search over the
index's structures, or a sharded searcher (:mod:`evireform.engine.shards`,
:mod:`evireform.distributed`) when given one; :class:`DeviceEngine` runs a
:class:`evireform.kernels._gpu.DeviceIndex` (:func:`to_device`).  :func:`make_engine` is the one place that picks between them;
:class:`~evireform.EviReform`, :class:`~evireform.strategies.BGR` and
:class:`~evireform.strategies.HiQ` take ``engine=`` (or ``backend=``, which goes through
:func:`make_engine`).

``backend="auto"`` picks the GPU when the index holds at least
:data:`evireform.kernels.config.GPU_AUTO_MIN_PROPS` propositions, no sharded searcher is
given, and a CUDA device is usable (CuPy imports and reports a device); otherwise the CPU.
Below that size a question's transfers and launches cost more than the CPU kernels take,
and a small index never pays for importing CuPy.
"""
from __future__ import annotations

import functools
from typing import Any, Protocol, Sequence, TYPE_CHECKING, runtime_checkable

import numpy as np

from .. import kernels as K
from .._checks import positive_int
from ..kernels._backend import BACKENDS, gpu_missing_reason
from .cpu import CpuEngine
from .device import DeviceEngine, to_device
from .structures import (
    CPU_PRECISIONS, DEVICE_PRECISIONS, PRECISION_BACKENDS, PRECISIONS, STORED_PRECISIONS,
    SearchStructures, build_hnsw, lexical_of, quantize, scans_codes, search_index,
    structures_of)

if TYPE_CHECKING:  # annotations only
    from numpy.typing import ArrayLike
    from ..index import PropositionIndex
    from ..types import FilterSpec

__all__ = ["Engine", "CpuEngine", "DeviceEngine", "BACKENDS", "PRECISIONS", "CPU_PRECISIONS",
           "DEVICE_PRECISIONS", "PRECISION_BACKENDS", "STORED_PRECISIONS",
           "make_engine", "gpu_usable", "restrict", "search", "rank", "pack_seeds", "lexical",
           "Scope",
           "lexical_of",
           "SearchStructures", "structures_of", "build_hnsw", "quantize", "scans_codes",
           "search_index",
           "to_device"]


@runtime_checkable
class Engine(Protocol):
    """What a retriever runs on (see the module docstring): host arrays in and out.  An
    engine that answers filtered questions also has ``takes_restriction = True`` and a
    ``restrictions`` cache (:class:`~evireform.filters.RestrictionCache`)."""

    @property
    def n_props(self) -> int: ...

    def search_batch(self, Q: ArrayLike, k: int, *, restriction: Any=None) -> tuple[np.ndarray, np.ndarray]:
        ...

    def rank_batch(self, indptr: ArrayLike, ids: Any, vals: ArrayLike, alpha: float, k: int, *, propagation: bool = True,
                   restriction: Any=None) -> tuple[np.ndarray, np.ndarray]: ...


def search(engine: Engine, Q: ArrayLike, k: int, restriction: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """``engine.search_batch(Q, k)``, with ``restriction=`` only when there is one (an engine
    object of your own need not take it for unfiltered queries)."""
    if restriction is None:
        return engine.search_batch(Q, k)
    return engine.search_batch(Q, k, restriction=restriction)


def rank(engine: Engine, indptr: ArrayLike, ids: Any, vals: ArrayLike, alpha: float, k: int, *,
         propagation: bool = True, restriction: Any = None, split: ArrayLike | None = None
         ) -> tuple[np.ndarray, ...]:
    """``engine.rank_batch(...)``, with ``restriction=`` only when there is one.  ``split``
    (per row, how many of its first seed entries are the question's) goes to an engine with
    ``takes_split = True``, which then returns ``(P, S, FQ, FR)``: each ranked passage's
    score parts, bitwise :func:`evireform.kernels.score_parts` for that split, made in the
    ranking's own pass; any other engine returns ``(P, S)`` and the caller computes them."""
    kw: dict[str, Any] = {}
    if restriction is not None:
        kw["restriction"] = restriction
    if split is not None and getattr(engine, "takes_split", False):
        kw["split"] = split
    return engine.rank_batch(indptr, ids, vals, alpha, k, propagation=propagation, **kw)


def lexical(engine: Engine, index: PropositionIndex, texts: Sequence[str], k: int,
            level: str = "props", restriction: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """BM25 top-``k`` propositions (``level="props"``) or passages (``"passages"``) of each
    text: ``engine.lexical_batch`` where the engine has one (the CPU and device engines),
    else the CPU kernel over ``index``'s lexical index (an engine object of your own)."""
    fn = getattr(engine, "lexical_batch", None)
    if fn is not None:
        if restriction is None:
            return fn(texts, k, level=level)
        return fn(texts, k, level=level, restriction=restriction)
    from .lexical import lexical_search
    return lexical_search(lexical_of(index), texts, k, level, restriction, backend="cpu")


def restrict(engine: Engine, flt: FilterSpec) -> Any:
    """The engine's restriction for filter ``flt`` (from its cache), ``None`` for no
    filter.  An engine that cannot take one (an engine object of your own without
    ``takes_restriction``) is refused by name: a filtered query never falls back to
    another engine."""
    if flt is None:
        return None
    if not getattr(engine, "takes_restriction", False):
        raise ValueError(f"the engine {type(engine).__name__} does not take restriction= "
                         "(search_batch and rank_batch under a filter); filtered queries need "
                         "one that does (CpuEngine, DeviceEngine: make_engine builds them)")
    return engine.restrictions.get(flt)


class Scope:
    """Where one batch of questions searches and ranks: ``engine``, the filter's
    ``restriction`` (None: the whole index) and ``k``, the passages each question gets,
    checked (a positive integer) and clipped to what the scope holds, here only.  Made by
    :meth:`of` once per batch; :meth:`search`, :meth:`lexical` and :meth:`rank` pass the
    restriction and clip their own counts (a search to the index's propositions, a ranking
    to the scope's passages), so no caller clips again.  Iterating gives ``(engine,
    restriction)``, what ``EviReform.scope`` returned before it returned a scope."""

    __slots__ = ("engine", "index", "restriction", "k")

    def __init__(self, engine: Engine, index: PropositionIndex, restriction: Any = None,
                 k: int = 1) -> None:
        self.engine, self.index, self.restriction = engine, index, restriction
        self.k = self.clip(positive_int(k, "k"))

    @classmethod
    def of(cls, engine: Engine, index: PropositionIndex, flt: FilterSpec = None,
           k: int = 1) -> "Scope":
        """The scope of filter ``flt`` (its cached restriction: :func:`restrict`) with
        ``k`` checked and clipped."""
        positive_int(k, "k")  # a bad k is named before the filter is compiled
        return cls(engine, index, restrict(engine, flt), k)

    def __iter__(self):
        return iter((self.engine, self.restriction))

    @property
    def n_passages(self) -> int:
        """The passages this scope can return (the matching ones under a filter)."""
        r = self.restriction
        return self.index.n_passages if r is None else r.n_passages

    @property
    def allowed(self) -> np.ndarray | None:
        """The matching passages' positions (stored order); None: every passage."""
        return None if self.restriction is None else self.restriction.passages

    @property
    def pmask(self) -> np.ndarray | None:
        """Which passages match (a boolean per passage); None: every passage."""
        return None if self.restriction is None else self.restriction.pmask

    @property
    def graph(self) -> Any:
        """The graph a propagation uses here: the index's, or the restriction's (entity
        degrees recounted over the matching propositions)."""
        return self.index.graph if self.restriction is None else self.restriction.graph

    def clip(self, k: int) -> int:
        """``k`` passages as this scope can return them (at least 1)."""
        return max(1, min(int(k), max(self.n_passages, 1)))

    def _props(self, k: int) -> int:
        return max(1, min(int(k), self.index.n_props))

    def search(self, Q: ArrayLike, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The top-``k`` propositions of each row of ``Q`` (:func:`search`; ``k`` clipped to
        the index's propositions, so memory follows the index, not the request), the scores
        as float64."""
        ids, scores = search(self.engine, Q, self._props(k), self.restriction)
        return ids, scores.astype(np.float64)

    def lexical(self, texts: Sequence[str], k: int, level: str = "props"
                ) -> tuple[np.ndarray, np.ndarray]:
        """BM25's top-``k`` propositions or passages of each text (:func:`lexical`)."""
        k = self._props(k) if level == "props" else self.clip(k)
        return lexical(self.engine, self.index, texts, k, level, self.restriction)

    def rank(self, indptr: ArrayLike, ids: Any, vals: ArrayLike, alpha: float,
             k: int | None = None, *, propagation: bool = True,
             split: ArrayLike | None = None) -> tuple[np.ndarray, ...]:
        """Each seed's top passages (:func:`rank`): ``k`` of them (default: the scope's),
        clipped to the scope's passages."""
        return rank(self.engine, indptr, ids, vals, alpha,
                    self.k if k is None else self.clip(k), propagation=propagation,
                    restriction=self.restriction, split=split)


def _numpy_answers(index: PropositionIndex) -> bool:
    """Whether a one-shot question on ``index`` runs on numpy (see :func:`make_engine`)."""
    return (K._numba_free(index.n_props, K.config.ONE_SHOT_NUMPY_PROPS)
            and structures_of(index).hnsw is None)


@functools.lru_cache(maxsize=1)
def gpu_usable() -> bool:
    """True when CuPy imports and reports a CUDA device (checked once per process)."""
    return gpu_missing_reason() is None




def make_engine(index: PropositionIndex, backend: Any="auto", *, precision: str = "auto", searcher: Any=None,
                one_shot: bool = False) -> Engine:
    """The engine for ``index``, the one reader of the backend and precision settings.

    ``backend`` is ``"auto"``, ``"cpu"``, ``"gpu"`` (the index's
    :func:`to_device`, or
    :class:`~evireform.kernels.BackendUnavailable` naming what is missing), or an engine
    object itself (anything with ``search_batch`` and ``rank_batch``), returned as it is
    (a ``DeviceIndex`` is wrapped in a :class:`DeviceEngine`).  ``precision`` is one of
    :data:`PRECISIONS`: ``"int8"`` runs on the CPU and ``"fp16"`` on the GPU (``"auto"``
    backends follow; an explicit other backend is refused, never ignored).  ``searcher``
    (sharded search) runs on the CPU.

    ``one_shot=True`` (a process that answers one question and ends: ``evireform query``):
    an ``"auto"`` backend on an index of at most ``config.ONE_SHOT_NUMPY_PROPS``
    propositions without an HNSW graph, in a process that has not loaded numba, runs the
    device engine's array code on numpy (:func:`to_device` with ``namespace="numpy"``, the
    code CI verifies the GPU's with): the question's few milliseconds of numpy instead of
    numba's start, about a second.  The same rankings; scores may differ from the CPU
    kernels' in the last bits (another summation order)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}; got {precision!r}")
    if not isinstance(backend, str):
        if precision != "auto":
            raise ValueError("precision= sets up the engines make_engine builds; a given "
                             "engine or device index keeps its own")
        from ..kernels._gpu import DeviceIndex
        if isinstance(backend, DeviceIndex):
            return DeviceEngine(index, backend)
        if not (callable(getattr(backend, "search_batch", None))
                and callable(getattr(backend, "rank_batch", None))):
            raise ValueError(f"backend must be 'auto', 'cpu', 'gpu' or an engine (with "
                             f"search_batch and rank_batch); got {backend!r}")
        if getattr(backend, "n_props", index.n_props) != index.n_props:
            raise ValueError(f"the engine covers {backend.n_props} propositions, the index "
                             f"{index.n_props}")
        return backend
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}; got {backend!r}")
    if backend == "auto":
        if one_shot and precision == "auto" and searcher is None and _numpy_answers(index):
            return DeviceEngine(index, to_device(index, "numpy"))
        if precision == "fp16":
            backend = "gpu"
        elif precision != "int8" and searcher is None \
                and index.n_props >= K.config.GPU_AUTO_MIN_PROPS and gpu_usable():
            return DeviceEngine(index, to_device(index))
        else:
            backend = "cpu"
    if backend == "gpu":
        if searcher is not None:
            raise ValueError("a sharded searcher runs on the CPU; use backend='cpu' (or "
                             "'auto') with searcher=")
        if precision == "int8":
            raise ValueError("precision='int8' runs on the CPU (backend='cpu'); the GPU "
                             "scans 'float32' or 'fp16'")
        K.resolve("gpu")  # BackendUnavailable naming what is missing
        return DeviceEngine(index, to_device(index, precision="fp16") if precision == "fp16"
                            else to_device(index))
    if precision == "fp16":
        raise ValueError("precision='fp16' runs on the GPU (backend='gpu'); the CPU scans "
                         "'float32' or 'int8'")
    return CpuEngine(index, searcher, precision=precision)


def pack_seeds(seeds: Sequence[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``[(ids, vals), ...]`` as CSR rows ``(indptr, ids int64, vals float64)``: the one
    packing of per-question seeds for :meth:`rank_batch`."""
    if len(seeds) == 1:  # one question (a terminal query): its arrays as they are
        ids, vals = seeds[0]
        if not (type(ids) is np.ndarray and ids.dtype == np.int64):
            ids = np.asarray(ids).astype(np.int64, copy=False)
        if not (type(vals) is np.ndarray and vals.dtype == np.float64):
            vals = np.asarray(vals).astype(np.float64, copy=False)
        return np.array([0, len(ids)], dtype=np.int64), ids, vals
    indptr = np.zeros(len(seeds) + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(i) for i, _ in seeds])
    if not seeds:
        return indptr, np.zeros(0, np.int64), np.zeros(0, np.float64)
    ids = np.concatenate([np.asarray(i) for i, _ in seeds]).astype(np.int64)
    vals = np.concatenate([np.asarray(v) for _, v in seeds]).astype(np.float64)
    return indptr, ids, vals
