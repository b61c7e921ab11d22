"""Per-stage timings (evireform.timing): contiguous stages that add up to the run, in every
method's trace, printed by `query --json`, and observed by the service per stage."""
import json
import time

import pytest

from evireform import EviReform, PropositionIndex
from evireform.cli import main
from evireform.embed import HashingEmbedder
from evireform.strategies import make_strategy
from evireform.timing import Stopwatch, stage

EMB = HashingEmbedder(64)


def _records(n):
    names = ["Alpha", "Beta", "Delta", "Gamma Ray", "Omega"]
    return [{"title": f"{names[i % 4]} {i}",
             "text": f"{names[i % 4]} {i} met {names[(i + 1) % 5]} in {1900 + i}. "
                     f"{names[(i + 3) % 5]} liked {names[(i + 2) % 4]} {i % 7}.",
             "metadata": {"year": 1900 + i}}
            for i in range(n)]


@pytest.fixture(scope="module")
def idx():
    return PropositionIndex.build(_records(300), EMB, show_progress=False)


class FakeClock:
    """perf_counter advancing 1 s per reading: every lap is visible and exact."""

    def __init__(self):
        self.t = 0.0

    def perf_counter(self):
        self.t += 1.0
        return self.t


def test_stages_are_contiguous_nested_and_add_up(monkeypatch):
    import evireform.timing as timing
    clock = FakeClock()
    monkeypatch.setattr(timing, "time", clock)
    with Stopwatch("hops") as sw:  # reads 1
        with stage("search"):      # laps hops (2), then search at exit
            with stage("encode"):  # laps search (3), encode at exit (4)
                pass
        # search's exit (5); the stopwatch's exit laps hops (6)
    assert sw.ms == {"hops": 2000.0, "search": 2000.0, "encode": 1000.0}
    assert sum(sw.ms.values()) == (clock.t - 1.0) * 1e3  # the whole run, no gap
    with stage("nothing"):  # no stopwatch running: nothing recorded, nothing raised
        pass
    assert "nothing" not in sw.ms


def _best_cover(run, tries=5):
    """The timed share of retrieve()'s wall time, the best of a few runs (a preemption in
    the untimed microseconds around the stages can only lower one run's share)."""
    best = 0.0
    for _ in range(tries):
        t0 = time.perf_counter()
        res = run()
        wall = (time.perf_counter() - t0) * 1e3
        share = sum(res.trace.timings_ms.values()) / wall
        assert share <= 1.0 + 1e-6, (res.trace.timings_ms, wall)
        best = max(best, share)
    return res, best


@pytest.mark.parametrize("method,want", [
    ("evireform", {"encode_question", "search", "select", "reformulate", "encode_residual",
                   "rank", "readout"}),
    ("bgr", {"encode", "search", "rank", "reformulate", "readout", "hops"}),
    ("hiq", {"encode", "search", "rank", "read", "readout", "hops"}),
])
def test_every_method_times_its_stages_and_they_cover_retrieve(idx, method, want):
    r = EviReform(idx, embedder=EMB) if method == "evireform" else \
        make_strategy(method, idx, EMB)
    r.retrieve("warm-up", 3)
    res, share = _best_cover(lambda: r.retrieve("Who did Alpha 3 meet?", 5))
    t = res.trace.timings_ms
    assert want <= set(t) and all(v >= 0 for v in t.values()), t
    assert share >= 0.9, (method, t)  # the stages account for retrieve()'s time
    assert res.to_dict()["trace"]["timings_ms"] == t


def test_a_batch_carries_the_batchs_stages(idx):
    r = EviReform(idx, embedder=EMB)
    a, b = r.retrieve_many(["Who did Alpha 3 meet?", "Where was Beta 4 born?"], 5)
    assert a.trace.timings_ms == b.trace.timings_ms and a.trace.timings_ms
    assert a.trace.timings_ms is not b.trace.timings_ms


def test_a_filter_matching_nothing_is_still_timed(idx):
    res = EviReform(idx, embedder=EMB).retrieve("Who did Alpha 3 meet?", 5,
                                               filter={"year": 1})
    assert res.passages == [] and set(res.trace.timings_ms) == {"encode_question", "search"}


def test_query_json_prints_the_stages(idx, tmp_path, capsys):
    ix = idx.save(tmp_path / "ix")
    assert main(["query", str(ix), "Who did Alpha 3 meet?", "-k", "3", "--embedder",
                 "hashing-64", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    t = rec["trace"]["timings_ms"]
    assert {"encode_question", "search", "rank", "readout"} <= set(t)
    assert main(["query", str(ix), "Who did Alpha 3 meet?", "-k", "3", "--embedder",
                 "hashing-64"]) == 0
    assert "time: " in capsys.readouterr().err


def test_the_service_observes_each_stage(idx, tmp_path):
    pytest.importorskip("prometheus_client")
    import asyncio

    from evireform.service import RetrievalService
    ix = idx.save(tmp_path / "ix")
    svc = RetrievalService(ix, EMB)

    async def run():
        await svc.start()
        try:
            await svc.query("Who did Alpha 3 meet?", 5)
            await svc.query("Who did Alpha 3 meet?", 5, method="bgr")
            await svc.query_batch(["Who did Alpha 3 meet?", "Where was Beta 4 born?"], 5)
        finally:
            await svc.stop()
    asyncio.run(run())
    text = svc.metrics.text().decode()
    count = {}
    for line in text.splitlines():
        if line.startswith("evireform_stage_seconds_count"):
            labels, value = line.rsplit(" ", 1)
            count[labels.split("{")[1].rstrip("}")] = float(value)
    # the warm-up at start is not a request: one question, then one batch of two -> two
    # observations of each EviReform stage; one BGR question -> one of each of its stages
    assert count['method="evireform",stage="rank"'] == 2
    assert count['method="bgr",stage="hops"'] == 1


def test_time_calls_sums_a_methods_seconds(monkeypatch):
    """time_calls: what `evireform index` and the bench's build cases report as the
    encoding share (a fake clock: each call takes 2 s)."""
    from evireform import timing
    clock = iter(range(0, 100, 2))
    monkeypatch.setattr(timing.time, "perf_counter", lambda: float(next(clock)))
    emb = HashingEmbedder(16)
    spent = timing.time_calls(emb, "encode")
    emb.encode(["a"])
    emb.encode(["b", "c"])
    assert spent == [4.0]
    assert timing.time_calls(object(), "encode") == [0.0]  # nothing to time: stays 0

    class Frozen:
        __slots__ = ()

        def encode(self, texts):
            return texts
    assert timing.time_calls(Frozen(), "encode") == [0.0]  # takes no attributes


def test_the_build_cases_inputs():
    """The 100k build case's inputs: English-like synthetic passages whose capitalised names
    the heuristic extractor finds, and an encoder of (almost) no cost with unit rows."""
    import numpy as np
    from evireform.bench.synthetic import RandomRowsEmbedder, synthetic_documents
    from evireform.extract import HeuristicExtractor
    from evireform.types import Passage
    docs = synthetic_documents(np.random.default_rng(0), 200)
    assert len(docs) == 200 and len({t for t, _ in docs}) == 200
    assert docs == synthetic_documents(np.random.default_rng(0), 200)
    props = [pr for j, (t, x) in enumerate(docs)
             for pr in HeuristicExtractor().extract(Passage(str(j), t, x))]
    assert 2.5 < len(props) / len(docs) < 5 and all(len(pr.entities) >= 3 for pr in props)
    X = RandomRowsEmbedder(dim=8).encode(["a", "b", "c"])
    assert X.shape == (3, 8) and np.allclose(np.linalg.norm(X, axis=1), 1.0)


def test_rounded_keeps_whole_microseconds():
    sw = Stopwatch()
    sw.ms = {"search": 1.23456, "rank": 0.0004, "select": 2.0, "readout": 0.0016}
    assert sw.rounded() == {"search": 1.235, "rank": 0.0, "select": 2.0, "readout": 0.002}
    assert list(sw.rounded()) == ["search", "rank", "select", "readout"]


@pytest.mark.parametrize("value", [True, False, 0, -3, 2.0, "2", None])
def test_int_at_least_refuses_what_is_not_a_count(value):
    from evireform._checks import int_at_least
    with pytest.raises(ValueError, match="k must be a positive integer"):
        int_at_least(value, 1, "k")


def test_int_at_least_takes_ints_of_any_kind():
    import numpy as np
    from evireform._checks import int_at_least
    assert int_at_least(3, 1, "k") == 3 and int_at_least(0, 0, "k") == 0
    got = int_at_least(np.int64(5), 1, "k")
    assert got == 5 and type(got) is int


def test_since_process_start_counts_from_the_process_start():
    """What `evireform query` prints as "from process start": the process's own age, which a
    sleep before the call adds to (a correctness check of the clock, not a speed bound)."""
    import subprocess
    import sys
    code = ("import time; time.sleep(0.5); from evireform.timing import since_process_start; "
            "print(since_process_start())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    got = out.stdout.strip()
    if got == "None":  # not Linux: no /proc
        return
    assert 0.45 <= float(got) < 120
