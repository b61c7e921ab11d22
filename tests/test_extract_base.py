"""The extractors' corpus statistics carried by the index (evireform.extract.base, issue
84): an update adds the new
passages' raw counts to those the index saved instead of fitting the extractor on every
passage again; the statistics equal a fit's wherever the counts are exact (phrases always,
prose while its lower-case words do not drift), a drifted prose namespace is fitted again,
and the updated index equals the one a full refit makes."""
import json

import numpy as np
import pytest

from evireform import PropositionIndex
from evireform.embed import HashingEmbedder
from evireform.extract.auto import NamespaceAutoExtractor
from evireform.extract.phrases import PhraseExtractor
from evireform.extract.prose import ProseExtractor
from evireform.index import arrays_equal
from evireform.strings import Concat
from evireform.types import Passage

EMB = HashingEmbedder(32)

NAMES = ["Orvel Society", "Journal Zeta", "Alice Smith", "Port Arlen", "Mira Quist",
         "Dorn Valley", "Kessel Works", "Talon Bridge", "Ferro Hall", "Lumen Press",
         "SSH_AUTH_SOCK", "ssh-keygen", "ProxyJump", "Yara Lind", "Cobalt Row"]
WORDS = ["the", "builds", "runs", "a", "small", "press", "near", "river", "archive",
         "keeps", "notes", "every", "night", "office", "moved", "to", "old", "station"]


def _passages(rng, n, prefix="p", ns=None):
    out = []
    for i in range(n):
        sents = []
        for _ in range(rng.integers(1, 4)):
            a, b = rng.choice(len(NAMES), 2, replace=False)
            w = " ".join(rng.choice(WORDS, size=rng.integers(2, 6)))
            sents.append(f"{NAMES[a]} {w} {NAMES[b]}.")
        md = {} if ns is None else {"namespace": ns}
        out.append(Passage(f"{prefix}{i}", NAMES[i % len(NAMES)], " ".join(sents), md))
    return out


@pytest.mark.parametrize("make", [ProseExtractor, PhraseExtractor, NamespaceAutoExtractor])
def test_grown_and_shrunk_counts_give_a_fits_statistics(rng, make):
    """Counts saved (through JSON), restored, grown by new passages: the statistics of a fit
    over all of them; shrunk by those passages again: a fit over the rest."""
    old = _passages(rng, 60) + _passages(rng, 30, "q", ns="t")
    new = _passages(rng, 4, "n") + _passages(rng, 2, "m", ns="t")
    ext = make()
    if isinstance(ext, NamespaceAutoExtractor):  # prose for one namespace, phrases the other
        ext.choices = {"": "prose", '"t"': "phrases"}
    ext.fit(old)
    counts = json.loads(json.dumps(ext.counts()))
    grown = make() if not isinstance(ext, NamespaceAutoExtractor) else \
        NamespaceAutoExtractor(choices=dict(ext.choices))
    assert grown.restore(counts)
    assert grown.grow(Concat(old, new), new) == []  # nothing fitted again
    full = make() if not isinstance(ext, NamespaceAutoExtractor) else \
        NamespaceAutoExtractor(choices=dict(ext.choices))
    full.fit(old + new)

    def stats(e):
        if isinstance(e, NamespaceAutoExtractor):
            return stats(e.prose), stats(e.phrases)
        return e._fitted()

    assert stats(grown) == stats(full)
    grown.shrink(new)
    again = make() if not isinstance(ext, NamespaceAutoExtractor) else \
        NamespaceAutoExtractor(choices=dict(ext.choices))
    assert stats(grown) == stats(again.fit(old))
    assert not make().restore({"extractor": "another", "version": 1, "namespaces": {}})
    assert not make().restore({"extractor": ext.name, "version": 1, "namespaces": {"": {}}})


def test_prose_counts_that_drift_are_fitted_again(rng):
    """New passages that move more than DRIFT_SHARE of the lower-case words: the namespace
    is fitted again (its statistics a fit's), not updated from counts that no longer say."""
    old = _passages(rng, 40)
    ext = ProseExtractor().fit(old)
    novel = [Passage(f"d{i}", "Drift", " ".join(f"word{i}x{j} word{i}x{j}" for j in range(30))
                     + ".") for i in range(3)]
    assert ext.grow(Concat(old, novel), novel) == [None]
    assert ext._fitted() == ProseExtractor().fit(old + novel)._fitted()


def test_an_update_adds_counts_instead_of_fitting_and_equals_a_refit(tmp_path, rng,
                                                                     monkeypatch):
    """A saved index carries its extractor's counts; `update` adds to them without fitting
    the extractor on the old passages (fit is never called), and the result equals the
    update with --refit (every array, text and statistic); a delete then an add too."""
    from evireform.cli import main
    ps = _passages(rng, 80)
    idx = PropositionIndex.build(ps, EMB, extractor="prose", show_progress=False)
    assert idx.extract_counts["extractor"] == "prose-v2"
    idx.save(tmp_path / "ix")
    assert (tmp_path / "ix" / "extract_counts.json").is_file()
    note = tmp_path / "note.md"
    note.write_text("# Harbour log\n\nMira Quist keeps notes near Port Arlen.\nThe Kessel "
                    "Works moved to the old station.\n")
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        import shutil
        shutil.copytree(tmp_path / "ix", tmp_path / name / "ix")
    assert main(["update", str(tmp_path / "b" / "ix"), "--add", str(note), "--refit",
                 "--quiet"]) == 0
    calls = []
    real_fit = ProseExtractor.fit

    def counting_fit(self, passages, new=None):
        calls.append(len(passages))
        return real_fit(self, passages, new)
    monkeypatch.setattr(ProseExtractor, "fit", counting_fit)
    assert main(["update", str(tmp_path / "a" / "ix"), "--add", str(note), "--quiet"]) == 0
    assert calls == []  # the counts the index carried, not a fit over its passages
    a = PropositionIndex.load(tmp_path / "a" / "ix")
    b = PropositionIndex.load(tmp_path / "b" / "ix")
    assert a.n_passages == 81 and arrays_equal(a, b)
    ca = json.loads((tmp_path / "a" / "ix" / "extract_counts.json").read_text())
    cb = json.loads((tmp_path / "b" / "ix" / "extract_counts.json").read_text())
    assert ca == cb and ca["namespaces"][""]["n"] == 81
    # a delete takes the passages' counts out: the next add still equals a refit's
    ids = tmp_path / "del.txt"
    ids.write_text("p3\np7\n")
    for name in ("a", "b"):
        assert main(["update", str(tmp_path / name / "ix"), "--delete", str(ids),
                     "--quiet"]) == 0
    more = [Passage("z1", "Ferro Hall", "Yara Lind runs the Lumen Press near Ferro Hall.")]
    a2 = PropositionIndex.load(tmp_path / "a" / "ix").add(more, EMB)
    assert calls == []  # the shrunk counts, grown
    b2 = PropositionIndex.load(tmp_path / "b" / "ix").add(more, EMB, refit=True)
    assert calls == [80]  # the refit reads every passage (79 kept and the new one)
    assert arrays_equal(a2, b2) and a2.extract_counts == b2.extract_counts


def test_unreadable_counts_make_the_update_fit_again(tmp_path, rng):
    """A counts file edited after the index was loaded (another generation's, or damaged):
    not taken; the update fits the extractor on the index's passages as before."""
    ps = _passages(rng, 30)
    PropositionIndex.build(ps, EMB, extractor="prose", show_progress=False).save(tmp_path / "ix")
    idx = PropositionIndex.load(tmp_path / "ix")
    (tmp_path / "ix" / "extract_counts.json").write_text("{}")  # after the load
    new = [Passage("z", "Talon Bridge", "Alice Smith moved to Talon Bridge.")]
    got = idx.add(new, EMB)
    want = PropositionIndex.build(ps, EMB, extractor="prose", show_progress=False).add(
        new, EMB, refit=True)
    assert arrays_equal(got, want) and got.extract_counts == want.extract_counts
    assert np.array_equal(got.owner, want.owner)
