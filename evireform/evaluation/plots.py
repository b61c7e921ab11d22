"""Figures of an evaluation: ``evireform eval --plot FILE.png`` (extra ``eval``: matplotlib)."""
from __future__ import annotations

from typing import Any, Sequence
from typing import TYPE_CHECKING

from pathlib import Path

import numpy as np

from .metrics import per_question

if TYPE_CHECKING:  # annotations only
    from ..types import StrPath

__all__ = ["recall_curve"]


def pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")  # files only: no display needed
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("plots need matplotlib: pip install 'evireform[eval]'") from exc
    return plt


def recall_curve(report: dict[str, Any], path: StrPath, ks: Sequence[int]=tuple(range(1, 21))) -> Path:
    """Recall@K (K = 1..20) of every method of ``report`` (an
    :class:`~evireform.evaluation.runner.EvalReport`) as one line each, written as a PNG to
    ``path``; the values are the report's own rankings scored by
    :func:`~evireform.evaluation.metrics.per_question` (the table's R@5 and R@10 lie on the
    lines)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    for name, ranked in report.rankings.items():
        rec = per_question(ranked, report.questions, ks=ks)
        ys = [100 * float(np.mean(rec[f"recall@{k}"])) for k in ks]
        ax.plot(list(ks), ys, marker="o", markersize=3, label=name,
                linewidth=2.2 if name == "evireform" else 1.2)
    ax.set_xlabel("K (passages retrieved)")
    ax.set_ylabel("recall@K (%)")
    ax.set_xticks([1, 2, 5, 10, 15, 20])
    ax.grid(alpha=0.3)
    ax.set_title(f"{report.dataset}: {report.n_questions} questions, "
                 f"{report.n_passages:,} passages ({report.embedder})", fontsize=10)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path
