"""Tenants that must not see each other: a namespace's extraction and ranking never depend on another namespace's text, and an add learns only the namespaces it touches."""
import json
import numpy as np
from evireform import Passage, PropositionIndex

from hostile_common import REPO, EMB, _run, _index, _ps, _ranks  # noqa: F401


def _tenants(t2_text: str):
    """Two namespaces of lower-case text (what --extractor phrases is for)."""
    out = []
    for i in range(30):
        out.append(Passage(f"a{i}", f"item {i % 7}", f"the red fox {i % 5} ran with the "
                           f"blue heron by lake {i % 10}. it was seen by ann {i % 4}.",
                           {"namespace": "t1"}))
    for i in range(30):
        out.append(Passage(f"b{i}", f"item {i % 7}", t2_text.format(i=i % 6),
                           {"namespace": "t2"}))
    return out


QS = ["where did the red fox run?", "who saw the blue heron?", "lake 2 and item 3",
      "what ran near lake 1 with ann 2?"]


def _entities_of_t1(idx):
    g = idx.graph
    out = set()
    for i in np.flatnonzero(np.asarray(idx.owner) < 30):  # t1's propositions
        for e in np.asarray(g.a_indices)[g.a_indptr[i]:g.a_indptr[i + 1]]:
            out.add(idx.entity_names[int(e)])
    return out


def test_a_namespace_never_depends_on_another_namespaces_text():
    from evireform.extract import PhraseExtractor
    one = PropositionIndex.build(_tenants("a grey cat {i} sat on the mat."),
                                 EMB, extractor=PhraseExtractor(), show_progress=False)
    two = PropositionIndex.build(_tenants("ann walked past lake {i} today."),
                                 EMB, extractor=PhraseExtractor(), show_progress=False)
    t1 = {"namespace": "t1"}
    assert _ranks(one, QS, t1) == _ranks(two, QS, t1)
    # and t1 equals an index built from its passages alone, with the same extractor
    alone = PropositionIndex.build([p for p in _tenants("x") if p.id.startswith("a")], EMB,
                                   extractor=PhraseExtractor(), show_progress=False)
    assert _ranks(one, QS, t1) == _ranks(alone, QS, None)
    # group_by=None keeps the old behaviour (one vocabulary): there t2's text does reach t1
    old = [PropositionIndex.build(_tenants(t), EMB, extractor=PhraseExtractor(group_by=None),
                                  show_progress=False)
           for t in ("a grey cat {i} sat on the mat.",
                     "ann walked past lake {i} today.")]
    assert old[0].meta["extractor"] == "phrases-v1" and one.meta["extractor"] == "phrases-v4"
    assert old[0].prop_texts[:30] == old[1].prop_texts[:30]
    assert _entities_of_t1(old[0]) != _entities_of_t1(old[1])
    assert _entities_of_t1(one) == _entities_of_t1(two)


def test_an_add_learns_only_the_namespaces_it_touches(tmp_path):
    from evireform.extract import PhraseExtractor
    ps = _tenants("a grey cat {i} sat on the mat.")
    idx = PropositionIndex.build(ps[:25] + ps[30:], EMB, extractor=PhraseExtractor(),
                                 show_progress=False)
    counted = []  # the namespaces of every passage whose phrases were counted
    real = PhraseExtractor._count

    def count(self, raw, passages, sign):
        counted.extend(p.metadata.get("namespace") for p in passages)
        return real(self, raw, passages, sign)
    import pytest
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(PhraseExtractor, "_count", count)
        for refit in (False, True):  # the carried counts grown, or t1 fitted again
            counted.clear()
            ex = PhraseExtractor()
            out = idx.add(ps[25:30], EMB, extractor=ex, refit=refit)
            assert set(counted) == {"t1"}, "read a namespace it did not add"
            assert len(counted) == (5 if not refit else 30)
    # t2's vocabulary is the build's (carried), t1's learnt with the new passages
    assert ex.vocabs[("key", ("string", "t2"))] == \
        PhraseExtractor().fit(ps[30:]).vocabs[("key", ("string", "t2"))]
    # the CLI keeps the recorded variant: an index built as phrases-v1 updates as v1
    from evireform.extract import extractor_recorded, make_extractor
    assert extractor_recorded("phrases-v1").name == "phrases-v1"
    assert make_extractor("phrases", "phrases-v1").group_by is None
    assert extractor_recorded("phrases-v2").group_by == "namespace"
    assert extractor_recorded("phrases-v2").fit_sample is None
    assert extractor_recorded("phrases-v3").fit_sample is not None
    assert extractor_recorded("phrases-v4").fit_sample is not None
    assert out.n_passages == 60


def test_a_tenants_update_touches_its_own_passages_only(tmp_path):
    """Issue 69: /update (and `update`) with a namespace: added passages get it, another
    tenant's ids are unknown to delete and taken to replace (without saying whose),
    delete_where is and-ed with the namespace, and "every passage" means the namespace's."""
    import asyncio
    import httpx
    import pytest
    pytest.importorskip("fastapi")
    from evireform.cli import main
    from evireform.service import RetrievalService, create_app
    ix = PropositionIndex.build(_tenants("a grey cat {i} sat on the mat."), EMB,
                                show_progress=False).save(tmp_path / "ix")
    svc = RetrievalService(ix, EMB)
    app = create_app(svc)

    async def run():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://t") as c:
            post = lambda body: c.post("/update", json=body)  # noqa: E731
            return {
                "add": await post({"namespace": "t2", "add": [
                    {"id": "b-new", "text": "the grey cat slept.", "metadata": {"k": 1}}]}),
                "other": await post({"namespace": "t2", "add": [
                    {"id": "x", "text": "y z.", "metadata": {"namespace": "t1"}}]}),
                "del": await post({"namespace": "t2", "delete": ["a1"]}),
                "steal": await post({"namespace": "t2", "upsert": True, "add": [
                    {"id": "a2", "text": "overwritten by t2."}]}),
                "where": await post({"namespace": "t2", "delete_where": {"k": 1}}),
                "all": await post({"namespace": "t2", "delete_where": {
                    "namespace": {"$exists": True}}}),
                "fine": await post({"namespace": "t2", "delete": ["b3"]})}
    got = asyncio.run(run())
    assert got["add"].status_code == 200, got["add"].json()
    assert got["other"].status_code == 400
    assert got["del"].status_code == 404 and "a1" in got["del"].json()["error"]
    # t1's id named by t2 is t2's own id (kept as "t2/a2"): added, t1's passage untouched
    assert got["steal"].status_code == 200 and got["steal"].json()["changes"]["added"] == 1
    assert got["where"].status_code == 200 and got["where"].json()["changes"]["deleted"] == 1
    assert got["all"].status_code == 409 and "namespace" in got["all"].json()["error"]
    assert got["fine"].status_code == 200
    idx = PropositionIndex.load(ix)
    ids = {p.id: p for p in idx.passages}
    assert "a1" in ids and ids["a2"].text.startswith("the red fox")  # t1 untouched
    assert ids["t2/a2"].text == "overwritten by t2."  # (t2/b-new went by delete_where)
    assert "b3" not in ids and all(f"a{i}" in ids for i in range(30))
    # the CLI takes the namespace too
    (tmp_path / "del.txt").write_text("a5\n")
    assert main(["update", str(ix), "--delete", str(tmp_path / "del.txt"), "--namespace",
                 "t2", "--embedder", "hashing-16", "--quiet"]) == 2
    assert "a5" in {p.id for p in PropositionIndex.load(ix).passages}


def test_the_same_text_from_two_tenants_is_two_passages_and_tells_nothing(tmp_path):
    """Issue 81, leak 2: an id made from a record's content is made in the tenant's
    namespace, so tenant t2 adding t1's exact text (no id) gets 200 and a passage of its
    own, not "409 ... is taken" (which let t2 confirm t1's content and kept it from storing
    that text); the same text again within t2 is t2's duplicate, as without tenants."""
    import asyncio
    import httpx
    import pytest
    pytest.importorskip("fastapi")
    from evireform.corpus import content_id
    from evireform.service import RetrievalService, create_app
    ix = PropositionIndex.build(_tenants("a grey cat {i} sat on the mat."), EMB,
                                show_progress=False).save(tmp_path / "ix")
    app = create_app(RetrievalService(ix, EMB))
    secret = {"title": "Payroll", "text": "The payroll password is hunter2."}

    async def run():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://t") as c:
            post = lambda body: c.post("/update", json=body)  # noqa: E731
            return [await post({"namespace": "t1", "add": [secret]}),
                    await post({"namespace": "t2", "add": [secret]}),  # the guess
                    await post({"namespace": "t2", "add": [{**secret, "text": "A guess."}]}),
                    await post({"namespace": "t2", "add": [secret]})]
    got = asyncio.run(run())
    assert [r.status_code for r in got] == [200, 200, 200, 200], [r.json() for r in got]
    assert got[1].json()["changes"] == got[2].json()["changes"]  # a hit reads as a miss
    assert got[3].json()["changes"]["duplicates"] == 1  # its own copy, once
    idx = PropositionIndex.load(ix)
    mine = {p.metadata.get("namespace"): p.id for p in idx.passages if "hunter2" in p.text}
    assert set(mine) == {"t1", "t2"} and mine["t1"] != mine["t2"]
    assert mine["t1"] == content_id("Payroll", secret["text"], "t1")


ACME, GLOBEX, OPERATOR = "acme-key-0123456789", "globex-key-0123456789", "operator-key-0123456"


def _served(svc, app, calls):
    """``calls(client, headers_of_key)`` against ``app`` with ``svc`` started (then stopped)."""
    import asyncio
    import httpx

    def h(key):
        return {"Authorization": f"Bearer {key}"}

    async def run():
        await svc.start()
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                         base_url="http://t") as c:
                return await calls(c, h)
        finally:
            await svc.stop()
    return asyncio.run(run())


def test_a_tenant_key_sees_and_changes_its_namespace_only_on_every_endpoint(tmp_path):
    """Issue 81, item 8: keys per tenant (``serve --tenant-keys``). A tenant's key confines
    every endpoint to its namespace whatever the body says: its questions rank as the
    operator's filtered to that namespace, its updates and uploads land there (uploads under
    uploads/NAMESPACE/, reported by the names sent), /sources and /passages show only its
    own (another tenant's passage is as unknown as a missing one), a request naming another
    namespace is 403, a read-only key changes nothing, /metrics is the operator's; no key
    or a wrong one is 401."""
    import asyncio
    import httpx
    import pytest
    pytest.importorskip("fastapi")
    from evireform.service import RetrievalService, create_app
    from evireform.service.guard import Tenant
    ps = [Passage(p.id, p.title, p.text, {**p.metadata, "source": f"{p.id[0]}.md",
                                          "namespace": {"t1": "acme", "t2": "globex"}[
                                              p.metadata["namespace"]]})
          for p in _tenants("the red fox {i} ran past the grey cat.")]
    ix = PropositionIndex.build(ps, EMB, show_progress=False).save(tmp_path / "ix")
    svc = RetrievalService(ix, EMB)
    app = create_app(svc, api_key=OPERATOR, tenants={ACME: Tenant("acme", True),
                                                     GLOBEX: Tenant("globex")})
    q = {"question": "where did the red fox run?", "k": 5}

    async def calls(c, h):
        out = {}
        out["acme"] = await c.post("/query", json=q, headers=h(ACME))
        out["op_acme"] = await c.post("/query", json={**q, "namespace": "acme"},
                                      headers=h(OPERATOR))
        out["op_all"] = await c.post("/query", json=q, headers=h(OPERATOR))
        out["acme_asks_globex"] = await c.post("/query", json={
            **q, "namespace": "globex"}, headers=h(ACME))
        out["batch"] = await c.post("/query_batch", json={
            "questions": [q["question"]], "k": 5}, headers=h(GLOBEX))
        out["batch_other"] = await c.post("/query_batch", json={
            "questions": [q["question"]], "k": 5, "namespace": "acme"},
            headers=h(GLOBEX))
        out["none"] = await c.post("/query", json=q)
        out["wrong"] = await c.post("/query", json=q, headers=h("x" * 20))
        out["ro_update"] = await c.post("/update", json={"add": [
            {"title": "G", "text": "Globex writes."}]}, headers=h(GLOBEX))
        out["ro_docs"] = await c.post("/documents", files=[
            ("files", ("g.md", b"# G\n\nGlobex uploads.\n"))], headers=h(GLOBEX))
        out["update"] = await c.post("/update", json={"add": [
            {"id": "acme-new", "title": "Memo", "text": "Ann signs the memo."}]},
            headers=h(ACME))
        out["update_other"] = await c.post("/update", json={
            "namespace": "globex", "delete": ["b1"]}, headers=h(ACME))
        out["delete_theirs"] = await c.post("/update", json={"delete": ["b1"]},
                                            headers=h(ACME))
        out["docs"] = await c.post("/documents", files=[
            ("files", ("note.md", b"# Note\n\nThe acme build farm is run by Orla.\n"))],
            headers=h(ACME))
        out["sources_acme"] = await c.get("/sources", headers=h(ACME))
        out["sources_op"] = await c.get("/sources", headers=h(OPERATOR))
        out["own"] = await c.get("/passages/a1", headers=h(ACME))
        out["theirs"] = await c.get("/passages/b1", headers=h(ACME))
        out["metrics"] = await c.get("/metrics", headers=h(ACME))
        out["metrics_op"] = await c.get("/metrics", headers=h(OPERATOR))
        return out
    o = _served(svc, app, calls)
    ids = lambda r: [(p["id"], round(p["score"], 6)) for p in r.json()["passages"]]  # noqa: E731
    assert o["acme"].status_code == 200 and ids(o["acme"]) == ids(o["op_acme"])
    assert all(i.startswith("a") for i, _ in ids(o["acme"]))
    assert any(i.startswith("b") for i, _ in ids(o["op_all"]))  # the operator sees both
    for k in ("acme_asks_globex", "batch_other", "ro_update", "ro_docs", "update_other",
              "metrics"):
        assert o[k].status_code == 403, (k, o[k].text)
    assert "acme" in o["acme_asks_globex"].json()["error"]
    got = o["batch"].json()["results"][0]["passages"]
    assert got and all(p["id"].startswith("b") for p in got)
    assert o["none"].status_code == 401 and o["wrong"].status_code == 401
    assert o["update"].status_code == 200 and o["delete_theirs"].status_code == 404
    d = o["docs"].json()
    assert o["docs"].status_code == 200 and d["files"][0]["file"] == "note.md"
    assert d["files"][0]["source"] == "uploads/note.md"  # as an index of its own names it
    assert (svc.uploads_dir / "acme" / "note.md").is_file()
    idx = PropositionIndex.load(ix)
    spaces = {p.id: p.metadata.get("namespace") for p in idx.passages}
    assert spaces["acme/acme-new"] == "acme" and "b1" in spaces  # its id, in its namespace
    assert {spaces[p.id] for p in idx.passages
            if p.metadata.get("source") == "uploads/acme/note.md"} == {"acme"}
    mine = {s["source"] for s in o["sources_acme"].json()["sources"]}
    assert mine == {"a.md", "uploads/note.md"}
    assert {"a.md", "b.md"} <= {s["source"] for s in o["sources_op"].json()["sources"]}
    assert o["own"].status_code == 200 and o["theirs"].status_code == 404
    assert o["theirs"].json()["error"] == o["own"].json().get("error",
                                                              "no passage with id 'b1'")
    assert o["metrics_op"].status_code == 200


def test_tenant_keys_are_checked_when_read(tmp_path):
    import json
    import pytest
    from evireform.service.guard import Tenant, read_tenant_keys
    assert read_tenant_keys(json.dumps({ACME: {"namespace": "acme", "write": True},
                                        GLOBEX: "globex"})) == \
        {ACME: Tenant("acme", True), GLOBEX: Tenant("globex", False)}
    for bad, said in (("[]", "JSON object"), ("{", "not JSON"),
                      (json.dumps({"short": "acme"}), "shorter than 16"),
                      (json.dumps({ACME: {"namespace": "../x"}}), "not a name"),
                      (json.dumps({ACME: {"namespace": "acme", "write": "yes"}}), "true or"),
                      (json.dumps({ACME: {"namespace": "acme", "admin": True}}), "give")):
        with pytest.raises(ValueError, match=said) as got:
            read_tenant_keys(bad, "keys.json")
        assert ACME not in str(got.value)  # a key is never echoed
    f = tmp_path / "keys.json"
    f.write_text(json.dumps({ACME: "acme"}))
    from evireform.cli import main
    assert main(["serve", str(tmp_path / "none.idx"), "--tenant-keys",
                 str(tmp_path / "missing.json")]) == 2


def test_two_tenants_ids_never_meet(tmp_path):
    """Issue 81, leak 2 (explicit ids): ids were global, so tenant A adding an id tenant B
    holds got "409 ... is taken" (and a wrong guess 200): A could confirm B's ids and could
    not use them. A tenant's ids are now kept in its namespace ("NS/id"): both add "memo",
    each reads, finds, replaces and deletes its own by the id it sent (or as stored),
    the other's is unknown under either name, and 409 comes only from its own."""
    import asyncio
    import httpx
    import pytest
    pytest.importorskip("fastapi")
    from evireform.service import RetrievalService, create_app
    from evireform.service.guard import Tenant
    ix = PropositionIndex.build(_tenants("a grey cat {i} sat on the mat."), EMB,
                                show_progress=False).save(tmp_path / "ix")
    svc = RetrievalService(ix, EMB)
    app = create_app(svc, api_key=OPERATOR, tenants={ACME: Tenant("t1", True),
                                                     GLOBEX: Tenant("t2", True)})

    async def calls(c, h):
        up = lambda key, body: c.post("/update", json=body, headers=h(key))  # noqa
        o = {}
        o["b"] = await up(GLOBEX, {"add": [{"id": "memo", "title": "Memo",
                                            "text": "Globex pays Ann in May."}]})
        o["a"] = await up(ACME, {"add": [{"id": "memo", "title": "Memo",
                                          "text": "Acme hires Bo in June."}]})
        o["a_again"] = await up(ACME, {"add": [{"id": "memo", "title": "Memo",
                                                "text": "Other text."}]})
        o["a_get"] = await c.get("/passages/memo", headers=h(ACME))
        o["a_get_stored"] = await c.get("/passages/t1/memo", headers=h(ACME))
        o["a_get_theirs"] = await c.get("/passages/t2/memo", headers=h(ACME))
        o["b_get"] = await c.get("/passages/memo", headers=h(GLOBEX))
        o["a_query"] = await c.post("/query", json={
            "question": "who does acme hire?", "k": 3, "filter": ["memo"]},
            headers=h(ACME))
        o["a_query_theirs"] = await c.post("/query", json={
            "question": "who does acme hire?", "k": 3, "filter": ["t2/memo"]},
            headers=h(ACME))
        o["a_upsert"] = await up(ACME, {"upsert": True, "add": [
            {"id": "memo", "title": "Memo", "text": "Acme hires Cy in July."}]})
        o["a_del_theirs"] = await up(ACME, {"delete": ["t2/memo"]})
        o["b_del"] = await up(GLOBEX, {"delete": ["memo"]})
        o["a_guess"] = await up(ACME, {"add": [{"id": "t2/memo", "title": "M",
                                                "text": "A guess."}]})
        o["a_get_guess"] = await c.get("/passages/t2/memo", headers=h(ACME))
        return o
    o = _served(svc, app, calls)
    assert o["b"].status_code == 200 and o["a"].status_code == 200, o["a"].text
    assert o["a_again"].status_code == 409 and "t2" not in o["a_again"].text
    assert o["a_guess"].status_code == 200  # kept as t1/t2/memo: tells nothing
    assert o["a_get"].json()["text"] == "Acme hires Bo in June."
    assert o["a_get_stored"].json() == o["a_get"].json() and o["a_get"].json()["id"] == "memo"
    assert o["a_get_theirs"].status_code == 404
    assert o["b_get"].json()["text"] == "Globex pays Ann in May."
    assert [p["id"] for p in o["a_query"].json()["passages"]] == ["memo"]
    assert o["a_query_theirs"].status_code == 404
    assert o["a_upsert"].status_code == 200 and o["a_upsert"].json()["changes"]["replaced"] == 1
    assert o["a_del_theirs"].status_code == 404
    assert o["b_del"].status_code == 200
    texts = {p.id: p.text for p in PropositionIndex.load(ix).passages}
    assert texts["t1/memo"] == "Acme hires Cy in July." and "t2/memo" not in texts
    assert texts["t1/t2/memo"] == "A guess." == o["a_get_guess"].json()["text"]


def _tenant_calls(methods=("evireform", "bgr", "hiq", "bm25", "dense", "hybrid"),
                  other: bool = False):
    """One tenant's session through every endpoint (ACME's key), as ``_served``'s calls:
    an explicit id, an upload, questions by every method with graphs, traces and answers,
    id and source filters, the sources, passages by the names it reads, a refused add,
    deletes by id and by source, and the questions again.  ``other``: GLOBEX's key adds
    the same id and uploads the same file name in between."""
    async def calls(c, h):
        o = []
        post = lambda path, body: c.post(path, json=body, headers=h(ACME))  # noqa: E731
        get = lambda path: c.get(path, headers=h(ACME))  # noqa: E731
        if other:
            await c.post("/update", json={"add": [{"id": "memo", "title": "Memo", "text":
                                                   "Globex pays Ann."}]}, headers=h(GLOBEX))
        o.append(await post("/update", {"add": [
            {"id": "memo", "title": "Memo", "text": "Acme hires Bo in June. The red fox "
                                                    "ran with Bo."}]}))
        if other:
            await c.post("/documents", files=[("files", ("notes/note.md", b"# Note\n\nA "
                                                         b"red fox at Globex.\n"))],
                         headers=h(GLOBEX))
        o.append(await c.post("/documents", files=[
            ("files", ("notes/note.md", b"# Note\n\nThe red fox build farm is run by "
                                        b"Orla.\n\n## Farm\n\nOrla met the blue heron.\n"))],
            headers=h(ACME)))
        q = "who hires Bo and where did the red fox run?"
        for m in methods:
            o.append(await post("/query", {"question": q, "k": 6, "graph": True,
                                           "method": m, "answer": True}))
        o.append(await post("/query_batch", {"questions": [q, "who met the blue heron?"],
                                             "k": 4, "graph": True}))
        o.append(await post("/query", {"question": q, "k": 3, "filter": ["memo"]}))
        o.append(await post("/query", {"question": q, "k": 3, "filter": {
            "source": {"$in": ["uploads/notes/note.md"]}}}))
        o.append(await get("/sources"))
        o.append(await get("/passages/memo"))
        o.append(await get("/passages/uploads/notes/note.md%230"))
        o.append(await post("/update", {"add": [{"id": "memo", "title": "Memo",
                                                 "text": "Other text."}]}))
        o.append(await post("/update", {"delete_where": {
            "source": "uploads/notes/note.md"}}))
        o.append(await post("/update", {"delete": ["memo"]}))
        o.append(await post("/update", {"delete": ["memo"]}))
        o.append(await post("/query", {"question": q, "k": 6, "graph": True}))
        o.append(await get("/sources"))
        return [(r.status_code, r.json()) for r in o]
    return calls


def _comparable(x):
    """A response with its timings left out and its floats rounded."""
    if isinstance(x, dict):
        return {k: _comparable(v) for k, v in x.items() if k not in ("took_ms", "timings_ms")}
    if isinstance(x, (list, tuple)):
        return [_comparable(v) for v in x]
    return round(x, 9) if isinstance(x, float) else x


def test_a_tenant_key_reads_what_an_index_of_its_own_would_show(tmp_path):
    """Issue 81, done when: "a namespace's key sees exactly what an index of its own would
    show, through every endpoint". One tenant's session (an explicit id, an upload, every
    method with graphs, traces and answers, filters by id and by source, sources, passages,
    a refused add, deletes) answers byte for byte the same JSON on an index shared with
    another tenant (whose passages come first and between, and who adds the same id and
    uploads the same file name meanwhile) as on an index holding the tenant's passages
    alone: ids as sent (``memo``, not the kept ``t1/memo``), uploads as ``uploads/NAME``,
    graph and hit positions, update counts and generation numbers of its own."""
    import pytest
    pytest.importorskip("fastapi")
    from evireform.service import RetrievalService, create_app
    from evireform.service.guard import Tenant
    ps = _tenants("a grey cat {i} sat on the mat.")
    mine, theirs = ps[:30], ps[30:]
    shared = theirs[:10] + [p for pair in zip(mine, theirs[10:]) for p in pair] + mine[20:]
    got = {}
    for name, passages in (("shared", shared), ("own", mine)):
        ix = PropositionIndex.build(passages, EMB, show_progress=False,  # the own search
                                    passage_vectors=True).save(tmp_path / name / "ix")
        svc = RetrievalService(ix, EMB)
        app = create_app(svc, api_key=OPERATOR, tenants={ACME: Tenant("t1", True),
                                                         GLOBEX: Tenant("t2", True)})
        got[name] = _served(svc, app, _tenant_calls(other=name == "shared"))
    codes = [c for c, _ in got["own"]]
    assert codes == [200] * 14 + [409, 200, 200, 404, 200, 200], codes
    for n, (a, b) in enumerate(zip(got["shared"], got["own"])):
        assert _comparable(a) == _comparable(b), n
    text = json.dumps(got["shared"])
    assert "t1/" not in text and "t2" not in text
    assert '"own_search": ["' in text  # the question's own search placed passages too
    # what the shared index keeps: the tenant's names in its namespace
    idx = PropositionIndex.load(tmp_path / "shared" / "ix")
    assert not any(p.id.startswith(("t1/", "uploads/t1/")) for p in idx.passages)  # deleted
    assert {"t2/memo", "uploads/t2/notes/note.md#0"} <= {p.id for p in idx.passages}
