"""The package is typed (py.typed) and its public annotations hold: mypy checks a user's
program against evireform and finds nothing wrong, and finds each planted mistake."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent / "typing"


def _mypy(tmp_path, *targets):
    pytest.importorskip("mypy")
    # evireform as installed: the package with kernels/ inside it as evireform.kernels (an
    # editable install's import hook is invisible to mypy)
    site = tmp_path / "site" / "evireform"
    site.mkdir(parents=True)
    for entry in (ROOT / "evireform").iterdir():
        if entry.name != "__pycache__":
            (site / entry.name).symlink_to(entry)
    (site / "kernels").symlink_to(ROOT / "kernels")
    assert (site / "py.typed").exists() and (site / "kernels" / "py.typed").exists()
    r = subprocess.run([sys.executable, "-m", "mypy", "--follow-imports=silent",
                        "--ignore-missing-imports", "--no-incremental",
                        "--cache-dir", str(tmp_path / "cache"), *map(str, targets)],
                       capture_output=True, text=True, cwd=tmp_path, timeout=600,
                       env={**os.environ, "MYPYPATH": str(tmp_path / "site")})
    return r.returncode, r.stdout + r.stderr


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """One mypy run over both programs (each run costs most of a minute here): its exit
    status and output."""
    return _mypy(tmp_path_factory.mktemp("mypy"), HERE / "public_api.py",
                 HERE / "wrong_use.py")


def test_a_typed_program_using_the_public_api_passes(checked):
    rc, out = checked
    errors = re.findall(r"^(\S+?):\d+: error", out, re.M)
    assert errors and all(e.endswith("wrong_use.py") for e in errors), out


def test_mypy_catches_mistakes_against_the_api(checked):
    rc, out = checked
    lines = sorted({int(m) for m in re.findall(r"wrong_use\.py:(\d+): error", out)})
    assert rc == 1 and lines == [5, 7, 8], out


def test_the_public_api_is_annotated_for_pyright(tmp_path):
    """``pyright --verifytypes evireform --ignoreexternal`` on the package as a user installs
    it (scripts/type_completeness.sh) scores at least 85 %."""
    import json
    import shutil
    if not (shutil.which("npm") and shutil.which("node")):
        pytest.skip("pyright comes from the npm registry: node and npm are needed")
    out = tmp_path / "pyright.json"
    r = subprocess.run(["bash", str(ROOT / "scripts" / "type_completeness.sh"), "--json",
                        str(out)], capture_output=True, text=True, timeout=900)
    if not out.exists() or not out.stat().st_size:
        pytest.skip(f"pyright did not run here: {r.stderr[-300:]}")
    score = json.loads(out.read_text())["typeCompleteness"]["completenessScore"]
    assert score >= 0.85, f"type completeness {score:.1%}"
