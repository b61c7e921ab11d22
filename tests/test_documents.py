"""Documents in (text, Markdown, folders, chunking), Unicode sentences, the phrase
extractor for text that is not capitalised English, and metadata through the index."""
import json
import os
import subprocess
import sys

import pytest

from evireform import Passage, PropositionIndex
from evireform.documents import _regex_count, chunk_text, load_paths, replace_sources
from evireform.embed import HashingEmbedder
from evireform.text import sentences, tokens

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMB = HashingEmbedder(64)


def test_sentences_need_no_capitals_and_split_cjk():
    assert sentences("the cat sat. then it left! why? dr. who came.") == \
        ["the cat sat.", "then it left!", "why?", "dr. who came."]
    assert sentences("北京是中国的首都。上海是一个城市！你好") == \
        ["北京是中国的首都。", "上海是一个城市！", "你好"]
    assert sentences("# Title\nfirst line\n\nsecond para. more here") == \
        ["# Title", "first line", "second para.", "more here"]
    assert sentences("Die Stadt liegt am Rhein. z.B. Köln ist groß.") == \
        ["Die Stadt liegt am Rhein.", "z.B. Köln ist groß."]
    assert tokens("Köln's Dom, 北京") == ["köln's", "dom", "北", "京"]


@pytest.mark.parametrize("size,overlap", [(12, 0), (12, 5), (40, 10), (5, 2)])
def test_chunks_respect_the_token_budget_and_overlap(size, overlap):
    text = " ".join(f"sentence number {i} has a few words." for i in range(30)) + \
        " " + "word " * 60 + "."
    chunks = chunk_text(text, size, overlap)
    assert all(_regex_count([c])[0] <= size for c in chunks)
    # every sentence is in some chunk, in order
    joined = " ".join(chunks)
    assert all(f"number {i} " in joined for i in range(30))
    if overlap and size >= 12:
        firsts = [c.split(".")[0] for c in chunks[1:]]
        assert any(f in chunks[i] for i, f in enumerate(firsts))  # shared sentences
    assert chunk_text("", 10, 0) == []
    with pytest.raises(ValueError, match="chunk_overlap"):
        chunk_text("x", 10, 10)


def test_chunk_cjk_without_spaces():
    text = "北京是中国的首都" * 20 + "。"
    chunks = chunk_text(text, 16, 0)
    assert len(chunks) > 5 and all(_regex_count([c])[0] <= 16 for c in chunks)
    assert "".join(chunks) == text


def _notes(root):
    (root / "sub").mkdir(parents=True)
    (root / "a.md").write_text("# Alpha notes\n\nalice smith founded delta inc in paris. "
                               "delta inc makes engines.\n\nbob stone joined delta inc.\n",
                               encoding="utf-8")
    (root / "sub" / "b.txt").write_text("bob stone was born in lyon. lyon is in france.",
                                        encoding="utf-8")
    (root / "sub" / "draft.md").write_text("secret draft text.", encoding="utf-8")
    (root / ".hidden.md").write_text("hidden.", encoding="utf-8")
    (root / "c.json").write_text(json.dumps([{"id": "c1", "title": "Carl", "text": "carl met bob "
                                              "stone.", "year": 2001}]), encoding="utf-8")


def test_load_paths_folders_globs_ids_and_metadata(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _notes(tmp_path / "notes")
    got = load_paths(["notes"], chunk_tokens=12, chunk_overlap=0, exclude=["sub/draft*"])
    ids = [p.id for p in got.passages]
    assert ids[0] == "notes/a.md#0" and "c1" in ids
    assert not any("draft" in i or "hidden" in i for i in ids)
    a0 = got.passages[0]
    assert a0.title == "Alpha notes"
    # the opening heading is the title; the text under it has no section of its own
    assert a0.metadata == {"source": "notes/a.md", "chunk": 0, "title": "Alpha notes"}
    assert not a0.text.startswith("Alpha notes")
    assert next(p for p in got.passages if p.id == "c1").metadata == {"year": 2001}
    assert set(got.sources) == {"notes/a.md", "notes/sub/b.txt"}
    # the same file named alone has the same ids (given the roots the index knows)
    roots = sorted({e["root"] for e in got.files.values()})
    alone = load_paths(["notes/sub/b.txt"], chunk_tokens=12, chunk_overlap=0, roots=roots)
    assert [p.id for p in alone.passages] == [p.id for p in got.passages
                                             if p.metadata.get("source") == "notes/sub/b.txt"]
    only_md = load_paths(["notes"], include=["*.md"])
    assert {p.metadata["source"] for p in only_md.passages} == {"notes/a.md",
                                                               "notes/sub/draft.md"}


def test_unreadable_files_are_named_and_skipped_only_when_asked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _notes(tmp_path / "notes")
    (tmp_path / "notes" / "bad.txt").write_bytes(b"\xff\xfe\x00bad")
    (tmp_path / "notes" / "broken.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match="bad.txt.*not UTF-8.*--skip-errors"):
        load_paths(["notes"])
    got = load_paths(["notes"], skip_errors=True)
    assert sorted(os.path.basename(f) for f, _ in got.errors) == ["bad.txt", "broken.json"]
    assert got.passages
    with pytest.raises(ValueError, match="no such file"):
        load_paths(["nope"])


def test_replace_sources_touches_exactly_the_changed_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _notes(tmp_path / "notes")
    first = load_paths(["notes"], chunk_tokens=12, chunk_overlap=0)
    idx = PropositionIndex.build(first.passages, EMB, show_progress=False)
    (tmp_path / "notes" / "a.md").write_text("# Alpha notes\n\nalice smith founded delta inc "
                                             "in paris.\n", encoding="utf-8")
    again = load_paths(["notes/a.md"], chunk_tokens=12, chunk_overlap=0)
    out = replace_sources(idx, again, EMB)
    a_before = [p.id for p in idx.passages if p.metadata.get("source") == "notes/a.md"]
    a_after = [p.id for p in out.passages if p.metadata.get("source") == "notes/a.md"]
    assert a_after == ["notes/a.md#0"] and len(a_before) > 1
    assert set(out.changes["deleted"]) == set(a_before) - {"notes/a.md#0"}
    others = [p for p in idx.passages if p.metadata.get("source") != "notes/a.md"]
    assert [p for p in out.passages if p.metadata.get("source") != "notes/a.md"] == others


def _cli(*args, cwd):
    env = {**os.environ, "PYTHONPATH": REPO}
    return subprocess.run([sys.executable, "-m", "evireform", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_cli_index_a_folder_query_with_a_filter_and_update(tmp_path):
    _notes(tmp_path / "notes")
    r = _cli("index", "notes", "ix", "--embedder", "hashing-64", "--extractor", "phrases",
             "--chunk-tokens", "12", "--chunk-overlap", "0", "--quiet", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = _cli("query", "ix", "where was bob stone born?", "--json", "-k", "3",
             "--filter", '{"source": "notes/sub/b.txt"}', cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)["passages"]
    assert got and all(p["metadata"]["source"] == "notes/sub/b.txt" for p in got)
    r = _cli("query", "ix", "who?", "--filter", '{"sorce": "x"}', cwd=tmp_path)
    assert r.returncode != 0 and "sorce" in r.stderr and "Traceback" not in r.stderr
    (tmp_path / "notes" / "sub" / "b.txt").write_text("bob stone was born in lyon.",
                                                       encoding="utf-8")
    r = _cli("update", "ix", "--add", "notes", "--chunk-tokens", "12", "--chunk-overlap",
             "0", "--quiet", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "replaced 1" in r.stdout or "deleted" in r.stdout, r.stdout
    idx = PropositionIndex.load(tmp_path / "ix")
    assert idx.meta["extractor"] == "phrases-v4"
    b = [p.text for p in idx.passages if p.metadata.get("source") == "notes/sub/b.txt"]
    assert b == ["bob stone was born in lyon."]


def test_metadata_round_trips_and_old_indexes_load(tmp_path):
    ps = [Passage("a", "A", "Alice met Bob.", {"year": 2001, "tags": ["x"]}),
          Passage("b", "B", "Bob met Carl.")]
    idx = PropositionIndex.build(ps, EMB, show_progress=False)
    back = PropositionIndex.load(idx.save(tmp_path / "ix"))
    assert [p.metadata for p in back.passages] == [{"year": 2001, "tags": ["x"]}, {}]
    # indexes of the older formats load: version 2 (JSON texts) with their metadata,
    # version 1 (no metadata field) with empty metadata
    from helpers import as_old_format
    as_old_format(tmp_path / "ix", 2)
    old = PropositionIndex.load(tmp_path / "ix")
    assert [p.metadata for p in old.passages] == [{"year": 2001, "tags": ["x"]}, {}]
    assert old.verified == "full"
    as_old_format(tmp_path / "ix", 1)
    assert [p.metadata for p in PropositionIndex.load(tmp_path / "ix").passages] == [{}, {}]
    # a metadata change is an update: add() refuses the clash, upsert() replaces it
    with pytest.raises(ValueError, match="other content"):
        back.add([Passage("a", "A", "Alice met Bob.", {"year": 2002})], EMB)
    up = back.upsert([Passage("a", "A", "Alice met Bob.", {"year": 2002})], EMB)
    assert up.changes["replaced"] == ["a"]
    with pytest.raises(ValueError, match="plain JSON"):
        PropositionIndex.build([{"text": "x", "when": object()}], EMB, show_progress=False)


def test_token_counter_uses_the_models_tokenizer_unpadded():
    pytest.importorskip("tokenizers")
    from evireform.documents import token_counter
    from evireform.embed import MiniLMEmbedder
    count = token_counter(MiniLMEmbedder())
    n_short, n_long = count(["a cat.", "the quick brown fox jumps over the lazy dog."])
    assert 1 <= n_short <= 4 and n_short < n_long <= 15  # no padding to a fixed length
    text = " ".join(f"Sentence {i} is short." for i in range(80))
    chunks = chunk_text(text, 50, 0, count=count)
    assert 5 <= len(chunks) <= 12 and all(count([c])[0] <= 50 for c in chunks)


def test_a_folders_files_no_reader_takes_are_named(tmp_path):
    """Issue 68: files of a folder that no reader takes are named in one summary line
    (by suffix), never skipped silently; the known formats are read."""
    from evireform.documents import load_paths
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.md").write_text("# A\n\nAlpha text.")
    (tmp_path / "notes" / "deck.key").write_bytes(b"PK\x03\x04")
    (tmp_path / "notes" / "deck2.key").write_bytes(b"PK\x03\x04")
    (tmp_path / "notes" / "blob.bin").write_bytes(b"\x00\x01")
    got = load_paths(tmp_path / "notes")
    assert [p.metadata["source"] for p in got.passages] == ["notes/a.md"]
    assert got.unread == {".key": 2, ".bin": 1}
    line = [w for w in got.warnings if w.startswith("skipped")]
    assert line == ["skipped 3 files: 2 .key (no reader yet; convert to PDF, HTML or text), "
                    "1 .bin (no reader): blob.bin, deck.key, deck2.key; --include names "
                    "files to read as text"]
    # a pattern of the user's own says what to read: nothing else is reported
    assert load_paths(tmp_path / "notes", include=["*.md"]).unread == {}


def test_text_files_whose_names_say_no_type_are_read_by_their_bytes(tmp_path):
    """Issue 82, item 3: a folder's README, README.Debian or NEWS (no suffix, or a last
    dot-part that is a name, not a type) is read as text when its first bytes are UTF-8
    text; binary ones, and typed suffixes no reader takes (.js, .svg), are named in the
    warning (the first five, then how many more)."""
    from evireform.documents import load_paths
    d = tmp_path / "pkg"
    d.mkdir()
    (d / "README").write_text("The build farm is run by Orla Quist.\n")
    (d / "README.Debian").write_text("On Debian the service starts at boot.\n")
    (d / "changelog.source").write_text("Version 2 drops the old parser.\n")
    (d / "BLOB").write_bytes(b"\x00\x01binary")
    (d / "Latin").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    (d / "app.js").write_text("console.log('x');\n")
    for i in range(6):
        (d / f"pic{i}.png").write_bytes(b"\x89PNG\r\n")
    got = load_paths(d)
    assert sorted(got.sources) == ["pkg/README", "pkg/README.Debian", "pkg/changelog.source"]
    text = " ".join(p.text for p in got.passages)
    assert "Orla Quist" in text and "starts at boot" in text
    assert got.unread == {"(no suffix)": 2, ".js": 1, ".png": 6}
    (line,) = [w for w in got.warnings if w.startswith("skipped")]
    assert ": BLOB, Latin, app.js, pic0.png, pic1.png and 4 more;" in line, line
    # a file named on the command line is read the same way
    assert load_paths(d / "README.Debian").sources == {"pkg/README.Debian": 1} or \
        list(load_paths(d / "README.Debian").sources.values()) == [1]


def test_compressed_text_is_read_as_the_file_inside(tmp_path):
    """Issue 82, item 3: a folder holding README, README.Debian, NEWS.gz and
    changelog.Debian.gz indexes all four (.gz, .bz2 and .xz inflated, the file inside read
    as its name says: text, or a document by its reader); a compressed binary or archive is
    skipped and named; a file inflating past the document budget is refused naming it."""
    import bz2
    import gzip
    import io
    import lzma
    import tarfile
    from evireform.documents import load_paths
    from evireform.formats import ReadLimits
    d = tmp_path / "pkg"
    d.mkdir()
    (d / "README").write_text("The build farm is run by Orla Quist.\n")
    (d / "README.Debian").write_text("On Debian the service starts at boot.\n")
    (d / "NEWS.gz").write_bytes(gzip.compress(b"Version 3 adds the Ilm importer.\n"))
    (d / "changelog.Debian.gz").write_bytes(
        gzip.compress(b"pkg (1.2-1) unstable; urgency=low\n\n  * Fixes the Brook crash.\n")
        + gzip.compress(b"  * A second gzip member: the Tarn patch.\n"))
    (d / "guide.md.bz2").write_bytes(bz2.compress(
        b"# Guide\n\n## Install\n\nRun the Quorn installer.\n"))
    (d / "TODO.xz").write_bytes(lzma.compress(b"Port the Vell module.\n"))
    (d / "data.bin.gz").write_bytes(gzip.compress(b"\x00\x01\x02binary"))
    (d / "BLOBS.gz").write_bytes(gzip.compress(b"\x00\x01\x02binary"))
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w:gz") as t:
        info = tarfile.TarInfo("a.txt")
        info.size = 3
        t.addfile(info, io.BytesIO(b"abc"))
    (d / "src.tar.gz").write_bytes(tar.getvalue())
    (d / "broken.gz").write_bytes(b"not gzip at all")
    got = load_paths(d)
    assert sorted(got.sources) == ["pkg/NEWS.gz", "pkg/README", "pkg/README.Debian",
                                   "pkg/TODO.xz", "pkg/changelog.Debian.gz",
                                   "pkg/guide.md.bz2"]
    text = " ".join(p.text for p in got.passages)
    for said in ("Orla Quist", "starts at boot", "Ilm importer", "Brook crash", "Tarn patch",
                 "Quorn installer", "Vell module"):
        assert said in text, said
    titles = {p.metadata["source"]: p.title for p in got.passages}
    assert titles["pkg/NEWS.gz"] == "NEWS" and titles["pkg/guide.md.bz2"] == "Guide"
    assert [p.metadata.get("section") for p in got.passages
            if p.metadata["source"] == "pkg/guide.md.bz2"] == ["Install"]
    assert got.unread == {".gz": 4}
    (line,) = [w for w in got.warnings if w.startswith("skipped")]
    assert "BLOBS.gz" in line and "src.tar.gz" in line and "data.bin.gz" in line
    # named on the command line: read as in a folder; a bomb past the budget is refused
    assert list(load_paths(d / "NEWS.gz").sources.values()) == [1]
    (d / "big.txt.gz").write_bytes(gzip.compress(b"word " * 300_000))
    with pytest.raises(ValueError, match="big.txt.gz: holds more than the 100,000 bytes"):
        load_paths(d / "big.txt.gz", limits=ReadLimits(document_bytes=100_000))
    with pytest.raises(ValueError, match="broken.gz: not a valid .gz file"):
        load_paths(d / "broken.gz")


def test_what_a_documents_chunks_share_is_stored_once(tmp_path):
    """Issue 69: a file's front matter, source and title are held once in the saved index
    (format version 4), not once per chunk; every passage's metadata reads back byte for
    byte as written whole, through a load, an add, a delete and a full verification; a
    version-3 index (no shared part) still loads; a code outside the shared strings is
    refused."""
    from evireform.store import IndexFormatError, load_index
    from evireform.strings import column
    mark = "Frontmatter-" + "q" * 1500

    def chunks(folder, front, parts, tool):
        """The passages of a Markdown file with front matter ``front`` and ``parts``
        sections (a chunk each)."""
        (tmp_path / folder).mkdir()
        (tmp_path / folder / f"{tool}.md").write_text(
            f"---\n{front}\n---\n" + "".join(
                f"## Part {i}\n\nThe {tool} tool reads part {i} of its settings file.\n\n"
                for i in range(parts)), encoding="utf-8")
        return load_paths(tmp_path / folder, chunk_tokens=20, chunk_overlap=0).passages
    ps = chunks("docs", f"title: Alpha manual\ndescription: {mark}", 12, "alpha")
    assert len(ps) >= 12 and all(p.metadata["description"] == mark for p in ps)
    idx = PropositionIndex.build(ps, EMB, show_progress=False)
    d = idx.save(tmp_path / "ix")
    assert (d / "strings.utf8").read_bytes().count(mark.encode()) == 1
    assert json.loads((d / "manifest.json").read_text())["counts"]["shared_metadata"] == 1
    back = PropositionIndex.load(d, verify="full")
    assert [p.metadata for p in back.passages] == [p.metadata for p in ps]
    whole = [json.dumps(p.metadata, ensure_ascii=False, separators=(",", ":")) for p in ps]
    assert list(column(back.passages, "metadata")) == whole  # byte for byte, key order kept
    # an add of another file and a delete of a chunk: each document's part still once
    new = chunks("more", f"description: {mark[::-1]}", 6, "beta")
    grown = back.add(new, EMB).delete([ps[3].id])
    d2 = grown.save(tmp_path / "ix2")
    blob = (d2 / "strings.utf8").read_bytes()
    assert blob.count(mark.encode()) == 1 and blob.count(mark[::-1].encode()) == 1
    again = PropositionIndex.load(d2, verify="full")
    want = [p for p in ps if p.id != ps[3].id] + list(new)
    assert [p.metadata for p in again.passages] == [p.metadata for p in want]
    # only one document left of the first file's: its part is dropped with it
    solo = again.delete([p.id for p in ps if p.id != ps[3].id])
    assert (solo.save(tmp_path / "ix3") / "strings.utf8").read_bytes().count(
        mark.encode()) == 0
    # a version-3 index (written before shared parts) loads as before
    plain = PropositionIndex.build([Passage("p", "t", "x y z.", {"k": 1})], EMB,
                                   show_progress=False)
    d3 = plain.save(tmp_path / "v3")
    (d3 / "metadata_shared.npy").unlink()
    (d3 / "verified.json").unlink()
    man = json.loads((d3 / "manifest.json").read_text())
    man["format_version"] = 3
    del man["files"]["metadata_shared.npy"], man["counts"]["shared_metadata"]
    (d3 / "manifest.json").write_text(json.dumps(man))
    assert PropositionIndex.load(d3, verify="full").passages[0].metadata == {"k": 1}
    # two runs of one file's chunks (another file's between them) share one part
    from evireform.strings import split_metadata
    objs = [json.dumps(m, separators=(",", ":")) for m in (
        {"source": "a", "t": 1, "chunk": 0}, {"source": "a", "t": 1, "chunk": 1},
        {"source": "b", "chunk": 0}, {"source": "a", "t": 1, "chunk": 2},
        {"source": "a", "t": 1, "chunk": 3})]
    split = split_metadata(objs)
    assert split.codes.tolist() == [0, 0, -1, 0, 0] and list(split.shared) == [
        '{"source":"a","t":1}'] and list(split) == objs
    # a code outside the shared strings is refused, naming the file
    import numpy as np
    codes = np.load(d / "metadata_shared.npy")
    codes[0] = 5
    np.save(d / "metadata_shared.npy", codes)
    with pytest.raises(IndexFormatError, match="metadata_shared.npy"):
        load_index(d, verify="fast")


def test_metadata_values_decode_only_what_names_the_key(tmp_path, monkeypatch):
    """Issue 69: finding the namespaces (or sources) of an index's passages decodes each
    document's shared part once and a passage's own metadata only when it names the key,
    through saved tables, adds (Concat) and deletes (Take); the values equal the decoded
    metadata's."""
    import evireform.strings as S
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text(
        "---\nnamespace: team-a\n---\n" + "".join(
            f"## Part {i}\n\nThe alpha tool reads part {i} of its file.\n\n" for i in range(8)),
        encoding="utf-8")
    ps = load_paths(tmp_path / "docs", chunk_tokens=20, chunk_overlap=0).passages
    plain = [Passage(f"p{i}", "t", f"plain text {i}.", md) for i, md in
             enumerate([{"namespace": "team-b"}, {}, {"k": 1}, {"namespace": ["x"]}])]
    idx = PropositionIndex.build(ps + plain, EMB, show_progress=False)
    back = PropositionIndex.load(idx.save(tmp_path / "ix"))
    views = [back.passages, S.Concat(back.passages, [Passage("n", "t", "new.", {"namespace": 2})]),
             S.Take(back.passages, [len(ps), 2, 0]), ps + plain]
    for view in views:
        mds = list(S.metadata_of(view))
        for key in ("namespace", "source", "chunk", "title", "absent"):
            got = S.metadata_values(view, key)
            assert len(got) == len(mds)
            assert all((g is S.MISSING) if key not in m else g == m[key]
                       for g, m in zip(got, mds)), (view, key)
    real, calls = json.loads, []
    monkeypatch.setattr(json, "loads", lambda s, *a, **k: (calls.append(s), real(s, *a, **k))[1])
    ns = S.metadata_values(back.passages, "namespace")
    assert ns[:len(ps)] == ["team-a"] * len(ps) and ns[len(ps)] == "team-b"
    # one shared part, and the two own parts that name the key: nothing else decoded
    assert len(calls) == 3, calls
