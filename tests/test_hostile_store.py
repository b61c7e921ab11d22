"""Hostile conditions for the store: updates waiting for input, locks per index, large texts verified in bounded memory, characters cut between strings, data the fast tier would have trusted."""
import os
import subprocess
import sys
import threading
import time
import numpy as np
import pytest
from evireform import Passage, PropositionIndex
from evireform.cli import main
from evireform.embed import HashingEmbedder

from hostile_common import REPO, EMB, _run, _index, _ps, _ranks  # noqa: F401


def _big_index(tmp_path, mb: int):
    """An index whose first passage holds ``mb`` MiB of text (its propositions are small)."""
    from evireform import Proposition
    ps = [Passage("big", "Big", "lorem ipsum dolor " * (mb * 58254))] + _ps(20)
    props = [Proposition(f"Alpha {i} met Gamma Ray.", p.id, (f"Alpha {i}", "Gamma Ray"))
             for i, p in enumerate(ps)]
    emb = EMB.encode([p.text for p in props])
    return PropositionIndex.from_propositions(ps, props, emb, EMB.name).save(tmp_path / "ix")


@pytest.mark.parametrize("flag", ["--add", "--delete"])
def test_an_update_waiting_for_input_holds_no_lock(tmp_path, flag):
    """The reported case: ``update --add DIR`` of a folder holding a FIFO (opened, at
    c4363ba, under a lock on the index's parent folder, so every update in that folder hung
    behind it); and ``--delete FIFO``, which waits for its writer before taking any lock."""
    a = _index(tmp_path, _ps(3), "a")
    b = _index(tmp_path, _ps(3), "b")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "kept.txt").write_text("Omega Point met Sigma Ray.")
    fifo = notes / "pipe.txt" if flag == "--add" else tmp_path / "ids.fifo"
    os.mkfifo(fifo)
    blocked = subprocess.Popen([sys.executable, "-m", "evireform", "update", str(a), flag,
                                str(notes if flag == "--add" else fifo), "--quiet"],
                               cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env={**os.environ, "PYTHONPATH": REPO})
    try:
        time.sleep(3)  # it waits on the FIFO (--delete) or has skipped it (--add)
        ids = tmp_path / "del.txt"
        ids.write_text("p0\n")
        done = []
        t = threading.Thread(target=lambda: done.append(
            main(["update", str(a), "--delete", str(ids), "--quiet"])), daemon=True)
        t.start()
        t.join(60)
        assert done == [0], "an update of the same index waited for the blocked one"
        assert main(["update", str(b), "--delete", str(ids), "--quiet"]) == 0
    finally:
        try:  # release a reader still waiting (never block here if there is none)
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            os.write(fd, b"p1\n" if flag == "--delete" else b"[]")
            os.close(fd)
        except OSError:
            pass
        out, err = blocked.communicate(timeout=120)
    if flag == "--add":  # only regular files are read: the FIFO skipped with a warning
        assert blocked.returncode == 0, err.decode()[-400:]
        assert "pipe.txt" in err.decode()
        texts = [p.text for p in PropositionIndex.load(a).passages]
        assert "Omega Point met Sigma Ray." in texts and len(texts) == 3
    else:
        assert sorted(p.id for p in PropositionIndex.load(a).passages) == ["p2"]


def test_locks_are_per_index_not_per_folder(tmp_path):
    from evireform.store import index_lock
    a = _index(tmp_path, _ps(3), "a")
    b = _index(tmp_path, _ps(3), "b")
    with index_lock(a):
        code = ("import sys; sys.path.insert(0, %r)\n"
                "from evireform.store import index_lock\n"
                "with index_lock(%r): print('got it')" % (REPO, str(b)))
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=60)
        assert r.stdout.strip() == "got it"


@pytest.mark.parametrize("op", ["add", "delete", "upsert"])
def test_a_one_passage_update_never_decodes_the_texts_it_keeps(tmp_path, op):
    import tracemalloc
    ix = _big_index(tmp_path, 48)
    idx = PropositionIndex.load(ix, verify="fast")
    one = [Passage("new", "New", "Epsilon met Zeta Ray.")]
    tracemalloc.start()
    try:
        out = {"add": lambda: idx.add(one, EMB), "delete": lambda: idx.delete(["p3"]),
               "upsert": lambda: idx.upsert([Passage("p4", "T", "Changed text.")], EMB)}[op]()
        out.save(ix)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"{op} of one passage allocated {peak >> 20} MiB (the text: 48)"
    back = PropositionIndex.load(ix, verify="full")  # the copied bytes are the same strings
    assert back.passages[0] == Passage("big", "Big", "lorem ipsum dolor " * (48 * 58254))
    ids = [p.id for p in back.passages]
    assert {"add": "new" in ids, "delete": "p3" not in ids,
            "upsert": back.passages[ids.index("p4")].text == "Changed text."}[op]
    assert back.prop_texts == [t for t in back.prop_texts]  # every table reads back


def test_full_verification_of_a_large_text_runs_in_bounded_memory(tmp_path, monkeypatch):
    """The full tier's memory is bounded by its UTF-8 step (16 MiB; 1 MiB here, so an 8 MiB
    text shows the bound in seconds: a check holding the text whole would pass 8 MiB)."""
    import tracemalloc
    from evireform.store import verify
    monkeypatch.setattr(verify, "UTF8_STEP", 1 << 20)
    ix = _big_index(tmp_path, 8)
    tracemalloc.start()
    try:
        PropositionIndex.load(ix, verify="full")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 7 << 20, f"verifying an 8 MiB text allocated {peak >> 20} MiB"


def test_the_utf8_check_finds_a_character_cut_between_two_strings(tmp_path):
    """The blob decodes as a stream, so a character split across two strings would pass it:
    the check also refuses a string that starts with a continuation byte."""
    from evireform import IndexFormatError
    from evireform.store.verify import _check_utf8
    blob = np.frombuffer("aé".encode() + b"b", np.uint8)  # 'a', 0xC3 0xA9, 'b'
    _check_utf8(tmp_path / "s", blob, np.array([0, 1, 4], np.int64))
    with pytest.raises(IndexFormatError, match="at byte 2"):
        _check_utf8(tmp_path / "s", blob, np.array([0, 2, 4], np.int64))
    with pytest.raises(IndexFormatError, match="at byte 1"):  # an invalid byte, any step
        _check_utf8(tmp_path / "s", np.frombuffer(b"a\xffb", np.uint8),
                    np.array([0, 3], np.int64))


def test_an_update_refuses_data_its_fast_tier_would_have_trusted(tmp_path):
    """Bit rot in the middle of a file over 128 KiB: outside the stamp's edge digest, so
    only a full verification sees it (c4363ba's update trusted the fast tier)."""
    wide = HashingEmbedder(256)
    ix = PropositionIndex.build(_ps(200), wide, show_progress=False).save(tmp_path / "ix")
    assert (ix / "embeddings.npy").stat().st_size > 3 << 16
    PropositionIndex.load(ix)
    # bit rot inside the embeddings, size and mtime kept: the stamp still matches
    f = ix / "embeddings.npy"
    st = f.stat()
    raw = bytearray(f.read_bytes())
    raw[len(raw) // 2] ^= 0x40
    f.write_bytes(bytes(raw))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert PropositionIndex.load(ix).verified == "fast"  # the stamp still vouches for it
    from evireform import IndexFormatError
    with pytest.raises(IndexFormatError, match="embeddings.npy: sha256"):  # an update's tier
        PropositionIndex.load(ix, verify="checksums")
    ids = tmp_path / "del.txt"
    ids.write_text("p0\n")
    assert main(["update", str(ix), "--delete", str(ids), "--quiet"]) == 2
    from evireform import IndexFormatError
    with pytest.raises(IndexFormatError):
        PropositionIndex.load(ix, verify="full")
