"""evireform.formats: Markdown, HTML, PDF and DOCX read as documents (markup removed,
headings as section paths, code kept, the file's own metadata), and a folder of them
indexed and re-indexed after an edit."""
import os

import pytest

from evireform import PropositionIndex
from evireform.documents import chunk_blocks, load_paths, replace_sources
from evireform.embed import HashingEmbedder
from evireform.formats import Block, MissingReader, read_document

from helpers import minimal_pdf

EMB = HashingEmbedder(64)

MD = """---
title: Operations handbook
team: infra
---
# Operations

The *build farm* is run by [Dana Ruiz](https://example.org/dana) and \\- escaped text.
A second source line of the same paragraph.

## Backups

- Nightly snapshots go to **Glacier**.
- Restores are tested monthly.

```bash
make backup   # keeps
  its indentation
```

| host | role |
|------|------|
| alpha | primary |
"""

HTML = """<!doctype html><html><head><meta charset="utf-8"><title>Release notes</title>
<meta name="author" content="Kim Lee"><style>p {color: red}</style>
<script>var secret = "not text";</script></head>
<body><h1>Version 2</h1><p>The parser was <b>rewritten</b> by the core team.</p>
<h2>Fixes</h2><ul><li>Crash on empty input &amp; long lines.</li></ul>
<pre>def f():
    return 1</pre>
<table><tr><th>flag</th><th>default</th></tr><tr><td>--fast</td><td>off</td></tr></table>
</body></html>"""


def _docx(path, paragraphs, title=None):
    docx = pytest.importorskip("docx")
    d = docx.Document()
    if title:
        d.core_properties.title = title
        d.core_properties.author = "Ada Writer"
    for style, text in paragraphs:
        if style.startswith("Heading"):
            d.add_heading(text, level=int(style.split()[1]))
        else:
            d.add_paragraph(text)
    t = d.add_table(rows=1, cols=2)
    t.rows[0].cells[0].text, t.rows[0].cells[1].text = "port", "8080"
    d.save(str(path))


def test_markdown_without_markup_with_sections_code_and_front_matter(tmp_path):
    f = tmp_path / "ops.md"
    f.write_text(MD)
    doc = read_document(f)
    assert doc.title == "Operations handbook" and doc.metadata["team"] == "infra"
    texts = [b.text for s in doc.sections for b in s.blocks]
    assert texts[0] == ("The build farm is run by Dana Ruiz and - escaped text. A second "
                        "source line of the same paragraph.")
    # a list item opens with a bullet (the extractors end a proposition at each item)
    assert "\u2022 Nightly snapshots go to Glacier." in texts
    code = [b for s in doc.sections for b in s.blocks if b.verbatim]
    assert code[0].text == "make backup   # keeps\n  its indentation"
    assert "alpha | primary" in texts
    assert [s.path for s in doc.sections] == [("Operations",), ("Operations", "Backups")]
    ps = load_paths([f], chunk_tokens=200, chunk_overlap=0).passages
    assert not any(c in p.text for p in ps for c in ("*", "[", "](", "##", "\\-", "---"))
    assert ps[1].metadata["section"] == "Operations > Backups"
    assert ps[1].metadata["team"] == "infra" and ps[1].title == "Operations handbook"
    assert ps[1].text.startswith("Backups\n") and "\n  its indentation" in ps[1].text


def test_html_text_sections_and_metadata(tmp_path):
    f = tmp_path / "notes.html"
    f.write_text(HTML)
    ps = load_paths([f], chunk_tokens=200, chunk_overlap=0).passages
    text = "\n".join(p.text for p in ps)
    assert "secret" not in text and "color" not in text and "<" not in text
    assert "The parser was rewritten by the core team." in text
    assert "Crash on empty input & long lines." in text
    assert "def f():\n    return 1" in text and "--fast | off" in text
    assert ps[0].title == "Release notes" and ps[0].metadata["author"] == "Kim Lee"
    assert [p.metadata["section"] for p in ps] == ["Version 2", "Version 2 > Fixes"]


def test_pdf_pages_title_and_author(tmp_path):
    pytest.importorskip("pypdf")
    f = tmp_path / "paper.pdf"
    f.write_bytes(minimal_pdf([["Retrieval improves with bridges.", "We use MuSiQue."],
                               ["The second page reports recall."]], title="Bridges"))
    ps = load_paths([f], chunk_tokens=200, chunk_overlap=0).passages
    assert [p.metadata["page"] for p in ps] == [1, 2]
    assert "Retrieval improves with bridges." in ps[0].text
    assert ps[0].title == "Bridges" and ps[0].metadata["author"] == "Test Author"
    bad = tmp_path / "broken.pdf"
    bad.write_bytes(b"%PDF-1.4 not really")
    with pytest.raises(ValueError, match="broken.pdf"):
        load_paths([bad])


def test_docx_headings_paragraphs_and_tables(tmp_path):
    f = tmp_path / "spec.docx"
    _docx(f, [("Heading 1", "Design"), ("Normal", "The cache is written by Omar."),
              ("Heading 2", "Limits"), ("Normal", "At most 4 GiB per shard.")],
          title="Cache spec")
    ps = load_paths([f], chunk_tokens=200, chunk_overlap=0).passages
    assert ps[0].title == "Cache spec" and ps[0].metadata["author"] == "Ada Writer"
    secs = [p.metadata.get("section") for p in ps]
    assert "Design" in secs and "Design > Limits" in secs
    text = "\n".join(p.text for p in ps)
    assert "The cache is written by Omar." in text and "port | 8080" in text


def test_a_missing_parser_is_named_with_the_extra(tmp_path, monkeypatch):
    import builtins
    real = builtins.__import__

    def no_pypdf(name, *a, **k):
        if name == "pypdf":
            raise ImportError(name)
        return real(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", no_pypdf)
    f = tmp_path / "x.pdf"
    f.write_bytes(minimal_pdf([["x"]]))
    with pytest.raises(MissingReader, match=r"evireform\[documents\]"):
        read_document(f)


def test_code_blocks_cut_at_line_ends():
    code = "\n".join(f"line_{i} = compute({i}, {i + 1})" for i in range(40))
    chunks = chunk_blocks([Block("Intro sentence."), Block(code, verbatim=True)], 40, 0)
    assert len(chunks) > 2
    for c in chunks[1:]:
        assert all(ln.startswith("line_") for ln in c.split("\n"))
    assert "\n".join(chunks[1:]) == code


def test_a_folder_of_every_format_indexes_and_an_edit_replaces_one_file(tmp_path):
    """Issue 68: a folder of every known format and one unknown file indexes each known
    one and names the unknown one; after an edit, only that file's passages change."""
    pytest.importorskip("pypdf")
    d = tmp_path / "docs"
    d.mkdir()
    (d / "ops.md").write_text(MD)
    (d / "notes.html").write_text(HTML)
    (d / "paper.pdf").write_bytes(minimal_pdf([["Bridges help multi-hop retrieval."]],
                                              title="Bridges"))
    _docx(d / "spec.docx", [("Heading 1", "Design"), ("Normal", "Written by Omar.")],
          title="Cache spec")
    _pptx(d / "deck.pptx", [("Roadmap", ["Ship in May."], None, None)])
    _xlsx(d / "stock.xlsx", {"Parts": [["part", "bin"], ["M3 bolt", "A4"]]})
    (d / "people.csv").write_text("name,role\nAda,lead\n")
    _epub(d / "guide.epub", [("Mosses", "Mosses hold water.")])
    (d / "README.rst").write_text(RST)
    (d / "blob.bin").write_bytes(b"\0\1")
    loaded = load_paths([d], chunk_tokens=60, chunk_overlap=0)
    assert sorted(loaded.sources) == [f"docs/{n}" for n in (
        "README.rst", "deck.pptx", "guide.epub", "notes.html", "ops.md", "paper.pdf",
        "people.csv", "spec.docx", "stock.xlsx")]
    assert all(loaded.sources.values()) and loaded.unread == {".bin": 1}
    assert any("1 .bin" in w for w in loaded.warnings)
    idx = PropositionIndex.build(loaded.passages, EMB, show_progress=False)
    idx.meta["documents"] = {s: {**loaded.files[s], "chunks": n}
                             for s, n in loaded.sources.items()}
    before = {p.id: p.text for p in idx.passages}
    for name, edit in (("notes.html", lambda: (d / "notes.html").write_text(
            HTML.replace("core team", "platform team"))),
            ("people.csv", lambda: (d / "people.csv").write_text("name,role\nAda,platform team\n"))):
        edit()
        new = replace_sources(idx, load_paths([d], chunk_tokens=60, chunk_overlap=0), EMB,
                              show_progress=False)
        after = {p.id: p.text for p in new.passages}
        changed = {i for i in after if before.get(i) != after[i]}
        assert changed and all(i.startswith(f"docs/{name}#") for i in changed)
        assert {i for i in before if not i.startswith(f"docs/{name}")} <= set(after)
        assert any("platform team" in t for t in after.values())
        idx, before = new, after


def test_html_page_chrome_is_not_text():
    """Issue 68: navigation, sidebars, footers and permalink pilcrows (a Sphinx page's
    shape) are left out; the article's headings and text stay."""
    from evireform.formats import read_html_text
    page = """<html><head><title>shutil — High-level file operations</title></head><body>
    <div class="related" role="navigation"><h3>Navigation</h3><ul><li><a href="x">index</a></li>
      <li>next: <a href="y">linecache</a></li></ul></div>
    <header><a href="/">Logo</a></header>
    <div class="document"><div class="body" role="main">
      <section id="m"><h1>shutil — High-level file operations<a class="headerlink" href="#m">¶</a></h1>
      <p>The <code>shutil</code> module offers high-level operations on files.</p>
      <section><h2>Directory operations<a class="headerlink" href="#d">¶</a></h2>
      <div><div><p>copytree() copies a whole tree.</p></div></div></section></section>
    </div></div>
    <div class="sphinxsidebar" role="navigation"><div class="sphinxsidebarwrapper">
      <h3>Table of Contents</h3><ul><li><div>copytree()</div></li></ul>
      <h4>Previous topic</h4><p>linecache</p></div></div>
    <div class="footer">© Copyright 2001-2023, Python Software Foundation.</div>
    </body></html>"""
    doc = read_html_text(page)
    paths = [s.path for s in doc.sections]
    text = " ".join(b.text for s in doc.sections for b in s.blocks)
    assert paths == [("shutil — High-level file operations",),
                     ("shutil — High-level file operations", "Directory operations")]
    assert "copytree() copies a whole tree." in text and "offers high-level" in text
    for chrome in ("¶", "Navigation", "Logo", "Previous topic", "Copyright", "Table of"):
        assert chrome not in text and all(chrome not in " ".join(p) for p in paths)


@pytest.mark.parametrize("page,text,chrome", [
    # Texinfo (libffi's manual): the navigation panel is a div of class "header", the
    # index anchors carry pilcrows
    ("""<body><div class="subsection" id="x"><div class="header"><p>Next: <a href="n.html">
     Type Example</a>, Previous: <a href="p.html">Size and Alignment</a>, Up: <a href="t">
     Types</a> &nbsp; [<a href="Index.html">Index</a>]</p></div><hr>
     <h4 class="subsection">2.3.4 Arrays</h4><p>Arrays are passed by pointer.<a
     class="copiable-anchor" href="#i"> &para;</a></p></div></body>""",
     "Arrays are passed by pointer.", ["Next:", "Previous:", "Index]", "\u00b6"]),
    # Sphinx 5+: footnotes are asides of role "note"; they are the page's text
    ("""<body><div class="body" role="main"><p>See below.</p><p class="rubric">Footnotes</p>
     <aside class="footnote-list brackets"><aside class="footnote brackets" role="note">
     <span class="label">1</span><p>The name stems from Modula-3.</p></aside></aside>
     </div><aside class="sidebar">Other pages</aside></body>""",
     "The name stems from Modula-3.", ["Other pages"]),
    # Node.js API pages: a skip link and "#" permalinks
    ("""<body><a href="#apicontent" class="skip-to-content">Skip to content</a>
     <div id="apicontent"><h2>fs.stat(path)<span><a class="mark" href="#fs">#</a></span></h2>
     <p>Returns the file's status.</p></div></body>""",
     "Returns the file's status.", ["Skip to content", "#"]),
    # DocBook (valgrind's manual): navigation tables of class navheader / navfooter
    ("""<body><div class="navheader"><table><tr><td><a href="a">Prev</a></td><td>Up</td>
     <td>Next</td></tr></table></div><div class="chapter"><p>Cachegrind simulates caches.
     </p></div><div class="navfooter"><table><tr><td>3. Advanced Topics</td></tr></table>
     </div></body>""",
     "Cachegrind simulates caches.", ["Prev", "Advanced Topics"]),
])
def test_generators_chrome_is_not_text_and_their_text_is(page, text, chrome):
    """Issue 68, measured by ``scripts/html_extractors.py`` on Debian's documentation: the
    chrome of Texinfo, DocBook and Node's pages is left out, Sphinx's footnotes stay; a
    table cell or span of class "header" or "mark" is text."""
    from evireform.formats import read_html_text
    doc = read_html_text(page)
    got = " ".join(b.text for s in doc.sections for b in s.blocks) + " " + \
        " ".join(" ".join(s.path) for s in doc.sections)
    assert text in " ".join(got.split())
    for c in chrome:
        assert c not in got, c
    kept = read_html_text('<body><table><tr><td class="header">Name</td><td>Size</td></tr>'
                          '</table><p>A <span class="mark">marked</span> word.</p></body>')
    kept_text = " ".join(b.text for s in kept.sections for b in s.blocks)
    assert "Name" in kept_text and "marked" in kept_text


def test_an_articles_own_header_is_its_text():
    from evireform.formats import read_html_text
    doc = read_html_text("<body><header>Site name</header><article><header><h1>Post title"
                         "</h1></header><p>Body text.</p><footer>Posted by Ann.</footer>"
                         "</article><footer>Site footer</footer></body>")
    text = " ".join(b.text for s in doc.sections for b in s.blocks)
    assert doc.sections[-1].path == ("Post title",) and doc.title == "Post title"
    assert "Body text." in text and "Posted by Ann." in text
    assert "Site name" not in text and "Site footer" not in text


def test_myst_roles_leave_their_text_not_their_names(tmp_path):
    """Issue 82, item 5: MyST/Sphinx roles in Markdown ({ref}`pip freeze`,
    {mod}`ensurepip`, {doc}`text <target>`) read as their text; braces that are no role
    (a code span's, a word's) stay."""
    from evireform.formats import read_document
    f = tmp_path / "guide.md"
    f.write_text("# Install\n\nRun {ref}`pip freeze <pip-freeze>` and see {mod}`ensurepip` "
                 "or {py:func}`os.walk`; keep `{x}` and a {brace} word.\n")
    got = [b.text for sec in read_document(f).sections for b in sec.blocks]
    assert got == ["Run pip freeze and see ensurepip or os.walk; keep {x} and a {brace} "
                   "word."]


def test_markdown_titles_badges_and_addresses(tmp_path):
    """Issue 68: a document's title is its front matter's, else a level-1 heading that opens
    it and is its only one, else its file name (a generic one with its folder's); a section heading is never
    the title; badges and images are no text; a link whose address is the information
    keeps it."""
    from evireform.documents import load_paths
    d = tmp_path / "fastapi"
    d.mkdir()
    (d / "README.md").write_text(
        "[![Build](https://ci.example.org/badge.svg)](https://ci.example.org) ![logo](l.png)\n\n"
        "## Installation\n\nRun pip install fastapi.\n\n## Sponsors\n\nAsk on the "
        "[forum](https://discuss.example.org) or mail [the team](mailto:team@example.org); "
        "see [Starlette](https://www.starlette.io/) for details.\n")
    (d / "guide.md").write_text("![banner](b.png)\n\n# FastAPI guide\n\nText.\n\n## Part\n\nMore.")
    (d / "late.md").write_text("Some intro text.\n\n# Not a title\n\nBody.")
    # several level-1 headings (libjpeg-turbo's README): the first is a section too
    (d / "codec.md").write_text("Background\n==========\n\nA JPEG codec.\n\nLicense\n"
                                "=======\n\nBSD-style.\n")
    ps = load_paths(d).passages
    by = {}
    for p in ps:
        by.setdefault(p.metadata["source"], []).append(p)
    assert {p.title for p in by["fastapi/README.md"]} == {"fastapi README"}
    assert {p.title for p in by["fastapi/guide.md"]} == {"FastAPI guide"}
    assert {p.title for p in by["fastapi/late.md"]} == {"late"}
    assert {p.title for p in by["fastapi/codec.md"]} == {"codec"}
    assert [p.metadata["section"] for p in by["fastapi/codec.md"]] == ["Background", "License"]
    text = " ".join(p.text for p in by["fastapi/README.md"])
    assert "Build" not in text and "logo" not in text
    assert "forum (discuss.example.org)" in text and "the team (team@example.org)" in text
    assert "Starlette (" not in text  # a name is its own information
    assert [p.metadata["section"] for p in by["fastapi/README.md"]] == ["Installation",
                                                                         "Sponsors"]


# ------------------------------------------------------------------ more formats (issue 68)
def _pptx(path, slides, title=None):
    pptx = pytest.importorskip("pptx")
    from pptx.util import Inches
    deck = pptx.Presentation()
    if title:
        deck.core_properties.title = title
    for head, lines, table, notes in slides:
        s = deck.slides.add_slide(deck.slide_layouts[1])
        s.shapes.title.text = head
        body = s.placeholders[1].text_frame
        body.text = lines[0]
        for ln in lines[1:]:
            body.add_paragraph().text = ln
        if table:
            t = s.shapes.add_table(len(table), len(table[0]), Inches(1), Inches(4),
                                   Inches(6), Inches(1)).table
            for r, row in enumerate(table):
                for c, v in enumerate(row):
                    t.cell(r, c).text = v
        if notes:
            s.notes_slide.notes_text_frame.text = notes
    deck.save(str(path))


def _xlsx(path, sheets):
    openpyxl = pytest.importorskip("openpyxl")
    wb = openpyxl.Workbook()
    wb.remove(wb.active)
    for name, rows in sheets.items():
        ws = wb.create_sheet(name)
        for r in rows:
            ws.append(r)
    wb.properties.title = "Inventory"
    wb.save(str(path))


def _epub(path, chapters, title="A Field Guide", author="Rowan Ash", prolog=""):
    import zipfile
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("mimetype", "application/epub+zip")
        z.writestr("META-INF/container.xml",
                   '<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:'
                   'opendocument:xmlns:container"><rootfiles><rootfile full-path="OEBPS/'
                   'content.opf" media-type="application/oebps-package+xml"/></rootfiles>'
                   '</container>')
        items = "".join(f'<item id="c{n}" href="text/c{n}.xhtml" media-type="application/'
                        f'xhtml+xml"/>' for n in range(len(chapters)))
        # the spine reads the chapters in reverse of their manifest order
        spine = "".join(f'<itemref idref="c{n}"/>' for n in reversed(range(len(chapters))))
        z.writestr("OEBPS/content.opf",
                   '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" '
                   'version="3.0"><metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
                   f'<dc:title>{title}</dc:title><dc:creator>{author}</dc:creator>'
                   f'</metadata><manifest>{items}</manifest><spine>{spine}</spine></package>')
        for n, (head, text) in enumerate(chapters):
            z.writestr(f"OEBPS/text/c{n}.xhtml",
                       f'{prolog}<html xmlns="http://www.w3.org/1999/xhtml"><head><title>{head}'
                       f'</title></head><body><h1>{head}</h1><p>{text}</p></body></html>')


RST = """\
=====================
 Async HTTP toolkit
=====================

:Author: Mira Kovacs

.. image:: https://example.org/badge.svg
   :target: https://example.org

.. contents::

Installation
============

Install it with pip::

    pip install toolkit

.. note:: Wheels exist for every platform.

.. unknowndirective:: not text
   neither is this

Usage
=====

The client keeps one connection pool per host.

* Retries back off exponentially.
* Timeouts default to 30 seconds.

..
   a comment that is not text

.. |sub| replace:: substituted

.. _target: https://example.org/target
"""


def test_pptx_a_section_per_slide_with_tables_and_notes(tmp_path):
    f = tmp_path / "deck.pptx"
    _pptx(f, [("Roadmap", ["Ship the parser in May.", "Freeze the API in June."],
               [["quarter", "owner"], ["Q3", "Lina"]], "Ask Lina about Q4."),
              ("Risks", ["The vendor may slip."], None, None)], title="Planning 2027")
    ps = load_paths([f], chunk_tokens=80, chunk_overlap=0).passages
    assert {p.title for p in ps} == {"Planning 2027"}
    by = {p.metadata["slide"]: p for p in ps}
    assert sorted(by) == [1, 2]
    assert by[1].metadata["section"] == "Roadmap" and by[2].metadata["section"] == "Risks"
    assert "Ship the parser in May." in by[1].text and "quarter: Q3; owner: Lina" in by[1].text
    assert "Ask Lina about Q4." in by[1].text and "slip" not in by[1].text


def test_xlsx_and_csv_a_passage_per_row_headers_kept(tmp_path):
    f = tmp_path / "stock.xlsx"
    _xlsx(f, {"Parts": [["part", "bin", "count"], ["M3 bolt", "A4", 120], [None, None, None],
                        ["M4 nut", "B1", 80]],
              "Suppliers": [["name", "city"], ["Orvel Ltd", "Leeds"]]})
    ps = load_paths([f], chunk_tokens=80, chunk_overlap=0).passages
    assert [p.text for p in ps] == ["Parts\npart: M3 bolt; bin: A4; count: 120",
                                    "Parts\npart: M4 nut; bin: B1; count: 80",
                                    "Suppliers\nname: Orvel Ltd; city: Leeds"]
    assert [p.metadata["row"] for p in ps] == [2, 4, 2]
    assert ps[0].title == "Inventory" and ps[2].metadata["section"] == "Suppliers"
    c = tmp_path / "people.csv"
    c.write_text("\ufeffname;role;note\nAda;lead;\"writes, tests\"\nBo;;reviews\n")
    ps = load_paths([c], chunk_tokens=80, chunk_overlap=0).passages
    assert [p.text for p in ps] == ["name: Ada; role: lead; note: writes, tests",
                                    "name: Bo; note: reviews"]
    assert ps[0].title == "people" and [p.metadata["row"] for p in ps] == [2, 3]
    t = tmp_path / "one.tsv"
    t.write_text("only\trow\n")
    assert [p.text for p in load_paths([t]).passages] == ["only; row"]


def test_an_epub_chapters_entity_declarations_are_neither_text_nor_expanded(tmp_path):
    """Issue 81 (round 7, item 6): a chapter's DOCTYPE with an internal subset (an XML
    entity attack's shape) is dropped whole with the references to what it declares: no
    ``]>``, no ``&xxe;``, nothing read from the file it names; the text around them kept, a
    DOCTYPE without a subset and HTML's own entities read as before."""
    from evireform.formats import read_document, read_html_text
    f = tmp_path / "x.epub"
    _epub(f, [("Mosses", "Mosses &xxe; hold &amp; keep water &lt;&b;.")],
          prolog='<?xml version="1.0"?>\n<!-- a comment --><!DOCTYPE html [\n<!ENTITY xxe '
                 'SYSTEM "file:///etc/passwd">\n<!ENTITY b "BOOM">]>\n')
    text = " ".join(b.text for s in read_document(f).sections for b in s.blocks)
    assert text == "Mosses hold & keep water <.", text
    doc = read_html_text('<!DOCTYPE html><p>plain &foo; text</p>')  # no subset: as before
    assert [b.text for s in doc.sections for b in s.blocks] == ["plain &foo; text"]
    # an unclosed subset is one bounded match, not a scan per "<!DOCTYPE"
    import time
    t = time.perf_counter()
    read_html_text("<!DOCTYPE x [" * 20_000)
    assert time.perf_counter() - t < 5


def test_a_parsers_long_message_is_one_line_naming_the_file(tmp_path, monkeypatch):
    """A reader's refusal is one line naming the file, the parser's own message (several
    lines from openpyxl) folded and cut (issue 81, round 7, item 6)."""
    openpyxl = pytest.importorskip("openpyxl")
    from evireform.formats import read_document

    def broken(*a, **k):
        raise KeyError("There is no item named 'xl/workbook.xml'\n  in the archive\n\n"
                       + "x" * 500)
    monkeypatch.setattr(openpyxl, "load_workbook", broken)
    f = tmp_path / "bad.xlsx"
    import zipfile
    with zipfile.ZipFile(f, "w") as z:
        z.writestr("[Content_Types].xml", "<Types/>")
    with pytest.raises(ValueError) as got:
        read_document(f)
    said = str(got.value)
    assert "\n" not in said and said.startswith(f"{f}: not a readable XLSX file (KeyError: ")
    assert "in the archive" in said and len(said) < len(str(f)) + 260


def test_epub_chapters_in_reading_order(tmp_path):
    f = tmp_path / "guide.epub"
    _epub(f, [("Mosses", "Mosses hold water."), ("Ferns", "Ferns spread by spores.")])
    ps = load_paths([f], chunk_tokens=80, chunk_overlap=0).passages
    assert [p.metadata["section"] for p in ps] == ["Ferns", "Mosses"]  # the spine's order
    assert ps[0].title == "A Field Guide" and ps[0].metadata["author"] == "Rowan Ash"
    assert "spores" in ps[0].text
    bad = tmp_path / "bad.epub"
    import zipfile
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("META-INF/container.xml", '<!DOCTYPE x [<!ENTITY a "aaaa">]><x>&a;</x>')
    with pytest.raises(ValueError, match="bad.epub.*entities"):
        read_document(bad)


def test_rst_sections_without_directives_or_comments(tmp_path):
    f = tmp_path / "README.rst"
    f.write_text(RST)
    doc = read_document(f)
    assert doc.title == "Async HTTP toolkit" and doc.metadata == {"author": "Mira Kovacs"}
    assert [s.path for s in doc.sections] == [("Installation",), ("Usage",)]
    text = "\n".join(b.text for s in doc.sections for b in s.blocks)
    assert "pip install toolkit" in text and "Wheels exist for every platform." in text
    assert "Retries back off exponentially." in text
    for junk in ("unknowndirective", "not text", "comment", "substituted", "badge", "..",
                 "https://example.org/target", "Contents"):
        assert junk not in text, junk
    inc = tmp_path / "inc.rst"
    inc.write_text(".. include:: /etc/passwd\n\n.. raw:: html\n\n   <b>raw</b>\n\nText.\n")
    text = "\n".join(b.text for s in read_document(inc).sections for b in s.blocks)
    assert "root" not in text and "raw" not in text and "Text." in text


def test_a_bomb_part_is_refused_naming_the_file(tmp_path, monkeypatch):
    import evireform.formats as F
    f = tmp_path / "big.xlsx"
    _xlsx(f, {"S": [["a"], ["x" * 5000]]})
    monkeypatch.setattr(F, "MAX_PART_BYTES", 2000)
    with pytest.raises(ValueError, match=r"big.xlsx: its part .* unpacks to"):
        read_document(f)
    monkeypatch.setattr(F, "MAX_PART_BYTES", 256 << 20)
    monkeypatch.setattr(F, "MAX_ITEMS", 2)
    c = tmp_path / "rows.csv"
    c.write_text("h\n1\n2\n3\n4\n")
    with pytest.raises(ValueError, match=r"rows.csv: more than 2 rows"):
        read_document(c)


def test_the_readers_bounds_are_settings(tmp_path, monkeypatch, capsys):
    """Issue 69: each bound (a file's size, an archive part, a PDF's drawing instructions,
    the items of a file) is a setting: ``load_paths(limits=ReadLimits(...))`` and
    ``--read-limit NAME=SIZE`` on index, update and serve; a refusal names the setting that
    would raise it; a raised bound lets in what the default refuses; the setting holds for
    that load only."""
    import evireform.formats as F
    from evireform.cli import main
    from evireform.formats import ReadLimits, read_limit
    assert ReadLimits.parse(["part=256M", "items=500000", "document=2g", "pdf-content=512K"]) \
        == ReadLimits(part_bytes=256 << 20, items=500_000, document_bytes=2 << 30,
                      pdf_content_bytes=512 << 10)
    for bad in ("part", "parts=1M", "part=0", "part=1.5M", "items=-3"):
        with pytest.raises(ValueError, match="read limit"):
            ReadLimits.parse([bad])
    with pytest.raises(ValueError, match="positive int"):
        ReadLimits(items=0)
    folder = tmp_path / "docs"
    folder.mkdir()
    _xlsx(folder / "big.xlsx", {"S": [["a"], ["x" * 5000]]})
    (folder / "rows.csv").write_text("h\n1\n2\n3\n4\n")
    (folder / "heavy.pdf").write_bytes(minimal_pdf([[f"line {i}" for i in range(40)]] * 3))
    (folder / "note.md").write_text("# Note\n\n" + "word " * 100 + "\n")
    monkeypatch.setattr(F, "MAX_PART_BYTES", 2000)  # a default that refuses big.xlsx
    tight = ReadLimits(items=3, pdf_content_bytes=1200, part_bytes=1 << 20)
    got = load_paths(folder, limits=tight, skip_errors=True)
    why = {os.path.basename(p): m for p, m in got.errors}
    assert "more than 3 rows" in why["rows.csv"] and "--read-limit items=" in why["rows.csv"]
    assert "--read-limit pdf-content=" in why["heavy.pdf"]  # 3 pages: within the items
    assert set(why) == {"rows.csv", "heavy.pdf"}  # big.xlsx's part fits the raised bound
    with pytest.raises(ValueError, match=r"note.md: .* more than the 300 bytes .*document="):
        load_paths(folder / "note.md", limits=ReadLimits(document_bytes=300))
    assert read_limit("items") == F.MAX_ITEMS and read_limit("part_bytes") == 2000
    with pytest.raises(ValueError, match=r"big.xlsx: its part .*--read-limit part="):
        load_paths(folder / "big.xlsx")  # the default (2000 here) again
    # the command line: a bad setting is a usage error naming the names, a good one holds
    with pytest.raises(SystemExit) as ex:
        main(["index", str(folder), str(tmp_path / "ix"), "--embedder", "hashing-8",
              "--read-limit", "bogus=1"])
    assert ex.value.code == 2
    assert "document, part, pdf-content, items" in capsys.readouterr().err
    rc = main(["index", str(folder), str(tmp_path / "ix"), "--embedder", "hashing-8",
               "--skip-errors", "--read-limit", "part=1M", "--read-limit", "items=2"])
    err = capsys.readouterr().err
    assert rc == 0 and "rows.csv: more than 2 rows" in err and "big.xlsx" not in err


def test_a_format_whose_extra_is_missing_is_named_not_fatal(tmp_path, monkeypatch):
    import evireform.formats as F
    from evireform.documents import unread_summary

    def missing(path, data):
        raise MissingReader(f"{path}: reading PPTX needs the 'documents' extra")
    monkeypatch.setitem(F.READERS, ".pptx", missing)
    d = tmp_path / "n"
    d.mkdir()
    (d / "a.md").write_text("# A\n\nAlpha.")
    (d / "x.pptx").write_bytes(b"PK")
    (d / "y.pptx").write_bytes(b"PK")
    (d / "z.bin").write_bytes(b"\0")
    got = load_paths([d])
    assert got.unread == {".pptx": 2, ".bin": 1} and got.skipped == {"n/x.pptx", "n/y.pptx"}
    assert unread_summary(got.unread, got.needs_extra, got.unread_names) in got.warnings
    assert got.warnings[-1] == ("skipped 3 files: 2 .pptx (install 'evireform[documents]'), "
                                "1 .bin (no reader): x.pptx, y.pptx, z.bin; --include names "
                                "files to read as text")
    with pytest.raises(ValueError, match=r"no passages found .*install 'evireform\[documents\]'"):
        load_paths([d / "x.pptx"])


def test_pdf_sections_follow_the_headings_and_running_lines_go(tmp_path):
    """Issue 68: each chunk's section is the outline entry whose heading precedes its text
    (not the first entry on its page); running headers, footers and page numbers are not
    text; a section running on to the next page keeps its path without its heading again."""
    pytest.importorskip("pypdf")
    head = "Shared MIME-info Database"
    pages = [[head, "1. Introduction", "This spec says how MIME types", "are stored on disk.",
              "- 1 -"],
             [head, "Text before the next heading ends the introduction.",
              "2.1 Directory layout", "Files live under", "share/mime in a fash-",
              "ion.", "Page 2 of 3"],
             [head, "More on the layout.", "Page 3 of 3"]]
    f = tmp_path / "mime.pdf"
    f.write_bytes(minimal_pdf(pages, title="Shared MIME-info", outline=[
        ("1. Introduction", 0, []), ("2. Layout", 1, [("2.1 Directory layout", 1, [])])]))
    ps = load_paths([f], chunk_tokens=200, chunk_overlap=0).passages
    got = [(p.metadata["section"], p.metadata["page"], p.text) for p in ps]
    assert got == [
        ("1. Introduction", 1, "1. Introduction\nThis spec says how MIME types are stored "
                               "on disk."),
        ("1. Introduction", 2, "Text before the next heading ends the introduction."),
        ("2. Layout > 2.1 Directory layout", 2,
         "2.1 Directory layout\nFiles live under share/mime in a fashion."),
        ("2. Layout > 2.1 Directory layout", 3, "More on the layout.")]
    assert all(p.title == "Shared MIME-info" for p in ps)
    # without an outline: the running lines still go, one section per page
    g = tmp_path / "plain.pdf"
    g.write_bytes(minimal_pdf([[head, "Alpha text.", "7"], [head, "Beta text.", "8"]]))
    assert [p.text for p in load_paths([g]).passages] == ["Alpha text.", "Beta text."]


def test_a_chapters_running_header_goes_and_a_recurring_text_line_stays():
    """Issue 82: a real PDF's running header names its chapter ("Chapter 2: ASN.1
    structure handling 3"), so it recurs on that chapter's pages only, fewer than half:
    a line that opens three pages or more, and never stands elsewhere, is chrome too. A
    text line that closes several pages, or opens pages and also stands inside one, stays."""
    from evireform.formats import _strip_running_lines
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()

    def body(n):
        return [f"{words[n]} {w} text." for w in ("first", "second", "third", "fourth")]
    pages = ([[f"Chapter 1: Intro {i}", *body(i), "Returns: zero."] for i in (1, 2, 3)]
             + [["4", "2 Usage", *body(4)]]
             + [[f"Chapter 2: Usage {i}", *body(i)] for i in (5, 6, 7)]
             + [["Tip: read on.", *body(8)], ["Tip: read on.", *body(9)],
                ["Tip: read on.", "a line.", "Tip: read on.", *body(0)]]
             # two pages of a chapter whose header carries the page number; two that open
             # with the same numbered line that is no page number (stays)
             + [["Chapter 3: Tools 11", *body(1)], ["Chapter 3: Tools 12", *body(2)],
                ["Step 1 of the setup.", *body(3)], ["Step 1 of the setup.", *body(4)]])
    got = _strip_running_lines(pages)
    assert got == ([[*body(i), "Returns: zero."] for i in (1, 2, 3)] + [["2 Usage", *body(4)]]
                   + [body(i) for i in (5, 6, 7)]
                   + [["Tip: read on.", *body(8)], ["Tip: read on.", *body(9)],
                      ["Tip: read on.", "a line.", "Tip: read on.", *body(0)]]
                   + [body(1), body(2), ["Step 1 of the setup.", *body(3)],
                      ["Step 1 of the setup.", *body(4)]])


def test_the_libtasn1_manuals_chapter_headers_are_not_text():
    """The real PDF the issue names (Debian's libtasn1-doc), where it is installed."""
    pytest.importorskip("pypdf")
    from pathlib import Path
    f = Path("/usr/share/doc/libtasn1-doc/libtasn1.pdf")
    if not f.is_file():
        pytest.skip("libtasn1-doc is not installed")
    ps = load_paths([f]).passages
    assert ps and not any("Chapter 2: ASN.1 structure handling" in p.text for p in ps)
    assert any("ASN.1" in p.text for p in ps)
