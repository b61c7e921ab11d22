"""Output files that never overwrite an input or each other, opened before the work starts
and put in place atomically when it succeeds."""
from __future__ import annotations

from typing import Any, TYPE_CHECKING

import contextlib
import os
import tempfile
from pathlib import Path

if TYPE_CHECKING:  # annotations only
    from .types import StrPath


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def _same(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


class Outputs:
    """Named output files, checked and opened together before any work::

        with Outputs({"--out": out, "--trec": trec}, inputs=[questions]) as files:
            files["--out"].write(...)

    Refused up front (``ValueError`` naming the option): an output that is a directory, the
    same file as an input or as another output, or whose directory does not exist; and
    (``OSError``) one that cannot be created.  Regular files are written to a temporary
    sibling and renamed over the target only when the block ends without an exception, so
    a failure leaves every previous file as it was; special files (``/dev/stdout``) are
    written directly.  ``None`` paths are skipped."""

    def __init__(self, outputs: dict[str, Any], inputs=(), *, encoding: str = "utf-8") -> None:
        self.paths = {k: Path(v) for k, v in outputs.items() if v is not None}
        self.inputs = [Path(p) for p in inputs if p is not None]
        self.encoding: str = encoding
        self.files: dict[str, Any] = {}
        self._tmp: dict[str, Any] = {}

    def _check(self) -> None:
        names = list(self.paths)
        for i, name in enumerate(names):
            p = self.paths[name]
            if p.is_dir():
                raise ValueError(f"{name} {p}: is a directory; give a file name")
            if not p.parent.is_dir():
                raise ValueError(f"{name} {p}: the directory {p.parent} does not exist")
            for src in self.inputs:
                if _same(p, src) or p.absolute() == src.absolute():
                    raise ValueError(f"{name} {p} is the input file {src}; writing it would "
                                     "destroy the input. Choose another output file")
            for other in names[:i]:
                q = self.paths[other]
                if _same(p, q) or p.absolute() == q.absolute():
                    raise ValueError(f"{name} and {other} are the same file {p}; give each "
                                     "output its own file")

    def __enter__(self) -> dict[str, Any]:
        self._check()
        try:
            for name, p in self.paths.items():
                if p.exists() and not p.is_file():  # /dev/stdout, a FIFO: write directly
                    self.files[name] = open(p, "w", encoding=self.encoding)
                    continue
                fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".part", dir=p.parent)
                self._tmp[name] = Path(tmp)
                os.chmod(tmp, 0o666 & ~_umask())
                self.files[name] = os.fdopen(fd, "w", encoding=self.encoding)
        except BaseException:
            self._discard()
            raise
        return self.files

    def _discard(self) -> None:
        for fh in self.files.values():
            with contextlib.suppress(OSError):
                fh.close()
        for tmp in self._tmp.values():
            with contextlib.suppress(OSError):
                tmp.unlink()

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self._discard()
            return
        try:
            for name, fh in self.files.items():
                fh.flush()
                if name in self._tmp:
                    os.fsync(fh.fileno())
                fh.close()
            for name, tmp in self._tmp.items():
                os.replace(tmp, self.paths[name])
        except BaseException:
            self._discard()
            raise


def write_atomic(path: StrPath, text: str, *, inputs=(), name: str = "output") -> None:
    """Write ``text`` to ``path`` through :class:`Outputs` (checked against ``inputs``)."""
    with Outputs({name: path}, inputs) as files:
        files[name].write(text)


#: the most an option's input file (questions, ids to delete) may hold
MAX_INPUT_BYTES = 256 << 20


def regular_file(path: StrPath, what: str) -> Path:
    """``path`` when it is a regular file; else ``ValueError`` naming the option and what it
    is (a FIFO, a device such as ``/dev/zero``, a socket, a folder) or that it does not
    exist.  Only ``stat`` is called: a FIFO is never opened, so nothing waits on it."""
    import stat as _stat
    p = Path(path)
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        raise ValueError(f"{what} {p}: no such file") from None
    if _stat.S_ISREG(mode):
        return p
    kind = ("a folder" if _stat.S_ISDIR(mode) else "a FIFO (named pipe)" if _stat.S_ISFIFO(mode)
            else "a device" if _stat.S_ISCHR(mode) or _stat.S_ISBLK(mode) else
            "a socket" if _stat.S_ISSOCK(mode) else "not a regular file")
    raise ValueError(f"{what} {p}: is {kind}; give a regular file")


def read_text_file(path: StrPath, what: str, limit: int = MAX_INPUT_BYTES) -> str:
    """The UTF-8 text of ``path`` for option ``what``, read in blocks up to ``limit`` bytes:
    ``ValueError`` naming the option for a larger input (``/dev/zero``), one with NUL bytes
    (not a text file) or one that is not UTF-8; ``OSError`` as raised.  A pipe is read as
    it streams (``--questions <(cmd)``); inputs that are hashed or memory-mapped whole go
    through :func:`regular_file` instead."""
    buf = bytearray()
    with open(path, "rb") as f:
        while True:
            block = f.read(1 << 20)
            if not block:
                break
            if b"\x00" in block:
                raise ValueError(f"{what} {path}: holds NUL bytes; not a text file")
            buf += block
            if len(buf) > limit:
                raise ValueError(f"{what} {path}: over {limit >> 20} MiB; give a smaller file")
    try:
        return buf.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{what} {path}: not UTF-8 text ({exc.reason} at byte "
                         f"{exc.start})") from None
