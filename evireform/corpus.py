"""Reading corpora in the formats of ``shared/data`` (the HippoRAG file formats).

* a JSON list of ``{"title", "text"}`` records (MuSiQue, 2WikiMultiHopQA; ``"id"``/``"idx"``
  and ``"paragraph_text"`` are accepted too);
* a JSON object mapping each title to its list of sentences (HotpotQA), or to a text.

Passage ids are the record's ``id`` (or ``idx``) when present, the title for title-keyed
objects, and otherwise the position in the file.
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
            if not isinstance(rec, dict):
                raise ValueError(f"corpus record {pos} is a {type(rec).__name__}, "
                                 "expected an object with 'title' and 'text'")
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


def load_corpus(path) -> list[Passage]:
    """Read a corpus file; raises ``ValueError`` for an empty or malformed corpus."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"corpus file not found: {path}")
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"corpus {path} is not UTF-8 text ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"corpus {path} is not valid JSON: {exc}") from None
    try:
        passages = passages_from_json(obj)
    except ValueError as exc:
        raise ValueError(f"corpus {path}: {exc}") from None
    if not passages:
        raise ValueError(f"corpus {path} is empty")
    return passages
