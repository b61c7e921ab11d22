"""Which HTML main-content extractor to read pages with (issue 68): the library's own reader
(``html.parser`` with its chrome rules) beside trafilatura and readability-lxml, on real
pages nobody here wrote, each scored against the page's own main container.

    python scripts/html_extractors.py [--per-source 20]

The pages are Debian's documentation as installed on this machine (packages python3.11-doc,
nodejs-doc, valgrind, libffi-dev, libxslt1-dev): Sphinx (the Python library reference), the Node.js API
pages, DocBook (valgrind's manual, "Next / Up / Prev" navigation) and Texinfo (libffi's
manual, "Next: ... Up: ... [Contents][Index]"); a source that is not installed is left out
and named.  The library's chrome rules were extended after reading the first four
sources (Texinfo's header panel, DocBook's navigation and contents, Sphinx's footnotes,
Node's permalinks); the last two (libxslt1-dev's gtk-doc API reference and its
table-layout site pages) are held out: nothing was changed for them.  The reference for each page is its main container as the generator writes it
(an XPath per source: Sphinx's ``role="main"``, Node's ``#apicontent``, DocBook's chapter or
section, Texinfo's body less its header panel), chosen by reading the generators' markup,
not by any extractor's rules.  Scored per extractor and source:

* content: the share of the main container's innermost blocks (paragraphs, list items,
  definitions, table cells, code, of at least 30 characters) whose text the extractor's
  output holds (whitespace and pilcrows aside);
* chrome: the share of the text outside the container (navigation, headers, footers,
  sidebars: each element's own text of at least two words that the container does not
  also hold) that the output holds; lower is better;
* pilcrows: permalink marks (the pilcrow) left in the output, per page;
* seconds per page.

trafilatura and readability-lxml are read when importable (``pip install trafilatura
readability-lxml``; they are not dependencies of the package); the library's reader always.
Prints Markdown.
"""
import argparse
import importlib.util
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DOC = Path("/usr/share/doc")
#: source -> (folder, main container XPath, XPath of the chrome inside it or None)
SOURCES = {
    "Sphinx (python3.11-doc library)": ("python3.11/html/library", "//*[@role='main']",
                                        None),
    "Node.js API (nodejs-doc)": ("nodejs/api", "//*[@id='apicontent']", None),
    "DocBook (valgrind)": ("valgrind/html", "//div[@class='chapter' or @class='sect1' or "
                                            "@class='sect2' or @class='book' or "
                                            "@class='preface' or @class='appendix']",
                           ".//div[@class='toc']"),
    "Texinfo (libffi-dev)": ("libffi8/html",
                             "/html/body/div[not(@class='header' or @class='nav-panel')]",
                             ".//div[@class='header' or @class='nav-panel']"),
    # held out: sources the library's chrome rules were not looked at against
    "held out: gtk-doc (libxslt1-dev API)": ("libxslt1-dev/gtk-doc/html/libxslt", "/html/body",
                                             ".//table[@class='navigation']"),
    "held out: table layout (libxslt1-dev site)": ("libxslt1-dev/html",
                                                   "(//td[@valign='top'])[last()]", None),
}
#: permalink anchors (Sphinx's, Node's, Texinfo's marks): no reading's content
PERMALINKS = ("//a[@class='headerlink' or @class='mark' or @class='copiable-anchor' or "
              "@class='copiable-link']")
BLOCKS = "p", "li", "dd", "dt", "td", "th", "pre", "h1", "h2", "h3", "h4", "blockquote"


def _norm(s: str) -> str:
    """Text compared as words: whitespace collapsed, pilcrows and the "|" a reader may put
    between links dropped."""
    return re.sub(r"\s+", " ", s.replace("\u00b6", "").replace("|", " ")).strip()


def reference(html: bytes, xpath: str, inner: str | None):
    """(main blocks, chrome segments) of a page, or None when the page has no main
    container; ``inner``: chrome inside the container (Texinfo's navigation panel), moved
    out of it."""
    import lxml.html
    tree = lxml.html.fromstring(html)
    for bad in tree.xpath("//script|//style|//noscript|//template|" + PERMALINKS):
        bad.drop_tree()
    mains = tree.xpath(xpath)
    if not mains:
        return None
    mains = [m for m in mains if not any(a in mains for a in m.iterancestors())]
    body = tree.find("body")
    for m in mains if inner else ():
        for el in m.xpath(inner):
            el.drop_tree()
            if body is not None:
                body.append(el)  # outside the container: counted as chrome
    blocks = []
    for m in mains:
        for el in m.iter(*BLOCKS):
            if any(d is not el for d in el.iter(*BLOCKS)):
                continue  # the innermost blocks only: a list's items, not the list
            t = _norm(el.text_content())
            if len(t) >= 30:
                blocks.append(t)
    main_text = " ".join(_norm(m.text_content()) for m in mains)
    for m in mains:
        m.drop_tree()
    title = _norm(tree.findtext(".//title") or "")
    chrome = []
    if body is not None:  # each element's own text (a link, a menu entry, a line)
        for el in body.iter():
            for piece in (el.text, el.tail):
                t = _norm(piece or "")  # the page's title is its name wherever it is written
                if len(t.split()) >= 2 and t not in main_text and t not in title:
                    chrome.append(t)
    return blocks, chrome


def ours(path: Path, html: bytes) -> str:
    from evireform.formats import read_document
    doc = read_document(path)
    return "\n".join([doc.title or ""] + [" > ".join(s.path) + "\n" + "\n".join(
        b.text for b in s.blocks) for s in doc.sections])


def trafilatura_text(path: Path, html: bytes) -> str:
    import trafilatura
    return trafilatura.extract(html.decode("utf-8", "replace"), include_tables=True,
                               include_comments=False) or ""


def readability_text(path: Path, html: bytes) -> str:
    import lxml.html
    from readability import Document
    doc = Document(html.decode("utf-8", "replace"))
    return doc.title() + "\n" + lxml.html.fromstring(doc.summary()).text_content()


EXTRACTORS = {"evireform (html.parser + chrome rules)": ours,
              "trafilatura": trafilatura_text, "readability-lxml": readability_text}
#: the module each optional extractor needs
MODULES = {"trafilatura": "trafilatura", "readability-lxml": "readability"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-source", type=int, default=20, help="pages per source (spread)")
    a = ap.parse_args(argv)
    usable = {}
    for name, fn in EXTRACTORS.items():
        module = MODULES.get(name)
        if module is None or importlib.util.find_spec(module) is not None:
            usable[name] = fn
        else:
            print(f"(left out: {name} is not installed)", file=sys.stderr)
    rows = []
    for source, (folder, xpath, inner) in SOURCES.items():
        files = sorted((DOC / folder).glob("*.html"))
        if not files:
            print(f"(left out: {source}: {DOC / folder} is not installed)", file=sys.stderr)
            continue
        step = max(1, len(files) // a.per_source)
        pages = []
        for f in files[::step]:
            html = f.read_bytes()
            ref = reference(html, xpath, inner)
            if ref and ref[0]:
                pages.append((f, html, ref))
            if len(pages) >= a.per_source:
                break
        for name, fn in usable.items():
            kept = total = leaked = chrome_n = pil = 0
            secs = 0.0
            for f, html, (blocks, chrome) in pages:
                t0 = time.perf_counter()
                try:
                    out = fn(f, html)
                except Exception as exc:  # an extractor that fails a page keeps nothing
                    print(f"{name} on {f}: {type(exc).__name__}: {exc}", file=sys.stderr)
                    out = ""
                secs += time.perf_counter() - t0
                pil += out.count("\u00b6")
                got = _norm(out)
                kept += sum(b in got for b in blocks)
                total += len(blocks)
                leaked += sum(c in got for c in chrome)
                chrome_n += len(chrome)
            rows.append((source, len(pages), name, 100 * kept / max(total, 1),
                         100 * leaked / max(chrome_n, 1), pil / max(len(pages), 1),
                         1e3 * secs / max(len(pages), 1)))
    print("| pages | n | extractor | content kept % | chrome left % | pilcrows / page "
          "| ms / page |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for source, n, name, c, ch, p, ms in rows:
        print(f"| {source} | {n} | {name} | {c:.1f} | {ch:.1f} | {p:.1f} | {ms:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
