"""Tenants and filters are exactly isolated: a namespace of an index, whatever the other
namespaces look like (cased beside lower-cased text) and whichever extractor built it
(auto, heuristic, phrases), ranks as the index built from that namespace's passages alone,
on every engine; and a where clause or an id list over the same propositions ranks as
their sub-index, also when two bridges tie (entity ids number the whole index, so no
tie-break may read them)."""
import numpy as np
import pytest

from evireform import Passage, Proposition, PropositionIndex
from evireform.embed import HashingEmbedder
from evireform.engine import CpuEngine
from evireform.extract import NamespaceAutoExtractor
from evireform.retriever import EviReform, EviReformConfig

from test_combinations import ENGINES, _engine, _same
from test_filters import matching

class _Jittered(HashingEmbedder):
    """Hashing features plus a small direction of each text's own (seeded by its bytes):
    like a real model's, two different texts never score exactly alike, so a ranking has no
    ties for an engine's summation order to break (the corpus keeps the lexical signal
    free of ties too: :func:`_corpus`)."""

    def encode(self, texts, **kw):
        import zlib
        X = super().encode(texts, **kw)
        noise = np.stack([np.random.default_rng(zlib.crc32(t.encode())).normal(size=self.dim)
                          for t in texts]) if len(X) else X
        X = X + 0.05 * noise.astype(np.float32)
        return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


EMB = _Jittered(256)
CFG = EviReformConfig(n_candidates=10, k_residual=2)
TOWNS = ["Adwa", "Gondar", "Axum", "Harar", "Dessie", "Jimma", "Bahir", "Mekele"]
WORDS = "amber basalt cedar dune ember fern granite heather iris juniper kelp lichen".split()


def _more(i: int, n: int) -> str:
    """Words that differ from one passage to the next (no two passages score alike)."""
    return " ".join(WORDS[(i * 5 + k * 3 + n) % len(WORDS)] for k in range(1 + (i + n) % 4))


def _corpus():
    """t0: cased Wikipedia-like text, with deliberately tied bridges ("Ethiopia" and
    "Ethiopian Highlands" start at one place of one sentence, neither mentioned outside);
    t1: the same kind of text lower-cased; a few passages without a namespace."""
    out = []
    for i, town in enumerate(TOWNS):
        out.append(Passage(f"a{i}", town, f"{town} lies in the Ethiopian Highlands of "
                           f"Ethiopia near Lake Tana{i}. It was founded by Ras Mikael in "
                           f"{1800 + i}. Its walls are {_more(i, 0)}.", metadata={"namespace": "t0",
                                                                       "year": 1800 + i}))
        # each lake's first sentence a length of its own: BM25 scores two texts of one
        # length that match the same query words exactly alike, and the jitter above does
        # not reach the lexical signal
        past = "".join(f" {WORDS[(i + k) % len(WORDS)]}" for k in range(i))
        out.append(Passage(f"b{i}", f"Lake Tana{i}", f"Lake Tana{i} feeds the Blue Nile{past}. "
                           f"Ras Mikael fished there with {town} traders of {_more(i, 1)}.",
                           metadata={"namespace": "t0", "year": 1900 + i}))
        low = f"{town} river"
        out.append(Passage(f"c{i}", low.lower(), f"the {low.lower()} crosses the old salt "
                           f"road near market town {i}. the salt road was built by the "
                           f"kebede guild in {1700 + i} with {_more(i, 2)}.", metadata={"namespace": "t1",
                                                                   "year": 1700 + i}))
        out.append(Passage(f"d{i}", f"kebede guild {i}", f"the kebede guild {i} taxed the "
                           f"salt road and the {low.lower()} ferry of {_more(i, 3)}.",
                           metadata={"namespace": "t1", "year": 1600 + i}))
    out.append(Passage("n0", "Notes", "Blue Nile trips start at Lake Tana3 in Ethiopia."))
    # two bridges tied in every key but their entity ids ("Sidamo Plateau" and "Sidamo" start
    # at one place; no other t0 passage names them), numbered in one order by the full
    # index (e0, outside t0, names Sidamo first) and in the other by t0's own index
    out.insert(0, Passage("e0", "Trade notes", "Traders from Sidamo came with coffee."))
    out.append(Passage("z0", "Qarsa", "Qarsa lies in the Sidamo Plateau, in Sidamo, far from "
                       "the coffee road.", metadata={"namespace": "t0", "year": 1850}))
    return out


QS = ["Where does the town of Qarsa lie?",
      "Who founded the town in the Ethiopian Highlands near Lake Tana2?",
      "which guild built the salt road near the adwa river?",
      "What river does the lake near Gondar feed?",
      "who taxed the ferry of the jimma river?", "Ethiopia Ras Mikael"]


def _ranks(index, engine, flt):
    r = EviReform(index, CFG, embedder=EMB, engine=engine)
    single = [r.retrieve(q, 6, filter=flt) for q in QS]
    many = r.retrieve_many(QS, 6, filter=flt)
    for a, b in zip(single, many):
        assert [p.id for p in a.passages] == [p.id for p in b.passages]
    return [[(p.id, p.score) for p in x.passages] for x in single], \
        [x.trace.residual_queries for x in single]


def test_auto_chooses_each_namespace_s_extractor_and_records_the_choice(tmp_path):
    full = PropositionIndex.build(_corpus(), EMB, show_progress=False)
    assert full.meta["extractor"] == NamespaceAutoExtractor.name
    assert full.meta["extractor_choice"]["namespaces"] == {
        "": "heuristic", '"t0"': "heuristic", '"t1"': "phrases"}
    one = PropositionIndex.build([p for p in _corpus() if p.metadata.get("namespace") == "t1"],
                                 EMB, show_progress=False)
    assert one.meta["extractor"] == "phrases-v4"  # one tenant: as before, its own choice
    # a saved auto index adds a new lower-cased tenant with its own choice
    saved = PropositionIndex.load(full.save(tmp_path / "ix"))
    grown = saved.add([Passage("new0", "x", "the old mill by the creek ground salt for the "
                               "kebede guild.", metadata={"namespace": "t2"})], EMB)
    assert grown.meta["extractor_choice"]["namespaces"]['"t2"'] == "phrases"
    assert grown.meta["extractor_choice"]["namespaces"]['"t1"'] == "phrases"


@pytest.mark.parametrize("extractor", ["auto", "heuristic", "phrases"])
@pytest.mark.parametrize("engine_kind", ENGINES)
def test_a_namespace_ranks_as_its_own_index(extractor, engine_kind, monkeypatch):
    corpus = _corpus()
    full = PropositionIndex.build(corpus, EMB, extractor=extractor, show_progress=False)
    engine = _engine(engine_kind, full, monkeypatch)
    for ns in ("t0", "t1"):
        alone = PropositionIndex.build([p for p in corpus if p.metadata.get("namespace") == ns],
                                       EMB, extractor=extractor, show_progress=False)
        want, want_q = _ranks(alone, CpuEngine(alone), None)
        got, got_q = _ranks(full, engine, {"namespace": ns})
        _same(got, want, engine_kind)
        assert got_q == want_q


@pytest.mark.parametrize("engine_kind", ENGINES)
def test_where_clauses_and_id_lists_rank_as_the_sub_index_with_tied_bridges(engine_kind,
                                                                             monkeypatch):
    corpus = _corpus()
    full = PropositionIndex.build(corpus, EMB, show_progress=False)
    g = full.graph
    ip, ix = np.asarray(g.a_indptr), np.asarray(g.a_indices)
    props = [(full.prop_texts[i], full.passage(int(full.owner[i])).id,
              [full.entity_names[e] for e in ix[ip[i]:ip[i + 1]]])
             for i in range(full.n_props)]
    engine = _engine(engine_kind, full, monkeypatch)
    for flt in ({"year": {"$gte": 1800}}, [p.id for p in corpus[1::2]] + ["a2", "a5"],
                {"$or": [{"namespace": "t1"}, {"year": 1802}]}):
        keep = matching(corpus, flt)
        rows = [i for i, (_, pid, _) in enumerate(props) if pid in keep]
        sub = PropositionIndex.from_propositions(
            [p for p in corpus if p.id in keep],
            [Proposition(props[i][0], props[i][1], tuple(props[i][2])) for i in rows],
            np.asarray(full.embeddings)[rows], EMB.name)
        want, want_q = _ranks(sub, CpuEngine(sub), None)
        got, got_q = _ranks(full, engine, flt)
        _same(got, want, engine_kind)
        assert got_q == want_q
