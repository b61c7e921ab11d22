"""Question sets in the HippoRAG data formats, matched to a corpus.

* MuSiQue format: records with ``question`` and ``paragraphs`` (``is_supporting``); gold =
  the supporting paragraphs, matched to the corpus by exact text.
* HotpotQA format (also 2WikiMultiHopQA): ``question`` and ``supporting_facts`` ([title, i]);
  gold = the distinct supporting titles, matched to the corpus by title; ``context`` may be absent.
"""
from __future__ import annotations

from .._checks import loads as _json_loads

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import AbstractSet, Any, Sequence, TYPE_CHECKING

from ..types import Passage

if TYPE_CHECKING:  # annotations only
    from ..types import StrPath

#: the question sets ``evireform eval --dataset`` knows: (questions, corpus) under the data folder
DATASETS = {
    "musique": ("musique/musique.json", "musique/musique_corpus.json"),
    "hotpotqa": ("hotpotqa/hotpotqa.json", "hotpotqa/hotpotqa_corpus.json"),
    # the real-documents development set (issue 52), shipped with the package: Debian
    # manual pages (scripts/make_manpage_devset.py), questions with short answer strings
    "manpages": (str(Path(__file__).parent / "devsets/manpages/questions.json"),
                 str(Path(__file__).parent / "devsets/manpages/corpus.json")),
    # the second one (issue 67): the Python 3 standard library documentation, HTML read by
    # the package's reader (scripts/make_pydoc_devset.py), 80 questions, 39 of them two-hop
    "pydoc": (str(Path(__file__).parent / "devsets/pydoc/questions.json"),
              str(Path(__file__).parent / "devsets/pydoc/corpus.json")),
    # "pydoc-user": the same questions, answers and gold asked in a user's words, not the
    # documentation's (devsets/pydoc/SOURCES.md says how they were reworded)
    "pydoc-user": (str(Path(__file__).parent / "devsets/pydoc/questions_user.json"),
                   str(Path(__file__).parent / "devsets/pydoc/corpus.json")),
    # the third (issues 67, 68): 15 software READMEs in Markdown as Debian installs them,
    # read as a user's folder is (scripts/make_readme_devset.py), 37 questions, 5 two-hop;
    # "readmes-plain": the same files and questions, read as plain text
    "readmes": (str(Path(__file__).parent / "devsets/readmes/questions.json"),
                str(Path(__file__).parent / "devsets/readmes/corpus.json")),
    "readmes-plain": (str(Path(__file__).parent / "devsets/readmes/questions_plain.json"),
                      str(Path(__file__).parent / "devsets/readmes/corpus_plain.json")),
    # the fourth: 27 module pages of the Node.js API documentation (Debian's nodejs-doc,
    # Markdown) read as a user's folder is (scripts/make_nodejs_devset.py), 157 questions in
    # a developer's words, 78 of them two-hop across two pages
    "nodejs": (str(Path(__file__).parent / "devsets/nodejs/questions.json"),
               str(Path(__file__).parent / "devsets/nodejs/corpus.json")),
}

#: the sets whose answers are strings of the passages: ``eval`` adds Answer@K for them
ANSWER_RECALL_SETS = frozenset({"manpages", "pydoc", "pydoc-user", "readmes", "readmes-plain",
                                "nodejs"})


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    answer: str
    gold: frozenset[int]          # corpus positions of the gold passages
    type: str = ""
    aliases: tuple[str, ...] = ()  # other accepted answers (MuSiQue answer_aliases)
    #: the gold evidence graph's edges (src, dst) over corpus positions: sub-question s
    #: depends on sub-question t's answer ("#t") -> (paragraph of t, paragraph of s).
    #: None when the format has no decomposition (HotpotQA)
    gold_edges: frozenset[Any] | None = None
    #: the gold passages by the evidence they stand for: one set per supporting title whose
    #: title several passages share (a document cut into chunks: any one of them counts as
    #: that document found); None: every gold passage is its own piece of evidence, as in
    #: the paper's sets (one passage a title or paragraph)
    gold_groups: tuple[frozenset[int], ...] | None = None

    @property
    def evidence(self) -> tuple[frozenset[int], ...]:
        """The gold as pieces of evidence: ``gold_groups``, or one set per gold passage."""
        if self.gold_groups is not None:
            return self.gold_groups
        return tuple(frozenset((j,)) for j in sorted(self.gold))

    def found(self, passages: AbstractSet[int]) -> int:
        """How many pieces of :attr:`evidence` have a passage in ``passages`` (of
        ``len(evidence)``): what Recall, Chain and Hit, and the pool coverage, count."""
        if self.gold_groups is None:
            return len(self.gold & passages)
        return sum(1 for g in self.gold_groups if g & passages)


def _norm(text: str) -> str:
    return " ".join(str(text).split())


def load_questions(path: StrPath, passages: Sequence[Passage]) -> list[Question]:
    """Read MuSiQue- or HotpotQA-format questions and match gold passages to ``passages``.

    A gold passage missing from the corpus raises ``ValueError`` naming the question.
    """
    try:
        recs = _json_loads(Path(path).read_text(encoding="utf-8"), str(path))
    except UnicodeDecodeError as exc:
        raise ValueError(f"questions file {path} is not UTF-8 text ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"questions file {path} is not valid JSON: {exc}") from None
    if not isinstance(recs, list) or not recs:
        raise ValueError(f"{path}: expected a non-empty JSON list of questions")
    by_text: dict[str, int] = {}
    by_title: dict[str, list[int]] = {}
    for j, p in enumerate(passages):
        by_text.setdefault(_norm(p.text), j)
        by_title.setdefault(p.title, []).append(j)
    out = []
    for n, r in enumerate(recs):
        if not isinstance(r, dict):
            raise ValueError(f"{path}: record {n} is a {type(r).__name__}, expected an object")
        qid = str(r.get("id", r.get("_id", n)))
        if not isinstance(r.get("question"), str) or not r["question"].strip():
            raise ValueError(f"{path}: record {n} (id {qid}) has no 'question' string")
        gold_groups = None
        if "paragraphs" in r:
            gold = set()
            for para in r["paragraphs"]:
                if para.get("is_supporting"):
                    j = by_text.get(_norm(para.get("paragraph_text", "")))
                    if j is None:
                        raise ValueError(f"question {qid}: gold paragraph "
                                         f"{para.get('title')!r} is not in the corpus")
                    gold.add(j)
            qtype = f"{len(r.get('question_decomposition', []))}hop"
            gold_edges = _decomposition_edges(r, by_text, qid)
        elif "supporting_facts" in r:
            gold = set()
            groups = []
            for title in dict.fromkeys(t for t, _ in r["supporting_facts"]):
                if title not in by_title:
                    raise ValueError(f"question {qid}: gold title {title!r} is not in the corpus")
                gold.update(by_title[title])
                groups.append(frozenset(by_title[title]))
            qtype = str(r.get("type", ""))
            gold_edges = None
            if any(len(g) > 1 for g in groups):
                gold_groups = tuple(groups)
        else:
            raise ValueError(f"{path}: record {n} has neither 'paragraphs' nor 'supporting_facts'")
        if not gold:
            raise ValueError(f"question {qid} has no gold passage")
        aliases = tuple(str(a) for a in (r.get("answer_aliases") or []))
        out.append(Question(qid, r["question"], str(r.get("answer", "")), frozenset(gold), qtype,
                            aliases, gold_edges, gold_groups))
    return out


_REF = re.compile(r"#(\d+)")


def _decomposition_edges(r: dict[str, Any], by_text: dict[str, Any], qid: str) -> frozenset[Any] | None:
    """MuSiQue ``question_decomposition`` -> gold edges (see :class:`Question`)."""
    steps = r.get("question_decomposition")
    if not isinstance(steps, list) or not steps:
        return None
    paras = r.get("paragraphs") or []
    node = []
    for st in steps:
        i = st.get("paragraph_support_idx") if isinstance(st, dict) else None
        if not isinstance(i, int) or not 0 <= i < len(paras):
            return None
        j = by_text.get(_norm(paras[i].get("paragraph_text", "")))
        if j is None:
            raise ValueError(f"question {qid}: decomposition paragraph {i} is not in the corpus")
        node.append(j)
    edges = set()
    for s, st in enumerate(steps):
        for t in _REF.findall(str(st.get("question", ""))):
            t = int(t) - 1
            if 0 <= t < len(node) and node[t] != node[s]:
                edges.add((node[t], node[s]))
    return frozenset(edges)


def passage_texts(passages: Sequence[Passage]) -> list[str]:
    """Dense passage baseline text: title + newline + text."""
    return [f"{p.title}\n{p.text}" for p in passages]


def _lower(obj):
    if isinstance(obj, str):
        return obj.lower()
    if isinstance(obj, list):
        return [_lower(x) for x in obj]
    if isinstance(obj, dict):
        return {k: _lower(v) for k, v in obj.items()}
    return obj


def lowercased_copy(path: StrPath, out_dir: StrPath) -> Path:
    """A lower-cased copy of a corpus or questions JSON file under ``out_dir`` (named by the
    source file's checksum, written once): every string value lower-cased, and the keys of
    a title -> sentences corpus; ``ValueError`` when lower-casing merges two titles."""
    from ..store import file_sha256
    path = Path(path)
    out = Path(out_dir) / f"{path.stem}-{file_sha256(path)[:12]}-lower{path.suffix}"
    if out.is_file():
        return out
    obj = _json_loads(path.read_text(encoding="utf-8"), str(path))
    if isinstance(obj, dict):  # HotpotQA corpus: title -> sentences
        low = {k.lower(): _lower(v) for k, v in obj.items()}
        if len(low) != len(obj):
            raise ValueError(f"{path}: lower-casing merges titles that differ only in case")
    else:
        low = _lower(obj)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".part")
    tmp.write_text(json.dumps(low, ensure_ascii=False), encoding="utf-8")
    tmp.replace(out)
    return out


def combined_copy(path: StrPath, extras, out_dir: StrPath) -> Path:
    """The corpus ``path`` followed by the passages of the corpora ``extras`` (distractors), as
    one JSON list of ``{"id", "title", "text"}`` records under ``out_dir`` (named by every
    file's checksum, written once).  The first corpus keeps its passages, in order and with
    their ids, so gold passages stay where they were; an extra passage whose title and text
    equal one already there is left out (it would be a second copy of a gold passage)."""
    from ..corpus import load_corpus
    from ..store import file_sha256
    path = Path(path)
    extras = [Path(e) for e in extras]
    key = "-".join(file_sha256(p)[:8] for p in [path, *extras])
    out = Path(out_dir) / f"{path.stem}-plus{len(extras)}-{key}.json"
    if out.is_file():
        return out
    recs, seen, ids = [], set(), set()
    for n, p in enumerate([path, *extras]):
        for psg in load_corpus(p):
            key2 = (psg.title, psg.text)
            if n and key2 in seen:
                continue
            pid = psg.id if psg.id not in ids else f"{p.stem}:{psg.id}"
            seen.add(key2)
            ids.add(pid)
            recs.append({"id": pid, "title": psg.title, "text": psg.text})
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.part")
    tmp.write_text(json.dumps(recs, ensure_ascii=False), encoding="utf-8")
    tmp.replace(out)
    return out
