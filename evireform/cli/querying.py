"""``evireform query`` and ``serve``: questions against a saved index, one at a time, from a
file, or behind HTTP."""
from __future__ import annotations

from typing import Any, Sequence
from typing import TYPE_CHECKING

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from ..records import LOCATION_KEYS, trec_docid, trec_scores  # noqa: F401 - re-exported
from tqdm.auto import tqdm

from .._checks import check_text
from .._checks import loads as _json_loads
from .._io import Outputs, read_text_file
from ..application import METHODS, make_method
from ..embed import encode_queries
from ..engine import BACKENDS, PRECISIONS, make_engine, restrict
from ..index import PropositionIndex
from ..retriever import EviReformConfig
from ..kernels import start_native_thread, warm_up_in_background
from ..service import RetrievalService, serve
from .options import (
    _add_index_dir, _add_index_embedder_args, _add_llm_args, _add_read_limit_arg,
    _fell_back, _filter_arg,
    _index_embedder, _llm_client, _nonneg_float, _port_number, _positive_float,
    _positive_int, _replay_summary, _strict_status, read_limits)

if TYPE_CHECKING:  # annotations only
    from ..types import StrPath


def read_questions(path: StrPath) -> list[tuple[str, str]]:
    """(id, question) pairs from JSONL records with ``question`` (and ``id``/``_id``), a JSON
    list of such records (the MuSiQue/HotpotQA files), or a text file with one question per
    line; ids default to the line number."""
    out = []
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"--questions {path}: is a directory; give a file")
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
            out.append((check_text(qid, f"{path}: record {n} (id)"),
                        check_text(q, f"{path}: record {n} (question)")))
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
            out.append((check_text(str(rec.get("id", rec.get("_id", n))), f"{path}:{n} (id)"),
                        check_text(q, f"{path}:{n} (question)")))
        else:
            out.append((str(n), line))
    if not out:
        raise ValueError(f"{path}: no questions")
    return out


def _cmd_query(args: Any) -> int:

    if (args.question is None) == (args.questions is None):
        raise ValueError("give one question, or --questions FILE")
    answering = getattr(args, "answer", False)
    if answering and args.questions is not None:
        raise ValueError("an answer is for one question (ask / query --answer QUESTION)")
    if args.questions is not None:  # the questions first: a bad file fails before any load
        qs = read_questions(args.questions)
    flt = _filter_arg(args.filter)
    idx = PropositionIndex.load(args.index_dir)
    emb = _index_embedder(args, idx)
    _prepare_encoder(emb)  # its session loads (no GIL held) while the rest is set up
    # one question on a small index: numpy answers in milliseconds, numba takes a second to
    # start (make_engine's one_shot)
    engine = make_engine(idx, args.backend, precision=args.precision,
                         one_shot=args.questions is None)
    # a key no passage has, or an unknown id: refused before any query (and kept by the
    # engine the question then runs on)
    restrict(engine, flt)
    args.filter = flt
    if getattr(getattr(engine, "device", None), "ns", None) is None \
            or engine.device.ns.on_device:
        # the kernels load (numba, about a second cold) while the encoder loads; main()
        # joins the thread on every exit path
        warm_up_in_background(args.questions is not None)
    client = _llm_client(args)
    # the LLM roles search only with --llm (or a replay); an answer takes any configured LLM
    retriever = make_method(args.method, idx, emb, llm=client if args.llm else None,
                            engine=engine, max_workers=args.llm_workers or 1,
                            config=_config(args))
    if args.questions is not None:
        return _batch_query(args, retriever, qs)
    res = retriever.retrieve(args.question, args.k, filter=flt)
    ans = None
    if answering:
        from ..answer import answer_question
        ans = answer_question(args.question, res, client)
    summary = _replay_summary(client)
    if summary:
        print(summary, file=sys.stderr)
    if args.json:
        out = res.to_dict(graph=args.graph)
        if args.excerpts:
            with_excerpts(out, res, idx, args.question)
        if ans is not None:
            out["answer"] = ans.to_dict()
        print(json.dumps(out, indent=1))
        return _strict_status(args, [res], _fell_back(res) + _answer_fell_back(ans))
    print(f"Q: {args.question}")
    if ans is not None:
        print(format_answer(ans))
    if not res.passages:
        print("   (no passage matches the filter)")
    reached = reached_by(res, idx)
    own = set(getattr(res.trace, "own_search", None) or ())
    for r, p in enumerate(res.passages, 1):  # the answer first, then how it was reached
        print(format_passage(r, p, args.question, text=not args.no_text,
                             queries=reached.get(p.index, ()), metadata=args.metadata,
                             own=p.id in own))
    for q in getattr(res.trace, "residual_queries", []):
        print(f"   residual query: {q}")
    shown = res.trace.format(idx.passages) if hasattr(res.trace, "format") else ""
    if shown:  # Hi-Q's tree, BGR's chains (a one-search method has neither)
        print(shown)
    if args.graph:
        print("evidence graph (how each passage was reached):")
        print(res.evidence_graph().format())
    t = res.trace.timings_ms
    if t:  # where the time went (evireform.timing; --json: trace.timings_ms)
        from ..timing import since_process_start
        up = since_process_start()
        print(f"time: {sum(t.values()):.1f} ms (" + ", ".join(
            f"{k} {v:.1f}" for k, v in t.items()) + ")"
            + (f"; {up * 1e3:.0f} ms from process start" if up is not None else ""),
            file=sys.stderr)
    return _strict_status(args, [res], _fell_back(res) + _answer_fell_back(ans))


def _answer_fell_back(ans: Any) -> int:
    return int(ans is not None and any(":fallback:" in e for e in ans.events))


def format_answer(ans: Any) -> str:
    """An :class:`~evireform.answer.Answer` for the terminal: the answer, what kind it is
    and the confidence, then each passage it cites with its sentence."""
    import textwrap
    how = {"llm": "the LLM's answer from the passages",
           "extractive": "extractive: the passages' sentence that best matches the "
                         "question"}[ans.kind]
    lines = textwrap.wrap(f"A: {ans.text}", 100, subsequent_indent="   ")
    sim = "" if ans.similarity is None else f", best dense match {ans.similarity:.2f}"
    lines.append(f"   ({how}; {ans.confidence:.0%} of the question's words in the top "
                 f"passages{sim}" + (f"; {', '.join(ans.events)}" if ans.events else "")
                 + ")")
    for c in ans.cites:
        label = "cites" if ans.found else "closest"
        lines.extend(textwrap.wrap(f"{label} [{c['id']}] {c['title']}: {c['sentence']}", 100,
                                   initial_indent="   ", subsequent_indent="     "))
    return "\n".join(lines)


def _prepare_encoder(emb: Any) -> None:
    """The question encoder's ONNX session created on a thread of its own: ONNX Runtime
    releases the GIL while it loads and optimises the graph (a third of a second), so the
    engine, the roles and the lexical weights are set up meanwhile; the first
    ``encode_queries`` waits for it under the embedder's lock.  The thread is registered
    like the kernels' warm-up (main() joins it on every exit path, errors included), and
    its errors are left for the first question to raise."""
    prepare = getattr(emb, "query_encoder", None)
    if not callable(prepare):
        return

    def run():
        try:
            prepare()
        except Exception:  # the first question reports it
            pass
    start_native_thread(run, name="evireform-encoder")


def format_passage(rank: int, p, question: str, *, text: bool = True, width: int = 320,
                   queries: Sequence[str] = (), metadata: bool = False,
                   own: bool = False) -> str:
    """One ranked passage for the terminal: rank, score, title and id; then (``text``) where
    it is (source and chunk, section, page, slide, row) on one line, its other metadata on
    another only with ``metadata``, and its text as the whole sentences that best match the
    question and the residual ``queries`` that reached it (:func:`evireform.text.snippet`).
    ``text=False``: the compact one-line form (rank, score, title, id, where).  A passage
    that stands for others with the same text names them ("same text in ..."); one the
    question's own search placed (``own``: ``EviReformConfig.own_search``) says so, its
    score being EviReform's (0 when EviReform did not rank it)."""
    md = dict(p.metadata or {})
    where = []
    src = md.pop("source", None)
    if src is not None:
        where.append(f"{src}" + (f" #{md['chunk']}" if isinstance(md.get("chunk"), int) else ""))
    md.pop("chunk", None)
    if md.get("title") == p.title:
        md.pop("title")
    for key in LOCATION_KEYS:
        if key in md:
            where.append(f"{key} {md.pop(key)}")
    head = f"{rank:>3}. {p.score:.4f}  {p.title}  [{p.id}]"
    rest = f"{json.dumps(md, ensure_ascii=False, default=str)}" if md and metadata else ""
    twins = tuple(getattr(p, "duplicates", ()) or ())
    also = "same text in " + ", ".join(twins[:3]) + \
        (f" and {len(twins) - 3} more" if len(twins) > 3 else "") if twins else ""
    if own:
        where.append("found by the question's own search")
    if not text:
        return head + "".join(f"  {x}" for x in (" · ".join(where), also, rest) if x)
    lines = [head]
    if where:
        lines.append("     " + " · ".join(where))
    if also:
        lines.append("     " + also)
    if rest:
        lines.append("     " + rest)
    from ..text import snippet
    body = snippet(p.text, " ".join([question, *queries]), width)
    if body:
        import textwrap
        lines.extend(textwrap.wrap(body, 96, initial_indent="     ", subsequent_indent="     ",
                                   break_on_hyphens=False) or [])
    return "\n".join(lines)


def with_excerpts(record: dict, result, index, question: str, width: int = 320) -> dict:
    """``record`` (a result's :meth:`to_dict`) with each passage's ``excerpt``: the whole
    sentences that best match the question and the residual queries that reached it, what
    the terminal prints (:func:`evireform.text.snippet`; the whole text when it fits)."""
    from ..text import snippet
    reached = reached_by(result, index)
    for rec, p in zip(record.get("passages", ()), result.passages):
        rec["excerpt"] = snippet(p.text, " ".join([question, *reached.get(p.index, ())]),
                                 width)
    return record


def reached_by(result, index) -> dict[int, list[str]]:
    """Passage position -> the residual queries whose hits include one of its
    propositions (the words a passage's excerpt is chosen by, beside the question's)."""
    out: dict[int, list[str]] = {}
    trace = result.trace
    owner = index.owner
    for q, hits in zip(getattr(trace, "residual_queries", []) or [],
                       getattr(trace, "residual_hits", []) or []):
        for i, _ in hits:
            qs = out.setdefault(int(owner[int(i)]), [])
            if q not in qs:
                qs.append(q)
    return out


def _run_name(value: str) -> str:
    """A TREC run name: the sixth whitespace-separated field of every line, so one
    non-empty token of printable characters."""
    import argparse
    if not value or any(c.isspace() or not c.isprintable() for c in value):
        raise argparse.ArgumentTypeError(f"{value!r:.60} is not one token; a TREC run name "
                                         "has no spaces (each line's sixth field)")
    return value


def _batch_query(args: Any, retriever, qs: Sequence[str]) -> int:
    """Many questions in chunks of --batch (each chunk one retrieve_many): JSONL results to
    --out (or stdout), a TREC run file with --trec, and a summary line on stderr.  Both
    outputs are checked and opened before the first question (never an input, never each
    other) and put in place only when every question is done."""
    show = not args.quiet
    bar = None
    with Outputs({"--out": args.out, "--trec": args.trec},
                 inputs=[args.questions, *Path(args.index_dir).glob("*")]) as files:
        out = files.get("--out", sys.stdout)
        trec = files.get("--trec")
        if show:
            bar = tqdm(total=len(qs), desc="query", unit="question", file=sys.stderr)
        if retriever.embedder is not None:  # load the model before the clock starts
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
                    rec = res.to_dict(graph=args.graph, id=qid)
                    if args.excerpts:
                        with_excerpts(rec, res, retriever.index, res.question)
                    out.write(json.dumps(rec, ensure_ascii=False) + "\n")
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


def _api_key(args: Any, what: str) -> str | None:
    """The key ``--api-key-env`` names (refused when unset or empty), and a warning on
    stderr for a service bound beyond loopback without one."""
    key = None
    if args.api_key_env:
        key = os.environ.get(args.api_key_env)
        if not key:
            raise ValueError(f"--api-key-env {args.api_key_env}: the variable is not set or "
                             "empty")
    if args.host not in ("127.0.0.1", "localhost", "::1") and key is None:
        print(f"warning: serving on {args.host} without --api-key-env: anyone who can reach "
              f"it can {what}", file=sys.stderr)
    return key


def _tenant_keys(path: str | None):
    """``--tenant-keys FILE``: the tenants' keys (:func:`~evireform.service.guard.
    read_tenant_keys`), or None."""
    if path is None:
        return None
    from ..service.guard import read_tenant_keys
    try:
        text = read_text_file(path, "--tenant-keys", limit=1 << 20)
    except OSError as exc:
        raise ValueError(f"--tenant-keys {path}: cannot read the file ({exc.strerror})") \
            from None
    return read_tenant_keys(text, f"--tenant-keys {path}")


def _cmd_serve(args: Any) -> int:
    """``evireform serve``: the index, the embedder and the LLM roles loaded once, behind
    HTTP (:mod:`evireform.service`)."""
    tenants = _tenant_keys(args.tenant_keys)
    if tenants and not args.api_key_env:  # the warning is about a service open to anyone
        key = None
    else:
        key = _api_key(args, "query and update the index")
    idx = PropositionIndex.load(args.index_dir)
    make_engine(idx, args.backend, precision=args.precision)  # refused before any model loads
    emb = _index_embedder(args, idx)
    client = _llm_client(args)
    if args.max_wait_ms > 1000:
        raise ValueError(f"--max-wait-ms must be at most 1000 (one second); got "
                         f"{args.max_wait_ms:g}")
    svc = RetrievalService(args.index_dir, emb, llm=client, index=idx,
                           max_batch=args.max_batch, max_wait=args.max_wait_ms / 1e3,
                           max_queue=args.max_queue, backend=args.backend,
                           precision=args.precision, config=_config(args),
                           read_limits=read_limits(args))
    serve(svc, host=args.host, port=args.port, api_key=key, tenants=tenants,
          header_timeout=args.header_timeout, max_connections=args.max_connections,
          cors_origins=args.cors_origin,
          banner=f"evireform serve: {args.index_dir} on http://{args.host}:{args.port} "
                 "(docs at /docs)")
    return 0


def _cmd_mcp(args: Any) -> int:
    """``evireform mcp``: the index as an MCP server (:mod:`evireform.mcp_server`), over
    stdio or streamable HTTP; its questions go through the same service as ``serve``."""
    from ..mcp_server import sdk, run
    sdk()  # the SDK's absence refused before any model loads
    tenants = _tenant_keys(args.tenant_keys)
    if tenants and args.transport != "http":
        raise ValueError("--tenant-keys: keys are sent over HTTP (--transport http); a stdio "
                         "server answers the one process that launched it")
    key = _api_key(args, "query the index") if args.transport == "http" and not (
        tenants and not args.api_key_env) else None
    idx = PropositionIndex.load(args.index_dir)
    make_engine(idx, args.backend, precision=args.precision)
    emb = _index_embedder(args, idx)
    svc = RetrievalService(args.index_dir, emb, llm=_llm_client(args), index=idx,
                           backend=args.backend, precision=args.precision,
                           config=_config(args))
    run(svc, transport=args.transport, host=args.host, port=args.port, api_key=key,
        tenants=tenants, banner=f"evireform mcp: {args.index_dir} on http://{args.host}:{args.port}/mcp")
    return 0


def add_mcp_parser(sub: Any) -> None:
    mc = sub.add_parser("mcp", help="the index as an MCP server: a retrieve tool and the "
                                    "index's stats (extra 'mcp': the official MCP SDK)")
    _add_index_dir(mc)
    mc.add_argument("--transport", choices=("stdio", "http"), default="stdio",
                    help="stdio (default: what an assistant launches) or streamable HTTP "
                         "at /mcp")
    mc.add_argument("--host", default="127.0.0.1", help="--transport http: address to bind")
    mc.add_argument("--port", type=_port_number, default=8765,
                    help="--transport http: TCP port (default 8765)")
    mc.add_argument("--api-key-env", metavar="VAR",
                    help="--transport http: require 'Authorization: Bearer $VAR' on every "
                         "request (the key read from this environment variable)")
    mc.add_argument("--tenant-keys", metavar="FILE",
                    help="--transport http: tenants' keys, JSON {\"KEY\": {\"namespace\": "
                         "\"acme\"}} (as serve's): a tenant's retrieve searches its "
                         "namespace only; --api-key-env is then the operator's key")
    mc.add_argument("--device", default=None, help="device for the index's embedder")
    _add_engine_args(mc)
    _add_index_embedder_args(mc)
    _add_llm_args(mc)
    mc.set_defaults(func=_cmd_mcp)


def add_query_parser(sub: Any) -> None:
    qu = sub.add_parser("query", help="retrieve passages for one question, or a file of "
                                      "questions, from a saved index")
    _query_args(qu, 10)
    qu.add_argument("--answer", action="store_true",
                    help="also answer the question from the passages, citing them (what "
                         "`evireform ask` prints)")
    qu.set_defaults(func=_cmd_query)
    ask = sub.add_parser(
        "ask", help="answer a question from a saved index, citing the passages: an LLM's "
                    "answer with --llm-base-url (or $EVIREFORM_LLM_BASE_URL), else the "
                    "passages' best-matching sentence, marked extractive; 'not found in "
                    "these documents' when they do not hold it")
    _query_args(ask, 5)
    ask.set_defaults(func=_cmd_query, answer=True)


def _query_args(qu: Any, k: int) -> None:
    """The arguments of ``query`` and ``ask`` (one command: ``ask`` is ``query --answer``)."""
    _add_index_dir(qu)
    qu.add_argument("question", nargs="?", help="one question (or --questions FILE)")
    qu.add_argument("-k", type=_positive_int, default=k, help="passages to return")
    qu.add_argument("--json", action="store_true",
                    help="print the result record as JSON (the service's /query shape)")
    qu.add_argument("--excerpts", action="store_true",
                    help="with --json or --questions: each passage also gets 'excerpt', the "
                         "sentences the terminal prints (those that best match the question "
                         "and the residual queries that reached it); the record is otherwise "
                         "the service's")
    qu.add_argument("--no-text", action="store_true",
                    help="one line a passage (rank, score, title, id, where it is) instead "
                         "of where it is and its sentences that best match the question")
    qu.add_argument("--metadata", action="store_true",
                    help="also print each passage's other metadata (front matter, author, "
                         "...) as JSON")
    qu.add_argument("--graph", action="store_true",
                    help="print the evidence graph: how each passage was reached (with --json "
                         "or --questions: a 'graph' field of nodes and edges)")
    _add_engine_args(qu)
    qu.add_argument("--method", choices=METHODS, default="evireform",
                    help="the retrieval method (evireform.application.METHODS; "
                         "evireform.strategies for BGR and Hi-Q)")
    qu.add_argument("--questions", metavar="FILE",
                    help="many questions: JSONL records with 'question' (and 'id'), or one "
                         "question per line; results as JSONL (--out, default stdout)")
    qu.add_argument("--out", help="--questions: the JSONL results file")
    qu.add_argument("--trec", metavar="RUN_FILE",
                    help="--questions: also write a TREC run file (qid Q0 docid rank score run)")
    qu.add_argument("--run-name", default="evireform", type=_run_name,
                    help="the TREC run name (one token: no spaces)")
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


def _add_engine_args(p: Any) -> None:
    """``--backend`` and ``--precision``: the engine (``query`` and ``serve`` alike)."""
    p.add_argument("--backend", choices=BACKENDS, default="auto",
                   help="where search and ranking run (evireform.engine.make_engine; auto: "
                        "the GPU for large indexes when one is usable)")
    p.add_argument("--precision", choices=PRECISIONS, default="auto",
                   help="the proposition scan: int8 codes on the CPU (the index needs them: "
                        "index --precision int8), fp16 on the GPU, both re-scored exactly; "
                        "auto: int8 when the index has codes, else float32")
    p.add_argument("--no-lexical", action="store_true",
                   help="EviReform scores with the embeddings alone, as the paper does (default: "
                        "dense and lexical (BM25) together: EviReformConfig(lexical=False))")


def _config(args: Any) -> Any:
    """The EviReformConfig the engine arguments ask for (None: the defaults)."""
    return EviReformConfig(lexical=False) if getattr(args, "no_lexical", False) else None


def add_serve_parser(sub: Any) -> None:
    sv = sub.add_parser("serve", help="a resident HTTP retrieval service over a saved index "
                                      "(extra 'serve': FastAPI + uvicorn)")
    _add_index_dir(sv)
    sv.add_argument("--host", default="127.0.0.1",
                    help="address to bind (default localhost only)")
    sv.add_argument("--port", type=_port_number, default=8000,
                    help="TCP port, 1-65535 (default 8000)")
    sv.add_argument("--header-timeout", type=_positive_float, default=10.0, metavar="S",
                    help="seconds a client may take to send a request's headers "
                         "(default 10)")
    sv.add_argument("--max-connections", type=_positive_int, default=1000,
                    help="open connections at most; beyond, 503 (default 1000)")
    sv.add_argument("--cors-origin", action="append", metavar="ORIGIN", default=[],
                    help="a web origin (https://app.example.org) whose pages may call the "
                         "service from a browser (CORS; repeatable; none by default)")
    sv.add_argument("--api-key-env", metavar="VAR",
                    help="require 'Authorization: Bearer $VAR' on the data endpoints (not on "
                         "/health, the search page, the docs or the schema)")
    sv.add_argument("--tenant-keys", metavar="FILE",
                    help="tenants' keys, JSON {\"KEY\": {\"namespace\": \"acme\", "
                         "\"write\": true}}: each key reads (and writes) its namespace only, "
                         "on every endpoint; --api-key-env is then the operator's key, for "
                         "all namespaces and /metrics")
    sv.add_argument("--max-batch", type=_positive_int, default=64,
                    help="questions per micro-batch (one retrieve_many)")
    sv.add_argument("--max-wait-ms", type=_nonneg_float, default=2.0,
                    help="under load, how long a micro-batch waits for company")
    sv.add_argument("--max-queue", type=_positive_int, default=256,
                    help="questions waiting at most; beyond, 503 with Retry-After")
    sv.add_argument("--device", default=None, help="device for the index's embedder")
    _add_read_limit_arg(sv.add_argument_group("files uploaded through POST /documents"))
    _add_engine_args(sv)
    _add_index_embedder_args(sv)
    _add_llm_args(sv)
    sv.set_defaults(func=_cmd_serve)
