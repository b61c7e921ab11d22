"""Documents read as documents: Markdown, HTML, PDF and DOCX files turned into plain-text
sections (:func:`read_document`), which :mod:`evireform.documents` chunks into passages.

Each reader returns a :class:`Document`: its title (when the file states one), metadata the
file carries (front matter, PDF and DOCX properties, HTML ``<meta>``), and its sections in
order, each with its heading path and blocks of text without markup.  A block is a
paragraph, a list item, a table row or a code block; code keeps its lines (``verbatim``).

The parsers, and why these:

* Markdown: ``markdown-it-py``, a CommonMark parser (the spec Markdown files are written
  to, pure Python, a core dependency): emphasis, links, images (their alt text), escapes
  and HTML tags are removed; headings become the section path; fenced and indented code
  is kept as it is; a leading ``---`` YAML block is the front matter (metadata).
* HTML: Python's own ``html.parser`` (no dependency): text of the body without scripts,
  styles and navigation chrome (``nav``, ``header``, ``footer``, ``aside`` are kept, they are
  text too; only ``script``, ``style``, ``template``, ``noscript`` and ``svg`` are dropped),
  ``h1``-``h6`` as sections, ``pre`` as code, ``<title>`` as the title and ``<meta name=...
  content=...>`` (description, author, keywords) as metadata.
* PDF: ``pypdf`` (the ``documents`` extra; pure Python): text page by page (a section per
  page, ``page`` in its metadata, the outline's titles as its section path when the file
  has an outline), the document information's title, author and subject.
* DOCX: ``python-docx`` (the ``documents`` extra): paragraphs and tables in body order,
  ``Heading N`` and ``Title`` styles as sections, the core properties' title, author,
  subject and keywords.

Heavier converters (markitdown, unstructured, textract) read more formats but pull in many
dependencies and external programs; these four cover what users ask for with small,
maintained, wheel-only packages.
"""
from __future__ import annotations

from typing import Any, TYPE_CHECKING

import io
import os
import re
import stat
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

from ._checks import check_json_value

if TYPE_CHECKING:  # annotations only
    from .types import StrPath

__all__ = ["Block", "Section", "Document", "read_document", "READERS", "DOCUMENT_SUFFIXES",
           "MissingReader", "front_matter"]


@dataclass
class Block:
    """A paragraph, list item, table row or (``verbatim``) code block."""

    text: str
    verbatim: bool = False


@dataclass
class Section:
    """The blocks under one heading path (``()`` before the first heading); ``page`` for a
    PDF page."""

    path: tuple[str, ...]
    blocks: list[Block] = field(default_factory=list)
    page: int | None = None


@dataclass
class Document:
    title: str | None
    metadata: dict[str, Any]
    sections: list[Section]


class MissingReader(ValueError):
    """A format whose parser is not installed (the ``documents`` extra)."""


def _clean(text: str) -> str:
    return " ".join(text.split())


def _meta_value(v):
    if v is None:
        return None
    s = str(v).strip()
    return s or None


class _Sections:
    """Sections built block by block as headings arrive."""

    def __init__(self) -> None:
        self.sections: list[Section] = [Section(())]
        self.path: list[str] = []
        self.levels: list[int] = []

    def heading(self, level: int, title: str) -> None:
        """A heading of ``level`` closes the open headings of its level and below (a
        document whose first heading is "## A" has "## B" as A's sibling, not its child)."""
        title = _clean(title).rstrip("¶§#").rstrip()  # a permalink's pilcrow is no title
        if not title:
            return
        while self.levels and self.levels[-1] >= level:
            self.levels.pop()
            self.path.pop()
        self.levels.append(level)
        self.path.append(title)
        self.sections.append(Section(tuple(self.path)))

    def add(self, text: str, verbatim: bool = False) -> None:
        text = text.strip("\n") if verbatim else _clean(text)
        if text.strip():
            self.sections[-1].blocks.append(Block(text, verbatim))

    def done(self) -> list[Section]:
        return [s for s in self.sections if s.blocks or s.path]


#: front matter: a block between ``---`` lines at the very start of a text file
_FRONT = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.S)


#: the front matter a document may carry: bytes of its block, values after aliases are
#: expanded, nesting depth (a header, not a data file: beyond, one line naming the file)
FRONT_MAX_BYTES = 64 << 10
FRONT_MAX_VALUES = 10_000
FRONT_MAX_DEPTH = 32


def front_matter(text: str, where: str) -> tuple[dict, str]:
    """``(metadata, body)``: a leading YAML front matter block (``---`` ... ``---``) read as
    metadata and removed from the text, so it is neither embedded nor returned as passage
    text.  PyYAML's safe loader (a dependency: the same result on every install); dates and
    other non-JSON values become strings.  Bounded: a block over :data:`FRONT_MAX_BYTES`,
    more than :data:`FRONT_MAX_VALUES` values once aliases are expanded (a "billion laughs"
    header), nesting deeper than :data:`FRONT_MAX_DEPTH`, an alias to itself, keys that
    collide as text (``1`` and ``"1"``) or a block that is not a mapping raise
    ``ValueError`` naming the file."""
    m = _FRONT.match(text)
    if not m:
        return {}, text
    block = m.group(1)
    if len(block.encode("utf-8", "surrogatepass")) > FRONT_MAX_BYTES:
        raise ValueError(f"{where}: the front matter is larger than "
                         f"{FRONT_MAX_BYTES >> 10} KiB; keep metadata short (a document's "
                         "text goes below the closing ---)")
    import yaml
    try:
        got = yaml.safe_load(block) if block.strip() else {}
    except Exception as exc:
        raise ValueError(f"{where}: the front matter is not valid YAML "
                         f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
                         ) from None
    if got is None:
        got = {}
    if not isinstance(got, dict):
        raise ValueError(f"{where}: the front matter must be a mapping of keys to values")
    budget = [FRONT_MAX_VALUES]
    open_: set[int] = set()

    def plain(v, depth):
        budget[0] -= 1
        if budget[0] < 0:
            raise ValueError(f"{where}: the front matter holds more than {FRONT_MAX_VALUES:,} "
                             "values once its aliases are expanded")
        if depth > FRONT_MAX_DEPTH:
            raise ValueError(f"{where}: the front matter nests deeper than {FRONT_MAX_DEPTH}")
        if isinstance(v, (dict, list, tuple)):
            if id(v) in open_:
                raise ValueError(f"{where}: the front matter holds an alias to itself")
            open_.add(id(v))
            try:
                if isinstance(v, dict):
                    out: dict[str, Any] = {}
                    for a, b in v.items():
                        key = str(a).lower() if isinstance(a, bool) else str(a)
                        if key in out:
                            raise ValueError(f"{where}: the front matter's keys {key!r} "
                                             "collide (a number, a Boolean and a string "
                                             "spelled alike are one key)")
                        out[key] = plain(b, depth + 1)
                    return out
                return [plain(x, depth + 1) for x in v]
            finally:
                open_.discard(id(v))
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        return str(v)  # dates, times
    md = plain(got, 0)
    check_json_value(md, f"{where} (front matter)")
    return md, text[m.end():]


# --------------------------------------------------------------------------- Markdown
_URL = re.compile(r"^(?:https?://|mailto:)", re.I)
#: link texts that name a place without saying where it is: the address is the information
_PLACE_WORDS = frozenset("""here this link forum forums website site homepage page chat
list mailing discord slack irc matrix gitter email e-mail contact tracker discussions
discussion community mastodon""".split())


def _inline_text(tok) -> str:
    """An inline token's text without markup: text and code spans; soft breaks as spaces,
    hard breaks as new lines; images (badges, logos, figures) and inline HTML dropped.  A
    link keeps its address after its text, in parentheses, where the address is the
    information: a mail address, or a web address behind a text of at most three words that
    names a place without saying where ("the [forum](https://discuss.example.org)",
    "[here](...)", "[mailing list](...)")."""
    out = []
    href: str | None = None
    start = 0
    for c in tok.children or ():
        if c.type in ("text", "code_inline"):
            out.append(c.content)
        elif c.type == "softbreak":
            out.append(" ")
        elif c.type == "hardbreak":
            out.append("\n")
        elif c.type == "link_open":
            target = str(c.attrs.get("href") or "")
            href, start = (target if _URL.match(target) else None), len(out)
        elif c.type == "link_close":
            shown = "".join(out[start:]).strip()
            if href and shown:
                bare = re.sub(r"^(?:https?://|mailto:)", "", href, flags=re.I).rstrip("/")
                words = shown.lower().split()
                placed = href.lower().startswith("mailto:") or (
                    len(words) <= 3 and any(w.strip(".,:;!?") in _PLACE_WORDS for w in words))
                if placed and bare.lower() not in shown.lower():
                    out.append(f" ({bare})")
            href = None
    return "".join(out)


def read_markdown_text(text: str) -> Document:
    """Markdown (front matter already removed) parsed with markdown-it-py."""
    try:
        from markdown_it import MarkdownIt
    except ImportError:  # pragma: no cover - a core dependency
        raise MissingReader("reading Markdown needs markdown-it-py: pip install "
                            "markdown-it-py") from None
    md = MarkdownIt("commonmark").enable("table")
    toks = md.parse(text)
    out = _Sections()
    title = None
    seen_heading = False
    level = 0
    row: list[str] | None = None
    for i, t in enumerate(toks):
        if t.type == "heading_open":
            level = int(t.tag[1])
        elif t.type == "inline" and i and toks[i - 1].type == "heading_open":
            h = _inline_text(t)
            if not seen_heading and _clean(h):
                seen_heading = True
                # the title: a level-1 heading that opens the document (nothing but
                # images before it); a section's heading ("## Installation") is a section
                if level == 1 and not out.sections[0].blocks:
                    title = _clean(h).rstrip("¶§#").rstrip() or None
            out.heading(level, h)
        elif t.type == "tr_open":
            row = []
        elif t.type == "tr_close":
            if row is not None:
                out.add(" | ".join(c for c in row if c))
            row = None
        elif t.type == "inline" and row is not None:
            row.append(_clean(_inline_text(t)))
        elif t.type == "inline":
            out.add(_inline_text(t))
        elif t.type in ("fence", "code_block"):
            out.add(t.content, verbatim=True)
        elif t.type == "html_block":
            got = read_html_text(t.content)
            for s in got.sections:
                for b in s.blocks:
                    out.add(b.text, b.verbatim)
    return Document(title, {}, out.done())


def _read_markdown(path: Path, data: bytes) -> Document:
    text = _utf8(path, data)
    meta, body = front_matter(text, str(path))
    doc = read_markdown_text(body)
    doc.metadata = meta
    if isinstance(meta.get("title"), (str, int, float)) and str(meta["title"]).strip():
        doc.title = str(meta["title"])
    return doc


# --------------------------------------------------------------------------- HTML
_BLOCK_TAGS = {"p", "div", "li", "dt", "dd", "blockquote", "section", "article", "main",
               "header", "footer", "nav", "aside", "figcaption", "caption", "table", "ul",
               "ol", "dl", "form", "br", "hr", "body", "address", "details", "summary"}
_SKIP_TAGS = {"script", "style", "template", "noscript", "svg"}
#: page chrome, not text: navigation, banners, footers, sidebars, search boxes and permalink
#: anchors, known by their element, their ARIA role or their class (Sphinx's and the usual
#: site generators' names); an element of these is skipped with everything inside it
_CHROME_TAGS = {"nav", "header", "footer", "aside"}
_CHROME_ROLES = {"navigation", "banner", "contentinfo", "search", "complementary"}
_CHROME_CLASSES = {"sphinxsidebar", "sphinxsidebarwrapper", "related", "footer", "headerlink",
                   "navigation", "navbar", "nav", "breadcrumb", "breadcrumbs", "sidebar",
                   "toc", "skip-link", "site-header", "site-footer", "mobile-nav"}
#: elements without an end tag (never pushed on the chrome stack)
_VOID_TAGS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta",
              "source", "track", "wbr"}


class _HTMLText(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out = _Sections()
        self.buf: list[str] = []
        self.skip: int = 0
        self.pre: int = 0
        self.heading: int | None = None
        self.in_title: bool = False
        self.title: str | None = None
        self.meta: dict[str, Any] = {}
        self.cells: list[str] | None = None
        self.h1: str | None = None
        #: inside page chrome: (its tag, how many of that tag are open inside it + 1)
        self.chrome: list[Any] = []
        #: open main / article elements (an article's own header and footer are its text)
        self.article: int = 0

    def flush(self):
        text = "".join(self.buf)
        self.buf = []
        if self.heading is not None:
            return text
        if self.cells is not None:
            if _clean(text):
                self.cells.append(_clean(text))
            return ""
        self.out.add(text)
        return ""

    def handle_starttag(self, tag, attrs) -> None:
        a = dict(attrs)
        if tag == "meta" and a.get("name") and a.get("content"):
            name = a["name"].lower()
            if name in ("description", "author", "keywords") and _meta_value(a["content"]):
                self.meta[name] = _clean(a["content"])
            return
        if tag == "title":
            self.in_title = True
            return
        if self.chrome:
            if tag == self.chrome[-1][0]:
                self.chrome[-1][1] += 1
            return
        if tag not in _VOID_TAGS and _is_chrome(tag, a, self.article):
            self.chrome.append([tag, 1])
            return
        if tag in ("main", "article"):
            self.article += 1
        if tag in _SKIP_TAGS:
            self.skip += 1
            return
        if self.skip:
            return
        if re.fullmatch(r"h[1-6]", tag):
            self.flush()
            self.heading = int(tag[1])
        elif tag == "pre":
            self.flush()
            self.pre += 1
        elif tag == "tr":
            self.flush()
            self.cells = []
        elif tag in ("td", "th") and self.cells is not None:
            self.flush()
        elif tag == "img" and a.get("alt"):
            self.buf.append(" " + a["alt"] + " ")
        elif tag in _BLOCK_TAGS and not self.pre:
            self.flush()

    def handle_endtag(self, tag) -> None:
        if tag == "title":
            self.in_title = False
            return
        if self.chrome:
            if tag == self.chrome[-1][0]:
                self.chrome[-1][1] -= 1
                if self.chrome[-1][1] == 0:
                    self.chrome.pop()
            return
        if tag in ("main", "article"):
            self.article = max(0, self.article - 1)
        if tag in _SKIP_TAGS:
            self.skip = max(0, self.skip - 1)
            return
        if self.skip:
            return
        if re.fullmatch(r"h[1-6]", tag) and self.heading is not None:
            text = self.flush()
            level, self.heading = self.heading, None
            if level == 1 and self.h1 is None and _clean(text):
                self.h1 = _clean(text)
            self.out.heading(level, text)
        elif tag == "pre" and self.pre:
            self.pre -= 1
            text = "".join(self.buf)
            self.buf = []
            self.out.add(text, verbatim=True)
        elif tag in ("td", "th") and self.cells is not None:
            self.flush()
        elif tag == "tr" and self.cells is not None:
            self.flush()
            cells, self.cells = self.cells, None
            self.out.add(" | ".join(cells))
        elif tag in _BLOCK_TAGS and not self.pre:
            self.flush()

    def handle_data(self, data) -> None:
        if self.in_title:
            self.title = _clean((self.title or "") + " " + data) or None
            return
        if not self.skip and not self.chrome:
            self.buf.append(data)


def _is_chrome(tag: str, attrs: dict[str, Any], in_article: int = 0) -> bool:
    """Whether an element is page chrome (:data:`_CHROME_TAGS`, roles and classes); a
    header or footer inside a main or article element is the article's own."""
    if tag in _CHROME_TAGS and not (in_article and tag in ("header", "footer")):
        return True
    if (attrs.get("role") or "").lower() in _CHROME_ROLES:
        return True
    return bool(_CHROME_CLASSES & set((attrs.get("class") or "").lower().split()))


def read_html_text(text: str) -> Document:
    """HTML parsed with ``html.parser`` (see the module docstring)."""
    p = _HTMLText()
    try:
        p.feed(text)
        p.close()
    except AssertionError as exc:  # html.parser asserts on some malformed markup
        # ("<![ x", an unknown marked section): one line, never a traceback
        raise ValueError(f"malformed HTML the parser cannot read ({exc or 'a marked section'})"
                         ) from None
    p.flush()
    title = p.title or p.h1
    return Document(title, dict(p.meta), p.out.done())


def _read_html(path: Path, data: bytes) -> Document:
    raw = data
    m = re.search(rb"<meta[^>]+charset=[\"']?([A-Za-z0-9_\-]+)", raw[:4096], re.I)
    enc = m.group(1).decode("ascii", "replace") if m else "utf-8"
    try:
        text = raw.decode(enc)
    except (LookupError, UnicodeDecodeError):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path}: not UTF-8 text and no usable charset declared "
                             f"({exc.reason} at byte {exc.start})") from None
    return read_html_text(text)


# --------------------------------------------------------------------------- PDF
def _read_pdf(path: Path, data: bytes) -> Document:
    try:
        import pypdf
    except ImportError:
        raise MissingReader(f"{path}: reading PDF needs the 'documents' extra: pip install "
                            "'evireform[documents]' (or exclude '*.pdf')") from None
    import logging
    logging.getLogger("pypdf").setLevel(logging.ERROR)  # malformed-but-readable warnings
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            try:
                opened = reader.decrypt("")  # PasswordType.NOT_DECRYPTED (0): a password
            except Exception:
                opened = 0
            if not opened:
                raise ValueError(f"{path}: the PDF is encrypted (it needs a password); "
                                 "decrypt it first, e.g. qpdf --decrypt")
        pages = [pg.extract_text() or "" for pg in reader.pages]
        info = reader.metadata or {}
        outline = _pdf_outline(reader)
    except ValueError:
        raise
    except Exception as exc:
        raise ValueError(f"{path}: not a readable PDF ({type(exc).__name__}: {exc})") \
            from None
    meta = {}
    for key, name in (("/Author", "author"), ("/Subject", "subject"),
                      ("/Keywords", "keywords")):
        v = _meta_value(info.get(key)) if hasattr(info, "get") else None
        if v:
            meta[name] = v
    title = _meta_value(info.get("/Title")) if hasattr(info, "get") else None
    sections = []
    path_now: tuple[str, ...] = ()
    for n, text in enumerate(pages, 1):
        path_now = outline.get(n, path_now)
        blocks = [Block(_clean(b)) for b in re.split(r"\n\s*\n", _unhyphenate(text))
                  if _clean(b)]
        if blocks:
            sections.append(Section(path_now, blocks, page=n))
    return Document(title, meta, sections)


def _unhyphenate(text: str) -> str:
    """Lines of a PDF page joined: a word hyphenated across a line end rejoined."""
    return re.sub(r"(\w)-\n(\w)", r"\1\2", text)


def _pdf_outline(reader) -> dict[str, Any]:
    """page number -> the outline's title path of the last entry starting on that page."""
    out: dict[str, Any] = {}

    def walk(items: Any, path: StrPath) -> None:
        last = None
        for it in items:
            if isinstance(it, list):
                if last is not None:
                    walk(it, last)
                continue
            try:
                title = _clean(str(it.title))
                page = reader.get_destination_page_number(it) + 1
            except Exception:
                continue
            last = path + (title,)
            out.setdefault(page, last)
    try:
        walk(reader.outline, ())
    except Exception:
        return {}
    return out


# --------------------------------------------------------------------------- DOCX
def _read_docx(path: Path, data: bytes) -> Document:
    try:
        import docx
        from docx.table import Table
    except ImportError:
        raise MissingReader(f"{path}: reading DOCX needs the 'documents' extra: pip install "
                            "'evireform[documents]' (or exclude '*.docx')") from None
    try:
        d = docx.Document(io.BytesIO(data))
    except Exception as exc:
        raise ValueError(f"{path}: not a readable DOCX file ({type(exc).__name__}: {exc})") \
            from None
    out = _Sections()
    title = None
    for item in d.iter_inner_content():
        if isinstance(item, Table):
            for r in item.rows:
                cells = []
                for c in r.cells:
                    t = _clean(c.text)
                    if t and (not cells or cells[-1] != t):  # merged cells repeat
                        cells.append(t)
                out.add(" | ".join(cells))
            continue
        style = (item.style.name if item.style is not None else "") or ""
        text = item.text
        m = re.fullmatch(r"Heading (\d)", style)
        if style == "Title":
            if _clean(text):
                title = title or _clean(text)
                out.heading(1, text)
        elif m:
            out.heading(int(m.group(1)), text)
        else:
            out.add(text)
    cp = d.core_properties
    meta = {k: v for k, v in (("author", _meta_value(cp.author)),
                              ("subject", _meta_value(cp.subject)),
                              ("keywords", _meta_value(cp.keywords))) if v}
    return Document(_meta_value(cp.title) or title, meta, out.done())


# --------------------------------------------------------------------------- text
def _utf8(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") \
            from None


#: the largest file a reader reads (bytes): a document, not a disk image
MAX_DOCUMENT_BYTES = 256 << 20
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | \
    getattr(os, "O_CLOEXEC", 0)


def read_file_bytes(path: StrPath, limit: int = MAX_DOCUMENT_BYTES) -> bytes:
    """The bytes of the regular file at ``path``, opened once: without following a link
    at its last step, without blocking (a FIFO or device swapped in is refused, not waited
    on), checked on the open descriptor (a regular file, at most ``limit`` bytes) and read
    from it, so what is read is what was checked.  ``ValueError`` naming the file."""
    try:
        fd = os.open(str(path), os.O_RDONLY | _NOFOLLOW)
    except OSError as exc:
        import errno
        if exc.errno in (errno.ELOOP, errno.EMLINK):
            raise ValueError(f"{path}: a symbolic link, not followed (the file was "
                             "replaced by a link)") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path}: not a regular file (a FIFO, device or socket)")
        if st.st_size > limit:
            raise ValueError(f"{path}: {st.st_size:,} bytes, more than the "
                             f"{limit >> 20} MiB a document may have")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        chunks, total = [], 0
        while True:
            block = os.read(fd, 1 << 20)
            if not block:
                break
            total += len(block)
            if total > limit:  # the file grew while read
                raise ValueError(f"{path}: more than the {limit >> 20} MiB a document may "
                                 "have")
            chunks.append(block)
        return b"".join(chunks)
    finally:
        os.close(fd)


#: suffix -> reader of that format
READERS = {".md": _read_markdown, ".markdown": _read_markdown, ".html": _read_html,
           ".htm": _read_html, ".pdf": _read_pdf, ".docx": _read_docx}
#: the formats read as documents (plain text, ``.txt``, is chunked as it is)
DOCUMENT_SUFFIXES = tuple(READERS)


def read_document(path: StrPath) -> Document:
    """The :class:`Document` of the file at ``path`` by its suffix (``ValueError`` for
    another suffix, :class:`MissingReader` when the format's parser is not installed)."""
    path = Path(path)
    reader = READERS.get(path.suffix.lower())
    if reader is None:
        raise ValueError(f"{path}: no document reader for {path.suffix!r} "
                         f"(documents: {', '.join(DOCUMENT_SUFFIXES)})")
    return reader(path, read_file_bytes(path))
