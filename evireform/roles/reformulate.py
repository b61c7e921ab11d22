"""The LLM-free reformulators: residual queries from the observed passages' bridges, by
capitalised spans (:class:`BridgeReformulator`) or from the index's entities with a
one-step lookahead (:class:`GraphBridgeReformulator`, the default).
"""
from __future__ import annotations

import re
from functools import partial
from typing import Any, Sequence, TYPE_CHECKING

from .._checks import positive_int
from ..entities import canonical_entity
from ..extract import name_spans, split_sentences
from ..types import Passage
from .base import Reformulator, RoleResult
from .queries import _QSTOP, _words, focus_words, residual_words

if TYPE_CHECKING:  # annotations only
    from numpy.typing import ArrayLike
    from ..index import PropositionIndex


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
        from ..kernels import mentions_outside
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
