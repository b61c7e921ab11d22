"""Reading corpora in the formats of ``shared/data`` (the HippoRAG file formats).

* a JSON list of ``{"title", "text"}`` records (MuSiQue, 2WikiMultiHopQA; ``"id"``/``"idx"``
  and ``"paragraph_text"`` are accepted too);
* a JSON object mapping each title to its list of sentences (HotpotQA), or to a text;
* plain data: a JSON list of strings, or JSONL (``.jsonl``/``.ndjson``, or any file that is
  one JSON value per line) of ``{"id"?, "title"?, "text"}`` records or strings.

Passage ids are the record's ``id`` (or ``idx``) when present, the title for title-keyed
objects, and otherwise the position in the file (so ids given are kept).
"""
from __future__ import annotations

import json
from pathlib import Path

from .types import Passage


def _text(value, where: str) -> str:
    """A passage text: a string, or a list of sentence strings (joined).  Anything else
    (numbers, nested lists, objects) is an error naming the record."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return "".join(value).strip()
    raise ValueError(f"{where}: the text must be a string or a list of sentence strings; "
                     f"got {value!r:.80}")


def _label(value, where: str, what: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError(f"{where}: {what} must be a string or an integer; got {value!r:.80}")
    return str(value)


def passages_from_json(obj) -> list[Passage]:
    """Convert a parsed corpus (list of records or title -> sentences object) to passages."""
    out: list[Passage] = []
    if isinstance(obj, dict):
        for title, value in obj.items():
            out.append(Passage(id=str(title), title=str(title),
                               text=_text(value, f"corpus entry {title!r:.80}")))
    elif isinstance(obj, list):
        for pos, rec in enumerate(obj):
            if isinstance(rec, str):  # plain texts: ids are positions, no title
                out.append(Passage(id=str(pos), title="", text=rec.strip()))
                continue
            if not isinstance(rec, dict):
                raise ValueError(f"corpus record {pos} is a {type(rec).__name__}, "
                                 "expected a string or an object with 'text'")
            text = rec.get("text", rec.get("paragraph_text"))
            if text is None:
                raise ValueError(f"corpus record {pos} has no 'text' field")
            where = f"corpus record {pos}"
            pid = _label(rec.get("id", rec.get("idx", pos)), where, "its id")
            title = _label(rec.get("title", ""), where, "its title")
            out.append(Passage(id=pid, title=title, text=_text(text, where)))
    else:
        raise ValueError("a corpus must be a JSON list of {title, text} records or an object "
                         f"mapping titles to sentences; got {type(obj).__name__}")
    ids = [p.id for p in out]
    if len(set(ids)) != len(ids):
        raise ValueError("passage ids in the corpus are not unique")
    return out


def _jsonl(text: str) -> list:
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise json.JSONDecodeError(f"line {n}: {exc.msg}", exc.doc, exc.pos) from None
    return out


def as_passages(items) -> list[Passage]:
    """Passages from what a user has at hand: :class:`Passage` objects, strings (ids are
    positions), or ``{"id"?, "title"?, "text"}`` dicts; mixed lists are fine."""
    items = list(items)
    if all(isinstance(p, Passage) for p in items):
        return items
    return passages_from_json([p if not isinstance(p, Passage) else
                               {"id": p.id, "title": p.title, "text": p.text} for p in items])


def load_corpus(path) -> list[Passage]:
    """Read a corpus file; raises ``ValueError`` for an empty or malformed corpus."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"corpus file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"corpus {path} is not UTF-8 text ({exc})") from None
    try:
        if path.suffix.lower() in (".jsonl", ".ndjson"):
            obj = _jsonl(text)
        else:
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                if "Extra data" not in str(exc):
                    raise
                obj = _jsonl(text)  # one JSON value per line
    except json.JSONDecodeError as exc:
        raise ValueError(f"corpus {path} is not valid JSON or JSONL: {exc}") from None
    try:
        passages = passages_from_json(obj)
    except ValueError as exc:
        raise ValueError(f"corpus {path}: {exc}") from None
    if not passages:
        raise ValueError(f"corpus {path} is empty")
    return passages
