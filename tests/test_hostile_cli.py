"""Hostile use of the command line: errors in one line, a query failing while the kernels warm up, messages that say what is wrong."""
import json
import os
from evireform.cli import main

from hostile_common import REPO, EMB, _run, _index, _ps, _ranks  # noqa: F401


def test_cli_and_service_errors_are_one_line(tmp_path, capsys):
    ix = _index(tmp_path, _ps(3, lambda i: {"v": i}))
    assert main(["query", str(ix), "Alpha?", "--embedder", "hashing-16",
                 "--filter", '{"v": %d}' % 10 ** 400]) == 2
    assert "64-bit" in capsys.readouterr().err
    f = tmp_path / "f.json"
    f.write_text("[" * 100_000)
    assert main(["query", str(ix), "Alpha?", "--embedder", "hashing-16",
                 "--filter", f"@{f}"]) == 2
    assert "nested too deeply" in capsys.readouterr().err
    r = _run("serve", ix, "--port", "70000")
    assert r.returncode == 2 and "port number" in r.stderr and "Traceback" not in r.stderr
    r = _run("query", ix, "--questions", "/dev/zero", "--embedder", "hashing-16")
    assert r.returncode == 2 and "NUL" in r.stderr
    r = _run("update", ix, "--delete", "/dev/zero")
    assert r.returncode == 2 and "NUL" in r.stderr


def test_query_failing_while_the_warm_up_runs_exits_cleanly(tmp_path):
    ix = _index(tmp_path, _ps(3))
    cache = tmp_path / "numba-cache"
    for _ in range(3):
        r = _run("query", ix, "Alpha?", "--embedder", "no-such-embedder-xyz",
                 env={"NUMBA_CACHE_DIR": str(cache)}, timeout=600)
        assert r.returncode == 2, (r.returncode, r.stderr[-500:])
        assert "terminate called" not in r.stderr


def test_messages_say_what_is_wrong(tmp_path, capsys):
    ix = _index(tmp_path, _ps(3))
    assert main(["index", str(ix), str(tmp_path / "out"), "--embedder", "hashing-16",
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "is an evireform index" in err and "format_version" not in err
    assert main(["update", str(ix), "--add", str(ix)]) == 2
    err = capsys.readouterr().err
    assert "the index itself" in err and "format_version" not in err
    r = _run("serve", ix, "--max-wait-ms", "5000")
    assert r.returncode == 2 and "at most 1000" in r.stderr
    (tmp_path / "c.json").write_text(json.dumps([{"text": "Alpha met Beta."}]))
    r = _run("index", tmp_path / "c.json", tmp_path / "o2", "--extractor", "/dev/null",
             "--embedder", "hashing-16")
    assert r.returncode != 0 and "phrases" in r.stderr and "does not exist" not in r.stderr
    ro = tmp_path / "ro"
    import shutil
    shutil.copytree(ix, ro)
    if os.geteuid() != 0:
        os.chmod(ro, 0o555)
        r = _run("verify", ro)
        os.chmod(ro, 0o755)
        assert r.returncode == 0 and "no stamp written" in r.stdout
