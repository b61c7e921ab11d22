"""Index construction, search, persistence and bad input."""

import json
import threading

import numpy as np
import pytest
from helpers import search_one, unit_rows

import evireform
import evireform.store
from evireform import IndexFormatError, Passage, Proposition, PropositionIndex
from evireform.embed import HashingEmbedder
from evireform.engine import structures_of
from evireform.index import arrays_equal

EMB = HashingEmbedder(32)


def tiny_index(rng, with_empty=True):
    passages = [Passage("a", "Alice", "x"), Passage("b", "Paris", "y"), Passage("c", "Bob", "z")]
    props = [Proposition("Alice lives in Paris", "a", ("Alice", "Paris")),
             Proposition("Alice is a painter", "a", ("alice",)),
             Proposition("Paris is in France", "b", ("PARIS", "France.")),
             Proposition("an isolated fact", "b", ())]
    if with_empty:
        passages.append(Passage("d", "Empty", "no propositions"))
    return PropositionIndex.from_propositions(passages, props, unit_rows(rng, 4, 8), "test-8")


class _WideEmbedder:
    """Says dimension 8 and returns rows of 16: two rows' worth per text."""
    name, dim = "wide-8", 8

    def encode(self, texts, **kw):
        return np.ones((len(texts), 16), np.float32)


def test_from_propositions_structure(rng):
    idx = tiny_index(rng)
    assert idx.entity_names == ["alice", "paris", "france"]  # folded, merged
    np.testing.assert_array_equal(idx.graph.a_indptr, [0, 2, 3, 5, 5])
    np.testing.assert_array_equal(idx.graph.a_indices, [0, 1, 0, 1, 2])
    np.testing.assert_array_equal(idx.owner, [0, 0, 1, 1])
    np.testing.assert_allclose(idx.pmap.inv_sqrt, [2 ** -.5, 2 ** -.5, 0, 0])
    np.testing.assert_allclose(np.linalg.norm(idx.embeddings, axis=1), 1, rtol=1e-6)
    assert idx.passage_index("c") == 2
    with pytest.raises(KeyError, match="unknown passage id 'zz'"):
        idx.passage_index("zz")
    st = idx.stats()
    assert st["incidence_nnz"] == 5 and st["passages_without_propositions"] == 2
    assert st["isolated_propositions"] == 1 and st["w_nnz_if_materialised"] == 4


def test_bad_input(rng):
    ps = [Passage("a", "A", "t")]
    pr = [Proposition("p", "a", ("x",))]
    with pytest.raises(ValueError, match="passages is empty"):
        PropositionIndex.from_propositions([], [], np.zeros((0, 4)), "e")
    with pytest.raises(ValueError, match="passages is empty"):
        PropositionIndex.build([], EMB)
    with pytest.raises(ValueError, match="unknown passage id 'zz'"):
        PropositionIndex.from_propositions(ps, [Proposition("p", "zz")], unit_rows(rng, 1, 4), "e")
    with pytest.raises(ValueError, match="NaN or inf"):
        PropositionIndex.from_propositions(ps, pr, np.array([[np.nan, 1.0]]), "e")
    with pytest.raises(ValueError, match=r"shape \(1, dim\)"):
        PropositionIndex.from_propositions(ps, pr, unit_rows(rng, 2, 4), "e")
    with pytest.raises(ValueError, match="all-zero row"):
        PropositionIndex.from_propositions(ps, pr, np.zeros((1, 4)), "e")
    with pytest.raises(ValueError, match="duplicate passage id"):
        PropositionIndex.from_propositions(ps + ps, pr, unit_rows(rng, 1, 4), "e")
    # not normalised: normalised (documented)
    idx = PropositionIndex.from_propositions(ps, pr, np.array([[3.0, 4.0]]), "e")
    np.testing.assert_allclose(idx.embeddings, [[0.6, 0.8]], rtol=1e-6)


def test_save_load_roundtrip(tmp_path, rng):
    idx = tiny_index(rng)
    idx.save(tmp_path / "ix")
    back = PropositionIndex.load(tmp_path / "ix")
    assert arrays_equal(idx, back)
    assert isinstance(back.embeddings, np.memmap)
    assert not list(tmp_path.glob(".ix.*"))  # no temporary leftovers
    # saving over an existing index replaces it atomically
    idx2 = tiny_index(rng, with_empty=False)
    idx2.save(tmp_path / "ix")
    assert PropositionIndex.load(tmp_path / "ix").n_passages == 3
    # the per-index lock file (.ix-lock) stays beside it; nothing else
    assert sorted(p.name for p in tmp_path.iterdir()) == [".ix-lock", "ix"]


@pytest.mark.parametrize("victim", ["embeddings.npy", "a_indices.npy", "strings.utf8",
                                    "string_offsets.npy"])
def test_truncated_or_edited_file_is_refused(tmp_path, rng, victim):
    tiny_index(rng).save(tmp_path / "ix")
    f = tmp_path / "ix" / victim
    data = f.read_bytes()
    f.write_bytes(data[:-3])  # truncated
    with pytest.raises(IndexFormatError, match=f"{victim}.*truncated or edited"):
        PropositionIndex.load(tmp_path / "ix")
    edited = bytearray(data)
    edited[-1] ^= 0xFF  # same size, one byte changed
    f.write_bytes(bytes(edited))
    with pytest.raises(IndexFormatError, match=f"{victim}.*sha256"):
        PropositionIndex.load(tmp_path / "ix")
    f.unlink()
    with pytest.raises(IndexFormatError, match=f"{victim}: missing"):
        PropositionIndex.load(tmp_path / "ix")


def test_manifest_problems_are_refused(tmp_path, rng):
    tiny_index(rng).save(tmp_path / "ix")
    m = tmp_path / "ix" / "manifest.json"
    man = json.loads(m.read_text())
    man["format_version"] = 99
    m.write_text(json.dumps(man))
    with pytest.raises(IndexFormatError, match="format version 99"):
        PropositionIndex.load(tmp_path / "ix")
    m.write_text("{not json")
    with pytest.raises(IndexFormatError, match="manifest.json: not valid JSON"):
        PropositionIndex.load(tmp_path / "ix")
    m.unlink()
    with pytest.raises(IndexFormatError, match="manifest.json: missing"):
        PropositionIndex.load(tmp_path / "ix")


def test_corrupt_hnsw_refused_before_hnswlib(tmp_path, rng):
    ps = [Passage(str(i), "t", "x") for i in range(50)]
    pr = [Proposition(f"p{i}", str(i)) for i in range(50)]
    idx = PropositionIndex.from_propositions(ps, pr, unit_rows(rng, 50, 8), "e", hnsw=True)
    idx.save(tmp_path / "ix")
    assert structures_of(PropositionIndex.load(tmp_path / "ix")).hnsw is not None
    f = tmp_path / "ix" / "hnsw.bin"
    f.write_bytes(f.read_bytes()[:100])
    with pytest.raises(IndexFormatError, match="hnsw.bin.*truncated"):
        PropositionIndex.load(tmp_path / "ix")


def test_interrupted_save_leaves_old_index(tmp_path, rng, monkeypatch):
    idx = tiny_index(rng)
    idx.save(tmp_path / "ix")
    before = (tmp_path / "ix" / "manifest.json").read_bytes()

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(evireform.store.format, "_write_json", boom)
    with pytest.raises(KeyboardInterrupt):
        tiny_index(rng, with_empty=False).save(tmp_path / "ix")
    assert (tmp_path / "ix" / "manifest.json").read_bytes() == before
    # the per-index lock file (.ix-lock) stays beside it; nothing else
    assert sorted(p.name for p in tmp_path.iterdir()) == [".ix-lock", "ix"]
    PropositionIndex.load(tmp_path / "ix")
    # an interrupted first save leaves nothing loadable at the target
    with pytest.raises(KeyboardInterrupt):
        idx.save(tmp_path / "new")
    assert not (tmp_path / "new").exists()


def test_concurrent_searches(rng):
    idx = tiny_index(rng)
    Q = unit_rows(rng, 64, 8)
    want = [search_one(idx, q, 3) for q in Q]
    got = [None] * len(Q)

    def work(lo):
        for i in range(lo, len(Q), 4):
            got[i] = search_one(idx, Q[i], 3)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    for (a, b), (c, d) in zip(want, got):
        np.testing.assert_array_equal(a, c)


def test_propositions_of_matches_the_owner_map(rng):
    from evireform import Passage, Proposition, PropositionIndex
    ps = [Passage(f"p{j}", "", "t") for j in range(7)]
    owners = rng.integers(0, 5, 40)  # passages 5 and 6 have no propositions
    props = [Proposition(f"x{i}", f"p{o}", ()) for i, o in enumerate(owners)]
    idx = PropositionIndex.from_propositions(ps, props, rng.standard_normal((40, 4)), "x")
    for j in range(7):
        np.testing.assert_array_equal(idx.propositions_of(j), np.flatnonzero(idx.owner == j))


def test_verification_tiers_and_the_stamp(tmp_path, rng):
    import os
    import shutil
    idx = tiny_index(rng)
    idx.save(tmp_path / "ix")
    assert PropositionIndex.load(tmp_path / "ix").verified == "fast"  # the save stamped it
    shutil.copytree(tmp_path / "ix", tmp_path / "copy")  # new inodes: verified in full
    assert PropositionIndex.load(tmp_path / "copy").verified == "full"
    assert PropositionIndex.load(tmp_path / "copy").verified == "fast"  # and stamped
    assert PropositionIndex.load(tmp_path / "copy", verify="full").verified == "full"
    # an edit that keeps the size and puts the mtime back is still seen (edge digest)
    f = tmp_path / "copy" / "inv_deg.npy"
    st = os.stat(f)
    data = bytearray(f.read_bytes())
    data[-1] ^= 0x01
    f.write_bytes(bytes(data))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(IndexFormatError, match="inv_deg.npy: sha256"):
        PropositionIndex.load(tmp_path / "copy")
    # a stamp that names other files, or no stamp, means full verification
    (tmp_path / "ix" / "verified.json").write_text('{"files": {}}')
    assert PropositionIndex.load(tmp_path / "ix").verified == "full"
    (tmp_path / "ix" / "verified.json").unlink()
    assert PropositionIndex.load(tmp_path / "ix").verified == "full"
    with pytest.raises(ValueError, match="verify must be one of"):
        PropositionIndex.load(tmp_path / "ix", verify="maybe")
    # a stamp that cannot be written is not an error (write_stamp says False)
    from evireform.store import write_stamp
    assert write_stamp(tmp_path / "no-such-dir", ["x.npy"], "full") is False


def test_evireform_verify_command(tmp_path, rng, capsys):
    import shutil

    from evireform.cli import main
    tiny_index(rng).save(tmp_path / "ix")
    shutil.copytree(tmp_path / "ix", tmp_path / "copy")
    assert main(["verify", str(tmp_path / "copy")]) == 0
    assert "stamped" in capsys.readouterr().out
    assert PropositionIndex.load(tmp_path / "copy").verified == "fast"
    f = tmp_path / "copy" / "embeddings.npy"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x40  # in the middle, same size: only a checksum sees it
    f.write_bytes(bytes(data))
    assert main(["verify", str(tmp_path / "copy")]) == 2
    assert "embeddings.npy: sha256" in capsys.readouterr().err


def test_a_build_refuses_embeddings_of_another_width_instead_of_reshaping_them():
    from evireform.build import EmbeddingShapeError
    with pytest.raises(EmbeddingShapeError, match=r"shape \(2, 16\).*expected \(2, 8\)"):
        PropositionIndex.build(["Alpha Beta met Gamma Delta.", "Gamma Delta met Epsilon."],
                               _WideEmbedder(), show_progress=False)


def test_add_and_openie_use_the_build_steps(tmp_path):
    """An index grown by add() equals the one built from all passages at once; an OpenIE
    build numbers each passage's triples in file order."""
    from evireform.build import proposition_batch
    from evireform.types import Proposition
    emb = HashingEmbedder(32)
    recs = [{"id": f"p{i}", "title": f"T{i}", "text": f"Anna Berg {i} met Carl Dahl {i % 3}."}
            for i in range(6)]
    whole = PropositionIndex.build(recs, emb, show_progress=False)
    grown = PropositionIndex.build(recs[:4], emb, show_progress=False).add(recs[4:], emb)
    assert list(grown.prop_texts) == list(whole.prop_texts)
    assert np.array_equal(np.asarray(grown.embeddings), np.asarray(whole.embeddings))
    assert list(grown.entity_names) == list(whole.entity_names)
    ps = [Passage("a", "", "x"), Passage("b", "", "y")]
    b = proposition_batch([Proposition("b1", "b", ("B",)), Proposition("a1", "a", ()),
                           Proposition("b2", "b", ("B", "C"))], ps)
    assert b["pos"].tolist() == [1, 0, 1] and b["ord"].tolist() == [0, 0, 1]
    with pytest.raises(ValueError, match="unknown passage id 'z'"):
        proposition_batch([Proposition("z", "z", ())], ps)


def test_same_text_groups_passages_by_their_texts_bytes(tmp_path, monkeypatch):
    """Issue 68: passages repeating another's text byte for byte (a licence paragraph in two
    READMEs) form a group named by its first position; loaded, added to and deleted from,
    the groups follow the passages; a digest collision never joins two different texts."""
    import hashlib
    from evireform.strings import first_equal
    same = "OpenSSH is a derivative of the original ssh by Tatu Ylonen."
    ps = [Passage("a", "ssh", same), Passage("b", "scp", "scp copies files."),
          Passage("c", "ssh-add", same), Passage("d", "é", "é"), Passage("e", "x", "é")]
    idx = PropositionIndex.build(ps, EMB, show_progress=False)
    assert idx.same_text.tolist() == [0, 1, 0, 3, 3] and idx.n_same_text == 2
    assert idx.same_text_group(0) == [0, 2] and idx.same_text_group(1) == [1]
    assert idx.same_text_groups == {0: [0, 2], 3: [3, 4]}  # texts held once are not in it
    back = PropositionIndex.load(idx.save(tmp_path / "ix"))  # from the blob's bytes
    assert back.same_text.tolist() == [0, 1, 0, 3, 3]
    grown = back.add([Passage("f", "ssh-agent", same)], EMB)  # a Concat of tables
    assert grown.same_text.tolist() == [0, 1, 0, 3, 3, 0]
    less = grown.delete(["a"])  # a Take: the group is named by its new first member
    assert less.same_text.tolist() == [0, 1, 2, 2, 1] and less.same_text_group(1) == [1, 4]
    # every digest alike: the bytes still keep different texts apart
    class Constant:
        def __init__(self, data, digest_size):
            pass

        def digest(self):
            return b"\0" * 8
    monkeypatch.setattr(hashlib, "blake2b", Constant)
    assert first_equal(["x", "y", "x", "z", "z"]).tolist() == [0, 1, 0, 3, 3]
    # a blank text is no copy: passages without text stay apart (a titles-only corpus)
    assert first_equal(["", " \n", "", "x", "x"]).tolist() == [0, 1, 2, 3, 3]


def _texts(n, tag="p"):
    return [Passage(f"{tag}{i}", f"Town {tag}{i}", f"Town {tag}{i} lies on the river Ilm{i % 7}. "
                    f"Its mayor is Ada Brook{i}.") for i in range(n)]


def test_an_add_saves_the_loaded_rows_by_a_kernel_copy(tmp_path, monkeypatch):
    """An index made by add() from a loaded one saves its embeddings file as np.save
    would, byte for byte, the parent's rows copied from the parent's file by the kernel
    (os.copy_file_range: an update's save is as large as its add), only while that file is
    still the one mapped (issue 84: a 50k-passage update wrote its 300 MB again)."""
    import os
    from evireform.store import format as F
    calls = []
    real = os.copy_file_range

    def counted(*a, **k):
        calls.append(a[2])
        return real(*a, **k)
    monkeypatch.setattr(os, "copy_file_range", counted)
    PropositionIndex.build(_texts(40), EMB, show_progress=False).save(tmp_path / "ix")
    loaded = PropositionIndex.load(tmp_path / "ix")
    grown = loaded.add(_texts(3, "q"), EMB)
    assert grown.embedding_prefix is loaded.embeddings
    grown.save(tmp_path / "grown")
    # saved without joining its parts (an update that only saves never copies the matrix)
    from evireform.index import AppendedRows
    assert isinstance(grown.stored_embeddings(), AppendedRows)
    n = len(loaded.embeddings)  # rows across the two parts
    assert np.array_equal(grown.embedding_rows(n - 2, n + 2), np.concatenate(
        [loaded.embeddings[n - 2:], grown.embeddings[n:n + 2]]))
    want = tmp_path / "want.npy"
    np.save(want, np.ascontiguousarray(grown.embeddings), allow_pickle=False)
    assert (tmp_path / "grown" / "embeddings.npy").read_bytes() == want.read_bytes()
    assert sum(calls) == loaded.embeddings.nbytes  # the parent's rows, all by the kernel
    assert PropositionIndex.load(tmp_path / "grown", verify="full").n_passages == 43
    # the parent's directory replaced by another index (new inodes): nothing is copied
    # from the file now under its name, and the bytes are still right
    calls.clear()
    PropositionIndex.build(_texts(40, "r"), EMB, show_progress=False).save(
        tmp_path / "ix", overwrite=True)
    grown.save(tmp_path / "again")
    assert calls == []
    assert (tmp_path / "again" / "embeddings.npy").read_bytes() == want.read_bytes()


def test_save_array_copies_only_a_file_that_is_still_the_prefix(tmp_path):
    """save_array: the bytes of np.save whatever the prefix; the kernel copies a mapped
    prefix only from the file it was mapped from, unchanged (inode, size and mtime), and
    the copied rows' ends must equal the rows in memory."""
    import os
    from evireform.store.format import remember_file, save_array
    rng = np.random.default_rng(7)
    arr = rng.standard_normal((50, 6)).astype(np.float32)
    ref = tmp_path / "ref.npy"
    np.save(ref, arr, allow_pickle=False)

    def mapped(rows):
        f = tmp_path / f"src{len(rows)}.npy"
        np.save(f, rows, allow_pickle=False)
        m = np.load(f, mmap_mode="r")
        remember_file(m, f)
        return m, f
    for prefix in (None, arr[:20].copy(), mapped(arr[:20])[0], mapped(arr)[0],
                   mapped(arr[:0])[0], mapped(arr[:, :3].copy())[0]):
        save_array(tmp_path / "out.npy", arr, prefix)
        assert (tmp_path / "out.npy").read_bytes() == ref.read_bytes()
    # the file under the name rewritten with other rows (another inode and mtime): unused
    m, f = mapped(arr[:30])
    other = tmp_path / "other.npy"
    np.save(other, arr[:30] + 1, allow_pickle=False)
    os.replace(other, f)
    save_array(tmp_path / "out.npy", arr, m)
    assert (tmp_path / "out.npy").read_bytes() == ref.read_bytes()
    # the same file edited in place with its stat put back: the ends differ, not used
    m, f = mapped(arr[:30])
    st = f.stat()
    raw = bytearray(f.read_bytes())
    raw[-1] ^= 0x10
    f.write_bytes(bytes(raw))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    save_array(tmp_path / "out.npy", arr, m)
    assert (tmp_path / "out.npy").read_bytes() == ref.read_bytes()
    # a 3-d or empty array: the np.save bytes
    for a in (np.zeros((0, 4), np.float32), rng.standard_normal((3, 2, 2)).astype(np.float32)):
        np.save(ref, a, allow_pickle=False)
        save_array(tmp_path / "out.npy", a, None)
        assert (tmp_path / "out.npy").read_bytes() == ref.read_bytes()


def test_a_chain_of_adds_read_whole_copies_the_matrix_once_and_never_changes_a_parent():
    """Adds read whole one after another (a journalled service's generations) write each
    new row after the last in one buffer with room (the matrix copied once, not once an
    add); a second child of the same parent gets a buffer of its own, so no index's rows
    ever change under it."""
    base = PropositionIndex.build(_texts(30, "a"), EMB, show_progress=False)
    a = base.add(_texts(2, "b"), EMB)
    ea = a.embeddings.copy()
    b = a.add(_texts(2, "c"), EMB)
    eb = b.embeddings
    assert np.shares_memory(a.embeddings, eb)  # written after a's rows, not a copy
    c = a.add(_texts(2, "d"), EMB)  # another child of a: its own buffer
    ec = c.embeddings
    assert not np.shares_memory(eb, ec)
    assert np.array_equal(a.embeddings, ea) and np.array_equal(b.embeddings[:len(ea)], ea)
    fresh = [PropositionIndex.build(list(ps), EMB, show_progress=False).embeddings
             for ps in (_texts(30, "a") + _texts(2, "b") + _texts(2, "c"),
                        _texts(30, "a") + _texts(2, "b") + _texts(2, "d"))]
    assert np.allclose(b.embeddings, fresh[0]) and np.allclose(c.embeddings, fresh[1])
    d = b.add(_texts(2, "e"), EMB)
    assert np.shares_memory(d.embeddings, eb) and np.array_equal(b.embeddings, eb)
