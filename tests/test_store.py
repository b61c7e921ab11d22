"""evireform.store, module by module: the atomic swap and its recovery (atomic), what a save
refuses and the stamp (format), the tiers a load picks (verify), the HNSW file parser and its
kernel (hnsw_file).  The crafted-file and kill-point suites are tests/test_fuzz.py and
tests/test_hostile*.py."""
import numpy as np
import pytest

from evireform import IndexFormatError, Passage, PropositionIndex, UnsafeTargetError
from evireform.embed import HashingEmbedder
from evireform.store import (atomic, check_target, hnsw_file, index_files, load_index,
                             looks_like_index, stamp_matches)

EMB = HashingEmbedder(16)


def _ix(tmp_path, name="ix", hnsw=False):
    ps = [Passage(f"p{i}", f"Alpha {i}", f"Alpha {i} met Gamma Ray in {1900 + i}.")
          for i in range(40)]
    return PropositionIndex.build(ps, EMB, show_progress=False, hnsw=hnsw).save(tmp_path / name)


# ------------------------------------------------------------------ atomic
def test_a_swap_cut_between_its_renames_is_put_back_by_the_caller_s_rule(tmp_path):
    target = tmp_path / "d"

    def write(files):
        return lambda tmp: [(tmp / n).write_text(v) for n, v in files.items()]

    kind = lambda d: (d / "kind.txt").is_file()  # noqa: E731
    atomic.write_dir_atomically(target, write({"kind.txt": "1"}), looks_like=kind)
    real, calls = atomic._replace, []

    def cut(src, dst):
        calls.append(1)
        real(src, dst)
        if len(calls) == 1:
            raise OSError("killed between the renames")
    atomic._replace = cut
    try:
        with pytest.raises(OSError):
            atomic.write_dir_atomically(target, write({"kind.txt": "2"}), looks_like=kind)
    finally:
        atomic._replace = real
    assert (target / "kind.txt").read_text() == "1"  # the previous one, back in place
    # a parked directory of another kind is never put back
    (tmp_path / ".e.old-12345678").mkdir()
    assert not atomic.recover(tmp_path / "e", kind)


def test_locks_are_per_directory(tmp_path):
    import threading
    got = []

    def other():
        with atomic.index_lock(tmp_path / "b"):
            got.append("b")
    with atomic.index_lock(tmp_path / "a"):
        t = threading.Thread(target=other)
        t.start()
        t.join(10)
        assert got == ["b"]  # another directory's lock was free while "a" was held
    assert (tmp_path / ".a-lock").exists() and (tmp_path / ".b-lock").exists()


# ------------------------------------------------------------------ format
def test_what_a_save_refuses_and_what_it_recognises(tmp_path):
    ix = _ix(tmp_path)
    assert looks_like_index(ix) and not looks_like_index(tmp_path)
    assert "manifest.json" in index_files(ix) and index_files(tmp_path) is None
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("mine")
    with pytest.raises(UnsafeTargetError, match="not an evireform index"):
        check_target(tmp_path / "notes")  # not an index: replaced only when asked
    assert check_target(tmp_path / "notes", overwrite=True) == (tmp_path / "notes").absolute()
    with pytest.raises(UnsafeTargetError, match="is a file"):
        check_target(tmp_path / "notes" / "a.txt", overwrite=True)
    assert check_target(ix, overwrite=True) == ix.absolute()


# ------------------------------------------------------------------ verify
def test_the_stamp_picks_the_tier_and_an_edit_drops_to_full(tmp_path):
    ix = _ix(tmp_path)
    files = set(load_index(ix).manifest["files"])
    assert stamp_matches(ix, files)
    assert PropositionIndex.load(ix).verified == "fast"
    f = ix / "embeddings.npy"
    raw = bytearray(f.read_bytes())
    raw[-1] ^= 0x01  # in the edge digest: the stamp no longer matches
    f.write_bytes(bytes(raw))
    assert not stamp_matches(ix, files)
    with pytest.raises(IndexFormatError, match="embeddings.npy"):
        PropositionIndex.load(ix)  # auto ran the full tier: the checksum differs


# ------------------------------------------------------------------ hnsw_file
def test_the_hnsw_scan_kernel_accepts_a_real_graph_and_names_each_fault(tmp_path):
    from evireform import kernels as K
    ix = _ix(tmp_path, hnsw=True)
    idx = PropositionIndex.load(ix, verify="full")
    f = ix / "hnsw.bin"
    hnsw_file.check_hnsw_file(f, idx.n_props, idx.dim, idx.embeddings)
    scan = K._kernels().hnsw_upper_scan
    levels, starts = np.zeros(3, np.int64), np.zeros(3, np.int64)
    ok = np.zeros(12, np.uint8)  # three items, no upper levels
    assert scan(ok, 0, 3, 8, 2, levels, starts) == (0, -1)
    assert scan(ok[:10], 0, 3, 8, 2, levels, starts)[0] == 1       # cut inside a size
    assert scan(np.concatenate([ok, [0]]).astype(np.uint8), 0, 3, 8, 2, levels,
                starts)[0] == 5                                      # trailing bytes
    bad = ok.copy()
    bad[0] = 3  # a block of 3 bytes: not a multiple of the per-level size 8
    assert scan(bad, 0, 3, 8, 2, levels, starts)[0] == 2
    # a neighbour beyond the items: one level of 8 bytes, count 1, neighbour 7
    blk = np.array([8, 0, 0, 0, 1, 0, 0, 0, 7, 0, 0, 0], np.uint8)
    raw = np.concatenate([blk, np.zeros(8, np.uint8)])
    assert scan(raw, 0, 3, 8, 2, np.zeros(3, np.int64), np.zeros(3, np.int64)) == (4, 0)
    with pytest.raises(IndexFormatError):
        hnsw_file.check_hnsw_file(f, idx.n_props + 1, idx.dim)


# ------------------------------------------------------------------ hnsw_file: the two layouts
def test_hnsw_files_of_either_library_layout_load_and_search_alike(tmp_path):
    """Chroma's fork (the wheels installed) writes a lengths block that hnswlib does not; a
    saved index holds zeros there (never the heap's bytes), and a file in the other layout
    loads through a converted copy with the same neighbours."""
    out = _ix(tmp_path, hnsw=True)
    f = out / "hnsw.bin"
    idx = PropositionIndex.load(out)
    n, dim = idx.n_props, idx.dim
    raw = np.fromfile(f, np.uint8)
    hd = raw[:hnsw_file._HNSW_HEADER.itemsize].view(hnsw_file._HNSW_HEADER)[0]
    body = hnsw_file._HNSW_HEADER.itemsize + n * int(hd["size_per_element"])
    mine = hnsw_file.file_layout(f)
    assert mine == int(hnsw_file._library_writes_lengths())
    if mine:
        assert not raw[body:body + 4 * n].any()
    other = tmp_path / "other.bin"
    with open(other, "wb") as fh:
        hnsw_file._convert(f, 1 - mine, fh)
    assert other.stat().st_size == f.stat().st_size + (4 * n if not mine else -4 * n)
    assert hnsw_file.file_layout(other) == 1 - mine
    emb = np.asarray(idx.embeddings)
    h1 = hnsw_file.load_hnsw(f, n, dim, emb)
    h2 = hnsw_file.load_hnsw(other, n, dim, emb)
    a = h1.knn_query(emb[:7], k=5)[0]
    b = h2.knn_query(emb[:7], k=5)[0]
    assert np.array_equal(a, b)
    # a cut in the upper levels is refused in either layout
    cut = tmp_path / "cut.bin"
    cut.write_bytes(other.read_bytes()[:-3])
    with pytest.raises(IndexFormatError, match="cut.bin"):
        hnsw_file.check_hnsw_file(cut, n, dim)
