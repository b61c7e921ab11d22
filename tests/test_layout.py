"""The library core never imports the experiments (evaluation, bench)."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

import evireform

CORE = ["evireform", "evireform.index", "evireform.store", "evireform.retriever",
        "evireform.roles", "evireform.llm", "evireform.embed", "evireform.extract",
        "evireform.corpus", "evireform.cache", "evireform.kernels", "evireform.types",
        "evireform.entities", "evireform.build", "evireform.engine.shards", "evireform.explain",
        "evireform.strategies"]


def test_core_modules_do_not_import_experiments():
    code = ("import importlib, sys\n"
            f"for m in {CORE!r}:\n"
            "    importlib.import_module(m)\n"
            "bad = sorted(m for m in sys.modules if m.startswith(('evireform.evaluation', "
            "'evireform.bench')))\n"
            "print(','.join(bad))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "", f"core imports pull in: {out}"


def test_packages_import_from_anywhere(tmp_path):
    r = subprocess.run([sys.executable, "-c", "import evireform, evireform.evaluation, "
                        "evireform.bench; print(evireform.EviReform.__name__)"],
                       cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "EviReform", r.stderr


def _import_graph(annotations: bool = True):
    """module -> modules it imports (module level and inside functions), over the package as
    it is laid out on disk (evireform/ and kernels/ as evireform.kernels).  An import of a
    package's own submodule points at the submodule; a module's ancestor packages are left
    out (Python runs them before the module, so they cannot close a circle).  Imports under
    ``if TYPE_CHECKING:`` (annotations only) count unless ``annotations`` is False: an
    annotation's circle is a circle of the design too (issue 71)."""
    import ast
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    mods = {}
    for base, pkg in ((root / "evireform", "evireform"), (root / "kernels", "evireform.kernels")):
        for f in base.rglob("*.py"):
            parts = [p for p in f.relative_to(base).with_suffix("").parts if p != "__init__"]
            mods[".".join([pkg, *parts])] = f
    graph = {m: set() for m in mods}
    for m, f in mods.items():
        here = m.split(".") if f.name == "__init__.py" else m.split(".")[:-1]
        tree = ast.parse(f.read_text(encoding="utf-8"))
        typing_only = set()  # imports under `if TYPE_CHECKING:`: annotations, never run
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING" \
                    and not annotations:
                typing_only |= {id(n) for n in ast.walk(node)}
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            targets = []
            if isinstance(node, ast.ImportFrom):
                base = here[:len(here) - node.level + 1] if node.level else []
                name = ".".join(base + ([node.module] if node.module else []))
                subs = [f"{name}.{a.name}" for a in node.names if f"{name}.{a.name}" in mods]
                targets = subs if len(subs) == len(node.names) else subs + [name]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != m and not m.startswith(t + "."):
                    graph[m].add(t)
    return graph


def _cycles(graph) -> list[list[str]]:
    """Every back edge of a depth-first walk, as the circle it closes."""
    found, state = [], {}

    def visit(m, path):
        state[m] = 1
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                found.append(path[path.index(t):] + [t])
            elif t not in state:
                visit(t, path + [t])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    return found


def test_no_import_cycles():
    """No circle, annotation-only imports included, and no arrow from the store into the
    engine: the engine hands the store its structures (issue 71)."""
    graph = _import_graph()
    assert "evireform.index" in graph and "evireform.kernels._cpu" in graph
    cycles = _cycles(graph)
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)
    up = sorted(f"{m} -> {t}" for m, ts in graph.items() if m.startswith("evireform.store")
                for t in ts if t.startswith("evireform.engine"))
    assert not up, up


def test_the_cycle_finder_finds_a_cycle():
    """The finder itself: a planted circle (the store reaching into the engine again, which
    hands the store its structures) is reported."""
    graph = _import_graph()
    graph["evireform.store.format"].add("evireform.engine.structures")
    assert any("evireform.store.format" in c and "evireform.engine.structures" in c
               for c in _cycles(graph))


def test_readme_is_a_door_and_its_python_example_runs(tmp_path):
    """The README stays short, links pages that exist, and its Python example works."""
    import re
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    text = (root / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (root / link).is_file(), link
    code = re.search(r"## In Python\n\n```python\n(.*?)```", text, re.S).group(1)
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0 and "Orvel Society" in r.stdout, r.stderr[-2000:]


def test_the_version_is_written_once():
    import evireform
    from importlib.metadata import version
    assert evireform.__version__ == version("evireform")
    src = (Path(__file__).resolve().parents[1] / "evireform" / "__init__.py").read_text()
    assert '__version__ = "' not in src


def test_version_flag_license_and_typing_marker(capsys):
    """``evireform --version``; the MIT text ships (pyproject's license-files); a py.typed
    marker in each package directory so type checkers read the annotations (PEP 561)."""
    import evireform
    from evireform.cli import main
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"evireform {evireform.__version__}"
    root = Path(__file__).resolve().parents[1]
    assert "MIT License" in (root / "LICENSE").read_text()
    for pkg in ("evireform", "kernels"):
        assert (root / pkg / "py.typed").is_file()
    import tomllib
    cfg = tomllib.loads((root / "pyproject.toml").read_text())
    data = cfg["tool"]["setuptools"]["package-data"]
    assert "py.typed" in data["evireform"] and "py.typed" in data["evireform.kernels"]
    assert cfg["project"]["license-files"] == ["LICENSE"]


def test_the_index_is_data():
    """``PropositionIndex`` neither imports a search module nor has a search method: the
    engines (evireform.engine) own every search structure (issue 49)."""
    import ast
    import inspect
    from evireform.index import PropositionIndex
    graph = _import_graph()
    searching = {m for m in graph if m.startswith("evireform.engine")} | {
        "evireform.distributed", "evireform.kernels._gpu", "evireform.kernels._select"}
    assert not graph["evireform.index"] & searching, graph["evireform.index"] & searching
    src = (Path(__file__).resolve().parents[1] / "evireform" / "index.py").read_text()
    names = set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.ImportFrom):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
    scans = {"hnswlib", "cosine_topk", "cosine_topk_batch", "quantized_topk_batch",
             "quantize_int8", "hnsw_topk_batch", "search_rows", "build_hnsw", "faiss"}
    assert not names & scans, names & scans
    methods = {n for n, v in inspect.getmembers(PropositionIndex) if callable(v)}
    words = ("search", "hnsw", "quantiz", "device", "topk", "scan")
    assert not [n for n in methods if any(w in n.lower() for w in words)], methods
    # the cache of derived data is declared, not slipped into __dict__
    assert "_derived" in {f.name for f in __import__("dataclasses").fields(PropositionIndex)}


def test_the_index_is_data_test_can_fail(monkeypatch):
    """The check above fails when the index grows a search method again."""
    from evireform.index import PropositionIndex
    monkeypatch.setattr(PropositionIndex, "search_batch", lambda self, Q, k: None,
                        raising=False)
    with pytest.raises(AssertionError):
        test_the_index_is_data()


def test_every_package_directory_ships():
    """Each directory of the package with an ``__init__.py`` is listed in pyproject's packages
    (a fresh, non-editable install would lack it otherwise)."""
    import tomllib
    root = Path(__file__).resolve().parents[1]
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())
                 ["tool"]["setuptools"]["packages"])
    found = {".".join(("evireform",) + f.parent.relative_to(root / "evireform").parts)
             for f in (root / "evireform").rglob("__init__.py")}
    assert found <= listed, sorted(found - listed)


def _private_imports(graph_root=None) -> list[str]:
    """``from M import _name`` where ``M`` lies outside the importer's own subpackage (a
    top-level module of evireform is a unit of its own): "importer: M._name"."""
    import ast
    root = Path(__file__).resolve().parents[1] if graph_root is None else graph_root
    out = []
    mods = set()
    for base, pkg in ((root / "evireform", "evireform"), (root / "kernels", "evireform.kernels")):
        for f in base.rglob("*.py"):
            parts = [p for p in f.relative_to(base).with_suffix("").parts if p != "__init__"]
            mods.add(".".join([pkg, *parts]))
    for base, pkg in ((root / "evireform", "evireform"), (root / "kernels", "evireform.kernels")):
        for f in base.rglob("*.py"):
            parts = [p for p in f.relative_to(base).with_suffix("").parts if p != "__init__"]
            mod = ".".join([pkg, *parts])
            here = mod.split(".") if f.name == "__init__.py" else mod.split(".")[:-1]
            unit = ".".join(here) if len(here) > 1 else mod
            for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.ImportFrom):
                    continue
                b = here[:len(here) - node.level + 1] if node.level else []
                name = ".".join(b + ([node.module] if node.module else []))
                if not name.startswith("evireform"):
                    continue  # another package's business
                for a in node.names:
                    if f"{name}.{a.name}" in mods:
                        continue  # a module (a backend such as kernels._gpu), not a name
                    if a.name.startswith("_") and not a.name.startswith("__") and \
                            not (name == unit or name.startswith(unit + ".")):
                        out.append(f"{mod}: {name}.{a.name}")
    return sorted(out)


def test_no_module_imports_a_private_name_from_outside_its_subpackage(tmp_path):
    """Issue 71: a private name stays inside its subpackage (the four that crossed:
    filters._canonical, service.app._bound_socket, mcp_server._sdk,
    evaluation.plots._pyplot, now public); the scan finds a planted one."""
    assert _private_imports() == []
    import shutil
    root = Path(__file__).resolve().parents[1]
    fake = tmp_path / "repo"
    shutil.copytree(root / "evireform", fake / "evireform",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(root / "kernels", fake / "kernels",
                    ignore=shutil.ignore_patterns("__pycache__"))
    with open(fake / "evireform" / "extract" / "prose.py", "a", encoding="utf-8") as fh:
        fh.write("\nfrom ..filters import _planted  # noqa\n")
    assert _private_imports(fake) == ["evireform.extract.prose: evireform.filters._planted"]


#: the modules that run a batch of questions: k is checked and clipped in their Scope
#: (evireform.engine.Scope), so none of them checks or clips it again
_RUNS_QUESTIONS = ("retriever.py", "strategies.py", "engine/cpu.py", "engine/device.py",
                   "filters.py")
_CLIPS_K = re.compile(r"positive_int\(k\b|_check_k|clip_k|\bk = (max\(1, )?min\(k, ")


def _k_clipped_outside_the_scope(root: Path) -> list[str]:
    return [f"{name}:{n}" for name in _RUNS_QUESTIONS
            for n, line in enumerate((root / name).read_text().splitlines(), 1)
            if _CLIPS_K.search(line)]


def test_k_is_checked_in_the_scope_only(tmp_path):
    root = Path(evireform.__file__).parent
    assert _k_clipped_outside_the_scope(root) == []
    # the check can fail: a retriever clipping k itself again is found
    for name in _RUNS_QUESTIONS:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text((root / name).read_text())
    (tmp_path / "retriever.py").write_text(
        (root / "retriever.py").read_text() + "\nk = max(1, min(k, self.index.n_passages))\n")
    assert len(_k_clipped_outside_the_scope(tmp_path)) == 1


def test_a_packages_tests_are_named_by_its_modules():
    """``tests/test_<package>_<module>.py`` names a module of the package, for the packages
    whose tests sit by module (a renamed module takes its tests' file along)."""
    root = Path(evireform.__file__).parent
    tests = Path(__file__).parent
    for pkg in ("engine", "llm", "service", "extract", "roles"):
        modules = {p.stem for p in (root / pkg).glob("*.py")}
        # no catch-all file beside them (test_engine.py is the engine package's __init__)
        assert pkg == "engine" or not (tests / f"test_{pkg}.py").exists(), pkg
        for f in tests.glob(f"test_{pkg}_*.py"):
            assert f.stem.removeprefix(f"test_{pkg}_") in modules, f.name
