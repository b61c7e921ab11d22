"""Your own files as passages: text and Markdown files, corpus files and folders of them.

:func:`load_paths` reads every path given (``evireform index PATH... OUT``, ``evireform
update INDEX --add PATH``):

* ``.txt``, ``.md`` / ``.markdown`` files are split into chunks of at most ``chunk_tokens``
  tokens (the embedder's own tokenizer when it has one, :func:`token_counter`), cut at
  sentence ends where possible (:func:`evireform.text.sentences`, Unicode-aware: ``.!?`` and
  ``。！？``, blank lines, Markdown headings), consecutive chunks sharing about
  ``chunk_overlap`` tokens of whole sentences; a sentence longer than a chunk is cut by
  words (characters for unspaced scripts such as Chinese);
* ``.json``, ``.jsonl``, ``.ndjson`` files are corpora (:func:`evireform.corpus.load_corpus`),
  records and their metadata as they are;
* folders are walked recursively in sorted order, keeping the files whose path matches one
  of ``include`` (default: the suffixes above) and none of ``exclude`` (``fnmatch`` globs on
  the path relative to the folder, e.g. ``"drafts/*"``); hidden entries and evireform index
  directories are skipped.  Only regular files are read: FIFOs, devices, sockets, links to
  folders and links that point out of the folder are passed over with a warning
  (``Loaded.warnings``); an entry that cannot be listed or read stops the command unless
  ``skip_errors``.  A file name that is not valid UTF-8 is refused (rename the file).

A chunk's passage has ``id = "{source}#{chunk}"``, ``title`` = the front matter's ``title``,
else the file's first Markdown heading, else its name without suffix, and ``metadata`` = the
front matter's keys (a leading ``---`` YAML block, removed from the text) plus ``{"source",
"chunk", "title"}``.  ``source`` is ``{root name}/{path below the root}``, where the root is
the folder given (for a file given alone: the folder an index already holds it under, else
its own folder), so it does not depend on the current directory; the index records each
file's root and path (``index.meta["documents"]``, :func:`document_registry`), and
``update --add`` of a folder makes the index match it: files added, changed, renamed,
deleted or emptied since (:func:`replace_sources`).  Which passages are a file's chunks is
never read from user metadata (a record's own ``source`` field is just metadata).

A run without spaces longer than a chunk (a data URI, a file without spaces) is cut by
characters: a chunk holds at most ``chunk_tokens * MAX_CHARS_PER_TOKEN`` characters.

A file that cannot be read (not UTF-8, unreadable, a malformed corpus) raises ``ValueError``
naming it; with ``skip_errors=True`` it is reported in the returned error list and skipped.
"""
from __future__ import annotations

from typing import Any, Sequence, TYPE_CHECKING

import fnmatch
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ._checks import check_text
from .corpus import load_corpus
from .formats import (
    DOCUMENT_SUFFIXES, Block, Document, MissingReader, Section, front_matter, read_document,
    read_file_bytes)
from .records import LOCATION_KEYS
from .store import looks_like_index
from .extract.tokens import sentences
from .types import Passage

if TYPE_CHECKING:  # annotations only
    from .embed import Embedder
    from .index import PropositionIndex

__all__ = ["TEXT_SUFFIXES", "CORPUS_SUFFIXES", "load_paths", "chunk_text", "token_counter",
           "replace_sources", "Loaded", "front_matter", "document_registry", "document_roots",
           "DOCUMENTS", "chunk_blocks"]

#: files chunked into passages: plain text, and the documents of :mod:`evireform.formats`
TEXT_SUFFIXES = (".txt",) + DOCUMENT_SUFFIXES
CORPUS_SUFFIXES = (".json", ".jsonl", ".ndjson")
#: a chunk holds at most chunk_tokens * MAX_CHARS_PER_TOKEN characters, whatever the
#: tokenizer says of a long run without spaces
MAX_CHARS_PER_TOKEN = 16
_TOKEN = re.compile(r"\w+|[^\w\s]", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


def _regex_count(texts: list[str]) -> list[int]:
    """Tokens as words and punctuation, each CJK character one token (an approximation of a
    word-piece tokenizer, used when the embedder has none)."""
    return [sum(len(_CJK.findall(t)) or 1 for t in _TOKEN.findall(s)) for s in texts]


def token_counter(embedder: Embedder | None=None):
    """``texts -> token counts`` with ``embedder``'s tokenizer (a sentence-transformers
    model directory's ``tokenizer.json``, read with ``tokenizers``), else
    :func:`_regex_count`."""
    model_dir = None
    try:
        model_dir = embedder._model_dir() if embedder is not None and \
            hasattr(embedder, "_model_dir") else None
    except Exception:
        model_dir = None
    if model_dir and (Path(model_dir) / "tokenizer.json").is_file():
        try:
            from tokenizers import Tokenizer
            tok = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
            tok.no_truncation()
            tok.no_padding()  # a model's tokenizer.json may pad every text to a length
            return lambda texts: [len(e.ids) for e in
                                  tok.encode_batch(list(texts), add_special_tokens=False)]
        except Exception:
            pass
    return _regex_count


def _cut_long(sentence: str, n_tokens: int, limit: int) -> list[str]:
    """A sentence over ``limit`` tokens cut into pieces of about ``limit`` tokens: by words,
    or by characters when it has no spaces (unspaced scripts)."""
    words = sentence.split()
    if len(words) <= 1:
        step = max(1, int(len(sentence) * limit / max(n_tokens, 1)))
        return [sentence[i:i + step] for i in range(0, len(sentence), step)]
    step = max(1, int(len(words) * limit / max(n_tokens, 1)))
    return [" ".join(words[i:i + step]) for i in range(0, len(words), step)]


def chunk_text(text: str, chunk_tokens: int = 200, chunk_overlap: int = 30, *,
               count: Any=None) -> list[str]:
    """``text`` split into chunks of at most ``chunk_tokens`` tokens (by ``count``, default
    :func:`_regex_count`) on sentence ends, consecutive chunks repeating trailing whole
    sentences of up to ``chunk_overlap`` tokens."""
    return chunk_blocks([Block(text)], chunk_tokens, chunk_overlap, count=count,
                        block_sep=" ")


def chunk_blocks(blocks, chunk_tokens: int = 200, chunk_overlap: int = 30, *, count: Any=None,
                 block_sep: str = "\n") -> list[str]:
    """Blocks of a document section (:class:`evireform.formats.Block`) split into chunks as
    :func:`chunk_text` does, sentences of a block joined by a space and blocks by
    ``block_sep``; a ``verbatim`` block (code) keeps its lines and is cut only at line ends
    (by words or characters when one line is longer than a chunk)."""
    if chunk_tokens < 1 or chunk_overlap < 0 or chunk_overlap >= chunk_tokens:
        raise ValueError(f"need chunk_tokens >= 1 and 0 <= chunk_overlap < chunk_tokens; got "
                         f"{chunk_tokens}, {chunk_overlap}")
    base = count or _regex_count

    def count(texts: Sequence[str]):  # one long "word" (a data URI, a file without spaces) is many tokens,
        # though a tokenizer may call it one unknown token
        return [max(n, -(-len(t) // MAX_CHARS_PER_TOKEN)) for t, n in zip(texts, base(texts))]
    pieces: list[tuple[str, int, bool]] = []  # (text, tokens, starts a block)
    for b in blocks:
        if b.verbatim:
            units = [ln for ln in b.text.split("\n")]
            units = _group_lines(units, count(units), chunk_tokens) if units else []
        else:
            units = [s for s in sentences(b.text) if s.strip()]
        first = True
        for s, n in zip(units, count(units)):
            if n <= chunk_tokens:
                got = [(s, n)]
            else:
                got = []
                cut = _cut_long(s, n, chunk_tokens)
                for c, m in zip(cut, count(cut)):
                    if m > chunk_tokens and len(c.split()) <= 1:  # one long word: by characters
                        sub = _cut_long(c, m, chunk_tokens)
                        got.extend(zip(sub, count(sub)))
                    else:
                        got.append((c, m))
            for c, m in got:
                pieces.append((c, m, first))
                first = False
    if not pieces:
        return []
    chunks, cur, size = [], [], 0
    for s, n, new in pieces:
        if cur and size + n > chunk_tokens:
            chunks.append(_join(cur, block_sep))
            keep, kept = [], 0  # the overlap: trailing whole sentences
            for t, m, nb in reversed(cur):
                if kept + m > chunk_overlap or kept + m + n > chunk_tokens:
                    break
                keep.insert(0, (t, m, nb))
                kept += m
            cur, size = keep, kept
        cur.append((s, n, new))
        size += n
    if cur:
        chunks.append(_join(cur, block_sep))
    return chunks


def _group_lines(lines: list[str], sizes: list[int], limit: int) -> list[str]:
    """Consecutive lines of a code block grouped into units of at most ``limit`` tokens."""
    out, cur, size = [], [], 0
    for ln, n in zip(lines, sizes):
        if cur and size + n > limit:
            out.append("\n".join(cur))
            cur, size = [], 0
        cur.append(ln)
        size += n
    if cur:
        out.append("\n".join(cur))
    return [u for u in out if u.strip()]


def _join(parts: Any, block_sep: str = " ") -> str:
    out = ""
    for s, _, new in parts:
        s = s if "\n" in s else s.strip()
        if out:
            if new:
                out += block_sep
            elif not (_CJK.search(out[-1]) and _CJK.search(s[:1])):
                out += " "
        out += s
    return out


@dataclass
class Loaded:
    """What :func:`load_paths` read: the passages, the text files chunked (``sources``:
    source -> number of chunks, 0 for a file now empty; corpus files are not listed), the
    files skipped with their errors, entries passed over with a warning (FIFOs, devices,
    links out of the folder), ``files`` (source -> ``{"root", "path"}``: the folder root
    and the path below it) and ``scopes`` (what was scanned: ``(root, path, is_folder)``),
    which :func:`replace_sources` uses to make the index match the folders."""

    passages: list[Passage]
    sources: dict[str, Any] = field(default_factory=dict)
    errors: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    files: dict[str, Any] = field(default_factory=dict)
    scopes: list[Any] = field(default_factory=list)
    #: files a folder held that no reader takes (the default include only), by suffix, and
    #: files whose reader needs an extra that is not installed (by suffix, in ``unread``
    #: too; their sources in ``skipped``: an update keeps what the index holds of them)
    unread: dict[str, int] = field(default_factory=dict)
    needs_extra: dict[str, str] = field(default_factory=dict)
    #: the first few of those files, by their path below the folder (what the warning names)
    unread_names: list[str] = field(default_factory=list)
    #: what ``skip_errors`` skipped: the sources of files that could not be read, and the
    #: folders that could not be listed as ``(root, path below it)``; an update keeps what
    #: the index holds of them (:func:`replace_sources`), never deletes it
    skipped: set[str] = field(default_factory=set)
    skipped_dirs: list[Any] = field(default_factory=list)


def _name_ok(path: str) -> None:
    """A path evireform can store: valid Unicode (a Latin-1 file name decodes with lone
    surrogates, which no UTF-8 index can hold)."""
    try:
        check_text(path, "file name")
    except ValueError:
        shown = os.fsencode(path).decode("utf-8", "backslashreplace")
        raise ValueError(f"{shown}: the file name is not valid UTF-8; rename the file") \
            from None


def _root_of(real: str, roots) -> str | None:
    """The longest of ``roots`` that is ``real`` or one of its parents."""
    best = None
    for r in roots or ():
        if (real == r or real.startswith(r.rstrip("/") + "/")) and \
                (best is None or len(r) > len(best)):
            best = r
    return best


def _source_of(root: str, rel: str) -> str:
    name = Path(root).name
    return f"{name}/{rel}" if name and rel else (rel or name)


def _walk(folder: str, include, exclude, out: Loaded, skip_errors: bool,
          default_include: bool = False):
    """Regular files under ``folder`` (real path), sorted: hidden entries and index
    directories skipped; FIFOs, devices, sockets and links that leave ``folder`` passed
    over with a warning; an entry that cannot be listed stops the walk unless
    ``skip_errors``."""

    def failed(exc) -> None:
        msg = f"{exc.filename or folder}: cannot be read ({exc.strerror or exc})"
        if not skip_errors:
            raise ValueError(msg + " (--skip-errors skips unreadable entries)")
        out.errors.append((str(exc.filename or folder), msg))
        # an entry that cannot be listed: what lies below it is not gone, only unread
        where = os.path.realpath(exc.filename or folder)
        out.skipped_dirs.append((folder, os.path.relpath(where, folder)))
    for root, dirs, files in os.walk(folder, onerror=failed, followlinks=False):
        r = Path(root)
        keep = []
        for d in sorted(dirs):
            if d.startswith(".") or looks_like_index(r / d):
                continue
            if (r / d).is_symlink():
                out.warnings.append(f"{r / d}: a link to a folder, not followed")
                continue
            keep.append(d)
        dirs[:] = keep
        for f in sorted(files):
            if f.startswith("."):
                continue
            full = r / f
            rel = full.relative_to(folder).as_posix()
            if include and not any(fnmatch.fnmatch(rel, g) or fnmatch.fnmatch(f, g)
                                   for g in include):
                if default_include and (_named_not_typed(f) and _sniffs_as_text(full)
                                        or _compressed_text(full, real_below=folder)):
                    pass  # README, README.Debian, NEWS, NEWS.gz: text by its bytes
                else:
                    if default_include:  # a file no reader takes: named, never silently left
                        suffix = Path(f).suffix.lower() or "(no suffix)"
                        out.unread[suffix] = out.unread.get(suffix, 0) + 1
                        if len(out.unread_names) < UNREAD_NAMED:
                            out.unread_names.append(rel)
                    continue
            if any(fnmatch.fnmatch(rel, g) or fnmatch.fnmatch(f, g) for g in exclude or ()):
                continue
            try:
                if full.is_symlink():
                    target = os.path.realpath(full)
                    if not (target == folder or target.startswith(folder.rstrip("/") + "/")):
                        out.warnings.append(f"{full}: a link that points out of {folder}, "
                                            "not followed")
                        continue
                    full = Path(target)  # read where it points, checked again at open
                st = full.stat()
            except OSError as exc:
                failed(exc)
                continue
            if not stat.S_ISREG(st.st_mode):
                out.warnings.append(f"{full}: not a regular file (a FIFO, device or socket), "
                                    "skipped")
                continue
            yield full, rel


def load_paths(paths: Any, *, chunk_tokens: int = 200, chunk_overlap: int = 30, embedder: Embedder | None=None,
               include=None, exclude=None, skip_errors: bool = False,
               show_progress: bool = False, roots=None, limits: Any = None,
               empty_ok: bool = False) -> Loaded:
    """Passages from files and folders (see the module docstring).  ``roots``: folder roots
    an index already knows (:func:`document_roots`), so a file or subfolder inside one keeps
    the ids it got there.  ``limits``: the readers' bounds
    (:class:`~evireform.formats.ReadLimits`; None: the defaults).  ``ValueError`` when a path
    does not exist or is not a regular file or folder, when no file was found, or (unless
    ``skip_errors``) when an entry cannot be read; ``empty_ok``: no passages is an answer
    (each file's reason in ``errors`` and ``unread``), not an error."""
    from .formats import ReadLimits, reading_limits
    if limits is not None and not isinstance(limits, ReadLimits):
        raise TypeError(f"limits must be a ReadLimits or None; got {type(limits).__name__}")
    with reading_limits(limits):
        return _load_paths(paths, chunk_tokens=chunk_tokens, chunk_overlap=chunk_overlap,
                           embedder=embedder, include=include, exclude=exclude,
                           skip_errors=skip_errors, show_progress=show_progress, roots=roots,
                           empty_ok=empty_ok)


def _load_paths(paths: Any, *, chunk_tokens: int, chunk_overlap: int,
                embedder: Embedder | None, include, exclude, skip_errors: bool,
                show_progress: bool, roots, empty_ok: bool) -> Loaded:
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    default_include = not include
    include = list(include) if include else [f"*{s}" for s in TEXT_SUFFIXES + CORPUS_SUFFIXES]
    out = Loaded([])
    # (path, root, path below the root, the folder walked to find it: read from there)
    files: list[tuple[Path, str, str, str | None]] = []
    for p in map(Path, paths):
        _name_ok(str(p))
        if p.is_dir() and looks_like_index(p) or p.is_file() and looks_like_index(p.parent):
            raise ValueError(f"{p} is an evireform index (or one of its files), not "
                             "documents; give the files or folders to index")
        if p.is_dir():
            real = os.path.realpath(p)
            root = _root_of(real, roots) or real
            scope = Path(os.path.relpath(real, root)).as_posix() if real != root else ""
            out.scopes.append((root, scope, True))
            n_dirs = len(out.skipped_dirs)
            for f, rel in _walk(real, include, exclude, out, skip_errors, default_include):
                below = Path(scope, rel).as_posix() if scope not in ("", ".") else rel
                files.append((f, root, below, real))
            for k in range(n_dirs, len(out.skipped_dirs)):  # as (root, path below the root)
                rel = out.skipped_dirs[k][1]
                rel = "" if rel == "." else rel
                out.skipped_dirs[k] = (root, Path(scope, rel).as_posix()
                                       if scope not in ("", ".") else rel)
        elif p.is_file():
            parent = os.path.realpath(p.parent)
            root = _root_of(parent, roots) or parent
            below = Path(os.path.relpath(parent, root), p.name).as_posix() \
                if parent != root else p.name
            out.scopes.append((root, below, False))
            files.append((p, root, below, None))
        elif p.exists():
            raise ValueError(f"{p}: not a regular file or folder (a FIFO, device or socket)")
        else:
            raise ValueError(f"{p}: no such file or folder")
    count = token_counter(embedder)
    seen: set[Any] = set()
    if show_progress:
        from tqdm.auto import tqdm
        files = tqdm(files, desc="read", unit="file")
    for f, root, below, walked in files:
        src = _source_of(root, below)
        if src in seen:
            continue
        seen.add(src)
        try:
            _name_ok(str(f))
            if f.suffix.lower() in COMPRESSED_SUFFIXES:
                got = _compressed_file(f, src, chunk_tokens, chunk_overlap, count, walked)
            elif f.suffix.lower() in CORPUS_SUFFIXES:
                got = load_corpus(f, under=walked)
            elif f.suffix.lower() in DOCUMENT_SUFFIXES:
                got = _document_file(f, src, chunk_tokens, chunk_overlap, count, walked)
            elif f.suffix.lower() in TEXT_SUFFIXES or f.suffix == "" or (
                    _named_not_typed(f.name) and _sniffs_as_text(f)):
                got = _text_file(f, src, chunk_tokens, chunk_overlap, count, walked)
            else:
                raise ValueError(f"{f}: unsupported file type {f.suffix!r} (text: "
                                 f"{TEXT_SUFFIXES}, corpora: {CORPUS_SUFFIXES})")
        except MissingReader as exc:  # a format this install cannot read: named, not fatal
            suffix = f.suffix.lower()
            out.unread[suffix] = out.unread.get(suffix, 0) + 1
            out.needs_extra[suffix] = exc.extra
            if len(out.unread_names) < UNREAD_NAMED:
                out.unread_names.append(str(below) if below else f.name)
            out.skipped.add(src)
            continue
        except (OSError, ValueError) as exc:
            msg = str(exc) if str(f) in str(exc) else f"{f}: {exc}"
            if not skip_errors:
                raise ValueError(msg + " (--skip-errors skips unreadable files)") from None
            out.errors.append((str(f), msg))
            out.skipped.add(src)
            continue
        if f.suffix.lower() not in CORPUS_SUFFIXES:
            out.sources[src] = len(got)
            out.files[src] = {"root": root, "path": below}
        out.passages.extend(got)
    if out.unread:
        out.warnings.append(unread_summary(out.unread, out.needs_extra, out.unread_names))
    ids = [p.id for p in out.passages]
    if len(set(ids)) != len(ids):
        from collections import Counter
        dup = Counter(ids).most_common(1)[0][0]
        raise ValueError(f"passage id {dup!r:.80} occurs in more than one file")
    if not out.passages and not out.sources and not empty_ok:
        raise ValueError("no passages found in " + ", ".join(map(str, paths))
                         + (f" ({len(out.errors)} files skipped)" if out.errors else "")
                         + (f"; {unread_summary(out.unread, out.needs_extra, out.unread_names)}"
                            if out.unread else ""))
    return out


#: formats people keep beside their notes that no reader here takes yet
NO_READER_YET = (".ppt", ".xls", ".odt", ".ods", ".odp", ".rtf", ".doc", ".pages", ".key",
                 ".numbers")


#: how many of the files no reader takes the warning names
UNREAD_NAMED = 5


def _named_not_typed(name: str) -> bool:
    """Whether a file name's last dot-part names no file type: no suffix (``README``,
    ``NEWS``), or one longer than four characters or with a capital (``README.Debian``,
    ``changelog.source``), where ``.js``, ``.svg`` or ``.cfg`` say what the file is.  Such
    a file is read as text when its bytes are text (:func:`_sniffs_as_text`)."""
    suffix = Path(name).suffix[1:]
    return not suffix or len(suffix) > 4 or suffix != suffix.lower()


def _sniffs_as_text(path: Path, size: int = 8192) -> bool:
    """Whether the first ``size`` bytes of the regular file at ``path`` are UTF-8 text
    without NUL bytes (opened without following a link or blocking; a last character cut
    by the window counts as text).  False for anything that cannot be read."""
    try:
        fd = os.open(str(path), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        head = os.read(fd, size)
    except OSError:
        return False
    finally:
        os.close(fd)
    return _text_bytes(head)


def _text_bytes(head: bytes) -> bool:
    """Whether ``head`` (a file's first bytes) is UTF-8 text without NUL bytes, a last
    character cut by the window counting as text."""
    if not head or b"\0" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start >= len(head) - 3 and exc.reason == "unexpected end of data"
    return True


def unread_summary(unread: dict[str, int], needs_extra: dict[str, str] | None = None,
                   names: Sequence[str] = ()) -> str:
    """One line naming the files left unread, by suffix, most first, and the first few of
    them: "skipped 3 files: 2 .pptx (install 'evireform[documents]'), 1 .bin (no reader):
    talk.pptx, deck.pptx, blob.bin"."""
    needs_extra = needs_extra or {}
    n = sum(unread.values())

    def why(s: str) -> str:
        if s in needs_extra:
            return f"install 'evireform[{needs_extra[s]}]'"
        if s in NO_READER_YET:
            return "no reader yet; convert to PDF, HTML or text"
        return "no reader"
    parts = [f"{c} {s} ({why(s)})"
             for s, c in sorted(unread.items(), key=lambda x: (-x[1], x[0]))]
    tail = "" if set(unread) <= set(needs_extra) else \
        "; --include names files to read as text"
    shown = "" if not names else ": " + ", ".join(sorted(names)[:UNREAD_NAMED]) + (
        f" and {n - len(names[:UNREAD_NAMED])} more" if n > len(names[:UNREAD_NAMED]) else "")
    return f"skipped {n} file{'s' if n != 1 else ''}: " + ", ".join(parts) + shown + tail


def _text_file(f: Path, src: str, chunk_tokens: int, chunk_overlap: int, count: Any,
               under: str | None = None):
    """A plain-text file's passages: front matter as metadata, the rest chunked; ``under``:
    the folder walked to find it (opened from there, no step following a link)."""
    try:
        text = read_file_bytes(f, under=under).decode("utf-8").lstrip("\ufeff")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{f}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    front, text = front_matter(text, str(f))
    doc = Document(None, front, [Section((), [Block(text)])])
    return _passages(doc, f, src, chunk_tokens, chunk_overlap, count, block_sep=" ")


#: compressed files, read as the file inside when that is text or a document
#: (``NEWS.gz``, ``changelog.Debian.gz``, ``guide.md.xz``), within the same budgets
COMPRESSED_SUFFIXES = (".gz", ".bz2", ".xz")


def _opener(suffix: str) -> Any:
    import bz2
    import gzip
    import lzma
    return {".gz": lambda fh: gzip.GzipFile(fileobj=fh, mode="rb"),
            ".bz2": lambda fh: bz2.BZ2File(fh, "rb"), ".xz": lambda fh: lzma.LZMAFile(fh, "rb")
            }[suffix]


def _inflate(f: Path, raw: bytes, most: int) -> bytes:
    """At most ``most`` bytes of what the compressed ``raw`` holds (``ValueError`` naming
    the file when it is not valid or holds more than the document budget)."""
    import io
    try:
        with _opener(f.suffix.lower())(io.BytesIO(raw)) as fh:
            out = fh.read(most + 1)
    except (OSError, EOFError, ValueError) as exc:
        raise ValueError(f"{f}: not a valid {f.suffix} file ({exc})") from None
    except Exception as exc:  # lzma.LZMAError and the like
        raise ValueError(f"{f}: not a valid {f.suffix} file ({type(exc).__name__})") from None
    return out


def _inner_kind(f: Path, head: bytes) -> str | None:
    """What the file inside the compressed ``f`` is, by its name and its first bytes:
    "document" (a reader's suffix), "text" (``.txt``, or a name without a type whose bytes
    are text), or None (an archive, a binary, a corpus)."""
    inner = Path(f.name[:-len(f.suffix)])
    s = inner.suffix.lower()
    if s in (".tar", ".cpio") or not inner.name:
        return None
    if s in DOCUMENT_SUFFIXES:
        return "document"
    if s not in TEXT_SUFFIXES and not _named_not_typed(inner.name):
        return None
    return "text" if _text_bytes(head[:8192]) else None


def _compressed_text(path: Path, real_below: str | None = None) -> bool:
    """Whether the walk reads the compressed file at ``path``: the file inside is a
    document or text (its first 8 KiB inflated; False for anything unreadable)."""
    if path.suffix.lower() not in COMPRESSED_SUFFIXES:
        return False
    inner = Path(path.name[:-len(path.suffix)])
    if inner.suffix.lower() in DOCUMENT_SUFFIXES:
        return True
    try:
        raw = read_file_bytes(path, under=real_below)
        return _inner_kind(path, _inflate(path, raw, 8192)[:8192]) is not None
    except (OSError, ValueError):
        return False


def _compressed_file(f: Path, src: str, chunk_tokens: int, chunk_overlap: int, count: Any,
                     under: str | None = None):
    """A compressed file's passages: the file inside read as its name says (a document
    by its reader, text chunked), inflated to at most the document budget
    (``document_bytes``; a bigger one is refused naming the setting)."""
    from .formats import limit_setting, read_limit
    most = read_limit("document_bytes")
    data = _inflate(f, read_file_bytes(f, under=under), most)
    if len(data) > most:
        raise ValueError(f"{f}: holds more than the {most:,} bytes a document may have "
                         f"{limit_setting('document_bytes')}")
    kind = _inner_kind(f, data)
    if kind is None:
        raise ValueError(f"{f}: holds no text or document this reads")
    inner = f.with_name(f.name[:-len(f.suffix)])
    if kind == "document":
        from .formats import READERS, check_text_budget
        doc = READERS[inner.suffix.lower()](f, data)
        check_text_budget(f, doc)
        return _passages(doc, inner, src, chunk_tokens, chunk_overlap, count)
    try:
        text = data.decode("utf-8").lstrip("\ufeff")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{f}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    front, text = front_matter(text, str(f))
    doc = Document(None, front, [Section((), [Block(text)])])
    return _passages(doc, inner, src, chunk_tokens, chunk_overlap, count, block_sep=" ")


def _document_file(f: Path, src: str, chunk_tokens: int, chunk_overlap: int, count: Any,
                   under: str | None = None):
    """A Markdown, HTML, PDF or DOCX file's passages (:func:`evireform.formats.read_document`):
    each section chunked on its own, its heading the first line of its first chunk, its
    heading path in the passage's ``section`` (and ``page`` for a PDF page); ``under``: the
    folder walked to find it."""
    return _passages(read_document(f, under=under), f, src, chunk_tokens, chunk_overlap,
                     count)


#: file names that say what a file is, not what it is about: titled with their folder
GENERIC_STEMS = frozenset({"readme", "index", "main", "intro", "introduction", "contents",
                           "toc", "home", "notes", "doc", "docs", "documentation"})


def file_title(f: Path) -> str:
    """The title of a file that states none: its name without the suffix, after its
    folder's name when the name is a generic one ("fastapi README", not "README")."""
    stem = f.stem or f.name
    parent = Path(f).parent.name
    if stem.lower() in GENERIC_STEMS and parent:
        return f"{parent} {stem}"
    return stem


#: what a document's title, a heading in a section path and a metadata string may hold
#: (characters): a 2 MB heading or ``<meta description>`` is the file's text, not a label
#: copied into each of its chunks
MAX_TITLE_CHARS = 300
MAX_HEADING_CHARS = 200
MAX_META_CHARS = 2000


def _cap(text: str, n: int) -> str:
    text = " ".join(text.split()) if len(text) <= 4 * n else " ".join(text[:4 * n].split())
    return text if len(text) <= n else text[:n - 1].rstrip() + "…"


def _capped(v: Any) -> Any:
    if isinstance(v, str):
        return v if len(v) <= MAX_META_CHARS else _cap(v, MAX_META_CHARS)
    if isinstance(v, list):
        return [_capped(x) for x in v]
    if isinstance(v, dict):
        return {k: _capped(x) for k, x in v.items()}
    return v


def _passages(doc: Document, f: Path, src: str, chunk_tokens, chunk_overlap, count: Any,
              block_sep: str = "\n") -> list[Passage]:
    front = doc.metadata
    title = str(front["title"]) if isinstance(front.get("title"), (str, int, float)) \
        and str(front.get("title")).strip() else (doc.title or file_title(f))
    title = _cap(title, MAX_TITLE_CHARS)
    extra = {k: _capped(v) for k, v in front.items()
             if k not in ("source", "chunk", "title", *LOCATION_KEYS)}
    out: list[Passage] = []
    for sec in doc.sections:
        if not sec.blocks:
            continue
        # the heading that became the title is the title only: not again at the head of
        # every section path, nor the first line of the text under it.  A section's own
        # heading stays the first line of its first chunk: held in the metadata alone it
        # cost dense two and EviReform one of 37 questions at A@1 on the README set
        # (docs/results.md)
        path = sec.path
        if doc.title and path and path[0] == doc.title:
            path = path[1:]
        blocks = ([Block(path[-1])] if path and not sec.continued else []) \
            + list(sec.blocks)
        where = {}
        if path:
            where["section"] = " > ".join(_cap(h, MAX_HEADING_CHARS) for h in path)
        if sec.page is not None:
            where["page"] = sec.page
        where.update(sec.where)
        for c in chunk_blocks(blocks, chunk_tokens, chunk_overlap, count=count,
                              block_sep=block_sep):
            i = len(out)
            # what every chunk of the file holds first (the index keeps it once:
            # strings.MetadataColumn), where the chunk is after it
            out.append(Passage(id=f"{src}#{i}", title=title, text=c,
                               metadata={**extra, "source": src, "title": title, **where,
                                         "chunk": i}))
    return out


#: where an index records the files it holds chunks of (``index.meta[DOCUMENTS]``):
#: source -> ``{"root", "path", "chunks"}``; what :func:`replace_sources` keys on
DOCUMENTS = "documents"


def document_registry(index: PropositionIndex) -> dict[str, Any]:
    """source -> ``{"root", "path", "chunks"}`` for the files ``index`` holds chunks of: the
    record the loader left in ``index.meta``, else (an index built by the library from
    :func:`load_paths` passages) the passages that carry exactly the loader's metadata and
    id (``{source}#{chunk}``), never a record that merely has a ``source`` field."""
    reg = index.meta.get(DOCUMENTS)
    if isinstance(reg, dict):
        return {k: dict(v) for k, v in reg.items() if isinstance(v, dict)}
    out: dict[str, Any] = {}
    for p in index.passages:
        md = p.metadata
        src, chunk = md.get("source"), md.get("chunk")
        if isinstance(src, str) and isinstance(chunk, int) and not isinstance(chunk, bool) \
                and p.id == f"{src}#{chunk}" and "title" in md:
            e = out.setdefault(src, {"root": None, "path": None, "chunks": 0})
            e["chunks"] = max(e["chunks"], chunk + 1)
    return out


def document_roots(index: PropositionIndex) -> list[str]:
    """The folder roots ``index`` holds files of (for :func:`load_paths`'s ``roots``)."""
    return sorted({e["root"] for e in document_registry(index).values() if e.get("root")})


def _in_scope(src: str, entry: dict[str, Any], scope) -> bool:
    root, below, is_folder = scope
    if entry.get("root") is not None:
        if entry["root"] != root:
            return False
        path = entry.get("path") or ""
    else:  # recorded without its root: by the source, which starts with the root's name
        name = Path(root).name
        if not src.startswith(name + "/"):
            return False
        path = src[len(name) + 1:]
    if not is_folder:
        return path == below
    return below == "" or path == below or path.startswith(below + "/")


def replace_sources(index: PropositionIndex, loaded: Loaded, embedder: Embedder, **kw: Any):
    """``index`` made to match the files and folders of ``loaded``: the chunks of files no
    longer there (deleted, renamed, emptied) deleted, changed chunks replaced, new ones
    added, unchanged ones kept (:meth:`~evireform.index.PropositionIndex.upsert`).  Which
    passages are a file's chunks comes from the index's document registry
    (:func:`document_registry`), never from user metadata such as a ``source`` field.
    Returns the new index; its ``changes`` list what moved."""
    reg = document_registry(index)
    for src, where in loaded.files.items():
        old = reg.get(src)
        if old and old.get("root") not in (None, where["root"]):
            raise ValueError(f"{src}: the index already holds a file of that name from "
                             f"another folder ({old['root']}); index one of them under "
                             "another folder name")
    stale_sources = [src for src, e in reg.items() if src not in loaded.sources
                     and any(_in_scope(src, e, sc) for sc in loaded.scopes)]
    # a file skipped for this read (--skip-errors) keeps what the index holds of it: only a
    # file that is gone from its folder loses its passages
    kept = [src for src in stale_sources if src in loaded.skipped
            or any(_in_scope(src, reg[src], (root, below, True))
                   for root, below in loaded.skipped_dirs)]
    stale_sources = [src for src in stale_sources if src not in kept]
    new_ids = {p.id for p in loaded.passages}
    stale = []
    for src in stale_sources + [s for s in loaded.sources if s in reg]:
        stale += [f"{src}#{i}" for i in range(int(reg[src].get("chunks", 0)))
                  if f"{src}#{i}" not in new_ids and index.has_passage(f"{src}#{i}")]
    base = index.delete(stale) if stale else index
    out = base.upsert(loaded.passages, embedder, **kw) if loaded.passages else base
    for src in stale_sources:
        reg.pop(src, None)
    for src, n in loaded.sources.items():
        if n:
            reg[src] = {**loaded.files.get(src, {"root": None, "path": None}), "chunks": n}
        else:
            reg.pop(src, None)
    if out is index:
        from dataclasses import replace as _replace
        out = _replace(index)
    out.meta = {**out.meta, DOCUMENTS: reg}
    out.changes = {**(out.changes if loaded.passages else {}), "deleted": stale,
                   **({"kept from the last read": kept} if kept else {})}
    return out
