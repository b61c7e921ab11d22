"""Make the second real-documents development set's corpus (issue 67) from this machine's
Python 3 standard library documentation (Debian's ``python3-doc``, HTML): documents nobody
here wrote, read through the package's own HTML reader (page chrome left out, issue 68).

    python scripts/make_pydoc_devset.py [--out evireform/evaluation/devsets/pydoc]

Each page is read by :func:`evireform.formats.read_document` into its sections (the
headings' path), and each section cut into passages of whole blocks of at most about 120
words.  A passage's title names the module, the section and its place in it ("shutil:
Directory and files operations 3"), so that the questions' gold passages are named by title
(HotpotQA's format).  The corpus is committed (``corpus.json``, with ``SOURCES.md`` naming
the package and version): the questions (``questions.json``) were written against that
text, and another version of the documentation may differ.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evireform.formats import read_document  # noqa: E402

HTML = Path("/usr/share/doc/python3/html/library")
#: the modules of the set (one page each)
PAGES = ("shutil", "tempfile", "json", "gzip", "zipfile", "sqlite3", "subprocess", "venv",
         "http.server", "configparser", "hashlib", "secrets", "csv", "timeit", "glob")
MAX_WORDS = 120


def passages(module: str) -> list[dict]:
    doc = read_document(HTML / f"{module}.html")
    out = []
    for sec in doc.sections:
        label = " > ".join(p.split(" — ")[0] for p in sec.path[1:]) or "Introduction"
        cur: list[str] = []
        n = 0

        def flush():
            nonlocal cur, n
            if cur:
                n += 1
                out.append({"title": f"{module}: {label} {n}", "text": "\n".join(cur)})
            cur = []
        for b in sec.blocks:
            words = len(b.text.split())
            if cur and sum(len(c.split()) for c in cur) + words > MAX_WORDS:
                flush()
            cur.append(b.text)
        flush()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "evireform/evaluation/devsets/pydoc"))
    a = ap.parse_args(argv)
    if not HTML.is_dir():
        raise SystemExit(f"{HTML} not found: install Debian's python3-doc")
    corpus, counts = [], {}
    for m in PAGES:
        ps = passages(m)
        counts[m] = len(ps)
        corpus.extend(ps)
    titles = [p["title"] for p in corpus]
    assert len(set(titles)) == len(titles), "titles must be unique"
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "corpus.json").write_text(json.dumps(corpus, ensure_ascii=False, indent=0) + "\n")
    version = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "python3-doc"],
                             capture_output=True, text=True).stdout.strip() or "?"
    lines = ["# Sources of corpus.json", "",
             "The Python 3 standard library documentation (Debian's `python3-doc` "
             f"{version}, HTML), read by `scripts/make_pydoc_devset.py`; Python Software "
             "Foundation License.", "", "| page | passages |", "|---|---|"]
    lines += [f"| library/{m}.html | {n} |" for m, n in counts.items()]
    (out / "SOURCES.md").write_text("\n".join(lines) + "\n")
    print(f"{len(corpus)} passages from {len(PAGES)} pages -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
