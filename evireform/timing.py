"""Where a retrieval's time goes: per-stage wall time in milliseconds, recorded in every
trace (``trace.timings_ms``; ``query --json``, ``/query``) and, in the service, observed
into a Prometheus histogram per stage.

A :class:`Stopwatch` splits its run into contiguous stages, so the stages add up to the
whole run: :meth:`Stopwatch.lap` charges the time since the previous lap to a stage, and
:func:`stage` (a context manager that does nothing unless a stopwatch is running in this
thread or task) charges its block to a stage and the time before it to the enclosing one.

Stages (each method records those it runs):

==================  ================================================================
``encode_question`` the question's embedding (EviReform)
``search``          proposition searches (the question's candidates, residual queries)
``select``          the selector (Eq. 7): which candidates seed the question
``reformulate``     the reformulator: residual queries from the observed passages
                    (EviReform), the forward step's queries (BGR)
``encode_residual`` the residual queries' embeddings (EviReform)
``encode``          the strategies' query embeddings (BGR, Hi-Q)
``rank``            seeds mixed, propagated and read out per passage (the kernels)
``readout``         the ranked passages assembled: score parts, texts, metadata
``assess``          the controller's verdict between rounds (rounds > 1)
``read``            Hi-Q's reader (resolving a node), ``split`` its splitter,
                    ``rewrite`` its rewriter
``hops``            BGR's and Hi-Q's own logic between those (chains, fusion, tree)
==================  ================================================================

A batch (``retrieve_many``, the service's micro-batches) runs each stage once for all its
questions: every result of a batch carries the batch's timings.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

_ACTIVE: ContextVar["Stopwatch | None"] = ContextVar("evireform_stopwatch", default=None)


class Stopwatch:
    """Contiguous per-stage wall time of one run, in milliseconds (``ms``)."""

    __slots__ = ("ms", "_t", "_stack", "_token")

    def __init__(self, base: str = "hops") -> None:
        self.ms: dict[str, float] = {}
        self._t = time.perf_counter()
        self._stack = [base]
        self._token = None

    def lap(self, stage: str) -> None:
        """Charge the time since the previous lap (or the start) to ``stage``."""
        now = time.perf_counter()
        self.ms[stage] = self.ms.get(stage, 0.0) + (now - self._t) * 1e3
        self._t = now

    def __enter__(self) -> "Stopwatch":
        self._token = _ACTIVE.set(self)
        return self

    def __exit__(self, *exc) -> None:
        self.lap(self._stack[-1])
        _ACTIVE.reset(self._token)

    def rounded(self) -> dict[str, float]:
        """The stages in microseconds' precision, in the order they first ran (a whole
        number of microseconds over 1000, cheaper than ``round(v, 3)``'s decimal rounding)."""
        return {k: round(v * 1e3) / 1e3 for k, v in self.ms.items()}


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Charge this block to ``name`` (and the time before it to the enclosing stage) on the
    running :class:`Stopwatch`; nothing without one."""
    sw = _ACTIVE.get()
    if sw is None:
        yield
        return
    sw.lap(sw._stack[-1])
    sw._stack.append(name)
    try:
        yield
    finally:
        sw.lap(name)
        sw._stack.pop()


def time_calls(obj: object, method: str = "encode") -> list[float]:
    """Seconds spent in ``obj.method`` from now on, summed into the returned list's one
    element (a build's encoding share: ``evireform index``, the bench's build cases).  An
    object without the method, or one that takes no attributes, is not timed (stays 0)."""
    spent = [0.0]
    inner = getattr(obj, method, None)
    if inner is None:
        return spent

    def timed(*a, **k):
        t = time.perf_counter()
        try:
            return inner(*a, **k)
        finally:
            spent[0] += time.perf_counter() - t
    try:
        setattr(obj, method, timed)
    except (AttributeError, TypeError):
        pass
    return spent


def since_process_start() -> float | None:
    """Seconds since this process started (Linux: ``/proc``; None elsewhere): what a user of
    a one-shot command waits for, interpreter start and imports included."""
    try:
        import os
        with open("/proc/self/stat", "rb") as fh:
            stat = fh.read()
        with open("/proc/uptime", "rb") as fh:
            uptime = float(fh.read().split()[0])
        ticks = int(stat[stat.rindex(b")") + 2:].split()[19])  # field 22: starttime
        return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None
