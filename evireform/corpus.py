"""Reading corpora in the formats of ``shared/data`` (the HippoRAG file formats).

* a JSON list of ``{"title", "text"}`` records (MuSiQue, 2WikiMultiHopQA; ``"id"``/``"idx"``
  and ``"paragraph_text"`` are accepted too);
* a JSON object mapping each title to its list of sentences (HotpotQA), or to a text;
* plain data: a JSON list of strings, or JSONL (``.jsonl``/``.ndjson``, or any file that is
  one JSON value per line) of ``{"id"?, "title"?, "text"}`` records or strings.

Every other field of a record (and the fields of a ``"metadata"`` object, if the record has
one) becomes the passage's ``metadata`` (a JSON object; :mod:`evireform.filters` filters on
it and results return it).

Passage ids are the record's ``id`` (or ``idx``) when present and the title for title-keyed
objects.  A record without an id (a plain string, or a record with no ``id``/``idx``, the
MuSiQue / 2Wiki / HippoRAG layout) gets an id derived from its content,
:func:`content_id` (the first 16 hex digits of the sha256 of title and text), so the same
passage has the same id in every file, build and update: adding a file twice is detected as a
duplicate, and a new file never collides with, let alone replaces, another passage.  A record
repeated within one file gets ``-2``, ``-3``, ... after its id.  Indexes saved with the older
position ids keep loading and keep their ids.
"""
from __future__ import annotations

from typing import Any, TYPE_CHECKING

from ._checks import as_list, loads as _json_loads

import hashlib
import json
import sys
from pathlib import Path

from ._checks import check_json_value, check_passage
from .types import Passage

if TYPE_CHECKING:  # annotations only
    from .types import StrPath


class DuplicatePassageIds(ValueError):
    """Records that give two passages one id (the service answers 409: a conflict inside
    the request, as an id the index holds with other content is)."""

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


#: record fields that are the passage itself; every other field is metadata
RECORD_FIELDS = ("id", "idx", "title", "text", "paragraph_text", "metadata")


def record_metadata(rec: dict[str, Any], where: str) -> dict[str, Any]:
    """The metadata of a corpus record: its ``"metadata"`` object (if any) and every field
    that is not one of :data:`RECORD_FIELDS`.  Keys must be strings."""
    given = rec.get("metadata", {})
    if given is None:
        given = {}
    if not isinstance(given, dict):
        raise ValueError(f"{where}: 'metadata' must be a JSON object; got {given!r:.80}")
    out = dict(given)
    for key, value in rec.items():
        if key not in RECORD_FIELDS:
            out[key] = value
    bad = [k for k in out if not isinstance(k, str)]
    if bad:
        raise ValueError(f"{where}: metadata keys must be strings; got {bad[0]!r:.80}")
    if out:
        check_json_value(out, where)
        try:
            json.dumps(out, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: metadata must be plain JSON (strings, finite numbers, "
                             f"booleans, null, lists, objects): {exc}") from None
    return out


def content_id(title: str, text: str, scope: str | None = None) -> str:
    """The id of a passage that came without one: 16 hex digits of sha256(title, text);
    with ``scope`` (a tenant's namespace) of sha256(scope, title, text), so that the same
    text added by two tenants gets two ids and one tenant's id says nothing of another's
    content (issue 81)."""
    key = f"{title}\x1f{text}" if scope is None else f"{scope}\x1e{title}\x1f{text}"
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def passages_from_json(obj, scope: str | None = None) -> list[Passage]:
    """Convert a parsed corpus (list of records or title -> sentences object) to passages;
    ``scope``: the namespace ids derived from content are made in (:func:`content_id`)."""
    out: list[Passage] = []
    seen: dict[str, int] = {}

    def derived(title: str, text: str) -> str:
        pid = content_id(title, text, scope)
        seen[pid] = seen.get(pid, 0) + 1
        return pid if seen[pid] == 1 else f"{pid}-{seen[pid]}"

    if isinstance(obj, dict):
        for title, value in obj.items():
            out.append(check_passage(Passage(id=str(title), title=str(title),
                                             text=_text(value, f"corpus entry {title!r:.80}")),
                                     f"corpus entry {title!r:.80}"))
    elif isinstance(obj, list):
        for pos, rec in enumerate(obj):
            if isinstance(rec, str):  # plain texts: ids from their content, no title
                out.append(check_passage(Passage(id=derived("", rec.strip()), title="",
                                                 text=rec.strip()), f"corpus record {pos}"))
                continue
            if not isinstance(rec, dict):
                raise ValueError(f"corpus record {pos} is a {type(rec).__name__}, "
                                 "expected a string or an object with 'text'")
            text = rec.get("text", rec.get("paragraph_text"))
            if text is None:
                raise ValueError(f"corpus record {pos} has no 'text' field")
            where = f"corpus record {pos}"
            title = _label(rec.get("title", ""), where, "its title")
            text = _text(text, where)
            given = rec.get("id", rec.get("idx"))
            pid = _label(given, where, "its id") if given is not None else derived(title, text)
            out.append(check_passage(Passage(id=pid, title=title, text=text,
                                             metadata=record_metadata(rec, where)), where))
    else:
        raise ValueError("a corpus must be a JSON list of {title, text} records or an object "
                         f"mapping titles to sentences; got {type(obj).__name__}")
    ids = [p.id for p in out]
    if len(set(ids)) != len(ids):
        from collections import Counter
        dup = Counter(ids).most_common(1)[0][0]
        raise DuplicatePassageIds(f"passage ids in the corpus are not unique ({dup!r:.80} "
                                  "repeats)")
    return out


def _jsonl(text: str) -> list[Any]:
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                out.append(_json_loads(line))
            except json.JSONDecodeError as exc:
                raise json.JSONDecodeError(f"line {n}: {exc.msg}", exc.doc, exc.pos) from None
    return out


def as_passages(items: Any, what: str = "passages", scope: str | None = None
                ) -> list[Passage]:
    """Passages from what a user has at hand: :class:`Passage` objects, strings (ids from
    their content, :func:`content_id`, made in ``scope`` when given), or
    ``{"id"?, "title"?, "text"}`` dicts; mixed lists are fine.  A bare string is refused
    (it is not a list of passages)."""
    items = as_list(items, what)
    if all(isinstance(p, Passage) for p in items):
        for i, p in enumerate(items):
            check_passage(p, f"{what}[{i}] {p.id!r:.60}")
        return items
    return passages_from_json([p if not isinstance(p, Passage) else
                               {"id": p.id, "title": p.title, "text": p.text,
                                "metadata": p.metadata} for p in items], scope)


def load_corpus(path: StrPath, *, under: StrPath | None = None) -> list[Passage]:
    """Read a corpus file; raises ``ValueError`` for an empty or malformed corpus.
    ``under``: the folder a walk found it in, from which it is opened one step at a time,
    no step following a link (:func:`evireform.formats.read_file_bytes`)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"corpus file not found: {path}")
    try:
        if under is None:
            text = path.read_text(encoding="utf-8")
        else:
            from .formats import read_file_bytes
            text = read_file_bytes(path, sys.maxsize, under=under).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"corpus {path} is not UTF-8 text ({exc})") from None
    try:
        if path.suffix.lower() in (".jsonl", ".ndjson"):
            obj = _jsonl(text)
        else:
            try:
                obj = _json_loads(text, f"corpus {path}")
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
