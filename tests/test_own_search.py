"""The question's own search (issue 85): passage embeddings in the index (built, updated,
saved, verified) and EviReform's ranking alternating with the question's hybrid search."""
import json

import numpy as np
import pytest

from evireform import PropositionIndex
from evireform.embed import HashingEmbedder
from evireform.engine.lexical import lexical_search
from evireform.engine.structures import lexical_of
from evireform.index import arrays_equal
from evireform.retriever import EviReform, EviReformConfig, interleave
from evireform.store import IndexFormatError
from evireform.store.format import PASSAGE_EMBEDDINGS_FILE, file_sha256

EMB = HashingEmbedder(64)
TEXTS = [
    ("ssh-keygen", "The ssh-keygen utility creates the key pairs that ssh uses; run it once "
                   "before connecting to a new host."),
    ("ssh-keygen keys", "Keys created by ssh-keygen default to 3072 bits for RSA in recent "
                        "releases; pass -b to choose another size."),
    ("tar", "The tar command bundles files into one archive and reads gzip compressed "
            "archives with its z flag."),
    ("sshd_config", "The daemon reads its settings from the sshd_config file when it starts; "
                    "PasswordAuthentication turns passwords off."),
    ("gzip", "The gzip program compresses single files; tar bundles several first."),
    ("xz", "The xz program compresses better than gzip and more slowly."),
    ("scp", "The scp command copies files between hosts over an ssh connection."),
    ("ssh-agent", "The ssh-agent program holds decrypted private keys so that ssh asks for a "
                  "passphrase once; SSH_AUTH_SOCK names its socket."),
]
PASSAGES = [{"id": f"p{i}", "title": t, "text": x} for i, (t, x) in enumerate(TEXTS)]
QUESTIONS = ["How many bits are the keys the key utility makes?",
             "Which file turns password logins off for the daemon?",
             "what compresses better than gzip",
             "which variable names the socket of the program holding keys"]


def _prose(passages=PASSAGES):
    return PropositionIndex.build(passages, EMB, extractor="prose", show_progress=False)


def _own_reference(idx, q, k, allowed=None):
    """The question's own ranking from first principles: RRF (k = 60, ties by lower
    position) of its positive dense passage cosines and its positive BM25 passage scores,
    each read to 100, within ``allowed``."""
    pe = np.asarray(idx.passage_embeddings, np.float64)
    h = EMB.encode_queries([q])[0].astype(np.float64)
    keep = np.ones(idx.n_passages, bool) if allowed is None else np.isin(
        np.arange(idx.n_passages), allowed)
    cos = pe @ h
    dense = [int(j) for j in sorted(np.flatnonzero(keep & (cos > 0)), key=lambda j: (-cos[j], j))]
    li, ls = lexical_search(lexical_of(idx), [q], idx.n_passages, "passages")
    lex = [int(j) for j, s in zip(li[0], ls[0]) if j >= 0 and s > 0 and keep[j]]
    score = {}
    for ranking in (dense[:100], lex[:100]):
        for r, j in enumerate(ranking):
            score[j] = score.get(j, 0.0) + 1.0 / (60 + r + 1)
    return sorted(score, key=lambda j: (-score[j], j))


def test_interleave_alternates_from_the_first_list_each_item_once():
    assert interleave([1, 2, 3], [2, 4, 5], 4) == ([1, 2, 3, 4], [2, 4])
    assert interleave([1, 2], [3, 4, 5, 6], 5) == ([1, 3, 2, 4, 5], [3, 4, 5])
    assert interleave([], [7, 8], 3) == ([7, 8], [7, 8])
    assert interleave([1, 2, 3], [], 2) == ([1, 2], [])
    # with a key: an item whose key a placed item has is passed over (a repeated text)
    key = np.array([0, 0, 2, 3, 4])
    assert interleave([0, 2], [1, 3, 4], 4, key) == ([0, 3, 2, 4], [3, 4])


def test_prose_indexes_embed_their_passages_and_keep_them_through_updates(tmp_path):
    idx = _prose()
    pe = np.asarray(idx.passage_embeddings)
    assert pe.shape == (len(PASSAGES), EMB.dim) and pe.dtype == np.float32
    want = EMB.encode([f"{p['title']}\n{p['text']}" for p in PASSAGES])
    np.testing.assert_allclose(pe, want, atol=1e-6)
    assert PropositionIndex.build(PASSAGES, EMB, extractor="heuristic",
                                  show_progress=False).passage_embeddings is None
    assert PropositionIndex.build(PASSAGES, EMB, extractor="heuristic", show_progress=False,
                                  passage_vectors=True).passage_embeddings is not None
    assert PropositionIndex.build(PASSAGES, EMB, extractor="prose", show_progress=False,
                                  passage_vectors=False).passage_embeddings is None
    # an add embeds the new passages; a delete drops their rows: row for row what the
    # full build holds, by passage id
    grown = _prose(PASSAGES[:5]).add(PASSAGES[5:], EMB).delete(["p1", "p6"])
    rows = {p.id: r for p, r in zip(grown.passages, np.asarray(grown.passage_embeddings))}
    full = {p.id: r for p, r in zip(idx.passages, pe)}
    assert set(rows) == set(full) - {"p1", "p6"}
    assert all(np.array_equal(rows[i], full[i]) for i in rows)
    # saved and loaded (both tiers), equal; an index without them loads without them
    grown.save(tmp_path / "g.idx")
    for tier in ("full", "fast"):
        back = PropositionIndex.load(tmp_path / "g.idx", verify=tier)
        assert arrays_equal(back, grown)
        assert np.array_equal(back.passage_embeddings, grown.passage_embeddings)
    plain = idx.with_passage_vectors(EMB)
    assert plain is idx
    bare = PropositionIndex.build(PASSAGES, EMB, extractor="prose", show_progress=False,
                                  passage_vectors=False)
    assert not arrays_equal(bare, idx)
    made = bare.with_passage_vectors(EMB)
    assert bare.passage_embeddings is None and np.array_equal(made.passage_embeddings, pe)


def test_a_passage_embeddings_file_of_another_shape_is_refused(tmp_path):
    _prose().save(tmp_path / "x.idx")
    d = tmp_path / "x.idx"
    np.save(d / PASSAGE_EMBEDDINGS_FILE, np.ones((3, EMB.dim), np.float32))
    man = json.loads((d / "manifest.json").read_text())
    f = man["files"][PASSAGE_EMBEDDINGS_FILE]
    f["sha256"], f["bytes"] = file_sha256(d / PASSAGE_EMBEDDINGS_FILE), \
        (d / PASSAGE_EMBEDDINGS_FILE).stat().st_size
    (d / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(IndexFormatError, match="one row per passage"):
        PropositionIndex.load(d, verify="full")
    # rows that are not unit vectors: the full tier names the row
    bad = np.zeros((len(PASSAGES), EMB.dim), np.float32)
    bad[:, 0] = 1.0
    bad[2, 0] = 2.0
    np.save(d / PASSAGE_EMBEDDINGS_FILE, bad)
    f["sha256"], f["bytes"] = file_sha256(d / PASSAGE_EMBEDDINGS_FILE), \
        (d / PASSAGE_EMBEDDINGS_FILE).stat().st_size
    (d / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(IndexFormatError, match="row 2 has L2 norm"):
        PropositionIndex.load(d, verify="full")


@pytest.mark.parametrize("k", [1, 3, 5])
def test_the_ranking_alternates_evireform_with_the_questions_own_search(k):
    idx = _prose()
    on = EviReform(idx, embedder=EMB)
    off = EviReform(idx, EviReformConfig(own_search="off"), embedder=EMB)
    for q in QUESTIONS:
        evi = [p.index for p in off.retrieve(q, 2 * k).passages]
        own = _own_reference(idx, q, k)
        want, placed = interleave(evi, own, k)
        got = on.retrieve(q, k)
        assert [p.index for p in got.passages] == want, q
        assert got.trace.own_search == [idx.passages[j].id for j in placed]
        assert got.trace.to_dict()["own_search"] == got.trace.own_search
        # a passage EviReform ranked keeps its score; one only the own search found has 0
        scores = {p.index: p.score for p in off.retrieve(q, 2 * k).passages}
        assert [p.score for p in got.passages] == [scores.get(j, 0.0) for j in want]
        parts = [p.from_question + p.from_residual + p.from_propagation for p in got.passages]
        np.testing.assert_allclose(parts, [p.score for p in got.passages], atol=1e-12)
        for p in got.passages:  # one EviReform did not rank as far as it read: all 0
            if p.index not in scores:
                assert (p.from_question, p.from_residual, p.from_propagation) == (0, 0, 0)
    # the batch path ranks alike
    many = on.retrieve_many(QUESTIONS, k)
    assert [r.ids for r in many] == [on.retrieve(q, k).ids for q in QUESTIONS]


def test_a_passage_only_the_own_search_reached_shows_score_and_parts_zero():
    """Twenty passages sharing their entities (ssh options): EviReform's readout gives some
    mass to most, so the own search places passages beyond the 2k EviReform ranked; those
    show score 0 and every part 0 (the parts still add up to the score), the others keep
    EviReform's score and parts."""
    opts = ["ProxyJump", "ServerAliveInterval", "IdentityFile", "ForwardAgent", "Compression",
            "LogLevel", "HostKeyAlgorithms", "ControlMaster", "ControlPath", "Port", "User",
            "StrictHostKeyChecking", "UserKnownHostsFile", "ConnectTimeout", "Ciphers", "MACs",
            "KexAlgorithms", "LocalForward", "RemoteForward", "SendEnv"]
    ps = [{"id": f"o{i}", "title": w, "text": f"The ssh option {w} in ssh_config changes how "
           f"ssh connects; the ssh client reads {w} for each host."} for i, w in enumerate(opts)]
    idx = PropositionIndex.build(ps, EMB, extractor="prose", show_progress=False)
    on = EviReform(idx, embedder=EMB)
    off = EviReform(idx, EviReformConfig(own_search="off"), embedder=EMB)
    unread = 0
    for w in opts:
        q = f"what does {w} change"
        got, read = on.retrieve(q, 2), off.retrieve(q, 4).passages
        scores = {p.index: (p.score, p.from_question, p.from_residual, p.from_propagation)
                  for p in read}
        for p in got.passages:
            mine = (p.score, p.from_question, p.from_residual, p.from_propagation)
            assert mine == scores.get(p.index, (0.0, 0.0, 0.0, 0.0))
            unread += p.index not in scores
    assert unread > 0  # the case this test is for happened


def test_the_own_search_stays_within_a_filter():
    idx = _prose()
    on = EviReform(idx, embedder=EMB)
    off = EviReform(idx, EviReformConfig(own_search="off"), embedder=EMB)
    allowed = ["p0", "p2", "p4", "p5", "p7"]
    pos = sorted(idx.passage_index(i) for i in allowed)
    for q in QUESTIONS:
        got = on.retrieve(q, 3, filter=allowed)
        assert set(got.ids) <= set(allowed)
        evi = [p.index for p in off.retrieve(q, 5, filter=allowed).passages]
        assert [p.index for p in got.passages] == interleave(
            evi, _own_reference(idx, q, 3, pos), 3)[0]


def test_off_an_index_without_passage_vectors_and_an_llm_choice_rank_as_the_paper():
    from evireform.roles import RoleResult

    class Chooser:  # an LLM selector's shape: its choice answered by the LLM
        def select(self, question, candidates, max_selected):
            return RoleResult([candidates[0].id], role="select", fallback=None)

    idx = _prose()
    bare = PropositionIndex.build(PASSAGES, EMB, extractor="prose", show_progress=False,
                                  passage_vectors=False)
    for q in QUESTIONS:
        paper = EviReform(idx, EviReformConfig(own_search="off"), embedder=EMB).retrieve(q, 4)
        assert paper.trace.own_search == []
        assert EviReform(bare, embedder=EMB).retrieve(q, 4).ids == paper.ids
        llm = EviReform(idx, embedder=EMB, selector=Chooser())
        llm_off = EviReform(idx, EviReformConfig(own_search="off"), embedder=EMB,
                            selector=Chooser())
        assert llm.retrieve(q, 4).ids == llm_off.retrieve(q, 4).ids  # "auto": left alone
        forced = EviReform(idx, EviReformConfig(own_search="on"), embedder=EMB,
                           selector=Chooser()).retrieve(q, 4)
        evi = [p.index for p in llm_off.retrieve(q, 8).passages]
        assert [p.index for p in forced.passages] == interleave(
            evi, _own_reference(idx, q, 4), 4)[0]
    with pytest.raises(ValueError, match="own_search must be one of"):
        EviReformConfig(own_search="yes")


def test_index_passage_vectors_flag(tmp_path, capsys):
    """``evireform index --passage-vectors``: auto embeds a prose corpus's passages, off
    leaves them out, on adds them to an index the heuristic extractor builds."""
    from evireform.cli import main
    corpus = tmp_path / "c.json"
    corpus.write_text(json.dumps(PASSAGES))
    for flag, extractor, want in (("auto", "prose", True), ("off", "prose", False),
                                  ("on", "heuristic", True), ("auto", "heuristic", False)):
        out_dir = tmp_path / f"{flag}-{extractor}.idx"
        assert main(["index", str(corpus), str(out_dir), "--embedder", "hashing-64",
                     "--extractor", extractor, "--passage-vectors", flag, "--json",
                     "--quiet"]) == 0
        got = json.loads(capsys.readouterr().out)
        assert got["passage_vectors"] is want and got["reload_identical"] is True
        assert (PropositionIndex.load(out_dir).passage_embeddings is not None) is want


def test_selector_agreement_with_a_recorded_choice():
    """The selector study's agreement figures (issue 85): precision, recall and first pick
    against the LLM's choice, over the questions it answered."""
    from types import SimpleNamespace

    from evireform.evaluation.learn_selector import agreement
    from evireform.roles import Candidate, TopScoreSelector
    cands = [Candidate(i, 1.0 - i / 10, f"fact {i}", i) for i in range(6)]
    rows = [(cands, [0, 3]), (cands, [4, 5]), (cands, None)]  # the last: no reply
    qs = [SimpleNamespace(question=f"q{i}") for i in range(3)]
    a = agreement(TopScoreSelector(2), rows, qs)  # picks 0 and 1 each time
    assert a["precision"] == pytest.approx(25.0) and a["recall"] == pytest.approx(25.0)
    assert a["top"] == pytest.approx(50.0) and a["ms"] >= 0


@pytest.mark.parametrize("shape", [(0, 8), (1, 8), (57, 16), (500, 32)])
def test_passage_topk_numpy_equals_the_kernel(shape, monkeypatch):
    """The own search's dense scan: numpy (a process without the numba kernels, small P)
    and the CPU kernel give the same ranking, with and without rows, on fresh random unit
    rows (negative cosines left out, ties by the lower position)."""
    from evireform import kernels as K
    from evireform.retriever import passage_topk
    rng = np.random.default_rng(sum(shape))
    P = rng.standard_normal(shape).astype(np.float32)
    P /= np.maximum(np.linalg.norm(P, axis=1, keepdims=True), 1e-12)
    if len(P) > 3:
        P[3] = P[1]  # a tie: the lower position first
    Q = rng.standard_normal((3, shape[1])).astype(np.float32)
    rows = np.flatnonzero(rng.random(len(P)) < 0.5)
    for n in (1, 5, 100):
        for r in (None, rows):
            monkeypatch.setattr(K, "_numba_free", lambda size, most: True)
            a = passage_topk(P, Q, n, r)
            monkeypatch.setattr(K, "_numba_free", lambda size, most: False)
            b = passage_topk(P, Q, n, r)
            assert a == b
            if len(P) > 3 and r is None and n == 100:
                assert all(row.index(1) < row.index(3) for row in a if 1 in row)


def test_the_terminal_names_the_passages_the_own_search_placed(tmp_path, capsys):
    from evireform.cli import main
    ix = _prose().save(tmp_path / "p.idx")
    q = QUESTIONS[0]
    assert main(["query", str(ix), q, "-k", "4", "--json", "--backend", "cpu"]) == 0
    rec = json.loads(capsys.readouterr().out)
    own = rec["trace"]["own_search"]
    assert own  # this question's own search places a passage
    assert main(["query", str(ix), q, "-k", "4", "--no-text", "--backend", "cpu"]) == 0
    lines = [l for l in capsys.readouterr().out.splitlines() if l[:3].strip().isdigit()]
    assert len(lines) == 4
    for line, p in zip(lines, rec["passages"]):
        assert ("found by the question's own search" in line) is (p["id"] in own), line


def test_update_adds_passage_vectors_to_an_index_built_without(tmp_path, capsys):
    """``evireform update IDX --passage-vectors``: an index without passage embeddings gets
    them (row for row a build's); with ``--add`` the new passages get theirs too; an index
    that has them is left as it was."""
    from evireform.cli import main
    ix = PropositionIndex.build(PASSAGES[:6], EMB, extractor="prose", show_progress=False,
                                passage_vectors=False).save(tmp_path / "x.idx")
    extra = tmp_path / "more.json"
    extra.write_text(json.dumps(PASSAGES[6:]))
    assert main(["update", str(ix), "--passage-vectors", "--add", str(extra), "--json",
                 "--quiet"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["passage_vectors"] == 6 and got["changes"]["added"] == 2
    back = PropositionIndex.load(ix, verify="full")
    want = {p.id: r for p, r in zip(_prose().passages, np.asarray(_prose().passage_embeddings))}
    assert [p.id for p in back.passages] == [p["id"] for p in PASSAGES]
    for p, row in zip(back.passages, np.asarray(back.passage_embeddings)):
        np.testing.assert_allclose(row, want[p.id], atol=1e-6)
    assert main(["update", str(ix), "--passage-vectors", "--json", "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["passage_vectors"] == 0
    assert arrays_equal(PropositionIndex.load(ix), back)
