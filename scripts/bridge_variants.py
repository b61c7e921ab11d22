"""Variants of the graph reformulator's bridge ranking on MuSiQue (issue 37's OpenIE target).

    python scripts/bridge_variants.py [--data ../shared/data] [-n 100] [--sets openie,cased,lower]

Runs EviReform (defaults, LLM-free) with the default :class:`GraphBridgeReformulator` and with
variants of it on MuSiQue's HippoRAG OpenIE graph, the default (cased, heuristic) index and
the lower-cased corpus (extractor ``auto``), and prints R@5 / Chain@5 of each, one row per
variant.  Texts are embedded once and served from memory, so a variant costs seconds.  The
variants are subclasses made here; none is part of the library:

* ``per_passage`` 1 / 3 and ``max_lookahead`` 8 / 16 / 256, the ``overlap`` ranking;
* ``global``: bridges ranked by lookahead score across the observed passages (the default
  keeps the observed passages' rank order first);
* ``degree λ``: the lookahead score less λ log(1 + the entity's degree) (hubs penalised);
* ``capital bonus b``: +b for a bridge the text spells with a capital letter (a cased
  corpus only; nothing changes on lower-cased text);
* query forms: ``all words`` (every question content word, not only those the passage
  lacks), ``bridge only``, ``+ title`` (the observed passage's title appended).
"""
import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OPENIE = "musique_openie_gpt-3.5-turbo-1106.json"


def variants():
    """(label, reformulator factory) pairs; None: the default reformulator."""
    from functools import partial
    from evireform.roles import reformulate as roles
    G = roles.GraphBridgeReformulator

    def pb(index, j):
        return index.memo("bridges", j, partial(roles._PassageBridges, index))

    class Global(G):
        def bridges_indexed(self, question, index, observed, vector=None, allowed=None):
            ranked = super().bridges_indexed(question, index, observed, vector, allowed)
            if vector is None or not ranked:
                return ranked
            score = self._lookahead(index, [e for _, e, _ in ranked], observed,
                                    np.asarray(vector, index.embeddings.dtype), allowed)
            order = sorted(range(len(ranked)), key=lambda t: (-score[t], t))
            return [ranked[t] for t in order]

    def degree(lam):
        class Degree(G):
            def _lookahead(self, index, ents, observed, vector, allowed=None):
                s = np.asarray(super()._lookahead(index, ents, observed, vector, allowed))
                deg = np.diff(np.asarray(index.graph.at_indptr))[np.asarray(ents, np.int64)]
                return (s - lam * np.log1p(deg)).tolist()
        return Degree

    def capital(bonus):
        class Capital(G):
            def bridges_indexed(self, question, index, observed, vector=None, allowed=None):
                self._observed = list(observed)
                return super().bridges_indexed(question, index, observed, vector, allowed)

            def _lookahead(self, index, ents, observed, vector, allowed=None):
                s = super()._lookahead(index, ents, observed, vector, allowed)
                first = {}
                for j in self._observed:
                    p = pb(index, j)
                    for _, e, i, _, _ in p.cands:
                        first.setdefault(e, (p, i))
                out = []
                for e, sc in zip(ents, s):
                    p, i = first[e]
                    out.append(sc + (bonus if p.spelling(i, e)[0][:1].isupper() else 0.0))
                return out
        return Capital

    def query_form(kind):
        class Form(G):
            def reformulate_indexed(self, question, index, observed, max_queries,
                                    vector=None, allowed=None):
                observed = list(observed)
                q_words = roles.residual_words(question)

                def query(rank, e, i):
                    p = pb(index, observed[rank])
                    spelled, b_tokens = p.spelling(i, e)
                    covered = index.passage_words(observed[rank])
                    rest = [w for w in q_words if w not in covered] or q_words
                    words = {"all": q_words, "bridge": [], "title": rest}[kind]
                    tail = [w for w in words if w not in b_tokens]
                    return " ".join([spelled] + tail + ([p.title] if kind == "title" else []))
                ranked = self.bridges_indexed(question, index, observed, vector, allowed)
                return roles._take_queries(((rank, lambda r=rank, e=e, i=i: query(r, e, i))
                                            for rank, e, i in ranked),
                                           self.per_passage, max_queries)
        return Form

    out = [("default (graph, lookahead)", None)]
    out += [(f"per_passage {n}", lambda n=n: G(per_passage=n)) for n in (1, 3)]
    out += [(f"max_lookahead {n}", lambda n=n: G(max_lookahead=n)) for n in (8, 16, 256)]
    out += [("overlap ranking", lambda: G(ranking="overlap")), ("global", Global)]
    out += [(f"degree {lam}", degree(lam)) for lam in (0.005, 0.01, 0.02, 0.04)]
    out += [(f"capital bonus {b}", capital(b)) for b in (0.05, 1.0)]
    out += [(f"query: {k}", query_form(k)) for k in ("all", "bridge", "title")]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("-n", type=int, default=100)
    ap.add_argument("--sets", default="openie,cased,lower")
    args = ap.parse_args(argv)
    from evireform import EviReform
    from evireform.cache import cached_index, default_cache_dir
    from evireform.embed import encode_queries, get_embedder
    from evireform.evaluation.data import load_questions, lowercased_copy
    data = Path(args.data) / "musique"
    emb = get_embedder("minilm")
    sets = {}
    for name in args.sets.split(","):
        corpus, qpath, kw = data / "musique_corpus.json", data / "musique.json", {}
        if name == "openie":
            kw["openie_path"] = data / OPENIE
        elif name == "lower":
            root = Path(default_cache_dir()) / "lowercase"
            corpus, qpath = lowercased_copy(corpus, root), lowercased_copy(qpath, root)
        elif name != "cased":
            raise SystemExit(f"unknown set {name!r}: openie, cased or lower")
        idx, _, _ = cached_index(corpus, emb, show_progress=False, **kw)
        sets[name] = (idx, load_questions(qpath, idx.passages)[:args.n])
    seen: dict = {}

    class Memo:
        """The real embedder, each text embedded once."""
        name, dim = emb.name, emb.dim

        def encode(self, texts):
            new = [t for t in dict.fromkeys(texts) if t not in seen]
            if new:
                seen.update(zip(new, encode_queries(emb, new)))
            return np.stack([seen[t] for t in texts])
        encode_queries = encode

    print(f"MuSiQue, first {args.n} questions, EviReform R@5 / Chain@5:\n")
    print("| variant | " + " | ".join(sets) + " |\n|---|" + "---:|" * len(sets))
    for label, make in variants():
        cells = []
        for idx, qs in sets.values():
            r = EviReform(idx, embedder=Memo(), reformulator=make() if make else None)
            res = r.retrieve_many([q.question for q in qs], 10)
            hits = [[j in [p.index for p in rr.passages[:5]] for j in q.gold]
                    for q, rr in zip(qs, res)]
            cells.append(f"{100 * np.mean([np.mean(h) for h in hits]):.2f} / "
                         f"{100 * np.mean([all(h) for h in hits]):.0f}")
        print(f"| {label} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
