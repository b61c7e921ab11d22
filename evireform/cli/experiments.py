"""``evireform eval``, ``analyze``, ``bench`` and ``llm-cache``: the experiments and their
tools (they import evireform.evaluation and evireform.bench, which the core never does)."""
from __future__ import annotations

from typing import Any

import argparse
import json
import os
import sys
from pathlib import Path

from .._io import Outputs, regular_file
from ..cache import cached_index
from ..embed import get_embedder
from ..extract import EXTRACTORS
from ..index import PropositionIndex
from ..llm import ReplyCache
from ..retriever import EviReformConfig
from .options import (
    _add_embedder_args, _add_llm_args, _add_quiet, _data_dir, _embedder, _filter_arg,
    _index_embedder, _llm_client, _nonneg_int, _positive_float, _positive_int,
    _replay_summary, _sizes, parse_setting)


def _cmd_llm_cache(args: Any) -> int:
    cache_path = Path(args.cache)
    if args.action == "export":
        if not cache_path.is_file():
            raise FileNotFoundError(f"--cache {cache_path}: no such reply cache")
        out = Path(args.file)
        if out.exists() and out.is_file() and out.stat().st_size and not args.force:
            raise ValueError(f"{out} exists; export will not overwrite it (it may be a cache "
                             "or a replies file). Choose a new file, or pass --force")
        cache = ReplyCache(str(cache_path))
        with Outputs({"FILE": out}, inputs=[cache_path]) as files:
            n = cache.export_jsonl(files["FILE"])
        said = f"exported {n} replies to {args.file}"
    else:
        if not Path(args.file).is_file():
            raise FileNotFoundError(f"{args.file}: no such replies file")
        if cache_path.exists() and os.path.samefile(cache_path, args.file):
            raise ValueError(f"{args.file} is the cache itself")
        cache = ReplyCache(str(cache_path))
        n = cache.import_jsonl(args.file)
        said = f"imported {n} replies from {args.file}"
    print(json.dumps({"action": args.action, "file": str(args.file), "cache": str(cache_path),
                      "replies": n}) if args.json else said)
    return 0


def _cmd_eval(args: Any) -> int:
    from ..evaluation.data import ANSWER_RECALL_SETS
    from ..evaluation import (DATASETS, format_bootstrap, format_table, markdown_table,
                             parse_methods, run_eval)

    methods = parse_methods(args.methods)
    if args.dataset:
        if args.questions or args.corpus:
            raise ValueError("--dataset names the questions and the corpus itself; give "
                             "either --dataset or both --questions and --corpus")
        qrel, crel = DATASETS[args.dataset]
        qpath, cpath = _data_dir(args.data) / qrel, _data_dir(args.data) / crel  # or absolute
        for f in (qpath, cpath):
            if not f.exists():
                raise FileNotFoundError(f"{f} not found (see README, 'Data')")
    elif args.questions and args.corpus:
        qpath, cpath = Path(args.questions), Path(args.corpus)
    elif args.questions or args.corpus:
        given, other = ("--questions", "--corpus") if args.questions else \
            ("--corpus", "--questions")
        regular_file(args.questions or args.corpus, given)
        raise ValueError(f"{given} needs {other} (the questions and the passages they are "
                         "asked over); give both, or --dataset musique|hotpotqa")
    else:
        raise ValueError("give --dataset musique|hotpotqa, or both --questions and --corpus")
    # every input a regular file before anything hashes or reads it (a FIFO or /dev/zero
    # would never end)
    regular_file(qpath, "--questions" if not args.dataset else "the dataset's questions")
    regular_file(cpath, "--corpus" if not args.dataset else "the dataset's corpus")
    for f in args.extra_corpus or ():
        regular_file(f, "--extra-corpus")
    if args.openie:
        regular_file(args.openie, "--openie")
    overrides = dict(parse_setting(item) for item in args.set or [])
    if args.no_lexical:
        overrides["lexical"] = False
    client = _llm_client(args)
    index, extra = None, {}
    if args.index is not None:  # a built index: its embedder unless one is named
        if args.openie or args.openie_plain or args.lowercase or args.extractor != "auto" \
                or args.extra_corpus:
            raise ValueError("--index is built already: --openie, --lowercase, "
                             "--extra-corpus and --extractor choose how eval builds one")
        index = PropositionIndex.load(args.index)
        emb = _index_embedder(args, index)
    else:
        emb = _embedder(args)
        extra = dict(extractor=args.extractor, lowercase=args.lowercase,
                     openie_path=args.openie, extra_corpora=args.extra_corpus or ())
        if args.openie_plain:
            if not args.openie:
                raise ValueError("--openie-plain reads the --openie file: give one")
            extra["openie_plain"] = True
    report = run_eval(qpath, cpath, methods, embedder=emb, n=args.n,
                      show_progress=not args.quiet, dataset=args.dataset or "",
                      config=EviReformConfig(**overrides), selector_n=args.selector_n,
                      llm=client, reader=args.reader, max_workers=args.llm_workers or 1,
                      graph_metrics=args.graph_metrics, filter=_filter_arg(args.filter),
                      index=index, answer_recall=bool(args.answer_recall
                                                      or args.dataset in ANSWER_RECALL_SETS),
                      **extra)
    print(markdown_table(report) if args.markdown else format_table(report))
    if report.bootstrap:
        print()
        print(format_bootstrap(report, markdown=args.markdown))
    summary = _replay_summary(client)
    if summary:
        print(summary)
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_json(), indent=1))
        print(f"wrote {args.json}")
    if args.run_out:
        from ..evaluation.runner import write_runs
        files = write_runs(report, args.run_out)
        print(f"wrote {len(files)} run files to {args.run_out} (METHOD.trec, METHOD.jsonl)")
    if args.plot:
        from ..evaluation.plots import recall_curve
        print(f"wrote {recall_curve(report, args.plot)}")
    return 0


def _cmd_analyze(args: Any) -> int:
    from ..evaluation import DATASETS, run_eval
    from ..evaluation.analyses import ANALYSES, sensitivity_table

    qrel, crel = DATASETS[args.dataset]
    data = _data_dir(args.data)
    qpath, cpath = data / qrel, data / crel
    emb = _embedder(args)
    show = not args.quiet
    # --no-lexical: the analyses of the paper's dense-only method
    base = {"lexical": False} if args.no_lexical else {}
    if args.json and args.kind not in (*ANALYSES, "sensitivity"):
        raise ValueError(f"--json: the {args.kind} analysis prints its table only")
    if args.kind in ANALYSES:
        a = ANALYSES[args.kind]
        rep = run_eval(qpath, cpath, list(a.methods), embedder=emb, dataset=args.dataset,
                       show_progress=show, n=args.n, config=EviReformConfig(**base))
        idx, _, _ = cached_index(cpath, emb, show_progress=False)
        if args.json:  # the runs' figures, each method's metrics
            print(json.dumps({"analysis": args.kind, **rep.to_json()}, indent=1))
        else:
            print(a.table(rep, idx))
    elif args.kind == "sensitivity":
        runs: list[dict[str, Any]] = []

        def one(**over):
            r = run_eval(qpath, cpath, ["evireform"], embedder=emb, dataset=args.dataset,
                         show_progress=False, config=EviReformConfig(**base, **over),
                         n=args.n)
            runs.append({"settings": over, "metrics": r.methods["evireform"]})
            return r.methods["evireform"]
        table = sensitivity_table(one)
        print(json.dumps({"analysis": "sensitivity", "dataset": args.dataset, "runs": runs},
                         indent=1) if args.json else table)
    elif args.kind == "selector":
        from ..evaluation.learn_selector import selector_study
        print(selector_study(data, emb, Path(args.replies), config=EviReformConfig(**base)))
    elif args.kind == "growth":
        from ..evaluation.growth import index_growth
        index_growth(data, emb, out_png=args.png, n_steps=args.steps, n=args.n, show=show,
                     config=EviReformConfig(**base))
    return 0


def _cmd_bench(args: Any) -> int:
    # the thread pools wait as they do for a user: the library's default policy (none set
    # here), the same for ours and the peers'; a policy the user set (OMP_WAIT_POLICY) is
    # kept and recorded in the report's header
    from .. import bench

    log = (lambda *a: None) if args.json_only else (lambda m: print(m, file=sys.stderr))
    if args.targets:  # saved reports' ratios beside the targets: nothing is measured
        report: dict[str, Any] = {}
        for f in args.targets:  # later reports add their cases (a --only run beside a full)
            try:
                one = json.loads(Path(f).read_text())
            except json.JSONDecodeError as exc:
                raise ValueError(f"--targets {f}: not a bench JSON report ({exc})") from None
            if not isinstance(one, dict) or not isinstance(one.get("cases"), dict):
                raise ValueError(f"--targets {f}: not a bench JSON report (no 'cases')")
            report = {**one, **report, "cases": {**report.get("cases", {}), **one["cases"]}}
        print(bench.targets_table(report))
        return 0
    if args.serve:
        from ..bench import serve as serve_bench
        data = _data_dir(args.data)
        index_dir = args.serve_index
        if index_dir is None:  # the MuSiQue index with the default embedder, built once
            _, index_dir, _ = cached_index(data / "musique" / "musique_corpus.json",
                                           get_embedder("minilm"), show_progress=False)
        rep = serve_bench.run(index_dir, data / "musique" / "musique.json", n=args.serve_n,
                              log=log)
        print(serve_bench.table(rep))
        if args.json:
            Path(args.json).write_text(json.dumps({"serve": rep}, indent=1))
            print(f"wrote {args.json}")
        return 0
    if args.scale:
        from ..bench.scale import run_scale, scale_table
        rows = run_scale(args.scale_sizes, args.scale_dir, n_queries=args.scale_queries,
                         log=log)
        print(scale_table(rows))
        if args.json:
            Path(args.json).write_text(json.dumps({"scale": rows}, indent=1))
            print(f"wrote {args.json}")
        return 0
    def write(rep) -> None:  # after every case, atomically: a timeout keeps what was measured
        if args.json:
            tmp = Path(args.json).with_name(Path(args.json).name + ".part")
            tmp.write_text(json.dumps(rep, indent=1))
            tmp.replace(args.json)
    report = bench.run(quick=args.quick, data=_data_dir(args.data), log=log, only=args.only,
                       backend=args.backend, time_budget=args.time_budget, on_case=write)
    print(f"machine: {report['machine'].get('cpu', report['machine']['processor'])}, "
          f"{report['machine']['cpus']} cpus, numba threads {report['machine']['numba_threads']}"
          f", OpenMP waits {report['machine'].get('omp_wait_policy') or 'by default'}"
          + (f", device {report['machine']['device']}" if "device" in report["machine"] else ""))
    print(bench.table(report))
    if args.plot:
        from ..bench.plot import ratio_chart
        print(f"wrote {ratio_chart(report, args.plot)}", file=sys.stderr)
    if args.backend == "gpu":
        from ..bench.gpu_cases import targets
        print()
        print(targets(report))
    if args.json:
        write(report)
        print(f"wrote {args.json}")
    for f in report.get("failed", []):
        print(f"CASE FAILED: {f['group']}: {f['error']}", file=sys.stderr)
    if report.get("failed"):
        return 1
    if args.check:
        rerun = lambda groups: bench.run(  # noqa: E731
            quick=args.quick, data=_data_dir(args.data), log=log, only=groups,
            backend=args.backend)
        bench.remeasure_below_floor(report, rerun, log=log)
        for label, (first, second) in report.get("remeasured", {}).items():
            again = "not measured" if second is None else f"{second:.2f}"
            print(f"re-measured {label}: {first:.2f}, then {again}")
        if args.json and report.get("remeasured"):
            write(report)
        bad = bench.check(report)
        for b in bad:
            print(f"CHECK FAILED: {b}", file=sys.stderr)
        return 1 if bad else 0
    return 0


def add_eval_parser(sub: Any) -> None:
    ev = sub.add_parser("eval", help="evaluate methods on a question set in one run")
    ev.add_argument("--dataset", choices=("musique", "hotpotqa", "manpages", "pydoc",
                                          "pydoc-user", "readmes", "readmes-plain",
                                          "nodejs"),
                    help="read the dataset from --data (default ../shared/data); manpages, "
                         "pydoc and readmes: the real-documents development sets shipped "
                         "with the package (Debian manual pages, English and Chinese; the "
                         "Python standard library's documentation, pydoc-user: its questions "
                         "in a user's words; software READMEs in "
                         "Markdown, readmes-plain: the same read as plain text; Answer@K "
                         "added)")
    ev.add_argument("--answer-recall", action="store_true",
                    help="also report Answer@K: the question's answer string in one of the "
                         "top K passages (on for the real-documents sets)")
    ev.add_argument("--data", help="data folder (HippoRAG layout); default $EVIREFORM_DATA or "
                                   "../shared/data")
    ev.add_argument("--questions", help="questions file (MuSiQue or HotpotQA format)")
    ev.add_argument("--corpus", help="corpus file")
    ev.add_argument("--methods", default="dense,bm25,dense_prop,hipporag_ppr,evireform,"
                                         "reform_only,prop_only,base",
                    help="comma-separated methods or 'all'")
    _add_embedder_args(ev, batch=False)
    ev.add_argument("-n", type=_positive_int, default=None, help="only the first N questions")
    ev.add_argument("--extractor", choices=("auto", *EXTRACTORS), default="auto",
                    help="the LLM-free extractor the index is built with; auto: chosen by "
                         "the corpus's letter case (heuristic for cased text, phrases for "
                         "lower-cased, all-capitals or caseless scripts)")
    ev.add_argument("--filter", metavar="JSON",
                    help="evaluate on the passages matching this where clause or id list "
                         "(@FILE reads it): questions whose gold passages do not all match are "
                         "left out; baselines' rankings are cut to the matching passages")
    ev.add_argument("--index", metavar="INDEX_DIR",
                    help="evaluate on this saved index (evireform index CORPUS INDEX_DIR; its "
                         "passages must be the corpus file's) instead of building one; its "
                         "embedder unless --embedder names another")
    ev.add_argument("--openie", metavar="FILE",
                    help="build the index from this HippoRAG OpenIE file over the corpus "
                         "(one triple = one proposition; e.g. ../shared/data/musique/"
                         "musique_openie_gpt-3.5-turbo-1106.json) instead of --extractor")
    ev.add_argument("--openie-plain", action="store_true",
                    help="with --openie: the triples as the file has them (text 's r o', "
                         "entities s and o), without the title prefix, title entity and "
                         "named entities the default adds")
    ev.add_argument("--extra-corpus", action="append", metavar="FILE",
                    help="add this corpus's passages as distractors (repeatable; the "
                         "questions' gold passages stay those of --corpus/--dataset), e.g. "
                         "../shared/data/2wikimultihopqa/2wikimultihopqa_corpus.json")
    ev.add_argument("--lowercase", action="store_true",
                    help="run on lower-cased copies of the corpus and questions (written once "
                         "under the cache directory)")
    ev.add_argument("--json", help="write the report as JSON to this file")
    ev.add_argument("--run-out", metavar="DIR",
                    help="write each method's run to DIR: METHOD.trec (a TREC run that "
                         "ir_measures and trec_eval read) and METHOD.jsonl (per question: "
                         "the ranked passage ids, the residual queries, its metrics)")
    ev.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    ev.add_argument("--plot", metavar="FILE.png",
                    help="also draw recall@K (K = 1..20) per method as a PNG (extra 'eval')")
    ev.add_argument("--no-lexical", action="store_true",
                    help="EviReform's methods score with the embeddings alone, as the paper "
                         "(--set lexical=false; the evireform_dense method is the same in a "
                         "run with the default)")
    ev.add_argument("--set", action="append", metavar="KEY=VALUE",
                    help="override an EviReformConfig setting, e.g. --set beta=0.75 (repeatable)")
    ev.add_argument("--selector-n", type=_nonneg_int, default=4,
                    help="seeds the LLM-free selector takes (default 4; 0 = fill max_selected)")
    _add_quiet(ev)
    ev.add_argument("--reader", action="store_true",
                    help="answer each question with the LLM reader from each method's top 5 "
                         "passages and report F1/EM (needs an endpoint)")
    ev.add_argument("--graph-metrics", action="store_true",
                    help="add evidence-set EM/P/R/F1 and graph GM/GS/GED against MuSiQue's "
                         "question_decomposition (evireform.evaluation.graph_metrics)")
    _add_llm_args(ev)
    ev.set_defaults(func=_cmd_eval)


def add_analyze_parser(sub: Any) -> None:
    an = sub.add_parser("analyze", help="the paper's analyses as tables (Markdown)")
    an.add_argument("kind", choices=("ablation", "coverage", "types", "sensitivity", "growth",
                                     "selector"),
                    help="ablation / coverage / types: one eval run of the methods each needs; "
                         "sensitivity: the paper's grids; growth: distractors added in steps; "
                         "selector: an LLM-free selector fitted to the recorded LLM selections "
                         "of one set, evaluated on the other")
    an.add_argument("--no-lexical", action="store_true",
                    help="analyse EviReform as the paper has it, with dense scores only "
                         "(EviReformConfig(lexical=False); default: dense and lexical)")
    an.add_argument("--replies", default="../shared/llm-replies",
                    help="selector: the folder of recorded replies (hotpotqa.jsonl, musique.jsonl)")
    an.add_argument("--dataset", choices=("musique", "hotpotqa"), default="musique",
                    help="the dataset read from --data")
    an.add_argument("--data", help="data folder (default $EVIREFORM_DATA or ../shared/data)")
    _add_embedder_args(an, batch=False)
    an.add_argument("-n", type=_positive_int, default=None, help="only the first N questions")
    an.add_argument("--png", default="docs/index_growth.png",
                    help="growth: where to write the plot")
    an.add_argument("--steps", type=_positive_int, default=4, help="growth: number of steps")
    an.add_argument("--json", action="store_true",
                    help="print the figures as JSON (ablation, coverage, types: each method's "
                         "metrics; sensitivity: each grid point's settings and metrics)")
    _add_quiet(an)
    an.set_defaults(func=_cmd_analyze)


def add_llm_cache_parser(sub: Any) -> None:
    lc = sub.add_parser("llm-cache", help="export or import the LLM reply cache as JSONL")
    lc.add_argument("action", choices=("export", "import"),
                    help="export: the cache to FILE; import: FILE into the cache")
    lc.add_argument("file", help="JSONL file: {key, role, reply} or {key, content} per line")
    lc.add_argument("--cache", required=True, help="the SQLite reply cache (--llm-cache)")
    lc.add_argument("--force", action="store_true",
                    help="export: replace FILE when it exists")
    lc.add_argument("--json", action="store_true", help="print the result as JSON")
    lc.set_defaults(func=_cmd_llm_cache)


def add_bench_parser(sub: Any) -> None:
    be = sub.add_parser("bench", help="kernels and retrieval core side by side with peers")
    be.add_argument("--quick", action="store_true", help="small sizes (about a minute)")
    be.add_argument("--json", help="write the report as JSON to this file")
    be.add_argument("--plot", metavar="FILE.png",
                    help="also draw the ratio of every case as a PNG (extra 'eval')")
    be.add_argument("--check", action="store_true",
                    help="exit 1 when a speedup falls below its floor (evireform.bench.FLOORS) "
                         "in two measurements (a case under it is measured once more), a floor "
                         "names no case label, or a pair disagrees")
    be.add_argument("--data", help="data folder (default $EVIREFORM_DATA or ../shared/data)")
    be.add_argument("--only", action="append", metavar="CASE",
                    help="run only these case groups (repeatable): "
                         "propagate, propagate_batch, readout, cosine, hnsw, retrieve_core, "
                         "build, build_encoder (full runs), update, filter, limit, "
                         "lexical, user (fresh processes of the command: an update of one "
                         "file beside a cold query); with "
                         "--backend gpu: gpu_copy, "
                         "gpu_cosine, gpu_cosine_fp16, gpu_propagate, gpu_readout, "
                         "gpu_retrieve")
    be.add_argument("--backend", choices=("cpu", "gpu"), default="cpu",
                    help="gpu: each CuPy kernel against the numba kernel and the naive CuPy "
                         "peer, with the device's copy bandwidth (needs CuPy and a device)")
    be.add_argument("--time-budget", type=_positive_float, default=None, metavar="SECONDS",
                    help="skip the case groups that would start after this many seconds")
    be.add_argument("--scale", action="store_true",
                    help="the cost curve instead of the cases: build, disk, peak memory, load "
                         "and retrieve p50/p95 of synthetic memory-mapped indexes "
                         "(evireform.bench.scale; minutes to an hour)")
    be.add_argument("--scale-sizes", type=_sizes, default="100k,1M,3M,10M",
                    help="proposition counts for --scale, e.g. 100k,1M,3M,10M")
    be.add_argument("--scale-dir", default=None,
                    help="where --scale writes its indexes (default: the temp directory)")
    be.add_argument("--scale-queries", type=_positive_int, default=20,
                    help="questions timed per size")
    be.add_argument("--serve", action="store_true",
                    help="the service against in-process retrieval: latency and throughput at "
                         "concurrency 1, 8 and 32 for each query encoder, ready time, cold "
                         "`evireform query` wall time (evireform.bench.serve)")
    be.add_argument("--serve-index", default=None,
                    help="--serve: the index (default: MuSiQue with the default embedder, "
                         "built once into the cache)")
    be.add_argument("--serve-n", type=_positive_int, default=200,
                    help="--serve: MuSiQue questions used")
    be.add_argument("--targets", metavar="REPORT.json", action="append",
                    help="print the performance targets (evireform.bench.TARGETS) beside the "
                         "ratios of a report written with --json (repeatable: later reports "
                         "add their cases, e.g. an --only run beside a full run); measures "
                         "nothing")
    be.add_argument("--json-only", action="store_true", help=argparse.SUPPRESS)
    be.set_defaults(func=_cmd_bench)
