"""The library logs through the 'evireform' logger (silent by default: a NullHandler), and the
command line prints it to stderr at --log-level."""
import logging

from evireform import PropositionIndex
from evireform.application import apply_update
from evireform.cli import main
from evireform.embed import HashingEmbedder

EMB = HashingEmbedder(32)


def test_builds_loads_updates_and_fallbacks_are_logged(tmp_path, caplog):
    assert logging.NullHandler in {type(h) for h in logging.getLogger("evireform").handlers}
    caplog.set_level(logging.INFO, logger="evireform")
    ix = PropositionIndex.build(["Alpha met Beta in Rome.", "Beta met Gamma."], EMB,
                                show_progress=False).save(tmp_path / "ix")
    PropositionIndex.load(ix)
    apply_update(ix, add=[{"id": "n", "text": "Gamma met Delta."}], embedder=EMB)
    from evireform.llm import LLMSelector

    class Down:  # a client whose endpoint always fails
        def ask(self, role, messages, validate):
            raise ConnectionError("connection refused")

        def _count(self, role, **kw):
            pass
    sel = LLMSelector(Down())
    value, _, why = sel._run("select", [{"role": "user", "content": "q"}], None,
                             lambda: "fallback answer")
    assert value == "fallback answer" and why == "ConnectionError"
    msgs = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
    assert any(n == "evireform.index" and m.startswith("built an index of 2 passages")
               for n, _, m in msgs), msgs
    assert any(n == "evireform.index" and "loaded" in m and "verification" in m
               for n, _, m in msgs)
    assert any(n == "evireform.application" and "2 -> 3 passages (added 1)" in m
               for n, _, m in msgs)
    assert any(lv == "WARNING" and "select fell back" in m and "connection refused" in m
               for _, lv, m in msgs)


def test_the_cli_prints_the_log_at_its_level(tmp_path, capsys):
    ix = PropositionIndex.build(["Alpha met Beta in Rome."], EMB,
                                show_progress=False).save(tmp_path / "ix")
    args = ["query", str(ix), "Alpha?", "-k", "1", "--embedder", "hashing-32", "--json"]
    assert main(["--log-level", "info", *args]) == 0
    assert "evireform: INFO: loaded" in capsys.readouterr().err
    assert main(args) == 0
    assert "INFO" not in capsys.readouterr().err
    assert main(["-v", *args]) == 0
    assert "evireform: INFO: loaded" in capsys.readouterr().err
