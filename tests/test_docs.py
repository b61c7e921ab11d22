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
