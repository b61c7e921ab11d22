"""The search page at `/` and the API docs: served from files in the package (no CDN),
readable without the key, and used in a real headless Chromium (Debian's package, driven by
Playwright): a question asked on the page shows the passages and the evidence graph that
`/query` answers."""
import asyncio
import importlib.util
import os
import re
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from service_common import EMB, HTTP, QUESTIONS, Server, _records

from evireform import PropositionIndex

KEY = "page-key"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory):
    return PropositionIndex.build(_records(40), EMB, show_progress=False).save(
        tmp_path_factory.mktemp("page") / "ix")


def test_the_page_and_the_docs_come_from_the_package_and_need_no_key(index_dir):
    from evireform.service import RetrievalService, create_app
    svc = RetrievalService(index_dir, EMB)
    guard = create_app(svc, api_key=KEY)

    async def calls():
        await svc.start()
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=guard),
                                         base_url="http://t") as c:
                out = {u: await c.get(u) for u in (
                    "/", "/docs", "/redoc", "/openapi.json", "/static/page.js",
                    "/static/page.css", "/static/swagger-ui-bundle.js",
                    "/static/swagger-ui.css", "/static/redoc.standalone.js",
                    "/static/favicon.png", "/static/app.py", "/static/%2e%2e/app.py",
                    "/metrics")}
                out["query"] = await c.post("/query", json={"question": QUESTIONS[0]})
                return out
        finally:
            await svc.stop()
    got = asyncio.run(calls())
    page = got["/"]
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    for u in ("/", "/docs", "/redoc"):
        html = got[u].text
        assert got[u].status_code == 200, u
        # every script, style sheet and icon is the service's own (relative), none a CDN's
        refs = re.findall(r'(?:src|href)="([^"]+)"', html)
        assert refs and not [r for r in refs if "//" in r or r.startswith("/")], (u, refs)
        for r in refs:
            if r.startswith("static/"):
                assert got["/" + r].status_code == 200, r
                assert len(got["/" + r].content) > 1000, r
    assert "<script>" not in page.text  # no inline script: the policy allows none
    assert got["/openapi.json"].json()["components"]["securitySchemes"]["bearer"]
    assert got["/static/page.js"].headers["content-type"].startswith("text/javascript")
    assert got["/static/app.py"].status_code == 404  # a whitelist, not a folder
    assert got["/static/%2e%2e/app.py"].status_code in (401, 404)
    # the data still needs the key
    assert got["/metrics"].status_code == 401 and got["query"].status_code == 401


def _script():
    spec = importlib.util.spec_from_file_location(
        "page_screenshot", ROOT / "scripts" / "page_screenshot.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def browser():
    """Debian's headless Chromium through Playwright: skipped where neither is installed,
    except in CI (`CI` set), where .ci/run installs the chromium package."""
    shot = _script()
    if shot.chromium_path() is None or importlib.util.find_spec("playwright") is None:
        if os.environ.get("CI"):
            pytest.fail("CI needs chromium (apt-get install chromium) and playwright (the "
                        "test extra): .ci/run installs them")
        pytest.skip("no chromium on PATH or no playwright")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = shot.launch_chromium(p)
        yield b
        b.close()


@pytest.fixture(scope="module")
def live(index_dir):
    s = Server(index_dir, "--api-key-env", "EVIREFORM_PAGE_KEY",
               env={"EVIREFORM_PAGE_KEY": KEY})
    yield s
    s.close()


def test_a_question_asked_in_the_browser_shows_passages_and_graph(browser, live):
    from playwright.sync_api import expect
    ctx = browser.new_context(viewport={"width": 1100, "height": 900})
    page = ctx.new_page()
    outside, problems = [], []

    def only_the_service(route):
        if route.request.url.startswith(live.url + "/"):
            route.continue_()
        else:  # nothing is fetched from anywhere else
            outside.append(route.request.url)
            route.abort()
    page.route("**/*", only_the_service)
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    try:
        page.goto(live.url + "/")
        expect(page.locator("#stats")).to_contain_text("40 passages")
        # the methods, as the schema publishes them
        from evireform.application import METHODS
        expect(page.locator("#method option")).to_have_count(len(METHODS))
        assert [o.get_attribute("value") for o in page.locator("#method option").all()] == \
            list(METHODS)
        # without the key: the page says what is missing
        page.fill("#question", QUESTIONS[0])
        page.click("#go")
        expect(page.locator("#status")).to_contain_text("API key")
        page.fill("#key", KEY)
        page.fill("#k", "5")
        page.click("#go")
        page.wait_for_selector("#passages li")
        want = HTTP.post(live.url + "/query", json={"question": QUESTIONS[0], "k": 5,
                                                    "graph": True},
                         headers={"Authorization": f"Bearer {KEY}"}).json()
        items = page.locator("#passages li")
        assert [items.nth(i).get_attribute("data-id") for i in range(items.count())] == [
            p["id"] for p in want["passages"]]
        first = want["passages"][0]
        assert first["text"] in items.nth(0).inner_text()
        # the answer first (issue 82): above the passages, as /query's answer says it
        said = HTTP.post(live.url + "/query", json={"question": QUESTIONS[0], "k": 5,
                                                    "answer": True},
                         headers={"Authorization": f"Bearer {KEY}"}).json()["answer"]
        expect(page.locator("#reply .text")).to_have_text(said["text"])
        assert page.locator("#reply .how").inner_text().startswith("extractive")
        assert [c.get_attribute("data-id") for c in page.locator("#reply .cites li").all()] \
            == [c["id"] for c in said["cites"]]
        reply_y = page.locator("#reply").bounding_box()["y"]
        assert reply_y < items.nth(0).bounding_box()["y"]
        assert page.locator("#trace ul.residual li").all_inner_texts() == \
            want["trace"]["residual_queries"]
        expect(page.locator("#trace .timings")).to_contain_text("encode_question")
        # dense and lexical together: each query's hits both ways, the question first
        hits = page.locator("#trace ul.hits li")
        assert hits.count() == len(want["trace"]["hits"]) >= 1
        assert hits.nth(0).inner_text().startswith(QUESTIONS[0])
        lex = want["trace"]["hits"][0]["lexical"]
        assert lex and lex[0]["passage"] in hits.nth(0).locator(".lexical").inner_text()
        # the evidence graph, drawn: a node per passage, an edge per stated edge
        assert page.locator("#graph g.node").count() == len(want["graph"]["nodes"]) == 5
        assert page.locator("#graph g.edge").count() == len(
            [e for e in want["graph"]["edges"] if e["src"] != e["dst"]])
        # the question is in the address: reloading asks it again (the key kept in the tab)
        assert "q=" in page.url
        page.reload()
        page.wait_for_selector("#passages li")
        assert page.locator("#passages li").count() == 5
        # a refusal is shown as the service's message
        page.click("#options summary")
        page.fill("#filter", '{"year": {"$gt": 1}}')
        page.click("#go")
        expect(page.locator("#status")).to_contain_text("Error")
        assert "year" in page.locator("#status").inner_text()
    finally:
        ctx.close()
    assert outside == []
    assert [p for p in problems if "401" not in p and "404" not in p] == []


def test_passage_text_is_shown_as_text_never_as_markup(browser, tmp_path):
    """A passage whose title and text hold HTML (a page of someone's notes, or a hostile
    upload) is printed as characters: no element or script of it reaches the page."""
    from playwright.sync_api import expect
    ix = PropositionIndex.build(_records(20) + [{
        "title": "<img src=x onerror=\"window.pwned=1\">Alpha 3",
        "text": "Alpha 3 met <b>Zed</b> in <script>window.pwned=2</script> 1903.",
        "metadata": {"source": "<i>notes</i>.md"}}], EMB, show_progress=False
    ).save(tmp_path / "ix")
    s = Server(ix)
    ctx = browser.new_context()
    page = ctx.new_page()
    try:
        page.goto(s.url + "/")
        page.fill("#question", "Who did Alpha 3 meet, Zed?")
        page.click("#options summary")
        page.fill("#k", "21")  # every passage
        page.click("#go")
        expect(page.locator("#passages li")).to_have_count(21)
        hostile = page.locator("#passages li", has_text="onerror")
        expect(hostile).to_have_count(1)
        assert "<b>Zed</b>" in hostile.inner_text() and "<i>notes</i>.md" in hostile.inner_text()
        assert page.locator("#passages img, #passages b, #passages script, #graph img").count() == 0
        assert page.evaluate("() => window.pwned === undefined")
    finally:
        ctx.close()
        s.close()


def test_the_api_docs_fetch_nothing_from_outside(browser, live):
    """Issue 70: /redoc and /docs render in Chromium from the service's own files; ReDoc's
    logo (a CDN image) is never requested: their pages' security policy allows the service
    alone."""
    for path, ready in (("/redoc", "h1"), ("/docs", ".opblock")):
        ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        page = ctx.new_page()
        outside = []
        page.on("request", lambda r: None if r.url.startswith(live.url + "/") or
                r.url.startswith(("data:", "blob:")) else outside.append(r.url))
        try:
            resp = page.goto(live.url + path)
            assert "default-src 'self'" in resp.headers["content-security-policy"]
            page.wait_for_selector(ready, timeout=30_000)
            page.wait_for_timeout(500)
            assert outside == [], (path, outside)
            assert "evireform" in page.content()
        finally:
            ctx.close()


@pytest.mark.parametrize("width,height", [(1280, 900), (390, 844)])
def test_files_uploaded_through_the_page_answer_first_and_can_be_deleted(
        browser, tmp_path, width, height):
    """Issue 70: a PDF and a Markdown file added through the page's documents panel, a
    question whose answer is in the PDF: its passage first, the answer's words highlighted
    within the first screen, the score bars drawn against the top score, the graph as a
    list on a phone; then the PDF's source deleted from the sources list."""
    from playwright.sync_api import expect
    from helpers import minimal_pdf
    ix = PropositionIndex.build(_records(30), EMB, show_progress=False).save(tmp_path / "ix")
    pdf = tmp_path / "archive.pdf"
    pdf.write_bytes(minimal_pdf([["The Orvel archive moved to Quito in 1998."]],
                                title="Archive note"))
    md = tmp_path / "team.md"
    md.write_text("# Team\n\nDana Ruiz runs the build farm.\n")
    s = Server(ix)
    ctx = browser.new_context(viewport={"width": width, "height": height})
    page = ctx.new_page()
    outside = []
    page.on("request", lambda r: None if r.url.startswith(s.url + "/") else
            outside.append(r.url))
    try:
        page.goto(s.url + "/")
        expect(page.locator("#stats")).to_contain_text("30 passages")
        page.click("#library summary")
        page.set_input_files("#files", [str(pdf), str(md)])
        page.click("#upload")
        expect(page.locator("#upstatus")).to_contain_text("2 of 2 indexed")
        expect(page.locator("#uploads li.indexed")).to_have_count(2)
        expect(page.locator("#sources li[data-source='uploads/archive.pdf']")).to_contain_text(
            "1 passage")
        expect(page.locator("#stats")).to_contain_text("32 passages")
        page.click("#library summary")  # closed again: the answer is what the screen shows
        page.fill("#question", "Where did the Orvel archive move?")
        page.click("#go")
        first = page.locator("#passages li").first
        expect(first).to_have_attribute("data-id", "uploads/archive.pdf#0")
        expect(first.locator(".source")).to_contain_text("uploads/archive.pdf")
        mark = first.locator(".text mark", has_text="archive").first
        box = mark.bounding_box()
        assert box and 0 <= box["y"] and box["y"] + box["height"] <= height, box
        # score bars against the top score: the first is full, a weaker one shorter
        bars = page.locator("#passages li .parts")
        w = [bars.nth(i).bounding_box()["width"] for i in range(bars.count())]
        assert w[0] == max(w) and min(w) < w[0]
        graph = page.locator("#graph")
        assert graph.is_visible() == (width > 600)
        # the sources list deletes the PDF's passages once asked and confirmed (a dismissed
        # question deletes nothing)
        page.click("#library summary")
        asked = []
        page.once("dialog", lambda d: (asked.append(d.message), d.dismiss()))
        page.locator("#sources li[data-source='uploads/archive.pdf'] .del").click()
        expect(page.locator("#sources li[data-source='uploads/archive.pdf']")).to_have_count(1)
        assert asked and "uploads/archive.pdf" in asked[0] and "passage" in asked[0]
        page.once("dialog", lambda d: d.accept())
        page.locator("#sources li[data-source='uploads/archive.pdf'] .del").click()
        expect(page.locator("#upstatus")).to_contain_text("Deleted uploads/archive.pdf")
        expect(page.locator("#sources li[data-source='uploads/archive.pdf']")).to_have_count(0)
        expect(page.locator("#stats")).to_contain_text("31 passages")
        # a passage opened by its id
        page.fill("#pid", "uploads/team.md#0")
        page.click("#open")
        expect(page.locator("#passage .text")).to_contain_text("Dana Ruiz runs the build farm")
    finally:
        ctx.close()
        s.close()
    assert outside == []


def test_a_folder_goes_in_through_the_page_in_parts(browser, tmp_path):
    """Issue 70: a folder chosen on the page goes in with each file's path below it (two
    readme.md apart), its hidden files left out and counted, in parts of at most 100 files
    (one generation each) with the progress shown; files dropped on the panel go in too."""
    from playwright.sync_api import expect
    ix = PropositionIndex.build(_records(10), EMB, show_progress=False).save(tmp_path / "ix")
    root = tmp_path / "notes"
    for team in "ab":
        (root / team).mkdir(parents=True)
        (root / team / "readme.md").write_text(f"# {team}\n\nTeam {team} meets at noon.\n")
    (root / "many").mkdir()
    for i in range(101):
        (root / "many" / f"n{i:03d}.md").write_text(f"# N{i}\n\nNote number {i} is here.\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    s = Server(ix)
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    seen = []
    page.on("request", lambda r: seen.append(r.url) if r.url.endswith("/documents") else None)
    try:
        page.goto(s.url + "/")
        page.click("#library summary")
        page.set_input_files("#folder", str(root))
        expect(page.locator("#upstatus")).to_contain_text("103 files ready")
        expect(page.locator("#upstatus")).to_contain_text("1 hidden left out")
        page.click("#upload")
        expect(page.locator("#upstatus")).to_contain_text("103 of 103 indexed", timeout=60000)
        assert len(seen) == 2  # 100 + 3
        expect(page.locator("#upstatus")).to_contain_text("generation 2")
        expect(page.locator("#upstatus")).to_contain_text("113 passages")
        for team in "ab":
            expect(page.locator(f"#sources li[data-source='uploads/notes/{team}/readme.md']")
                   ).to_have_count(1)
        # dropped files (a script's DataTransfer holds files, no folder entries)
        page.evaluate("""() => {
          const dt = new DataTransfer();
          dt.items.add(new File(["# Drop\\n\\nThe dropped note names Quito.\\n"], "drop.md"));
          dt.items.add(new File(["x"], ".hidden.md"));
          const drop = document.getElementById("drop");
          drop.dispatchEvent(new DragEvent("drop", {dataTransfer: dt, bubbles: true,
                                                    cancelable: true}));
        }""")
        expect(page.locator("#upstatus")).to_contain_text("1 file ready")
        page.click("#upload")
        expect(page.locator("#upstatus")).to_contain_text("1 of 1 indexed")
        expect(page.locator("#sources li[data-source='uploads/drop.md']")).to_have_count(1)
    finally:
        ctx.close()
        s.close()


def test_a_text_held_twice_is_one_passage_naming_the_other(browser, tmp_path):
    """Issue 68: the page shows a text two passages hold once, naming the other copy."""
    from playwright.sync_api import expect
    same = "The Orvel archive moved to Quito in 1998."
    recs = _records(12) + [{"id": "north", "title": "North", "text": same},
                           {"id": "south", "title": "South", "text": same}]
    ix = PropositionIndex.build(recs, EMB, show_progress=False).save(tmp_path / "ix")
    s = Server(ix)
    ctx = browser.new_context(viewport={"width": 1100, "height": 900})
    page = ctx.new_page()
    try:
        page.goto(s.url + "/")
        page.fill("#question", "Where did the Orvel archive move?")
        page.click("#go")
        first = page.locator("#passages li").first
        expect(first.locator(".twins")).to_have_text(
            "same text in " + ("south" if first.get_attribute("data-id") == "north"
                               else "north"))
        expect(page.locator("#passages li .text", has_text="Quito")).to_have_count(1)
    finally:
        ctx.close()
        s.close()


def test_the_page_names_the_passages_the_own_search_placed(browser, tmp_path):
    """Issue 85: on an index with passage embeddings, the passages the question's own
    search placed (the trace's ``own_search``) say so, and only they."""
    import json
    import urllib.request

    from playwright.sync_api import expect
    ix = PropositionIndex.build(_records(12), EMB, show_progress=False,
                                passage_vectors=True).save(tmp_path / "ix")
    s = Server(ix)
    q = "Where did the Orvel archive move?"
    req = urllib.request.Request(s.url + "/query", json.dumps({"question": q, "k": 5}).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        own = set(json.load(r)["trace"]["own_search"])
    assert own
    ctx = browser.new_context(viewport={"width": 1100, "height": 900})
    page = ctx.new_page()
    try:
        page.goto(s.url + "/")
        page.fill("#question", q)  # k: the page's default, 5
        page.click("#go")
        items = page.locator("#passages li[data-id]")
        expect(items).to_have_count(5)
        for n in range(5):
            li = items.nth(n)
            marked = li.locator(".source", has_text="found by the question's own search")
            expect(marked).to_have_count(1 if li.get_attribute("data-id") in own else 0)
    finally:
        ctx.close()
        s.close()


def test_a_tenant_key_on_the_page_sees_its_namespace_only(browser, tmp_path):
    """Issue 81, item 8: the page with a tenant's key (serve --tenant-keys) shows only that
    namespace's passages and sources, the same as /query answers that key, with the ids an
    index of its own would show (``memo``, kept as ``acme/memo``); naming another namespace
    in the page's options is refused with the service's message."""
    import json

    from playwright.sync_api import expect
    recs = [{**r, "metadata": {"namespace": "acme" if i % 2 else "globex",
                               "source": f"{'acme' if i % 2 else 'globex'}/{i}.md"}}
            for i, r in enumerate(_records(40))]
    # a passage acme added with its own id (kept as acme/memo): the page shows "memo"
    recs.append({"id": "acme/memo", "title": "Memo", "text": "Orla Quist runs the acme "
                 "build farm.", "metadata": {"namespace": "acme", "source": "acme/memo.md"}})
    ix = PropositionIndex.build(recs, EMB, show_progress=False).save(tmp_path / "ix")
    acme = "acme-page-key-0123456"
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({acme: {"namespace": "acme"}}))
    s = Server(ix, "--tenant-keys", str(keys))
    ctx = browser.new_context(viewport={"width": 1100, "height": 900})
    page = ctx.new_page()
    try:
        page.goto(s.url + "/")
        page.click("#options summary")  # k, the namespace and the key
        page.fill("#key", acme)
        page.fill("#question", QUESTIONS[0])
        page.fill("#k", "6")
        page.click("#go")
        page.wait_for_selector("#passages li")
        want = HTTP.post(s.url + "/query", json={"question": QUESTIONS[0], "k": 6},
                         headers={"Authorization": f"Bearer {acme}"}).json()
        items = page.locator("#passages li")
        shown = [items.nth(i).get_attribute("data-id") for i in range(items.count())]
        assert shown == [p["id"] for p in want["passages"]] and len(shown) == 6
        space = {p.id: p.metadata["namespace"] for p in PropositionIndex.load(ix).passages}
        assert {space[i] for i in shown} == {"acme"}
        page.click("#library summary")
        # the list is drawn in one go once /sources answers (a placeholder before it)
        expect(page.locator("#sources li[data-source]").first).to_be_visible()
        srcs = page.locator("#sources li").evaluate_all(
            "els => els.map(e => e.dataset.source)")
        assert srcs and all(x.startswith("acme/") for x in srcs), srcs
        page.fill("#question", "Who runs the acme build farm? Orla Quist memo")
        page.fill("#k", "3")
        page.click("#go")
        expect(page.locator("#passages li").first).to_have_attribute("data-id", "memo")
        assert "[acme/memo]" not in page.locator("#passages").inner_text()
        assert "acme/memo" not in page.locator("#passages li").evaluate_all(
            "els => els.map(e => e.dataset.id)")
        page.fill("#namespace", "globex")
        page.click("#go")
        expect(page.locator("#status")).to_contain_text("403")
        assert "acme" in page.locator("#status").inner_text()
    finally:
        ctx.close()
        s.close()
