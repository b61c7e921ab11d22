"""The library core never imports the experiments (evaluation, bench)."""
import subprocess
import sys

CORE = ["evireform", "evireform.index", "evireform.store", "evireform.retriever",
        "evireform.roles", "evireform.llm", "evireform.embed", "evireform.extract",
        "evireform.corpus", "evireform.cache", "evireform.kernels", "evireform.types",
        "evireform.entities", "evireform.build", "evireform.shards", "evireform.explain",
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
