"""The lexical index (evireform.engine.lexical, evireform.kernels.lexical): the BM25
weights and top-k kernel against their references, the index's lexical counts carried
across updates and restricted by filters exactly (an updated index scores as a rebuilt one,
a filtered search as the sub-index's), saved and verified with the index, on every engine."""

import sys

import numpy as np
import pytest
import scipy.sparse as sp
from evireform.kernels import _gpu
from evireform.kernels import reference as R
from evireform.kernels.lexical import TermCounts, bm25_weights
from lexical_common import EMB, small  # noqa: F401

from evireform import EviReform, PropositionIndex  # noqa: E402
from evireform import kernels as K
from evireform.engine import make_engine, to_device  # noqa: E402
from evireform.engine.lexical import lexical_search
from evireform.engine.structures import lexical_of
from evireform.filters import restriction
from evireform.index import subset_index
from evireform.types import Passage


# --------------------------------------------------------------------------- kernels
def _random_counts(rng, n_docs, n_terms, most=12):
    return TermCounts.from_rows([list(rng.integers(0, n_terms, size=rng.integers(0, most + 1)))
                                 for _ in range(n_docs)])


def _queries(rng, B, n_terms, most=5):
    rows = [list(rng.integers(0, n_terms, size=rng.integers(0, most + 1))) for _ in range(B)]
    indptr = np.r_[0, np.cumsum([len(r) for r in rows])].astype(np.int64)
    terms = np.array([t for r in rows for t in r], np.int64)
    return indptr, terms, rng.integers(1, 4, size=len(terms)).astype(np.float64)


def _scipy(m):
    return sp.csr_matrix((m.weights, m.docs, m.indptr), shape=(m.n_terms, m.n_docs))


# --------------------------------------------------------------------------- the index's
WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda sigma omega "
         "SSH_AUTH_SOCK --shell /etc/shells ProxyJump").split()


def _random_passages(rng, n, prefix="p"):
    out = []
    for j in range(n):
        sents = [" ".join(rng.choice(WORDS, size=rng.integers(2, 7))).capitalize() + "."
                 for _ in range(rng.integers(0, 4))]
        out.append(Passage(f"{prefix}{j}", f"T{j % 5}", " ".join(sents) or "",
                           {"group": int(j % 3)}))
    return out


def _search_all(idx, texts, level, r=None, k=50):
    ids, sc = lexical_search(lexical_of(idx), texts, k, level, r)
    if level == "passages":
        names = [p.id for p in idx.passages]
    else:
        names = [(idx.passages[int(idx.owner[i])].id, idx.prop_texts[i])
                 for i in range(idx.n_props)]
    return [[(names[i], round(float(s), 12)) for i, s in zip(row, srow) if i >= 0]
            for row, srow in zip(ids.tolist(), sc.tolist())]


QUESTIONS = ["alpha and beta", "what sets SSH_AUTH_SOCK", "the shell option --shell",
             "ProxyJump gamma", "nothing matches this"]


@pytest.mark.parametrize("n_docs, n_terms", [(1, 1), (4, 2), (60, 25), (400, 90), (3000, 700)])
def test_bm25_weights_match_reference(rng, n_docs, n_terms):
    c = _random_counts(rng, n_docs, n_terms)
    for docs in (None, rng.random(n_docs) < 0.5):
        got = _scipy(bm25_weights(c, n_terms, docs=docs))
        want = R.bm25_matrix(c.indptr, c.terms, c.counts, n_terms,
                             docs=None if docs is None else np.flatnonzero(docs))
        assert got.shape == want.shape
        assert np.array_equal(got.indptr, want.indptr) and np.array_equal(got.indices, want.indices)
        np.testing.assert_allclose(got.data, want.data, rtol=1e-6)
        assert (got.data > 0).all()


@pytest.mark.parametrize("n_docs, n_terms", [(0, 0), (1, 1), (4, 2), (60, 25), (3000, 700)])
def test_bm25_weights_numpy_path_is_the_kernels_bitwise(rng, n_docs, n_terms, monkeypatch):
    """A process that has not loaded numba computes small weight matrices with numpy (a
    one-shot question needs no numba): the kernel's weights bit for bit, filtered or not,
    with documents of no terms and terms of no documents among them."""
    from evireform.kernels import lexical
    c = _random_counts(rng, n_docs, n_terms) if n_terms else TermCounts.from_rows([])
    for docs in (None, rng.random(n_docs) < 0.5, np.zeros(n_docs, bool)):
        monkeypatch.setattr(K.config, "BM25_NUMPY_POSTINGS", -1)
        want = bm25_weights(c, n_terms + 3, docs=docs)  # the numba kernels
        monkeypatch.setattr(K.config, "BM25_NUMPY_POSTINGS", 1 << 40)
        monkeypatch.delitem(sys.modules, lexical._CPU_MODULE)  # as in a fresh process
        got = bm25_weights(c, n_terms + 3, docs=docs)
        assert lexical._CPU_MODULE not in sys.modules  # the numpy path ran
        monkeypatch.undo()
        for a in ("indptr", "docs", "weights"):
            x, y = getattr(got, a), getattr(want, a)
            assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), a
        assert got.n_docs == want.n_docs


@pytest.mark.parametrize("threads", [False, True])
@pytest.mark.parametrize("n_docs, n_terms", [(1, 1), (5, 3), (80, 30), (700, 150), (5000, 900)])
def test_lexical_topk_matches_reference(rng, n_docs, n_terms, threads, monkeypatch):
    if threads:  # the threaded kernel, whatever the size and the machine's load
        from evireform.kernels import runtime
        monkeypatch.setattr(K.config, "SERIAL_LEXICAL_POSTINGS", -1)
        monkeypatch.setattr(runtime, "machine_busy", lambda: False)
    m = bm25_weights(_random_counts(rng, n_docs, n_terms), n_terms)
    W = _scipy(m)
    ns = _gpu.cpu_namespace()
    for B in (0, 1, 3, 9, 40):
        qi, qt, qw = _queries(rng, B, n_terms)
        for k in (1, 4, 10_000):
            want = R.bm25_topk_batch(W, qi, qt, qw, k)
            got = K.lexical_topk_batch(m, qi, qt, qw, k, backend="cpu")
            assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
            # the CuPy twin, run with numpy: the same ids, scores within rounding
            g = _gpu.bm25_topk_batch(ns, m.indptr, m.docs, m.weights, m.n_docs, qi, qt, qw,
                                     min(k, n_docs))
            assert np.array_equal(g[0], want[0])
            np.testing.assert_allclose(g[1], want[1], rtol=1e-12)


def test_lexical_topk_ties_and_degenerate_inputs():
    # two documents with the same terms tie: the lower id first; a term no document has
    c = TermCounts.from_rows([[0, 1], [2], [0, 1], []])
    m = bm25_weights(c, 4)
    ids, sc = K.lexical_topk_batch(m, [0, 2, 3, 3], [0, 1, 3], None, 3, backend="cpu")
    assert ids[0].tolist() == [0, 2, -1] and sc[0, 0] == sc[0, 1] > 0
    assert ids[1].tolist() == [-1, -1, -1] and ids[2].tolist() == [-1, -1, -1]
    with pytest.raises(ValueError, match="term ids"):
        K.lexical_topk_batch(m, [0, 1], [9], None, 2)
    with pytest.raises(ValueError, match="positive"):
        K.lexical_topk_batch(m, [0, 1], [0], [0.0], 2)
    with pytest.raises(ValueError, match="k must"):
        K.lexical_topk_batch(m, [0, 1], [0], None, 0)
    # an indptr that reads past the terms, or runs backwards, is refused before any kernel
    # reads with it (it crashed the process: numba does not check bounds)
    for bad in ([0, 50], [1, 1], [0, 1, 0], [0, 2, 1]):
        for backend in ("cpu", "auto"):
            with pytest.raises(ValueError, match="indptr must start at 0"):
                K.lexical_topk_batch(m, bad, [0], None, 2, backend=backend)
    with pytest.raises(ValueError, match="positive"):
        K.lexical_topk_batch(m, [0, 1, 2], [0, 1], [1.0, float("nan")], 2)
    with pytest.raises(ValueError, match="term ids must be >= 0"):
        TermCounts.from_rows([[0, -1]])
    with pytest.raises(ValueError, match="n_terms is 3 but the counts have term id 5"):
        bm25_weights(TermCounts.from_rows([[0, 1], [5]]), 3)
    empty = bm25_weights(TermCounts.from_rows([]), 0)
    assert K.lexical_topk_batch(empty, [0, 0], [], None, 3)[0].shape == (1, 0)


@pytest.mark.parametrize("level", ["props", "passages"])
def test_updated_index_scores_as_rebuilt(rng, level):
    a = [p for p in _random_passages(rng, 30) if p.text]
    b = [p for p in _random_passages(rng, 12, "q") if p.text]
    base = PropositionIndex.build(a, EMB, extractor="heuristic", show_progress=False)
    lexical_of(base)  # counted before the update: the update carries it
    grown = base.add(b, EMB)
    rebuilt = PropositionIndex.build(a + b, EMB, extractor="heuristic", show_progress=False)
    assert _search_all(grown, QUESTIONS, level) == _search_all(rebuilt, QUESTIONS, level)
    gone = [p.id for p in a[:7]]
    shrunk = grown.delete(gone)
    rebuilt2 = PropositionIndex.build(a[7:] + b, EMB, extractor="heuristic", show_progress=False)
    assert _search_all(shrunk, QUESTIONS, level) == _search_all(rebuilt2, QUESTIONS, level)
    assert lexical_of(shrunk).props.n_docs == shrunk.n_props


@pytest.mark.parametrize("level", ["props", "passages"])
def test_filtered_search_equals_sub_index(rng, level):
    ps = [p for p in _random_passages(rng, 40) if p.text]
    idx = PropositionIndex.build(ps, EMB, extractor="heuristic", show_progress=False)
    flt = {"group": {"$in": [0, 2]}}
    r = restriction(idx, flt)
    sub = subset_index(idx, r.passages)
    got = _search_all(idx, QUESTIONS, level, r)
    assert got == _search_all(sub, QUESTIONS, level)
    assert any(got)
    assert r.lexical  # the recounted weights are kept with the restriction


# --------------------------------------------------------------------------- saved with the index
def test_saved_and_loaded_with_the_index(tmp_path, rng):
    import json

    ps = [p for p in _random_passages(rng, 25) if p.text]
    idx = PropositionIndex.build(ps, EMB, extractor="heuristic", show_progress=False)
    idx.save(tmp_path / "ix")
    man = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    assert "lexical_vocab.utf8" in man["files"] and "lexical_props_terms.npy" in man["files"]
    assert "lexical_terms.json" not in man["files"]
    for verify in ("full", "fast"):
        back = PropositionIndex.load(tmp_path / "ix", verify=verify)
        assert back.search_state.lexical is not None  # read, not counted again
        for level in ("props", "passages"):
            assert _search_all(back, QUESTIONS, level) == _search_all(idx, QUESTIONS, level)
    # an update of the loaded index carries the stored counts, and is saved again
    new = [Passage("new", "New", "Alpha meets SSH_AUTH_SOCK.")]
    grown = back.add(new, EMB)
    grown.save(tmp_path / "ix2")
    again = PropositionIndex.load(tmp_path / "ix2", verify="full")
    rebuilt = PropositionIndex.build(ps + new, EMB, extractor="heuristic", show_progress=False)
    for level in ("props", "passages"):
        assert _search_all(again, QUESTIONS, level) == _search_all(rebuilt, QUESTIONS, level)
    assert any(h[0] == "new" for h in _search_all(again, QUESTIONS, "passages")[1])


def test_counts_made_by_other_tokenizer_rules_are_counted_again(tmp_path, rng):
    """An index whose lexical counts another version of the tokenizer made (the manifest's
    ``lexical_tokenizer``; none before plural folding) loads, its counts dropped and made
    again from the texts: it searches as a fresh build, never a query's terms against
    another rule's counts."""
    import json

    from evireform.extract.tokens import LEXICAL_TOKENIZER
    ps = [p for p in _random_passages(rng, 15) if p.text]
    ps.append(Passage("pl", "Plurals", "The archive filters pass through libraries."))
    idx = PropositionIndex.build(ps, EMB, extractor="heuristic", show_progress=False)
    idx.save(tmp_path / "ix")
    d = tmp_path / "ix"
    man = json.loads((d / "manifest.json").read_text())
    assert man["lexical_tokenizer"] == LEXICAL_TOKENIZER
    # the old rules' counts: the plural "filters" stored as written
    terms = _stored_terms(d)
    assert "filter" in terms and "filters" not in terms
    terms[terms.index("filter")] = "filters"
    _write_vocab(d, terms)
    man = json.loads((d / "manifest.json").read_text())
    del man["lexical_tokenizer"]  # an index saved before the version was written
    (d / "manifest.json").write_text(json.dumps(man))
    for verify in ("full", "fast"):
        back = PropositionIndex.load(d, verify=verify, stamp=False)
        assert back.search_state.lexical is None  # not read: counted again when searched
        q = ["which filter does the archive pass through"]
        for level in ("props", "passages"):
            assert _search_all(back, q, level) == _search_all(idx, q, level)
        assert _search_all(back, q, "passages")[0][0][0] == "pl"
    back.save(tmp_path / "ix2")  # saved again: the counts of these rules, marked so
    man2 = json.loads((tmp_path / "ix2" / "manifest.json").read_text())
    assert man2["lexical_tokenizer"] == LEXICAL_TOKENIZER
    assert PropositionIndex.load(tmp_path / "ix2", verify="full").search_state.lexical \
        is not None


def _stored_terms(d) -> list:
    """The vocabulary a saved index's files hold, in id order."""
    off = np.load(d / "lexical_vocab_offsets.npy")
    blob = (d / "lexical_vocab.utf8").read_bytes()
    return [blob[a:b].decode() for a, b in zip(off[:-1], off[1:])]


def _write_vocab(d, terms, order=None, sort=True):
    """The vocabulary files of ``terms`` (``order``: the stored order as given), the
    manifest's checksums recomputed: only the values can tell an edit."""
    import json

    from evireform.store import file_sha256
    from evireform.kernels.lexical import SortedTerms
    v = SortedTerms.from_terms(terms)
    (d / "lexical_vocab.utf8").write_bytes(v.blob.tobytes())
    np.save(d / "lexical_vocab_offsets.npy", v.offsets)
    np.save(d / "lexical_vocab_order.npy", v.order if order is None else order)
    man = json.loads((d / "manifest.json").read_text())
    for name in ("lexical_vocab.utf8", "lexical_vocab_offsets.npy", "lexical_vocab_order.npy"):
        man["files"][name] = {"sha256": file_sha256(d / name), "bytes": (d / name).stat().st_size}
    (d / "manifest.json").write_text(json.dumps(man))


@pytest.mark.parametrize("n", [0, 1, 2, 7, 300])
def test_vocab_lookup_matches_the_reference(rng, n):
    """Binary search over the vocabulary's bytes (the kernel) finds what bisect over sorted
    bytes finds: ids and lower bounds, for terms, non-terms, prefixes, extensions, the empty
    string and non-ASCII words."""
    from evireform.kernels.lexical import SortedTerms
    alphabet = list("abcz") + ["é", "ß", "中", "_", "0"]
    words = {"".join(rng.choice(alphabet, size=rng.integers(1, 6))) for _ in range(3 * n)}
    terms = sorted(words)[:n]
    rng.shuffle(terms)  # ids in first-seen order, not byte order
    v = SortedTerms.from_terms(terms)
    assert K.vocab_unsorted(v) == -1
    queries = terms + [t + "a" for t in terms] + [t[:-1] for t in terms] + \
        ["", "zzzzzz", "\x00", "aé"] + ["".join(rng.choice(alphabet, size=3)) for _ in range(50)]
    want_pos, want_ids = R.vocab_search([t.encode() for t in terms],
                                        [q.encode() for q in queries])
    from evireform.kernels import config
    for python_upto in (0, 10 ** 6):  # the numba kernel, then the Python search
        old, config.VOCAB_LOOKUP_PYTHON = config.VOCAB_LOOKUP_PYTHON, python_upto
        hidden = sys.modules.pop(K._CPU_MODULE) if python_upto else None  # as if unloaded
        try:
            pos, ids = K.vocab_lookup(v, queries)
        finally:
            config.VOCAB_LOOKUP_PYTHON = old
            if hidden is not None:
                sys.modules[K._CPU_MODULE] = hidden
        assert np.array_equal(ids, want_ids) and np.array_equal(pos, want_pos)
    assert all(terms[i] == q for q, i in zip(queries, ids) if i >= 0)
    assert [v.term(t) for t in range(len(v))] == terms


def test_sorted_terms_refuses_arrays_the_kernel_would_read_past():
    from evireform.kernels.lexical import SortedTerms
    v = SortedTerms.from_terms(["b", "a", "c"])
    blob, off, order = v.blob, v.offsets, v.order
    for bad, match in (((blob, off, np.array([0, 1, 3], np.int32)), "outside the term ids"),
                       ((blob, off, np.array([0, -1, 2], np.int32)), "outside the term ids"),
                       ((blob, np.array([0, 2, 1, 3]), order), "must not decrease"),
                       ((blob, np.array([0, 1, 2, 9]), order), "end at the blob"),
                       ((blob, off, order[:2]), "shape"),
                       ((blob.astype(np.int32), off, order), "uint8")):
        with pytest.raises(ValueError, match=match):
            SortedTerms(*bad)
    unsorted = SortedTerms(blob, off, np.array([0, 1, 2], np.int32))  # b, a, c
    repeated = SortedTerms(blob, off, np.array([1, 1, 2], np.int32))
    from evireform.kernels import config
    for kernel_from in (10 ** 9, 0):  # the Python check, then the numba kernel
        old, config.VOCAB_CHECK_KERNEL = config.VOCAB_CHECK_KERNEL, kernel_from
        try:
            assert K.vocab_unsorted(unsorted) == 1 and K.vocab_unsorted(repeated) == 1
            assert K.vocab_unsorted(v) == -1
            big = SortedTerms.from_terms([f"t{i:05d}" for i in range(3000)][::-1])
            assert K.vocab_unsorted(big) == -1
            swapped = big.order.copy()
            swapped[[100, 2000]] = swapped[[2000, 100]]
            assert K.vocab_unsorted(SortedTerms(big.blob, big.offsets, swapped)) == 101
        finally:
            config.VOCAB_CHECK_KERNEL = old


def test_the_vocabulary_is_opened_mapped_and_grows_by_an_update(tmp_path, rng):
    """A saved vocabulary opens as mapped arrays (no dict of its terms), finds a query's
    terms by binary search, and an update's new terms are merged into its order on save:
    the saved index's vocabulary is sorted, unique, and searches as a rebuild."""
    from evireform.search_data import Vocabulary
    ps = [p for p in _random_passages(rng, 20) if p.text]
    idx = PropositionIndex.build(ps, EMB, extractor="heuristic", show_progress=False)
    idx.save(tmp_path / "ix")
    back = PropositionIndex.load(tmp_path / "ix", verify="fast")
    voc = lexical_of(back).terms
    assert isinstance(voc, Vocabulary) and voc.base is not None and not voc.extra_ids
    assert list(voc) == list(lexical_of(idx).terms)
    new = [Passage("n1", "Zyzzyva", "Quokkas meet zyzzyvas near Alpha."),
           Passage("n2", "Aardvark", "An aardvark met SSH_AUTH_SOCK.")]
    grown = back.add(new, EMB)
    gv = lexical_of(grown).terms
    assert gv.base is voc.base and "aardvark" in gv.extra_ids and not voc.extra
    grown.save(tmp_path / "ix2")
    again = PropositionIndex.load(tmp_path / "ix2", verify="full")
    rebuilt = PropositionIndex.build(ps + new, EMB, extractor="heuristic", show_progress=False)
    q = QUESTIONS + ["aardvark quokka zyzzyva"]
    for level in ("props", "passages"):
        assert _search_all(again, q, level) == _search_all(rebuilt, q, level)
    assert _search_all(again, q, "passages")[-1][0][0] in ("n1", "n2")
    assert sorted(_stored_terms(tmp_path / "ix2")) == sorted(lexical_of(rebuilt).terms)


def test_edited_vocabulary_files_are_refused(tmp_path, rng):
    from evireform.store import IndexFormatError
    ps = [p for p in _random_passages(rng, 12) if p.text]
    PropositionIndex.build(ps, EMB, extractor="heuristic", show_progress=False).save(
        tmp_path / "ix")
    d = tmp_path / "ix"
    terms = _stored_terms(d)
    n = len(terms)
    # an order past the terms: refused on every tier (the kernel would read past the blob)
    _write_vocab(d, terms, order=np.full(n, n, np.int32))
    with pytest.raises(IndexFormatError, match="lexical_vocab_order.npy.*outside"):
        PropositionIndex.load(d, verify="fast")
    # a valid range, the wrong order (binary search would miss terms): the full tier tells
    _write_vocab(d, terms, order=np.arange(n, dtype=np.int32)[::-1].copy())
    PropositionIndex.load(d, verify="fast", stamp=False)
    with pytest.raises(IndexFormatError, match="lexical_vocab_order.npy.*byte order"):
        PropositionIndex.load(d, verify="full")
    # a repeated term, each place right: the full tier's order check refuses it too
    _write_vocab(d, terms[:-1] + [terms[0]])
    with pytest.raises(IndexFormatError, match="lexical_vocab_order.npy"):
        PropositionIndex.load(d, verify="full")


def test_a_version_4_vocabulary_in_json_still_opens(tmp_path, rng):
    """An index of format version 4 stored its vocabulary as lexical_terms.json: it loads,
    searches as saved, and saving it again writes the mapped vocabulary (version 5)."""
    import json

    from evireform.store import file_sha256
    ps = [p for p in _random_passages(rng, 12) if p.text]
    idx = PropositionIndex.build(ps, EMB, extractor="heuristic", show_progress=False)
    d = tmp_path / "ix"
    idx.save(d)
    terms = _stored_terms(d)
    man = json.loads((d / "manifest.json").read_text())
    for name in ("lexical_vocab.utf8", "lexical_vocab_offsets.npy", "lexical_vocab_order.npy",
                 "verified.json"):
        (d / name).unlink(missing_ok=True)
        man["files"].pop(name, None)
    (d / "lexical_terms.json").write_text(json.dumps(terms))
    man["files"]["lexical_terms.json"] = {"sha256": file_sha256(d / "lexical_terms.json"),
                                          "bytes": (d / "lexical_terms.json").stat().st_size}
    man["format_version"] = 4
    (d / "manifest.json").write_text(json.dumps(man))
    for verify in ("full", "fast"):
        back = PropositionIndex.load(d, verify=verify, stamp=False)
        assert back.search_state.lexical is not None
        for level in ("props", "passages"):
            assert _search_all(back, QUESTIONS, level) == _search_all(idx, QUESTIONS, level)
    back.save(tmp_path / "ix5")
    man5 = json.loads((tmp_path / "ix5" / "manifest.json").read_text())
    assert man5["format_version"] == 5 and "lexical_terms.json" not in man5["files"]
    assert _stored_terms(tmp_path / "ix5") == terms
    # both vocabularies in one index: refused, whichever the version
    import shutil
    for name in ("lexical_vocab.utf8", "lexical_vocab_offsets.npy", "lexical_vocab_order.npy"):
        shutil.copy(tmp_path / "ix5" / name, d / name)
        man["files"][name] = {"sha256": file_sha256(d / name), "bytes": (d / name).stat().st_size}
    (d / "manifest.json").write_text(json.dumps(man))
    from evireform.store import IndexFormatError
    with pytest.raises(IndexFormatError, match="lexical_terms.json.*one vocabulary"):
        PropositionIndex.load(d, verify="fast", stamp=False)


def test_edited_lexical_files_are_refused(tmp_path, rng):
    import json

    from evireform.store import IndexFormatError, file_sha256
    ps = [p for p in _random_passages(rng, 12) if p.text]
    PropositionIndex.build(ps, EMB, extractor="heuristic", show_progress=False).save(
        tmp_path / "ix")
    d = tmp_path / "ix"

    def rewrite(name, arr):  # an edit with its checksum recomputed: only the values tell
        np.save(d / name, arr, allow_pickle=False)
        man = json.loads((d / "manifest.json").read_text())
        man["files"][name] = {"sha256": file_sha256(d / name), "bytes": (d / name).stat().st_size}
        (d / "manifest.json").write_text(json.dumps(man))

    terms = np.load(d / "lexical_props_terms.npy")
    good = terms.copy()
    rewrite("lexical_props_terms.npy", np.full_like(terms, 10 ** 6))
    with pytest.raises(IndexFormatError, match="lexical_props_terms.npy.*term id"):
        PropositionIndex.load(d, verify="fast")
    rewrite("lexical_props_terms.npy", good)
    counts = np.load(d / "lexical_props_counts.npy")
    counts[0] += 1  # a valid count, the wrong one: only a recount from the text tells
    rewrite("lexical_props_counts.npy", counts)
    PropositionIndex.load(d, verify="fast", stamp=False)
    PropositionIndex.load(d, verify="full", stamp=False)  # checksums and ranges hold
    with pytest.raises(IndexFormatError, match="lexical_props_terms.npy.*row 0"):
        PropositionIndex.load(d, verify="fast", recount=True)  # what verify --full runs


def test_the_device_engine_searches_lexically_as_the_cpu(small):
    """The CuPy twin on the numpy namespace: the same lexical hits, and the same results
    through the retriever, as the CPU engine (with and without a filter)."""
    cpu = make_engine(small, "cpu")
    dev = make_engine(small, to_device(small, "numpy"))
    texts = ["SSH_AUTH_SOCK agent", "ProxyJump", "Orvel Society founder", "nothing here"]
    for level in ("props", "passages"):
        a, b = cpu.lexical_batch(texts, 3, level=level), dev.lexical_batch(texts, 3, level=level)
        assert np.array_equal(a[0], b[0])
        np.testing.assert_allclose(a[1], b[1], rtol=1e-12)
    q = ["Which variable names the agent socket?", "Who founded the Orvel Society?"]
    for flt in (None, ["a", "d", "e"]):
        x = EviReform(small, engine=cpu, embedder=EMB).retrieve_many(q, 3, filter=flt)
        y = EviReform(small, engine=dev, embedder=EMB).retrieve_many(q, 3, filter=flt)
        assert [r.ids for r in x] == [r.ids for r in y]
