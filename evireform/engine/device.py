"""The device engine: the index resident on a GPU (CuPy; the numpy namespace in CI), its
device copies kept with the engine's structures (:mod:`evireform.engine.structures`)."""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Sequence, TYPE_CHECKING

import numpy as np

from ..filters import CACHE_SIZE, RestrictionCache
from .structures import DEVICE_PRECISIONS, structures_of

if TYPE_CHECKING:  # annotations only
    from numpy.typing import ArrayLike
    from ..index import PropositionIndex

__all__ = ["DeviceEngine", "to_device"]


def to_device(index: PropositionIndex, namespace: str = "cupy", *, half: bool = False,
              budget: int | None = None, precision: str = "float32") -> Any:
    """``index`` resident on the GPU (once per settings: later calls return the same
    object, kept with the index's search structures): a
    :class:`~evireform.kernels._gpu.DeviceIndex` for ``make_engine(index, backend=...)``.

    ``namespace="cupy"`` needs CuPy and a CUDA device (else
    :class:`~evireform.kernels.BackendUnavailable` says what is missing);
    ``namespace="numpy"`` runs the same array code on the CPU (how CI verifies it).
    ``half=True`` stores the embeddings as float16 (scores still accumulate in float32);
    ``precision="fp16"`` keeps the float32 rows and a float16 copy that the search scans
    (tensor-core GEMM), re-ranking candidates exactly in float32: the same top-k as
    ``"float32"``; ``budget`` caps the bytes of one score block (default 1 GiB)."""
    from ..kernels import _gpu  # the device code, only when asked for
    if precision not in DEVICE_PRECISIONS:
        raise ValueError(f"a device index scans at {' or '.join(DEVICE_PRECISIONS)}; got "
                         f"{precision!r}")
    key = (namespace, bool(half), budget, precision)
    cache = structures_of(index).devices
    if key not in cache:
        ns = _gpu.namespace(namespace)
        cache[key] = _gpu.DeviceIndex.from_arrays(
            ns, index.graph, index.pmap, index.embeddings, half=half,
            budget=budget or _gpu.DEFAULT_BUDGET, precision=precision)
    return cache[key]


class DeviceEngine:
    """A :class:`~evireform.kernels._gpu.DeviceIndex` (the index resident on the GPU, or on
    the numpy namespace in CI) as an engine.  Under a restriction the device scans the
    matching rows (gathered on the device for the call) and propagates with the recounted
    degree terms (uploaded once per filter, for the last ``filters.CACHE_SIZE`` filters;
    the incidence itself is shared), masking the passages outside the filter."""

    kind = "gpu"
    takes_restriction = True

    def __init__(self, index: PropositionIndex, device: Any) -> None:
        if int(device.n_props) != index.n_props:
            raise ValueError(f"the device index covers {device.n_props} propositions, the "
                             f"index {index.n_props}")
        self.index: PropositionIndex = index
        self.device: Any = device
        self.restrictions: RestrictionCache = RestrictionCache(index)
        self._graphs: OrderedDict = OrderedDict()
        #: the lexical weights on the device, by level: (host matrix, its arrays there)
        self._lexical: dict[str, Any] = {}
        self._lock = threading.Lock()

    @property
    def n_props(self) -> int:
        return self.index.n_props

    def search_batch(self, Q: ArrayLike, k: int, *, restriction: Any = None
                     ) -> tuple[np.ndarray, np.ndarray]:
        rows = None if restriction is None else restriction.props
        return self.device.search_batch(Q, k, rows=rows)

    def _graph(self, r):
        key = r.filter.key
        with self._lock:
            got = self._graphs.get(key)
            if got is not None and got[0] is r.graph:
                self._graphs.move_to_end(key)
                return got[1]
        dg = self.device.graph.with_degrees(r.graph)
        with self._lock:
            self._graphs[key] = (r.graph, dg)
            while len(self._graphs) > CACHE_SIZE:
                self._graphs.popitem(last=False)
        return dg

    def rank_batch(self, indptr: ArrayLike, ids: Any, vals: ArrayLike, alpha: float, k: int, *, propagation: bool = True,
                   restriction: Any=None):
        r = restriction
        if r is None:
            return self.device.rank_batch(indptr, ids, vals, alpha, k, propagation=propagation)
        P, S = self.device.rank_batch(indptr, ids, vals, alpha, k, propagation=propagation,
                                      graph=self._graph(r) if propagation else None,
                                      passage_mask=r.pmask)
        return r.fill_batch(P, S, k)

    def lexical_batch(self, texts: Sequence[str], k: int, *, level: str = "props",
                      restriction: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """BM25 top-``k`` of ``level`` (``"props"`` or ``"passages"``) for each text, by the
        device's twin of the lexical kernel (:func:`evireform.kernels._gpu.bm25_topk_batch`)
        over the index's weights (uploaded once per weight matrix)."""
        from ..kernels import _gpu
        from .structures import lexical_of
        lex = lexical_of(self.index)
        m = lex.weights(level, restriction)
        ns = self.device.ns
        with self._lock:
            held = self._lexical.get(level)
            if held is None or held[0] is not m:
                held = self._lexical[level] = (m, ns.asarray(m.indptr), ns.asarray(m.docs),
                                               ns.asarray(m.weights))
        indptr, terms, w = lex.query(texts)
        kk = max(1, min(int(k), m.n_docs))
        ids, sc = _gpu.bm25_topk_batch(ns, *held[1:], m.n_docs, ns.asarray(indptr),
                                       ns.asarray(terms), ns.asarray(w), kk)
        return ns.to_host(ids), ns.to_host(sc)

