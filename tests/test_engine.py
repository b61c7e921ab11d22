"""The engine a retriever runs on (evireform.engine): chosen once, the same results wherever
it runs, and BGR / Hi-Q get every engine too."""
import subprocess
import sys

import numpy as np
import pytest

from evireform import BGR, EviReform, HiQ, PropositionIndex
from evireform.embed import HashingEmbedder
from evireform.engine import CpuEngine, DeviceEngine, make_engine
from evireform.kernels import BackendUnavailable
from evireform.engine import quantize, to_device

EMB = HashingEmbedder(32)
NAMES = ["Alice Smith", "Bob Jones", "Carol King", "Paris", "Rome", "Orvel Society", "Zeta"]


@pytest.fixture(scope="module")
def idx():
    ps = [{"title": NAMES[i % 7], "text": f"{NAMES[i % 7]} met {NAMES[(i * 3 + 1) % 7]} in "
           f"{1900 + i}. {NAMES[(i + 2) % 7]} founded {NAMES[(i * 5 + 3) % 7]}."}
          for i in range(30)]
    return PropositionIndex.build(ps, EMB, show_progress=False)


QS = ["Who did Alice Smith meet?", "Who founded the Orvel Society?", "Where did Carol King go?"]


def test_make_engine_picks_once(idx, monkeypatch):
    assert isinstance(make_engine(idx, "cpu"), CpuEngine)
    assert isinstance(make_engine(idx, "auto"), CpuEngine)  # small index: never the GPU
    dev = to_device(idx, "numpy")
    got = make_engine(idx, dev)  # a DeviceIndex becomes the engine that takes restrictions
    assert isinstance(got, DeviceEngine) and got.device is dev and got.takes_restriction
    mine = CpuEngine(idx)
    assert make_engine(idx, mine) is mine  # an engine object is used as it is
    with pytest.raises(ValueError, match="engine"):
        make_engine(idx, object())
    with pytest.raises(ValueError, match="backend must be one of"):
        make_engine(idx, "tpu")
    import evireform.engine as E
    if not E.gpu_usable():
        with pytest.raises(BackendUnavailable):
            make_engine(idx, "gpu")
    # the documented auto rule: big enough and a usable device -> the device engine
    monkeypatch.setattr(E.K.config, "GPU_AUTO_MIN_PROPS", idx.n_props)
    monkeypatch.setattr(E, "gpu_usable", lambda: True)
    monkeypatch.setattr(E, "to_device", lambda index, **kw: dev)
    assert make_engine(idx, "auto").device is dev
    assert isinstance(make_engine(idx, "auto", searcher=CpuEngine(idx)), CpuEngine)
    with pytest.raises(ValueError, match="not both"):
        EviReform(idx, embedder=EMB, engine=dev, backend="cpu")


def test_one_shot_runs_numpy_only_where_it_answers_as_the_cpu(idx, monkeypatch):
    """make_engine(..., one_shot=True): the numpy device engine for an "auto" backend on a
    small index without HNSW in a process without numba; the CPU engine otherwise."""
    import evireform.engine as E
    monkeypatch.setattr(E.K, "_numba_free", lambda size, most: size <= most)
    got = make_engine(idx, "auto", one_shot=True)
    assert isinstance(got, DeviceEngine) and not got.device.ns.on_device
    assert isinstance(make_engine(idx, "auto"), CpuEngine)  # not one-shot
    assert isinstance(make_engine(idx, "cpu", one_shot=True), CpuEngine)  # asked for
    assert isinstance(make_engine(idx, "auto", precision="float32", one_shot=True), CpuEngine)
    monkeypatch.setattr(E.K.config, "ONE_SHOT_NUMPY_PROPS", idx.n_props - 1)
    assert isinstance(make_engine(idx, "auto", one_shot=True), CpuEngine)  # too large
    monkeypatch.undo()
    monkeypatch.setattr(E.K, "_numba_free", lambda size, most: size <= most)
    import types  # an HNSW graph: its approximate search is the CPU engine's alone
    monkeypatch.setattr(E, "structures_of", lambda i: types.SimpleNamespace(hnsw=object()))
    assert isinstance(make_engine(idx, "auto", one_shot=True), CpuEngine)
    monkeypatch.undo()
    import evireform.kernels._cpu  # noqa: F401  (numba is loaded: its kernels answer)
    assert isinstance(make_engine(idx, "auto", one_shot=True), CpuEngine)


def test_auto_on_a_small_index_does_not_import_cupy(idx, tmp_path):
    idx.save(tmp_path / "ix")
    code = ("import sys; from evireform import EviReform, PropositionIndex\n"
            "from evireform.embed import HashingEmbedder\n"
            f"i = PropositionIndex.load({str(tmp_path / 'ix')!r})\n"
            "EviReform(i, embedder=HashingEmbedder(32)).retrieve('Who met Rome?')\n"
            "print('cupy' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip() == "False", r.stderr


@pytest.mark.parametrize("make", [
    lambda i: BGR(i, EMB, engine=to_device(i, "numpy")),
    lambda i: BGR(i, EMB, merge="union", engine=to_device(i, "numpy")),
    lambda i: HiQ(i, EMB, engine=to_device(i, "numpy")),
    lambda i: EviReform(i, embedder=EMB, engine=to_device(i, "numpy"))])
def test_every_retriever_gives_the_same_ranking_on_every_engine(idx, make):
    on_device = make(idx)
    on_cpu = type(on_device)(idx, EMB) if not isinstance(on_device, EviReform) else \
        EviReform(idx, embedder=EMB)
    if isinstance(on_device, BGR):
        on_cpu = BGR(idx, EMB, merge=on_device.merge)
    for a, b in zip(on_device.retrieve_many(QS, 5), on_cpu.retrieve_many(QS, 5)):
        assert a.ids == b.ids
        np.testing.assert_allclose([p.score for p in a.passages],
                                   [p.score for p in b.passages], rtol=1e-6, atol=1e-12)


def test_make_engine_is_the_one_reader_of_backend_and_precision():
    """One vocabulary (auto|float32|int8|fp16): int8 runs on the CPU, fp16 on the GPU, and a
    precision that the chosen backend cannot run is refused, never ignored."""
    import evireform.kernels as K
    from evireform.engine import PRECISIONS, CpuEngine, make_engine
    from evireform.embed import HashingEmbedder
    from evireform import PropositionIndex
    emb = HashingEmbedder(32)
    idx = PropositionIndex.build([f"Alpha {i} met Beta {i % 5} in Rome {i % 3}." for i in
                                  range(30)], emb, show_progress=False, hnsw=False)
    Q = emb.encode(["Alpha 3 met whom?", "Rome 2"])
    assert PRECISIONS == ("auto", "float32", "int8", "fp16")
    with pytest.raises(ValueError, match="needs int8 codes"):
        make_engine(idx, precision="int8")
    with pytest.raises(ValueError, match="precision must be one of"):
        make_engine(idx, precision="fp8")
    with pytest.raises(ValueError, match="fp16' runs on the GPU"):
        make_engine(idx, "cpu", precision="fp16")
    with pytest.raises(ValueError, match="int8' runs on the CPU"):
        make_engine(idx, "gpu", precision="int8")
    with pytest.raises(ValueError, match="keeps its own"):
        make_engine(idx, to_device(idx, "numpy"), precision="float32")
    want = make_engine(idx, precision="float32").search_batch(Q, 10)
    quantize(idx, "int8")
    calls = []
    real = K.quantized_topk_batch
    import evireform.engine.structures as I
    try:
        I.quantized_topk_batch = lambda *a, **k: calls.append(1) or real(*a, **k)
        e8, e32 = make_engine(idx, precision="int8"), make_engine(idx, precision="float32")
        assert isinstance(e8, CpuEngine) and e8.precision == "int8"
        got8 = e8.search_batch(Q, 10)
        assert calls == [1]  # the codes were scanned
        got32 = e32.search_batch(Q, 10)
        assert calls == [1]  # float32: the codes were not
        assert make_engine(idx).precision == "auto"
    finally:
        I.quantized_topk_batch = real
    for got in (got8, got32):
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], rtol=1e-6)
    assert "search_precision" not in {f.name for f in __import__("dataclasses").fields(idx)}
    from evireform.engine import Engine
    assert isinstance(e8, Engine) and isinstance(make_engine(idx, to_device(idx, "numpy")),
                                                 Engine)
    assert not isinstance(object(), Engine)
    dev = to_device(idx, "numpy", precision="fp16")
    with pytest.raises(ValueError, match="float32.*fp16"):
        to_device(idx, "numpy", precision="fp32")
    assert dev.precision == "fp16" and to_device(idx, "numpy", precision="float32") is \
        to_device(idx, "numpy", precision="float32")


def test_score_parts_come_from_the_engine_or_the_caller_alike(idx):
    """An engine with ``takes_split`` returns each ranked passage's parts with its ranking
    (unfiltered, filtered, without propagation), bitwise score_parts over its passages; an
    engine of your own whose rank_batch takes no ``split=`` gets none passed and the
    retriever computes the parts: the same results either way."""
    import evireform.kernels as K
    from evireform.engine import pack_seeds, rank, restrict

    eng = CpuEngine(idx)
    assert eng.takes_split
    rng = np.random.default_rng(5)
    seeds = [(rng.choice(idx.n_props, n, replace=False), rng.random(n)) for n in (0, 3, 7)]
    indptr, ids, vals = pack_seeds(seeds)
    split = [0, 1, 9]
    for r in (None, restrict(eng, [idx.passage(j).id for j in range(0, idx.n_passages, 2)])):
        for propagation, alpha in ((True, 0.5), (False, 1.0)):
            got = rank(eng, indptr, ids, vals, alpha, 6, propagation=propagation,
                       restriction=r, split=split)
            assert len(got) == 4
            want = rank(eng, indptr, ids, vals, alpha, 6, propagation=propagation,
                        restriction=r)
            assert len(want) == 2
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])
            for x, y in zip(got[2:], K.score_parts(idx.pmap, indptr, ids, vals, split, alpha,
                                                    got[0])):
                np.testing.assert_array_equal(x.view(np.int64), y.view(np.int64))

    class Plain:  # the engine protocol as it was: rank_batch takes no split=
        n_props = idx.n_props

        def search_batch(self, Q, k):
            return eng.search_batch(Q, k)

        def rank_batch(self, indptr, ids, vals, alpha, k, *, propagation=True):
            return eng.rank_batch(indptr, ids, vals, alpha, k, propagation=propagation)

    plain = EviReform(idx, embedder=EMB, engine=Plain()).retrieve_many(QS, 5)
    ours = EviReform(idx, embedder=EMB).retrieve_many(QS, 5)
    assert [r.passages for r in plain] == [r.passages for r in ours]
    assert any(p.from_question > 0 for r in ours for p in r.passages)


def test_a_scope_checks_and_clips_k_once_for_a_batch(idx):
    from evireform.engine import Scope
    eng = make_engine(idx, "cpu")
    whole = Scope.of(eng, idx, None, 10**9)
    assert whole.k == idx.n_passages and whole.restriction is None and whole.allowed is None
    engine, restriction = whole  # what EviReform.scope returned before it was a Scope
    assert engine is eng and restriction is None
    some = [p.id for p in idx.passages[:3]]
    sc = Scope.of(eng, idx, some, 10)
    assert sc.k == 3 and sc.n_passages == 3 and sc.allowed.tolist() == [0, 1, 2]
    assert sc.graph is sc.restriction.graph and whole.graph is idx.graph
    for bad in (0, -1, True, 2.0, "3"):
        with pytest.raises(ValueError, match="k must be a positive integer"):
            Scope.of(eng, idx, some, bad)
    # a bad k is named before the filter is read (an unknown id would be another error)
    with pytest.raises(ValueError, match="k must be"):
        Scope.of(eng, idx, ["no such id"], 0)
    # the scope's methods clip their own counts: a search to the propositions, a ranking
    # to the matching passages; the filtered ranking holds the matching passages only
    H = EMB.encode(QS)
    ids, scores = sc.search(H, 10**6)
    assert ids.shape == (3, sc.restriction.n_props) and scores.dtype == np.float64
    seeds = [(i[(i >= 0) & (s > 0)], s[(i >= 0) & (s > 0)]) for i, s in zip(*sc.search(H, 5))]
    from evireform.engine import pack_seeds
    P, S = sc.rank(*pack_seeds(seeds), 0.5)
    assert P.shape == (3, 3) and set(P.ravel().tolist()) <= {0, 1, 2}
    P, _ = whole.rank(*pack_seeds(seeds), 0.5, 10**9)
    assert P.shape[1] == idx.n_passages


def test_a_huge_or_bad_k_is_judged_alike_by_every_retriever(idx):
    """EviReform, BGR and Hi-Q take k through their scope: clipped to the passages a filter
    matches, refused alike when it is not a positive integer."""
    some = [p.id for p in idx.passages[:4]]
    for r in (EviReform(idx, embedder=EMB), BGR(idx, EMB), HiQ(idx, EMB)):
        got = r.retrieve(QS[0], k=10**9, filter=some)
        assert sorted(p.id for p in got.passages) == sorted(some), type(r).__name__
        for bad in (0, True, 1.5):
            with pytest.raises(ValueError, match="k must be a positive integer"):
                r.retrieve_many(QS, k=bad)
