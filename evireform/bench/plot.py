"""The figure of a bench run: ``evireform bench --plot FILE.png`` (extra ``eval``: matplotlib)."""
from __future__ import annotations

from typing import Any, TYPE_CHECKING

from pathlib import Path

if TYPE_CHECKING:  # annotations only
    from ..types import StrPath

__all__ = ["ratio_chart"]


def ratio_chart(report: dict[str, Any], path: StrPath) -> Path:
    """One horizontal bar per case of ``report`` (what :func:`evireform.bench.run` returns):
    the peer's time over ours (log scale; right of 1 is faster than the peer), cases that
    disagree with their peer marked; written as a PNG to ``path``."""
    from ..evaluation.plots import pyplot
    plt = pyplot()
    rows = [(name, c["speedup"], c["agree"]) for name, c in report["cases"].items()
            if c.get("speedup")]
    fig, ax = plt.subplots(figsize=(8, 0.28 * len(rows) + 1.2), dpi=120)
    ys = range(len(rows))[::-1]
    ax.barh(list(ys), [r[1] for r in rows],
            color=["tab:blue" if r[2] else "tab:red" for r in rows])
    ax.set_yticks(list(ys), [r[0] + ("" if r[2] else " (DISAGREES)") for r in rows],
                  fontsize=7)
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("peer time / evireform time (log scale; > 1: evireform faster)")
    cpu = report.get("machine", {}).get("cpu") or report.get("machine", {}).get("processor", "")
    ax.set_title(f"evireform bench{' --quick' if report.get('quick') else ''}: {cpu}",
                 fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path
