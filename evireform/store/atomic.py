"""Directories replaced atomically: a hidden temporary sibling swapped in with two renames
under a per-directory lock (:func:`index_lock`), and the recovery of a swap a kill cut in
two.  Nothing here knows what an index holds: the caller says what a parked directory must
look like."""
from __future__ import annotations

from typing import Any, TYPE_CHECKING

import contextlib
import os
import shutil
import tempfile
import threading
import uuid
from pathlib import Path

if TYPE_CHECKING:  # annotations only
    from ..types import StrPath




class UnsafeTargetError(ValueError):
    """``save`` was pointed at something that is not an index it may replace."""


def _fsync(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace(src: Path, dst: Path) -> None:
    """``os.replace``; one function so that tests can interrupt a save between its renames."""
    os.replace(src, dst)


_LOCKS: dict[str, Any] = {}


_LOCKS_GUARD = threading.Lock()


@contextlib.contextmanager
def _dir_lock(path: Path):
    """Exclusive lock on the directory ``path`` (its saves, recoveries and read-modify-write
    updates), per directory, not per parent: a per-process re-entrant lock plus an advisory
    flock on a hidden sibling file ``.NAME-lock`` (the directory itself is swapped by a save,
    so the lock cannot live inside it; the empty file is left in place).  Where that file
    cannot be created (a read-only parent) the flock is skipped: nothing can be written
    there anyway.  Re-entrant within a thread, so :func:`index_lock` can hold it across
    load -> modify -> save while the save takes it again."""
    path = Path(path)
    key = os.path.join(os.path.realpath(path.parent), path.name)
    with _LOCKS_GUARD:
        entry = _LOCKS.setdefault(key, [threading.RLock(), 0, None])
    entry[0].acquire()
    try:
        if entry[1] == 0:
            try:
                import fcntl
                fd = os.open(path.parent / f".{path.name}-lock", os.O_RDWR | os.O_CREAT, 0o644)
            except (ImportError, OSError):
                fd = None
            if fd is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                except OSError:
                    os.close(fd)
                    fd = None
            entry[2] = fd
        entry[1] += 1
        try:
            yield
        finally:
            entry[1] -= 1
            if entry[1] == 0 and entry[2] is not None:
                import fcntl
                with contextlib.suppress(OSError):
                    fcntl.flock(entry[2], fcntl.LOCK_UN)
                os.close(entry[2])
                entry[2] = None
    finally:
        entry[0].release()


def index_lock(path: StrPath):
    """The lock a read-modify-write of the index at ``path`` holds from load to save
    (``evireform update``, the service's updates): concurrent updaters of that index queue
    instead of losing each other's changes; other indexes in the same folder are not
    held up.  Saving takes the same lock, re-entrantly."""
    p = Path(path).absolute()
    p.parent.mkdir(parents=True, exist_ok=True)
    return _dir_lock(p)


def _siblings(path: Path, kind: str) -> list[Path]:
    """Leftover ``.NAME.tmp-*`` / ``.NAME.old-*`` directories of ``path``, newest first."""
    found = [p for p in path.parent.glob(f".{path.name}.{kind}-*") if p.is_dir()]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def recover(path: StrPath, looks_like: Any) -> bool:
    """Put the previous directory back at ``path`` when a save was killed between its two
    renames (the target missing, the previous directory parked in ``.NAME.old-*``).
    ``looks_like(dir)`` says whether a parked directory is one of the kind being saved
    (:func:`evireform.store.format.looks_like_index` for an index).  Returns True if it did.  Call it with the parent's lock
    held, or accept a race with a concurrent save."""
    path = Path(path)
    if path.exists() or path.is_symlink():
        return False
    for old in _siblings(path, "old"):
        if looks_like(old):
            try:
                _replace(old, path)
            except OSError:
                return False
            _fsync_dir(path.parent)
            return True
    return False


def _clean_leftovers(path: Path) -> None:
    for kind in ("tmp", "old"):
        for p in _siblings(path, kind):
            shutil.rmtree(p, ignore_errors=True)


def write_dir_atomically(path: StrPath, write: Any, *, looks_like: Any, check=None) -> Path:
    """Write a directory at ``path`` with ``write(tmp)`` into a hidden temporary sibling, fsync
    every file in it, and swap it in with two renames under the parent's lock
    (:func:`index_lock`).  A process killed at any point leaves the previous directory or the
    new one: when a kill falls between the renames, the next save or load puts the previous
    one back (:func:`recover`, with ``looks_like`` saying what a parked directory must be).
    ``check()`` runs again under the lock (a target that changed meanwhile is refused).
    Leftover temporaries are removed.  The one directory swap of the package: indexes and
    shard layouts are saved through it."""
    path = Path(path).absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    with _dir_lock(path):
        recover(path, looks_like)
        _clean_leftovers(path)
        if check is not None:
            check()
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
        try:
            write(tmp)
            for f in tmp.iterdir():
                if f.is_file():
                    _fsync(f)
            _fsync_dir(tmp)
            old = None
            if path.exists():
                old = path.parent / f".{path.name}.old-{uuid.uuid4().hex[:8]}"
                _replace(path, old)
            _replace(tmp, path)
            _fsync_dir(path.parent)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        except OSError as exc:
            # named while the partial files still hold the disk: once they are removed the
            # disk has room again and a short write would look unexplained
            named = named_write_error(exc, path.parent)
            shutil.rmtree(tmp, ignore_errors=True)
            recover(path, looks_like)
            if named is exc:
                raise
            raise named from exc
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            recover(path, looks_like)
            raise
    return path


def named_write_error(exc: OSError, where) -> OSError:
    """``exc`` from writing under the folder ``where``, its cause named when it has no errno:
    numpy (and other buffered writers) report a short write as ``"768000 requested and
    51168 written"``.  The folder's free space and the process's file-size limit tell which
    it was: an ``OSError`` with ``errno.ENOSPC`` (the disk is full) or ``errno.EFBIG`` (a file
    would pass ``ulimit -f``) and a message saying so and what to do; ``exc`` itself when
    it has an errno or neither explains it."""
    import errno
    import re
    if exc.errno is not None:
        return exc
    m = re.search(r"(\d+) requested and (\d+) written", str(exc))
    want = int(m.group(1)) - int(m.group(2)) if m else 1
    try:
        st = os.statvfs(where)
        free = st.f_bavail * st.f_frsize
    except (OSError, AttributeError):
        free = None
    limit = None
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        limit = None if soft == resource.RLIM_INFINITY else soft
    except (ImportError, OSError, ValueError, AttributeError):
        pass
    if free is not None and free < max(want, 1 << 16):
        out = OSError(errno.ENOSPC, f"no space left on the disk holding {where} (a write "
                      f"stopped short: {exc}); free some space and run the command again")
    elif limit is not None:
        out = OSError(errno.EFBIG, f"a file written under {where} would pass this process's "
                      f"file-size limit (ulimit -f: {limit:,} bytes; a write stopped short: "
                      f"{exc}); raise the limit and run the command again")
    else:
        return exc
    return out
