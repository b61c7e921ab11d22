"""The ``evireform`` command line."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from ._checks import loads as _json_loads
from .application import METHODS, apply_update, index_embedder, make_method
from .engine import PRECISIONS, make_engine, restrict


def _int_at_least(low: int, high: int | None = None, what: str | None = None):
    """argparse type: an integer >= ``low`` (and <= ``high``); ``what`` names it in the
    message (e.g. "a port number")."""
    want = what or (f"an integer >= {low}" if high is None else f"an integer in {low}..{high}")

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {want}; got {text!r}") from None
        if v < low or (high is not None and v > high):
            raise argparse.ArgumentTypeError(f"must be {want}; got {v}")
        return v
    return parse


_positive_int, _nonneg_int = _int_at_least(1), _int_at_least(0)
#: a TCP port
_port_number = _int_at_least(1, 65535, "a port number (1-65535)")


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number; got {text!r}") from None
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive finite number; got {text}")
    return v


def _sizes(text: str) -> tuple[int, ...]:
    """``100k,1M,3M`` -> (100000, 1000000, 3000000)."""
    out = []
    for part in str(text).split(","):
        part = part.strip()
        mult = {"k": 10**3, "m": 10**6, "b": 10**9}.get(part[-1:].lower(), 1)
        num = part[:-1] if mult > 1 else part
        try:
            v = int(float(num) * mult)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected sizes like 100k,1M; got {text!r}") \
                from None
        if v < 1:
            raise argparse.ArgumentTypeError(f"sizes must be positive; got {part!r}")
        out.append(v)
    return tuple(out)


def _nonneg_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0; got {text!r}") from None
    if not v >= 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0; got {text}")
    return v


_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def parse_setting(item: str) -> tuple[str, object]:
    """``KEY=VALUE`` for ``--set``: the key must be an EviReformConfig field; booleans accept
    true/false/1/0/yes/no/on/off only, numbers must parse, and the whole config is validated
    when it is built."""
    from .retriever import EviReformConfig
    key, sep, val = item.partition("=")
    fields = EviReformConfig.__dataclass_fields__
    if not sep:
        raise ValueError(f"--set {item!r}: expected KEY=VALUE")
    if key not in fields:
        raise ValueError(f"--set {item!r}: unknown setting {key!r}; settings are "
                         f"{', '.join(fields)}")
    cur = getattr(EviReformConfig(), key)
    low = val.strip().lower()
    if isinstance(cur, bool):
        if low not in _TRUE + _FALSE:
            raise ValueError(f"--set {item!r}: {key} is a boolean; use one of "
                             f"{'/'.join(_TRUE + _FALSE)}")
        return key, low in _TRUE
    try:
        return key, type(cur)(val)
    except ValueError:
        raise ValueError(f"--set {item!r}: {key} must be a {type(cur).__name__}") from None


def _check_index_target(out_dir, corpus, force: bool) -> None:
    """Before any work: refuse an output directory that is or holds the corpus, or that
    save() would refuse anyway (so a long build is not lost at the end)."""
    from .store import UnsafeTargetError, check_target
    out, src = Path(out_dir).resolve(), Path(corpus).resolve()
    if out == src or out in src.parents:
        raise UnsafeTargetError(f"{out_dir} is or contains the corpus {corpus}; write the index "
                                "to a directory of its own")
    check_target(out_dir, overwrite=force)


def _add_document_args(p) -> None:
    g = p.add_argument_group("documents (text and Markdown files, folders)")
    g.add_argument("--chunk-tokens", type=_positive_int, default=200,
                   help="tokens per chunk of a text file (the embedder's tokenizer)")
    g.add_argument("--chunk-overlap", type=_nonneg_int, default=30,
                   help="tokens of whole sentences repeated between consecutive chunks")
    g.add_argument("--include", action="append", metavar="GLOB",
                   help="in folders, only files matching GLOB (repeatable; default: "
                        "*.txt *.md *.markdown *.json *.jsonl *.ndjson)")
    g.add_argument("--exclude", action="append", metavar="GLOB",
                   help="in folders, skip files matching GLOB (repeatable)")
    g.add_argument("--skip-errors", action="store_true",
                   help="skip unreadable files (reported by name) instead of stopping")


def _read_paths(args, paths, embedder, whole: bool = False, roots=None):
    """Passages of the files and folders ``paths`` (:func:`evireform.documents.load_paths`),
    skipped files reported on stderr; ``whole=True`` returns the ``Loaded`` record."""
    from .documents import load_paths
    if args.chunk_overlap >= args.chunk_tokens:
        raise ValueError(f"--chunk-overlap ({args.chunk_overlap}) must be smaller than "
                         f"--chunk-tokens ({args.chunk_tokens})")
    loaded = load_paths(paths, chunk_tokens=args.chunk_tokens,
                        chunk_overlap=args.chunk_overlap, embedder=embedder,
                        include=args.include, exclude=args.exclude,
                        skip_errors=args.skip_errors, roots=roots)
    def shown(m):
        return m.encode("utf-8", "backslashreplace").decode("utf-8")
    for msg in loaded.warnings:
        print(f"warning: {shown(msg)}", file=sys.stderr)
    for _, msg in loaded.errors:
        print(f"skipped: {shown(msg)}", file=sys.stderr)
    if loaded.errors:
        print(f"{len(loaded.errors)} files skipped (--skip-errors)", file=sys.stderr)
    return loaded if whole else loaded.passages


def _cmd_index(args) -> int:
    from .index import PropositionIndex, arrays_equal, disk_bytes

    t0 = time.perf_counter()
    for src in args.paths:
        _check_index_target(args.out_dir, src, args.force)
    embedder = _embedder(args)
    loaded = _read_paths(args, args.paths, embedder, whole=True)
    passages = loaded.passages
    hnsw = {"auto": None, "on": True, "off": False}[args.hnsw]
    show = not args.quiet and not args.json
    if args.ray:
        if args.extractor not in ("heuristic", "llm"):
            raise SystemExit("evireform index --ray: --extractor must be 'heuristic' or 'llm'")
        from .distributed import LLMExtractorFactory, build_ray
        from .embed import spec_of
        factory = None
        if args.extractor == "llm":
            args.llm = True
            factory = LLMExtractorFactory(_llm_client(args).config,
                                          max_workers=args.llm_workers or 4)
        idx = build_ray(passages, spec_of(embedder), extractor=factory,
                        concurrency=args.ray_workers, num_gpus=args.num_gpus,
                        ray_address=args.ray_address,
                        embed_batch_size=args.batch_size, show_progress=show, hnsw=hnsw)
    elif args.extractor in ("heuristic", "phrases", "llm"):
        extractor = None
        if args.extractor == "phrases":
            from .extract import PhraseExtractor
            extractor = PhraseExtractor()
        elif args.extractor == "llm":
            from .llm import LLMExtractor
            args.llm = True
            extractor = LLMExtractor(_llm_client(args), max_workers=args.llm_workers or 4)
        idx = PropositionIndex.build(passages, embedder, extractor=extractor,
                                     batch_size=args.batch_size, show_progress=show, hnsw=hnsw)
        if args.extractor == "llm":
            idx.meta["extraction_fallbacks"] = _extraction_fallbacks(extractor)
            if _fallbacks_refused(args, "index", extractor, len(passages)):
                return 3
    else:
        openie = Path(args.extractor)
        if not openie.is_file() or openie.stat().st_size == 0:
            why = ("is empty or not a regular file" if openie.exists() else
                   "is not a file that exists")
            raise ValueError(f"--extractor must be 'heuristic', 'phrases', 'llm' or a "
                             f"HippoRAG OpenIE JSON file; {openie} {why}")
        idx = PropositionIndex.from_openie(openie, passages, embedder,
                                           batch_size=args.batch_size, show_progress=show,
                                           hnsw=hnsw)
    if args.precision == "int8":
        idx.quantize("int8")
    if loaded.sources:  # which passages are which file's chunks (update --add keys on it)
        from .documents import DOCUMENTS
        idx.meta[DOCUMENTS] = {src: {**loaded.files[src], "chunks": n}
                               for src, n in loaded.sources.items() if n}
    out = idx.save(args.out_dir, overwrite=args.force)
    reloaded = PropositionIndex.load(out)
    same = arrays_equal(idx, reloaded)
    if not same:
        print(f"evireform index: error: the index saved at {out} does not reload identically "
              "(its arrays or strings differ from what was built); it may be unusable: "
              "run evireform verify on it", file=sys.stderr)
    stats = idx.stats()
    stats.update({"extractor": idx.meta.get("extractor"), "bytes_on_disk": disk_bytes(out),
                  "path": str(out), "reload_identical": same,
                  "seconds": round(time.perf_counter() - t0, 2)})
    if args.json:
        print(json.dumps(stats, indent=1))
    else:
        width = max(len(k) for k in stats)
        for k, v in stats.items():
            print(f"{k:<{width}}  {v:,}" if isinstance(v, int) and not isinstance(v, bool)
                  else f"{k:<{width}}  {v}")
    return 0 if same else 1


def _add_llm_args(p) -> None:
    g = p.add_argument_group("LLM roles (any OpenAI-compatible endpoint)")
    g.add_argument("--llm", action="store_true",
                   help="use the LLM selector, reformulator and controller (LLM-free fallbacks)")
    g.add_argument("--llm-base-url", help="endpoint, e.g. http://127.0.0.1:8000/v1 "
                                          "(default $EVIREFORM_LLM_BASE_URL, else OpenAI)")
    g.add_argument("--llm-model", help="model name (default $EVIREFORM_LLM_MODEL)")
    g.add_argument("--llm-key-env", help="environment variable holding the API key "
                                         "(default $EVIREFORM_LLM_KEY_ENV or OPENAI_API_KEY)")
    g.add_argument("--llm-cache", help="SQLite file caching validated replies")
    g.add_argument("--llm-timeout", type=_positive_float, default=60.0,
                   help="seconds per HTTP read (connect, first byte, each chunk)")
    g.add_argument("--llm-deadline", type=_positive_float, default=None,
                   help="wall-clock seconds for one role call, retries and slow bodies "
                        "included; after it the LLM-free role answers (default "
                        "evireform.llm.DEFAULT_DEADLINE = 120)")
    g.add_argument("--llm-retries", type=_nonneg_int, default=3)
    g.add_argument("--llm-max-tokens", type=_positive_int, default=512,
                   help="cap on generated tokens per reply")
    g.add_argument("--llm-offline", action="store_true",
                   help="answer from --llm-cache only; misses go to --llm-pending and the "
                        "LLM-free role answers them")
    g.add_argument("--llm-pending", help="JSONL file collecting offline misses")
    g.add_argument("--llm-replay", action="append", metavar="FILE",
                   help="replay recorded replies ({key, reply} JSONL, e.g. "
                        "../shared/llm-replies/hotpotqa.jsonl; repeatable): imported into a "
                        "temporary cache, run offline, misses reported (implies --llm; the "
                        "model defaults to the file's)")
    g.add_argument("--llm-workers", type=_positive_int, default=None,
                   help="role calls in flight at once across the questions (default 1; "
                        "index --extractor llm: 4)")
    g.add_argument("--llm-context", type=_positive_int, default=8192,
                   help="the model's context in tokens; prompts are cut to fit it (the trace "
                        "says how many candidates or passages were cut)")
    g.add_argument("--strict-llm", action="store_true",
                   help="exit 3 when any LLM role fell back to its LLM-free implementation "
                        "(index/update: nothing is saved)")
    g.add_argument("--llm-rpm", type=_nonneg_int, default=0, help="requests per minute (0: no limit)")
    g.add_argument("--llm-tpm", type=_nonneg_int, default=0,
                   help="prompt tokens per minute (0: no limit)")


def _replay_setup(args) -> dict:
    """--llm-replay: offline, answered from the recorded replies (by key, else by content);
    the model defaults to the one the first file names."""
    from .llm import read_reply_records
    model = None
    for f in args.llm_replay:
        if not Path(f).is_file():
            raise FileNotFoundError(f"--llm-replay: {f} not found")
        model = model or next((r.get("model") for r in read_reply_records(f)), None)
    return dict(replay_paths=tuple(args.llm_replay), offline=True,
                pending_path=args.llm_pending, model=args.llm_model or model)


def _llm_client(args):
    if not (getattr(args, "llm", False) or getattr(args, "reader", False)
            or getattr(args, "llm_replay", None)):
        return None
    from .llm import LLMClient, LLMConfig
    over = {k: v for k, v in dict(base_url=args.llm_base_url, model=args.llm_model,
                                  api_key_env=args.llm_key_env, cache_path=args.llm_cache,
                                  timeout=args.llm_timeout, max_retries=args.llm_retries,
                                  deadline=args.llm_deadline,
                                  max_tokens=args.llm_max_tokens,
                                  context_tokens=args.llm_context,
                                  requests_per_minute=args.llm_rpm,
                                  tokens_per_minute=args.llm_tpm,
                                  offline=args.llm_offline or None,
                                  pending_path=args.llm_pending).items() if v is not None}
    if getattr(args, "llm_replay", None):
        args.llm = True
        over.update(_replay_setup(args))
    return LLMClient(LLMConfig.from_env(**over))


def _replay_summary(client) -> str | None:
    """One line on what a replay hit and missed (None when not offline)."""
    if client is None or not client.config.offline:
        return None
    hits = sum(u.cache_hits for u in client.usage.values())
    content = sum(u.content_hits for u in client.usage.values())
    misses = sum(u.misses for u in client.usage.values())
    where = (f"; misses written to {client.config.pending_path}"
             if misses and client.config.pending_path else "")
    return (f"offline: {hits} requests answered by key, {content} by content (recorded request "
            f"with the same question and candidates in another order), {misses} missed "
            f"(answered by the LLM-free role){where}")


def _add_embedder_args(p, batch: bool = True) -> None:
    p.add_argument("--embedder", default="minilm",
                   help="minilm (all-MiniLM-L6-v2, the default), st:PATH_OR_NAME (a local "
                        "sentence-transformers model), openai:MODEL@BASE_URL (an "
                        "OpenAI-compatible embeddings endpoint) or hashing-DIM")
    p.add_argument("--embed-deadline", type=_positive_float, default=None,
                   help="openai: embedder: wall-clock seconds one embedding call may take, "
                        "retries included (default 120)")
    _add_encoder_arg(p)
    p.add_argument("--device", default=None, help="sentence-transformers device, e.g. cuda")
    p.add_argument("--dtype", default=None, help="sentence-transformers dtype, e.g. float16")
    p.add_argument("--query-prompt", default=None,
                   help="prefix for questions and residual queries (asymmetric models)")
    p.add_argument("--document-prompt", default=None, help="prefix for propositions")
    if batch:
        p.add_argument("--batch-size", type=_positive_int, default=64,
                       help="embedding batch size")


def _embedder(args):
    from .embed import get_embedder
    return get_embedder(args.embedder, device=args.device, dtype=args.dtype,
                        batch_size=getattr(args, "batch_size", None),
                        query_prompt=args.query_prompt, document_prompt=args.document_prompt,
                        deadline=args.embed_deadline, encoder=getattr(args, "encoder", "auto"))


def _index_embedder(args, idx):
    """The embedder for a saved index (:func:`evireform.application.index_embedder`): the
    user's ``--embedder`` if given, else the one the index records."""
    return index_embedder(idx, args.embedder, device=args.device,
                          encoder=getattr(args, "encoder", "auto"), dtype=args.dtype,
                          batch_size=getattr(args, "batch_size", None),
                          query_prompt=args.query_prompt, document_prompt=args.document_prompt,
                          deadline=args.embed_deadline)


def _cmd_update(args) -> int:
    """Add and/or delete passages of a saved index without rebuilding it, then save it back
    atomically (the previous index stays until the new one is in place).  Every input is
    read before the index's lock is taken (a slow or blocked input never holds it); the lock
    is then held from load to save, so concurrent updates queue instead of losing each
    other.  The index is fully verified before it is rewritten (a save would otherwise
    stamp data nobody checked)."""
    from .documents import document_roots
    from .index import PropositionIndex

    if not args.add and not args.delete:
        raise ValueError("give --add FILE and/or --delete IDS_FILE")
    t0 = time.perf_counter()
    ids = loaded = None
    if args.delete:
        from ._io import read_text_file
        text = read_text_file(args.delete, "--delete")
        ids = [l.strip() for l in text.splitlines() if l.strip()]
    if args.add and not Path(args.add).exists():
        raise ValueError(f"--add {args.add}: no such file or folder")
    _check_update_target(args)
    peek = PropositionIndex.load(args.index_dir)  # the embedder and the folder roots
    emb = _index_embedder(args, peek) if args.add else None
    if args.add:  # chunked with the index's own embedder's tokenizer, as at build time
        loaded = _read_paths(args, [args.add], emb, whole=True, roots=document_roots(peek))
    extractor = args.extractor
    if args.add and args.extractor == "llm":
        from .llm import LLMExtractor
        args.llm = True
        extractor = LLMExtractor(_llm_client(args), max_workers=args.llm_workers or 4)
    del peek
    up = apply_update(args.index_dir, delete=ids, add=loaded, embedder=emb,
                      upsert=args.upsert, extractor=extractor, show_progress=not args.quiet,
                      before_save=lambda u: not _fallbacks_refused(
                          args, "update", u.extractor, len(loaded.passages) if loaded else 0))
    if not up.saved:
        return 3
    idx, before, changes = up.index, up.before, up.changes
    parts = [f"{k} {len(v):,}" for k, v in changes.items() if v]
    print(f"{args.index_dir}: passages {before[0]:,} -> {idx.n_passages:,}, propositions "
          f"{before[1]:,} -> {idx.n_props:,} in {time.perf_counter() - t0:.2f} s"
          + (f" ({', '.join(parts)})" if parts else ""))
    dups = changes.get("duplicates")
    if dups:
        print(f"{len(dups):,} passages were already in the index with the same content and "
              "were skipped", file=sys.stderr)
    return 0


def _check_update_target(args) -> None:
    """``update X --add X``, or an index directory that is not one: said in those words."""
    from .store import looks_like_index
    ix = Path(args.index_dir)
    if args.add and os.path.realpath(args.add) == os.path.realpath(ix):
        raise ValueError(f"--add {args.add} is the index itself; give the files or folder "
                         "to add")
    if not ix.is_dir():
        raise ValueError(f"{ix}: no index there (not a directory); build one with "
                         "evireform index")
    if not looks_like_index(ix):
        raise ValueError(f"{ix}: not an evireform index (no readable manifest.json of "
                         "format 'evireform-index')")


def _extraction_fallbacks(extractor) -> int:
    """Passages an LLM extractor handed to its LLM-free fallback (0 for other extractors)."""
    return int(getattr(extractor, "fallbacks", 0) or 0)


def _fallbacks_refused(args, command: str, extractor, n: int) -> bool:
    """Warn when the LLM extractor fell back; True (nothing is saved) under --strict-llm."""
    fell_back = _extraction_fallbacks(extractor)
    if not fell_back:
        return False
    print(f"warning: {fell_back:,} of {n:,} passages were extracted by the LLM-free extractor "
          "because the LLM failed (meta.extraction_fallbacks in the manifest)", file=sys.stderr)
    if getattr(args, "strict_llm", False):
        print(f"evireform {command}: --strict-llm: not saved", file=sys.stderr)
        return True
    return False


def _cmd_llm_cache(args) -> int:
    from ._io import Outputs
    from .llm import ReplyCache
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
        print(f"exported {n} replies to {args.file}")
    else:
        if not Path(args.file).is_file():
            raise FileNotFoundError(f"{args.file}: no such replies file")
        if cache_path.exists() and os.path.samefile(cache_path, args.file):
            raise ValueError(f"{args.file} is the cache itself")
        cache = ReplyCache(str(cache_path))
        print(f"imported {cache.import_jsonl(args.file)} replies from {args.file}")
    return 0


def _data_dir(arg) -> Path:
    import os
    return Path(arg or os.environ.get("EVIREFORM_DATA", "../shared/data"))


def _cmd_eval(args) -> int:
    from .evaluation import (DATASETS, format_bootstrap, format_table, markdown_table,
                             parse_methods, run_eval)
    from .extract import make_extractor

    methods = parse_methods(args.methods)
    if args.dataset:
        qrel, crel = DATASETS[args.dataset]
        qpath, cpath = _data_dir(args.data) / qrel, _data_dir(args.data) / crel
    elif args.questions and args.corpus:
        qpath, cpath = Path(args.questions), Path(args.corpus)
    else:
        raise ValueError("give --dataset musique|hotpotqa, or both --questions and --corpus")
    for f in (qpath, cpath):
        if not f.is_file():
            raise FileNotFoundError(f"{f} not found (see README, 'Data')")
    from .retriever import EviReformConfig
    overrides = dict(parse_setting(item) for item in args.set or [])
    client = _llm_client(args)
    report = run_eval(qpath, cpath, methods, embedder=_embedder(args), n=args.n,
                      show_progress=not args.quiet, dataset=args.dataset or "",
                      config=EviReformConfig(**overrides), selector_n=args.selector_n,
                      llm=client, reader=args.reader, max_workers=args.llm_workers or 1,
                      graph_metrics=args.graph_metrics,
                      extractor=make_extractor(args.extractor), lowercase=args.lowercase,
                      filter=_filter_arg(args.filter))
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
    return 0


def _cmd_analyze(args) -> int:
    from .evaluation import DATASETS, run_eval
    from .evaluation.analyses import ANALYSES, sensitivity_table

    qrel, crel = DATASETS[args.dataset]
    data = _data_dir(args.data)
    qpath, cpath = data / qrel, data / crel
    emb = _embedder(args)
    show = not args.quiet
    if args.kind in ANALYSES:
        a = ANALYSES[args.kind]
        rep = run_eval(qpath, cpath, list(a.methods), embedder=emb, dataset=args.dataset,
                       show_progress=show, n=args.n)
        from .cache import cached_index
        idx, _, _ = cached_index(cpath, emb, show_progress=False)
        print(a.table(rep, idx))
    elif args.kind == "sensitivity":
        from .retriever import EviReformConfig

        def one(**over):
            r = run_eval(qpath, cpath, ["evireform"], embedder=emb, dataset=args.dataset,
                         show_progress=False, config=EviReformConfig(**over), n=args.n)
            return r.methods["evireform"]
        print(sensitivity_table(one))
    elif args.kind == "selector":
        from .evaluation.learn_selector import selector_study
        print(selector_study(data, emb, Path(args.replies)))
    elif args.kind == "growth":
        from .evaluation.growth import index_growth
        index_growth(data, emb, out_png=args.png, n_steps=args.steps, n=args.n, show=show)
    return 0


def read_questions(path) -> list[tuple[str, str]]:
    """(id, question) pairs from JSONL records with ``question`` (and ``id``/``_id``), a JSON
    list of such records (the MuSiQue/HotpotQA files), or a text file with one question per
    line; ids default to the line number."""
    out = []
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"--questions {path}: is a directory; give a file")
    from ._io import read_text_file
    text = read_text_file(path, "--questions")
    if text.lstrip().startswith("["):  # a JSON list (the MuSiQue / HotpotQA question files)
        try:
            recs = _json_loads(text, str(path))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not valid JSON ({exc})") from None
        for n, rec in enumerate(recs, 1):
            q = rec if isinstance(rec, str) else (rec.get("question")
                                                   if isinstance(rec, dict) else None)
            if not isinstance(q, str) or not q.strip():
                raise ValueError(f"{path}: record {n} has no 'question' string")
            qid = str(n) if isinstance(rec, str) else str(rec.get("id", rec.get("_id", n)))
            out.append((qid, q))
        if not out:
            raise ValueError(f"{path}: no questions")
        return out
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        if line.startswith("{"):
            try:
                rec = _json_loads(line, f"{path}:{n}")
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{n}: not a JSON record ({exc})") from None
            q = rec.get("question") if isinstance(rec, dict) else None
            if not isinstance(q, str) or not q.strip():
                raise ValueError(f"{path}:{n}: the record has no 'question' string")
            out.append((str(rec.get("id", rec.get("_id", n))), q))
        else:
            out.append((str(n), line))
    if not out:
        raise ValueError(f"{path}: no questions")
    return out


def _filter_arg(text):
    """``--filter``: JSON, or ``@FILE`` holding it; checked (:func:`compile_filter`)."""
    if text is None:
        return None
    from .filters import compile_filter
    if text.startswith("@"):
        from ._io import read_text_file
        try:
            text = read_text_file(text[1:], "--filter", limit=64 << 20)
        except OSError as exc:
            raise ValueError(f"--filter {text}: cannot read the file ({exc})") from None
    try:
        return compile_filter(text)
    except ValueError as exc:
        raise ValueError(f"--filter: {exc}") from None


def _cmd_query(args) -> int:
    from .index import PropositionIndex

    if (args.question is None) == (args.questions is None):
        raise ValueError("give one question, or --questions FILE")
    from .kernels import warm_up_in_background
    if args.questions is not None:  # the questions first: a bad file fails before any load
        qs = read_questions(args.questions)
    flt = _filter_arg(args.filter)
    idx = PropositionIndex.load(args.index_dir)
    engine = make_engine(idx, args.backend, precision=args.precision)
    # a key no passage has, or an unknown id: refused before any query (and kept by the
    # engine the question then runs on)
    restrict(engine, flt)
    args.filter = flt
    # the kernels load (numba, about a second cold) while the encoder loads; main() joins
    # the thread on every exit path
    warm_up_in_background(args.questions is not None)
    emb = _index_embedder(args, idx)
    client = _llm_client(args)
    retriever = make_method(args.method, idx, emb, llm=client, engine=engine,
                            max_workers=args.llm_workers or 1)
    if args.questions is not None:
        return _batch_query(args, retriever, qs)
    res = retriever.retrieve(args.question, args.k, filter=flt)
    summary = _replay_summary(client)
    if summary:
        print(summary, file=sys.stderr)
    if args.json:
        print(json.dumps(res.to_dict(graph=args.graph), indent=1))
        return _strict_status(args, [res])
    print(f"Q: {args.question}")
    for q in getattr(res.trace, "residual_queries", []):
        print(f"   residual query: {q}")
    if hasattr(res.trace, "format"):  # Hi-Q's tree, BGR's chains
        print(res.trace.format(idx.passages))
    if not res.passages:
        print("   (no passage matches the filter)")
    for r, p in enumerate(res.passages, 1):
        md = f"  {json.dumps(p.metadata, ensure_ascii=False):.120}" if p.metadata else ""
        print(f"{r:>3}. {p.score:.4f}  {p.title}  [{p.id}]{md}")
    if args.graph:
        print("evidence graph (how each passage was reached):")
        print(res.evidence_graph().format())
    return _strict_status(args, [res])


def _fell_back(res) -> bool:
    return any(":fallback" in e or e.endswith(":raised")
               for e in getattr(res.trace, "role_events", []) or [])


def _strict_status(args, results, n_fell_back: int | None = None) -> int:
    """3 when --strict-llm is set and an LLM role fell back for any of ``results`` (or for
    ``n_fell_back`` of them, counted as they came)."""
    n = sum(map(_fell_back, results)) if n_fell_back is None else n_fell_back
    if n and getattr(args, "strict_llm", False):
        print(f"evireform query: --strict-llm: an LLM role fell back for {n} of "
              f"{len(results)} questions (see role_events)", file=sys.stderr)
        return 3
    return 0


def trec_docid(pid: str) -> str:
    """A passage id as a TREC docid: whitespace, control characters and ``%`` are
    percent-encoded, so the docid is one token and distinct ids stay distinct."""
    from urllib.parse import quote
    return quote(pid, safe="".join(chr(c) for c in range(33, 127) if chr(c) != "%"))


def trec_scores(scores) -> list[float]:
    """Scores for a TREC run, strictly decreasing down the ranking, so that trec_eval-family
    tools (which re-sort by score, ties by docid) keep evireform's order: each score in full
    float64 precision, and where a passage ties the one above it (the zero-score fill, equal
    sums) it is written one ulp below it (``numpy.nextafter``)."""
    import numpy as np
    out: list[float] = []
    for s in map(float, scores):
        if out and s >= out[-1]:
            s = float(np.nextafter(out[-1], -np.inf))
        out.append(s)
    return out


def _batch_query(args, retriever, qs) -> int:
    """Many questions in chunks of --batch (each chunk one retrieve_many): JSONL results to
    --out (or stdout), a TREC run file with --trec, and a summary line on stderr.  Both
    outputs are checked and opened before the first question (never an input, never each
    other) and put in place only when every question is done."""
    import numpy as np
    from ._io import Outputs
    show = not args.quiet
    bar = None
    with Outputs({"--out": args.out, "--trec": args.trec},
                 inputs=[args.questions, *Path(args.index_dir).glob("*")]) as files:
        out = files.get("--out", sys.stdout)
        trec = files.get("--trec")
        if show:
            from tqdm.auto import tqdm
            bar = tqdm(total=len(qs), desc="query", unit="question", file=sys.stderr)
        if retriever.embedder is not None:  # load the model before the clock starts
            from .embed import encode_queries
            encode_queries(retriever.embedder, ["warm-up"])
        lat: list[float] = []
        fell_back = 0
        t0 = time.perf_counter()
        try:
            for lo in range(0, len(qs), args.batch):
                chunk = qs[lo:lo + args.batch]
                t = time.perf_counter()
                results = retriever.retrieve_many([q for _, q in chunk], args.k,
                                                  filter=args.filter)
                lat.append(time.perf_counter() - t)  # a question waits for its batch
                fell_back += sum(map(_fell_back, results))
                for (qid, _), res in zip(chunk, results):
                    out.write(json.dumps(res.to_dict(graph=args.graph, id=qid),
                                         ensure_ascii=False) + "\n")
                    if trec is not None:
                        for r, (p, sc) in enumerate(zip(res.passages, trec_scores(
                                [p.score for p in res.passages])), 1):
                            trec.write(f"{trec_docid(qid)} Q0 {trec_docid(p.id)} {r} "
                                       f"{sc!r} {args.run_name}\n")
                if bar is not None:
                    bar.update(len(chunk))
        finally:
            if bar is not None:
                bar.close()
    total = time.perf_counter() - t0
    p50, p95 = np.percentile(lat, [50, 95])
    print(f"{len(qs)} questions in {total:.2f} s: {len(qs) / total:.1f} questions/s; "
          f"{len(lat)} batches of up to {args.batch}, time per batch p50 {p50 * 1e3:.1f} ms, "
          f"p95 {p95 * 1e3:.1f} ms (each question's answer waits for its whole batch)",
          file=sys.stderr)
    return _strict_status(args, qs, fell_back)


def _cmd_verify(args) -> int:
    """The full verification tier (evireform.store), then a new stamp: what to run after
    copying or downloading an index (a load would run it once anyway).  Says whether the
    stamp was written (a read-only directory cannot take one)."""
    from .index import PropositionIndex
    from .store import STAMP

    def seen():
        try:
            st = (Path(args.index_dir) / STAMP).stat()
            return st.st_ino, st.st_mtime_ns, st.st_size
        except OSError:
            return None
    t0 = time.perf_counter()
    before = seen()
    idx = PropositionIndex.load(args.index_dir, verify="full")
    took = time.perf_counter() - t0
    wrote = seen() not in (None, before)
    t1 = time.perf_counter()
    PropositionIndex.load(args.index_dir)
    fast = time.perf_counter() - t1
    tail = (f"stamped: later loads take the fast tier ({fast:.2f} s)" if wrote else
            "no stamp written (the directory is not writable); a later load took "
            f"{fast:.2f} s")
    print(f"{args.index_dir}: verified ({idx.n_passages:,} passages, {idx.n_props:,} "
          f"propositions, {idx.n_entities:,} entities): checksums, arrays, derived terms, "
          f"embedding norms, texts" + (", HNSW graph" if idx.hnsw is not None else "")
          + f" in {took:.2f} s; {tail}")
    return 0


def _cmd_serve(args) -> int:
    """``evireform serve``: the index, the embedder and the LLM roles loaded once, behind
    HTTP (:mod:`evireform.service`)."""
    from .index import PropositionIndex
    from .service import RetrievalService, serve
    key = None
    if args.api_key_env:
        key = os.environ.get(args.api_key_env)
        if not key:
            raise ValueError(f"--api-key-env {args.api_key_env}: the variable is not set or "
                             "empty")
    if args.host not in ("127.0.0.1", "localhost", "::1") and key is None:
        print(f"warning: serving on {args.host} without --api-key-env: anyone who can reach "
              "it can query and update the index", file=sys.stderr)
    idx = PropositionIndex.load(args.index_dir)
    emb = _index_embedder(args, idx)
    client = _llm_client(args)
    if args.max_wait_ms > 1000:
        raise ValueError(f"--max-wait-ms must be at most 1000 (one second); got "
                         f"{args.max_wait_ms:g}")
    svc = RetrievalService(args.index_dir, emb, llm=client, index=idx,
                           max_batch=args.max_batch, max_wait=args.max_wait_ms / 1e3,
                           max_queue=args.max_queue)
    print(f"evireform serve: {args.index_dir} on http://{args.host}:{args.port} "
          f"(docs at /docs)", file=sys.stderr)
    serve(svc, host=args.host, port=args.port, api_key=key,
          header_timeout=args.header_timeout, max_connections=args.max_connections)
    return 0


def _cmd_bench(args) -> int:
    from . import bench

    log = (lambda *a: None) if args.json_only else (lambda m: print(m, file=sys.stderr))
    if args.serve:
        from .bench import serve as serve_bench
        data = _data_dir(args.data)
        index_dir = args.serve_index
        if index_dir is None:  # the MuSiQue index with the default embedder, built once
            from .cache import cached_index
            from .embed import get_embedder
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
        from .bench.scale import run_scale, scale_table
        rows = run_scale(args.scale_sizes, args.scale_dir, n_queries=args.scale_queries,
                         log=log)
        print(scale_table(rows))
        if args.json:
            Path(args.json).write_text(json.dumps({"scale": rows}, indent=1))
            print(f"wrote {args.json}")
        return 0
    def write(rep):  # after every case, atomically: a timeout keeps what was measured
        if args.json:
            tmp = Path(args.json).with_name(Path(args.json).name + ".part")
            tmp.write_text(json.dumps(rep, indent=1))
            tmp.replace(args.json)
    report = bench.run(quick=args.quick, data=_data_dir(args.data), log=log, only=args.only,
                       backend=args.backend, time_budget=args.time_budget, on_case=write)
    print(f"machine: {report['machine'].get('cpu', report['machine']['processor'])}, "
          f"{report['machine']['cpus']} cpus, numba threads {report['machine']['numba_threads']}"
          + (f", device {report['machine']['device']}" if "device" in report["machine"] else ""))
    print(bench.table(report))
    if args.backend == "gpu":
        from .bench.gpu_cases import targets
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
        bad = bench.check(report)
        for b in bad:
            print(f"CHECK FAILED: {b}", file=sys.stderr)
        return 1 if bad else 0
    return 0


def _add_encoder_arg(p) -> None:
    p.add_argument("--encoder", choices=("auto", "onnx", "onnx-int8", "torch"), default="auto",
                   help="how sentence-transformers embedders embed questions: onnx (ONNX "
                        "Runtime, exported once and cached; no torch on the query path), "
                        "onnx-int8 (its int8 copy: faster, not equal), torch, or auto = onnx "
                        "when onnxruntime is installed")


def _add_index_embedder_args(p) -> None:
    p.add_argument("--embedder", default=None,
                   help="the embedder, when not the one the index records; an index never "
                        "chooses a remote endpoint by itself, so an index built with "
                        "openai:MODEL@BASE_URL needs that spec here")
    p.add_argument("--embed-deadline", type=_positive_float, default=None,
                   help="openai: embedder: seconds one embedding call may take (default 120)")
    _add_encoder_arg(p)
    for name in ("dtype", "query_prompt", "document_prompt"):
        p.set_defaults(**{name: None})


def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    p = argparse.ArgumentParser(prog="evireform", description=__doc__)
    p.add_argument("--version", action="version", version=f"evireform {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    ix = sub.add_parser("index", help="build, save and verify an index over a corpus file")
    ix.add_argument("paths", nargs="+", metavar="PATH",
                    help="what to index: corpus files (JSON: a list of {title, text, ...} or "
                         "title -> sentences; JSONL), text and Markdown files (chunked), or "
                         "folders of them (evireform.documents)")
    ix.add_argument("out_dir", help="index directory to write (an existing evireform index "
                                    "there is replaced atomically; anything else is refused)")
    ix.add_argument("--force", action="store_true",
                    help="replace OUT_DIR even when it is a directory that is not an "
                         "evireform index (its contents are deleted)")
    ix.add_argument("--extractor", default="heuristic",
                    help="'heuristic' (LLM-free, capitalised names), 'phrases' (LLM-free, "
                         "corpus phrases: lower-case text, German, Chinese), 'llm' (the LLM "
                         "extractor; see the LLM options) or the path of a HippoRAG OpenIE "
                         "JSON file (one triple = one proposition)")
    _add_document_args(ix)
    _add_embedder_args(ix)
    ix.add_argument("--precision", choices=("float32", "int8"), default="float32",
                    help="int8: also store int8 codes of the embeddings; exact search scans "
                         "them (a quarter of the bytes) and re-scores a margin in float32, "
                         "returning the same top-k")
    ix.add_argument("--hnsw", choices=("auto", "on", "off"), default="auto",
                    help="build HNSW: auto = at or above kernels.config.EXACT_SEARCH_MAX")
    ix.add_argument("--json", action="store_true", help="print the statistics as JSON")
    ix.add_argument("--quiet", action="store_true", help="no progress bars")
    g = ix.add_argument_group("distributed build (extra 'ray'; evireform.distributed)")
    g.add_argument("--ray", action="store_true",
                   help="extract and embed in a Ray Data pipeline; the same index as without")
    g.add_argument("--ray-address", default=None,
                   help="'auto' for a running cluster (default: a local Ray instance)")
    g.add_argument("--ray-workers", type=_positive_int, default=2,
                   help="embedding actors (a local Ray instance gets the machine's CPUs)")
    g.add_argument("--num-gpus", type=_nonneg_float, default=0,
                   help="GPUs per embedding actor (embeds on cuda when > 0)")
    _add_llm_args(ix)
    ix.set_defaults(func=_cmd_index)

    ev = sub.add_parser("eval", help="evaluate methods on a question set in one run")
    ev.add_argument("--dataset", choices=("musique", "hotpotqa"),
                    help="read the dataset from --data (default ../shared/data)")
    ev.add_argument("--data", help="data folder (HippoRAG layout); default $EVIREFORM_DATA or "
                                   "../shared/data")
    ev.add_argument("--questions", help="questions file (MuSiQue or HotpotQA format)")
    ev.add_argument("--corpus", help="corpus file")
    ev.add_argument("--methods", default="dense,bm25,dense_prop,hipporag_ppr,evireform,"
                                         "reform_only,prop_only,base",
                    help="comma-separated methods or 'all'")
    _add_embedder_args(ev, batch=False)
    ev.add_argument("-n", type=_positive_int, default=None, help="only the first N questions")
    ev.add_argument("--extractor", choices=("heuristic", "phrases"), default="heuristic",
                    help="the LLM-free extractor the index is built with")
    ev.add_argument("--filter", metavar="JSON",
                    help="evaluate on the passages matching this where clause or id list "
                         "(@FILE reads it): questions whose gold passages do not all match are "
                         "left out; baselines' rankings are cut to the matching passages")
    ev.add_argument("--lowercase", action="store_true",
                    help="run on lower-cased copies of the corpus and questions (written once "
                         "under the cache directory)")
    ev.add_argument("--json", help="write the report as JSON to this file")
    ev.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    ev.add_argument("--set", action="append", metavar="KEY=VALUE",
                    help="override an EviReformConfig setting, e.g. --set beta=0.75 (repeatable)")
    ev.add_argument("--selector-n", type=_nonneg_int, default=4,
                    help="seeds the LLM-free selector takes (default 4; 0 = fill max_selected)")
    ev.add_argument("--quiet", action="store_true")
    ev.add_argument("--reader", action="store_true",
                    help="answer each question with the LLM reader from each method's top 5 "
                         "passages and report F1/EM (needs an endpoint)")
    ev.add_argument("--graph-metrics", action="store_true",
                    help="add evidence-set EM/P/R/F1 and graph GM/GS/GED against MuSiQue's "
                         "question_decomposition (evireform.evaluation.graph_metrics)")
    _add_llm_args(ev)
    ev.set_defaults(func=_cmd_eval)

    qu = sub.add_parser("query", help="retrieve passages for one question, or a file of "
                                      "questions, from a saved index")
    qu.add_argument("index_dir")
    qu.add_argument("question", nargs="?", help="one question (or --questions FILE)")
    qu.add_argument("-k", type=_positive_int, default=10)
    qu.add_argument("--json", action="store_true")
    qu.add_argument("--graph", action="store_true",
                    help="print the evidence graph: how each passage was reached (with --json "
                         "or --questions: a 'graph' field of nodes and edges)")
    qu.add_argument("--backend", choices=("auto", "cpu", "gpu"), default="auto",
                    help="where search and ranking run (evireform.engine.make_engine; auto: "
                         "the GPU for large indexes when one is usable)")
    qu.add_argument("--precision", choices=PRECISIONS, default="auto",
                    help="the proposition scan: int8 codes on the CPU (the index needs them: "
                         "index --precision int8), fp16 on the GPU, both re-scored exactly; "
                         "auto: int8 when the index has codes, else float32")
    qu.add_argument("--method", choices=METHODS, default="evireform",
                    help="the retrieval method (evireform.application.METHODS; "
                         "evireform.strategies for BGR and Hi-Q)")
    qu.add_argument("--questions", metavar="FILE",
                    help="many questions: JSONL records with 'question' (and 'id'), or one "
                         "question per line; results as JSONL (--out, default stdout)")
    qu.add_argument("--out", help="--questions: the JSONL results file")
    qu.add_argument("--trec", metavar="RUN_FILE",
                    help="--questions: also write a TREC run file (qid Q0 docid rank score run)")
    qu.add_argument("--run-name", default="evireform", help="the TREC run name")
    qu.add_argument("--batch", type=_positive_int, default=64,
                    help="--questions: questions per retrieve_many call (1 = one at a time)")
    qu.add_argument("--filter", metavar="JSON",
                    help="only passages whose metadata match this where clause, e.g. "
                         "'{\"year\": {\"$gte\": 2000}}', or a JSON list of passage ids; "
                         "@FILE reads it from a file (evireform.filters)")
    qu.add_argument("--quiet", action="store_true", help="no progress bar")
    qu.add_argument("--device", default=None,
                    help="device for the index's sentence-transformers embedder (rebuilt from "
                         "the manifest), e.g. cuda")
    _add_index_embedder_args(qu)
    _add_llm_args(qu)
    qu.set_defaults(func=_cmd_query)

    up = sub.add_parser("update", help="add or delete passages of a saved index (no rebuild)")
    up.add_argument("index_dir")
    up.add_argument("--add", metavar="PATH",
                    help="passages to add: a corpus file, a text or Markdown file, or a folder "
                         "(chunked files replace exactly their earlier chunks)")
    up.add_argument("--delete", metavar="IDS_FILE", help="passage ids to delete, one per line")
    up.add_argument("--upsert", action="store_true",
                    help="--add replaces passages whose ids exist instead of refusing them")
    up.add_argument("--device", default=None, help="device for the index's embedder")
    up.add_argument("--extractor", choices=("heuristic", "phrases", "llm"), default=None,
                    help="the extractor for --add (default: the one the index was built with)")
    up.add_argument("--quiet", action="store_true")
    _add_document_args(up)
    _add_index_embedder_args(up)
    _add_llm_args(up)
    up.set_defaults(func=_cmd_update)

    an = sub.add_parser("analyze", help="the paper's analyses as tables (Markdown)")
    an.add_argument("kind", choices=("ablation", "coverage", "types", "sensitivity", "growth",
                                     "selector"),
                    help="ablation / coverage / types: one eval run of the methods each needs; "
                         "sensitivity: the paper's grids; growth: distractors added in steps; "
                         "selector: an LLM-free selector fitted to the recorded LLM selections "
                         "of one set, evaluated on the other")
    an.add_argument("--replies", default="../shared/llm-replies",
                    help="selector: the folder of recorded replies (hotpotqa.jsonl, musique.jsonl)")
    an.add_argument("--dataset", choices=("musique", "hotpotqa"), default="musique")
    an.add_argument("--data", help="data folder (default $EVIREFORM_DATA or ../shared/data)")
    _add_embedder_args(an, batch=False)
    an.add_argument("-n", type=_positive_int, default=None, help="only the first N questions")
    an.add_argument("--png", default="docs/index_growth.png",
                    help="growth: where to write the plot")
    an.add_argument("--steps", type=_positive_int, default=4, help="growth: number of steps")
    an.add_argument("--quiet", action="store_true")
    an.set_defaults(func=_cmd_analyze)

    lc = sub.add_parser("llm-cache", help="export or import the LLM reply cache as JSONL")
    lc.add_argument("action", choices=("export", "import"))
    lc.add_argument("file", help="JSONL file: {key, role, reply} or {key, content} per line")
    lc.add_argument("--cache", required=True, help="the SQLite reply cache (--llm-cache)")
    lc.add_argument("--force", action="store_true",
                    help="export: replace FILE when it exists")
    lc.set_defaults(func=_cmd_llm_cache)

    ve = sub.add_parser("verify", help="verify every file of an index in full and stamp it "
                                       "(after a copy or download)")
    ve.add_argument("index_dir")
    ve.set_defaults(func=_cmd_verify)

    sv = sub.add_parser("serve", help="a resident HTTP retrieval service over a saved index "
                                      "(extra 'serve': FastAPI + uvicorn)")
    sv.add_argument("index_dir")
    sv.add_argument("--host", default="127.0.0.1",
                    help="address to bind (default localhost only)")
    sv.add_argument("--port", type=_port_number, default=8000,
                    help="TCP port, 1-65535 (default 8000)")
    sv.add_argument("--header-timeout", type=_positive_float, default=10.0, metavar="S",
                    help="seconds a client may take to send a request's headers "
                         "(default 10)")
    sv.add_argument("--max-connections", type=_positive_int, default=1000,
                    help="open connections at most; beyond, 503 (default 1000)")
    sv.add_argument("--api-key-env", metavar="VAR",
                    help="require 'Authorization: Bearer $VAR' on every endpoint but /health")
    sv.add_argument("--max-batch", type=_positive_int, default=64,
                    help="questions per micro-batch (one retrieve_many)")
    sv.add_argument("--max-wait-ms", type=_nonneg_float, default=2.0,
                    help="under load, how long a micro-batch waits for company")
    sv.add_argument("--max-queue", type=_positive_int, default=256,
                    help="questions waiting at most; beyond, 503 with Retry-After")
    sv.add_argument("--device", default=None, help="device for the index's embedder")
    _add_index_embedder_args(sv)
    _add_llm_args(sv)
    sv.set_defaults(func=_cmd_serve)

    be = sub.add_parser("bench", help="kernels and retrieval core side by side with peers")
    be.add_argument("--quick", action="store_true", help="small sizes (about a minute)")
    be.add_argument("--json", help="write the report as JSON to this file")
    be.add_argument("--check", action="store_true",
                    help="exit 1 when a speedup falls below its floor (evireform.bench.FLOORS), "
                         "a floor names no case label, or a pair disagrees")
    be.add_argument("--data", help="data folder (default $EVIREFORM_DATA or ../shared/data)")
    be.add_argument("--only", action="append", metavar="CASE",
                    help="run only these case groups (repeatable): "
                         "propagate, propagate_batch, readout, cosine, hnsw, retrieve_core, "
                         "build, update, limit; with --backend gpu: gpu_copy, gpu_cosine, "
                         "gpu_propagate, gpu_readout, gpu_retrieve")
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
    be.add_argument("--json-only", action="store_true", help=argparse.SUPPRESS)
    be.set_defaults(func=_cmd_bench)
    return p


def main(argv=None) -> int:
    from .kernels import BackendUnavailable, join_warm_up
    args = build_parser().parse_args(argv)
    import sqlite3
    try:
        return args.func(args)
    except (ValueError, TypeError, OSError, BackendUnavailable, sqlite3.Error,
            OverflowError, RecursionError) as exc:
        print(f"evireform {args.command}: error: {_describe(exc)}", file=sys.stderr)
        return 2
    except KeyError as exc:  # an unknown passage id
        print(f"evireform {args.command}: error: {exc.args[0] if exc.args else exc}",
              file=sys.stderr)
        return 2
    finally:  # no native (numba) thread may still run when the process exits
        join_warm_up()


def _describe(exc) -> str:
    """An exception as one line that names the file when the OS error has one (a name that
    is not valid UTF-8 shown with backslash escapes, so the message itself can be printed)."""
    return _describe_raw(exc).encode("utf-8", "backslashreplace").decode("utf-8")


def _describe_raw(exc) -> str:
    if isinstance(exc, OSError) and getattr(exc, "filename", None) and \
            str(exc.filename) not in str(exc):
        return f"{exc.filename}: {exc.strerror or exc}"
    if isinstance(exc, OSError) and getattr(exc, "filename", None):
        return f"{exc.strerror or type(exc).__name__}: {exc.filename}"
    return str(exc) or type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
