"""The kernels' runtime policy, apart from the kernels themselves: loading the numba code on
first use, the thread count and the pool of threads for kernels that release the GIL, the
machine-load rule that runs a call on the calling thread, the device copies of the per-call
GPU door, the output buffers batched propagation reuses, and the warm-up.

Every public kernel (:mod:`evireform.kernels`) gives the same results whichever way this
policy sends it (threads or the calling thread, a fresh or a reused buffer)."""
from __future__ import annotations

import os
import sys
import threading
import time
import weakref
from typing import Any

import numpy as np

from . import config
from .graph import EntityGraph, PassageMap

__all__ = ["machine_busy", "release_buffers", "warm_up", "warm_up_in_background",
           "start_native_thread", "join_warm_up"]


_CPU = None


#: the per-call ``backend="gpu"`` door's device copies, keyed by (object id, kind): held
#: here, never written into the graph or passage map, and dropped with the object
_DEVICE_COPIES: dict[str, Any] = {}
_DEVICE_LOCK = threading.Lock()


def _device(obj, kind: str):
    """The GPU copy of a graph or passage map for the kernels' per-call ``backend="gpu"``,
    uploaded once per object (an engine's :class:`~evireform.kernels._gpu.DeviceIndex`
    holds its own, for the whole index)."""
    from . import _gpu
    key = (id(obj), kind)
    with _DEVICE_LOCK:
        held = _DEVICE_COPIES.get(key)
    if held is None:
        ns = _gpu.gpu_namespace()
        if kind == "lexical":  # a LexicalMatrix: its three arrays
            held = (ns.asarray(obj.indptr), ns.asarray(obj.docs), ns.asarray(obj.weights))
        else:
            held = (_gpu.DeviceGraph.from_graph(ns, obj) if kind == "graph"
                    else _gpu.DevicePassageMap.from_pmap(ns, obj))
        with _DEVICE_LOCK:
            if key not in _DEVICE_COPIES:
                _DEVICE_COPIES[key] = held
                weakref.finalize(obj, _DEVICE_COPIES.pop, key, None)
            held = _DEVICE_COPIES[key]
    return held


def _kernels():
    """The numba kernels, imported on first use (importing the package does not load numba)."""
    global _CPU
    if _CPU is None:
        from . import _cpu
        _CPU = _cpu
    return _CPU


def _n_threads() -> int:
    import numba
    return max(1, int(numba.get_num_threads()))


#: the last load check: (monotonic time, busy, this process's CPU seconds); see machine_busy
_LOAD_SEEN = [-1e18, False, 0.0]
_CPUS: list[Any] = []


def _usable_cpus() -> int:
    if not _CPUS:
        try:
            _CPUS.append(max(1, len(os.sched_getaffinity(0))))
        except (AttributeError, OSError):
            _CPUS.append(max(1, os.cpu_count() or 1))
    return _CPUS[0]


def machine_busy() -> bool:
    """True when other work holds the machine's cores: its 1-minute load average, less the
    cores this process itself kept busy since the last check, exceeds
    ``config.BUSY_LOAD_PER_CPU`` per usable core.  The kernels then run on the calling
    thread whatever the input's size (bitwise the same results).  Read at most once a
    second; False where the OS gives no load average, and always False when the setting is
    None."""
    limit = config.BUSY_LOAD_PER_CPU
    if limit is None:
        return False
    now = time.monotonic()
    last, _, cpu_then = _LOAD_SEEN
    if now - last >= 1.0:
        t = os.times()
        cpu = t.user + t.system  # every thread of this process
        own = 0.0 if last < 0 else max(0.0, (cpu - cpu_then) / (now - last))
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):
            load = 0.0
        _LOAD_SEEN[:] = [now, load - own > float(limit) * _usable_cpus(), cpu]
    return _LOAD_SEEN[1]


def _on_caller(small: bool) -> bool:
    """The one rule for whether a kernel call runs on the calling thread rather than in
    threads: the call is ``small`` (at most its serial crossover in :mod:`config`, or too
    few rows to split), or the machine is busy (:func:`machine_busy`).  The calling thread
    runs the same kernel without threads or the same ranges in turn: the same results."""
    return small or machine_busy()


#: the last batched propagation's output arrays, kept for the next call (see _out_buffers)
_OUT_KEPT: dict[str, Any] = {}
_OUT_LOCK = threading.Lock()


def _out_buffers(n: int):
    """Output arrays of at least ``n`` entries for batched propagation: the kept pair when
    it is large enough and no result of an earlier call still uses it (no view of it is
    alive: its reference count is ours alone), else a fresh pair.  A large output's first
    write costs page faults that can take as long as the propagation itself (about 0.3 s
    for the bench's 31M entries on a 2-core VM); repeated batches reuse pages already
    mapped."""
    with _OUT_LOCK:
        held = _OUT_KEPT.pop("pair", None)
    if held is not None:
        oi, ov = held
        del held
        # references: the local name and getrefcount's argument; any more is a caller's view
        if len(oi) >= n and sys.getrefcount(oi) == 2 and sys.getrefcount(ov) == 2:
            return oi, ov
        del oi, ov
    return np.empty(n, dtype=np.int64), np.empty(n, dtype=np.float64)


def _keep_buffers(out_i, out_v) -> None:
    """Keep this call's output arrays for the next one, when they are at most
    ``config.PROPAGATE_KEEP_BYTES`` together (:func:`release_buffers` lets them go)."""
    if out_i.nbytes + out_v.nbytes <= config.PROPAGATE_KEEP_BYTES:
        with _OUT_LOCK:
            _OUT_KEPT["pair"] = (out_i, out_v)


def release_buffers() -> None:
    """Drop the output arrays batched propagation keeps between calls (the memory is freed
    once no result of an earlier call uses it)."""
    with _OUT_LOCK:
        _OUT_KEPT.clear()


_POOL = None
_POOL_LOCK = threading.Lock()


def _pool():
    """Threads for kernels that release the GIL (as many as numba's thread count)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL._max_workers != _n_threads():
            from concurrent.futures import ThreadPoolExecutor
            _POOL = ThreadPoolExecutor(_n_threads(), thread_name_prefix="evireform-kernel")
        return _POOL


def warm_up(batched: bool = True) -> None:
    """Load every CPU kernel the retrievers call (numba's target initialisation and the
    compiled or cached machine code: about a second in a fresh process, several when nothing
    is cached yet) on tiny inputs of the real dtypes, single and batched (batches above
    ``config.SMALL_BATCH`` run other kernels).  Run it on a thread at process start, beside
    loading the index and the encoder, so a one-shot command does not pay the two one after
    the other; a service runs it before it answers.  ``batched=False`` loads only what one
    question at a time needs."""
    H = np.eye(8, 8, dtype=np.float32)
    g = EntityGraph.from_lists([[0], [0, 1], [1], [], [1], [0], [1, 0], []], n_entities=2)
    pm = PassageMap.from_owner(np.array([0, 0, 1, 1, 2, 2, 3, 3], np.int32), 4)
    for holder in (g, pm):  # a loaded index's arrays are read-only memory maps
        for name in holder.__dataclass_fields__:
            getattr(holder, name).setflags(write=False)
    H.setflags(write=False)
    from . import (
        cosine_topk, cosine_topk_batch, lexical_topk_batch, mentions_outside, propagate,
        propagate_batch, rank_topk_batch, readout_topk, readout_topk_batch, score_parts)
    from .lexical import TermCounts, bm25_weights
    lex = bm25_weights(TermCounts.from_rows([[0, 1], [1], [2]]), 3)  # the lexical search's
    for b in ((1, int(config.SMALL_BATCH) + 1) if batched else (1,)):
        lexical_topk_batch(lex, np.arange(b + 1, dtype=np.int64),
                           np.arange(b, dtype=np.int64) % 3, np.ones(b), 2)
        Q = np.ones((b, 8), np.float32)
        cosine_topk_batch(H, Q, 2)
        ind = np.arange(b + 1, dtype=np.int64)
        zp, zi, zv = propagate_batch(g, ind, np.arange(b, dtype=np.int64) % 8,
                                     np.ones(b, np.float32))
        readout_topk_batch(pm, zp, zi, zv, 2)
        # the retriever's ranking (seeds of float64 values) and its score parts
        s_ids, s_vals = np.arange(b, dtype=np.int64) % 8, np.ones(b)
        P, _ = rank_topk_batch(g, pm, ind, s_ids, s_vals, 0.5, 2)
        rank_topk_batch(g, pm, ind, s_ids, s_vals, 0.5, 2, split=np.ones(b, np.int64))
        score_parts(pm, ind, s_ids, s_vals, np.ones(b, np.int64), 0.5, P)
    cosine_topk(H, np.ones(8, np.float32), 2)
    cosine_topk(H, np.ones(8, np.float32), 2, rows=np.arange(1, 8))  # a filter's search
    if _n_threads() > 1:  # and its threaded kernel, for more rows than one range
        _kernels().topk_rows(H, np.arange(8, dtype=np.int64), np.ones(8, np.float32), 2, 2)
    z_ids, z_vals = propagate(g, np.array([0], np.int64), np.array([1.0], np.float32))
    readout_topk(pm, z_ids, z_vals, 2)
    mentions_outside(g.at_indptr, g.at_indices, pm.owner, np.array([0], np.int64),
                     np.array([1], np.int64), limit=2)  # the graph reformulator's lookahead
    from . import vocab_lookup
    from .lexical import SortedTerms
    vocab_lookup(SortedTerms.from_terms(["b", "a"]), ["a", "c"])  # a query's terms


_WARMING: list[Any] = []
_WARMING_LOCK = threading.Lock()


def warm_up_in_background(batched: bool = True) -> threading.Thread:
    """:func:`warm_up` on a thread of its own (see there), registered so that
    :func:`join_warm_up` can wait for it: a process must not exit while the thread is inside
    numba (the C++ runtime aborts with SIGABRT, "terminate called without an active
    exception"), so every entry point that starts one joins it on every exit path."""
    return start_native_thread(_warm_quietly, (batched,), "evireform-warm-up")


def start_native_thread(target, args: tuple = (), name: str = "evireform-native"
                        ) -> threading.Thread:
    """``target(*args)`` on a daemon thread registered with :func:`join_warm_up`: for work
    inside native code (numba, ONNX Runtime) that a process must not exit under, so every
    entry point that starts one joins it on every exit path."""
    t = threading.Thread(target=target, args=args, daemon=True, name=name)
    with _WARMING_LOCK:
        _WARMING.append(t)
    t.start()
    return t


def _warm_quietly(batched: bool) -> None:
    try:
        warm_up(batched)
    except Exception:  # a warm-up is an optimisation: the first real call reports errors
        pass


def join_warm_up(timeout: float | None = None) -> bool:
    """Wait for every thread :func:`warm_up_in_background` or :func:`start_native_thread`
    started; True when none is left running."""
    with _WARMING_LOCK:
        threads = list(_WARMING)
    for t in threads:
        t.join(timeout)
    with _WARMING_LOCK:
        _WARMING[:] = [t for t in _WARMING if t.is_alive()]
        return not _WARMING
