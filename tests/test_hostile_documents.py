"""Hostile input to the document readers and to updates from files and folders: lone surrogates, undecodable file names, records that name a file, folders walked from anywhere, only regular files read, unreadable entries, overlong tokens."""
import json
import os
import time
import pytest
from evireform import Passage, PropositionIndex
from evireform.cli import main

from hostile_common import REPO, EMB, _run, _index, _ps, _ranks  # noqa: F401


def _folder(root):
    root.mkdir(parents=True, exist_ok=True)
    (root / "a.md").write_text("# A\n\nalice met bob in paris. bob met carol.\n")
    (root / "b.md").write_text("# B\n\ncarol founded delta inc.\n")
    (root / "sub").mkdir(exist_ok=True)
    (root / "sub" / "c.txt").write_text("dave joined delta inc in lyon.")


def _ids(ix):
    return sorted(p.id for p in PropositionIndex.load(ix).passages)


@pytest.mark.parametrize("where", ["text", "title", "id", "metadata", "metadata key"])
def test_lone_surrogates_are_refused_naming_the_record(tmp_path, where):
    bad = "cut \ud800 emoji"
    p = {"text": Passage("a", "t", bad), "title": Passage("a", bad, "x"),
         "id": Passage(bad, "t", "x"), "metadata": Passage("a", "t", "x", {"k": bad}),
         "metadata key": Passage("a", "t", "x", {bad: 1})}[where]
    with pytest.raises(ValueError, match="lone surrogate"):
        PropositionIndex.build([p, Passage("b", "t", "fine")], EMB, show_progress=False)
    ix = _index(tmp_path, _ps(3))
    with pytest.raises(ValueError, match="lone surrogate"):
        PropositionIndex.load(ix).add([p], EMB)
    # a corpus file with the escape: refused by index, nothing written
    c = tmp_path / "c.json"
    c.write_text(json.dumps([{"id": "a", "text": "x \ud800 y"}]))
    assert main(["index", str(c), str(tmp_path / "out"), "--embedder", "hashing-16",
                 "--quiet"]) == 2
    assert not (tmp_path / "out").exists()


def test_a_latin1_file_name_is_refused_and_every_saved_index_is_valid_utf8(tmp_path,
                                                                           capsys):
    d = tmp_path / "notes"
    d.mkdir()
    (d / "good.txt").write_text("Alpha met Beta.")
    try:
        (d / os.fsdecode(b"caf\xe9.txt")).write_text("Gamma met Delta.")
    except (OSError, UnicodeError):
        pytest.skip("the file system refuses non-UTF-8 names")
    assert main(["index", str(d), str(tmp_path / "ix"), "--embedder", "hashing-16",
                 "--quiet"]) == 2
    assert "not valid UTF-8" in capsys.readouterr().err
    assert main(["index", str(d), str(tmp_path / "ix"), "--embedder", "hashing-16",
                 "--quiet", "--skip-errors"]) == 0
    blob = (tmp_path / "ix" / "strings.utf8").read_bytes()
    blob.decode("utf-8")  # strict: valid UTF-8
    import shutil
    shutil.copytree(tmp_path / "ix", tmp_path / "copy")
    assert PropositionIndex.load(tmp_path / "copy", verify="full").n_passages == 1


def test_update_of_a_file_never_deletes_records_whose_metadata_names_it(tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "x.md").write_text("first version of x.")
    corpus = tmp_path / "c.json"  # LangChain loaders set "source" on every record
    corpus.write_text(json.dumps([{"id": f"r{i}", "text": f"record {i} text.",
                                   "source": "notes/x.md"} for i in range(3)]))
    ix = tmp_path / "ix"
    assert main(["index", str(corpus), str(ix), "--embedder", "hashing-16", "--quiet"]) == 0
    (notes / "x.md").write_text("second version of x.")
    assert main(["update", str(ix), "--add", str(notes / "x.md"), "--quiet"]) == 0
    ids = _ids(ix)
    assert {"r0", "r1", "r2"} <= set(ids) and "notes/x.md#0" in ids


def test_update_of_a_folder_makes_the_index_match_it_from_any_directory(tmp_path):
    notes = tmp_path / "work" / "notes"
    _folder(notes)
    ix = tmp_path / "ix"
    r = _run("index", "notes", ix, "--embedder", "hashing-16", "--quiet",
             cwd=tmp_path / "work")
    assert r.returncode == 0, r.stderr
    before = _ids(ix)
    assert before == ["notes/a.md#0", "notes/b.md#0", "notes/sub/c.txt#0"]
    # from another directory: nothing added twice
    r = _run("update", ix, "--add", notes, "--quiet", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert _ids(ix) == before
    # deleted, renamed, emptied
    (notes / "b.md").unlink()
    (notes / "sub" / "c.txt").rename(notes / "sub" / "d.txt")
    (notes / "a.md").write_text("")
    r = _run("update", ix, "--add", notes, "--quiet", cwd=tmp_path / "work" / "notes")
    assert r.returncode == 0, r.stderr
    assert _ids(ix) == ["notes/sub/d.txt#0"]
    # a file of a subfolder named alone keeps the ids it has in the folder
    (notes / "sub" / "d.txt").write_text("dave moved to nice.")
    assert _run("update", ix, "--add", notes / "sub" / "d.txt", "--quiet").returncode == 0
    idx = PropositionIndex.load(ix)
    assert [p.id for p in idx.passages] == ["notes/sub/d.txt#0"]
    assert idx.passages[0].text == "dave moved to nice."


def test_only_regular_files_under_the_root_are_read(tmp_path):
    from evireform.documents import load_paths
    notes = tmp_path / "notes"
    _folder(notes)
    os.symlink("/dev/zero", notes / "zero.txt")
    os.mkfifo(notes / "pipe.txt")
    outside = tmp_path / "secret.txt"
    outside.write_text("root password.")
    os.symlink(outside, notes / "passwd.txt")
    os.symlink(notes / "a.md", notes / "alias.md")  # inside the root: followed
    t0 = time.monotonic()
    got = load_paths([notes])
    assert time.monotonic() - t0 < 30  # neither /dev/zero nor the FIFO is read
    srcs = set(got.sources)
    assert "notes/alias.md" in srcs and not {"notes/zero.txt", "notes/pipe.txt",
                                             "notes/passwd.txt"} & srcs
    assert not any("root password" in p.text for p in got.passages)
    joined = "\n".join(got.warnings)
    assert "zero.txt" in joined and "pipe.txt" in joined and "passwd.txt" in joined
    with pytest.raises(ValueError, match="not a regular file"):
        load_paths([notes / "pipe.txt"])


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every folder")
def test_an_unreadable_subfolder_stops_the_command(tmp_path):
    from evireform.documents import load_paths
    notes = tmp_path / "notes"
    _folder(notes)
    locked = notes / "locked"
    locked.mkdir()
    (locked / "x.txt").write_text("hidden")
    locked.chmod(0)
    try:
        with pytest.raises(ValueError, match="locked.*cannot be read"):
            load_paths([notes])
        assert load_paths([notes], skip_errors=True).errors
    finally:
        locked.chmod(0o755)


def test_an_unlistable_entry_stops_the_walk_unless_skip_errors(tmp_path, monkeypatch):
    """The same rule tested as root too: os.walk's errors reach the caller."""
    from evireform import documents
    notes = tmp_path / "notes"
    _folder(notes)
    real_walk = os.walk

    def walk(top, onerror=None, followlinks=False):
        onerror(PermissionError(13, "Permission denied", str(notes / "sub")))
        yield from real_walk(top, onerror=onerror, followlinks=followlinks)
    monkeypatch.setattr(documents.os, "walk", walk)
    with pytest.raises(ValueError, match="sub.*cannot be read.*--skip-errors"):
        documents.load_paths([notes])
    assert documents.load_paths([notes], skip_errors=True).errors


def test_one_long_token_is_cut_and_front_matter_is_metadata(tmp_path):
    from evireform.documents import chunk_text, load_paths
    chunks = chunk_text("x" * 200_000, 50, 0)
    assert len(chunks) > 100 and max(map(len, chunks)) <= 50 * 16
    assert "".join(chunks) == "x" * 200_000
    uri = "data:image/png;base64," + "QUJD" * 100_000
    assert len(chunk_text(f"see {uri} here.", 200, 0)) > 10
    f = tmp_path / "n.md"
    f.write_text("---\ntitle: Plans\nsecret_token: abc123\ntags: [a, b]\n---\n"
                 "# Heading\n\nthe plan is simple.\n")
    got = load_paths([f])
    p = got.passages[0]
    assert "secret_token" not in p.text and "abc123" not in p.text
    assert p.metadata["secret_token"] == "abc123" and p.metadata["tags"] == ["a", "b"]
    assert p.title == "Plans" and p.metadata["title"] == "Plans"


def test_markup_the_parser_asserts_on_is_one_line_naming_the_file(tmp_path):
    """Issue 69: html.parser raises AssertionError on a marked section ("<![ x"), in .html
    files and in Markdown HTML blocks: one ValueError naming the file, a skip under
    --skip-errors, never a traceback."""
    import pytest
    from evireform.documents import load_paths
    d = tmp_path / "docs"
    d.mkdir()
    (d / "bad.html").write_text("<html><body><p>fine</p><![ x</body></html>")
    (d / "bad.md").write_text("# T\n\n<div>\n<![ x\n</div>\n")
    (d / "good.md").write_text("# Good\n\nReadable text.")
    for name in ("bad.html", "bad.md"):
        with pytest.raises(ValueError, match=f"{name}: malformed HTML"):
            load_paths(d / name)
    got = load_paths(d, skip_errors=True)
    assert [p.metadata["source"] for p in got.passages] == ["docs/good.md"]
    assert sorted(f.rsplit("/", 1)[-1] for f, _ in got.errors) == ["bad.html", "bad.md"]


def test_an_encrypted_pdf_says_so(tmp_path):
    import pytest
    pypdf = pytest.importorskip("pypdf")
    from evireform.formats import read_document
    w = pypdf.PdfWriter()
    w.add_blank_page(width=200, height=200)
    w.encrypt("secret")
    f = tmp_path / "locked.pdf"
    with open(f, "wb") as fh:
        w.write(fh)
    with pytest.raises(ValueError, match="locked.pdf: the PDF is encrypted"):
        read_document(f)


def test_front_matter_is_bounded_and_the_same_everywhere():
    """Issues 68 and 69: YAML's safe loader, declared (a list is a list on every install);
    a recursive alias, a billion-laughs header, colliding keys and an oversized block are
    one ValueError naming the file, in bounded time and memory."""
    import pytest
    from evireform.formats import FRONT_MAX_BYTES, front_matter
    md, body = front_matter("---\ntitle: Ops\ntags: [build, farm]\n---\nBody.", "n.md")
    assert md == {"title": "Ops", "tags": ["build", "farm"]} and body == "Body."
    laughs = "---\na: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdefgh", "bcdefghi")) + "---\nBody."
    assert len(laughs) < 1000
    with pytest.raises(ValueError, match="n.md: .*more than .* values"):
        front_matter(laughs, "n.md")
    with pytest.raises(ValueError, match="n.md: .*alias to itself"):
        front_matter("---\na: &a [1, *a]\n---\nBody.", "n.md")
    with pytest.raises(ValueError, match="n.md: .*keys '1' collide"):
        front_matter("---\n1: one\n'1': uno\n---\nBody.", "n.md")
    with pytest.raises(ValueError, match="n.md: .*keys 'true' collide"):
        front_matter("---\ntrue: yes\n'true': no\n---\nBody.", "n.md")
    with pytest.raises(ValueError, match="n.md: the front matter is larger"):
        front_matter("---\nx: " + "y" * FRONT_MAX_BYTES + "\n---\nBody.", "n.md")


@pytest.mark.parametrize("swap", ["link", "fifo"])
def test_a_file_swapped_after_the_walk_is_not_read(tmp_path, monkeypatch, swap):
    """Issue 69: a file is checked where it is opened, not only when the folder is walked:
    b.md replaced by a link to a file outside the folder, or by a FIFO, between the walk
    and the read is refused (named, skipped under --skip-errors) without reading outside
    the folder or blocking."""
    import os
    from evireform import documents
    from evireform.documents import load_paths
    d = tmp_path / "notes"
    d.mkdir()
    (d / "a.md").write_text("# A\n\nAlpha text.")
    (d / "b.md").write_text("# B\n\nBeta text.")
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:the secret outside")
    walk = documents._walk

    def walk_then_swap(*a, **kw):
        yield from walk(*a, **kw)  # the walk checked b.md; now it changes
        (d / "b.md").unlink()
        if swap == "link":
            (d / "b.md").symlink_to(secret)
        else:
            os.mkfifo(d / "b.md")
    monkeypatch.setattr(documents, "_walk", walk_then_swap)
    got = load_paths(d, skip_errors=True)
    assert all("secret" not in p.text for p in got.passages)
    assert [p.metadata["source"] for p in got.passages] == ["notes/a.md"]
    assert got.skipped == {"notes/b.md"}
    why = "symbolic link" if swap == "link" else "not a regular file"
    assert any(why in msg for _, msg in got.errors)


@pytest.mark.parametrize("name", ["b.md", "b.txt", "b.jsonl"])
def test_a_folder_swapped_for_a_link_after_the_walk_is_not_followed(tmp_path, monkeypatch,
                                                                     name):
    """Issue 81 (round 7): sub/ replaced by a link to a folder outside the walked one, between
    the walk and the read: the file is opened from the walked folder one step at a time, no
    step following a link, so nothing outside is read (the document, text and corpus
    readers alike); named and skipped under --skip-errors."""
    import shutil
    from evireform import documents
    from evireform.documents import load_paths
    d = tmp_path / "notes"
    (d / "sub").mkdir(parents=True)
    (d / "a.md").write_text("# A\n\nAlpha text.")
    body = '{"id": "x", "title": "B", "text": "Beta text."}\n' if name.endswith(".jsonl") \
        else "# B\n\nBeta text."
    (d / "sub" / name).write_text(body)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / name).write_text(body.replace("Beta text.", "the secret outside"))
    walk = documents._walk

    def walk_then_swap(*a, **kw):
        yield from walk(*a, **kw)  # the walk saw sub/ as a folder; now it is a link
        if not (d / "sub").is_symlink():
            shutil.rmtree(d / "sub")
            (d / "sub").symlink_to(outside, target_is_directory=True)
    monkeypatch.setattr(documents, "_walk", walk_then_swap)
    got = load_paths(d, skip_errors=True)
    assert all("secret" not in p.text for p in got.passages)
    assert [p.metadata.get("source") for p in got.passages] == ["notes/a.md"]
    assert any("symbolic link" in msg and "sub" in msg for _, msg in got.errors), got.errors
    (d / "sub").unlink()  # the folder as the walk will see it, swapped again after
    (d / "sub").mkdir()
    (d / "sub" / name).write_text(body)
    with pytest.raises(ValueError, match="sub.*symbolic link"):
        load_paths(d)  # without --skip-errors: refused, naming the file


# ------------------------------------------------------------ round 6: what readers read
def test_a_pdf_glyph_mapped_to_a_lone_surrogate_is_one_replaced_character(tmp_path,
                                                                          monkeypatch):
    pypdf = pytest.importorskip("pypdf")
    from helpers import minimal_pdf
    from evireform.documents import load_paths
    f = tmp_path / "s.pdf"
    f.write_bytes(minimal_pdf([["placeholder"]]))
    monkeypatch.setattr(pypdf.PageObject, "extract_text",
                        lambda self, *a, **k: "Ligatures \ud835 break here.")
    (p,) = load_paths([f]).passages
    assert p.text == "Ligatures \ufffd break here."


def test_html_comments_byte_order_marks_and_charsets_read_as_a_browser_reads_them(tmp_path):
    from evireform.formats import read_document

    def text(name, data):
        f = tmp_path / name
        f.write_bytes(data)
        return [b.text for s in read_document(f).sections for b in s.blocks]
    # an unterminated comment runs to the end: not text
    assert text("c.html", b"<p>Kept.</p><!-- x x x" + b" x" * 5000) == ["Kept."]
    assert text("c2.html", b"<p>A</p><!-- closed --><p>B</p><!-- open") == ["A", "B"]
    # a byte-order mark is not the text's first character
    assert text("bom.html", "\ufeff<p>Caf\u00e9</p>".encode("utf-8")) == ["Caf\u00e9"]
    assert text("bom16.html", "<p>Caf\u00e9</p>".encode("utf-16")) == ["Caf\u00e9"]
    # a charset that does not keep ASCII as ASCII is not how the file is read
    for enc in ("cp037", "utf-16", "UTF-32"):
        assert text(f"{enc}.html", f'<meta charset="{enc}"><p>Plain words.</p>'.encode()) \
            == ["Plain words."], enc
    assert text("latin.html", '<meta charset="latin-1"><p>Caf\u00e9</p>'.encode("latin-1")) \
        == ["Caf\u00e9"]
    f = tmp_path / "bom.md"
    f.write_bytes("\ufeff---\ntitle: Kept\n---\nBody.".encode())
    assert read_document(f).title == "Kept"


def test_markdown_nested_past_the_parsers_limit_is_read_flat_not_dropped(tmp_path):
    from evireform.formats import read_document
    f = tmp_path / "deep.md"
    f.write_text("".join("  " * i + f"- level {i}\n" for i in range(120))
                 + "\n# Later\n\nLater text survives.\n")
    doc = read_document(f)
    text = [b.text for s in doc.sections for b in s.blocks]
    assert text[:120] == [f"\u2022 level {i}" for i in range(120)]  # each an item
    assert doc.sections[-1].path == ("Later",) and text[-1] == "Later text survives."


def test_a_huge_heading_or_meta_value_is_not_copied_into_every_chunk(tmp_path):
    """Titles, sections and metadata strings are capped: a 200 KB heading or meta
    description stays the file's text once, not a label on each of its chunks."""
    from evireform.documents import MAX_HEADING_CHARS, MAX_META_CHARS, load_paths
    big = "word " * 40_000
    (tmp_path / "h.md").write_text(f"## {big}\n\n" + "Body sentence here. " * 500)
    (tmp_path / "m.html").write_text(f'<meta name="description" content="{big}">'
                                     + "<p>Body sentence here.</p>" * 500)
    ps = load_paths([tmp_path], chunk_tokens=100, chunk_overlap=0).passages
    assert len(ps) > 20
    for p in ps:
        md = json.dumps(p.metadata)
        assert len(md) < MAX_META_CHARS + 2 * MAX_HEADING_CHARS + 1000, len(md)
        assert len(p.title) <= 300
    assert sum(len(p.text) for p in ps if p.metadata["source"].endswith("h.md")) >= len(big) - 10


def test_docx_content_in_nested_tables_and_content_controls_is_read(tmp_path):
    docx = pytest.importorskip("docx")
    from docx.oxml import parse_xml
    from evireform.formats import read_document
    d = docx.Document()
    d.add_heading("Inventory", level=1)
    t = d.add_table(rows=1, cols=2)
    t.cell(0, 0).text = "outer cell"
    inner = t.cell(0, 1).add_table(rows=1, cols=1)
    inner.cell(0, 0).text = "nested cell text"
    W = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
    d.element.body.insert(len(d.element.body) - 1, parse_xml(
        f'<w:sdt {W}><w:sdtPr/><w:sdtContent><w:p><w:r><w:t>Inside a content control.'
        '</w:t></w:r></w:p></w:sdtContent></w:sdt>'))
    f = tmp_path / "c.docx"
    d.save(str(f))
    doc = read_document(f)
    text = [b.text for s in doc.sections for b in s.blocks]
    assert any("outer cell" in x and "nested cell text" in x for x in text), text
    assert "Inside a content control." in text
    assert doc.sections[-1].path == ("Inventory",)


def test_docx_paragraph_count_is_capped(tmp_path, monkeypatch):
    docx = pytest.importorskip("docx")
    import evireform.formats as F
    d = docx.Document()
    for i in range(30):
        d.add_paragraph(f"p{i}")
    f = tmp_path / "many.docx"
    d.save(str(f))
    monkeypatch.setattr(F, "MAX_ITEMS", 10)
    with pytest.raises(ValueError, match=r"many.docx: more than 10 paragraphs"):
        F.read_document(f)


def test_a_pdf_drawing_more_than_its_budget_is_refused(tmp_path, monkeypatch):
    pytest.importorskip("pypdf")
    import evireform.formats as F
    from helpers import minimal_pdf
    f = tmp_path / "heavy.pdf"
    f.write_bytes(minimal_pdf([[f"line {i}" for i in range(40)]] * 3))
    assert len(F.read_document(f).sections) == 3
    monkeypatch.setattr(F, "MAX_PDF_CONTENT_BYTES", 1200)  # one page's worth, not three
    with pytest.raises(ValueError, match=r"heavy.pdf: its pages draw more than"):
        F.read_document(f)


def _shared_string_workbook(path, text: str, n_rows: int, n_cols: int) -> None:
    """An XLSX whose every cell names shared string 0, ``text`` (written by hand: openpyxl
    writes strings inline)."""
    import zipfile
    ns = "http://schemas.openxmlformats.org"
    rel = f"{ns}/officeDocument/2006/relationships"
    cols = [chr(ord("A") + c) for c in range(n_cols)]
    rows = "".join(f'<row r="{r}">' + "".join(f'<c r="{c}{r}" t="s"><v>0</v></c>'
                                              for c in cols) + "</row>"
                   for r in range(1, n_rows + 1))
    ct = "application/vnd.openxmlformats-officedocument.spreadsheetml"
    files = {
        "[Content_Types].xml":
            f'<?xml version="1.0"?><Types xmlns="{ns}/package/2006/content-types">'
            '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.'
            'relationships+xml"/><Default Extension="xml" ContentType="application/xml"/>'
            f'<Override PartName="/xl/workbook.xml" ContentType="{ct}.sheet.main+xml"/>'
            f'<Override PartName="/xl/worksheets/sheet1.xml" ContentType="{ct}.worksheet+xml"/>'
            f'<Override PartName="/xl/sharedStrings.xml" ContentType="{ct}.sharedStrings+xml"/>'
            '</Types>',
        "_rels/.rels": f'<?xml version="1.0"?><Relationships xmlns="{ns}/package/2006/'
                       f'relationships"><Relationship Id="rId1" Type="{rel}/officeDocument" '
                       'Target="xl/workbook.xml"/></Relationships>',
        "xl/workbook.xml": f'<?xml version="1.0"?><workbook xmlns="{ns}/spreadsheetml/2006/'
                           f'main" xmlns:r="{rel}"><sheets><sheet name="S" sheetId="1" '
                           'r:id="rId1"/></sheets></workbook>',
        "xl/_rels/workbook.xml.rels":
            f'<?xml version="1.0"?><Relationships xmlns="{ns}/package/2006/relationships">'
            f'<Relationship Id="rId1" Type="{rel}/worksheet" Target="worksheets/sheet1.xml"/>'
            f'<Relationship Id="rId2" Type="{rel}/sharedStrings" Target="sharedStrings.xml"/>'
            '</Relationships>',
        "xl/worksheets/sheet1.xml": f'<?xml version="1.0"?><worksheet xmlns="{ns}/'
                                    f'spreadsheetml/2006/main"><sheetData>{rows}</sheetData>'
                                    '</worksheet>',
        "xl/sharedStrings.xml": f'<?xml version="1.0"?><sst xmlns="{ns}/spreadsheetml/2006/'
                                f'main" count="1" uniqueCount="1"><si><t>{text}</t></si></sst>'}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, body in files.items():
            z.writestr(name, body)


def test_an_xlsx_whose_one_string_fills_many_cells_is_bounded(tmp_path):
    """Issue 81 (round 7): a small workbook whose one shared string fills many cells
    expands to far more text than any of its parts holds; the cells' text is bounded as a
    part is (ReadLimits.part_bytes), refused naming the file and the setting, instead of
    growing to gigabytes."""
    pytest.importorskip("openpyxl")
    from evireform.formats import ReadLimits, read_document, reading_limits
    f = tmp_path / "bomb.xlsx"
    _shared_string_workbook(f, "word " * 20_000, 20, 10)  # 100 KB string, 200 cells
    assert f.stat().st_size < 20_000  # stored once, compressed
    with reading_limits(ReadLimits(part_bytes=1 << 20)):
        with pytest.raises(ValueError, match=r"bomb.xlsx: its cells hold more than .*part="):
            read_document(f)
    with reading_limits(ReadLimits(part_bytes=64 << 20)):  # within the bound: read
        doc = read_document(f)
    assert sum(len(b.text) for s in doc.sections for b in s.blocks) >= 19_000_000


def test_every_reader_is_bounded_by_the_text_it_gives(tmp_path):
    """Issue 81 (build item 3): a decoded-text budget per document (ReadLimits.text_chars,
    ``--read-limit text=``) refuses a document whose reader gives more text than it allows,
    naming the file and the setting, whatever its bytes were (HTML's entities, Markdown);
    within the budget the same file reads."""
    import pytest
    from evireform.formats import ReadLimits, read_document, reading_limits
    html = tmp_path / "entities.html"
    html.write_text("<p>" + "&amp;" * 5000 + "</p>")  # 25 KB of bytes, 5,000 characters
    md = tmp_path / "notes.md"
    md.write_text("# Title\n\n" + "word " * 2000)
    for f, n in ((html, 5000), (md, 10_000)):
        with reading_limits(ReadLimits(text_chars=n // 2)):
            with pytest.raises(ValueError, match=rf"{f.name}: more than .* characters of "
                                                 rf"text .*--read-limit text="):
                read_document(f)
        with reading_limits(ReadLimits(text_chars=n * 2)):
            assert read_document(f).sections
    assert ReadLimits.parse(["text=1M"]).text_chars == 1 << 20
