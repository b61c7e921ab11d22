"""``evireform eval``: every chosen method on one question set, in one process, on one index.

A method is a baseline (:data:`evireform.evaluation.baselines.BASELINES`) or an EviReform
variant (config overrides, and how many seeds the LLM-free selector takes).  The runner
returns an :class:`EvalReport`: the metrics per method, the paired bootstrap of EviReform
against the strongest baseline, and the rankings, questions and traces the analyses read.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence, TYPE_CHECKING

import numpy as np

from .._checks import positive_int
from ..strategies import SEARCHES, STRATEGY_SETTINGS, HiQ
from .baselines import BASELINES, BaselineInputs
from .data import Question, load_questions
from .metrics import KS, metrics, per_question

if TYPE_CHECKING:  # annotations only
    from ..embed import Embedder
    from ..extract import Extractor
    from ..index import PropositionIndex
    from ..types import FilterSpec, StrPath


@dataclass(frozen=True)
class Method:
    """One row of the eval table."""

    name: str
    description: str
    #: a baseline's name in BASELINES, or None for an EviReform variant
    baseline: str | None = None
    #: EviReformConfig overrides of an EviReform variant
    overrides: dict[str, Any] = field(default_factory=dict)
    #: the LLM-free selector fills every selection slot instead of taking the run's seed count
    all_slots: bool = False
    #: a strategy of evireform.strategies ("bgr", "hiq") instead of an EviReform variant
    strategy: str | None = None
    #: the LLM-free reformulator (evireform.roles.REFORMULATORS) when not the default
    reformulator: str | None = None

    @property
    def is_baseline(self) -> bool:
        return self.baseline is not None


def _variant(name, description, all_slots=False, **overrides) -> Method:
    return Method(name, description, None, overrides, all_slots)


#: the methods ``evireform eval`` knows, in table order
METHODS: dict[str, Method] = {m.name: m for m in [
    *(Method(name, b.description, name) for name, b in BASELINES.items()),
    _variant("evireform", "EviReform, LLM-free roles, paper defaults"),
    _variant("full", "2x2 cell: reformulation + propagation (= evireform)"),
    _variant("reform_only", "2x2 cell: reformulation, no propagation", propagation=False),
    _variant("prop_only", "2x2 cell: propagation, no reformulation", reformulation=False),
    _variant("base", "2x2 cell: neither (the question's seed read out)",
             reformulation=False, propagation=False),
    _variant("residual_only", "control: residual queries only (s = r)", mode="residual_only"),
    _variant("repeat_question", "control: the question repeated at the residual queries' count",
             mode="repeat_question"),
    _variant("evireform_dense_fill", "EviReform, ranking filled by the question's dense order",
             fill="dense"),
    _variant("base_dense_fill", "2x2 base cell, ranking filled by the question's dense order, "
             "without the own search (own_search='off'): the question's seed alone, the "
             "real-documents tables' base", reformulation=False, propagation=False,
             fill="dense", own_search="off"),
    _variant("evireform_3rounds", "EviReform with up to 3 rounds and the sufficiency controller",
             rounds=3),
    _variant("evireform_select12", "EviReform, LLM-free selector filling all 12 selection slots",
             all_slots=True),
    Method("evireform_spans", "EviReform whose LLM-free reformulator takes capitalised name "
           "spans of the observed text (bridge-v2, the default before graph bridges)",
           reformulator="spans"),
    Method("evireform_v1", "EviReform whose graph reformulator reads bridges as before issue "
           "52 (graph-bridge-v1: no placed-capital filter, no focus words)",
           reformulator="graph-v1"),
    _variant("evireform_dense", "EviReform as the paper has it: dense scores only "
             "(lexical=False)", lexical=False),
    _variant("evireform_no_own", "EviReform without the question's own search "
             "(own_search='off': the paper's ranking on every index)", own_search="off"),
    _variant("evireform_evidence", "EviReform with the do-no-harm beta rule "
             "(beta_rule='evidence')", beta_rule="evidence"),
    # the strategies, from their one registry (evireform.strategies.STRATEGY_SETTINGS); the
    # one-search methods a user picks at query time (bm25, dense, hybrid) are the baselines
    # above here: the protocol's reference implementations (bm25s, passage embeddings),
    # with the index's own BM25 as bm25_engine
    *(Method(name, desc, strategy=name) for name, (_, _, desc) in STRATEGY_SETTINGS.items()
      if name not in SEARCHES),
]}
DEFAULT_METHODS = ("dense", "evireform", "reform_only", "prop_only", "base")


def parse_methods(spec: str) -> list[str]:
    names = list(METHODS) if spec == "all" else [m.strip() for m in spec.split(",") if m.strip()]
    unknown = [m for m in names if m not in METHODS]
    if unknown or not names:
        raise ValueError(f"unknown method(s) {unknown}; choose from {', '.join(METHODS)} or 'all'")
    return names


@dataclass
class EvalReport:
    """The outcome of :func:`run_eval`.  :meth:`to_json` gives the JSON-ready summary;
    ``rankings`` (passage positions per method and question), ``questions`` and ``traces``
    (EviReform results per variant) are for the analyses."""

    dataset: str
    n_questions: int
    n_passages: int
    n_propositions: int
    embedder: str
    extractor: str | None
    config: dict[str, Any]
    selector_n: int | None
    methods: dict[str, dict[str, Any]]
    rankings: dict[str, list[list[int]]]
    questions: list[Question]
    traces: dict[str, list[Any]]
    bootstrap: dict[str, Any] | None = None
    llm_usage: dict[str, Any] | None = None
    #: the passages' ids by corpus position (what a run file names them by)
    passage_ids: list[str] = field(default_factory=list)
    #: each passage's title and text by position, when answers are scored by string
    answer_texts: list[str] | None = None

    _SUMMARY = ("dataset", "n_questions", "n_passages", "n_propositions", "embedder",
                "extractor", "config", "selector_n", "methods", "llm_usage", "bootstrap")

    def to_json(self) -> dict[str, Any]:
        """The summary (``llm_usage`` and ``bootstrap`` only when present)."""
        return {k: getattr(self, k) for k in self._SUMMARY
                if getattr(self, k) is not None or k not in ("llm_usage", "bootstrap")}


def write_runs(report: EvalReport, out_dir: StrPath, ks: Sequence[int] = KS) -> list[Path]:
    """Each method's run in ``out_dir``: ``METHOD.trec`` (a TREC run: ``qid Q0 docid rank
    score METHOD``, what ``ir_measures`` and ``trec_eval`` read; the method's own scores
    where it has them, else decreasing by rank) and ``METHOD.jsonl`` (one line a question:
    its id, the question, the ranked passage ids, the residual queries the trace holds and
    the question's own metrics at each K), so two runs compare question by question."""
    import json
    from ..records import trec_docid, trec_scores
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ids = report.passage_ids
    written = []
    for m, ranking in report.rankings.items():
        per = per_question(ranking, report.questions, ks, report.answer_texts)
        results = report.traces.get(m)
        with open(out / f"{m}.trec", "w", encoding="utf-8") as trec, \
                open(out / f"{m}.jsonl", "w", encoding="utf-8") as lines:
            for n, (q, ranked) in enumerate(zip(report.questions, ranking)):
                res = results[n] if results is not None else None
                if res is not None and len(res.passages) == len(ranked):
                    raw = [p.score for p in res.passages]
                else:
                    raw = [float(len(ranked) - r) for r in range(len(ranked))]
                for r, (j, sc) in enumerate(zip(ranked, trec_scores(raw)), 1):
                    trec.write(f"{trec_docid(q.id)} Q0 {trec_docid(ids[int(j)])} {r} {sc!r} "
                               f"{m}\n")
                rec: dict[str, Any] = {"id": q.id, "question": q.question,
                                       "passages": [ids[int(j)] for j in ranked]}
                rq = getattr(getattr(res, "trace", None), "residual_queries", None)
                if rq is not None:
                    rec["residual_queries"] = list(rq)
                rec["metrics"] = {k: float(v[n]) for k, v in per.items()}
                lines.write(json.dumps(rec, ensure_ascii=False) + "\n")
        written += [out / f"{m}.trec", out / f"{m}.jsonl"]
    return written


def check_same_corpus(index: PropositionIndex, corpus_path: StrPath) -> None:
    """``ValueError`` unless ``index`` holds the passages of the corpus file, in order (the
    gold passages are matched by position)."""
    from ..corpus import load_corpus
    from ..strings import column
    corpus = load_corpus(corpus_path)
    ids, texts = column(index.passages, "ids"), column(index.passages, "texts")
    if len(ids) != len(corpus):
        raise ValueError(f"the index holds {len(ids):,} passages, the corpus "
                         f"{Path(corpus_path).name} {len(corpus):,}: build the index from "
                         "this corpus (evireform index CORPUS DIR)")
    for j, p in enumerate(corpus):
        if ids[j] != p.id or texts[j] != p.text:
            raise ValueError(f"passage {j} of the index ({ids[j]!r:.60}) is not the corpus "
                             f"file's ({p.id!r:.60}): build the index from this corpus "
                             "(evireform index CORPUS DIR)")


def run_eval(questions_path: StrPath, corpus_path: StrPath, methods: Sequence[str], *, embedder: Embedder,
             n: int | None = None, config: Any=None, cache_dir: StrPath | None=None, show_progress: bool=True,
             dataset: str = "", selector_n: int | None = 4, llm: Any=None, reader: bool = False,
             reader_k: int = 5, max_workers: int = 1,
             graph_metrics: bool = False, extractor: Extractor | None=None,
             lowercase: bool = False, filter: FilterSpec=None, index: PropositionIndex | None=None,
             openie_path: StrPath | None=None, extra_corpora: Sequence = (),
             openie_plain: bool = False, answer_recall: bool = False) -> EvalReport:
    """Run ``methods`` on one dataset in one process.

    With ``llm`` (an :class:`evireform.llm.LLMClient`) EviReform's selector, reformulator and
    controller are the LLM roles (LLM-free fallbacks on failure); with ``reader=True`` the LLM
    reader answers every question from each method's top ``reader_k`` passages and F1/EM are
    added to the report, with tokens in/out per role.  ``max_workers``: role calls in flight
    at once across the questions (for LLM roles).  ``graph_metrics=True`` adds the evidence
    set and graph metrics of :mod:`evireform.evaluation.graph_metrics` to every method.
    ``extractor``: the index's extractor (an :class:`~evireform.extract.Extractor`; default
    the heuristic one).  ``lowercase=True`` runs on lower-cased copies of the corpus and the
    questions (:func:`~evireform.evaluation.data.lowercased_copy`): how the method fares on
    text without capital letters.  ``filter`` (:mod:`evireform.filters`) evaluates on the
    matching passages only: questions whose gold passages are not all among them are left
    out; EviReform and the strategies retrieve under the filter (equal to an index of those
    passages), the baselines' rankings are cut to the matching passages (equal to a run on
    them for dense; BM25's and PPR's corpus statistics still span the whole corpus).
    ``index``: a :class:`~evireform.index.PropositionIndex` already built over this corpus
    (``evireform index CORPUS DIR``; its passages must be the corpus file's, in order) used
    instead of the cache; ``openie_path``: build the index from a HippoRAG OpenIE file over
    the corpus (one triple = one proposition) instead of ``extractor``, with the built-in
    extractors' title and name conventions unless ``openie_plain``
    (:func:`~evireform.extract.read_openie`).  ``extra_corpora``:
    corpus files whose passages are added as distractors
    (:func:`~evireform.evaluation.data.combined_copy`); the questions' gold passages stay
    the first corpus's.  ``answer_recall``: also Answer@K, the answer string in one of the
    top K passages (:func:`~evireform.evaluation.metrics.answer_found`), for sets whose
    answers are short strings of the passages (the real-documents set).
    """
    from ..cache import cached_index
    from ..retriever import EviReform, EviReformConfig
    from ..strategies import make_strategy
    from ..roles import TopScoreSelector, make_reformulator

    if n is not None:
        positive_int(n, "n (the first n questions)")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; choose from {', '.join(METHODS)}")
    if lowercase:
        from ..cache import default_cache_dir
        from .data import lowercased_copy
        root = Path(cache_dir or default_cache_dir()) / "lowercase"
        corpus_path = lowercased_copy(corpus_path, root)
        questions_path = lowercased_copy(questions_path, root)
    questions_corpus = corpus_path  # where the gold passages are (the first corpus)
    if extra_corpora:
        if index is not None or openie_path is not None:
            raise ValueError("extra corpora are added to the index eval builds: not with a "
                             "given index or an OpenIE file (its triples cover one corpus)")
        from ..cache import default_cache_dir
        from .data import combined_copy, lowercased_copy
        root = Path(cache_dir or default_cache_dir())
        extras = [lowercased_copy(e, root / "lowercase") for e in extra_corpora] \
            if lowercase else list(extra_corpora)
        corpus_path = combined_copy(corpus_path, extras, root / "combined")
    if index is not None:
        if lowercase or openie_path is not None or extractor is not None:
            raise ValueError("a given index was built already: lowercase, openie_path and "
                             "extractor apply to the index eval builds")
        check_same_corpus(index, corpus_path)
        index.check_embedder(embedder)
        idx = index
    else:
        idx, _, _ = cached_index(corpus_path, embedder, cache_dir=cache_dir,
                                 show_progress=show_progress, extractor=extractor,
                                 openie_path=openie_path, openie_plain=openie_plain)
    if extra_corpora:  # gold passages matched in the first corpus, at the same positions
        from ..corpus import load_corpus
        qs = load_questions(questions_path, load_corpus(questions_corpus))[:n]
    else:
        qs = load_questions(questions_path, idx.passages)[:n]
    keep_passage = None
    if filter is not None:
        from ..filters import restriction
        r = restriction(idx, filter)
        keep_passage = r.pmask
        qs = [q for q in qs if all(keep_passage[j] for j in q.gold)]
        if not qs:
            raise ValueError("the filter leaves no question whose gold passages all match it")
    texts = [q.question for q in qs]
    answer_texts = [p.title + "\n" + p.text for p in idx.passages] if answer_recall else None
    base_cfg = config or EviReformConfig()
    kmax = max(KS)
    # repeated texts (issue 68): every method's ranking shows a text once, as EviReform's
    # result does (fold_duplicates), so each reads further down to keep kmax texts
    fold = bool(base_cfg.fold_duplicates and idx.n_same_text)
    k_read = kmax + min(idx.n_same_text, kmax) if fold else kmax
    inputs = BaselineInputs(idx, texts, embedder, corpus_path, k_read, cache_dir,
                            show_progress, openie_path=openie_path, llm=llm)
    rankings: dict[str, list[list[int]]] = {}
    traces: dict[str, list[Any]] = {}
    by_cfg: dict[str, Any] = {}
    for name in methods:
        m = METHODS[name]
        if m.is_baseline:
            rankings[name] = BASELINES[m.baseline].rank(inputs)
            if keep_passage is not None:  # cut to the matching passages
                rankings[name] = [[j for j in rk if keep_passage[j]] for rk in rankings[name]]
            continue
        if m.strategy is not None:
            res = make_strategy(m.strategy, idx, embedder, llm,
                                fold_duplicates=base_cfg.fold_duplicates).retrieve_many(
                texts, kmax, filter=filter)
            rankings[name] = [[p.index for p in r.passages] for r in res]
            traces[name] = res
            continue
        sel_n = None if m.all_slots else (selector_n or None)
        cfg = base_cfg.with_(**m.overrides)
        key = (cfg, sel_n, m.reformulator)
        if key not in by_cfg:  # variants with equal settings share one run
            roles = dict(selector=TopScoreSelector(sel_n))
            if m.reformulator is not None:
                roles["reformulator"] = make_reformulator(m.reformulator)
            if llm is not None:
                from ..llm import LLMController, LLMReformulator, LLMSelector
                roles = dict(selector=LLMSelector(llm, TopScoreSelector(sel_n)),
                             reformulator=LLMReformulator(llm), controller=LLMController(llm))
            r = EviReform(idx, cfg, embedder=embedder, max_workers=max_workers, **roles)
            by_cfg[key] = r.retrieve_many(texts, kmax, filter=filter)
        rankings[name] = [[p.index for p in r.passages] for r in by_cfg[key]]
        traces[name] = by_cfg[key]
    if fold:
        rankings, qs, answer_texts = fold_same_text(idx, rankings, qs, answer_texts, kmax)
    report = EvalReport(
        dataset=dataset or Path(questions_path).stem, n_questions=len(qs),
        n_passages=idx.n_passages, n_propositions=idx.n_props, embedder=embedder.name,
        extractor=idx.meta.get("extractor"),
        config={k: getattr(base_cfg, k) for k in base_cfg.__dataclass_fields__},
        selector_n=selector_n or None,
        methods={m: metrics(rankings[m], qs, texts=answer_texts) for m in methods},
        rankings=rankings, questions=qs, traces=traces,
        passage_ids=[p.id for p in idx.passages], answer_texts=answer_texts)
    if graph_metrics:
        from .graph_metrics import graph_metrics as _gm
        for m in methods:
            report.methods[m].update(_gm(rankings[m], traces.get(m), qs))
    if reader:
        if llm is None:
            raise ValueError("reader=True needs an LLM client (the reader is an LLM role)")
        from ..llm import LLMReader
        from .qa import qa_metrics
        rd = LLMReader(llm)
        for m in methods:
            strategy = METHODS[m].strategy
            if strategy is not None and STRATEGY_SETTINGS[strategy][0] is HiQ:
                # Hi-Q's own answer (its tree's): no reader call
                preds = [r.trace.tree.answer or "" for r in traces[m]]
            else:
                preds = [rd.answer(q.question, [idx.passages[j] for j in rk[:reader_k]])[0]
                         for q, rk in zip(qs, rankings[m])]
            report.methods[m].update(qa_metrics(preds, [(q.answer,) + q.aliases for q in qs]))
    if llm is not None:
        report.llm_usage = {role: vars(u) for role, u in llm.usage.items()}
    if "evireform" in rankings and len(rankings) > 1:
        report.bootstrap = bootstrap_vs_strongest(rankings, qs, report.dataset,
                                                  texts=answer_texts) or None
    return report


def fold_same_text(idx: Any, rankings: dict[str, list[list[int]]], qs: Sequence[Question],
                   answer_texts: list[str] | None, k: int):
    """Rankings, questions and answer texts with each group of passages that share a text
    (the index's :attr:`~evireform.index.PropositionIndex.same_text` and
    :attr:`~evireform.index.PropositionIndex.same_text_groups`) read as one passage, its
    first position: a ranking keeps a group's first appearance (at most ``k`` entries), gold
    positions and evidence edges name the group, and the group's answer text holds every
    member's title (a result shows the text once, naming each source)."""
    import dataclasses
    same = np.asarray(idx.same_text)
    folded = {}
    for m, rks in rankings.items():
        out = []
        for rk in rks:
            seen: dict[int, None] = {}
            for j in rk:
                seen.setdefault(int(same[j]), None)
                if len(seen) == k:
                    break
            out.append(list(seen))
        folded[m] = out
    qs = [dataclasses.replace(
        q, gold=frozenset(int(same[g]) for g in q.gold),
        gold_groups=None if q.gold_groups is None else
        tuple(frozenset(int(same[g]) for g in grp) for grp in q.gold_groups),
        gold_edges=None if q.gold_edges is None else
        frozenset((int(same[a]), int(same[b])) for a, b in q.gold_edges)) for q in qs]
    if answer_texts is not None:
        answer_texts = list(answer_texts)
        for c, js in idx.same_text_groups.items():
            titles = [answer_texts[j].split("\n", 1)[0] for j in js]
            answer_texts[c] = "\n".join(titles) + "\n" + answer_texts[c].split("\n", 1)[-1]
    return folded, qs, answer_texts


def bootstrap_vs_strongest(rankings: dict[str, Any], qs: Sequence[str], dataset: str, ks: Sequence[int]=KS,
                           texts: Sequence[str] | None = None) -> dict[str, Any]:
    """For every metric: EviReform minus the strongest other method on that metric, with a
    paired bootstrap 95% interval (10,000 resamples, base seed 202707).  "Other methods" are
    the baselines (dense, bm25, hybrid, dense_prop, hipporag_ppr) and the related strategies (bgr,
    hiq), not EviReform's own ablation cells, controls or variants, which `evireform analyze
    ablation` contrasts."""
    from .stats import BASE_SEED, paired_bootstrap, seed_offset
    per = {m: per_question(r, qs, ks, texts) for m, r in rankings.items()}
    out = {}
    for metric in per["evireform"]:
        others = {m: v[metric].mean() for m, v in per.items()
                  if m in METHODS and (METHODS[m].is_baseline or METHODS[m].strategy)}
        if not others:
            continue
        best = max(others, key=lambda m: (others[m], m))
        res = paired_bootstrap(per["evireform"][metric], per[best][metric],
                               seed=BASE_SEED + seed_offset(dataset, metric))
        res["vs"] = best
        out[metric] = res
    return out


def format_bootstrap(report: "EvalReport", markdown: bool = False, ks: Sequence[int]=(5, 10)) -> str:
    """EviReform minus the strongest other method per metric, with the 95% interval."""
    bs = report.bootstrap
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


def _kinds(report: "EvalReport") -> tuple[str, ...]:
    """The metric kinds a report has: answer recall only where it was measured."""
    first = next(iter(report.methods.values()), {})
    return ("recall", "chain", "hit") + (("answer",) if "answer@5" in first else ())


def format_table(report: "EvalReport", ks: Sequence[int]=KS) -> str:
    cols = [f"{m}@{k}" for m in _kinds(report) for k in ks]
    short = {f"{m}@{k}": f"{m[0].upper()}@{k}" for m in _kinds(report) for k in ks}
    width = max(12, max(len(m) for m in report.methods))
    head = f"{'method':<{width}} " + " ".join(f"{short[c]:>6}" for c in cols)
    lines = [f"{report.dataset}: {report.n_questions} questions, {report.n_passages:,} "
             f"passages, {report.n_propositions:,} propositions, embedder "
             f"{report.embedder}", head, "-" * len(head)]
    for m, vals in report.methods.items():
        qa = f"  F1 {vals['f1']:6.2f}  EM {vals['em']:6.2f}" if "f1" in vals else ""
        lines.append(f"{m:<{width}} " + " ".join(f"{vals[c]:6.2f}" for c in cols) + qa)
    if any("gm" in v for v in report.methods.values()):
        lines.append("")
        lines.append(format_graph_table(report))
    for role, u in (report.llm_usage or {}).items():
        lines.append(f"llm {role}: {u['calls']} calls, {u['cache_hits']} cache hits, "
                     f"{u['content_hits']} content hits, {u['misses']} offline misses, "
                     f"{u['repairs']} repairs, "
                     f"{u['local_repairs']} local repairs, {u['failures']} fallbacks, tokens in "
                     f"{u['tokens_in']:,} out {u['tokens_out']:,}")
    return "\n".join(lines)


def format_graph_table(report: "EvalReport", markdown: bool = False) -> str:
    """Evidence set and graph metrics per method (methods run with graph_metrics=True)."""
    rows = [(m, v) for m, v in report.methods.items() if "gm" in v]
    if not rows:
        return ""
    n = rows[0][1]["n_graph_questions"]
    head = ["method", "R@5", "C@5", "EM", "P", "R", "F1", "GM", "GS", "GED"]
    vals = [[m, f"{v['recall@5']:.2f}", f"{v['chain@5']:.2f}", f"{v['ev_em']:.2f}",
             f"{v['ev_p']:.2f}", f"{v['ev_r']:.2f}", f"{v['ev_f1']:.2f}", f"{v['gm']:.2f}",
             f"{v['gs']:.2f}", f"{v['ged']:.2f}"] for m, v in rows]
    title = (f"evidence graphs on {n} questions (top |gold| passages; EM/P/R/F1 of the set, "
             "GM/GS in %, GED mean edits):")
    if markdown:
        return "\n".join([title, "", "| " + " | ".join(head) + " |",
                          "|---|" + "---:|" * (len(head) - 1)]
                         + ["| " + " | ".join(r) + " |" for r in vals])
    width = max(12, max(len(m) for m, _ in rows))
    lines = [title, f"{'method':<{width}} " + " ".join(f"{h:>6}" for h in head[1:])]
    lines += [f"{r[0]:<{width}} " + " ".join(f"{x:>6}" for x in r[1:]) for r in vals]
    return "\n".join(lines)


def markdown_table(report: "EvalReport", ks: Sequence[int]=KS) -> str:
    """The report as a Markdown table (the README's results are pasted from this)."""
    cols = [f"{m}@{k}" for m in _kinds(report) for k in ks if not (m == "chain" and k == 1)]
    short = {c: c[0].upper() + "@" + c.split("@")[1] for c in cols}
    if any("f1" in v for v in report.methods.values()):  # --reader: the answers' F1 and EM
        cols += ["f1", "em"]
        short.update(f1="answer F1", em="answer EM")
    lines = ["| method | " + " | ".join(short[c] for c in cols) + " |",
             "|---|" + "---:|" * len(cols)]
    for m, vals in report.methods.items():
        lines.append(f"| {m} | " + " | ".join(f"{vals[c]:.2f}" if c in vals else "–"
                                              for c in cols) + " |")
    if any("gm" in v for v in report.methods.values()):
        lines += ["", format_graph_table(report, markdown=True)]
    return "\n".join(lines)
