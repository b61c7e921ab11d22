"""evireform.formats: Markdown, HTML, PDF and DOCX read as documents (markup removed,
headings as section paths, code kept, the file's own metadata), and a folder of them
indexed and re-indexed after an edit."""
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
    assert "Nightly snapshots go to Glacier." in texts
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


def test_a_folder_of_four_formats_indexes_and_an_edit_replaces_one_file(tmp_path):
    pytest.importorskip("pypdf")
    d = tmp_path / "docs"
    d.mkdir()
    (d / "ops.md").write_text(MD)
    (d / "notes.html").write_text(HTML)
    (d / "paper.pdf").write_bytes(minimal_pdf([["Bridges help multi-hop retrieval."]],
                                              title="Bridges"))
    _docx(d / "spec.docx", [("Heading 1", "Design"), ("Normal", "Written by Omar.")],
          title="Cache spec")
    loaded = load_paths([d], chunk_tokens=60, chunk_overlap=0)
    assert sorted(loaded.sources) == ["docs/notes.html", "docs/ops.md", "docs/paper.pdf",
                                      "docs/spec.docx"]
    idx = PropositionIndex.build(loaded.passages, EMB, show_progress=False)
    idx.meta["documents"] = {s: {**loaded.files[s], "chunks": n}
                             for s, n in loaded.sources.items()}
    before = {p.id: p.text for p in idx.passages}
    (d / "notes.html").write_text(HTML.replace("core team", "platform team"))
    new = replace_sources(idx, load_paths([d], chunk_tokens=60, chunk_overlap=0), EMB,
                          show_progress=False)
    after = {p.id: p.text for p in new.passages}
    changed = {i for i in after if before.get(i) != after[i]}
    assert changed and all(i.startswith("docs/notes.html#") for i in changed)
    assert {i for i in before if not i.startswith("docs/notes.html")} <= set(after)
    assert any("platform team" in t for t in after.values())


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


def test_an_articles_own_header_is_its_text():
    from evireform.formats import read_html_text
    doc = read_html_text("<body><header>Site name</header><article><header><h1>Post title"
                         "</h1></header><p>Body text.</p><footer>Posted by Ann.</footer>"
                         "</article><footer>Site footer</footer></body>")
    text = " ".join(b.text for s in doc.sections for b in s.blocks)
    assert doc.sections[-1].path == ("Post title",) and doc.title == "Post title"
    assert "Body text." in text and "Posted by Ann." in text
    assert "Site name" not in text and "Site footer" not in text


def test_markdown_titles_badges_and_addresses(tmp_path):
    """Issue 68: a document's title is its front matter's, else a level-1 heading that opens
    it, else its file name (a generic one with its folder's); a section heading is never
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
    ps = load_paths(d).passages
    by = {}
    for p in ps:
        by.setdefault(p.metadata["source"], []).append(p)
    assert {p.title for p in by["fastapi/README.md"]} == {"fastapi README"}
    assert {p.title for p in by["fastapi/guide.md"]} == {"FastAPI guide"}
    assert {p.title for p in by["fastapi/late.md"]} == {"late"}
    text = " ".join(p.text for p in by["fastapi/README.md"])
    assert "Build" not in text and "logo" not in text
    assert "forum (discuss.example.org)" in text and "the team (team@example.org)" in text
    assert "Starlette (" not in text  # a name is its own information
    assert [p.metadata["section"] for p in by["fastapi/README.md"]] == ["Installation",
                                                                         "Sponsors"]
