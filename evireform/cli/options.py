"""Option types and the option groups every command shares (documents, embedder, LLM, filter),
defined once."""
from __future__ import annotations

from typing import Any, TYPE_CHECKING

import argparse
import os
import sys
from pathlib import Path

from .._io import read_text_file
from ..application import index_embedder
from ..documents import load_paths
from ..embed import get_embedder
from ..filters import compile_filter
from ..llm import LLMClient, LLMConfig, read_reply_records
from ..retriever import EviReformConfig

if TYPE_CHECKING:  # annotations only
    from ..embed import Embedder
    from ..extract import Extractor
    from ..index import PropositionIndex


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


def _add_document_args(p) -> None:
    g = p.add_argument_group("documents (text and Markdown files, folders)")
    g.add_argument("--chunk-tokens", type=_positive_int, default=200,
                   help="tokens per chunk of a text file (the embedder's tokenizer)")
    g.add_argument("--chunk-overlap", type=_nonneg_int, default=30,
                   help="tokens of whole sentences repeated between consecutive chunks")
    g.add_argument("--include", action="append", metavar="GLOB",
                   help="in folders, only files matching GLOB (repeatable; default: every "
                        "format a reader takes, and corpus files: *.json *.jsonl *.ndjson)")
    g.add_argument("--exclude", action="append", metavar="GLOB",
                   help="in folders, skip files matching GLOB (repeatable)")
    g.add_argument("--skip-errors", action="store_true",
                   help="skip unreadable files (reported by name) instead of stopping")
    _add_read_limit_arg(g)


def _add_read_limit_arg(g) -> None:
    g.add_argument("--read-limit", action="append", metavar="NAME=SIZE", type=_read_limit,
                   default=[],
                   help="raise or lower one of the readers' bounds (repeatable): document "
                        "(a file's size, default 256M), part (an archive member unpacked: "
                        "DOCX, PPTX, XLSX, EPUB; 64M), pdf-content (a PDF's decoded drawing "
                        "instructions; 64M), items (rows, slides, pages, paragraphs of one "
                        "file; 200000), text (the characters of text one document gives, "
                        "whatever its bytes expand to; 256M); sizes in bytes or with K, M, G")


def _read_limit(spec: str) -> str:
    from ..formats import ReadLimits
    try:
        ReadLimits.parse([spec])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return spec


def read_limits(args: Any):
    """The ``--read-limit`` settings as :class:`~evireform.formats.ReadLimits` (None when
    none is given)."""
    from ..formats import ReadLimits
    specs = getattr(args, "read_limit", None)
    return ReadLimits.parse(specs) if specs else None


def _read_paths(args: Any, paths: Any, embedder: Embedder, whole: bool = False, roots=None):
    """Passages of the files and folders ``paths`` (:func:`evireform.documents.load_paths`),
    skipped files reported on stderr; ``whole=True`` returns the ``Loaded`` record."""
    if args.chunk_overlap >= args.chunk_tokens:
        raise ValueError(f"--chunk-overlap ({args.chunk_overlap}) must be smaller than "
                         f"--chunk-tokens ({args.chunk_tokens})")
    loaded = load_paths(paths, chunk_tokens=args.chunk_tokens,
                        chunk_overlap=args.chunk_overlap, embedder=embedder,
                        include=args.include, exclude=args.exclude,
                        skip_errors=args.skip_errors, roots=roots, limits=read_limits(args))
    def shown(m) -> str:
        return m.encode("utf-8", "backslashreplace").decode("utf-8")
    for msg in loaded.warnings:
        print(f"warning: {shown(msg)}", file=sys.stderr)
    for _, msg in loaded.errors:
        print(f"skipped: {shown(msg)}", file=sys.stderr)
    if loaded.errors:
        print(f"{len(loaded.errors)} files skipped (--skip-errors)", file=sys.stderr)
    return loaded if whole else loaded.passages


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
    g.add_argument("--llm-retries", type=_nonneg_int, default=3,
                   help="retries of a failed or malformed reply before the LLM-free role "
                        "answers")
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


def _replay_setup(args: Any) -> dict[str, Any]:
    """--llm-replay: offline, answered from the recorded replies (by key, else by content);
    the model defaults to the one the first file names."""
    model = None
    for f in args.llm_replay:
        if not Path(f).is_file():
            raise FileNotFoundError(f"--llm-replay: {f} not found")
        model = model or next((r.get("model") for r in read_reply_records(f)), None)
    return dict(replay_paths=tuple(args.llm_replay), offline=True,
                pending_path=args.llm_pending, model=args.llm_model or model)


def _llm_client(args: Any):
    # an answer (ask, query --answer) takes an LLM whenever one is configured: an endpoint
    # named, here or in $EVIREFORM_LLM_BASE_URL; the search's LLM roles only with --llm
    answers = getattr(args, "answer", False) and (
        getattr(args, "llm_base_url", None) or os.environ.get("EVIREFORM_LLM_BASE_URL"))
    if not (getattr(args, "llm", False) or getattr(args, "reader", False)
            or getattr(args, "llm_replay", None) or answers):
        return None
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


def _replay_summary(client: Any) -> str | None:
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
    p.add_argument("--embedder", default=None,
                   help="minilm (all-MiniLM-L6-v2, the default; eval --index: the index's "
                        "own), st:PATH_OR_NAME (a local "
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


def _embedder(args: Any):
    return get_embedder(args.embedder or "minilm", device=args.device, dtype=args.dtype,
                        batch_size=getattr(args, "batch_size", None),
                        query_prompt=args.query_prompt, document_prompt=args.document_prompt,
                        deadline=args.embed_deadline, encoder=getattr(args, "encoder", "auto"))


def _index_embedder(args: Any, idx: PropositionIndex):
    """The embedder for a saved index (:func:`evireform.application.index_embedder`): the
    user's ``--embedder`` if given, else the one the index records."""
    return index_embedder(idx, args.embedder, device=args.device,
                          encoder=getattr(args, "encoder", "auto"), dtype=args.dtype,
                          batch_size=getattr(args, "batch_size", None),
                          query_prompt=args.query_prompt, document_prompt=args.document_prompt,
                          deadline=args.embed_deadline)


def _extraction_fallbacks(extractor: Extractor) -> int:
    """Passages an LLM extractor handed to its LLM-free fallback (0 for other extractors)."""
    return int(getattr(extractor, "fallbacks", 0) or 0)


def _fallbacks_refused(args: Any, command: str, extractor: Extractor, n: int) -> bool:
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


def _data_dir(arg) -> Path:
    return Path(arg or os.environ.get("EVIREFORM_DATA", "../shared/data"))


def _filter_arg(text):
    """``--filter``: JSON, or ``@FILE`` holding it; checked (:func:`compile_filter`)."""
    if text is None:
        return None
    if text.startswith("@"):
        try:
            text = read_text_file(text[1:], "--filter", limit=64 << 20)
        except OSError as exc:
            raise ValueError(f"--filter {text}: cannot read the file ({exc})") from None
    try:
        return compile_filter(text)
    except ValueError as exc:
        raise ValueError(f"--filter: {exc}") from None


def _fell_back(res) -> bool:
    return any(":fallback" in e or e.endswith(":raised")
               for e in getattr(res.trace, "role_events", []) or [])


def _strict_status(args: Any, results, n_fell_back: int | None = None) -> int:
    """3 when --strict-llm is set and an LLM role fell back for any of ``results`` (or for
    ``n_fell_back`` of them, counted as they came)."""
    n = sum(map(_fell_back, results)) if n_fell_back is None else n_fell_back
    if n and getattr(args, "strict_llm", False):
        print(f"evireform query: --strict-llm: an LLM role fell back for {n} of "
              f"{len(results)} questions (see role_events)", file=sys.stderr)
        return 3
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


def _add_index_dir(p) -> None:
    p.add_argument("index_dir", metavar="INDEX_DIR",
                   help="a saved index directory (what evireform index wrote)")


def _add_quiet(p, what: str = "no progress bars") -> None:
    p.add_argument("--quiet", action="store_true", help=what)


class HelpFormatter(argparse.HelpFormatter):
    """Help that shows each option's default where it says something (not for flags that
    are off, options without one, or help that names its default already)."""

    def _get_help_string(self, action):
        text = action.help or ""
        d = action.default
        if (action.option_strings and d not in (None, False, argparse.SUPPRESS)
                and "default" not in text and "%(default)" not in text):
            shown = ",".join(map(str, d)) if isinstance(d, (tuple, list)) else d
            text += f" (default: {shown})"
        return text
