"""Make the third real-documents development set (issues 67 and 68): software READMEs in
Markdown as Debian installs them on this machine (``/usr/share/doc/PACKAGE/README.md``),
documents nobody here wrote, read as a user's folder is read (``evireform index``'s
:func:`evireform.documents.load_paths`, the default embedder's tokenizer, 200-token chunks).

    python scripts/make_readme_devset.py [--out evireform/evaluation/devsets/readmes]

Writes two corpora of the same files and one question list for each:

* ``corpus.json`` / ``questions.json``: the files read as Markdown (the parser: title from
  the document, headings as sections, markup, badges and images left out);
* ``corpus_plain.json`` / ``questions_plain.json``: the same bytes read as plain text
  (``.txt``: the file name as title, every character kept), the reader before the parser.

``--no-headings DIR`` also writes, to DIR (not the package), the Markdown reading with each
section's heading taken out of its first chunk's text (held in the ``section`` metadata
only): what issue 68 proposed, measured with ``evireform eval --questions
DIR/questions.json --corpus DIR/corpus.json --answer-recall``.

The questions (below, written against these files' text) ask for a string that both
readings hold; ``supporting_facts`` name each question's documents by the title that
reading gives them, so a document-level chain@5 is measured on both.  ``bridge``
questions name their second document only through what the first one says ("GnuTLS needs
a distributed revision control system: who wrote it?").  ``SOURCES.md`` records the
packages and versions; another version of a README may differ.
"""
from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DOC = Path("/usr/share/doc")
#: the README of each package, as the file is named in the set
FILES = {"apt": "apt/README.md.gz", "zstd": "zstd/README.md.gz",
         "libsodium": "libsodium23/README.markdown", "libidn2": "libidn2-0/README.md.gz",
         "libxcrypt": "libcrypt-dev/README.md.gz", "man-db": "man-db/README.md.gz",
         "iso-codes": "iso-codes/README.md.gz", "libffi": "libffi8/README.md.gz",
         "gnutls": "libgnutls30/README.md.gz", "git": "git/README.md",
         "pyyaml": "python3-yaml/README.md", "libxml2": "libxml2/README.md",
         "libtasn1": "libtasn1-6/README.md", "libjpeg-turbo": "libjpeg-dev/README.md.gz",
         "libcbor": "libcbor0.8/README.md"}

#: (question, answer, the files that hold the hops (first hop first), type)
QUESTIONS = [
    ("Which APT tool creates the Packages and other index files needed to publish an "
     "archive of deb packages?", "apt-ftparchive", ["apt"], "single"),
    ("What indent convention does most of APT's source code use?",
     "3 spaces with 8 space tab", ["apt"], "single"),
    ("Which file should a triager ask the reporter for when a dependency solver bug "
     "cannot be reproduced?", "/var/lib/dpkg/status", ["apt"], "single"),
    ("How is APT's integration test suite run?", "./test/integration/run-tests", ["apt"],
     "single"),
    ("Which RFC documents the Zstandard format?", "RFC8878", ["zstd"], "single"),
    ("Which library provides Zstandard's fast entropy stage?", "Huff0 and FSE", ["zstd"],
     "single"),
    ("With which option are zstd's negative compression levels specified?", "--fast=#",
     ["zstd"], "single"),
    ("Which library is Sodium a fork of?", "NaCl", ["libsodium"], "single"),
    ("To which address do you send a random mail to join the libsodium mailing list?",
     "sodium-subscribe", ["libsodium"], "single"),
    ("Under which license is libsodium released?", "ISC license", ["libsodium"], "single"),
    ("Which Libidn2 function converts data from UTF-8 to ASCII Compatible Encoding?",
     "idn2_to_ascii_8z", ["libidn2"], "single"),
    ("Which header replaces idna.h to switch an application from IDNA2003 to IDNA2008?",
     "idn2.h", ["libidn2"], "single"),
    ("Besides login(1), which program is libxcrypt intended to be used by?", "passwd(1)",
     ["libxcrypt"], "single"),
    ("Which version of Perl does building libxcrypt from a tarball require at least?",
     "5.14", ["libxcrypt"], "single"),
    ("Under the FHS, what is the root of the writable cat hierarchy that man-db defines?",
     "/var/cache/man", ["man-db"], "single"),
    ("By default, who owns man-db's system-wide cache files?", "user man", ["man-db"],
     "single"),
    ("In which directory does iso-codes store the ISO standards as JSON files?",
     "/usr/share/iso-codes/json", ["iso-codes"], "single"),
    ("Which function does a program call to use the iso-codes translations?", "dgettext",
     ["iso-codes"], "single"),
    ("What was the ISO 639-5 gettext domain called before it was renamed?", "iso_639_5",
     ["iso-codes"], "single"),
    ("What does FFI stand for?", "Foreign Function Interface", ["libffi"], "single"),
    ("When was libffi 3.4.4 released?", "October 23, 2022", ["libffi"], "single"),
    ("Which Python version does building GnuTLS from version-controlled sources need?",
     "3.6 or later", ["gnutls"], "single"),
    ("What does GnuTLS need bison for?", "datetime parser in certtool", ["gnutls"],
     "single"),
    ("Where should security-relevant Git issues be disclosed?",
     "git-security@googlegroups.com", ["git"], "single"),
    ("How did Linus Torvalds describe git when he named it?", "the stupid content tracker",
     ["git"], "single"),
    ("Which PyYAML function should you use when you don't trust the input YAML stream?",
     "yaml.safe_load", ["pyyaml"], "single"),
    ("Which setup.py option skips building and installing PyYAML's LibYAML bindings?",
     "--without-libyaml", ["pyyaml"], "single"),
    ("For which project was libxml2 originally developed?", "GNOME Project", ["libxml2"],
     "single"),
    ("How much faster than libjpeg is libjpeg-turbo generally?", "2-6x",
     ["libjpeg-turbo"], "single"),
    ("Which libjpeg-turbo API is recommended for first-time users?", "TurboJPEG API",
     ["libjpeg-turbo"], "single"),
    ("How is libcbor installed with Homebrew?", "brew install libcbor", ["libcbor"],
     "single"),
    ("Under which license is the Libtasn1 C library?", "Public License version 2.1",
     ["libtasn1"], "single"),
    # two hops: the second document is named only through what the first says
    ("GnuTLS lists an optional library for the internationalization of DNS (IDNA 2008). "
     "Which function of that library converts ACE names into UTF-8?",
     "idn2_to_unicode_8z8z", ["gnutls", "libidn2"], "bridge"),
    ("GnuTLS can use a small optional ASN.1 library. Under which license are that "
     "library's command line tool and self tests?", "General Public License version 3.0",
     ["gnutls", "libtasn1"], "bridge"),
    ("GnuTLS needs a distributed revision control system to check out its sources. Who "
     "originally wrote that system?", "Linus Torvalds", ["gnutls", "git"], "bridge"),
    ("APT is built with a build system whose Ninja generator is chosen with -G Ninja. "
     "Which option of that build system builds libxml2 as static libraries?",
     "BUILD_SHARED_LIBS=OFF", ["apt", "libxml2"], "bridge"),
    ("The library that is backwards (API) compatible with libidn: what kind of shell does "
     "it need to run ./configure?", "POSIX shell", ["libidn2"], "bridge"),
]


def _read(rel: str) -> bytes:
    data = (DOC / rel).read_bytes()
    return gzip.decompress(data) if rel.endswith(".gz") else data


def _corpus(folder: Path, emb) -> tuple[list[dict], dict[str, str]]:
    """The passages of ``folder`` as ``evireform index`` reads it, and each file's title."""
    from evireform.documents import load_paths
    got = load_paths(folder, embedder=emb)
    recs, titles = [], {}
    for p in got.passages:
        name = Path(p.metadata["source"]).stem
        titles.setdefault(name, p.title)
        recs.append({"id": p.id, "title": p.title, "text": p.text, "metadata": p.metadata})
    return recs, titles


def _questions(titles: dict[str, str]) -> list[dict]:
    return [{"_id": f"rm{n:03d}", "question": q, "answer": a, "type": t,
             "supporting_facts": [[titles[f], 0] for f in files]}
            for n, (q, a, files, t) in enumerate(QUESTIONS)]


def _write_without_headings(out: Path, recs: list[dict], titles: dict[str, str]) -> None:
    """The Markdown reading with each section's heading out of its first chunk's text."""
    out.mkdir(parents=True, exist_ok=True)
    seen: set = set()
    bare = []
    for r in recs:
        r = dict(r)
        sec = r["metadata"].get("section")
        key = (r["metadata"]["source"], sec)
        if sec and key not in seen:
            head = sec.split(" > ")[-1]
            if r["text"].startswith(head + "\n"):
                r["text"] = r["text"][len(head) + 1:]
        seen.add(key)
        bare.append(r)
    (out / "corpus.json").write_text(json.dumps(bare, ensure_ascii=False, indent=0) + "\n")
    (out / "questions.json").write_text(json.dumps(_questions(titles), ensure_ascii=False,
                                                   indent=1) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "evireform/evaluation/devsets/readmes"))
    ap.add_argument("--no-headings", metavar="DIR",
                    help="also write the Markdown reading without headings in the text")
    a = ap.parse_args(argv)
    from evireform.embed import get_embedder
    emb = get_embedder("minilm")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for suffix, tag in ((".md", ""), (".txt", "_plain")):
            folder = Path(tmp) / f"readmes{tag}"
            folder.mkdir()
            for name, rel in FILES.items():
                (folder / f"{name}{suffix}").write_bytes(_read(rel))
            recs, titles = _corpus(folder, emb)
            for q, ans, files, _ in QUESTIONS:
                texts = [" ".join(r["text"].lower().split()) for r in recs
                         if Path(r["metadata"]["source"]).stem == files[-1]]
                if not any(" ".join(ans.lower().split()) in t for t in texts):
                    raise SystemExit(f"{tag or 'markdown'}: {ans!r} is not in {files[-1]}")
            (out / f"corpus{tag}.json").write_text(json.dumps(recs, ensure_ascii=False,
                                                              indent=0) + "\n")
            (out / f"questions{tag}.json").write_text(json.dumps(
                _questions(titles), ensure_ascii=False, indent=1) + "\n")
            print(f"corpus{tag}.json: {len(recs)} passages of {len(FILES)} files",
                  file=sys.stderr)
            if a.no_headings and not tag:
                _write_without_headings(Path(a.no_headings), recs, titles)
    pkgs = sorted({rel.split("/")[0] for rel in FILES.values()})
    pkgs = [{"libcrypt-dev": "libcrypt-dev", "libsodium23": "libsodium23"}.get(p, p)
            for p in pkgs]
    versions = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Version}\\n", *pkgs],
                              capture_output=True, text=True).stdout
    lines = ["# Sources", "", "Software READMEs as Debian installs them under "
             "`/usr/share/doc/PACKAGE/` (made by `scripts/make_readme_devset.py`; each file "
             "under its project's own license, named in the file or beside it there):", ""]
    lines += [f"- `{name}`: `/usr/share/doc/{rel}`" for name, rel in FILES.items()]
    lines += ["", "Packages and versions read:", "", "```", versions.strip(), "```", ""]
    (out / "SOURCES.md").write_text("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
