"""Make the real-documents development set's corpus from this machine's Debian manual pages
(issue 52): documents nobody here wrote, in English and (man-db's translations) Chinese.

    python scripts/make_manpage_devset.py [--out evireform/evaluation/devsets/manpages]

Each page is rendered by ``man -l`` (plain text, no hyphenation or justification), cut into
its sections (NAME, DESCRIPTION, OPTIONS, ...) and each section into passages of whole
paragraphs of at most about 120 words (a Chinese paragraph counts its characters / 2).  A
passage's title names the page, the section and its place in it ("ssh_config(5) DESCRIPTION
4"), so that the questions' gold passages are named by title (HotpotQA's format).  The corpus
is committed (``corpus.json``, with ``SOURCES.md`` naming each page's package and version):
the questions (``questions.json``) were written against that text, and another machine's
pages may differ.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
from pathlib import Path

#: (section, page, language) of the pages in the set
PAGES = [
    *((1, p, "en") for p in (
        "ssh", "ssh-add", "ssh-agent", "ssh-keygen", "scp", "sftp", "tar", "gzip", "xz",
        "bzip2", "zless", "gzexe", "login", "passwd", "chage", "su", "chsh", "chfn", "newgrp",
        "gpasswd", "man", "apropos", "whatis", "lexgrog")),
    *((5, p, "en") for p in ("ssh_config", "login.defs", "shadow", "passwd", "group",
                             "manpath")),
    *((8, p, "en") for p in ("useradd", "groupadd", "mandb")),
    (1, "man", "zh_CN"), (1, "apropos", "zh_CN"), (1, "whatis", "zh_CN"),
    (5, "manpath", "zh_CN"), (8, "mandb", "zh_CN"),
]

_HEADING = re.compile(r"^(\S.*)$")
_CJK = re.compile(r"[\u3400-\u9fff]")
MAX_WORDS = 120


def render(section: int, page: str, lang: str) -> str:
    base = Path("/usr/share/man") / ("" if lang == "en" else lang) / f"man{section}"
    found = sorted(base.glob(f"{page}.{section}*.gz")) or sorted(base.glob(f"{page}.{section}*"))
    if not found:
        raise SystemExit(f"no manual page {page}({section}) [{lang}] on this machine")
    env = dict(os.environ, MANWIDTH="100", LANG="C.UTF-8", MAN_KEEP_FORMATTING="")
    out = subprocess.run(["man", "--no-hyphenation", "--no-justification", "-l", str(found[0])],
                         capture_output=True, text=True, env=env, check=True).stdout
    return subprocess.run(["col", "-b"], input=out, capture_output=True, text=True,
                          check=True).stdout


def size(text: str) -> float:
    return len(text.split()) + len(_CJK.findall(text)) / 2


def sections(text: str):
    """(heading, [paragraph, ...]) in page order; the page's header and footer lines
    dropped."""
    lines = text.splitlines()[1:-1]
    out: list[tuple[str, list[str]]] = []
    para: list[str] = []

    def flush() -> None:
        if para and out:
            out[-1][1].append(" ".join(" ".join(para).split()))
        para.clear()
    for line in lines:
        if _HEADING.match(line) and not line.startswith((" ", "\t")):
            flush()
            out.append((line.strip(), []))
        elif not line.strip():
            flush()
        else:
            para.append(line.strip())
    flush()
    return [(h, ps) for h, ps in out if ps]


def passages(section: int, page: str, lang: str) -> list[dict]:
    name = f"{page}({section})" + ("" if lang == "en" else f" [{lang}]")
    out = []
    count: dict[str, int] = {}  # a heading met twice continues its numbering
    for head, paras in sections(render(section, page, lang)):
        chunk: list[str] = []
        n = count.get(head, 0)
        for p in paras + [None]:
            if p is None or (chunk and size(" ".join(chunk + [p])) > MAX_WORDS):
                n += 1
                out.append({"title": f"{name} {head} {n}", "text": " ".join(chunk)})
                chunk = []
            if p is not None:
                chunk.append(p)
        count[head] = n
    return [p for p in out if p["text"]]


def package_of(section: int, page: str, lang: str) -> str:
    base = Path("/usr/share/man") / ("" if lang == "en" else lang) / f"man{section}"
    f = sorted(base.glob(f"{page}.{section}*"))[0]
    try:
        pkg = subprocess.run(["dpkg", "-S", str(f)], capture_output=True, text=True,
                             check=True).stdout.split(":")[0]
        ver = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", pkg],
                             capture_output=True, text=True, check=True).stdout
        return f"{pkg} {ver}"
    except (subprocess.CalledProcessError, FileNotFoundError):
        return "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="evireform/evaluation/devsets/manpages")
    out = Path(ap.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    corpus, sources = [], ["# Sources of corpus.json", "",
                           "Debian manual pages rendered by `scripts/make_manpage_devset.py`; "
                           "each page keeps its package's licence.", "",
                           "| page | language | package | passages |", "|---|---|---|---|"]
    for sec, page, lang in PAGES:
        ps = passages(sec, page, lang)
        corpus += ps
        sources.append(f"| {page}({sec}) | {lang} | {package_of(sec, page, lang)} | {len(ps)} |")
    titles = [p["title"] for p in corpus]
    assert len(set(titles)) == len(titles), "passage titles must be unique"
    (out / "corpus.json").write_text(json.dumps(corpus, ensure_ascii=False, indent=0) + "\n",
                                     encoding="utf-8")
    (out / "SOURCES.md").write_text("\n".join(sources) + "\n", encoding="utf-8")
    print(f"{len(corpus)} passages from {len(PAGES)} pages -> {out}")


if __name__ == "__main__":
    main()
