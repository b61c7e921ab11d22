"""The retriever's three decision roles and their LLM-free implementations.

* :class:`Selector` picks seed propositions among the question's candidates (paper Eq. 7);
* :class:`Reformulator` turns the question and the observed passages into residual queries
  (section 3.6);
* :class:`Controller` decides, between rounds, whether the evidence is sufficient (Eq. 19).

The LLM implementations (another module) plug into the same interfaces.  Whatever a role
returns is validated by the retriever (Appendix C.1), so a role can never crash retrieval.
"""
from __future__ import annotations

import re
from collections.abc import Sequence as _SequenceABC
from dataclasses import dataclass
from functools import partial
from typing import Any, Iterable, Protocol, Sequence, TYPE_CHECKING, runtime_checkable

from ._checks import positive_int
from .entities import canonical_entity, words
from .extract import name_spans, split_sentences
from .text import ENGLISH_STOPWORDS
from .types import Passage

if TYPE_CHECKING:  # annotations only
    from numpy.typing import ArrayLike
    from .index import PropositionIndex


#: residual queries longer than this many characters are dropped (and counted in the trace):
#: a query is a search phrase, and a runaway LLM reply should not be embedded as one
MAX_QUERY_CHARS = 1000


def clean_queries(queries: Sequence[str], limit: int) -> tuple[list[str], int]:
    """Drop non-strings, queries without a letter or digit (blank, NUL-only, punctuation:
    nothing to search for), duplicates and queries over :data:`MAX_QUERY_CHARS` characters;
    control characters are removed first; cap at ``limit``.  Returns (kept, dropped): the
    retriever counts the dropped ones in ``Trace.dropped_queries``."""
    out, dropped = [], 0
    if isinstance(queries, str):
        queries = [queries]
    for q in queries or []:
        if not isinstance(q, str):
            dropped += 1
            continue
        if not q.isprintable():
            q = "".join(c for c in q if c.isprintable() or c.isspace())
        s = q.strip()
        if not any(c.isalnum() for c in q) or s in out or len(s) > MAX_QUERY_CHARS:
            dropped += 1
            continue
        out.append(s)
    dropped += max(0, len(out) - limit)
    return out[:limit], dropped


class RoleResult(list[Any]):
    """A role's list output plus what happened on the way (reported in the trace): whether a
    repair turn was needed, and why the LLM-free fallback answered, if it did."""

    def __init__(self, items: Any=(), role: str = "", repaired: bool = False,
                 fallback: str | None = None, notes: Iterable[str] = ()) -> None:
        super().__init__(items)
        self.role: str = role
        self.repaired: bool = repaired
        self.fallback: str | None = fallback
        #: further events, e.g. "select:cut:40" when candidates were cut to fit the context
        self.notes: list[str] = list(notes)
        #: per item, what the role knows of it (the LLM-free reformulator: each query's
        #: bridge, the observed passage it came from and the bridge's score)
        self.details: list[dict[str, Any]] = []

    def events(self) -> list[str]:
        out = list(self.notes)
        if self.repaired:
            out.append(f"{self.role}:repaired")
        if self.fallback:
            out.append(f"{self.role}:fallback:{self.fallback}")
        return out


@dataclass(frozen=True)
class Candidate:
    """A candidate proposition shown to the selector."""

    id: int
    score: float
    text: str
    passage: int


class Candidates(_SequenceABC):
    """The candidates shown to a selector, best first: a read-only sequence of
    :class:`Candidate` made on first access, so a selector that looks at the top few (the
    LLM-free one) costs a few objects, not one per candidate; one that reads them all gets
    the same objects a list would hold.  ``texts``: indexable by proposition id (the index's
    texts), or None for candidates shown without text."""

    __slots__ = ("_ids", "_scores", "_passages", "_texts", "_made", "_owner")

    def __init__(self, ids: Any, scores: ArrayLike, passages: Sequence[Any] | None,
                 texts: Sequence[str] | None = None, *, owner: Any = None) -> None:
        """``passages``: each candidate's passage position, or None with ``owner`` (the
        index's proposition -> passage array, read per candidate made)."""
        if passages is None and owner is None:
            raise ValueError("Candidates needs passages or owner")
        self._ids, self._scores, self._passages, self._texts = ids, scores, passages, texts
        self._owner = owner
        self._made: list[Any] = [None] * len(ids)

    def __len__(self) -> int:
        return len(self._ids)

    def _at(self, t: int) -> Candidate:
        c = self._made[t]
        if c is None:
            i = self._ids[t]
            c = self._made[t] = Candidate(i, self._scores[t],
                                          "" if self._texts is None else self._texts[i],
                                          int(self._owner[i]) if self._passages is None
                                          else self._passages[t])
        return c

    def __getitem__(self, t):
        if isinstance(t, slice):
            return [self._at(u) for u in range(*t.indices(len(self._ids)))]
        n = len(self._ids)
        t = int(t)
        if t < 0:
            t += n
        if not 0 <= t < n:
            raise IndexError("candidate index out of range")
        return self._at(t)

    def __iter__(self):
        return (self._at(t) for t in range(len(self._ids)))

    def __repr__(self) -> str:
        return f"Candidates({list(self)!r})"


@runtime_checkable
class Selector(Protocol):
    name: str

    def select(self, question: str, candidates: Sequence[Candidate], max_selected: int) -> list[int]:
        """Proposition ids chosen among ``candidates`` (invalid ids are dropped later)."""
        ...


@runtime_checkable
class Reformulator(Protocol):
    name: str

    def reformulate(self, question: str, observed: Sequence[Passage], max_queries: int) -> list[str]:
        """Residual queries for what ``observed`` leaves unresolved (empty ones are dropped)."""
        ...


@runtime_checkable
class Controller(Protocol):
    name: str

    def sufficient(self, question: str, passages: Sequence[Passage]) -> bool:
        """True when ``passages`` suffice to answer ``question`` (stop adding rounds)."""
        ...

    def assess(self, question: str, passages: Sequence[Passage]) -> tuple[bool, list[str]]:
        """(sufficient, queries for what is missing).  The retriever calls this between
        rounds; the default names no gaps.  An LLM controller returns its gap queries, which
        become the next round's residual queries."""
        return bool(self.sufficient(question, passages)), []


class TopScoreSelector(Selector):
    """Select the ``n`` highest-scoring candidates (never more than ``max_selected``).

    The paper's selector is an LLM that picks *up to* 12 propositions that jointly clarify the
    question; filling the whole budget with the top 12 spreads the question's seed thinly.
    ``n=4`` is the LLM-free default; ``n=None`` fills the budget (the literal reading).  On the
    shared data 4 has the best R@5 on HotpotQA and MuSiQue and every n from 3 to 8 beats 12 on
    HotpotQA (docs/results.md, "The LLM-free selector's seed count").
    """

    #: it ranks by score alone: the retriever shows it candidates without their text
    #: (a selector without this attribute, or with it True, gets every candidate's text)
    reads_text = False

    def __init__(self, n: int | None = 4) -> None:
        if n is not None:
            positive_int(n, "n (or None)")
        self.n: int | None = n
        self.name: str = f"top-score-{n or 'all'}"

    def select(self, question: str, candidates: Sequence[Candidate], max_selected: int
               ) -> list[int]:
        limit = max_selected if self.n is None else min(self.n, max_selected)
        return [c.id for c in candidates[:limit]]


#: question words and function words: not content a residual query or a split must keep
QUESTION_STOPWORDS = _QSTOP = {
    "what", "which", "who", "whom", "whose", "when", "where", "why", "how", "is", "was", "are",
    "were", "did", "does", "do", "the", "a", "an", "of", "in", "on", "at", "to", "for", "by",
    "with", "from", "and", "or", "that", "this", "these", "those", "be", "been", "has", "have",
    "had", "it", "its", "as", "same", "both", "than", "there", "many", "much",
}


_words = words


#: the features :class:`LearnedSelector` scores, in order
SELECTOR_FEATURES = ("score", "score_rel", "rank", "passage_rank", "first_of_passage",
                     "names_in_question", "new_names", "word_overlap", "passage_size",
                     "links_earlier_passage", "bias")


def selector_features(question: str, candidates: Sequence[Candidate]):
    """One row of :data:`SELECTOR_FEATURES` per candidate, from what the selector sees without
    an LLM: the cosine score and rank, the candidate's passage (its rank among distinct
    passages, whether this is its best candidate, how many candidates it has), the names the
    candidate shares with the question and the names it adds (bridge candidates), word
    overlap, and whether it names something a higher-ranked candidate of another passage
    also names."""
    import numpy as np
    n = len(candidates)
    out = np.zeros((n, len(SELECTOR_FEATURES)))
    if n == 0:
        return out
    qtext = canonical_entity(question)
    qwords = {w for w in _words(question) if w not in _QSTOP}
    umax = max(c.score for c in candidates) or 1.0
    p_rank: dict[int, int] = {}
    p_size: dict[int, int] = {}
    for c in candidates:
        p_rank.setdefault(c.passage, len(p_rank))
        p_size[c.passage] = p_size.get(c.passage, 0) + 1
    seen_p: set[Any] = set()
    earlier: dict[str, set[Any]] = {}
    for i, c in enumerate(candidates):
        names = {canonical_entity(x) for x in name_spans(c.text)} - {""}
        inq = sum(1 for x in names if x in qtext)
        words = {w for w in _words(c.text) if w not in _QSTOP}
        links = any(earlier.get(x, set()) - {c.passage} for x in names)
        out[i] = (c.score, c.score / umax, i / n, min(p_rank[c.passage], 20) / 20,
                  float(c.passage not in seen_p), inq / max(1, len(names)),
                  min(len(names) - inq, 5) / 5, len(qwords & words) / max(1, len(qwords)),
                  min(p_size[c.passage], 10) / 10, float(links), 1.0)
        seen_p.add(c.passage)
        for x in names:
            earlier.setdefault(x, set()).add(c.passage)
    return out


class LearnedSelector(Selector):
    """An LLM-free selector fitted to a strong LLM's recorded selections: a logistic model
    over :func:`selector_features`; it takes the ``n`` candidates the model rates most likely
    to be chosen, in candidate order.  Fitted and evaluated by
    ``evireform analyze selector`` (fitted on one data set, evaluated on the other)."""

    def __init__(self, weights, n: int = 4) -> None:
        import numpy as np
        self.weights = np.asarray(weights, dtype=np.float64)
        if self.weights.shape != (len(SELECTOR_FEATURES),):
            raise ValueError(f"weights must have {len(SELECTOR_FEATURES)} entries")
        positive_int(n, "n")
        self.n: int = n
        self.name: str = f"learned-{n}"

    def select(self, question: str, candidates: Sequence[Candidate], max_selected: int
               ) -> list[int]:
        import numpy as np
        if not candidates:
            return []
        z = selector_features(question, candidates) @ self.weights
        top = np.argsort(-z, kind="stable")[:min(self.n, max_selected)]
        return [candidates[i].id for i in sorted(top)]


def _mostly_in(toks: list[Any], tokens: set[Any]) -> bool:
    """More than half of the name's tokens ``toks`` are among ``tokens``."""
    return bool(toks) and sum(t in tokens for t in toks) * 2 > len(toks)


class BridgeReformulator(Reformulator):
    """LLM-free residual queries: a bridge entity from the observed text plus the question's
    unresolved words.

    A bridge is a name span of an observed passage that the question does not mention and that
    is not the passage's own subject (its title): the entity the passage introduces.  Spans
    are ranked by the observed passage's rank, then by how many question words their sentence
    shares (the sentence that answers the first hop names the second).  Each passage gives at
    most ``per_passage`` bridges.  The unresolved words are the question's content words that
    the observed passage does not contain; the query is ``"<bridge> <unresolved words>"``.
    """

    name = "bridge-v2"

    def __init__(self, per_passage: int = 2) -> None:
        self.per_passage: int = per_passage

    @staticmethod
    def _mentioned(c: str, q_canon: str, q_tokens: set[Any]) -> bool:
        toks = c.split()
        return c in q_canon or _mostly_in(toks, q_tokens)

    def bridges(self, question: str, observed: Any) -> list[tuple[int, str]]:
        """Every bridge span of the observed passages, best first: ``(observed rank, span)``
        (the candidates :meth:`reformulate` takes ``per_passage`` of)."""
        q_canon = canonical_entity(question)
        q_tokens = set(q_canon.split())
        q_words = [w for w in _words(question) if w not in _QSTOP]
        cands = []  # (passage rank, -overlap, position, bridge)
        for rank, p in enumerate(observed):
            t_canon = canonical_entity(p.title)
            t_tokens = set(t_canon.split())
            seen = set()
            for si, sent in enumerate(split_sentences(p.text)):
                overlap = len(set(_words(sent)) & set(q_words))
                for span in name_spans(sent):
                    c = canonical_entity(span)
                    if not c or c in seen or self._mentioned(c, q_canon, q_tokens):
                        continue
                    if c == t_canon or _mostly_in(c.split(), t_tokens):
                        continue  # the passage's own subject, not a bridge
                    seen.add(c)
                    cands.append((rank, -overlap, si, span))
        cands.sort(key=lambda x: x[:3])
        return [(rank, bridge) for rank, _, _, bridge in cands]

    def reformulate(self, question: str, observed: Sequence[Passage], max_queries: int
                    ) -> list[str]:
        q_words = [w for w in _words(question) if w not in _QSTOP]

        def query(rank, bridge) -> str:
            p = observed[rank]
            covered = set(_words(p.title + " " + p.text))
            rest = [w for w in q_words if w not in covered]
            return " ".join([bridge] + (rest or q_words))
        return _take_queries(((rank, lambda r=rank, b=bridge: query(r, b))
                              for rank, bridge in self.bridges(question, observed)),
                             self.per_passage, max_queries)


def _take_queries(ranked, per_passage: int, max_queries: int) -> list[str]:
    """The residual queries of bridges ranked best first, ``(observed rank, make the
    query)``: at most ``per_passage`` from one observed passage, no duplicates, at most
    ``max_queries`` in all (a query is made only when its passage has room)."""
    out: list[str] = []
    per: dict[int, int] = {}
    for rank, make in ranked:
        if per.get(rank, 0) >= per_passage:
            continue
        q = make()
        if q in out:
            continue
        out.append(q)
        per[rank] = per.get(rank, 0) + 1
        if len(out) >= max_queries:
            break
    return out


#: words a residual query never keeps from the question (:func:`residual_words`): the
#: question words above and the English stopwords of the phrase extractor ("if", "into",
#: "his" are not content), less those that carry a question's meaning ("first", "new",
#: "known", "called", ...)
_RESIDUAL_STOP = frozenset(_QSTOP) | (ENGLISH_STOPWORDS - {
    "one", "later", "first", "new", "well", "based", "known", "called", "named", "became",
    "become", "including", "include", "includes"})


def residual_words(text: str) -> list[str]:
    """``text``'s words that a residual query carries: no question words, no English
    function words, no one-letter tokens (the "s" of a possessive), each once, in order."""
    return list(dict.fromkeys(w for w in _words(text)
                              if w not in _RESIDUAL_STOP and (len(w) > 1 or w.isdigit())))


#: between a question word and what it asks for ("what is the birthplace", "which of its
#: options"): skipped
_FOCUS_SKIP = frozenset({"is", "was", "are", "were", "the", "a", "an", "of", "its", "their",
                         "his", "her", "this", "these", "those"})
#: where what it asks for ends ("which hash algorithm is", "what exit status does it")
_FOCUS_END = frozenset({"does", "do", "did", "is", "was", "are", "were", "can", "could", "has",
                        "have", "had", "will", "would", "should", "it", "they", "its", "their"})


def focus_words(question: str, limit: int = 3) -> list[str]:
    """What ``question`` asks for: up to ``limit`` content words right after its first
    "what", "which" or "whose" ("how many", "how much"), past auxiliaries and determiners:
    "which hash algorithm is its default" gives ``["hash", "algorithm"]``, "what is the
    birthplace of X" gives ``["birthplace"]``.  A residual query keeps them even when the
    observed passage holds them: the second hop is about them."""
    # the asking clause: the question's start, or what follows its last ":" or ";" ("The
    # tool that ...: which option ..."); a "which" inside a clause is a relative pronoun
    ws = words(re.split(r"[:;]\s", question)[-1])
    rest: list[str] = []
    if ws and ws[0] in ("what", "which", "whose"):
        rest = ws[1:]
    elif len(ws) > 1 and ws[0] == "how" and ws[1] in ("many", "much"):
        rest = ws[2:]
    k = 0
    while k < len(rest) and (rest[k] in _FOCUS_SKIP or rest[k] in _RESIDUAL_STOP):
        k += 1
    out: list[str] = []
    while k < len(rest) and len(out) < limit and rest[k] not in _FOCUS_END \
            and rest[k] not in _RESIDUAL_STOP:
        if len(rest[k]) > 1 or rest[k].isdigit():
            out.append(rest[k])
        k += 1
    return out


def prose_index(index: PropositionIndex) -> bool:
    """True when ``index`` was built from ordinary prose: its extractor is
    :class:`~evireform.extract.ProseExtractor`, chosen or named.  There a question's first
    passage shares the vocabulary of what it asks ("option", "variable", "exit status" in
    one manual family), so a residual query keeps the question's focus
    (:func:`focus_words`); in an encyclopedia a passage describes one entity, and the focus
    of a many-hop question belongs to its last hop, not the next one (MuSiQue: 72.75 R@5
    with the focus kept, 74.17 without); dropping placed capitals at the reformulator moved
    the distractor setting by a question (69.42 against 69.58), so they are dropped only by the
    prose extractor."""
    meta = index.meta
    return str(meta.get("extractor", "")).startswith("prose") \
        or (meta.get("extractor_choice") or {}).get("chosen") == "prose"


_WORD_SPAN = re.compile(r"\w+", re.UNICODE)


def _fold_word(word: str) -> str:
    """One ``\\w+`` token folded as :func:`canonical_entity` folds it (a fast path for
    ASCII letters and digits)."""
    if word.isascii() and word.isalnum():
        return word.lower()
    return canonical_entity(word)


def surface_form(text: str, name: str) -> str:
    """How ``text`` spells the entity whose folded name is ``name``: the first stretch of
    ``text`` from a word to a word whose words fold to ``name``'s (so "U.S" and "Dala-Järna"
    keep their punctuation and case); ``name`` itself when the text does not spell it."""
    want = name.split()
    if not want:
        return name
    spans = list(_WORD_SPAN.finditer(text))
    for k, m in enumerate(spans):
        first = _fold_word(m.group(0)).split()  # "KEY_SOCKET" folds to two words
        if not first or first[0] != want[0]:
            continue
        got: list[str] = []
        end = k
        while end < len(spans) and len(got) < len(want):
            got.extend(_fold_word(spans[end].group(0)).split())
            end += 1
        if got == want:
            start = m.start()
            while start > 0 and text[start - 1] in "/~":  # a path's "/" or "~/"
                start -= 1
            return text[start:spans[end - 1].end()]
    return name


class _PassageBridges:
    """What the graph reformulator knows of one passage before any question: its bridge
    candidates (each entity its propositions mention, first mention first, less those named
    like the passage's title, empty names and names with a digit) and, filled on demand, the
    propositions' bodies, words, folded bodies and surface forms.  Kept per passage by
    :meth:`PropositionIndex.memo`, so a question decodes no entity name and parses no text
    of a passage seen before.  Holds the index's string tables, not the index (which keeps
    this object: no reference cycle)."""

    __slots__ = ("texts", "names", "title", "cands", "_bodies", "_words", "_canon", "_spelled")

    def __init__(self, index: PropositionIndex, j: int) -> None:
        import numpy as np
        self.texts, self.names = index.prop_texts, index.entity_names
        self.title: str = index.passage(j).title.strip()
        t_canon = canonical_entity(self.title)
        t_tokens = set(t_canon.split())
        g = index.graph
        a_indptr, a_indices = np.asarray(g.a_indptr), np.asarray(g.a_indices)  # not memmaps
        seen: set[Any] = set()
        self.cands: list[tuple] = []  # (proposition position, entity, proposition, name, tokens)
        for pos, i in enumerate(index.propositions_of(j).tolist()):
            for e in a_indices[a_indptr[i]:a_indptr[i + 1]].tolist():
                if e in seen:
                    continue
                seen.add(e)
                c = self.names[e]
                toks = c.split()
                if not c or c == t_canon or any(map(str.isdigit, c)) \
                        or _mostly_in(toks, t_tokens):
                    continue
                self.cands.append((pos, e, i, c, toks))
        self._bodies: dict[str, Any] = {}
        self._words: dict[str, Any] = {}
        self._canon: dict[str, Any] = {}
        self._spelled: dict[str, Any] = {}

    def body(self, i: int) -> str:
        """Proposition ``i``'s text without the LLM-free extractors' title prefix."""
        b = self._bodies.get(i)
        if b is None:
            t, title = self.texts[i], self.title
            b = self._bodies[i] = (t[len(title) + 2:] if title and t.startswith(title + ": ")
                                   else t)
        return b

    def words(self, i: int) -> set[Any]:
        """The words of proposition ``i``'s body (the overlap ranking's)."""
        w = self._words.get(i)
        if w is None:
            w = self._words[i] = set(_words(self.body(i)))
        return w

    def mention_at(self, i: int, name: str) -> int:
        """Where the folded entity name ``name`` starts in proposition ``i``'s folded body (its
        length when absent): the tie-break between mentions of one proposition."""
        canon = self._canon.get(i)
        if canon is None:
            canon = self._canon[i] = canonical_entity(self.body(i))
        at = canon.find(name)
        return at if at >= 0 else len(canon)

    def spelling(self, i: int, e: int) -> tuple[str, set[Any]]:
        """Entity ``e`` as proposition ``i`` spells it (:func:`surface_form`) and its folded
        name's tokens."""
        got = self._spelled.get((i, e))
        if got is None:
            name = self.names[e]
            got = self._spelled[(i, e)] = (surface_form(self.texts[i], name),
                                           set(name.split()))
        return got


class GraphBridgeReformulator(Reformulator):
    """LLM-free residual queries whose bridges come from the index, not from capital letters
    (the default reformulator).

    The candidate bridges of an observed passage are the entities its propositions already
    have in the index (the incidence A and the entity table), whatever extracted them:
    heuristic names, :class:`~evireform.extract.PhraseExtractor` phrases, OpenIE triples, an
    LLM, the user's own.  An entity is left out when the question already mentions it (its
    folded name is in the question, or most of its words are), when it is the passage's own
    subject (its title, or mostly its title's words), or when its name has a digit (dates,
    numbers and ordinals are not what a second hop is about).

    ``ranking="lookahead"`` (the default) ranks the candidates of each observed passage by a
    one-step look through the graph: the best cosine between the question and a
    proposition that mentions the candidate in a passage not yet observed (at most
    ``max_lookahead`` propositions a candidate, in id order).  The bridge is the entity whose
    other mentions continue the question: this reads the index's embeddings and A only, no
    encoder call and no letter case.  ``ranking="overlap"`` ranks as
    :class:`BridgeReformulator` does (the question words the proposition shares), also used
    when no question vector is given.  Ties go to the earlier proposition and the earlier
    mention.  Observed passages keep their rank order; each gives at most ``per_passage``
    bridges.

    The query is the bridge as the passage spells it (:func:`surface_form`), followed by the
    question's content words that the observed passage does not contain (question words,
    English function words and one-letter tokens dropped: :func:`residual_words`); when the
    passage contains them all, every content word of the question.

    The retriever calls :meth:`reformulate_indexed` with the index, the observed passages'
    positions and the question's embedding; :meth:`reformulate` (passages only, no index)
    answers with :class:`BridgeReformulator`'s capitalised spans.
    """

    name = "graph-bridge-v2"

    def __init__(self, per_passage: int = 2, ranking: str = "lookahead",
                 max_lookahead: int = 64, *, prose: bool = True) -> None:
        self.per_passage: int = positive_int(per_passage, "per_passage")
        if ranking not in ("lookahead", "overlap"):
            raise ValueError(f"ranking must be 'lookahead' or 'overlap'; got {ranking!r}")
        self.ranking: str = ranking
        self.max_lookahead: int = positive_int(max_lookahead, "max_lookahead")
        #: issue 52, on indexes of ordinary prose (:func:`prose_index`): the question's focus
        #: kept in every query (:func:`focus_words`); their entities have no word capitalised
        #: by its place already (:class:`~evireform.extract.ProseExtractor`).  Other indexes
        #: (Wikipedia-like) read bridges as graph-bridge-v1 did, which ``prose=False`` keeps
        #: everywhere
        self.prose: bool = bool(prose)
        self.name = "graph-bridge-v2" if self.prose else "graph-bridge-v1"
        self._spans = BridgeReformulator(per_passage)

    def reformulate(self, question: str, observed: Sequence[Passage], max_queries: int
                    ) -> list[str]:
        return self._spans.reformulate(question, observed, max_queries)

    def bridges_indexed(self, question: str, index: PropositionIndex, observed: Sequence[int], vector: ArrayLike | None=None,
                        allowed: ArrayLike | None=None) -> list[tuple[int, int, int]]:
        """Every bridge of the observed passages (positions in ``index``), best first:
        ``(observed rank, entity id, proposition id)`` (the proposition that mentions it).
        ``allowed``: a passage mask (a filter's) the lookahead stays inside, so that a
        filtered search ranks bridges as an index of the matching passages would."""
        return [b[:3] for b in self._bridges(question, index, observed, vector, allowed)]

    def _bridges(self, question: str, index: PropositionIndex, observed: Sequence[int],
                 vector: ArrayLike | None = None, allowed: ArrayLike | None = None
                 ) -> list[tuple[int, int, int, float]]:
        """:meth:`bridges_indexed` with each bridge's score: the lookahead's best cosine,
        or the shared question words of the overlap ranking."""
        import numpy as np
        q_canon = canonical_entity(question)
        q_tokens = set(q_canon.split())
        look = self.ranking == "lookahead" and vector is not None
        kept = [index.memo("bridges", j, partial(_PassageBridges, index)) for j in observed]
        # [rank, -score, proposition position, mention position, entity, proposition, name]
        cands = []
        for rank, pb in enumerate(kept):
            for pos, e, i, c, toks in pb.cands:
                # not mentioned by the question (as BridgeReformulator._mentioned)
                if c in q_canon or _mostly_in(toks, q_tokens):
                    continue
                cands.append([rank, 0.0, pos, 0, e, i, c])
        if not cands:
            return []
        if look:
            scores = self._lookahead(index, [x[4] for x in cands], observed,
                                     np.asarray(vector, dtype=index.embeddings.dtype), allowed)
            for x, sc in zip(cands, scores):
                x[1] = -sc
        else:
            q_words = set(_words(question)) - _QSTOP
            for x in cands:
                x[1] = -len(kept[x[0]].words(x[5]) & q_words)
        # ties within a proposition go to the earlier mention (its text read only then)
        groups: dict[str, Any] = {}
        for x in cands:
            groups.setdefault((x[0], x[1], x[2]), []).append(x)
        for group in groups.values():
            if len(group) > 1:
                for x in group:
                    x[3] = kept[x[0]].mention_at(x[5], x[6])
        # the last ties (two names starting at one place, "Ethiopia" and "Ethiopian
        # Highlands", both without lookahead) go to the longer name, then by spelling: what
        # the passage holds, never entity ids, which number the whole index (a filtered
        # question ranks bridges as the index of the matching passages would)
        cands.sort(key=lambda x: (*x[:4], -len(x[6]), x[6]))
        return [(x[0], x[4], x[5], -x[1]) for x in cands]

    def _lookahead(self, index: PropositionIndex, ents, observed: Any, vector: ArrayLike, allowed: ArrayLike | None=None):
        """Per entity: the best cosine of ``vector`` with a proposition that mentions it in
        a passage neither observed nor outside ``allowed`` (a passage mask: the filter's),
        over its first ``max_lookahead`` such propositions
        (:func:`evireform.kernels.mentions_outside`); 0 when there is none."""
        import numpy as np
        from .kernels import mentions_outside
        g = index.graph
        props, counts = mentions_outside(g.at_indptr, g.at_indices, index.owner, ents,
                                         observed, allowed, limit=self.max_lookahead)
        out = np.zeros(len(counts))
        if len(props):
            has = counts > 0
            starts = np.zeros(int(has.sum()), dtype=np.int64)
            np.cumsum(counts[has][:-1], out=starts[1:])
            out[has] = np.maximum.reduceat(np.asarray(index.embeddings)[props] @ vector, starts)
        return out.tolist()

    def reformulate_indexed(self, question: str, index: PropositionIndex, observed: Sequence[int],
                            max_queries: int, vector: ArrayLike | None=None, allowed: ArrayLike | None=None) -> list[str]:
        """Residual queries for ``observed`` (passage positions of ``index``); ``vector``:
        the question's embedding (the lookahead ranking needs it); ``allowed``: the
        filter's passage mask, or None."""
        observed = list(observed)
        q_words = residual_words(question)
        focus = set(focus_words(question)) if self.prose and prose_index(index) else set()
        rest_of: dict[int, list[str]] = {}
        details: dict[str, dict[str, Any]] = {}

        def query(rank, e, i: Any, score: float) -> str:
            if rank not in rest_of:
                covered = index.passage_words(observed[rank])
                rest_of[rank] = [w for w in q_words if w not in covered or w in focus] \
                    or q_words
            spelled, b_tokens = index.memo("bridges", observed[rank],
                                           partial(_PassageBridges, index)).spelling(i, e)
            q = " ".join([spelled] + [w for w in rest_of[rank] if w not in b_tokens])
            details.setdefault(q, {"query": q, "bridge": spelled,
                                   "passage": index.passage(observed[rank]).id,
                                   "score": round(float(score), 6)})
            return q
        ranked = self._bridges(question, index, observed, vector, allowed)
        out = _take_queries(((rank, lambda r=rank, e=e, i=i, sc=sc: query(r, e, i, sc))
                             for rank, e, i, sc in ranked), self.per_passage, max_queries)
        res = RoleResult(out, role="reformulate")
        res.details = [details[q] for q in out]
        return res


#: the LLM-free reformulators by name (``eval``'s ``evireform_spans`` method runs "spans")
REFORMULATORS = {"graph": GraphBridgeReformulator, "spans": BridgeReformulator,
                 "graph-v1": partial(GraphBridgeReformulator, prose=False)}


def make_reformulator(name: str) -> Reformulator:
    """A fresh LLM-free reformulator: ``"graph"`` (:class:`GraphBridgeReformulator`, the
    default) or ``"spans"`` (:class:`BridgeReformulator`, capitalised name spans)."""
    try:
        return REFORMULATORS[name]()
    except KeyError:
        raise ValueError(f"unknown reformulator {name!r}; choose from "
                         f"{', '.join(REFORMULATORS)}") from None


class ObservationController(Controller):
    """LLM-free sufficiency: sufficient once every name the question mentions is found in the
    passages (a proxy for "no entity of the question is left unresolved")."""

    name = "observation-v1"

    def sufficient(self, question: str, passages: Sequence[Passage]) -> bool:
        names = [canonical_entity(s) for s in name_spans(question)]
        text = canonical_entity(" ".join(p.title + " " + p.text for p in passages))
        return all(n in text for n in names if n)


# --------------------------------------------------------------------------- Hi-Q's split
def constraints(text: str) -> list[str]:
    """The named constraints of a text: its capitalised name spans, folded."""
    return [c for c in (canonical_entity(s) for s in name_spans(text)) if c]


_MARKERS = {"which", "that", "who", "whose", "whom", "where", "when", "of"}
_HEAD_STOP = {"the", "a", "an", "of", "in", "by", "for", "to", "from", "at", "on", "with",
              "which", "that", "who", "whose", "whom", "where", "when", "is", "was", "are",
              "were", "did", "does", "do", "what", "how", "many", "much"}
_CONNECT_OF = {"of", "and", "the", "&", ",", "-", "de", "la", "von", "van", "der", "du"}
_TOK = re.compile(r"#\d+|[\w'’.-]+|[^\w\s]")


def split_query(query: str) -> tuple[str, str] | None:
    """The LLM-free dependency-preserving split (see the module docstring): ``(independent,
    dependent with #1)`` or None when the query has no such split."""
    toks = _TOK.findall(query.strip().rstrip("?").strip())
    cons = constraints(query)
    if not cons:
        return None
    for m in range(len(toks) - 1, 0, -1):
        if toks[m].lower() not in _MARKERS:
            continue
        clause = " ".join(toks[m:])
        if not any(c in canonical_entity(clause) for c in cons):
            continue
        h = m
        while h > 0 and toks[h - 1].lower() not in _HEAD_STOP and toks[h - 1] not in ",;:":
            h -= 1
        if h == m and toks[m].lower() != "of":
            continue  # a clause without a head noun (e.g. "when he died"): not a split point
        # where the independent phrase ends: after the name an "of" introduces, or at the
        # clause's comma; what follows stays with the dependent side
        end = m + 1
        if toks[m].lower() == "of":
            while end < len(toks) and toks[end].lower() in ("the", "a", "an"):
                end += 1
            start = end
            while end < len(toks) and (toks[end][:1].isupper() or toks[end][:1].isdigit()
                                       or (end > start and toks[end].lower() in _CONNECT_OF)):
                end += 1
            while end > start and toks[end - 1].lower() in _CONNECT_OF:
                end -= 1
            if end == start:
                continue  # "of" without a name after it
        else:
            end = next((i for i in range(m + 1, len(toks)) if toks[i] in ",;"), len(toks))
        lo = h if h < m else m + 1
        first = " ".join(toks[lo:end])
        rest = toks[:h] if h < m else toks[:m + 1]
        while rest and rest[-1].lower() in ("the", "a", "an"):
            rest = rest[:-1]
        second = " ".join(rest + ["#1"] + toks[end:])
        if not [w for w in _words(" ".join(rest + toks[end:])) if w not in _QSTOP]:
            continue  # nothing left to ask of the answer
        if len(first) >= len(query.strip()) or not first:
            continue
        return first, second
    return None


def covers(query: str, first: str, second: str) -> bool:
    """LLM-free coverage verification: the two sides keep every content word and named
    constraint of ``query`` and the dependent side refers to the independent one (#1)."""
    if "#1" not in second or not first.strip():
        return False
    both = set(_words(first + " " + second.replace("#1", " ")))
    need = {w for w in _words(query) if w not in _QSTOP}
    cons_text = canonical_entity(first + " " + second)
    return need <= both and all(c in cons_text for c in constraints(query))


class HeuristicSplitter:
    """Hi-Q's LLM-free split and coverage test (:func:`split_query`, :func:`covers`) behind
    the splitter contract of :class:`evireform.llm.LLMSplitter`: ``split(query)`` gives a
    :class:`RoleResult` of at most one ``(independent, dependent with #1)`` pair,
    ``verify(query, first, second)`` a bool."""

    name = "heuristic-split"

    def split(self, query: str) -> "RoleResult":
        s = split_query(query)
        return RoleResult([s] if s else [], role="hiq-split")

    def verify(self, query: str, first: str, second: str) -> bool:
        return covers(query, first, second)


class SubstitutionRewriter:
    """Hi-Q's LLM-free rewriting: the prerequisite's answer put in place of ``#1`` in the
    dependent query (:class:`evireform.llm.LLMRewriter` is the LLM's)."""

    name = "substitution"

    def rewrite(self, dependent: str, prerequisite: str, answer: str) -> str:
        return dependent.replace("#1", answer)
