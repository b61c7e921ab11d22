"""The ``evireform`` command line: one module per command group (:mod:`.indexing`,
:mod:`.querying`, :mod:`.experiments`) over the option groups every command shares
(:mod:`.options`); the commands call :mod:`evireform.application`, where the library logic
they share lives."""
from __future__ import annotations

from typing import Any

import argparse
import logging
import sqlite3
import sys

from .. import __version__
from ..kernels import BackendUnavailable, join_warm_up
from . import experiments, indexing, querying
from .options import HelpFormatter, parse_setting
from .querying import read_questions, trec_docid, trec_scores


__all__ = ["main", "build_parser", "parse_setting", "read_questions", "trec_docid",
           "trec_scores"]

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="evireform", description="EviReform multi-hop retrieval: build, query, update, "
        "serve and evaluate proposition indexes.")
    p.add_argument("--version", action="version", version=f"evireform {__version__}")
    p.add_argument("-v", "--verbose", dest="log_level", action="store_const", const="info",
                   default="warning",
                   help="the same as --log-level info")
    p.add_argument("--log-level", choices=("error", "warning", "info", "debug"),
                   default="warning",
                   help="what the library logs to stderr (logger 'evireform': index loads "
                        "and builds, updates, LLM fallbacks, generations served; default "
                        "warning)")
    sub = p.add_subparsers(dest="command", required=True)

    indexing.add_index_parser(sub)
    experiments.add_eval_parser(sub)
    querying.add_query_parser(sub)
    indexing.add_update_parser(sub)
    experiments.add_analyze_parser(sub)
    experiments.add_llm_cache_parser(sub)
    indexing.add_verify_parser(sub)
    querying.add_serve_parser(sub)
    querying.add_mcp_parser(sub)
    experiments.add_bench_parser(sub)
    for sp in sub.choices.values():  # defaults shown in every command's help
        sp.formatter_class = HelpFormatter
    return p


class _CliLog(logging.StreamHandler):
    """The command line's handler on the 'evireform' logger (one per process), writing to
    whatever ``sys.stderr`` is at the time of each record."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):  # StreamHandler.__init__ sets it; stderr is read per record
        pass


def _log_to_stderr(level: str) -> None:
    logger = logging.getLogger("evireform")
    handler = next((h for h in logger.handlers if isinstance(h, _CliLog)), None)
    if handler is None:
        handler = _CliLog()
        handler.setFormatter(logging.Formatter("evireform: %(levelname)s: %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(getattr(logging, level.upper()))


def main(argv: Any=None) -> int:
    args = build_parser().parse_args(argv)
    _log_to_stderr(args.log_level)
    try:
        return args.func(args)
    except (ValueError, TypeError, OSError, BackendUnavailable, sqlite3.Error,
            OverflowError, RecursionError, ImportError) as exc:  # (a missing extra)
        print(f"evireform {args.command}: error: {_describe(exc)}", file=sys.stderr)
        return 2
    except KeyError as exc:  # an unknown passage id
        print(f"evireform {args.command}: error: {exc.args[0] if exc.args else exc}",
              file=sys.stderr)
        return 2
    finally:  # no native (numba) thread may still run when the process exits
        join_warm_up()


def run(argv: Any = None) -> None:
    """The ``evireform`` command: :func:`main`, then the process ends without the
    interpreter's teardown of its modules (finalising ONNX Runtime, numba and the index's
    memory maps took about 0.45 s after a cold ``query`` answered, 2 cores): what the
    interpreter would run at exit (``atexit`` handlers, logging's flush) runs first, and
    every stream is flushed, so nothing a command wrote is lost.  Library code and tests
    call :func:`main`, which returns."""
    import atexit
    import os
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's --help and usage errors
        rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        if not isinstance(exc.code, int) and exc.code is not None:
            print(exc.code, file=sys.stderr)
    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that went away (| head), or closed
            rc = rc or 1
    os._exit(rc if isinstance(rc, int) else 1)


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

