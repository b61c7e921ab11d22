"""The service's journal (issue 84: an update through the service as large as its change):
each update is one appended record, a load replays the records to the index the service
served, the compaction saves it in full and drops the journal, a torn last record is left
out and a damaged one refused, and another writer makes the service save in full."""
import asyncio
import shutil

import numpy as np
import pytest

from evireform import Passage, PropositionIndex
from evireform.application import apply_update
from evireform.embed import HashingEmbedder
from evireform.index import arrays_equal
from evireform.store import IndexFormatError
from evireform.store.journal import JOURNAL, append, manifest_digest, read

EMB = HashingEmbedder(32)


def _corpus(n=24):
    return [Passage(f"p{i}", f"Item {i % 5}", f"Alpha Beta {i % 7} met Gamma Ray {i % 4} in "
                    f"Oslo {i % 3}. Delta Corp {i % 6} hired Ann Lee {i % 5}.",
                    {"namespace": "t1" if i % 2 else "t2", "source": f"s{i % 3}.md"})
            for i in range(n)]


#: updates as the service takes them: (add, upsert, delete, delete_where, namespace)
UPDATES = [
    ([{"id": "n1", "title": "Note", "text": "Orla Quist runs the Oslo build farm."}],
     False, None, None, None),
    ([{"title": "Note", "text": "Bo Chen joined Delta Corp 2 in May."}], False, None, None,
     "t1"),
    ([{"id": "p3", "title": "Item 3", "text": "Alpha Beta 3 left Oslo for Bergen."}], True,
     None, None, None),
    (None, False, ["p4", "n1"], None, None),
    (None, False, None, {"source": "s2.md"}, "t2"),
    ([{"id": "memo", "title": "Memo", "text": "Ann Lee 1 signs the memo in Bergen."}], False,
     None, None, "t1"),
]


def _same(a: PropositionIndex, b: PropositionIndex) -> bool:
    return arrays_equal(a, b) and [p.metadata for p in a.passages] == \
        [p.metadata for p in b.passages]


def _run(svc, coro_fn):
    async def go():
        await svc.start()
        try:
            return await coro_fn()
        finally:
            await svc.stop()
    return asyncio.run(go())


@pytest.mark.parametrize("extractor", ["auto", "prose", "phrases"])
def test_journalled_updates_replay_to_the_index_served_and_compact_to_a_full_save(
        tmp_path, extractor):
    """Every kind of update (an add, an id made from content in a namespace, an upsert,
    deletes by id and by a namespace's filter, a tenant's id), with the extractors that
    carry corpus counts: after each, a load (what a kill would leave) equals the index
    served and the index the classic full save makes."""
    from evireform.extract import make_extractor
    from evireform.service import RetrievalService
    built = PropositionIndex.build(_corpus(), EMB, extractor=make_extractor(
        extractor, passages=_corpus()),
                                   show_progress=False)
    ix = built.save(tmp_path / "ix")
    classic = built.save(tmp_path / "classic")
    svc = RetrievalService(ix, EMB, compact_after=3600)
    seen = {}

    async def calls():
        for n, (add, upsert, delete, where, ns) in enumerate(UPDATES):
            await svc.update(add, upsert, delete, where, False, ns)
            assert (ix / JOURNAL).is_file()  # the change, not a full save
            apply_update(classic, add=add, upsert=upsert, delete=delete, delete_where=where,
                         namespace=ns, embedder=EMB)
            replayed = PropositionIndex.load(ix)  # what a crash now would leave
            assert _same(replayed, svc.gen.index), n
            assert _same(replayed, PropositionIndex.load(classic)), n
            assert replayed.meta.get("extractor") == built.meta.get("extractor")
        seen["records"] = len(read(ix))
        res, _ = await svc.query("who runs the Oslo build farm?", 5)
        seen["served"] = [(p.id, round(p.score, 9)) for p in res.passages]
    _run(svc, calls)
    assert seen["records"] == len(UPDATES)
    assert not (ix / JOURNAL).exists()  # stop saved it in full
    final = PropositionIndex.load(ix)
    assert _same(final, PropositionIndex.load(classic))
    from evireform.retriever import EviReform
    again = EviReform(final, embedder=EMB).retrieve("who runs the Oslo build farm?", k=5)
    assert [(p.id, round(p.score, 9)) for p in again.passages] == seen["served"]


def test_an_upload_is_journalled_and_replayed(tmp_path):
    from evireform.service import RetrievalService
    ix = PropositionIndex.build(_corpus(), EMB, show_progress=False).save(tmp_path / "ix")
    svc = RetrievalService(ix, EMB, compact_after=3600)

    async def calls():
        a = await svc.add_documents([("notes/farm.md", b"# Farm\n\nOrla Quist runs the "
                                      b"Oslo build farm.\n\n## Hours\n\nIt opens at six.\n")])
        b = await svc.add_documents([("notes/farm.md", b"# Farm\n\nBo Chen runs it now.\n")],
                                    "t1")
        assert (ix / JOURNAL).is_file() and len(read(ix)) == 2
        assert _same(PropositionIndex.load(ix), svc.gen.index)
        return a, b
    a, b = _run(svc, calls)
    assert a["files"][0]["status"] == "indexed" and b["files"][0]["status"] == "indexed"
    idx = PropositionIndex.load(ix)
    assert not (ix / JOURNAL).exists()
    srcs = {p.metadata.get("source") for p in idx.passages}
    assert {"uploads/notes/farm.md", "uploads/t1/notes/farm.md"} <= srcs


def test_the_service_compacts_after_a_quiet_moment_and_after_many_records(tmp_path):
    from evireform.service import RetrievalService
    ix = PropositionIndex.build(_corpus(), EMB, show_progress=False).save(tmp_path / "ix")
    svc = RetrievalService(ix, EMB, compact_after=0.05)
    svc.JOURNAL_MAX = 3

    async def calls():
        out = []
        for i in range(4):
            await svc.update([{"id": f"x{i}", "title": "X", "text": f"Xavier {i} met Ann."}])
            out.append((ix / JOURNAL).exists())
        await asyncio.sleep(0.5)
        out.append((ix / JOURNAL).exists())
        gen = svc.gen.number
        res, g = await svc.query("who met Ann?", 3)
        return out, gen, g
    out, gen, g = _run(svc, calls)
    assert out == [True, True, False, True, False]  # the third record saved in full
    assert gen == g == 4  # a compaction is no new generation
    assert {f"x{i}" for i in range(4)} <= {p.id for p in PropositionIndex.load(ix).passages}


def test_another_writer_makes_the_service_save_in_full(tmp_path):
    from evireform.service import RetrievalService
    ix = PropositionIndex.build(_corpus(), EMB, show_progress=False).save(tmp_path / "ix")
    svc = RetrievalService(ix, EMB, compact_after=3600)

    async def calls():
        await svc.update([{"id": "a", "title": "A", "text": "Anna Berg met Orla."}])
        # another process: its load replays the journal, its save drops it
        apply_update(ix, add=[{"id": "b", "title": "B", "text": "Bo Chen met Orla."}],
                     embedder=EMB)
        assert not (ix / JOURNAL).exists()
        await svc.update([{"id": "c", "title": "C", "text": "Cy Dahl met Orla."}])
        return (ix / JOURNAL).exists(), {p.id for p in svc.gen.index.passages}
    journalled, served = _run(svc, calls)
    assert not journalled  # saved in full over the other writer's generation
    assert {"a", "b", "c"} <= served
    assert {"a", "b", "c"} <= {p.id for p in PropositionIndex.load(ix).passages}


def test_a_torn_record_is_left_out_and_a_damaged_one_refused(tmp_path, caplog):
    ix = PropositionIndex.build(_corpus(), EMB, show_progress=False).save(tmp_path / "ix")
    base = manifest_digest(ix)
    texts = ["Orla runs the farm.", "Orla"]
    rows = EMB.encode(texts)
    req = {"add": [{"id": "n", "title": "N", "text": "Orla runs the farm."}],
           "delete": None, "upsert": False, "delete_where": None, "delete_all": False,
           "namespace": None}
    size = append(ix, base, req, texts, rows)
    assert len(read(ix)) == 1 and np.array_equal(read(ix)[0][2], np.asarray(rows, "f4"))
    whole = (ix / JOURNAL).read_bytes()
    assert len(whole) == size
    (ix / JOURNAL).write_bytes(whole + whole[:50])  # a second record cut short
    assert len(read(ix)) == 1 and "cut short" in caplog.text
    assert "n" in {p.id for p in PropositionIndex.load(ix).passages}
    bad = bytearray(whole)
    bad[-3] ^= 1
    (ix / JOURNAL).write_bytes(bytes(bad) + whole)
    with pytest.raises(IndexFormatError, match="sha256"):
        PropositionIndex.load(ix)
    assert "n" not in {p.id for p in PropositionIndex.load(ix, journal=False).passages}
    other = PropositionIndex.build(_corpus(5), EMB, show_progress=False).save(tmp_path / "o")
    shutil.copy(ix / JOURNAL, other / JOURNAL)
    (other / JOURNAL).write_bytes(whole)
    with pytest.raises(IndexFormatError, match="another saved index"):
        PropositionIndex.load(other)


def test_verify_names_the_journal_it_replayed(tmp_path, capsys):
    import json
    from evireform.cli import main
    ix = PropositionIndex.build(_corpus(), EMB, show_progress=False).save(tmp_path / "ix")
    texts = ["Orla runs the farm.", "Orla"]
    append(ix, manifest_digest(ix), {"add": [{"id": "n", "title": "N",
                                              "text": "Orla runs the farm."}],
                                     "delete": None, "upsert": False, "delete_where": None,
                                     "delete_all": False, "namespace": None},
           texts, EMB.encode(texts))
    assert main(["verify", str(ix), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["journal_records"] == 1 and got["passages"] == 25


def test_an_append_that_fails_leaves_the_journal_as_it_was(tmp_path, monkeypatch):
    """A full disk in the middle of a record: the partial bytes are cut off again, so the
    records before it still replay and a later append lands after them (not after garbage
    that would fail every later load); a planted link is no journal."""
    import errno
    import os
    ix = PropositionIndex.build(_corpus(), EMB, show_progress=False).save(tmp_path / "ix")
    base = manifest_digest(ix)
    req = {"add": None, "delete": ["p1"], "upsert": False, "delete_where": None,
           "delete_all": False, "namespace": None}
    append(ix, base, req, [], np.zeros((0, 32), np.float32))
    real = os.write

    def short(fd, data):
        real(fd, bytes(data)[:10])
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "write", short)
    with pytest.raises(OSError):
        append(ix, base, {**req, "delete": ["p2"]}, [], np.zeros((0, 32), np.float32))
    monkeypatch.setattr(os, "write", real)
    append(ix, base, {**req, "delete": ["p3"]}, [], np.zeros((0, 32), np.float32))
    assert [r[0]["delete"] for r in read(ix)] == [["p1"], ["p3"]]
    ids = {p.id for p in PropositionIndex.load(ix).passages}
    assert "p2" in ids and not {"p1", "p3"} & ids
    (ix / JOURNAL).unlink()
    (ix / JOURNAL).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(IndexFormatError, match="symbolic link"):
        read(ix)
