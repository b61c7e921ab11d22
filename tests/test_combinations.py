"""One path for every question: each engine x each filter x each entry point gives the ids and
scores of the reference (the exact CPU engine over the full index without a filter; with a
filter, over the sub-index built from the matching passages alone).

The engine runs the filtered question itself (a restriction is an argument of its search
and ranking), so this is what catches a filter that drops the engine the user chose."""
import numpy as np
import pytest

from evireform import PropositionIndex
from evireform.embed import HashingEmbedder
from evireform.engine import CpuEngine, DeviceEngine, make_engine
from evireform.filters import compile_filter
from evireform.retriever import EviReform, EviReformConfig
from evireform.engine.shards import ShardedSearcher
from evireform.strategies import BGR, HiQ

from helpers import untimed
from test_filters import DIM, random_corpus, sub_index
from evireform.engine import search_index, quantize, build_hnsw, to_device

QS = ["Alice Smith met whom?", "Paris France", "who is Carl Jung", "Nile River Delta Inc",
      "Eve Park and Gina Lane", "Fjord Bay"]
CFG = EviReformConfig(n_candidates=8, k_residual=3)


@pytest.fixture(scope="module")
def corpus():
    return random_corpus(np.random.default_rng(20261201), 60)


def _engine(kind, full, monkeypatch):
    """The engine of ``kind`` over ``full`` (a fresh index object per engine)."""
    if kind == "cpu exact":
        return CpuEngine(full)
    if kind == "cpu int8":
        quantize(full, "int8")
        return CpuEngine(full)
    if kind == "cpu hnsw":
        build_hnsw(full)
        # HNSW for every search (filtered ones too): a graph this small recalls exactly
        from evireform.kernels import config as kconfig
        monkeypatch.setattr(kconfig, "EXACT_SEARCH_MAX", 0)
        return CpuEngine(full)
    if kind == "sharded":
        return CpuEngine(full, ShardedSearcher.from_index(full, 3))
    if kind == "device (numpy)":
        return make_engine(full, to_device(full, "numpy"))
    raise AssertionError(kind)


ENGINES = ["cpu exact", "cpu int8", "cpu hnsw", "sharded", "device (numpy)"]
FILTERS = {"none": None, "where": {"lang": {"$in": ["de", "fr"]}},
           "ids": "every third passage", "namespace": {"namespace": "t1"}}


def _filter(name, passages):
    flt = FILTERS[name]
    if flt == "every third passage":
        return [p.id for p in passages[::3]]
    return flt


def _reference(passages, props, emb, flt):
    if flt is None:
        keep = {p.id for p in passages}
    else:
        f = compile_filter(flt)
        keep = set(f.ids) if f.ids is not None else \
            {p.id for p in passages if f.predicate(p.metadata)}
    return sub_index(passages, props, emb, keep)


def _full(passages, props, emb):
    return PropositionIndex.from_propositions(passages, props, emb, HashingEmbedder(DIM).name,
                                              hnsw=False)


def _ranking(results):
    return [[(p.id, p.score) for p in r.passages] for r in results]


def _same(got, want, engine_kind="cpu exact"):
    """Same ids, same scores: to rounding on the CPU engines (bitwise-equal proposition
    scores, float64 sums), to float32 rounding on the device (its GEMM sums the dot products
    in another order)."""
    assert [[i for i, _ in r] for r in got] == [[i for i, _ in r] for r in want]
    rtol = 1e-5 if engine_kind.startswith("device") else 1e-9
    for a, b in zip(got, want):
        np.testing.assert_allclose([s for _, s in a], [s for _, s in b], rtol=rtol, atol=1e-12)


ENTRY = ["retrieve", "retrieve_many", "bgr", "hiq", "langchain", "llama_index"]


def _run(entry, index, engine, flt, emb_q):
    if entry == "retrieve":
        r = EviReform(index, CFG, embedder=emb_q, engine=engine)
        return _ranking([r.retrieve(q, 8, filter=flt) for q in QS])
    if entry == "retrieve_many":
        r = EviReform(index, CFG, embedder=emb_q, engine=engine)
        return _ranking(r.retrieve_many(QS, 8, filter=flt))
    if entry == "bgr":
        return _ranking(BGR(index, emb_q, engine=engine).retrieve_many(QS, 6, filter=flt))
    if entry == "hiq":
        return _ranking(HiQ(index, emb_q, engine=engine).retrieve_many(QS, 6, filter=flt))
    r = EviReform(index, CFG, embedder=emb_q, engine=engine)
    if entry == "langchain":
        pytest.importorskip("langchain_core")
        from evireform.integrations.langchain import EviReformRetriever
        lc = EviReformRetriever(retriever=r, k=8, filter=flt)
        return [[(d.metadata["passage_id"], d.metadata["score"]) for d in docs]
                for docs in lc.batch(QS)]
    pytest.importorskip("llama_index.core")
    from evireform.integrations.llama_index import EviReformRetriever
    li = EviReformRetriever(r, similarity_top_k=8, filter=flt)
    return [[(n.node.id_, n.score) for n in li.retrieve(q)] for q in QS]


@pytest.mark.parametrize("filter_name", list(FILTERS))
@pytest.mark.parametrize("engine_kind", ENGINES)
def test_every_engine_and_filter_equals_the_reference(corpus, engine_kind, filter_name,
                                                      monkeypatch):
    passages, props, emb = corpus
    emb_q = HashingEmbedder(DIM)
    flt = _filter(filter_name, passages)
    ref = _reference(passages, props, emb, flt)
    full = _full(passages, props, emb)
    engine = _engine(engine_kind, full, monkeypatch)
    for entry in ("retrieve", "retrieve_many", "bgr", "hiq"):
        want = _run(entry, ref, CpuEngine(ref), None, emb_q)
        _same(_run(entry, full, engine, flt, emb_q), want, engine_kind)


@pytest.mark.parametrize("entry", ["langchain", "llama_index"])
@pytest.mark.parametrize("engine_kind", ["cpu exact", "device (numpy)"])
def test_the_adapters_run_the_engine_they_are_given(corpus, entry, engine_kind, monkeypatch):
    passages, props, emb = corpus
    emb_q = HashingEmbedder(DIM)
    for name in ("none", "namespace"):
        flt = _filter(name, passages)
        ref = _reference(passages, props, emb, flt)
        full = _full(passages, props, emb)
        want = _run("retrieve", ref, CpuEngine(ref), None, emb_q)
        got = _run(entry, full, _engine(engine_kind, full, monkeypatch), flt, emb_q)
        _same(got, want, engine_kind)


def test_a_filter_never_swaps_the_engine(corpus):
    """The engine the user chose answers the filtered question: a counting engine sees
    every search and ranking, with the restriction."""
    passages, props, emb = corpus
    full = _full(passages, props, emb)
    seen = []

    class Counting(CpuEngine):
        def search_batch(self, Q, k, *, restriction=None):
            seen.append(("search", restriction is not None))
            return super().search_batch(Q, k, restriction=restriction)

        def rank_batch(self, *a, restriction=None, **kw):
            seen.append(("rank", restriction is not None))
            return super().rank_batch(*a, restriction=restriction, **kw)

    r = EviReform(full, CFG, embedder=HashingEmbedder(DIM), engine=Counting(full))
    r.retrieve(QS[0], 5, filter={"namespace": "t1"})
    assert seen and all(flag for _, flag in seen)
    assert {kind for kind, _ in seen} == {"search", "rank"}


def test_an_engine_that_cannot_take_a_restriction_is_refused_not_bypassed(corpus):
    passages, props, emb = corpus
    full = _full(passages, props, emb)

    class Plain:  # the engine protocol without restrictions
        n_props = full.n_props

        def __init__(self):
            self.inner = CpuEngine(full)

        def search_batch(self, Q, k):
            return self.inner.search_batch(Q, k)

        def rank_batch(self, *a, **kw):
            return self.inner.rank_batch(*a, **kw)

    r = EviReform(full, CFG, embedder=HashingEmbedder(DIM), engine=Plain())
    assert r.retrieve(QS[0], 5).passages  # unfiltered questions run on it
    with pytest.raises(ValueError, match="does not take restriction"):
        r.retrieve(QS[0], 5, filter={"namespace": "t1"})
    with pytest.raises(ValueError, match="does not take restriction"):
        BGR(full, HashingEmbedder(DIM), engine=Plain()).retrieve_many(
            QS[:1], 5, filter={"namespace": "t1"})
    # a sharded searcher of your own without rows= is refused under a filter, by name
    class OldSearcher:
        n_props = full.n_props

        def search_batch(self, Q, k):
            return search_index(full, Q, k)

    r = EviReform(full, CFG, embedder=HashingEmbedder(DIM), searcher=OldSearcher())
    with pytest.raises(ValueError, match="OldSearcher cannot search some rows"):
        r.retrieve(QS[0], 5, filter={"namespace": "t1"})


def test_the_device_engine_caches_one_graph_per_filter(corpus):
    passages, props, emb = corpus
    full = _full(passages, props, emb)
    eng = make_engine(full, to_device(full, "numpy"))
    assert isinstance(eng, DeviceEngine)
    r = EviReform(full, CFG, embedder=HashingEmbedder(DIM), engine=eng)
    for _ in range(2):
        r.retrieve_many(QS, 5, filter={"namespace": "t1"})
        r.retrieve_many(QS, 5, filter={"lang": "de"})
    assert len(eng._graphs) == 2
    g = next(iter(eng._graphs.values()))[1]
    assert g.A is eng.device.graph.A  # the incidence is shared, only the degrees differ


#: the service's engine for each kind: the options ``serve`` takes (``query`` takes the same
#: ones), or an engine factory (a sharded searcher, the device on the numpy namespace)
SERVED = {"cpu exact": dict(backend="cpu", precision="float32"),
          "cpu int8": dict(backend="cpu", precision="int8"),
          "cpu hnsw": dict(backend="cpu", precision="float32"),
          "sharded": dict(backend=lambda i: CpuEngine(i, ShardedSearcher.from_index(i, 3))),
          "device (numpy)": dict(backend=lambda i: make_engine(i, to_device(i, "numpy")))}


@pytest.mark.parametrize("filter_name", list(FILTERS))
@pytest.mark.parametrize("engine_kind", ENGINES)
def test_the_service_and_query_json_equal_the_reference(corpus, engine_kind, filter_name,
                                                        tmp_path, capsys, monkeypatch):
    """The two doors that load an index themselves, on each engine: the service's /query
    (``serve --backend --precision``, or an engine factory) and ``evireform query --json``
    with the same options."""
    import asyncio
    import json
    import httpx
    from evireform.cli import main
    from evireform.service import RetrievalService, create_app
    passages, props, emb = corpus
    emb_q = HashingEmbedder(DIM)
    flt = _filter(filter_name, passages)
    ref = _reference(passages, props, emb, flt)
    want = _ranking(EviReform(ref, EviReformConfig(), embedder=emb_q).retrieve_many(QS[:3], 8))
    full = _full(passages, props, emb)
    if engine_kind in ("cpu int8", "cpu hnsw"):  # the structures saved with the index
        _engine(engine_kind, full, monkeypatch)
    ix = full.save(tmp_path / "ix")
    body = {} if flt is None else {"filter": flt}
    opts = SERVED[engine_kind]
    svc = RetrievalService(ix, emb_q, **opts)
    assert svc.gen.engine.kind == ("gpu" if engine_kind.startswith("device") else "cpu")

    async def ask():
        await svc.start()
        try:
            transport = httpx.ASGITransport(app=create_app(svc))
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                return [(await c.post("/query", json={"question": q, "k": 8, **body})).json()
                        for q in QS[:3]]
        finally:
            await svc.stop()
    served = asyncio.run(ask())
    got = [[(p["id"], p["score"]) for p in b["passages"]] for b in served]
    _same(got, want, engine_kind)
    if callable(opts["backend"]):
        return  # no command-line spelling: the service with a factory is the library's door
    cli, records = [], []
    for q in QS[:3]:
        args = ["query", str(ix), q, "-k", "8", "--embedder", f"hashing-{DIM}", "--json",
                "--backend", opts["backend"], "--precision", opts["precision"]]
        if flt is not None:
            args += ["--filter", json.dumps(flt)]
        assert main(args) == 0
        rec = json.loads(capsys.readouterr().out)
        records.append(rec)
        cli.append([(p["id"], p["score"]) for p in rec["passages"]])
    _same(cli, want)
    assert [untimed(b) for b in served] == [
        untimed(dict(rec, generation=0, took_ms=b["took_ms"]))
        for rec, b in zip(records, served)]  # /query answers like query
    # one record shape: the service's response is the CLI's record plus when it ran
    for b, rec in zip(served, records):
        assert set(b) - set(rec) == {"generation", "took_ms"} and set(rec) <= set(b)
        assert set(rec) == {"question", "passages", "trace"}
        assert set(rec["trace"]) == {"method", "score", "residual_queries", "bridges",
                                     "beta", "role_events", "timings_ms", "hits",
                                     "own_search"}
        # dense and lexical together: the question's hits each way, then each residual
        # query's, every hit a passage the filter lets through
        hits = rec["trace"]["hits"]
        assert [h["query"] for h in hits] == [rec["question"]] + \
            rec["trace"]["residual_queries"]
        allowed = {p.id for p in ref.passages}
        assert all(x["passage"] in allowed for h in hits for x in h["dense"] + h["lexical"])
        assert len(rec["trace"]["bridges"]) == len(rec["trace"]["residual_queries"])
        assert rec["trace"]["method"] == "evireform"
        assert set(b["trace"]["timings_ms"]) == set(rec["trace"]["timings_ms"])
        assert b["question"] == rec["question"]
        assert untimed(b)["trace"] == untimed(rec)["trace"]
        assert [set(p) for p in b["passages"]] == [set(p) for p in rec["passages"]]


def test_the_service_serves_what_evireform_update_wrote(tmp_path, capsys):
    """One update flow: a deletion and an addition made by ``evireform update`` (another
    writer than the service) are served from the next question on, and the service's own
    /update of a phrases-built index runs the same flow (the index's recorded extractor)."""
    import asyncio
    from evireform.cli import main
    from evireform.extract import PhraseExtractor
    from evireform.service import RetrievalService
    emb_q = HashingEmbedder(DIM)
    recs = [{"id": f"p{i}", "title": f"Town {i}",
             "text": f"Town {i} lies on the river Ouse {i}. The mayor of Town {i} is Ann {i}."}
            for i in range(12)]
    ix = PropositionIndex.build(recs, emb_q, extractor=PhraseExtractor(),
                                show_progress=False).save(tmp_path / "ix")
    (tmp_path / "gone.txt").write_text("p3\n")
    (tmp_path / "new.jsonl").write_text(
        '{"id": "n1", "title": "Harbour", "text": "Harbour town has a lighthouse keeper."}\n')
    svc = RetrievalService(ix, emb_q)

    async def run():
        await svc.start()
        try:
            first, g0 = await svc.query("Who is the mayor of Town 3?", 12)
            assert "p3" in first.ids and g0 == 0
            assert main(["update", str(ix), "--delete", str(tmp_path / "gone.txt"),
                         "--add", str(tmp_path / "new.jsonl"), "--quiet"]) == 0
            after, g1 = await svc.query("Who is the mayor of Town 3?", 13)
            lit, _ = await svc.query("Which town has a lighthouse keeper?", 3)
            own = await svc.update(add=[{"id": "n2", "title": "Dock",
                                         "text": "The Dock has a crane."}])
            dock, g3 = await svc.query("The Dock has a crane.", 3)
            return after, g1, lit, own, dock, g3
        finally:
            await svc.stop()
    after, g1, lit, own, dock, g3 = asyncio.run(run())
    capsys.readouterr()
    assert g1 == 1 and "p3" not in after.ids and len(after.ids) == 12
    assert lit.ids[0] == "n1"
    assert own["generation"] == 2 and own["changes"]["added"] == 1 and g3 == 2
    assert "n2" in dock.ids
    # the service's own update is served from the files it saved, memory-mapped
    assert isinstance(svc.gen.index.embeddings, np.memmap)
    saved = PropositionIndex.load(ix)
    assert saved.meta["extractor"] == PhraseExtractor().name and saved.n_passages == 13
