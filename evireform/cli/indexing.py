"""``evireform index``, ``update`` and ``verify``: building, changing and checking a saved
index."""
from __future__ import annotations

import dataclasses

from typing import Any, TYPE_CHECKING

import json
import os
import sys
import time
from pathlib import Path

from .._io import read_text_file
from ..application import apply_update
from ..documents import DOCUMENTS, document_roots
from ..embed import spec_of
from ..engine import STORED_PRECISIONS, quantize, structures_of
from ..extract import EXTRACTOR_CHOICES, EXTRACTORS, make_extractor
from ..index import PropositionIndex, arrays_equal, disk_bytes
from ..llm import LLMExtractor
from ..store import STAMP, UnsafeTargetError, check_target, looks_like_index
from ..timing import time_calls
from .options import (
    _add_document_args, _add_embedder_args, _add_index_dir, _add_index_embedder_args,
    _add_llm_args, _add_quiet, _embedder, _extraction_fallbacks, _fallbacks_refused, _filter_arg,
    _index_embedder, _llm_client, _nonneg_float, _positive_int, _read_paths)

if TYPE_CHECKING:  # annotations only
    from ..embed import Embedder
    from ..index import PropositionIndex
    from ..types import StrPath


def _check_index_target(out_dir: StrPath, corpus, force: bool) -> None:
    """Before any work: refuse an output directory that is or holds the corpus, or that
    save() would refuse anyway (so a long build is not lost at the end)."""
    out, src = Path(out_dir).resolve(), Path(corpus).resolve()
    if out == src or out in src.parents:
        raise UnsafeTargetError(f"{out_dir} is or contains the corpus {corpus}; write the index "
                                "to a directory of its own")
    check_target(out_dir, overwrite=force)


def _openie_arg(value: str) -> Path:
    """``--extractor``'s value when it is not a name: a non-empty regular file (the OpenIE
    JSON), else ``ValueError`` listing the names."""
    openie = Path(value)
    if not openie.is_file() or openie.stat().st_size == 0:
        why = ("is empty or not a regular file" if openie.exists() else
               "is not a file that exists")
        raise ValueError(f"--extractor must be one of {', '.join(EXTRACTOR_CHOICES)} or a "
                         f"HippoRAG OpenIE JSON file; {openie} {why}")
    return openie


def _cmd_index(args: Any) -> int:

    t0 = time.perf_counter()
    if args.openie_plain and args.extractor in EXTRACTOR_CHOICES:
        raise ValueError("--openie-plain reads an OpenIE file: give its path as --extractor")
    for src in args.paths:
        _check_index_target(args.out_dir, src, args.force)
    if args.ray and args.extractor not in EXTRACTOR_CHOICES:
        raise SystemExit("evireform index --ray: --extractor must be 'auto', 'heuristic', "
                         "'phrases' or 'llm'")
    if args.extractor not in EXTRACTOR_CHOICES:  # an OpenIE file: checked before any reading
        _openie_arg(args.extractor)
    embedder = _embedder(args)
    encoding = time_calls(embedder, "encode")
    loaded = _read_paths(args, args.paths, embedder, whole=True)
    passages = loaded.passages
    hnsw = {"auto": None, "on": True, "off": False}[args.hnsw]
    vectors = {"auto": None, "on": True, "off": False}[args.passage_vectors]
    show = not args.quiet and not args.json
    choice = extractor = None
    if args.extractor == "auto":  # measured once here; the build records the choice
        extractor = make_extractor("auto", passages=passages)
        choice = extractor.choice
        args.extractor = "heuristic" if choice["chosen"] == "per namespace" else \
            choice["chosen"]  # an LLM-free build either way
        if show:
            per = choice.get("namespaces") or {}
            each = ", ".join(f"{k or '(no namespace)'}: {v}" for k, v in per.items())
            print(f"extractor auto: {choice['chosen']}" + (f" ({each})" if each else "")
                  + f" (capitalised share {choice['capitalised_share']:.3f}, caseless-script "
                  f"share {choice['uncased_share']:.3f}, over {choice['words']:,} words)",
                  file=sys.stderr)
    elif args.extractor in EXTRACTORS:
        extractor = make_extractor(args.extractor)
    if args.ray:
        if args.extractor not in (*EXTRACTORS, "llm"):
            raise SystemExit("evireform index --ray: --extractor must be 'auto', 'heuristic', "
                             "'phrases' or 'llm'")
        from ..distributed import LLMExtractorFactory, build_ray
        factory = extractor
        if args.extractor == "llm":
            args.llm = True
            factory = LLMExtractorFactory(_llm_client(args).config,
                                          max_workers=args.llm_workers or 4)
        idx = build_ray(passages, spec_of(embedder), extractor=factory,
                        concurrency=args.ray_workers, num_gpus=args.num_gpus,
                        ray_address=args.ray_address,
                        embed_batch_size=args.batch_size, show_progress=show, hnsw=hnsw)
    elif args.extractor in (*EXTRACTORS, "llm"):
        if args.extractor == "llm":
            args.llm = True
            extractor = LLMExtractor(_llm_client(args), max_workers=args.llm_workers or 4)
        idx = PropositionIndex.build(passages, embedder, extractor=extractor,
                                     batch_size=args.batch_size, show_progress=show, hnsw=hnsw,
                                     passage_vectors=vectors)
        if args.extractor == "llm":
            idx.meta["extraction_fallbacks"] = _extraction_fallbacks(extractor)
            if _fallbacks_refused(args, "index", extractor, len(passages)):
                return 3
    else:
        openie = _openie_arg(args.extractor)
        idx = PropositionIndex.from_openie(openie, passages, embedder,
                                           batch_size=args.batch_size, show_progress=show,
                                           hnsw=hnsw, plain=args.openie_plain)
    if vectors is not None and (idx.passage_embeddings is not None) != vectors:
        # --ray and OpenIE builds follow the extractor: the flag's choice made here
        idx = idx.with_passage_vectors(embedder, batch_size=args.batch_size,
                                       show_progress=show) if vectors else \
            dataclasses.replace(idx, passage_embeddings=None)
    if args.precision == "int8":
        quantize(idx, "int8")
    if loaded.sources:  # which passages are which file's chunks (update --add keys on it)
        idx.meta[DOCUMENTS] = {src: {**loaded.files[src], "chunks": n}
                               for src, n in loaded.sources.items() if n}
    out = idx.save(args.out_dir, overwrite=args.force)
    reloaded = PropositionIndex.load(out)
    same = arrays_equal(idx, reloaded)
    _first_question(reloaded, embedder)
    if not same:
        print(f"evireform index: error: the index saved at {out} does not reload identically "
              "(its arrays or strings differ from what was built); it may be unusable: "
              "run evireform verify on it", file=sys.stderr)
    stats = idx.stats()
    if choice:
        stats["extractor_choice"] = (f"auto: capitalised share {choice['capitalised_share']}, "
                                     f"caseless-script share {choice['uncased_share']}")
    took = time.perf_counter() - t0
    stats.update({"extractor": idx.meta.get("extractor"), "bytes_on_disk": disk_bytes(out),
                  "path": str(out), "reload_identical": same, "seconds": round(took, 2)})
    stats.update(_throughput(idx, took, encoding, embedder))
    if args.json:
        print(json.dumps(stats, indent=1))
    else:
        width = max(len(k) for k in stats)
        for k, v in stats.items():
            print(f"{k:<{width}}  {v:,}" if isinstance(v, int) and not isinstance(v, bool)
                  else f"{k:<{width}}  {v}")
    return 0 if same else 1


def _first_question(idx: PropositionIndex, embedder: Embedder) -> None:
    """One question answered on the saved index, its result dropped: the kernels a query
    runs are compiled now and kept in numba's on-disk cache (tens of seconds on a fresh
    install, which the first ``evireform query`` would otherwise pay), and the question
    encoder is loaded once.  Failures are ignored: this only saves later time."""
    if not idx.n_props:
        return
    try:
        from ..kernels import warm_up
        from ..retriever import EviReform
        warm_up(batched=False)  # what `query` loads beside the encoder
        q = idx.passage(0).title or idx.prop_texts[0][:80]
        EviReform(idx, embedder=embedder).retrieve(q, 1)
    except Exception as exc:  # the index is saved; the first query compiles instead
        import logging
        logging.getLogger(__name__).info("first question not run: %s", exc)


def _throughput(idx: PropositionIndex, seconds: float, encoding: list[Any], embedder: Embedder) -> dict[str, Any]:
    """Passages and propositions a second, and the share of the time spent encoding."""
    s = max(seconds, 1e-9)
    out = {"passages_per_second": round(idx.n_passages / s, 1),
           "propositions_per_second": round(idx.n_props / s, 1),
           "encoding_share": round(encoding[0] / s, 3)}
    which = getattr(embedder, "document_encoder", None)
    if which:
        out["document_encoder"] = which
    return out


def _cmd_update(args: Any) -> int:
    """Add and/or delete passages of a saved index without rebuilding it, then save it back
    atomically (the previous index stays until the new one is in place).  Every input is
    read before the index's lock is taken (a slow or blocked input never holds it); the lock
    is then held from load to save, so concurrent updates queue instead of losing each
    other.  The index is fully verified before it is rewritten (a save would otherwise
    stamp data nobody checked)."""

    if not args.add and not args.delete and args.delete_where is None \
            and not args.passage_vectors:
        raise ValueError("give --add FILE, --delete IDS_FILE, --delete-where FILTER and/or "
                         "--passage-vectors")
    t0 = time.perf_counter()
    ids = loaded = None
    where = _filter_arg(args.delete_where)  # refused before anything is read
    if args.delete:
        text = read_text_file(args.delete, "--delete")
        ids = [l.strip() for l in text.splitlines() if l.strip()]
    if args.add and not Path(args.add).exists():
        raise ValueError(f"--add {args.add}: no such file or folder")
    _check_update_target(args)
    # the embedder and the folder roots: the fast tier (apply_update verifies in full under
    # the lock, where it counts; a stale stamp must not make both loads full ones)
    peek = PropositionIndex.load(args.index_dir, verify="fast", stamp=False)
    emb = _index_embedder(args, peek) if args.add or args.passage_vectors else None
    if args.add:  # chunked with the index's own embedder's tokenizer, as at build time
        loaded = _read_paths(args, [args.add], emb, whole=True, roots=document_roots(peek))
    extractor = args.extractor
    if args.add and args.extractor == "llm":
        args.llm = True
        extractor = LLMExtractor(_llm_client(args), max_workers=args.llm_workers or 4)
    del peek
    up = apply_update(args.index_dir, delete=ids, add=loaded, embedder=emb,
                      delete_where=where, delete_all=args.all, namespace=args.namespace,
                      upsert=args.upsert, extractor=extractor, show_progress=not args.quiet,
                      refit=args.refit, passage_vectors=args.passage_vectors,
                      before_save=lambda u: not _fallbacks_refused(
                          args, "update", u.extractor, len(loaded.passages) if loaded else 0))
    if not up.saved:
        return 3
    idx, before, changes = up.index, up.before, up.changes
    took = time.perf_counter() - t0
    if args.json:
        print(json.dumps({"index": str(args.index_dir),
                          "passages": {"before": before[0], "after": idx.n_passages},
                          "propositions": {"before": before[1], "after": idx.n_props},
                          "changes": {k: len(v) for k, v in changes.items()},
                          "passage_vectors": up.passage_vectors,
                          "skipped": sorted(loaded.skipped) if loaded else [],
                          "warnings": list(loaded.warnings) if loaded else [],
                          "seconds": round(took, 2)}, indent=1))
        return 0
    parts = [f"{k} {len(v):,}" for k, v in changes.items() if v]
    print(f"{args.index_dir}: passages {before[0]:,} -> {idx.n_passages:,}, propositions "
          f"{before[1]:,} -> {idx.n_props:,} in {took:.2f} s"
          + (f" ({', '.join(parts)})" if parts else ""))
    if up.passage_vectors:
        print(f"{up.passage_vectors:,} passages embedded whole for the question's own search",
              file=sys.stderr)
    dups = changes.get("duplicates")
    if dups:
        print(f"{len(dups):,} passages were already in the index with the same content and "
              "were skipped", file=sys.stderr)
    return 0


def _check_update_target(args: Any) -> None:
    """``update X --add X``, or an index directory that is not one: said in those words."""
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


def _why_unwritten(folder: Path) -> str:
    """Why a small file could not be written in ``folder``: not writable, no space left on
    its disk, or a file-size limit of this process."""
    if not os.access(folder, os.W_OK):
        return "the directory is not writable"
    try:
        st = os.statvfs(folder)
        if st.f_bavail * st.f_frsize < 1 << 16:
            return f"no space left on the disk holding {folder}"
    except (OSError, AttributeError):
        pass
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if soft != resource.RLIM_INFINITY and soft < 1 << 16:
            return f"this process's file-size limit (ulimit -f: {soft:,} bytes)"
    except (ImportError, OSError, ValueError, AttributeError):
        pass
    return "the stamp file could not be written"


def _cmd_verify(args: Any) -> int:
    """The full verification tier (evireform.store), then a new stamp: what to run after
    copying or downloading an index (a load would run it once anyway).  Says whether the
    stamp was written (a read-only directory cannot take one)."""

    def seen():
        try:
            st = (Path(args.index_dir) / STAMP).stat()
            return st.st_ino, st.st_mtime_ns, st.st_size
        except OSError:
            return None
    t0 = time.perf_counter()
    before = seen()
    idx = PropositionIndex.load(args.index_dir, verify="full", recount=args.full)
    took = time.perf_counter() - t0
    wrote = seen() not in (None, before)
    t1 = time.perf_counter()
    PropositionIndex.load(args.index_dir)
    fast = time.perf_counter() - t1
    from ..store.journal import read as read_journal
    journal = len(read_journal(Path(args.index_dir)))  # checked record by record
    if args.json:
        print(json.dumps({"index": str(args.index_dir), "verified": "full",
                          "passages": idx.n_passages, "propositions": idx.n_props,
                          "entities": idx.n_entities, "seconds": round(took, 2),
                          "stamped": wrote,
                          "not_stamped_because": None if wrote else
                          _why_unwritten(Path(args.index_dir)),
                          "fast_load_seconds": round(fast, 2),
                          "journal_records": journal}, indent=1))
        return 0
    tail = (f"stamped: later loads take the fast tier ({fast:.2f} s)" if wrote else
            f"no stamp written ({_why_unwritten(Path(args.index_dir))}); a later load took "
            f"{fast:.2f} s")
    print(f"{args.index_dir}: verified ({idx.n_passages:,} passages, {idx.n_props:,} "
          f"propositions, {idx.n_entities:,} entities): checksums, arrays, derived terms, "
          f"embedding norms, texts" + (", lexical counts recounted" if args.full else "") + (", HNSW graph" if structures_of(idx).hnsw is not None else "")
          + f" in {took:.2f} s; {tail}"
          + (f"; its journal's {journal} update(s) replayed (each record's sha256 checked; "
             "the next save folds them in)" if journal else ""))
    ready = prepare_query_encoder(idx)
    if ready:
        print(f"question encoder: {ready}")
    return 0


def prepare_query_encoder(idx: PropositionIndex) -> str | None:
    """The ONNX question encoder of ``idx``'s embedder written now if the cache lacks it
    (an index made before builds wrote it; :meth:`SentenceTransformerEmbedder.prepare`), so
    that its first question does not wait; what was done, or None when the embedder has no
    ONNX side (a remote, hashing or unavailable one)."""
    from ..embed import embedder_from_spec
    try:
        emb = embedder_from_spec(idx.meta.get("embedder_spec") or idx.embedder_name)
        prepare = getattr(emb, "prepare", None)
        return None if prepare is None or prepare() is None else \
            f"ONNX ({emb.query_encoder().path})"
    except Exception as exc:  # the index stays usable: questions go through torch
        import logging
        logging.getLogger(__name__).info("no ONNX question encoder prepared: %s", exc)
        return None


def add_index_parser(sub: Any) -> None:
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
    ix.add_argument("--extractor", default="auto",
                    help="'auto' (LLM-free, chosen per namespace by the text's letter case: "
                         "heuristic for text as capitalised as Wikipedia's, prose for "
                         "ordinary cased prose such as documentation, phrases otherwise; the "
                         "choice and its measurement go in the manifest), 'heuristic' "
                         "(LLM-free, capitalised names), 'prose' (LLM-free, names and "
                         "noun phrases of ordinary prose), 'phrases' (LLM-free, "
                         "corpus phrases: lower-case text, German, Chinese), 'llm' (the LLM "
                         "extractor; see the LLM options) or the path of a HippoRAG OpenIE "
                         "JSON file (one triple = one proposition)")
    ix.add_argument("--openie-plain", action="store_true",
                    help="with an OpenIE file: its triples as they are (text 's r o', "
                         "entities s and o), without the title prefix, title entity and "
                         "named entities the default adds")
    _add_document_args(ix)
    _add_embedder_args(ix)
    ix.add_argument("--precision", choices=STORED_PRECISIONS, default="float32",
                    help="int8: also store int8 codes of the embeddings; exact search scans "
                         "them (a quarter of the bytes) and re-scores a margin in float32, "
                         "returning the same top-k")
    ix.add_argument("--hnsw", choices=("auto", "on", "off"), default="auto",
                    help="build HNSW: auto = at or above kernels.config.EXACT_SEARCH_MAX")
    ix.add_argument("--passage-vectors", choices=("auto", "on", "off"), default="auto",
                    help="also embed each passage whole, for the question's own search "
                         "(EviReformConfig.own_search): auto = when the prose extractor "
                         "builds the index (about a third more encoding)")
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


def add_update_parser(sub: Any) -> None:
    up = sub.add_parser("update", help="add or delete passages of a saved index (no rebuild)")
    _add_index_dir(up)
    up.add_argument("--add", metavar="PATH",
                    help="passages to add: a corpus file, a text or Markdown file, or a folder "
                         "(chunked files replace exactly their earlier chunks)")
    up.add_argument("--delete", metavar="IDS_FILE", help="passage ids to delete, one per line")
    up.add_argument("--all", action="store_true",
                    help="--delete-where may match every passage (the index is emptied); "
                         "without it such a filter is refused")
    up.add_argument("--delete-where", metavar="FILTER",
                    help="delete the passages this filter matches (JSON where clause, or "
                         "@file.json), e.g. '{\"source\": \"notes/a.md\"}' for one "
                         "document's passages")
    up.add_argument("--namespace", default=None,
                    help="a tenant's update: added passages get this namespace, --delete "
                         "ids and --delete-where are judged inside it")
    up.add_argument("--upsert", action="store_true",
                    help="--add replaces passages whose ids exist instead of refusing them")
    up.add_argument("--device", default=None, help="device for the index's embedder")
    up.add_argument("--extractor", choices=(*EXTRACTORS, "llm"), default=None,
                    help="the extractor for --add (default: the one the index was built with)")
    up.add_argument("--refit", action="store_true",
                    help="learn the extractor's corpus statistics (hub names, lower-case words, "
                         "phrases) again from every passage of the namespaces added to, "
                         "instead of adding the new passages' counts to those the index "
                         "carries (which an update refits by itself once they drift)")
    up.add_argument("--passage-vectors", action="store_true",
                    help="embed every passage whole, for the question's own search "
                         "(EviReformConfig.own_search), in an index built without them "
                         "(before they existed, or with index --passage-vectors off)")
    up.add_argument("--json", action="store_true",
                    help="print what changed as JSON (passages and propositions before and "
                         "after, changes by kind, files skipped, warnings)")
    _add_quiet(up)
    _add_document_args(up)
    _add_index_embedder_args(up)
    _add_llm_args(up)
    up.set_defaults(func=_cmd_update)


def add_verify_parser(sub: Any) -> None:
    ve = sub.add_parser("verify", help="verify every file of an index in full and stamp it "
                                       "(after a copy or download)")
    _add_index_dir(ve)
    ve.add_argument("--full", action="store_true",
                    help="also count every text's lexical terms again and compare them with "
                         "the stored counts (derived data, otherwise checked by checksum; "
                         "tokenizes the whole corpus)")
    ve.add_argument("--json", action="store_true", help="print the result as JSON")
    ve.set_defaults(func=_cmd_verify)
