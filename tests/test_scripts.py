"""The scripts (scripts/): each is named in the docs, and each runs: the cheap measurements on
tiny sizes, to the end; the rest parse their options (``--help``), which imports what they
import at the top.  A script that falls behind the library fails here."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for p in (ROOT / "scripts").iterdir() if p.suffix in (".py", ".sh"))

#: script -> the arguments of a small run that goes to the end (a few seconds each)
SMALL_RUNS = {
    "shard_recall.py": ["--n", "3000", "--shards", "1,2", "--queries", "5"],
    "int8_search_cost.py": ["--rows", "2000", "--queries", "3"],
    "hnsw_params.py": ["--n", "2000", "--queries", "5"],
    "tile_order_check.py": ["--trials", "3"],
    "llm_dead_endpoint.py": ["--questions", "1", "--deadline", "1"],
    "normalise_memory.py": ["1000", "8"],
    "load_cost.py": ["{index}", "--repeat", "1", "--hnsw"],
}


def test_every_script_is_named_in_the_docs():
    text = "\n".join(p.read_text(encoding="utf-8")
                     for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    missing = [p.name for p in SCRIPTS if p.name not in text]
    assert not missing, f"scripts no page names: {missing}"


@pytest.fixture(scope="module")
def tiny_index(tmp_path_factory):
    from evireform import PropositionIndex
    from evireform.embed import HashingEmbedder
    docs = [{"id": f"p{i}", "title": f"Town {i}", "text": f"Town {i} lies on river {i % 3}."}
            for i in range(30)]
    return PropositionIndex.build(docs, HashingEmbedder(32), show_progress=False).save(
        tmp_path_factory.mktemp("scripts") / "ix")


@pytest.mark.parametrize("name", [p.name for p in SCRIPTS if p.suffix == ".py"])
def test_every_python_script_runs(name, tiny_index, tmp_path):
    path = ROOT / "scripts" / name
    src = path.read_text(encoding="utf-8")
    compile(src, str(path), "exec")
    if name in SMALL_RUNS:
        args = [a.format(index=tiny_index) for a in SMALL_RUNS[name]]
    elif "argparse" in src:
        args = ["--help"]
    else:
        return  # compiled above; it takes a rev, a dataset or the docs' JSON to do anything
    r = subprocess.run([sys.executable, str(path), *args], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip()


def test_profile_kernels_runs_its_real_data_parts_on_a_small_index(tiny_index, capsys):
    """The parts of profile_kernels.py that need MuSiQue, run on a small index in its place:
    the propagation split and retrieve_core with its cold/warm split of the other work (the
    replay must give the same rankings, checked inside); afterwards the retriever searches
    for real again."""
    import importlib.util
    import numpy as np
    from evireform import PropositionIndex
    from evireform.bench import cases
    from evireform.embed import HashingEmbedder
    spec = importlib.util.spec_from_file_location("profile_kernels",
                                                  ROOT / "scripts" / "profile_kernels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    idx = PropositionIndex.load(tiny_index)
    emb = HashingEmbedder(32)
    qs = [f"Which river does Town {i} lie on?" for i in range(4)]
    ids, sc = cases.search_index(idx, emb.encode(qs), 5)
    seeds = [(i[i >= 0], s[i >= 0] / max(s[i >= 0].sum(), 1e-12)) for i, s in zip(ids, sc)]

    class Inp:
        def real(self, name):
            return idx, seeds, emb, qs
    mod.propagate_musique(Inp())
    mod.retrieve_core_musique(Inp())
    out = capsys.readouterr().out
    assert "propagate musique, per seed" in out and "public call" in out
    assert "retrieve_core musique, a question's work outside its scans" in out
    run = cases.core_questions(*cases.musique_core_inputs(Inp()))
    cold, warm = mod.rest_cold_and_warm(run, len(qs), rounds=1)
    assert cold > 0 and warm > 0
    assert "_search" not in vars(run.retriever)  # the class's search again


def test_ab_core_exports_a_commit_and_compares_it_with_the_tree(tiny_index, tmp_path):
    """ab_core.py's two steps on a small index: HEAD exported as ``evireform_old`` imports
    beside the working tree's package, and the side-by-side rounds report both versions'
    medians (rankings checked equal first; a version ranking differently is refused)."""
    import importlib
    import importlib.util
    import subprocess
    import sys
    from evireform.embed import HashingEmbedder
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"],
                      capture_output=True).returncode:
        pytest.skip("not a git checkout")
    spec = importlib.util.spec_from_file_location("ab_core", ROOT / "scripts" / "ab_core.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.path.insert(0, str(mod.export("HEAD", tmp_path)))
    try:
        runs = {}
        emb = HashingEmbedder(32)
        qs = [f"Which river does Town {i} lie on?" for i in range(3)]
        for name, pkg in (("HEAD", "evireform_old"), ("tree", "evireform")):
            cases = importlib.import_module(f"{pkg}.bench.cases")
            idx = importlib.import_module(pkg).PropositionIndex.load(tiny_index)
            assert type(idx).__module__.startswith(pkg)
            queries = {q: [q + " river"] for q in qs}
            vecs = dict(zip([q + " river" for q in qs], emb.encode([q + " river" for q in qs])))
            runs[name] = (cases, cases.core_questions(idx, qs, emb.encode(qs), queries, vecs),
                          len(qs))
        got = mod.compare(runs, 2)
        assert got["HEAD"]["rest_us"] > 0 and got["tree"]["scans_us"] > 0
        other = dict(runs)
        cases, run, n = runs["tree"]
        other["tree"] = (cases, lambda: run()[::-1], n)  # a different ranking is refused
        with pytest.raises(AssertionError, match="differently"):
            mod.compare(other, 1)
    finally:
        sys.path.remove(str(tmp_path / "pkg"))
        for m in [m for m in sys.modules if m == "evireform_old" or m.startswith("evireform_old.")]:
            del sys.modules[m]
