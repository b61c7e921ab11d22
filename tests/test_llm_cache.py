"""The reply cache and the replays (evireform.llm.cache): a repeated call answered from
the cache, offline runs from imported replies, the recorded replies matched by key."""

import json

import pytest
from llm_common import CANDS, endpoint  # noqa: F401

from evireform import Passage
from evireform.llm import (
    LLMClient,
    LLMConfig,
    LLMReformulator,
    LLMSelector,
)


def test_cache_answers_repeated_calls(endpoint, tmp_path):
    client, script = endpoint([{"content": json.dumps({"selected": [1]})}],
                              cache_path=str(tmp_path / "c.sqlite"))
    a = LLMSelector(client).select("q", CANDS, 12)
    b = LLMSelector(client).select("q", CANDS, 12)
    assert list(a) == list(b) == [10] and len(script.requests) == 1
    assert client.usage["select"].cache_hits == 1
    # a new client on the same cache file needs no call at all
    client2 = LLMClient(LLMConfig(base_url=client.config.base_url, model="scripted",
                                  cache_path=str(tmp_path / "c.sqlite")))
    assert list(LLMSelector(client2).select("q", CANDS, 12)) == [10]
    assert len(script.requests) == 1


def test_offline_mode_with_imported_replies_reproduces_online_run(endpoint, tmp_path):
    """Online run -> export; a fresh offline run writes pending requests and falls back;
    after importing the replies the offline run equals the online one exactly."""
    from evireform import Proposition, PropositionIndex
    from evireform.embed import HashingEmbedder
    from evireform.llm import ReplyCache
    from evireform.retriever import EviReform
    emb = HashingEmbedder(64)
    ps = [Passage(str(i), f"T{i}", f"text {i}") for i in range(6)]
    props = [Proposition(f"fact {i} about {'Alice' if i % 2 else 'Bob'}", str(i),
                         ("Alice" if i % 2 else "Bob", f"E{i}")) for i in range(6)]
    idx = PropositionIndex.from_propositions(ps, props, emb.encode([p.text for p in props]),
                                             emb.name)
    questions = ["fact about Alice", "fact about Bob", "fact 3"]
    every = {"selected": [2, 1], "queries": ["fact 4 about Bob"], "sufficient": True}
    online_db = str(tmp_path / "online.sqlite")
    client, script = endpoint([], cache_path=online_db)
    script.default = {"content": json.dumps(every)}

    def run(c):
        r = EviReform(idx, embedder=emb, selector=LLMSelector(c), reformulator=LLMReformulator(c))
        return [(x.ids, [p.score for p in x.passages], x.trace.residual_queries,
                 x.trace.role_events) for x in r.retrieve_many(questions, 5)]

    online = run(client)
    assert all(ev == [] for *_, ev in online)
    exported = tmp_path / "replies.jsonl"
    assert ReplyCache(online_db).export_jsonl(exported) == 6  # 3 selections + 3 reformulations

    offline_cfg = LLMConfig(model="scripted", offline=True, cache_path=str(tmp_path / "off.sqlite"),
                            pending_path=str(tmp_path / "pending.jsonl"))
    first = run(LLMClient(offline_cfg))
    assert all(any("fallback:OfflineMiss" in e for e in ev) for *_, ev in first)
    pending = [json.loads(l) for l in open(tmp_path / "pending.jsonl")]
    assert {p["role"] for p in pending} == {"select", "reformulate"}
    n_requests = len(script.requests)
    ReplyCache(offline_cfg.cache_path).import_jsonl(exported)
    replay = run(LLMClient(offline_cfg))
    assert replay == online and len(script.requests) == n_requests  # no call was made


def test_replay_index_matches_by_key_then_by_content():
    from evireform.llm import ReplayIndex
    sysmsg = {"role": "system", "content": "pick"}

    def sel(lines):
        return [sysmsg, {"role": "user", "content": "Question: <data>q</data>\nCandidates:\n"
                         + "\n".join(f"[{n}] <data>{t}</data>" for n, t in enumerate(lines, 1))}]
    rec = {"key": "k1", "role": "select", "messages": sel(["a", "b", "c"]),
           "reply": {"selected": [3, 1]}}
    ref = {"key": "k2", "role": "reformulate", "messages": [
        sysmsg, {"role": "user", "content": "Question: <data>q</data>\nPassages:\n"
                 "<data>P1</data>\n<data>P2</data>"}], "reply": {"queries": ["x"]}}
    idx = ReplayIndex([rec, ref])
    assert idx.match("k1", "select", sel(["a", "b", "c"])) == ({"selected": [3, 1]}, "key")
    # the same candidates in another order: ordinals carried over by text
    assert idx.match("zz", "select", sel(["c", "a", "b"])) == ({"selected": [1, 2]}, "content")
    assert idx.match("zz", "select", sel(["a", "b", "d"])) == (None, None)  # c is gone
    swapped = [sysmsg, {"role": "user", "content": "Question: <data>q</data>\nPassages:\n"
                        "<data>P2</data>\n<data>P1</data>"}]
    assert idx.match("zz", "reformulate", swapped) == ({"queries": ["x"]}, "content")
    other = [sysmsg, {"role": "user", "content": "Question: <data>another</data>\nCandidates:\n"}]
    assert idx.match("zz", "select", other) == (None, None)


def test_replay_of_the_recorded_replies_hits_every_request(data_dir, tmp_path, monkeypatch):
    """The recorded strong-LLM replies (shared/llm-replies), replayed for the first questions
    of each set through the CLI: every selection and reformulation request is answered."""
    from evireform.cli import main
    replies = data_dir.parent / "llm-replies"
    if not replies.is_dir():
        pytest.skip(f"recorded replies not found at {replies}")
    for ds in ("hotpotqa", "musique"):
        out = tmp_path / f"{ds}.json"
        assert main(["eval", "--dataset", ds, "--data", str(data_dir), "-n", "6", "--methods",
                     "evireform", "--llm-replay", str(replies / f"{ds}.jsonl"), "--json",
                     str(out), "--quiet"]) == 0
        usage = json.loads(out.read_text())["llm_usage"]
        assert usage["select"]["misses"] == 0 and usage["reformulate"]["misses"] == 0
        assert usage["select"]["cache_hits"] + usage["select"]["content_hits"] == 6
        assert usage["reformulate"]["cache_hits"] + usage["reformulate"]["content_hits"] == 6
