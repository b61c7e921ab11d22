"""The paper's analyses (section 6, Appendix A.2-A.4, A.6, A.7) as functions and tables.

* :func:`pool_coverage` - gold coverage of the initial pool (the first 20 distinct passages
  among the question's top-100 propositions) and of the pool after residual retrieval (plus
  the passages of the residual queries' hits);
* :func:`by_type` - metrics per question type (MuSiQue hop count, HotpotQA bridge/comparison);
* :func:`sensitivity` - R@5 and Chain@5 over the paper's grids for alpha, beta, k_residual and
  max_residual (L);
* :func:`~evireform.evaluation.growth.index_growth` - the same questions while distractor
  passages are added in steps.

:data:`ANALYSES` names the single-run analyses with the methods each needs, so the CLI runs
exactly those methods and formats the table.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence, TYPE_CHECKING

from .data import Question
from .metrics import KS, metrics, per_question

if TYPE_CHECKING:  # annotations only
    from numpy.typing import ArrayLike

POOL_SIZE = 20
GRIDS = {
    "alpha": (0.25, 0.5, 0.75),
    "beta": (0.25, 0.5, 0.75),
    "k_residual": (1, 2, 3, 4),
    "max_residual": (1, 2, 3),
}


def initial_pool(owner: ArrayLike, candidates: Sequence[tuple[int, float]], size: int = POOL_SIZE) -> list[int]:
    """The first ``size`` distinct passages among the candidate propositions, in order."""
    pool: list[int] = []
    for i, _ in candidates:
        j = int(owner[i])
        if j not in pool:
            pool.append(j)
            if len(pool) >= size:
                break
    return pool


def pool_coverage(owner: ArrayLike, questions: Sequence[Question], traces, size: int = POOL_SIZE) -> dict[str, Any]:
    """Coverage before and after residual retrieval, in percent, and the transitions.

    ``passages`` = share of all gold evidence (pooled over questions; a chunked document
    is one piece, :attr:`Question.evidence`, as in the metrics) inside the pool;
    ``chains`` = share of questions whose whole gold evidence is inside the pool;
    ``completed`` = questions incomplete before and complete after.
    """
    g_tot = g_before = g_after = c_before = c_after = completed = 0
    for q, t in zip(questions, traces):
        before = set(initial_pool(owner, t.candidates, size))
        after = before | {int(owner[i]) for hits in t.residual_hits for i, _ in hits}
        n_before, n_after, n = q.found(before), q.found(after), len(q.evidence)
        g_tot += n
        g_before += n_before
        g_after += n_after
        cb, ca = n_before == n, n_after == n
        c_before += cb
        c_after += ca
        completed += (not cb) and ca
    n = max(1, len(questions))
    return {"passages_before": round(100 * g_before / max(1, g_tot), 2),
            "passages_after": round(100 * g_after / max(1, g_tot), 2),
            "chains_before": round(100 * c_before / n, 2),
            "chains_after": round(100 * c_after / n, 2),
            "completed": int(completed), "n_questions": len(questions)}


def by_type(rankings: dict[str, Any], questions: Sequence[Question], ks: Sequence[int]=KS) -> dict[str, Any]:
    """{type: {"n": count, "methods": {method: metrics}}} over the questions' types."""
    out = {}
    for typ in sorted({q.type for q in questions}):
        sel = [i for i, q in enumerate(questions) if q.type == typ]
        qs = [questions[i] for i in sel]
        out[typ] = {"n": len(sel), "methods": {
            m: metrics([r[i] for i in sel], qs, ks) for m, r in rankings.items()}}
    return out


def sensitivity(run_config, grids: dict[str, Any] = GRIDS) -> dict[str, Any]:
    """``run_config(**override) -> metrics``; returns {param: {value: metrics}}."""
    return {p: {v: run_config(**{p: v}) for v in values} for p, values in grids.items()}


def growth_steps(n_distractors: int, n_steps: int = 4) -> list[int]:
    """0, then evenly spaced counts up to every distractor."""
    return sorted({int(round(n_distractors * s / (n_steps - 1))) for s in range(n_steps)})


# --------------------------------------------------------------------------- command runners
CONTRASTS = [("evireform", "prop_only", "reformulation | propagation on"),
             ("reform_only", "base", "reformulation | propagation off"),
             ("evireform", "reform_only", "propagation | reformulation on"),
             ("prop_only", "base", "propagation | reformulation off"),
             ("evireform", "repeat_question", "residual queries vs repeated question"),
             ("evireform", "residual_only", "question seed kept vs residual only")]


ABLATION_METHODS = ("evireform", "reform_only", "prop_only", "base", "repeat_question",
                    "residual_only")


def _fmt_row(name, vals: ArrayLike, cols):
    return f"| {name} | " + " | ".join(f"{vals[c]:.2f}" for c in cols) + " |"


def run_ablation(report: dict[str, Any]) -> str:
    """The 2x2 cells and controls with paired contrasts (bootstrap CIs), as Markdown."""
    from .stats import BASE_SEED, paired_bootstrap, seed_offset
    rk, qs = report.rankings, report.questions
    cols = ["recall@5", "chain@5", "recall@10"]
    lines = ["| method | R@5 | C@5 | R@10 |", "|---|---:|---:|---:|"]
    for m in ABLATION_METHODS:
        lines.append(_fmt_row(m, report.methods[m], cols))
    lines += ["", "| contrast | R@5 diff [95% CI] | C@5 diff [95% CI] |", "|---|---|---|"]
    per = {m: per_question(rk[m], qs) for m in rk}
    for a, b, what in CONTRASTS:
        cells = []
        for metric in ("recall@5", "chain@5"):
            r = paired_bootstrap(per[a][metric], per[b][metric],
                                 seed=BASE_SEED + seed_offset(report.dataset, f"{a}-{b}-{metric}"))
            cells.append(f"{r['diff']:+.2f} [{r['ci'][0]:+.2f}, {r['ci'][1]:+.2f}]")
        lines.append(f"| {a} - {b} ({what}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def coverage_table(report: dict[str, Any], owner: ArrayLike) -> str:
    traces = report.traces["evireform"]
    cov = pool_coverage(owner, report.questions, [r.trace for r in traces])
    return ("| pool | gold passages covered | complete chains |\n|---|---:|---:|\n"
            f"| initial (first {POOL_SIZE} passages of the top-100 propositions) | "
            f"{cov['passages_before']:.2f} | {cov['chains_before']:.2f} |\n"
            f"| after residual retrieval | {cov['passages_after']:.2f} | "
            f"{cov['chains_after']:.2f} |\n\n"
            f"Questions whose chain became complete: {cov['completed']} of {cov['n_questions']}.")


TYPE_METHODS = ("dense", "hipporag_ppr", "evireform")


def types_table(report: dict[str, Any], methods=TYPE_METHODS) -> str:
    bt = by_type({m: report.rankings[m] for m in methods if m in report.rankings},
                 report.questions)
    lines = ["| type | n | " + " | ".join(f"{m} R@5 / C@5" for m in methods) + " |",
             "|---|---:|" + "---:|" * len(methods)]
    for typ, v in bt.items():
        lines.append(f"| {typ} | {v['n']} | " + " | ".join(
            f"{v['methods'][m]['recall@5']:.2f} / {v['methods'][m]['chain@5']:.2f}"
            for m in methods if m in v["methods"]) + " |")
    return "\n".join(lines)


def sensitivity_table(run_config) -> str:
    """:func:`sensitivity` as Markdown; ``run_config(**overrides)`` returns one method's
    metrics."""
    lines = ["| parameter | value | R@5 | C@5 |", "|---|---:|---:|---:|"]
    for p_, vals in sensitivity(run_config).items():
        for v, m in vals.items():
            lines.append(f"| {p_} | {v} | {m['recall@5']:.2f} | {m['chain@5']:.2f} |")
    return "\n".join(lines)


@dataclass(frozen=True)
class Analysis:
    """A single-run analysis: the methods it needs and its table (report, index) -> text."""

    methods: tuple[str, ...]
    table: Callable[..., Any]


ANALYSES: dict[str, Analysis] = {
    "ablation": Analysis(ABLATION_METHODS, lambda rep, idx: run_ablation(rep)),
    "coverage": Analysis(("evireform",), lambda rep, idx: coverage_table(rep, idx.owner)),
    "types": Analysis(TYPE_METHODS, lambda rep, idx: types_table(rep)),
}
