"""Replies kept and replayed: the SQLite reply cache, replies files, and the replay index
that answers a recorded request by its key or by its content."""
from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sqlite3
import threading
from pathlib import Path
from typing import Any, Iterable, TYPE_CHECKING

from .._checks import loads as _json_loads
from .contract import ContractError, parse_json

if TYPE_CHECKING:  # annotations only
    from ..types import StrPath

log: logging.Logger = logging.getLogger("evireform.llm")


class ReplyCache:
    """Validated replies in SQLite, keyed by a hash of model, prompt version, messages and
    parameters.  Safe to share between threads.

    Opening refuses (``ValueError`` naming the file) a directory, a missing directory, a file
    that is not SQLite, and a ``replies`` table of another shape.  A cache that cannot be
    written (read-only, locked) still serves reads: :meth:`put` then reports the failure once
    on stderr (``write_error``) and the caller keeps the reply it paid for."""

    COLUMNS = ("key", "role", "reply")

    def __init__(self, path: str) -> None:
        self.path: str = str(path)
        p = Path(path)
        if p.is_dir():
            raise ValueError(f"reply cache {path}: is a directory; give a file")
        if not p.parent.is_dir():
            raise ValueError(f"reply cache {path}: the directory {p.parent} does not exist")
        self._lock = threading.Lock()
        self.write_error: str | None = None
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=5)
            with self._lock:
                have = [r[1] for r in self._db.execute("PRAGMA table_info(replies)")]
                if not have:
                    self._db.execute("CREATE TABLE replies (key TEXT PRIMARY KEY, role TEXT, "
                                     "reply TEXT)")
                    self._db.commit()
                elif tuple(have) != self.COLUMNS:
                    raise ValueError(f"reply cache {path}: its 'replies' table has columns "
                                     f"{have}, expected {list(self.COLUMNS)}; not an "
                                     "evireform reply cache")
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("PRAGMA journal_mode=WAL")
        except sqlite3.Error as exc:
            raise ValueError(f"reply cache {path}: not a usable SQLite database "
                             f"({exc})") from None

    def get(self, key: str) -> Any:
        try:
            with self._lock:
                row = self._db.execute("SELECT reply FROM replies WHERE key = ?",
                                       (key,)).fetchone()
            return None if row is None else json.loads(row[0])
        except (sqlite3.Error, ValueError) as exc:
            self._report(f"read failed ({exc})")
            return None

    def _report(self, what: str) -> None:
        if self.write_error is None:
            self.write_error = what
            log.warning("reply cache %s: %s; replies are used but not cached", self.path,
                        what)

    def put(self, key: str, role: str, reply: Any) -> bool:
        """Store one reply; False (reported once) when the cache cannot be written."""
        return self.put_many([(key, role, reply)]) == 1

    def put_many(self, rows: Any) -> int:
        """Store ``(key, role, reply)`` rows in one transaction; returns how many were
        written (0 when the cache cannot be written, reported once)."""
        rows = [(str(k), str(r), json.dumps(v)) for k, r, v in rows]
        try:
            with self._lock:
                with self._db:
                    self._db.executemany("INSERT OR REPLACE INTO replies VALUES (?, ?, ?)", rows)
            return len(rows)
        except sqlite3.Error as exc:
            self._report(f"write failed ({exc})")
            return 0

    def export_jsonl(self, out: Any) -> int:
        """Write every cached reply as one JSON line {"key", "role", "reply"} to ``out`` (a
        path or an open text file); returns the count."""
        with self._lock:
            rows = self._db.execute("SELECT key, role, reply FROM replies ORDER BY key").fetchall()
        fh = open(out, "w", encoding="utf-8") if isinstance(out, (str, os.PathLike)) else out
        try:
            for key, role, reply in rows:
                fh.write(json.dumps({"key": key, "role": role, "reply": json.loads(reply)}) + "\n")
        finally:
            if fh is not out:
                fh.close()
        return len(rows)

    def import_jsonl(self, path: StrPath) -> int:
        """Load replies from JSON lines (:func:`read_reply_records`) in one transaction.
        Replies are validated when used, not here."""
        rows = [(rec["key"], str(rec.get("role", "")), rec["reply"])
                for rec in read_reply_records(path)]
        if rows and self.put_many(rows) != len(rows):
            raise ValueError(f"reply cache {self.path}: cannot be written ({self.write_error})")
        return len(rows)


def read_reply_records(path: StrPath) -> list[dict[str, Any]]:
    """The records of a replies file, one JSON object a line with ``key`` and either
    ``reply`` (the JSON object) or ``content`` (the model's text, parsed here); ``role``,
    ``model`` and ``messages`` are kept when present.  A malformed line raises ``ValueError``
    naming it."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc})") from None
    if Path(path).is_file() and not text.strip():
        raise ValueError(f"{path}: holds no reply records (an empty file)")
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = _json_loads(line)
            if not isinstance(rec, dict):
                raise TypeError(f"a {type(rec).__name__}, not an object")
            if "reply" not in rec:
                if not isinstance(rec.get("content"), str):
                    raise TypeError("'content' must be a string")
                rec["reply"] = parse_json(rec["content"])
            if not isinstance(rec["key"], (str, int)) or isinstance(rec["key"], bool):
                raise TypeError("'key' must be a string")
            rec["key"] = str(rec["key"])
            msgs = rec.get("messages")
            if msgs is not None and not (isinstance(msgs, list) and all(
                    isinstance(m, dict) and isinstance(m.get("role"), str)
                    and isinstance(m.get("content"), str) for m in msgs)):
                raise TypeError("'messages' must be a list of {role, content} strings")
            for k in ("role", "model"):
                if rec.get(k) is not None and not isinstance(rec[k], str):
                    raise TypeError(f"'{k}' must be a string")
        except (KeyError, TypeError, ValueError, ContractError) as exc:
            raise ValueError(f"{path}:{n}: not a reply record ({exc})") from None
        yield rec


_DATA = re.compile(r"<data>(.*?)</data>", re.DOTALL)
_ORDINAL_LINE = re.compile(r"^\[(\d+)\] <data>(.*)</data>$", re.DOTALL)


class ReplayIndex:
    """Recorded replies, found by key or, when a key no longer matches, by content.

    A key changes with any byte of the request; on another machine float rounding can swap
    two near-tied candidates and so change a selection request without changing what it
    asks.  Content matching (same role, system prompt and question): a selection reply's
    ordinals are carried over by candidate text to this request's ordinals (every selected
    candidate must be among this request's); a reformulation reply is reused when the quoted
    passages are the same set; any other role needs the same user message.
    """

    def __init__(self, records: Iterable[dict[str, Any]]) -> None:
        self.by_key: dict[str, Any] = {}
        self.by_question: dict[str, Any] = {}
        for r in records:
            self.by_key[r["key"]] = r["reply"]
            msgs = r.get("messages") or []
            if len(msgs) >= 2:
                self.by_question.setdefault(self._head(r.get("role", ""), msgs), []).append(r)

    @classmethod
    def from_files(cls, paths: Any) -> "ReplayIndex":
        return cls([rec for path in paths for rec in read_reply_records(path)])

    def __len__(self) -> int:
        return len(self.by_key)

    @staticmethod
    def _head(role, messages):
        return (role, messages[0].get("content", ""),
                messages[1].get("content", "").split("\n", 1)[0])

    def match(self, key: str, role: str, messages: list[dict[str, Any]]) -> Any:
        """(reply, "key" | "content"), or (None, None)."""
        if key in self.by_key:
            return self.by_key[key], "key"
        for rec in self.by_question.get(self._head(role, messages), ()):
            got = self._translate(role, rec, messages)
            if got is not None:
                return got, "content"
        return None, None

    @staticmethod
    def _translate(role, rec, messages):
        mine, theirs = messages[1]["content"], rec["messages"][1]["content"]
        if role == "select":
            def table(text):
                out = {}
                for line in text.split("\n")[2:]:
                    m = _ORDINAL_LINE.match(line)
                    if m:
                        out[int(m.group(1))] = m.group(2)
                return out
            old, new = table(theirs), table(mine)
            pos = {}
            for n, t in sorted(new.items()):
                pos.setdefault(t, n)
            sel = rec["reply"].get("selected") if isinstance(rec["reply"], dict) else None
            if not isinstance(sel, list):
                return None
            mapped = []
            for n in sel:
                t = old.get(n) if isinstance(n, int) and not isinstance(n, bool) else None
                if t is None or t not in pos:
                    return None
                mapped.append(pos[t])
            return {"selected": mapped}
        if role == "reformulate":
            same = sorted(_DATA.findall(mine.split("\n", 1)[-1])) == \
                sorted(_DATA.findall(theirs.split("\n", 1)[-1]))
            return rec["reply"] if same else None
        return rec["reply"] if mine == theirs else None
