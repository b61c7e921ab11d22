"""The result record (evireform.records): one trace protocol for every method, the same record
from ``query --json`` and the service's ``/query``, and the service's schema generated from it."""
import asyncio
import json

import pytest

from evireform import PropositionIndex
from evireform.application import METHODS
from evireform.embed import HashingEmbedder
from evireform.records import SCORE_MEANING, ResultRecord
from evireform.strategies import STRATEGY_SETTINGS, HiQ, HiQNode
from helpers import untimed

EMB = HashingEmbedder(64)
DOCS = [
    {"id": "a", "title": "Orvel Society", "text": "The Orvel Society was founded by Mara Quist "
     "in Lindholm."},
    {"id": "b", "title": "Mara Quist", "text": "Mara Quist was born in Tessaly and studied "
     "botany at Lindholm College."},
    {"id": "c", "title": "Tessaly", "text": "Tessaly is a harbour town on the Vell river."},
    {"id": "d", "title": "Lindholm College", "text": "Lindholm College was opened in 1821 by "
     "the Orvel Society."},
    {"id": "e", "title": "Vell river", "text": "The Vell river flows into the Grey Sound."},
    {"id": "f", "title": "Grey Sound", "text": "Grey Sound is a bay known for its lighthouse."},
]
QUESTION = "Which river flows through the birthplace of the founder of the Orvel Society?"


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("records")
    return PropositionIndex.build(DOCS, EMB, show_progress=False).save(d / "ix")


def _method_of(name):
    if name == "evireform":
        return "evireform"
    cls, settings, _ = STRATEGY_SETTINGS[name]
    return settings.get("kind") or cls.name  # a one-search method is named by its kind


def _check_shape(rec, method):
    """The record validates against its declared type, and the trace is the method's."""
    from pydantic import TypeAdapter
    TypeAdapter(ResultRecord).validate_python(rec, strict=True)
    tr = rec["trace"]
    assert tr["method"] == method and tr["score"] == SCORE_MEANING[method]
    ids = {d["id"] for d in DOCS}
    if method == "bgr":
        assert tr["forward"] and set(tr["forward"] + tr["backward"]) <= ids
        assert all(len(e) == 2 and set(e) <= ids for e in tr["intersection"])
        assert len(tr["queries"]) == len(tr["forward"]) - 1
    elif method == "hiq":
        root = tr["tree"]
        assert root["query"] == rec["question"] and root["depth"] == 0
        stack = [root]
        while stack:
            n = stack.pop()
            assert set(n["passages"]) <= ids and n["status"]
            stack.extend(n["children"])
        assert tr["ranking"] in ("interleave", "resolved_first")
    elif method in ("bm25", "dense", "hybrid"):  # one search: nothing but its timings
        assert set(tr) == {"method", "score", "timings_ms"}
        scores = [p["score"] for p in rec["passages"]]
        assert scores == sorted(scores, reverse=True) and scores[0] > 0
    else:
        assert isinstance(tr["residual_queries"], list)


@pytest.mark.parametrize("method", METHODS)
def test_query_json_and_the_service_give_one_record_per_method(index_dir, method, capsys):
    from evireform.cli import main
    assert main(["query", str(index_dir), QUESTION, "-k", "4", "--embedder", "hashing-64",
                 "--json", "--method", method]) == 0
    rec = json.loads(capsys.readouterr().out)
    _check_shape(rec, _method_of(method))
    import httpx
    from evireform.service import RetrievalService, create_app
    svc = RetrievalService(index_dir, EMB)

    async def ask():
        await svc.start()
        try:
            transport = httpx.ASGITransport(app=create_app(svc))
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                return (await c.post("/query", json={"question": QUESTION, "k": 4,
                                                     "method": method})).json()
        finally:
            await svc.stop()
    served = asyncio.run(ask())
    assert served.pop("generation") == 0 and served.pop("took_ms") >= 0
    assert set(served["trace"]["timings_ms"]) == set(rec["trace"]["timings_ms"])
    assert untimed(served) == untimed(rec)


def test_the_service_schema_is_generated_from_the_record(index_dir):
    """The OpenAPI schema's /query response names every trace of the protocol (generated from
    evireform.records, not restated)."""
    from evireform.service import RetrievalService, create_app
    spec = create_app(RetrievalService(index_dir, EMB)).app.openapi()
    names = set(spec["components"]["schemas"])
    assert {"EviReformTraceRecord", "BGRTraceRecord", "HiQTraceRecord", "HiQNodeRecord",
            "SearchTraceRecord", "PassageRecord"} <= names, names
    hiq = spec["components"]["schemas"]["HiQTraceRecord"]["properties"]
    assert {"tree", "ranking", "role_events", "method", "score"} <= set(hiq)


@pytest.mark.parametrize("ranking, want", [("interleave", ["a", "d", "b", "e", "c", "f"]),
                                           ("resolved_first", ["a", "b", "c", "d", "e", "f"])])
def test_hiq_reads_its_ranking_off_the_tree(index_dir, ranking, want, monkeypatch):
    """A prerequisite that resolved (passages a, b, c) and a dependent that did not (d, e,
    f): interleaved, the dependent's evidence reaches rank 2; resolved first, rank 4."""
    idx = PropositionIndex.load(index_dir)
    pos = {d["id"]: j for j, d in enumerate(DOCS)}
    tree = HiQNode(QUESTION, 0, "expanded", children=[
        HiQNode("q1", 1, "resolved", "Mara Quist", [pos[x] for x in "abc"]),
        HiQNode("q2", 1, "failed", None, [pos[x] for x in "def"])])
    hiq = HiQ(idx, EMB, ranking=ranking)
    monkeypatch.setattr(hiq, "_solve", lambda *a, **k: tree)
    res = hiq.retrieve(QUESTION, 6)
    assert res.ids == want
    assert res.to_dict()["trace"]["ranking"] == ranking
    with pytest.raises(ValueError, match="ranking must be one of"):
        HiQ(idx, EMB, ranking="best")
