"""Index updates: build(A) then add(B) then delete(C) equals build(A ∪ B \\ C)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from evireform import Passage, PropositionIndex
from evireform.embed import HashingEmbedder
from evireform.engine import structures_of, search_index
from helpers import search_one

EMB = HashingEmbedder(32)
NAMES = ["Alice Smith", "Paris", "Bob Stone", "France", "The Louvre", "Carol King", "Rome"]


def _passage(i, rng_words):
    a, b = rng_words
    return Passage(f"p{i}", NAMES[a], f"{NAMES[a]} met {NAMES[b]} in {1900 + i}. "
                                      f"{NAMES[b]} liked {NAMES[(a + b) % len(NAMES)]}.")


def equivalent(x: PropositionIndex, y: PropositionIndex):
    """Array for array, up to the numbering of entities (compared by name)."""
    assert x.passages == y.passages and x.prop_texts == y.prop_texts
    np.testing.assert_array_equal(x.owner, y.owner)
    np.testing.assert_array_equal(x.pmap.inv_sqrt, y.pmap.inv_sqrt)
    np.testing.assert_allclose(np.asarray(x.embeddings), np.asarray(y.embeddings), atol=1e-6)
    assert sorted(x.entity_names) == sorted(y.entity_names)
    rows = lambda idx: [frozenset(idx.entity_names[e] for e in
                                  idx.graph.a_indices[idx.graph.a_indptr[i]:idx.graph.a_indptr[i + 1]])
                        for i in range(idx.n_props)]
    assert rows(x) == rows(y)
    deg = lambda idx: dict(zip(idx.entity_names, np.diff(idx.graph.at_indptr)))
    assert deg(x) == deg(y)
    np.testing.assert_allclose(x.graph.diag, y.graph.diag, rtol=1e-12)
    np.testing.assert_allclose(x.graph.inv_w, y.graph.inv_w, rtol=1e-12)
    np.testing.assert_array_equal(x.graph.a_indptr, y.graph.a_indptr)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=0, max_size=12),
       st.data())
def test_add_then_delete_equals_a_fresh_build(words, data):
    ps = [_passage(i, w) for i, w in enumerate(words)]
    n_a = data.draw(st.integers(1 if ps else 0, len(ps)))
    A, B = ps[:n_a], ps[n_a:]
    if not A:
        return
    C = data.draw(st.lists(st.sampled_from([p.id for p in ps]), unique=True,
                           max_size=max(0, len(ps) - 1)))
    idx = PropositionIndex.build(A, EMB, show_progress=False)
    if B:
        idx = idx.add(B, EMB)
    if C:
        idx = idx.delete(C)
    want = PropositionIndex.build([p for p in ps if p.id not in set(C)], EMB,
                                  show_progress=False)
    equivalent(idx, want)


def test_add_keeps_entity_ids_of_a_fresh_build_and_the_old_index():
    ps = [_passage(i, (i % 7, (i * 3) % 7)) for i in range(9)]
    base = PropositionIndex.build(ps[:5], EMB, show_progress=False)
    before = base.graph.a_indices.copy()
    grown = base.add(ps[5:], EMB)
    fresh = PropositionIndex.build(ps, EMB, show_progress=False)
    from evireform.index import arrays_equal
    assert arrays_equal(grown, fresh)  # appending keeps a build's numbering exactly
    np.testing.assert_array_equal(base.graph.a_indices, before)  # the old index is untouched
    again = grown.add(ps[:1], EMB)  # the same passage again: a duplicate, skipped
    assert again.changes == {"added": [], "duplicates": ["p0"]} and arrays_equal(again, grown)
    with pytest.raises(ValueError, match="already in the index with other content"):
        grown.add([Passage("p0", "Other", "Other text about Zed.")], EMB)
    with pytest.raises(KeyError, match="unknown passage id"):
        grown.delete(["nope"])
    with pytest.raises(ValueError, match="differs"):
        grown.add([Passage("z", "Z", "Zed met Alice Smith.")], HashingEmbedder(16))


def test_upsert_and_hnsw(tmp_path):
    ps = [_passage(i, (i % 7, (i * 2) % 7)) for i in range(12)]
    idx = PropositionIndex.build(ps[:8], EMB, show_progress=False, hnsw=True)
    changed = Passage("p3", "Rome", "Rome met Carol King in 2000.")
    up = idx.upsert([changed] + ps[8:], EMB)
    assert up.passages[-5:] == [changed] + ps[8:]
    # p3 is marked deleted in the graph and added again: one item more than propositions
    assert structures_of(up).hnsw is not None and (structures_of(up).hnsw_ids >= 0).sum() == up.n_props
    assert structures_of(up).hnsw.get_current_count() == len(structures_of(up).hnsw_ids) > up.n_props
    q = EMB.encode(["Rome met Carol King"])[0]
    hi, _ = search_one(up, q, 5)
    ei, _ = search_one(up, q, 5, exact=True)
    assert hi[0] == ei[0]
    up.save(tmp_path / "ix")
    back = PropositionIndex.load(tmp_path / "ix")
    assert back.passages == up.passages


def test_cli_update(tmp_path):
    import json
    from evireform.cli import main
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": p.id, "title": p.title, "text": p.text}) + "\n"
                              for p in [_passage(i, (i % 7, (i + 3) % 7)) for i in range(6)]))
    assert main(["index", str(corpus), str(tmp_path / "ix"), "--embedder", "hashing-32",
                 "--quiet"]) == 0
    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps({"id": "n1", "title": "Rome", "text": "Rome met Paris."}) + "\n")
    ids = tmp_path / "del.txt"
    ids.write_text("p1\np2\n")
    assert main(["update", str(tmp_path / "ix"), "--add", str(more), "--delete", str(ids),
                 "--quiet"]) == 0
    idx = PropositionIndex.load(tmp_path / "ix")
    assert [p.id for p in idx.passages] == ["p0", "p3", "p4", "p5", "n1"]


def test_delete_marks_hnsw_items_and_keeps_the_old_index(tmp_path):
    ps = [_passage(i, (i % 7, (i * 5) % 7)) for i in range(30)]
    idx = PropositionIndex.build(ps, EMB, show_progress=False, hnsw=True)
    small = idx.delete([f"p{i}" for i in range(0, 30, 6)])  # 5 of 30: tombstones
    assert structures_of(small).hnsw_ids is not None and (structures_of(small).hnsw_ids >= 0).sum() == small.n_props
    grown = small.add([Passage("x1", "Rome", "Rome met Paris in 1999.")], EMB)
    Q = EMB.encode(["Carol King met Rome", "Alice Smith liked Paris", "Rome met Paris"])
    for index in (idx, small, grown):  # each serves its own propositions, HNSW = exact
        hi, _ = search_index(index, Q, 5)
        ei, _ = search_index(index, Q, 5, exact=True)
        np.testing.assert_array_equal(hi[:, 0], ei[:, 0])
        assert hi.max() < index.n_props
    grown.save(tmp_path / "ix")
    back = PropositionIndex.load(tmp_path / "ix")
    np.testing.assert_array_equal(structures_of(back).hnsw_ids, structures_of(grown).hnsw_ids)
    np.testing.assert_array_equal(search_index(back, Q, 5)[0], search_index(grown, Q, 5)[0])
    # a crafted label map is refused
    bad = structures_of(back).hnsw_ids.copy()
    bad[bad >= 0] = 0
    np.save(tmp_path / "ix" / "hnsw_ids.npy", bad)
    import json
    from evireform import IndexFormatError
    from evireform.store import file_sha256
    m = tmp_path / "ix" / "manifest.json"
    man = json.loads(m.read_text())
    f = tmp_path / "ix" / "hnsw_ids.npy"
    man["files"]["hnsw_ids.npy"] = {"sha256": file_sha256(f), "bytes": f.stat().st_size}
    m.write_text(json.dumps(man))
    with pytest.raises(IndexFormatError, match="hnsw_ids.npy: must map"):
        PropositionIndex.load(tmp_path / "ix")


def test_repeated_upserts_compact_hnsw_tombstones(tmp_path):
    """Past kernels.config.HNSW_MAX_DELETED_SHARE tombstones the graph is rebuilt over the
    live items, so ten upserts leave hnsw.bin at the size of a fresh build."""
    from evireform.kernels import config as kconfig
    ps = [_passage(i, (i % 7, (i * 5) % 7)) for i in range(40)]
    idx = PropositionIndex.build(ps, EMB, show_progress=False, hnsw=True)
    for r in range(10):
        revised = [Passage(p.id, p.title, f"{p.text} Revised {r}.")
                   for p in ps[(r * 4) % 40:(r * 4) % 40 + 4]]
        idx = idx.upsert(revised, EMB)
        assert idx.changes["replaced"] == [p.id for p in revised]
        share = 0 if structures_of(idx).hnsw_ids is None else float(np.mean(structures_of(idx).hnsw_ids < 0))
        assert share <= kconfig.HNSW_MAX_DELETED_SHARE
    idx.save(tmp_path / "after")
    # at most a quarter tombstones: within 1 / 0.75 of a fresh build of the same passages
    PropositionIndex.build(idx.passages, EMB, show_progress=False, hnsw=True).save(
        tmp_path / "same")
    size0 = (tmp_path / "same" / "hnsw.bin").stat().st_size
    assert (tmp_path / "after" / "hnsw.bin").stat().st_size <= 1.34 * size0
    Q = EMB.encode(["Carol King met Rome", "Alice Smith liked Paris"])
    # the same scores as exact search (ids may differ among tied, identical propositions)
    np.testing.assert_allclose(search_index(idx, Q, 5)[1], search_index(idx, Q, 5, exact=True)[1],
                               atol=1e-6)


def test_delete_where_removes_a_documents_passages_cli_and_service(tmp_path, monkeypatch,
                                                                   capsys):
    """Delete by document: ``update --delete-where '{"source": ...}'`` and /update's
    ``delete_where`` remove exactly the passages the filter matches; one that matches none is
    refused (exit 1 / 404) and changes nothing."""
    import asyncio
    import json
    import httpx
    from evireform.cli import main
    from evireform.service import RetrievalService, create_app
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes").mkdir()
    for name, body in (("a.md", "# Alpha\n\nAlpha Quist lives in Tessaly by the Vell."),
                       ("b.md", "# Beta\n\nBeta Orvel founded the Grey Sound society."),
                       ("c.txt", "Gamma Lind wrote about the Vell river.")):
        (tmp_path / "notes" / name).write_text(body)
    assert main(["index", "notes", "ix", "--embedder", "hashing-32", "--quiet"]) == 0
    sources = lambda: sorted({p.metadata["source"]  # noqa: E731
                              for p in PropositionIndex.load("ix").passages})
    assert sources() == ["notes/a.md", "notes/b.md", "notes/c.txt"]
    assert main(["update", "ix", "--delete-where", json.dumps({"source": "notes/a.md"}),
                 "--quiet"]) == 0
    assert sources() == ["notes/b.md", "notes/c.txt"]
    capsys.readouterr()
    assert main(["update", "ix", "--delete-where", json.dumps({"source": "notes/a.md"}),
                 "--quiet"]) == 2  # matches nothing now: refused, as an unknown id is
    assert "no passage matches" in capsys.readouterr().err
    assert sources() == ["notes/b.md", "notes/c.txt"]
    svc = RetrievalService(tmp_path / "ix", HashingEmbedder(32))

    async def run():
        await svc.start()
        try:
            transport = httpx.ASGITransport(app=create_app(svc))
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                none = await c.post("/update", json={"delete_where": {"source": "gone.md"}})
                ok = await c.post("/update", json={"delete_where": {"source": "notes/b.md"}})
                # issue 69: a clause matching every passage deletes nothing unless told
                every = await c.post("/update", json={"delete_where": {}})
                blank = await c.post("/update", json={"add": [{"text": " \t\n "}]})
                return none, ok, every, blank
        finally:
            await svc.stop()
    none, ok, every, blank = asyncio.run(run())
    assert blank.status_code == 422  # a passage of spaces only is refused
    assert none.status_code == 404 and "no passage matches" in none.json()["error"]
    assert ok.status_code == 200 and ok.json()["changes"]["deleted"] >= 1
    # 409 (the index's state refuses it), not 400: the body is schema-valid
    assert every.status_code == 409 and "matches every passage" in every.json()["error"]
    assert sources() == ["notes/c.txt"]
    capsys.readouterr()
    assert main(["update", "ix", "--delete-where", "{}", "--quiet"]) == 2
    assert "matches every passage" in capsys.readouterr().err and sources() == ["notes/c.txt"]
    assert main(["update", "ix", "--delete-where", "{}", "--all", "--quiet"]) == 0
    assert sources() == []


def test_a_skipped_file_keeps_its_passages(tmp_path, monkeypatch, capsys):
    """Issue 69: ``update --add notes/ --skip-errors`` after a file became unreadable (here:
    invalid UTF-8) skips it for this run and keeps what the index holds of it ("kept from
    the last read"); only a file gone from the folder loses its passages."""
    from evireform.cli import main
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.md").write_text("# Alpha\n\nAlpha Quist lives in Tessaly.")
    (tmp_path / "notes" / "b.md").write_text("# Beta\n\nBeta Orvel founded the Grey Sound.")
    (tmp_path / "notes" / "c.md").write_text("# Gamma\n\nGamma Lind wrote about the Vell.")
    assert main(["index", "notes", "ix", "--embedder", "hashing-32", "--quiet"]) == 0
    ids = lambda: sorted(p.id for p in PropositionIndex.load("ix").passages)  # noqa: E731
    before = ids()
    (tmp_path / "notes" / "b.md").write_bytes(b"# Beta\n\n\xff\xfe not UTF-8")
    (tmp_path / "notes" / "c.md").unlink()
    capsys.readouterr()
    assert main(["update", "ix", "--add", "notes", "--skip-errors"]) == 0
    out = capsys.readouterr()
    assert "b.md" in out.err and "kept from the last read 1" in out.out
    assert ids() == [i for i in before if not i.startswith("notes/c.md")]
    assert any(i.startswith("notes/b.md") for i in ids())
