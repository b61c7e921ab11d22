"""Errors name their cause: a short write as a full disk or a file-size limit (the service's
507), a custom embedder's wrong output at question time (the service's 500 with the
message, never an IndexError).  The refusals of bad input are tests/test_inputs.py."""
import numpy as np  # noqa: F401
import pytest

from evireform import Passage, PropositionIndex
from evireform.embed import HashingEmbedder
from evireform.retriever import EviReform
from evireform.store import atomic


def test_a_short_write_is_named_as_a_full_disk_or_a_file_size_limit(tmp_path, monkeypatch):
    """numpy reports a short write without an errno ("768000 requested and 51168 written");
    the save names the cause from the free space and ``ulimit -f``, and the service answers
    507 for either."""
    import errno
    import os
    import resource
    import subprocess
    import sys
    from evireform.service import _error_of
    short = OSError("768000 requested and 51168 written")
    full = type("S", (), {"f_bavail": 10, "f_frsize": 4096})()
    monkeypatch.setattr(os, "statvfs", lambda p: full)
    got = atomic.named_write_error(short, tmp_path)
    assert got.errno == errno.ENOSPC and "no space left" in str(got) and str(tmp_path) in str(got)
    assert _error_of(got)[0] == 507
    monkeypatch.undo()
    assert atomic.named_write_error(OSError(errno.EIO, "x"), tmp_path).errno == errno.EIO
    assert _error_of(OSError(errno.EFBIG, "too big"))[0] == 507

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (60_000, 60_000))
    corpus = tmp_path / "c.json"
    corpus.write_text(__import__("json").dumps(
        [{"title": f"T{i}", "text": f"Passage {i} about Alpha Beta {i} and Gamma."}
         for i in range(600)]))
    exe = os.path.join(os.path.dirname(sys.executable), "evireform")
    r = subprocess.run([exe, "index", str(corpus), str(tmp_path / "ix"), "--embedder",
                        "hashing-64", "--quiet"], preexec_fn=limit, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 2
    assert "file-size limit (ulimit -f: 60,000 bytes" in r.stderr, r.stderr
    assert not (tmp_path / "ix").exists()


def test_a_full_disk_is_named_though_removing_the_partial_files_frees_it(tmp_path,
                                                                         monkeypatch):
    """Issue 69: the disk is full while the new generation's files are on it and free again
    once they are removed; the short write is named from the disk as it was (ENOSPC, the
    service's 507), on the path `update` and `/update` save through."""
    import errno
    import os
    from evireform.service import _error_of
    real = os.statvfs

    def statvfs(p):  # full while a temporary generation exists beside the index
        if any(n.startswith(".ix.tmp-") for n in os.listdir(tmp_path)):
            return type("S", (), {"f_bavail": 1, "f_frsize": 4096})()
        return real(p)
    monkeypatch.setattr(os, "statvfs", statvfs)

    def write(tmp):
        (tmp / "part.npy").write_bytes(b"x" * 1000)
        raise OSError("76700 requested and 25568 written")
    with pytest.raises(OSError) as got:
        atomic.write_dir_atomically(tmp_path / "ix", write, looks_like=lambda p: True)
    assert got.value.errno == errno.ENOSPC and "no space left" in str(got.value)
    assert _error_of(got.value)[0] == 507
    assert not any(n.startswith(".ix.tmp-") for n in os.listdir(tmp_path))


def test_verify_names_why_no_stamp_was_written(tmp_path, monkeypatch):
    import os
    from evireform.cli.indexing import _why_unwritten
    assert _why_unwritten(tmp_path) == "the stamp file could not be written"
    monkeypatch.setattr(os, "statvfs",
                        lambda p: type("S", (), {"f_bavail": 1, "f_frsize": 4096})())
    assert _why_unwritten(tmp_path).startswith("no space left on the disk holding")
    monkeypatch.setattr(os, "access", lambda p, m: False)
    assert _why_unwritten(tmp_path) == "the directory is not writable"


def test_an_embedder_with_the_wrong_rows_at_question_time_is_named(tmp_path):
    """A custom embedder that returns one row for three texts: a clear error naming it (no
    IndexError), and the service's 500 carries that message."""
    import asyncio

    import httpx
    from evireform.embed import EmbedderOutputError
    from evireform.service import RetrievalService, create_app
    good = HashingEmbedder(16)
    idx = PropositionIndex.build([Passage("a", "Alpha", "Alpha met Beta in Paris."),
                                  Passage("b", "Beta", "Beta lives in Rome.")], good,
                                 show_progress=False)

    class OneRow(HashingEmbedder):
        def encode(self, texts, **kw):
            return super().encode(list(texts)[:1])
    bad = OneRow(16)
    with pytest.raises(EmbedderOutputError, match=r"hashing-16.*shape \(1, 16\) for 3"):
        from evireform.embed import encode_queries
        encode_queries(bad, ["a", "b", "c"])
    with pytest.raises(EmbedderOutputError, match="one row per text"):
        EviReform(idx, embedder=bad).retrieve_many(["Who met Beta?", "Where is Rome?"], 2)
    svc = RetrievalService(idx.save(tmp_path / "ix"), bad)
    app = create_app(svc)

    async def run():
        await svc.start()
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                         base_url="http://t") as c:
                return await c.post("/query_batch", json={"questions": ["a?", "b?"]})
        finally:
            await svc.stop()
    r = asyncio.run(run())
    assert r.status_code == 500 and "one row per text" in r.json()["error"]
