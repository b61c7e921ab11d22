"""Documents read as documents: Markdown, HTML, PDF, DOCX, PPTX, XLSX, CSV/TSV, EPUB and
reStructuredText files turned into plain-text sections (:func:`read_document`), which
:mod:`evireform.documents` chunks into passages.

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
* PDF: ``pypdf`` (the ``documents`` extra; pure Python): text page by page (``page`` in
  the metadata), running headers, footers and page numbers dropped (lines that recur at
  the top or bottom of half the pages, digits aside, and a chapter's header: a line opening
  three pages or more, or two with its page number, and nowhere else); an outline entry's section starts at
  its heading's line on its page, so text before it stays in the previous section; the
  document information's title, author and subject.
* DOCX: ``python-docx`` (the ``documents`` extra): paragraphs and tables in body order,
  ``Heading N`` and ``Title`` styles as sections, the core properties' title, author,
  subject and keywords.

* PPTX: ``python-pptx`` (the ``documents`` extra): a section per slide (its title as the
  section, ``slide`` in the metadata), text frames, tables and speaker notes.
* XLSX: ``openpyxl`` (the ``documents`` extra; read-only, cached values): a section per row
  below each sheet's header row, the sheet as the section, ``row`` in the metadata, each
  cell written after its column's header ("part: M3 bolt; bin: A4").
* CSV and TSV: the standard library's ``csv`` (the delimiter sniffed), rows as for XLSX.
* EPUB: the standard library's ``zipfile`` and ElementTree for the package file (a few KB
  of XML; entity declarations refused), then each chapter in the spine's reading order
  through the HTML reader above: no EPUB library adds what those two do not.
* reStructuredText: ``docutils`` (the reference parser; the ``documents`` extra) with file
  inclusion and raw passthrough off: section titles as sections, the promoted document
  title as the title; directives it does not know, comments, substitutions and link
  targets are not text.

Every archive format (DOCX, PPTX, XLSX, EPUB) has each member's unpacked size checked
against :data:`MAX_PART_BYTES` before a parser reads it, and rows, slides and chapters are
counted against :data:`MAX_ITEMS`: a refusal is one line naming the file.  Those bounds,
the file size (:data:`MAX_DOCUMENT_BYTES`) and a PDF's drawing instructions
(:data:`MAX_PDF_CONTENT_BYTES`) are settings: :class:`ReadLimits` (``load_paths(...,
limits=...)``, ``--read-limit part=256M`` on ``index``, ``update`` and ``serve``).

Heavier converters (markitdown, unstructured, textract) read more formats but pull in many
dependencies and external programs; these cover what users ask for with small, maintained,
wheel-only packages.
"""
from __future__ import annotations

from typing import Any, TYPE_CHECKING

import io
import os
import re
import stat
from contextlib import contextmanager
from contextvars import ContextVar
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


#: what a list item's text starts with (Markdown and HTML list items, DOCX list paragraphs, the
#: points of a PPTX text frame): a reader sees the list, and the
#: extractors end a proposition at each item (:mod:`evireform.extract.base`)
BULLET = "\u2022 "


@dataclass
class Section:
    """The blocks under one heading path (``()`` before the first heading); ``page`` for a
    PDF page."""

    path: tuple[str, ...]
    blocks: list[Block] = field(default_factory=list)
    page: int | None = None
    #: where else the section is in its file, written to its passages' metadata: a
    #: spreadsheet's ``{"row": 12}``, a presentation's ``{"slide": 3}``
    where: dict[str, int] = field(default_factory=dict)
    #: the previous section's text running on (a PDF section across a page break): its
    #: heading is not written again
    continued: bool = False


@dataclass
class Document:
    title: str | None
    metadata: dict[str, Any]
    sections: list[Section]


class MissingReader(ValueError):
    """A format whose parser is not installed; ``extra``: the extra that installs it."""

    def __init__(self, message: str, extra: str = "documents") -> None:
        super().__init__(message)
        self.extra: str = extra


def _parser(path: Path, module: str, fmt: str) -> Any:
    """The parser module a format needs (an extra's), or :class:`MissingReader` naming the
    file, the extra and how to leave such files out."""
    try:
        return __import__(module, fromlist=["_"])  # the module itself, also when dotted
    except ImportError:
        raise MissingReader(f"{path}: reading {fmt} needs the 'documents' extra: pip install "
                            f"'evireform[documents]' (or exclude '*{path.suffix.lower()}')"
                            ) from None


def _core_meta(props: Any, author: str = "author") -> dict[str, Any]:
    """A package's core properties (DOCX, PPTX, XLSX) as metadata: author, subject,
    keywords, those that are set."""
    return {k: v for k, v in (("author", _meta_value(getattr(props, author, None))),
                              ("subject", _meta_value(getattr(props, "subject", None))),
                              ("keywords", _meta_value(getattr(props, "keywords", None))))
            if v}


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


#: a MyST role's name right before its backticked text ("{ref}", "{py:func}")
_MYST_ROLE = re.compile(r"\{[A-Za-z][\w:.+-]*\}$")
#: a role text's explicit target ("pip freeze <pip-freeze>"): left out
_ROLE_TARGET = re.compile(r"\s*<[^<>`]+>\s*$")


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
        if c.type == "code_inline" and out and (role := _MYST_ROLE.search(out[-1])):
            # a MyST/Sphinx role ({ref}`pip freeze`, {mod}`ensurepip`, {doc}`text <target>`):
            # the role's name is markup, its text is the text
            out[-1] = out[-1][:role.start()]
            out.append(_ROLE_TARGET.sub("", c.content) or c.content)
        elif c.type in ("text", "code_inline"):
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


#: how deep markdown-it nests blocks (lists in lists, quotes in quotes) before it stops;
#: what lies deeper is read flat
MARKDOWN_NESTING = 64


def read_markdown_text(text: str) -> Document:
    """Markdown (front matter already removed) parsed with markdown-it-py."""
    try:
        from markdown_it import MarkdownIt
    except ImportError:  # pragma: no cover - a core dependency
        raise MissingReader("reading Markdown needs markdown-it-py: pip install "
                            "markdown-it-py") from None
    md = MarkdownIt("commonmark", {"maxNesting": MARKDOWN_NESTING}).enable("table")
    toks = md.parse(text)
    # markdown-it stops at its nesting limit and drops the rest of the file: what it did
    # not reach is read again flat (each line's indentation removed), never lost
    end = max((t.map[1] for t in toks if t.map and (t.nesting != 1 or t.type in (
        "heading_open", "paragraph_open", "tr_open"))), default=0)  # leaves, not containers
    lines = text.splitlines()
    if any(ln.strip() for ln in lines[end:]):
        toks += md.parse("\n".join(ln.strip() for ln in lines[end:]))
    out = _Sections()
    title = None
    seen_heading = False
    level = 0
    row: list[str] | None = None
    item_start = False  # the next paragraph opens a list item: written after a bullet
    for i, t in enumerate(toks):
        if t.type == "list_item_open":
            item_start = True
        elif t.type == "heading_open":
            level = int(t.tag[1])
        elif t.type == "inline" and i and toks[i - 1].type == "heading_open":
            h = _inline_text(t)
            if not seen_heading and _clean(h):
                seen_heading = True
                # the title: a level-1 heading that opens the document (nothing but
                # images before it) and is its only one; a section's heading ("##
                # Installation", or one of several level-1 headings: "Background",
                # "License", "Building") is a section
                if level == 1 and not out.sections[0].blocks and sum(
                        1 for x in toks if x.type == "heading_open" and x.tag == "h1") == 1:
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
            text = _inline_text(t)
            if item_start and _clean(text):
                text, item_start = BULLET + text.lstrip(), False
            out.add(text)
        elif t.type in ("fence", "code_block"):
            item_start = False
            out.add(t.content, verbatim=True)
        elif t.type == "html_block":
            got = read_html_text(t.content)
            for s in got.sections:
                for b in s.blocks:
                    out.add(b.text, b.verbatim)
    return Document(title, {}, out.done())


def _read_markdown(path: Path, data: bytes) -> Document:
    text = _utf8(path, data).lstrip("\ufeff")
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
#: anchors, known by their element, their ARIA role or their class (Sphinx's, Texinfo's,
#: DocBook's and the usual site generators' names); an element of these is skipped with
#: everything inside it.  ``python scripts/html_extractors.py`` measures these rules against
#: trafilatura and readability-lxml on real pages (docs/guide.md, "Documents")
_CHROME_TAGS = {"nav", "header", "footer", "aside"}
_CHROME_ROLES = {"navigation", "banner", "contentinfo", "search", "complementary"}
_CHROME_CLASSES = {"sphinxsidebar", "sphinxsidebarwrapper", "related", "footer", "headerlink",
                   "navigation", "navbar", "nav", "breadcrumb", "breadcrumbs", "sidebar",
                   "toc", "skip-link", "site-header", "site-footer", "mobile-nav",
                   "nav-panel", "copiable-anchor", "copiable-link", "navheader", "navfooter",
                   "skip-to-content"}
#: classes that are chrome on one element only: Texinfo's navigation panel is a
#: ``div class="header"`` (a table's "header" cell is text), Node's permalinks are
#: ``a class="mark"``
_CHROME_CLASSES_ON = {"div": {"header"}, "a": {"mark"}}
#: an ``aside`` that is the text's own: footnotes (Sphinx writes them as ``aside
#: class="footnote" role="note"``), notes and admonitions
_TEXT_ASIDE_CLASSES = {"footnote", "footnote-list", "note", "admonition", "warning", "tip"}
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
        #: a list item opened whose first text is still to come (it opens with the bullet)
        self.item: bool = False

    def flush(self):
        text = "".join(self.buf)
        self.buf = []
        if self.heading is not None:
            return text
        if self.cells is not None:
            if _clean(text):
                self.cells.append(_clean(text))
            return ""
        if self.item and _clean(text):  # a list item's first text, as Markdown's
            text, self.item = BULLET + text.lstrip(), False
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
            if tag == "li":
                self.item = True

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
    classes = set((attrs.get("class") or "").lower().split())
    role = (attrs.get("role") or "").lower()
    if tag == "aside" and (role == "note" or _TEXT_ASIDE_CLASSES & classes):
        return False
    if tag in _CHROME_TAGS and not (in_article and tag in ("header", "footer")):
        return True
    if role in _CHROME_ROLES:
        return True
    return bool(_CHROME_CLASSES & classes) or bool(
        _CHROME_CLASSES_ON.get(tag, set()) & classes and not in_article)


def read_html_text(text: str) -> Document:
    """HTML parsed with ``html.parser`` (see the module docstring)."""
    p = _HTMLText()
    try:
        p.feed(_drop_open_comment(_drop_internal_subset(text.lstrip("\ufeff"))))
        p.close()
    except AssertionError as exc:  # html.parser asserts on some malformed markup
        # ("<![ x", an unknown marked section): one line, never a traceback
        raise ValueError(f"malformed HTML the parser cannot read ({exc or 'a marked section'})"
                         ) from None
    p.flush()
    title = p.title or p.h1
    return Document(title, dict(p.meta), p.out.done())


def _html_encoding(raw: bytes) -> str:
    """The encoding an HTML file is read in, as a browser picks it: a byte-order mark, else
    a ``<meta charset>`` in the first 4 KiB naming an encoding that keeps ASCII as ASCII
    (the markup must read as markup: UTF-16, UTF-32 or EBCDIC named there mean UTF-8, as
    the HTML standard has it), else UTF-8."""
    import codecs
    for bom, enc in ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"),
                     (codecs.BOM_UTF16_BE, "utf-16")):
        if raw.startswith(bom):
            return enc
    m = re.search(rb"<meta[^>]+charset=[\"']?([A-Za-z0-9_\-]+)", raw[:4096], re.I)
    if not m:
        return "utf-8"
    enc = m.group(1).decode("ascii", "replace")
    probe = "<meta charset=x>azAZ09"
    try:
        if probe.encode(enc) != probe.encode("ascii"):
            return "utf-8"
    except (LookupError, UnicodeError):
        return "utf-8"
    return enc


_DOCTYPE_SUBSET = re.compile(r"<!DOCTYPE[^\[>]*\[(.*?)\]\s*>", re.I | re.S)
_DECLARED = re.compile(r"<!ENTITY\s+%?\s*([A-Za-z_:][\w.:-]*)", re.I)


def _drop_internal_subset(text: str) -> str:
    """An XHTML chapter's DOCTYPE with an internal subset (``<!DOCTYPE html [<!ENTITY x
    ...>]>``, how an XML entity attack is written) dropped whole, and the references to
    the entities it declares with it: HTML's parser ends a declaration at its first ``>``,
    so the subset's rest (``]>``) and the unexpanded ``&x;`` would otherwise be text.
    Nothing is expanded, ever."""
    at = text.find("<!", 0, 4096)  # a document's one DOCTYPE comes first: one match tried
    while at >= 0 and text.startswith("<!--", at):
        at = text.find("<!", at + 4, 4096)
    m = _DOCTYPE_SUBSET.match(text, at, at + (1 << 16)) if at >= 0 else None
    if m is None:
        return text
    names = set(_DECLARED.findall(m.group(1)))
    text = text[:m.start()] + text[m.end():]
    if names:
        text = re.sub(r"&(%s);" % "|".join(map(re.escape, sorted(names))), "", text)
    return text


def _unreadable(path: Path, what: str, exc: BaseException) -> ValueError:
    """``PATH: not WHAT (Error: its message)`` on one line, the parser's message cut at 200
    characters: a parser's own text (several lines, a traceback's worth) never reaches a
    user's terminal or an upload's report as it is."""
    said = " ".join(str(exc).split())
    if len(said) > 200:
        said = said[:199] + "…"
    return ValueError(f"{path}: not {what} ({type(exc).__name__}" + (f": {said})" if said
                                                                       else ")"))


def _drop_open_comment(text: str) -> str:
    """HTML whose ``<!--`` is never closed: the rest is a comment (as a browser reads it),
    not text."""
    at = 0
    while True:
        start = text.find("<!--", at)
        if start < 0:
            return text
        end = text.find("-->", start + 4)
        if end < 0:
            return text[:start]
        at = end + 3


def _read_html(path: Path, data: bytes) -> Document:
    enc = _html_encoding(data)
    try:
        text = data.decode(enc)
    except UnicodeDecodeError:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path}: not UTF-8 text and no usable charset declared "
                             f"({exc.reason} at byte {exc.start})") from None
    return read_html_text(text)


# --------------------------------------------------------------------------- PDF
def _read_pdf(path: Path, data: bytes) -> Document:
    pypdf = _parser(path, "pypdf", "PDF")
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
        _too_many(path, len(reader.pages), "pages")
        budget = [read_limit("pdf_content_bytes"), {}]
        pages = []
        for pg in reader.pages:
            _pdf_content_budget(path, pg, budget)
            # a font's ToUnicode map may yield a lone surrogate: that character becomes
            # U+FFFD, the page is kept
            pages.append(_SURROGATE.sub("\ufffd", pg.extract_text() or ""))
        info = reader.metadata or {}
        outline = _pdf_outline(reader)
    except ValueError:
        raise
    except Exception as exc:
        raise _unreadable(path, "a readable PDF", exc) from None
    meta = {}
    for key, name in (("/Author", "author"), ("/Subject", "subject"),
                      ("/Keywords", "keywords")):
        v = _meta_value(info.get(key)) if hasattr(info, "get") else None
        if v:
            meta[name] = v
    title = _meta_value(info.get("/Title")) if hasattr(info, "get") else None
    return Document(title, meta, _pdf_sections(pages, outline))


#: the most bytes of drawing instructions (page contents and the forms they draw, decoded,
#: counted each time a page draws them) a PDF's text is extracted from: text extraction
#: parses every instruction, so a small file drawing one huge stream on each page is
#: refused instead of parsed for minutes
MAX_PDF_CONTENT_BYTES = 64 << 20


def _pdf_content_budget(path: Path, page, budget: list) -> None:
    """Charge a page's decoded contents and Form XObjects to ``budget`` ([bytes left,
    sizes of forms already decoded]); ``ValueError`` naming the file when it runs out."""
    n = 0
    c = page.get_contents()
    if c is not None:
        n += len(c.get_data())
    res = page.get("/Resources")
    res = res.get_object() if res is not None else None
    xo = res.get("/XObject") if hasattr(res, "get") else None
    xo = xo.get_object() if xo is not None else None
    for ref in (xo.values() if hasattr(xo, "values") else ()):
        key = getattr(ref, "idnum", None)
        if key is None or key not in budget[1]:
            obj = ref.get_object()
            size = len(obj.get_data()) if obj.get("/Subtype") == "/Form" else 0
            if key is not None:
                budget[1][key] = size
        else:
            size = budget[1][key]
        n += size
    budget[0] -= n
    if budget[0] < 0:
        cap = read_limit("pdf_content_bytes")
        raise ValueError(f"{path}: its pages draw more than {_size(cap)} of instructions "
                         f"(decoded); not read {limit_setting('pdf_content_bytes')}")


_SURROGATE = re.compile("[\ud800-\udfff]")
_PAGE_NUMBER = re.compile(r"[-–—\s]*(?:page\s+)?(?:\d{1,5}(?:\s*(?:/|of)\s*\d{1,5})?|"
                          r"(?=[ivxlc])x{0,3}(?:ix|iv|v?i{0,3})|(?=[ivxlc])(?:xc|xl|l?x{0,3}))"
                          r"[-–—\s]*", re.I)


def _edge_key(line: str) -> str:
    """A line as a running header or footer repeats it: digits (page numbers, dates) and
    case aside."""
    return re.sub(r"\d+", "#", " ".join(line.split()).casefold())


#: how many pages a line must open (digits aside) to be a running header of part of a
#: document: a chapter's pages ("Chapter 2: ASN.1 structure handling 3")
CHAPTER_HEADER_PAGES = 3


def _strip_running_lines(pages: list[list[str]], edge: int = 2) -> list[list[str]]:
    """Each page's lines without its running header and footer: a line among a page's
    first or last ``edge`` lines that recurs (digits aside) at the edge of at least half the
    pages (all of them for a two-page file); a first line that opens at least
    :data:`CHAPTER_HEADER_PAGES` pages, or two whose last number counts the pages, and never
    stands anywhere but first (a chapter's running header, which changes with the chapter);
    and a bare page number ("10", "Page 3 of 9", "iv") at either end."""
    n = sum(1 for p in pages if p)
    seen: dict[str, int] = {}
    opens: dict[str, list[tuple[int, str]]] = {}
    inside: set[str] = set()
    for at, p in enumerate(pages):
        for key in {_edge_key(x) for x in p[:edge] + p[-edge:]}:
            seen[key] = seen.get(key, 0) + 1
        if p:
            opens.setdefault(_edge_key(p[0]), []).append((at, p[0]))
            inside.update(_edge_key(x) for x in p[1:])
    need = n if n <= 2 else -(-n // 2)
    running = {k for k, c in seen.items() if n >= 2 and c >= need}
    running |= {k for k, where in opens.items() if k not in inside and (
        len(where) >= CHAPTER_HEADER_PAGES or (len(where) >= 2 and _counts_pages(where)))}

    def drop(line: str) -> bool:
        return _edge_key(line) in running or bool(_PAGE_NUMBER.fullmatch(line.strip()))
    out = []
    for p in pages:
        lo, hi = 0, len(p)
        while lo < min(edge, hi) and drop(p[lo]):
            lo += 1
        while hi > max(lo, len(p) - edge) and drop(p[hi - 1]):
            hi -= 1
        out.append(p[lo:hi])
    return out


def _counts_pages(where: list[tuple[int, str]]) -> bool:
    """Whether the lines opening the pages ``where`` (``(page position, line)``) end with
    a number that grows as the pages do (a running header's page number: "Chapter 3:
    Utilities 6" then "... 7" on the next page)."""
    nums = []
    for _, line in where:
        m = re.search(r"(\d+)\W*$", line)
        if m is None:
            return False
        nums.append(int(m.group(1)))
    return all(b - a == j - i for (i, _), (j, _), a, b in zip(where, where[1:], nums, nums[1:]))


def _same_heading(line: str, title: str) -> bool:
    a, b = _edge_key(line), _edge_key(title)
    return bool(b) and (a == b or (a.startswith(b) and len(a) <= len(b) + 3))


def _pdf_sections(pages: list[str], outline: dict[int, list[tuple[str, ...]]]
                  ) -> list[Section]:
    """A PDF's pages as sections: running headers, footers and page numbers dropped; each
    outline entry starts its section at its heading's line on its page (the line itself
    is the section, not text), or at the page's start when the line is not found; a
    section that runs on to the next page continues there under the same path."""
    lines = _strip_running_lines([[x.strip() for x in t.splitlines() if x.strip()]
                                  for t in pages])
    sections: list[Section] = []
    path: tuple[str, ...] = ()
    for n, page in enumerate(lines, 1):
        cuts: list[tuple[int, tuple[str, ...]]] = []  # (line index, path from there)
        at = 0
        pending: tuple[str, ...] | None = None  # an entry whose line was not found
        for entry in outline.get(n, []):
            hit = next((i for i in range(at, len(page)) if _same_heading(page[i], entry[-1])),
                       None)
            if hit is None:
                pending = entry
            else:  # a found heading: the entries not found before it (its parents, often)
                cuts.append((hit, entry))  # are passed over
                at, pending = hit + 1, None
        if pending is not None and not cuts:
            cuts.append((0, pending))  # no heading found on the page: from its start
        bounds = [(0, path, False)] + [(i, e, True) for i, e in cuts]
        for k, (start, p_here, is_heading) in enumerate(bounds):
            end = bounds[k + 1][0] if k + 1 < len(bounds) else len(page)
            first = start + 1 if is_heading and start < len(page) and \
                _same_heading(page[start], p_here[-1]) else start
            text = _unhyphenate("\n".join(page[first:end]))
            blocks = [Block(_clean(b)) for b in re.split(r"\n\s*\n", text) if _clean(b)]
            if blocks:
                sections.append(Section(p_here, blocks, page=n,
                                        continued=bool(sections) and
                                        sections[-1].path == p_here and not is_heading))
            path = p_here
        if pending is not None and cuts and cuts[-1][1] != pending:
            path = pending  # found after the page's last heading: from the next page on
    return sections


def _unhyphenate(text: str) -> str:
    """Lines of a PDF page joined: a word hyphenated across a line end rejoined."""
    return re.sub(r"(\w)-\n(\w)", r"\1\2", text)


def _pdf_outline(reader) -> dict[int, list[tuple[str, ...]]]:
    """page number -> the title paths of the outline's entries on that page, in the
    outline's order."""
    out: dict[int, list[tuple[str, ...]]] = {}

    def walk(items: Any, path: tuple[str, ...]) -> None:
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
            if title:
                out.setdefault(page, []).append(last)
    try:
        walk(reader.outline, ())
    except Exception:
        return {}
    return out


# --------------------------------------------------------------------------- DOCX
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"


def _docx_text(el) -> str:
    """The text of a DOCX element: its runs' text, tabs and breaks, in document order
    (deleted text, ``w:delText``, is not text)."""
    out = []
    for e in el.iter(_W + "t", _W + "tab", _W + "br", _W + "cr"):
        if e.tag == _W + "t":
            out.append(e.text or "")
        else:
            out.append("\t" if e.tag == _W + "tab" else "\n")
    return "".join(out)


def _docx_children(el):
    """An element's children, content controls (``w:sdt``) and custom XML opened: what
    they wrap is the document's content too."""
    for child in el:
        if child.tag == _W + "sdt":
            content = child.find(_W + "sdtContent")
            if content is not None:
                yield from _docx_children(content)
        elif child.tag in (_W + "customXml", _W + "smartTag"):
            yield from _docx_children(child)
        else:
            yield child


def _read_docx(path: Path, data: bytes) -> Document:
    """A DOCX body read from its XML in one pass (python-docx opens the package and its
    styles): paragraphs, tables (a row a block, nested tables' text in their cell) and
    content controls in body order; a paragraph's style found by its id in a table made
    once (python-docx's per-paragraph lookup costs about a millisecond)."""
    docx = _parser(path, "docx", "DOCX")
    _zip(path, data, "DOCX")
    try:
        d = docx.Document(io.BytesIO(data))
        names = {}
        default = ""
        for st in d.styles:
            sid = getattr(st, "style_id", None)
            if sid:
                names[sid] = st.name or ""
        try:
            from docx.enum.style import WD_STYLE_TYPE
            default = d.styles.default(WD_STYLE_TYPE.PARAGRAPH).name or ""
        except Exception:
            default = ""
        body = d.element.body
    except Exception as exc:
        raise _unreadable(path, "a readable DOCX file", exc) from None
    out = _Sections()
    title = None
    count = 0

    def rows(tbl):
        for child in _docx_children(tbl):
            if child.tag == _W + "tr":
                yield child

    for item in _docx_children(body):
        count += 1
        _too_many(path, count, "paragraphs and tables")
        if item.tag == _W + "tbl":
            for r in rows(item):
                cells: list[str] = []
                for c in _docx_children(r):
                    if c.tag != _W + "tc":
                        continue
                    t = _clean(_docx_text(c))
                    if t and (not cells or cells[-1] != t):  # merged cells repeat
                        cells.append(t)
                out.add(" | ".join(cells))
            continue
        if item.tag != _W + "p":
            continue
        ps = item.find(_W + "pPr/" + _W + "pStyle")
        style = names.get(ps.get(_W + "val"), "") if ps is not None else default
        text = _docx_text(item)
        m = re.fullmatch(r"Heading (\d)", style or "")
        if not m and style != "Title" and _clean(text) and (
                item.find(_W + "pPr/" + _W + "numPr") is not None
                or (style or "").startswith("List")):
            text = BULLET + text.lstrip()  # a list paragraph, as Markdown's items
        if style == "Title":
            if _clean(text):
                title = title or _clean(text)
                out.heading(1, text)
        elif m:
            out.heading(int(m.group(1)), text)
        else:
            out.add(text)
    cp = d.core_properties
    return Document(_meta_value(cp.title) or title, _core_meta(cp), out.done())


# --------------------------------------------------------------------------- archives
#: the most bytes one member of a DOCX, PPTX, XLSX or EPUB archive may unpack to (its
#: declared size: zipfile never unpacks past it): a document's part, not a bomb
MAX_PART_BYTES = 64 << 20
#: the most rows, slides or chapters one file may hold (each becomes a passage or more)
MAX_ITEMS = 200_000


def _zip(path: Path, data: bytes, what: str, limit: int | None = None):
    """The archive of a DOCX/PPTX/XLSX/EPUB file, each member's unpacked size checked
    against ``limit`` (:data:`MAX_PART_BYTES`) before any parser reads it."""
    import zipfile
    setting = limit is None
    limit = read_limit("part_bytes") if limit is None else limit
    try:
        z = zipfile.ZipFile(io.BytesIO(data))
        infos = z.infolist()
    except Exception as exc:
        raise _unreadable(path, f"a readable {what} file", exc) from None
    for info in infos:
        if info.file_size > limit:
            raise ValueError(f"{path}: its part {info.filename!r} unpacks to "
                             f"{info.file_size:,} bytes, more than the {_size(limit)} a "
                             "document's part may have" +
                             (" " + limit_setting("part_bytes") if setting else ""))
    return z


def _too_many(path: Path, n: int, what: str) -> None:
    cap = read_limit("items")
    if n > cap:
        raise ValueError(f"{path}: more than {cap:,} {what}; split the file "
                         f"{limit_setting('items')}")


def _size(n: int) -> str:
    """Bytes as a person reads a limit: MiB when whole, else KiB or bytes."""
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n:,} bytes"


def _row_text(header: list[str], row: list[str]) -> str:
    """One table row as "header: value; header: value" (empty cells left out; a column
    without a header by its value alone)."""
    parts = []
    for n, v in enumerate(row):
        v = _clean(v)
        if not v:
            continue
        h = _clean(header[n]) if n < len(header) else ""
        parts.append(f"{h}: {v}" if h and h != v else v)
    return "; ".join(parts)


def _rows_to_sections(path: Path, rows, where: tuple[str, ...] = ()) -> list[Section]:
    """A table's rows (lists of cell strings) as one section per row below the first
    non-empty row (the header), each row's number (1-based, the header's included) in
    ``where``; a table of one row is that row."""
    out: list[Section] = []
    header: list[str] | None = None
    for n, row in enumerate(rows, 1):
        if not any(_clean(c) for c in row):
            continue
        if header is None:
            header = list(row)
            first = (n, row)
            continue
        _too_many(path, len(out) + 1, "rows")  # the row about to be read counted
        text = _row_text(header, list(row))
        if text:
            out.append(Section(where, [Block(text)], where={"row": n}))
    if header is not None and not out:  # one row only: itself, not a header
        text = "; ".join(_clean(c) for c in first[1] if _clean(c))
        out.append(Section(where, [Block(text)], where={"row": first[0]}))
    return out


# --------------------------------------------------------------------------- CSV
def _read_csv(path: Path, data: bytes) -> Document:
    """A CSV or TSV file: one section (so one passage, or more for a long row) per row,
    each cell after its column's header (the first row)."""
    import csv
    text = _utf8(path, data).lstrip("\ufeff")
    delim = "\t" if path.suffix.lower() == ".tsv" else None
    if delim is None:
        try:
            delim = csv.Sniffer().sniff(text[:8192], delimiters=",;\t|").delimiter
        except csv.Error:
            delim = ","
    csv.field_size_limit(read_limit("document_bytes"))
    try:
        rows = csv.reader(io.StringIO(text, newline=""), delimiter=delim)
        sections = _rows_to_sections(path, rows)
    except csv.Error as exc:
        raise ValueError(f"{path}: not readable CSV ({exc})") from None
    return Document(None, {}, sections)


# --------------------------------------------------------------------------- XLSX
def _read_xlsx(path: Path, data: bytes) -> Document:
    """An Excel workbook (``openpyxl``, read-only, cached values rather than formulas): each
    sheet's rows as :func:`_read_csv` reads a file's, the sheet's name as their section."""
    openpyxl = _parser(path, "openpyxl", "XLSX")
    _zip(path, data, "XLSX")
    import warnings
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # openpyxl's notes on styles it does not know
            wb = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
        sections: list[Section] = []
        # the cells' text is bounded as a part is: one shared string may fill any number of
        # cells, so a small file could otherwise expand to gigabytes (issue 81)
        cap, spent = read_limit("part_bytes"), [0]

        def bounded(row):
            cells = [("" if v is None else str(v)) for v in row]
            spent[0] += sum(len(c) for c in cells)
            if spent[0] > cap:
                raise ValueError(f"{path}: its cells hold more than {_size(cap)} of text "
                                 f"{limit_setting('part_bytes')}")
            return cells
        try:
            for ws in wb.worksheets:
                rows = (bounded(r) for r in ws.iter_rows(values_only=True))
                sections += _rows_to_sections(path, rows, (ws.title,))
                _too_many(path, len(sections), "rows")
            props = wb.properties
        finally:
            wb.close()
    except ValueError:
        raise
    except Exception as exc:
        raise _unreadable(path, "a readable XLSX file", exc) from None
    return Document(_meta_value(props.title), _core_meta(props, "creator"), sections)


# --------------------------------------------------------------------------- PPTX
def _read_pptx(path: Path, data: bytes) -> Document:
    """A PowerPoint deck (``python-pptx``): one section per slide, its title as the
    section, its text frames, tables and speaker notes as blocks, ``slide`` in the
    passages' metadata."""
    pptx = _parser(path, "pptx", "PPTX")
    _zip(path, data, "PPTX")
    try:
        deck = pptx.Presentation(io.BytesIO(data))
        _too_many(path, len(deck.slides), "slides")
        sections = []
        for n, slide in enumerate(deck.slides, 1):
            title_shape = slide.shapes.title
            title = _clean(title_shape.text_frame.text) if title_shape is not None \
                and title_shape.has_text_frame else ""
            blocks: list[Block] = []

            def shape_blocks(shapes):
                for sh in shapes:
                    if title_shape is not None and sh.shape_id == title_shape.shape_id:
                        continue
                    if getattr(sh, "shape_type", None) == 6:  # a group: its members
                        shape_blocks(sh.shapes)
                    elif getattr(sh, "has_table", False) and sh.has_table:
                        rows = [[c.text for c in r.cells] for r in sh.table.rows]
                        for sec in _rows_to_sections(path, rows):
                            blocks.extend(sec.blocks)
                    elif getattr(sh, "has_text_frame", False) and sh.has_text_frame:
                        texts = [t for para in sh.text_frame.paragraphs
                                 if (t := _clean("".join(r.text for r in para.runs)))]
                        # a frame of several paragraphs is a slide's list of points
                        for t in texts:
                            blocks.append(Block(BULLET + t if len(texts) > 1 else t))
            shape_blocks(slide.shapes)
            if slide.has_notes_slide:
                notes = _clean(slide.notes_slide.notes_text_frame.text
                               if slide.notes_slide.notes_text_frame is not None else "")
                if notes:
                    blocks.append(Block(notes))
            if blocks or title:
                sections.append(Section((title,) if title else (), blocks or [Block(title)],
                                        where={"slide": n}))
        cp = deck.core_properties
    except ValueError:
        raise
    except Exception as exc:
        raise _unreadable(path, "a readable PPTX file", exc) from None
    first = next((s.path[0] for s in sections if s.path), None)
    return Document(_meta_value(cp.title) or first, _core_meta(cp), sections)


# --------------------------------------------------------------------------- EPUB
_XML_BUDGET = 4 << 20  # an EPUB's container and package files: small XML


def _small_xml(path: Path, z, name: str):
    import xml.etree.ElementTree as ET
    info = z.getinfo(name)
    if info.file_size > _XML_BUDGET:
        raise ValueError(f"{path}: {name} is {info.file_size:,} bytes, too large for an "
                         "EPUB package file")
    raw = z.read(name)
    if b"<!ENTITY" in raw or b"<!entity" in raw:  # no entity expansion, no external ones
        raise ValueError(f"{path}: {name} declares XML entities; not read")
    return ET.fromstring(raw)


def _read_epub(path: Path, data: bytes) -> Document:
    """An EPUB book (the standard library's ``zipfile`` and ElementTree for its package
    file, this module's HTML reader for each chapter in reading order): chapters' headings
    as sections, the package's title, creator and subject as title and metadata."""
    import posixpath
    z = _zip(path, data, "EPUB")
    try:
        container = _small_xml(path, z, "META-INF/container.xml")
        root = next((e.get("full-path") for e in container.iter()
                     if e.tag.endswith("rootfile") and e.get("full-path")), None)
        if not root:
            raise ValueError(f"{path}: an EPUB without a package file (no rootfile in "
                             "META-INF/container.xml)")
        opf = _small_xml(path, z, root)
    except KeyError as exc:
        raise ValueError(f"{path}: not a readable EPUB file (missing {exc})") from None
    except ValueError:
        raise
    except Exception as exc:
        raise _unreadable(path, "a readable EPUB file", exc) from None

    def local(e):
        return e.tag.rsplit("}", 1)[-1]
    base = posixpath.dirname(root)
    items = {e.get("id"): e.get("href") for e in opf.iter() if local(e) == "item"}
    spine = [e.get("idref") for e in opf.iter() if local(e) == "itemref"]
    _too_many(path, len(spine), "chapters")
    dc: dict[str, str] = {}
    for e in opf.iter():
        if e.tag.startswith("{http://purl.org/dc/elements/1.1/}") and (e.text or "").strip():
            dc.setdefault(local(e), _clean(e.text))
    sections: list[Section] = []
    from urllib.parse import unquote
    for idref in spine:
        href = items.get(idref)
        if not href:
            continue
        name = posixpath.normpath(posixpath.join(base, unquote(href.split("#")[0])))
        try:
            raw = z.read(name)
        except KeyError:
            continue  # the spine names a file the book lacks: the rest is still read
        try:
            chapter = read_html_text(raw.decode("utf-8", "replace").lstrip("\ufeff"))
        except ValueError as exc:
            raise ValueError(f"{path}: {name}: {exc}") from None
        sections += chapter.sections
    meta = {k: dc[n] for k, n in (("author", "creator"), ("subject", "subject"),
                                  ("language", "language")) if n in dc}
    return Document(dc.get("title"), meta, [s for s in sections if s.blocks])


# --------------------------------------------------------------------------- reST
def _read_rst(path: Path, data: bytes) -> Document:
    """reStructuredText (``docutils``, the reference parser): section titles as sections,
    paragraphs, list items, table rows and literal blocks as blocks; directives and roles
    it does not know, comments, substitution definitions and link targets are not text.
    File inclusion and raw passthrough are off (a document never reads another file)."""
    _parser(path, "docutils", "reStructuredText")
    from docutils import nodes
    from docutils.core import publish_doctree
    text = _utf8(path, data).lstrip("\ufeff")
    settings = {"report_level": 5, "halt_level": 5, "file_insertion_enabled": False,
                "raw_enabled": False, "_disable_config": True, "warning_stream": False,
                "input_encoding": "unicode", "syntax_highlight": "none",
                "doctitle_xform": True, "sectsubtitle_xform": False, "docinfo_xform": True}
    try:
        tree = publish_doctree(text, source_path=str(path), settings_overrides=settings)
    except Exception as exc:
        raise _unreadable(path, "readable reStructuredText", exc) from None
    out = _Sections()
    meta: dict[str, Any] = {}
    skip = (nodes.comment, nodes.system_message, nodes.substitution_definition,
            nodes.target, nodes.raw, nodes.pending, nodes.image, nodes.title)
    leaf = (nodes.paragraph, nodes.term, nodes.line, nodes.attribution, nodes.caption,
            nodes.rubric, nodes.field_name)

    def walk(node, level: int) -> None:
        for child in node.children:
            if isinstance(child, nodes.section):
                t = child.next_node(nodes.title)
                out.heading(level, t.astext() if t is not None else "")
                walk(child, level + 1)
            elif isinstance(child, nodes.docinfo):
                for f in child.children:
                    name = f.tagname if not isinstance(f, nodes.field) else \
                        f.children[0].astext().lower()
                    v = _clean(f.astext() if not isinstance(f, nodes.field)
                               else f.children[1].astext())
                    if v and name in ("author", "authors", "version", "date", "status"):
                        meta[name] = v
            elif isinstance(child, skip) or (isinstance(child, nodes.topic)
                                             and "contents" in child["classes"]):
                continue  # not text; a table of contents repeats the headings
            elif isinstance(child, (nodes.literal_block, nodes.doctest_block)):
                out.add(child.astext(), verbatim=True)
            elif isinstance(child, nodes.row):
                cells = [_clean(e.astext()) for e in child.children]
                out.add(" | ".join(c for c in cells if c))
            elif isinstance(child, leaf):
                out.add(child.astext())
            elif isinstance(child, nodes.Text):
                out.add(str(child))
            else:
                walk(child, level)
    walk(tree, 1)
    title = tree.get("title") or None
    if title:
        title = _clean(title)
    return Document(title, meta, out.done())


# --------------------------------------------------------------------------- text
def _utf8(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") \
            from None


#: the largest file a reader reads (bytes): a document, not a disk image
MAX_DOCUMENT_BYTES = 256 << 20
#: the most text (characters) one document's reader may give, whatever its bytes expand to
#: (a small file can name one string many times): a budget on what is read, not on the file
MAX_TEXT_CHARS = 256 << 20


@dataclass(frozen=True)
class ReadLimits:
    """The readers' bounds for one load (None: the module's default, :data:`MAX_...`):
    ``document_bytes`` a file's size (:data:`MAX_DOCUMENT_BYTES`), ``part_bytes`` an
    archive member's unpacked size (:data:`MAX_PART_BYTES`), ``pdf_content_bytes`` a PDF's
    decoded drawing instructions (:data:`MAX_PDF_CONTENT_BYTES`), ``items`` the rows,
    slides, chapters, pages or paragraphs of one file (:data:`MAX_ITEMS`), ``text_chars``
    the text one document's reader gives (:data:`MAX_TEXT_CHARS`).  Raise one for a
    real document the default refuses; every refusal names the file and the setting."""
    document_bytes: int | None = None
    part_bytes: int | None = None
    pdf_content_bytes: int | None = None
    items: int | None = None
    text_chars: int | None = None

    #: the command line's names (``--read-limit NAME=VALUE``) and the fields they set
    NAMES = {"document": "document_bytes", "part": "part_bytes",
             "pdf-content": "pdf_content_bytes", "items": "items", "text": "text_chars"}

    def __post_init__(self) -> None:
        for f in ("document_bytes", "part_bytes", "pdf_content_bytes", "items", "text_chars"):
            v = getattr(self, f)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"ReadLimits.{f} must be a positive int or None; got {v!r}")

    @classmethod
    def parse(cls, specs: Any) -> "ReadLimits":
        """``["part=256M", "items=500000"]`` (sizes in bytes, or with K, M or G: binary
        units) as limits; ``ValueError`` naming what is wrong."""
        got: dict[str, int] = {}
        for spec in specs or ():
            name, eq, value = str(spec).partition("=")
            field_ = cls.NAMES.get(name.strip().lower())
            if not eq or field_ is None:
                raise ValueError(f"read limit {spec!r}: NAME=VALUE with NAME one of "
                                 f"{', '.join(cls.NAMES)}")
            m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(?:i?B)?\s*", value, re.IGNORECASE)
            if not m or int(m.group(1)) < 1:
                raise ValueError(f"read limit {spec!r}: the value is a positive whole "
                                 "number, bytes or with K, M or G (e.g. part=256M)")
            unit = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2).upper()]
            got[field_] = int(m.group(1)) * unit
        return cls(**got)


_DEFAULT_OF = {"document_bytes": "MAX_DOCUMENT_BYTES", "part_bytes": "MAX_PART_BYTES",
               "pdf_content_bytes": "MAX_PDF_CONTENT_BYTES", "items": "MAX_ITEMS",
               "text_chars": "MAX_TEXT_CHARS"}
_LIMITS: "ContextVar[ReadLimits | None]" = ContextVar("evireform_read_limits", default=None)


def read_limit(name: str) -> int:
    """The bound ``name`` (a :class:`ReadLimits` field) in force: the load's setting, else
    the module's default (read now, so that a changed default counts)."""
    lim = _LIMITS.get()
    v = getattr(lim, name) if lim is not None else None
    return int(v if v is not None else globals()[_DEFAULT_OF[name]])


@contextmanager
def reading_limits(limits: ReadLimits | None):
    """Readers called inside use ``limits`` (None: the defaults)."""
    token = _LIMITS.set(limits)
    try:
        yield
    finally:
        _LIMITS.reset(token)


def limit_setting(name: str) -> str:
    """How a refusal names the setting that would raise it."""
    flag = {v: k for k, v in ReadLimits.NAMES.items()}[name]
    return f"(raise it with --read-limit {flag}=..., or ReadLimits({name}=...))"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | \
    getattr(os, "O_CLOEXEC", 0)


def _open_below(path: StrPath, under: StrPath) -> int:
    """A descriptor of the file ``path`` opened from the folder ``under`` one step at a
    time, no step following a link: a folder on the way swapped for a link (to somewhere
    outside ``under``) after the walk saw it is refused, not followed."""
    import errno
    rel = os.path.relpath(path, under)
    parts = Path(rel).parts
    if not parts or parts[0] == ".." or os.path.isabs(rel):
        raise ValueError(f"{path}: not inside {under}")
    fd = os.open(str(under), os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) |
                 getattr(os, "O_CLOEXEC", 0))
    try:
        for part in parts[:-1]:
            try:
                nxt = os.open(part, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW,
                              dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.EMLINK, errno.ENOTDIR):
                    raise ValueError(f"{path}: its folder {part!r} is a symbolic link or "
                                     "not a folder now, not followed (replaced after the "
                                     "folder was walked)") from None
                raise
            os.close(fd)
            fd = nxt
        return os.open(parts[-1], os.O_RDONLY | _NOFOLLOW, dir_fd=fd)
    finally:
        os.close(fd)


def read_file_bytes(path: StrPath, limit: int | None = None, *,
                    under: StrPath | None = None) -> bytes:
    """The bytes of the regular file at ``path``, opened once: without following a link
    at its last step, without blocking (a FIFO or device swapped in is refused, not waited
    on), checked on the open descriptor (a regular file, at most ``limit`` bytes) and read
    from it, so what is read is what was checked.  ``under``: the folder walked to find it
    (a real path): the file is opened from there one step at a time, no step following a
    link (:func:`_open_below`).  ``ValueError`` naming the file."""
    try:
        fd = os.open(str(path), os.O_RDONLY | _NOFOLLOW) if under is None else \
            _open_below(path, under)
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
        setting = limit is None
        limit = read_limit("document_bytes") if limit is None else limit
        if st.st_size > limit:
            raise ValueError(f"{path}: {st.st_size:,} bytes, more than the "
                             f"{_size(limit)} a document may have" +
                             (" " + limit_setting("document_bytes") if setting else ""))
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
           ".htm": _read_html, ".xhtml": _read_html, ".pdf": _read_pdf, ".docx": _read_docx,
           ".pptx": _read_pptx, ".xlsx": _read_xlsx, ".csv": _read_csv, ".tsv": _read_csv,
           ".epub": _read_epub, ".rst": _read_rst}
#: the formats read as documents (plain text, ``.txt``, is chunked as it is)
DOCUMENT_SUFFIXES = tuple(READERS)


def read_document(path: StrPath, *, under: StrPath | None = None) -> Document:
    """The :class:`Document` of the file at ``path`` by its suffix (``ValueError`` for
    another suffix, :class:`MissingReader` when the format's parser is not installed);
    ``under``: the folder walked to find it (:func:`read_file_bytes`)."""
    path = Path(path)
    reader = READERS.get(path.suffix.lower())
    if reader is None:
        raise ValueError(f"{path}: no document reader for {path.suffix!r} "
                         f"(documents: {', '.join(DOCUMENT_SUFFIXES)})")
    doc = reader(path, read_file_bytes(path, under=under))
    check_text_budget(path, doc)
    return doc


def check_text_budget(path: Path, doc: Document) -> None:
    """``ValueError`` naming the file and the setting when ``doc``'s text (its blocks and
    section headings) passes ``text_chars``: every reader is bounded by what it gives, not
    only by the bytes it reads."""
    cap, n = read_limit("text_chars"), 0
    for sec in doc.sections:
        n += sum(len(p) for p in sec.path) + sum(len(b.text) for b in sec.blocks)
        if n > cap:
            raise ValueError(f"{path}: more than {cap:,} characters of text "
                             f"{limit_setting('text_chars')}")
