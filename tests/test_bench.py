"""The bench command's bookkeeping (timings themselves are never asserted)."""
import pytest
import numpy as np

from evireform import bench
from evireform.bench.synthetic import clustered_embeddings, synthetic_graph, synthetic_passages


def _report(speedup, agree=True):
    name = next(iter(bench.FLOORS))
    return {"machine": {}, "cases": {name: {"size": "s", "ours_s": 1e-3, "peer_s": speedup * 1e-3,
                                            "speedup": speedup, "agree": agree}}}


def test_check_floors_and_agreement():
    name, floor = next(iter(bench.FLOORS.items()))
    assert bench.check(_report(floor * 2)) == []
    assert "floor" in bench.check(_report(floor / 2))[0]
    assert "disagree" in bench.check(_report(floor * 2, agree=False))[0]
    assert name in bench.table(_report(floor * 2))


def test_synthetic_shapes():
    rng = np.random.default_rng(0)
    g = synthetic_graph(rng, 5000)
    deg = np.diff(g.at_indptr)
    assert g.n_props == 5000 and deg.max() <= 250 and (deg == 1).mean() > 0.5
    assert abs(g.nnz / 5000 - 4.7) < 0.3
    pm = synthetic_passages(rng, 5000)
    assert pm.n_passages == int(5000 / 3.5)
    H = clustered_embeddings(rng, 300, d=32, n_clusters=8, intrinsic=4)
    np.testing.assert_allclose(np.linalg.norm(H, axis=1), 1, rtol=1e-5)


def test_run_only_selected_cases():
    import pytest
    with pytest.raises(ValueError, match="unknown cpu bench case"):
        bench.run(quick=True, only=["cosine", "nope"])
    report = bench.run(quick=True, only=["limit"], log=lambda m: None)
    assert report["cases"] and all(k.startswith("limit/") for k in report["cases"])


def test_times_warms_up_then_repeats_until_enough(monkeypatch):
    calls = []
    t = bench.times([lambda: calls.append(1)], repeat=3, min_s=0.0, pause=0.0)
    assert len(calls) == 4 and len(t) == 1 and t[0] >= 0  # one warm-up call, then three
    # a fake clock: every timed call lasts 0.01 s, so 0.05 s takes five timed calls
    clock = iter(np.arange(0, 100, 0.01))
    monkeypatch.setattr(bench.harness.time, "perf_counter", lambda: float(next(clock)))
    calls.clear()
    t = bench.times([lambda: calls.append(1)], repeat=1, min_s=0.05 - 1e-9, pause=0.0)
    assert len(calls) == 1 + 5 and abs(t[0] - 0.01) < 1e-9


def test_times_in_rounds_takes_the_functions_in_turn():
    """rounds=3: blocks a, b, a, b, a, b, each with its warm-up and a third of the calls;
    each median is over all of its function's calls."""
    order = []
    fa, fb = (lambda: order.append("a")), (lambda: order.append("b"))
    t = bench.times([fa, fb], repeat=6, min_s=0.0, pause=0.0, rounds=3)
    assert len(t) == 2 and all(x >= 0 for x in t)
    assert "".join(order) == ("a" * 3 + "b" * 3) * 3  # each block: a warm-up, two calls


def test_every_floor_names_a_declared_label():
    assert set(bench.FLOORS) <= bench.declared_labels()


def test_check_fails_on_a_floor_with_no_declared_label():
    report = {"machine": {}, "cases": {}}
    bad = bench.check(report, floors={"propagate/musique vs scipy chian": 2.0})
    assert bad == ["propagate/musique vs scipy chian: the floor names no declared bench "
                   "case label"]


def test_a_case_writing_an_undeclared_label_is_refused(monkeypatch):
    import pytest
    from evireform.bench import harness

    @harness.case("limit/declared")
    def case_limit(inp, out):  # replaces the real 'limit' case for this test
        out["limit/renamed"] = {}

    try:
        with pytest.raises(RuntimeError, match="undeclared label.*limit/renamed"):
            bench.run(quick=True, only=["limit"], log=lambda m: None)
    finally:
        from evireform.bench import cases
        harness.CASES["limit"] = harness.Case(
            "limit", ("limit/exact scan vs memory copy",), cases.case_limit)


def test_gpu_cases_run_on_the_cpu_namespace():
    """Every GPU case, at tiny sizes with (numpy, scipy.sparse): they cannot rot here."""
    from evireform.kernels import _gpu
    report = bench.run(backend="gpu", namespace=_gpu.cpu_namespace(), log=lambda m: None)
    groups = list(dict.fromkeys(k.split("/")[0] for k in report["cases"]))
    assert set(groups) == {"gpu_copy", "gpu_cosine_topk", "gpu_propagate", "gpu_readout",
                      "gpu_cosine_fp16", "gpu_retrieve_many"}
    assert all(c["agree"] for c in report["cases"].values()), report["cases"]
    from evireform.bench.harness import CASES
    group_of = {label: g for g, c in CASES.items() for label in c.labels}
    ran = list(dict.fromkeys(group_of[label] for label in report["cases"]))
    assert report["failed"] == [] and ran == [g for g in bench.GPU_ORDER if g in ran]
    assert bench.check(report) == []
    assert "gpu_propagate/2k 50 seeds vs cupy materialised W" in report["cases"]


def test_a_failing_case_keeps_the_others_and_the_json_grows_after_each(tmp_path, monkeypatch):
    """run() records a case that raises and goes on; the CLI's JSON is rewritten after every
    case, so a run killed midway keeps what it measured."""
    import json
    from evireform.bench.harness import CASES
    from evireform.kernels import _gpu
    seen = []
    broken = CASES["gpu_readout"]

    def boom(inp, out):
        raise MemoryError("out of device memory")
    monkeypatch.setitem(CASES, "gpu_readout", broken.__class__(
        broken.group, broken.labels, boom, broken.backend))
    report = bench.run(backend="gpu", namespace=_gpu.cpu_namespace(), log=lambda m: None,
                       only=["gpu_copy", "gpu_readout", "gpu_retrieve"],
                       on_case=lambda rep: seen.append(sorted(rep["cases"])))
    assert report["failed"] == [{"group": "gpu_readout",
                                 "error": "MemoryError: out of device memory"}]
    assert any(k.startswith("gpu_retrieve_many") for k in report["cases"])
    assert len(seen) >= 3 and len(seen[0]) < len(seen[-1])  # after each case (and size)


def test_gpu_run_script_reports_a_failed_preflight_by_its_exit_status(tmp_path):
    """Without a device the preflight fails: run.sh stops there with exit status 10 and a
    log that says why (no tests or bench attempted)."""
    import os
    import subprocess
    import sys
    from evireform.kernels._backend import gpu_missing_reason
    if gpu_missing_reason() is None:
        pytest.skip("a device is present: the preflight would pass")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run(["bash", "benchmarks/gpu/run.sh", str(tmp_path)], cwd=repo,
                       env={**os.environ, "PYTHON": sys.executable, "SKIP_INSTALL": "1"},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 10, r.stdout + r.stderr
    assert "preflight failed" in r.stdout and "no usable GPU namespace" in r.stdout
    logs = list(tmp_path.glob("gpu-*.log"))
    assert logs and "preflight failed" in logs[0].read_text()


def test_bench_plot_draws_one_bar_per_case(tmp_path):
    pytest.importorskip("matplotlib")
    from evireform.bench.plot import ratio_chart
    rep = {"machine": {"cpu": "test cpu"}, "quick": True,
           "cases": {f"case/{i}": {"size": "1", "ours_s": 1e-3, "peer_s": 2e-3,
                                   "speedup": 0.5 + i, "agree": i != 2} for i in range(6)}}
    rep["cases"]["no peer"] = {"size": "1", "ours_s": 1e-3, "speedup": None, "agree": True}
    png = ratio_chart(rep, tmp_path / "b.png")
    head = png.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    # 6 bars (the case without a peer has no ratio): 0.28 in each plus 1.2 in at 120 dpi
    assert abs(int.from_bytes(head[20:24], "big") - (0.28 * 6 + 1.2) * 120) <= 1


@pytest.mark.parametrize("given", [None, "ACTIVE"])
def test_bench_measures_under_the_users_wait_policy(tmp_path, monkeypatch, given, capsys):
    """`evireform bench` measures what a user gets: the thread pools wait by the library's
    default (no policy set for either side), or as the user set OMP_WAIT_POLICY; the report
    and its header record which."""
    import json
    import os
    from evireform.cli import main
    if given is None:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    else:
        monkeypatch.setenv("OMP_WAIT_POLICY", given)
    out = tmp_path / "b.json"
    assert main(["bench", "--quick", "--only", "limit", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["machine"]["omp_wait_policy"] == (given or "")
    assert os.environ.get("OMP_WAIT_POLICY") == given
    assert f"OpenMP waits {given or 'by default'}" in capsys.readouterr().out


def test_bench_measures_the_kernels_at_their_thread_count_even_when_busy(monkeypatch):
    """A busy machine's switch to the calling thread (kernels.config.BUSY_LOAD_PER_CPU) is
    off while the bench runs, so its ratios compare fixed kernels, and back on after (also
    when a case raises); the report records the load it started under."""
    import evireform.bench as bench
    from evireform.kernels import config as kconfig
    monkeypatch.setattr(kconfig, "BUSY_LOAD_PER_CPU", 1.5)
    seen = []

    def cases(*a, **kw):
        seen.append(kconfig.BUSY_LOAD_PER_CPU)
        if len(seen) == 2:
            raise KeyboardInterrupt
    monkeypatch.setattr(bench, "_run_cases", cases)
    report = bench.run(quick=True, only=["limit"])
    assert seen == [None] and kconfig.BUSY_LOAD_PER_CPU == 1.5
    assert report["machine"]["load_avg_1m"] >= 0
    with pytest.raises(KeyboardInterrupt):
        bench.run(quick=True, only=["limit"])
    assert seen == [None, None] and kconfig.BUSY_LOAD_PER_CPU == 1.5


def test_the_gpu_retrieve_peer_is_the_cpu_engine(rng, monkeypatch):
    """The retrieve case compares the device engine with the CPU engine even where "auto"
    would pick the device (a GPU usable, >= GPU_AUTO_MIN_PROPS propositions): made so here,
    so a peer built on "auto" would be a DeviceEngine and this test would fail."""
    from evireform import Passage, Proposition, PropositionIndex, engine as E
    from evireform.bench.gpu_cases import retrieve_pair
    from evireform.bench.synthetic import GivenReformulator
    from evireform.kernels import _gpu, config
    monkeypatch.setattr(config, "GPU_AUTO_MIN_PROPS", 1)
    monkeypatch.setattr(E, "gpu_usable", lambda: True)
    ps = [Passage(str(i), "t", "x") for i in range(6)]
    pr = [Proposition(f"p{i}", str(i), (f"e{i % 2}",)) for i in range(6)]
    H = rng.standard_normal((6, 4)).astype(np.float32)
    idx = PropositionIndex.from_propositions(ps, pr, H / np.linalg.norm(H, axis=1)[:, None], "e")
    monkeypatch.setattr(E, "to_device", lambda index, *a, **k: _gpu.DeviceIndex.from_arrays(
        _gpu.cpu_namespace(), index.graph, index.pmap, index.embeddings))
    assert isinstance(E.make_engine(idx, "auto"), E.DeviceEngine)  # what "auto" would give
    gpu_r, cpu_r = retrieve_pair(idx, _gpu.cpu_namespace(), None, GivenReformulator({}))
    assert isinstance(gpu_r.engine, E.DeviceEngine)
    assert isinstance(cpu_r.engine, E.CpuEngine)


def test_gpu_targets_name_cases_the_full_run_produces():
    """Every GPU target names a declared case label that the full-size run writes (both
    batch sizes of the scans, the sizes of the graph cases)."""
    from evireform.bench import gpu_cases
    from evireform.bench import declared_labels
    from evireform.kernels import _gpu
    full = gpu_cases.GpuInputs(False, _gpu.cpu_namespace(), print)
    size = {v: k for k, v in gpu_cases.SIZE.items()}
    for label, field, want, what, why in gpu_cases.TARGETS:
        assert label in declared_labels(), label
        group, rest = label.split("/")
        s = size[rest.split()[0]]
        if group.startswith("gpu_cosine"):
            assert s == full.cos_size and int(rest.split()[1][1:]) in full.batches
        else:
            assert s in full.sizes
        assert what and why and want > 0


def test_gpu_cases_flush_each_size_and_stop_at_the_deadline(monkeypatch):
    """A GPU case hands the report each size as it finishes (the CLI writes its JSON then)
    and starts no size after the time budget is spent."""
    from evireform.kernels import _gpu
    seen = []
    report = bench.run(backend="gpu", namespace=_gpu.cpu_namespace(), log=lambda m: None,
                       only=["gpu_cosine"], on_case=lambda rep: seen.append(sorted(rep["cases"])))
    assert len(seen) >= 2 and seen[0] != []  # flushed within the case, then at its end
    report = bench.run(backend="gpu", namespace=_gpu.cpu_namespace(), log=lambda m: None,
                       only=["gpu_cosine"], time_budget=-1.0)
    assert report["skipped"] == ["gpu_cosine"] and report["cases"] == {}


def test_bench_only_help_names_every_case_group():
    """`evireform bench --only` lists every registered group of both backends."""
    import subprocess
    import sys
    from evireform.bench.harness import CASES
    out = subprocess.run([sys.executable, "-m", "evireform", "bench", "--help"],
                         capture_output=True, text=True, check=True).stdout
    flat = " ".join(out.split())
    for group in CASES:
        assert group in flat.replace(",", " ").replace(";", " ").split(), group


def test_a_case_under_its_floor_is_measured_once_more_and_keeps_the_better():
    name, floor = next(iter(bench.FLOORS.items()))
    calls = []

    def rerun(speedup):
        def run(groups):
            calls.append(groups)
            return _report(speedup)
        return run

    report = _report(floor / 2)
    assert bench.remeasure_below_floor(report, rerun(floor * 2), log=lambda m: None) == []
    assert bench.check(report) == []
    assert report["remeasured"] == {name: [floor / 2, floor * 2]}
    assert calls == [[next(g for g, c in bench.CASES.items() if name in c.labels)]]
    # under the floor twice: it fails, with the better of the two measurements kept
    report = _report(floor / 2)
    assert bench.remeasure_below_floor(report, rerun(floor / 3), log=lambda m: None) == [name]
    assert report["cases"][name]["speedup"] == floor / 2 and "floor" in bench.check(report)[0]
    # nothing under a floor: nothing is run again
    calls.clear()
    assert bench.remeasure_below_floor(_report(floor * 2), rerun(0.0), log=lambda m: None) == []
    assert calls == []


def test_every_target_names_a_declared_label():
    from evireform.bench import TARGETS, declared_labels
    assert set(TARGETS) <= declared_labels()


def test_targets_print_a_reports_ratios_beside_them(tmp_path, capsys):
    import json
    from evireform.bench import TARGETS
    from evireform.cli import main
    first, second = list(TARGETS)[:2]
    rep = {"machine": {"cpu": "X", "cpus": 2, "omp_wait_policy": ""}, "quick": False,
           "cases": {first: {"speedup": TARGETS[first][0] * 2},
                     second: {"speedup": TARGETS[second][0] / 2}}}
    f = tmp_path / "r.json"
    f.write_text(json.dumps(rep))
    assert main(["bench", "--targets", str(f)]) == 0
    rows = {line.split(" | ")[0].lstrip("| "): line for line in
            capsys.readouterr().out.splitlines() if line.startswith("| ")}
    assert rows[first].endswith("| yes |") and rows[second].endswith("| **no** |")
    assert "not run" in rows[list(TARGETS)[-1]]
    # a second report (an --only run) adds its cases; the full run's others stay
    last = list(TARGETS)[-1]
    g = tmp_path / "only.json"
    g.write_text(json.dumps({"machine": {}, "cases": {last: {"speedup": TARGETS[last][0]}}}))
    assert main(["bench", "--targets", str(f), "--targets", str(g)]) == 0
    rows = {line.split(" | ")[0].lstrip("| "): line for line in
            capsys.readouterr().out.splitlines() if line.startswith("| ")}
    assert rows[last].endswith("| yes |") and rows[first].endswith("| yes |")
    f.write_text("[1, 2]")
    assert main(["bench", "--targets", str(f)]) == 2


def test_the_build_case_brackets_the_build_between_two_encoder_runs(monkeypatch):
    """The build's floor is the encoder alone on the build's own texts, timed before and
    after the build (their mean), and the timing wrapper is off for the second run."""
    from evireform.bench import cases
    from evireform.embed import HashingEmbedder
    from evireform.types import Passage

    calls = []

    class Counting(HashingEmbedder):
        def encode(self, texts, **kw):
            calls.append(list(texts))
            return super().encode(texts, **kw)

    passages = [Passage(f"p{i}", f"Title {i}", f"Alice Smith met Bob Jones in Paris in {1900 + i}. "
                        f"Carol Brown wrote Book {i}.") for i in range(12)]
    emb = Counting(64)
    clock = iter(range(10_000))  # a clock whose steps grow: every timing differs
    monkeypatch.setattr(cases.time, "perf_counter", lambda: float(next(clock)) ** 2)
    row = cases.build_beside_encoder(passages, emb)
    assert "encode" not in vars(emb)  # the build's timing wrapper is gone
    texts = calls[0]
    assert texts and calls[-1] == texts  # the floor encodes the build's texts, twice
    assert any(c == texts for c in calls[1:-1])  # and the build encoded them too
    assert row["encoder_before_s"] < row["encoder_after_s"]
    assert row["peer_s"] == (row["encoder_before_s"] + row["encoder_after_s"]) / 2
    assert row["speedup"] == row["peer_s"] / row["ours_s"]
    assert 0 < row["encoding_share_in_build"] <= 1
    assert row["size"] == f"12 passages, {len(texts)} propositions"
