"""The journal: updates written as they were asked, replayed on load, until the next save.

A full save writes every file of the index again (its strings, graph, embeddings and their
checksums), so its cost grows with the index, not with the change.  An update through a
running service (:class:`~evireform.service.RetrievalService`) instead appends one record to
``journal.evj`` in the index directory and fsyncs that one file: the update as it was asked
(passages to add, ids or a filter to delete, upsert, namespace) and the embedding of every
proposition text the update encoded.  Loading the directory replays the records over the
saved index (:func:`evireform.application.replay_journal`): the same update code runs again
on the same index with the recorded embeddings, so the replay gives the index the service
served, without an encoder.  The next full save (the service's compaction a moment after,
``evireform update``, ``index.save``) writes a new directory without a journal: the swap
that puts the new generation in place drops the journal with the old one.

Each record is bound to the saved index it follows (the sha256 of its ``manifest.json``), so
a journal never replays over another generation.  Framing: ``EVJ1``, the payload's length
(8 bytes, little-endian) and its sha256 (32 bytes), then the payload: the JSON header's
length (8 bytes), the JSON, and the float32 rows.  A record cut short by a kill while it was
written (the last one, never acknowledged: the service answers after the fsync) is left out
with a warning; a record whose checksum fails anywhere else raises
:class:`~evireform.store.IndexFormatError` naming the file.
"""
from __future__ import annotations

from typing import Any

import hashlib
import json
import logging
import os
import struct
from pathlib import Path

import numpy as np

from .atomic import _fsync_dir
from .format import JOURNAL, MANIFEST, IndexFormatError

log = logging.getLogger("evireform")

__all__ = ["JOURNAL", "append", "read", "manifest_digest", "ReplayEmbedder",
           "RecordingEmbedder"]
_MAGIC = b"EVJ1"
_HEAD = struct.Struct("<4sQ32s")


def manifest_digest(path: Path) -> str:
    """The sha256 of the saved index's manifest: what a journal record is bound to."""
    return hashlib.sha256((Path(path) / MANIFEST).read_bytes()).hexdigest()


def append(path: Path, base: str, request: dict[str, Any], texts: list[str],
           rows: np.ndarray) -> int:
    """Append one record (``request``: JSON data; ``texts`` and their embedding ``rows``)
    bound to the manifest digest ``base``, fsync it, and return the journal's size after
    it.  The caller holds the index's lock."""
    rows = np.ascontiguousarray(rows, dtype="<f4").reshape(len(texts), -1) if texts else \
        np.zeros((0, 0), "<f4")
    head = json.dumps({"base": base, "request": request, "texts": texts,
                       "dim": int(rows.shape[1])}, ensure_ascii=False).encode("utf-8")
    payload = struct.pack("<Q", len(head)) + head + rows.tobytes()
    rec = _HEAD.pack(_MAGIC, len(payload), hashlib.sha256(payload).digest()) + payload
    f = Path(path) / JOURNAL
    new = not f.exists()
    fd = os.open(f, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0),
                 0o644)
    try:
        before = os.fstat(fd).st_size
        try:
            view = memoryview(rec)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        except BaseException:  # a full disk, a kill signal: the journal as it was
            try:
                os.ftruncate(fd, before)
                os.fsync(fd)
            except OSError:
                pass  # a torn last record: left out on read, and the next append fails
            raise
        size = os.fstat(fd).st_size
    finally:
        os.close(fd)
    if new:  # the file's name made durable too
        _fsync_dir(Path(path))
    return size


def read(path: Path) -> list[tuple[dict[str, Any], list[str], np.ndarray]]:
    """The records of the journal at ``path`` bound to its saved index, in order, as
    ``(request, texts, rows)``; ``[]`` without a journal.  A torn last record is left out
    (with a warning); a record that fails its checksum before the end, or one bound to
    another saved index, raises :class:`~evireform.store.IndexFormatError`."""
    f = Path(path) / JOURNAL
    if f.is_symlink():
        raise IndexFormatError(f"{f}: a symbolic link, not the index's journal")
    try:
        data = f.read_bytes()
    except FileNotFoundError:
        return []
    base = manifest_digest(path)
    out, at = [], 0
    while at < len(data):
        if len(data) - at < _HEAD.size:
            log.warning("%s: a record cut short at byte %d (an update killed while it was "
                        "written, never acknowledged) is left out", f, at)
            break
        magic, n, digest = _HEAD.unpack_from(data, at)
        if magic != _MAGIC:
            raise IndexFormatError(f"{f}: not a journal record at byte {at}")
        payload = data[at + _HEAD.size:at + _HEAD.size + n]
        if len(payload) < n:
            log.warning("%s: a record cut short at byte %d (an update killed while it was "
                        "written, never acknowledged) is left out", f, at)
            break
        if hashlib.sha256(payload).digest() != digest:
            raise IndexFormatError(f"{f}: the record at byte {at} fails its sha256")
        (hn,) = struct.unpack_from("<Q", payload, 0)
        try:
            head = json.loads(payload[8:8 + hn].decode("utf-8"))
            texts, dim, request = head["texts"], int(head["dim"]), head["request"]
        except (ValueError, KeyError, TypeError) as exc:
            raise IndexFormatError(f"{f}: the record at byte {at} does not parse ({exc})") \
                from None
        if head.get("base") != base:
            raise IndexFormatError(f"{f}: the record at byte {at} follows another saved "
                                   "index (its manifest's sha256 differs); remove the "
                                   "journal to load the saved index alone")
        body = payload[8 + hn:]
        if len(body) != 4 * len(texts) * dim:
            raise IndexFormatError(f"{f}: the record at byte {at} holds {len(body)} bytes "
                                   f"of embeddings for {len(texts)} texts of dimension {dim}")
        rows = np.frombuffer(body, "<f4").reshape(len(texts), dim) if texts else \
            np.zeros((0, dim), np.float32)
        out.append((request, list(texts), rows.astype(np.float32, copy=False)))
        at += _HEAD.size + n
    return out


class ReplayEmbedder:
    """The embedder a replay runs with: each recorded text's recorded row (a text the
    record lacks is an error: the replay would not give what was served)."""

    def __init__(self, name: str, dim: int, texts: list[str], rows: np.ndarray):
        self.name, self.dim = name, int(dim)
        self._rows = {t: rows[i] for i, t in enumerate(texts)}

    def encode(self, texts, batch_size: int = 64, show_progress: bool = False, **_: Any):
        try:
            return np.stack([self._rows[t] for t in texts]) if len(texts) else \
                np.zeros((0, self.dim), np.float32)
        except KeyError as exc:
            raise ValueError(f"the journal holds no embedding for {str(exc)[:80]}; it does "
                             "not replay this update") from None


class RecordingEmbedder:
    """An embedder that encodes with ``inner`` and keeps every text and row it returned
    (what the journal records)."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.texts: list[str] = []
        self.rows: list[np.ndarray] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def encode(self, texts, *args: Any, **kw: Any):
        got = self.inner.encode(texts, *args, **kw)
        self.texts.extend(texts)
        self.rows.append(np.asarray(got, np.float32))
        return got

    def recorded(self) -> tuple[list[str], np.ndarray]:
        rows = np.concatenate(self.rows) if self.rows else np.zeros((0, 0), np.float32)
        return self.texts, rows
