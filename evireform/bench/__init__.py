"""``evireform bench``: each kernel and the retrieval core next to its peer, in one run.

* :mod:`.harness` - timing (:func:`times`), machine facts, the case registry, the table and
  the floors that ``--check`` enforces (:data:`FLOORS`);
* :mod:`.cases` - the cases, each declaring the labels it produces;
* :mod:`.synthetic` - synthetic graphs, passage maps and clustered embeddings;
* this package - :func:`run` and :func:`check`, above the cases (the harness imports none of
  them).

Every case reports the median wall time of ours and of the peer (after a warm-up call that
keeps JIT compilation out), ``speedup = peer_s / ours_s`` and ``agree``.  ``--quick`` shrinks
the sizes so the whole run takes about a minute (CI runs it so the suite cannot rot).
"""
from __future__ import annotations

from typing import Any

import time
from pathlib import Path

from . import cases, gpu_cases  # noqa: F401  (importing them registers every case)
from .harness import (CASES, FLOORS, TARGETS, Case, case, machine, median_time, table,
                      targets_table, times)

__all__ = ["CASES", "FLOORS", "TARGETS", "Case", "targets_table", "below_floor", "case", "check", "declared_labels",
           "machine", "remeasure_below_floor",
           "median_time", "run", "table", "times"]


def declared_labels() -> set[str]:
    """Every label a registered case may write."""
    return {label for c in CASES.values() for label in c.labels}


#: the GPU cases in order of value, so that a spent time budget skips the least useful
GPU_ORDER = ("gpu_copy", "gpu_cosine", "gpu_cosine_fp16", "gpu_propagate", "gpu_readout",
             "gpu_retrieve")


def run(quick: bool = False, data=None, log: Any=print, only=None, backend: str = "cpu",
        namespace=None, time_budget: float | None = None, on_case=None) -> dict[str, Any]:
    """Run the cases of ``backend`` (all, or the groups named in ``only``) and return the
    report.  ``backend="gpu"`` needs CuPy and a device, unless ``namespace`` is given (the
    tests run the GPU cases on numpy at tiny sizes).  With ``time_budget`` (seconds), cases
    that would start after it are skipped and listed in the report's ``skipped``.  A case
    that raises is recorded in ``failed`` (group and error) and the run goes on;
    ``on_case(report)`` is called after every case with the report so far (the CLI writes
    its JSON there, so a timeout loses nothing already measured)."""
    if backend not in ("cpu", "gpu"):
        raise ValueError(f"backend must be 'cpu' or 'gpu'; got {backend!r}")
    mine = {g: c for g, c in CASES.items() if c.backend == backend}
    if backend == "gpu":
        mine = dict(sorted(mine.items(), key=lambda gc: GPU_ORDER.index(gc[0])
                           if gc[0] in GPU_ORDER else len(GPU_ORDER)))
    unknown = sorted(set(only or ()) - set(mine))
    if unknown:
        raise ValueError(f"unknown {backend} bench case(s) {unknown}; choose from "
                         f"{sorted(mine)}")
    if backend == "gpu":
        from ..kernels import _gpu
        ns = namespace or _gpu.gpu_namespace()
        inp = gpu_cases.GpuInputs(quick, ns, log, tiny=namespace is not None and not ns.on_device)
    else:
        inp = cases.Inputs(quick, Path(data) if data else None, log)
    rows: dict[str, Any] = {}
    skipped: list[Any] = []
    failed: list[Any] = []
    report = {"machine": machine(), "quick": quick, "backend": backend, "cases": rows,
              "skipped": skipped, "failed": failed}
    if backend == "gpu":
        report["machine"]["device"] = _device_name(inp.ns)
    # the kernels at their fixed thread count: a busy machine's switch to the calling
    # thread (kernels.config.BUSY_LOAD_PER_CPU) is off for the run, restored after
    from ..kernels import config as kconfig
    busy_limit, kconfig.BUSY_LOAD_PER_CPU = kconfig.BUSY_LOAD_PER_CPU, None
    try:
        _run_cases(mine, only, inp, report, time_budget, on_case, log)
    finally:
        kconfig.BUSY_LOAD_PER_CPU = busy_limit
    return report


def _run_cases(mine, only, inp: Any, report: dict[str, Any], time_budget, on_case, log: Any) -> None:
    """:func:`run`'s loop over its cases, filling ``report``."""
    rows, skipped, failed = report["cases"], report["skipped"], report["failed"]
    t_run = time.perf_counter()
    for group, c in mine.items():
        if only and group not in only:
            continue
        if time_budget is not None and time.perf_counter() - t_run > time_budget:
            skipped.append(group)
            log(f"  {group} skipped: the time budget of {time_budget:.0f}s is spent")
            continue
        t = time.perf_counter()
        out: dict[str, Any] = {}

        def flush(out: Any=out, c=c) -> None:
            """A case's rows so far into the report and out to ``on_case`` (a GPU case
            calls it after each size, so a timeout keeps every size already measured)."""
            rows.update({k: v for k, v in out.items() if k in c.labels})
            if on_case is not None:
                on_case(report)
        inp.flush = flush
        inp.deadline = None if time_budget is None else t_run + time_budget
        try:
            c.fn(inp, out)
        except Exception as exc:  # one broken case must not lose the others' numbers
            if isinstance(exc, RuntimeError) and "undeclared" in str(exc):
                raise
            failed.append({"group": group, "error": f"{type(exc).__name__}: {exc}"[:2000]})
            log(f"  {group} FAILED: {type(exc).__name__}: {exc}")
        undeclared = sorted(set(out) - set(c.labels))
        if undeclared:
            raise RuntimeError(f"bench case {group!r} produced undeclared label(s) "
                               f"{undeclared}; add them to its @case(...)")
        rows.update(out)
        report["seconds"] = round(time.perf_counter() - t_run, 2)
        log(f"  {group} done in {time.perf_counter() - t:.1f}s")
        if on_case is not None:
            on_case(report)


def _device_name(ns) -> str:
    if not ns.on_device:
        return f"none ({ns.name} namespace on the CPU)"
    try:
        props = ns.xp.cuda.runtime.getDeviceProperties(0)
        name = props["name"]
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception as exc:  # pragma: no cover - depends on the driver
        return f"unknown ({exc})"


def below_floor(report: dict[str, Any], floors: dict[str, Any] | None = None) -> list[str]:
    """The labels of the measured cases whose speedup falls under their floor."""
    floors = FLOORS if floors is None else floors
    return [name for name, floor in floors.items()
            if (c := report["cases"].get(name)) is not None and c["speedup"] is not None
            and c["speedup"] < floor]


def remeasure_below_floor(report: dict[str, Any], rerun, floors: dict[str, Any] | None = None,
                          log: Any=print) -> list[str]:
    """Measure once more the case groups with a speedup under its floor, and keep each such
    case's better measurement; ``report["remeasured"]`` records both speedups.  On a shared
    2-core machine a whole 0.25 s loop can run at half speed (the host leaves a sleeping
    worker's core waiting), so ``--check`` fails a floor only when two measurements are
    under it.  ``rerun(groups)`` returns a report of just those groups (:func:`run`).
    Returns the labels that stayed under their floor."""
    low = below_floor(report, floors)
    if not low:
        return []
    group_of = {label: g for g, c in CASES.items() for label in c.labels}
    groups = sorted({group_of[label] for label in low})
    log(f"  {len(low)} case(s) under their floor: measuring {', '.join(groups)} once more")
    again = rerun(groups)["cases"]
    notes = report.setdefault("remeasured", {})
    for label in low:
        first = report["cases"][label]
        second = again.get(label)
        notes[label] = [first["speedup"], None if second is None else second["speedup"]]
        if second is not None and second["agree"] and second["speedup"] > first["speedup"]:
            report["cases"][label] = second
    return below_floor(report, floors)


def check(report: dict[str, Any], floors: dict[str, Any] | None = None) -> list[str]:
    """Floors that a measured speedup falls under, floors that name no declared case label
    (a renamed label would otherwise switch its guard off), and pairs that disagree.  A floor
    whose declared case did not run (full-size cases in quick mode) is not checked."""
    floors = FLOORS if floors is None else floors
    known = declared_labels()
    bad = [f"{name}: the floor names no declared bench case label"
           for name in floors if name not in known]
    bad += [f"{name}: speedup {report['cases'][name]['speedup']:.2f} < floor {floors[name]}"
            for name in below_floor(report, floors) if name in known]
    for name, c in report["cases"].items():
        if not c["agree"]:
            bad.append(f"{name}: ours and the peer disagree")
    return bad
