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
  directories are skipped.

A chunk's passage has ``id = "{source}#{chunk}"``, ``title`` = the file's first Markdown
heading (else its name without suffix) and ``metadata = {"source", "chunk", "title"}``, where
``source`` is the file's path relative to the current directory (POSIX form; absolute when
outside it), so the same file gives the same ids whether it is named alone or found in a
folder, and re-indexing a changed file touches exactly its chunks
(:func:`replace_sources`).

A file that cannot be read (not UTF-8, unreadable, a malformed corpus) raises ``ValueError``
naming it; with ``skip_errors=True`` it is reported in the returned error list and skipped.
"""
from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .text import sentences
from .types import Passage

__all__ = ["TEXT_SUFFIXES", "CORPUS_SUFFIXES", "load_paths", "chunk_text", "token_counter",
           "replace_sources", "Loaded"]

TEXT_SUFFIXES = (".txt", ".md", ".markdown")
CORPUS_SUFFIXES = (".json", ".jsonl", ".ndjson")
_TOKEN = re.compile(r"\w+|[^\w\s]", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


def _regex_count(texts: list[str]) -> list[int]:
    """Tokens as words and punctuation, each CJK character one token (an approximation of a
    word-piece tokenizer, used when the embedder has none)."""
    return [sum(len(_CJK.findall(t)) or 1 for t in _TOKEN.findall(s)) for s in texts]


def token_counter(embedder=None):
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
               count=None) -> list[str]:
    """``text`` split into chunks of at most ``chunk_tokens`` tokens (by ``count``, default
    :func:`_regex_count`) on sentence ends, consecutive chunks repeating trailing whole
    sentences of up to ``chunk_overlap`` tokens."""
    if chunk_tokens < 1 or chunk_overlap < 0 or chunk_overlap >= chunk_tokens:
        raise ValueError(f"need chunk_tokens >= 1 and 0 <= chunk_overlap < chunk_tokens; got "
                         f"{chunk_tokens}, {chunk_overlap}")
    count = count or _regex_count
    sents = [s for s in sentences(text) if s.strip()]
    if not sents:
        return []
    pieces: list[tuple[str, int]] = []
    for s, n in zip(sents, count(sents)):
        if n <= chunk_tokens:
            pieces.append((s, n))
        else:
            cut = _cut_long(s, n, chunk_tokens)
            pieces.extend(zip(cut, count(cut)))
    chunks, cur, size = [], [], 0
    for s, n in pieces:
        if cur and size + n > chunk_tokens:
            chunks.append(_join(cur))
            keep, kept = [], 0  # the overlap: trailing whole sentences
            for t, m in reversed(cur):
                if kept + m > chunk_overlap or kept + m + n > chunk_tokens:
                    break
                keep.insert(0, (t, m))
                kept += m
            cur, size = keep, kept
        cur.append((s, n))
        size += n
    if cur:
        chunks.append(_join(cur))
    return chunks


def _join(parts) -> str:
    out = ""
    for s, _ in parts:
        if out and not (_CJK.search(out[-1]) and _CJK.search(s[:1])):
            out += " "
        out += s.strip()
    return out


def _source(path: Path) -> str:
    try:
        return Path(os.path.relpath(path.resolve(), Path.cwd().resolve())).as_posix() \
            if path.resolve().is_relative_to(Path.cwd().resolve()) else path.resolve().as_posix()
    except ValueError:
        return path.resolve().as_posix()


def _title(text: str, path: Path) -> str:
    if path.suffix.lower() in (".md", ".markdown"):
        for line in text.splitlines():
            m = re.match(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$", line)
            if m:
                return m.group(1)
    return path.stem


@dataclass
class Loaded:
    """What :func:`load_paths` read: the passages, the text files chunked (``sources``:
    source -> number of chunks; corpus files are not listed) and the files skipped with
    their errors."""

    passages: list[Passage]
    sources: dict = field(default_factory=dict)
    errors: list[tuple[str, str]] = field(default_factory=list)


def _walk(folder: Path, include, exclude):
    from .store import _looks_like_index
    for root, dirs, files in os.walk(folder):
        r = Path(root)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".")
                         and not _looks_like_index(r / d))
        for f in sorted(files):
            if f.startswith("."):
                continue
            rel = (r / f).relative_to(folder).as_posix()
            if include and not any(fnmatch.fnmatch(rel, g) or fnmatch.fnmatch(f, g)
                                   for g in include):
                continue
            if any(fnmatch.fnmatch(rel, g) or fnmatch.fnmatch(f, g) for g in exclude or ()):
                continue
            yield r / f


def load_paths(paths, *, chunk_tokens: int = 200, chunk_overlap: int = 30, embedder=None,
               include=None, exclude=None, skip_errors: bool = False,
               show_progress: bool = False) -> Loaded:
    """Passages from files and folders (see the module docstring).  ``ValueError`` when a
    path does not exist, when nothing was found, or (unless ``skip_errors``) when a file
    cannot be read."""
    from .corpus import load_corpus
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    include = list(include) if include else [f"*{s}" for s in TEXT_SUFFIXES + CORPUS_SUFFIXES]
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files.extend(_walk(p, include, exclude))
        elif p.is_file():
            files.append(p)
        else:
            raise ValueError(f"{p}: no such file or folder")
    count = token_counter(embedder)
    out = Loaded([])
    seen: set = set()
    if show_progress:
        from tqdm.auto import tqdm
        files = tqdm(files, desc="read", unit="file")
    for f in files:
        src = _source(f)
        if src in seen:
            continue
        seen.add(src)
        try:
            if f.suffix.lower() in CORPUS_SUFFIXES:
                got = load_corpus(f)
            elif f.suffix.lower() in TEXT_SUFFIXES or f.suffix == "":
                got = _text_file(f, src, chunk_tokens, chunk_overlap, count)
            else:
                raise ValueError(f"{f}: unsupported file type {f.suffix!r} (text: "
                                 f"{TEXT_SUFFIXES}, corpora: {CORPUS_SUFFIXES})")
        except (OSError, ValueError) as exc:
            msg = str(exc) if str(f) in str(exc) else f"{f}: {exc}"
            if not skip_errors:
                raise ValueError(msg + " (--skip-errors skips unreadable files)") from None
            out.errors.append((str(f), msg))
            continue
        if f.suffix.lower() not in CORPUS_SUFFIXES:
            out.sources[src] = len(got)
        out.passages.extend(got)
    ids = [p.id for p in out.passages]
    if len(set(ids)) != len(ids):
        from collections import Counter
        dup = Counter(ids).most_common(1)[0][0]
        raise ValueError(f"passage id {dup!r:.80} occurs in more than one file")
    if not out.passages:
        raise ValueError("no passages found in " + ", ".join(map(str, paths))
                         + (f" ({len(out.errors)} files skipped)" if out.errors else ""))
    return out


def _text_file(f: Path, src: str, chunk_tokens: int, chunk_overlap: int, count):
    try:
        text = f.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{f}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    title = _title(text, f)
    return [Passage(id=f"{src}#{i}", title=title, text=c,
                    metadata={"source": src, "chunk": i, "title": title})
            for i, c in enumerate(chunk_text(text, chunk_tokens, chunk_overlap, count=count))]


def replace_sources(index, loaded: Loaded, embedder, **kw):
    """``index`` with the files of ``loaded`` re-indexed: passages of those sources that
    the files no longer hold are deleted, changed chunks replaced, new ones added, unchanged
    ones kept (:meth:`~evireform.index.PropositionIndex.upsert`).  Returns the new index;
    its ``changes`` list what moved."""
    sources = set(loaded.sources)
    new_ids = {p.id for p in loaded.passages}
    stale = [p.id for p in index.passages if p.metadata.get("source") in sources
             and p.id not in new_ids]
    base = index.delete(stale) if stale else index
    out = base.upsert(loaded.passages, embedder, **kw)
    out.changes = {**out.changes, "deleted": stale}
    return out
