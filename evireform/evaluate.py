"""Evaluation on the HippoRAG data formats: loaders, the paper's metrics, the dense baseline.

* MuSiQue format: records with ``question`` and ``paragraphs`` (``is_supporting``); gold =
  the supporting paragraphs, matched to the corpus by exact text.
* HotpotQA format (also 2WikiMultiHopQA): ``question`` and ``supporting_facts`` ([title, i]);
  gold = the distinct supporting titles, matched to the corpus by title; ``context`` may be absent.

Metrics (paper Eqs. 16-18), in percent, for K in 1, 5, 10, 20:
Recall@K = mean |G ∩ R_K| / |G|;  Chain@K = mean 1[G ⊆ R_K];  Hit@K = mean 1[G ∩ R_K ≠ ∅].
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from .types import Passage

KS = (1, 5, 10, 20)


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    answer: str
    gold: frozenset[int]          # corpus positions of the gold passages
    type: str = ""
    aliases: tuple[str, ...] = ()  # other accepted answers (MuSiQue answer_aliases)


def _norm(text: str) -> str:
    return " ".join(str(text).split())


def load_questions(path, passages: Sequence[Passage]) -> list[Question]:
    """Read MuSiQue- or HotpotQA-format questions and match gold passages to ``passages``.

    A gold passage missing from the corpus raises ``ValueError`` naming the question.
    """
    try:
        recs = json.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"questions file {path} is not UTF-8 text ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"questions file {path} is not valid JSON: {exc}") from None
    if not isinstance(recs, list) or not recs:
        raise ValueError(f"{path}: expected a non-empty JSON list of questions")
    by_text: dict[str, int] = {}
    by_title: dict[str, list[int]] = {}
    for j, p in enumerate(passages):
        by_text.setdefault(_norm(p.text), j)
        by_title.setdefault(p.title, []).append(j)
    out = []
    for n, r in enumerate(recs):
        if not isinstance(r, dict):
            raise ValueError(f"{path}: record {n} is a {type(r).__name__}, expected an object")
        qid = str(r.get("id", r.get("_id", n)))
        if not isinstance(r.get("question"), str) or not r["question"].strip():
            raise ValueError(f"{path}: record {n} (id {qid}) has no 'question' string")
        if "paragraphs" in r:
            gold = set()
            for para in r["paragraphs"]:
                if para.get("is_supporting"):
                    j = by_text.get(_norm(para.get("paragraph_text", "")))
                    if j is None:
                        raise ValueError(f"question {qid}: gold paragraph "
                                         f"{para.get('title')!r} is not in the corpus")
                    gold.add(j)
            qtype = f"{len(r.get('question_decomposition', []))}hop"
        elif "supporting_facts" in r:
            gold = set()
            for title in {t for t, _ in r["supporting_facts"]}:
                if title not in by_title:
                    raise ValueError(f"question {qid}: gold title {title!r} is not in the corpus")
                gold.update(by_title[title])
            qtype = str(r.get("type", ""))
        else:
            raise ValueError(f"{path}: record {n} has neither 'paragraphs' nor 'supporting_facts'")
        if not gold:
            raise ValueError(f"question {qid} has no gold passage")
        aliases = tuple(str(a) for a in (r.get("answer_aliases") or []))
        out.append(Question(qid, r["question"], str(r.get("answer", "")), frozenset(gold), qtype,
                            aliases))
    return out


def per_question(rankings: Sequence[Sequence[int]], questions: Sequence[Question], ks=KS):
    """Per-question recall/chain/hit at each K, as arrays (0/1 or fractions)."""
    out = {}
    for K in ks:
        rec, ch, hit = [], [], []
        for ranked, q in zip(rankings, questions):
            top = set(int(j) for j in list(ranked)[:K])
            inter = len(q.gold & top)
            rec.append(inter / len(q.gold))
            ch.append(float(q.gold <= top))
            hit.append(float(inter > 0))
        out[f"recall@{K}"] = np.array(rec)
        out[f"chain@{K}"] = np.array(ch)
        out[f"hit@{K}"] = np.array(hit)
    return out


def metrics(rankings, questions, ks=KS) -> dict[str, float]:
    """Recall@K, Chain@K, Hit@K in percent (paper Eqs. 16-18)."""
    return {k: round(100.0 * float(v.mean()), 2) for k, v in per_question(rankings, questions, ks).items()}


def passage_texts(passages: Sequence[Passage]) -> list[str]:
    """Dense passage baseline text: title + newline + text."""
    return [f"{p.title}\n{p.text}" for p in passages]


def dense_rankings(P: np.ndarray, Q: np.ndarray, k: int) -> list[list[int]]:
    """Exact dense passage ranking (cosine, ties by lower id)."""
    from .kernels import cosine_topk_batch
    ids, _ = cosine_topk_batch(P, Q, k)
    return [[int(j) for j in row if j >= 0] for row in ids]


# --------------------------------------------------------------------------- the eval runner
#: the methods ``evireform eval`` knows, as (description, config overrides); None = dense
METHODS: dict[str, tuple[str, dict | None]] = {
    "dense": ("dense passage retrieval, same embedder (title + newline + text)", None),
    "bm25": ("BM25 (bm25s) over title + newline + text", None),
    "dense_prop": ("dense proposition retrieval read out to passages", None),
    "hipporag_ppr": ("HippoRAG-style personalised PageRank over the passage-entity graph", None),
    "evireform": ("EviReform, LLM-free roles, paper defaults", {}),
    "full": ("2x2 cell: reformulation + propagation (= evireform)", {}),
    "reform_only": ("2x2 cell: reformulation, no propagation",
                    {"propagation": False}),
    "prop_only": ("2x2 cell: propagation, no reformulation", {"reformulation": False}),
    "base": ("2x2 cell: neither (the question's seed read out)",
             {"reformulation": False, "propagation": False}),
    "residual_only": ("control: residual queries only (s = r)", {"mode": "residual_only"}),
    "repeat_question": ("control: the question repeated at the residual queries' count",
                        {"mode": "repeat_question"}),
    "evireform_dense_fill": ("EviReform, ranking filled by the question's dense order",
                             {"fill": "dense"}),
    "base_dense_fill": ("2x2 base cell, ranking filled by the question's dense order",
                        {"reformulation": False, "propagation": False, "fill": "dense"}),
    "evireform_3rounds": ("EviReform with up to 3 rounds and the sufficiency controller",
                          {"rounds": 3}),
    "evireform_select12": ("EviReform, LLM-free selector filling all 12 selection slots",
                           {"_selector_n": None}),
}
DEFAULT_METHODS = ("dense", "evireform", "reform_only", "prop_only", "base")

DATASETS = {
    "musique": ("musique/musique.json", "musique/musique_corpus.json"),
    "hotpotqa": ("hotpotqa/hotpotqa.json", "hotpotqa/hotpotqa_corpus.json"),
}


def parse_methods(spec: str) -> list[str]:
    names = list(METHODS) if spec == "all" else [m.strip() for m in spec.split(",") if m.strip()]
    unknown = [m for m in names if m not in METHODS]
    if unknown or not names:
        raise ValueError(f"unknown method(s) {unknown}; choose from {', '.join(METHODS)} or 'all'")
    return names


def dense_passage_embeddings(corpus_path, passages, embedder, cache_dir=None,
                             show_progress=False) -> np.ndarray:
    """Passage embeddings for the dense baseline, cached by corpus checksum and embedder."""
    from .cache import default_cache_dir, file_sha256
    import os
    import tempfile
    d = Path(cache_dir or default_cache_dir()) / "dense"
    f = d / f"{Path(corpus_path).stem}-{file_sha256(corpus_path)[:12]}-{embedder.name}.npy"
    if f.exists():
        try:
            P = np.load(f, allow_pickle=False)
            if P.shape == (len(passages), embedder.dim):
                return P
        except (ValueError, OSError):
            pass
    P = embedder.encode(passage_texts(passages), show_progress=show_progress)
    d.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, suffix=".npy.tmp")
    with os.fdopen(fd, "wb") as fh:
        np.save(fh, P, allow_pickle=False)
    os.replace(tmp, f)
    return P


def run_eval(questions_path, corpus_path, methods: Sequence[str], *, embedder, n: int | None = None,
             config=None, cache_dir=None, show_progress=True, dataset: str = "",
             selector_n: int | None = 4, llm=None, reader: bool = False,
             reader_k: int = 5) -> dict:
    """Run ``methods`` on one dataset in one process; returns the JSON-ready report.

    With ``llm`` (an :class:`evireform.llm.LLMClient`) EviReform's selector, reformulator and
    controller are the LLM roles (LLM-free fallbacks on failure); with ``reader=True`` the LLM
    reader answers every question from each method's top ``reader_k`` passages and F1/EM are
    added to the report, with tokens in/out per role.
    """
    from .cache import cached_index
    from .retriever import EviReform, EviReformConfig
    from .roles import TopScoreSelector

    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"n must be a positive integer (the first n questions); got {n!r}")
    idx, _, _ = cached_index(corpus_path, embedder, cache_dir=cache_dir,
                             show_progress=show_progress)
    qs = load_questions(questions_path, idx.passages)[:n]
    base_cfg = config or EviReformConfig()
    kmax = max(KS)
    rankings: dict[str, list[list[int]]] = {}
    traces: dict[str, list] = {}
    by_cfg: dict = {}
    Q = None
    P = None
    for m in methods:
        desc, over = METHODS[m]
        if over is None:
            from . import baselines
            if Q is None:
                Q = embedder.encode([q.question for q in qs])
                P = dense_passage_embeddings(corpus_path, idx.passages, embedder, cache_dir,
                                             show_progress)
            if m == "dense":
                rankings[m] = dense_rankings(P, Q, kmax)
            elif m == "bm25":
                rankings[m] = baselines.bm25_rankings(passage_texts(idx.passages),
                                                      [q.question for q in qs], kmax)
            elif m == "dense_prop":
                rankings[m] = baselines.dense_prop_rankings(idx, Q, dense_rankings(P, Q, kmax),
                                                            kmax)
            elif m == "hipporag_ppr":
                rankings[m] = baselines.ppr_rankings(idx, Q, P, kmax)
            continue
        over = dict(over)
        sel_n = over.pop("_selector_n", selector_n or None)
        cfg = base_cfg.with_(**over)
        key = (cfg, sel_n)
        if key not in by_cfg:
            roles = dict(selector=TopScoreSelector(sel_n))
            if llm is not None:
                from .llm import LLMController, LLMReformulator, LLMSelector
                roles = dict(selector=LLMSelector(llm, TopScoreSelector(sel_n)),
                             reformulator=LLMReformulator(llm), controller=LLMController(llm))
            r = EviReform(idx, cfg, embedder=embedder, **roles)
            by_cfg[key] = r.retrieve_many([q.question for q in qs], kmax)
        rankings[m] = [[p.index for p in r.passages] for r in by_cfg[key]]
        traces[m] = by_cfg[key]
    report = {
        "dataset": dataset or Path(questions_path).stem,
        "n_questions": len(qs),
        "n_passages": idx.n_passages,
        "n_propositions": idx.n_props,
        "embedder": embedder.name,
        "extractor": idx.meta.get("extractor"),
        "config": {k: getattr(base_cfg, k) for k in base_cfg.__dataclass_fields__},
        "selector_n": selector_n or None,
        "methods": {m: metrics(rankings[m], qs) for m in methods},
    }
    if reader:
        if llm is None:
            raise ValueError("reader=True needs an LLM client (the reader is an LLM role)")
        from .llm import LLMReader
        from .qa import qa_metrics
        rd = LLMReader(llm)
        for m in methods:
            preds = [rd.answer(q.question, [idx.passages[j] for j in rk[:reader_k]])[0]
                     for q, rk in zip(qs, rankings[m])]
            report["methods"][m].update(qa_metrics(preds, [(q.answer,) + q.aliases for q in qs]))
    if llm is not None:
        report["llm_usage"] = {role: vars(u) for role, u in llm.usage.items()}
    if "evireform" in rankings and len(rankings) > 1:
        report["bootstrap"] = bootstrap_vs_strongest(rankings, qs, report["dataset"])
    report["_rankings"] = rankings
    report["_questions"] = qs
    report["_traces"] = traces
    return report


def bootstrap_vs_strongest(rankings: dict, qs, dataset: str, ks=KS) -> dict:
    """For every metric: EviReform minus the strongest other method on that metric, with a
    paired bootstrap 95% interval (10,000 resamples, base seed 202707).  "Other methods" are
    the baselines (dense, bm25, dense_prop, hipporag_ppr), not EviReform's own ablation cells,
    controls or variants, which `evireform analyze ablation` contrasts."""
    from .stats import BASE_SEED, paired_bootstrap, seed_offset
    per = {m: per_question(r, qs, ks) for m, r in rankings.items()}
    out = {}
    for metric in per["evireform"]:
        others = {m: v[metric].mean() for m, v in per.items()
                  if m in METHODS and METHODS[m][1] is None}
        if not others:
            continue
        best = max(others, key=lambda m: (others[m], m))
        res = paired_bootstrap(per["evireform"][metric], per[best][metric],
                               seed=BASE_SEED + seed_offset(dataset, metric))
        res["vs"] = best
        out[metric] = res
    return out


def format_bootstrap(report: dict, markdown: bool = False, ks=(5, 10)) -> str:
    """EviReform minus the strongest other method per metric, with the 95% interval."""
    bs = report.get("bootstrap")
    if not bs:
        return ""
    title = ("EviReform minus the strongest other method per metric, paired bootstrap 95% CI "
             "(10,000 resamples, base seed 202707):")
    if markdown:
        lines = [title, "", "| metric | strongest other | difference | 95% CI |",
                 "|---|---|---:|---|"]
        for metric, r in bs.items():
            if int(metric.split("@")[1]) in ks:
                lines.append(f"| {metric} | {r['vs']} | {r['diff']:+.2f} | "
                             f"[{r['ci'][0]:+.2f}, {r['ci'][1]:+.2f}] |")
        return "\n".join(lines)
    lines = [title]
    for metric, r in bs.items():
        lines.append(f"  {metric:<10} vs {r['vs']:<16} {r['diff']:+7.2f}  "
                     f"[{r['ci'][0]:+.2f}, {r['ci'][1]:+.2f}]")
    return "\n".join(lines)


def format_table(report: dict, ks=KS) -> str:
    cols = [f"{m}@{k}" for m in ("recall", "chain", "hit") for k in ks]
    short = {f"{m}@{k}": f"{m[0].upper()}@{k}" for m in ("recall", "chain", "hit") for k in ks}
    width = max(12, max(len(m) for m in report["methods"]))
    head = f"{'method':<{width}} " + " ".join(f"{short[c]:>6}" for c in cols)
    lines = [f"{report['dataset']}: {report['n_questions']} questions, {report['n_passages']:,} "
             f"passages, {report['n_propositions']:,} propositions, embedder "
             f"{report['embedder']}", head, "-" * len(head)]
    for m, vals in report["methods"].items():
        qa = f"  F1 {vals['f1']:6.2f}  EM {vals['em']:6.2f}" if "f1" in vals else ""
        lines.append(f"{m:<{width}} " + " ".join(f"{vals[c]:6.2f}" for c in cols) + qa)
    for role, u in report.get("llm_usage", {}).items():
        lines.append(f"llm {role}: {u['calls']} calls, {u['cache_hits']} cache hits, "
                     f"{u['repairs']} repairs, {u['failures']} fallbacks, tokens in "
                     f"{u['tokens_in']:,} out {u['tokens_out']:,}")
    return "\n".join(lines)


def markdown_table(report: dict, ks=KS) -> str:
    """The report as a Markdown table (the README's results are pasted from this)."""
    cols = [f"{m}@{k}" for m in ("recall", "chain", "hit") for k in ks if not (m == "chain" and k == 1)]
    short = {c: c[0].upper() + "@" + c.split("@")[1] for c in cols}
    lines = ["| method | " + " | ".join(short[c] for c in cols) + " |",
             "|---|" + "---:|" * len(cols)]
    for m, vals in report["methods"].items():
        lines.append(f"| {m} | " + " | ".join(f"{vals[c]:.2f}" for c in cols) + " |")
    return "\n".join(lines)
