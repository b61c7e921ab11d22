"""`evireform mcp IDX`, driven by the official MCP SDK's own client over stdio and over
streamable HTTP: the retrieve tool answers what `POST /query` answers for the same index,
the index's stats are a resource, and a refused request is a tool error with its reason."""
import asyncio
import json
import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("mcp.server.mcpserver")
pytest.importorskip("fastapi")

from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from helpers import untimed
from service_common import EMB, HTTP, QUESTIONS, REPO, Server, _records

from evireform import PropositionIndex

CMD = [sys.executable, "-m", "evireform", "mcp"]


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory):
    return PropositionIndex.build(_records(40), EMB, show_progress=False).save(
        tmp_path_factory.mktemp("mcp") / "ix")


@pytest.fixture(scope="module")
def served(index_dir):
    """What `evireform serve` answers on the same index: the reference."""
    s = Server(index_dir)
    out = {}
    for q in QUESTIONS[:3]:
        body = HTTP.post(s.url + "/query", json={"question": q, "k": 5}).json()
        body.pop("took_ms")
        out[q] = body
    out["bgr"] = HTTP.post(s.url + "/query", json={"question": QUESTIONS[1], "k": 4,
                                                  "method": "bgr"}).json()
    out["bgr"].pop("took_ms")
    s.close()
    return out


async def _session_calls(session):
    await session.initialize()
    tools = {t.name: t for t in (await session.list_tools()).tools}
    answers = {}
    for q in QUESTIONS[:3]:
        answers[q] = await session.call_tool("retrieve", {"question": q, "k": 5})
    answers["bgr"] = await session.call_tool("retrieve", {"question": QUESTIONS[1], "k": 4,
                                                          "method": "bgr"})
    answers["missing"] = await session.call_tool(
        "retrieve", {"question": QUESTIONS[0], "filter": {"no_such_key": 1}})
    answers["blank"] = await session.call_tool("retrieve", {"question": "  "})
    # issue 69: the arguments are validated strictly, as /query validates them
    answers["k-bool"] = await session.call_tool("retrieve", {"question": QUESTIONS[0], "k": True})
    answers["k-str"] = await session.call_tool("retrieve", {"question": QUESTIONS[0], "k": "5"})
    answers["long"] = await session.call_tool("retrieve", {"question": "x " * 2500})
    # issue 70: the trace only when asked for
    answers["traced"] = await session.call_tool("retrieve", {"question": QUESTIONS[0], "k": 5,
                                                             "include_trace": True})
    # issue 82: an answer from the passages when asked for (extractive without an LLM)
    answers["answered"] = await session.call_tool("retrieve", {"question": QUESTIONS[0], "k": 5,
                                                               "answer": True})
    answers["prompts"] = (await session.list_prompts()).prompts
    answers["prompt"] = await session.get_prompt("answer_from_index",
                                                 {"question": QUESTIONS[0]})
    stats = await session.read_resource("evireform://index")
    return tools, answers, stats


def _check(tools, answers, stats, served):
    assert set(tools) == {"retrieve"}
    props = tools["retrieve"].input_schema["properties"]
    assert {"question", "k", "filter", "method", "namespace", "include_trace",
            "answer"} <= set(props)
    for key, want in served.items():
        r = answers[key]
        assert not r.is_error, r.content
        got = r.structured_content
        # /query's passages, the generation, no trace unless asked for, no question echoed
        assert set(got) == {"passages", "generation"}, key
        assert got["passages"] == want["passages"] and got["generation"] == want["generation"]
        assert got["passages"] and all(p["text"] for p in got["passages"])
        # the text the model reads: the passages numbered, each with its id and text
        text = r.content[0].text
        for n, p in enumerate(got["passages"], 1):
            assert f"[{n}] {p['title']} [{p['id']}]" in text
            assert " ".join(p["text"].split()) in text
        assert "trace" not in text and len(text) < len(json.dumps(got))
    traced = answers["traced"].structured_content
    want = served[QUESTIONS[0]]
    said = answers["answered"].structured_content
    assert said["passages"] == want["passages"] and said["answer"]["kind"] == "extractive"
    assert answers["answered"].content[0].text.startswith(
        f"Answer (extractive): {said['answer']['text']}")
    assert untimed({"trace": traced["trace"]}) == untimed({"trace": want["trace"]})
    assert traced["passages"] == want["passages"]
    for key, words in (("missing", "no_such_key"), ("blank", "question"), ("k-bool", "k"),
                       ("k-str", "k"), ("long", "question")):
        assert answers[key].is_error and words in answers[key].content[0].text, key
    # read-only, typed output, and a real prompt behind the prompts capability
    tool = tools["retrieve"]
    assert tool.annotations.read_only_hint is True
    out = tool.output_schema
    assert {"passages", "generation", "trace"} <= set(out["properties"])
    assert [p.name for p in answers["prompts"]] == ["answer_from_index"]
    assert QUESTIONS[0] in answers["prompt"].messages[0].content.text
    # every argument explains itself: described, bounded, the methods enumerated
    assert all(p.get("description") for p in props.values())
    assert props["k"]["minimum"] == 1 and props["k"]["maximum"] == 1000
    assert "evireform" in props["method"]["enum"] and props["question"]["maxLength"] == 4000
    info = json.loads(stats.contents[0].text)
    assert info["status"] == "ok" and info["index"]["passages"] == 40


def test_the_tool_over_stdio_answers_like_query(index_dir, served):
    params = StdioServerParameters(command=CMD[0], args=[
        *CMD[1:], str(index_dir), "--embedder", "hashing-64"], cwd=str(REPO))

    async def run():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            return await _session_calls(s)
    _check(*asyncio.run(asyncio.wait_for(run(), 180)), served)


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _http_server(index_dir, *extra, env=None):
    """``evireform mcp --transport http`` on a free port, once the port is bound:
    (process, port)."""
    port = _port()
    proc = subprocess.Popen([*CMD, str(index_dir), "--embedder", "hashing-64", "--transport",
                             "http", "--port", str(port), *extra], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    t0 = time.monotonic()
    while True:  # the banner comes once the port is bound
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(proc.stderr.read().decode()) from None
            if time.monotonic() - t0 > 120:
                proc.kill()
                raise AssertionError("evireform mcp did not start")
            time.sleep(0.1)


def test_the_tool_over_streamable_http_answers_like_query(index_dir, served):
    proc, port = _http_server(index_dir)
    try:

        async def run():
            async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (
                    read, write), ClientSession(read, write) as s:
                return await _session_calls(s)
        _check(*asyncio.run(asyncio.wait_for(run(), 180)), served)
    finally:
        proc.terminate()
        proc.wait(20)


def test_without_the_sdk_the_command_says_what_to_install(index_dir, tmp_path):
    # a shadowing package named mcp without the server: the import of the SDK fails
    (tmp_path / "mcp").mkdir()
    (tmp_path / "mcp" / "__init__.py").write_text("")
    r = subprocess.run([*CMD, str(index_dir)], cwd=REPO, capture_output=True, text=True,
                       env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
                       timeout=120, check=False)
    assert r.returncode != 0 and "evireform[mcp]" in r.stderr and "Traceback" not in r.stderr


def test_the_http_transport_takes_a_key(index_dir):
    """Issue 69: ``mcp --transport http --api-key-env VAR`` refuses requests without the
    bearer token (401) and answers with it; bound beyond loopback without a key it warns."""
    import os
    import httpx
    proc, port = _http_server(index_dir, "--api-key-env", "MCP_KEY",
                              env={**os.environ, "MCP_KEY": "k3y"})
    try:
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}}
        hdr = {"Accept": "application/json, text/event-stream"}
        url = f"http://127.0.0.1:{port}/mcp"
        no = httpx.post(url, json=init, headers=hdr, timeout=30)
        yes = httpx.post(url, json=init, headers={**hdr, "Authorization": "Bearer k3y"},
                         timeout=30)
        assert no.status_code == 401 and "bearer" in no.json()["error"]
        assert yes.status_code == 200
    finally:
        proc.terminate()
        proc.wait(30)
    with socket.socket() as busy:  # a port in use: the command warns, then cannot bind
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        out = subprocess.run([*CMD, str(index_dir), "--transport", "http", "--host", "0.0.0.0",
                              "--port", str(busy.getsockname()[1]), "--embedder",
                              "hashing-64"], cwd=REPO, capture_output=True, text=True,
                             timeout=120)
    assert out.returncode != 0 and "without --api-key-env" in out.stderr


def test_a_reply_for_every_request_malformed_unicode_included(index_dir):
    """Issue 69: JSON-RPC lines written by hand over stdio, with a lone surrogate escaped in
    the question, in a filter key, and bytes that are not UTF-8, each get a reply (the bad
    text read as U+FFFD, as the SDK reads bytes that are not UTF-8), in order."""
    import queue
    import threading
    from evireform.mcp_server import clean_json_line
    assert clean_json_line(b'"a \\ud800 b \\ud83d\\ude00 \\\\ud800"') == \
        b'"a \\ufffd b \\ud83d\\ude00 \\\\ud800"'
    proc = subprocess.Popen([*CMD, str(index_dir), "--embedder", "hashing-64"], cwd=REPO,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in iter(proc.stdout.readline, b"")],
                     daemon=True).start()

    def send(raw: bytes):
        proc.stdin.write(raw + b"\n")
        proc.stdin.flush()

    def reply():
        return json.loads(lines.get(timeout=120))
    try:
        send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}}).encode())
        assert reply()["id"] == 1
        send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
        call = '{"jsonrpc": "2.0", "id": %d, "method": "tools/call", "params": {"name": ' \
               '"retrieve", "arguments": %s}}'
        send((call % (2, '{"question": "cut \\ud800 here"}')).encode())
        send((call % (3, '{"question": "ok", "filter": {"k\\udc00": 1}}')).encode())
        send((call % (4, '{"question": "caf\xe9"}')).encode("latin-1"))  # not UTF-8
        send((call % (5, json.dumps({"question": QUESTIONS[0]}))).encode())
        got = {r["id"]: r for r in (reply() for _ in range(4))}
        assert set(got) == {2, 3, 4, 5}
        assert not got[2]["result"]["isError"] and not got[5]["result"]["isError"]
        assert got[3]["result"]["isError"] and "\ufffd" in got[3]["result"]["content"][0]["text"]
    finally:
        proc.kill()
        proc.wait(20)


def test_a_tenant_key_over_http_searches_its_namespace_only(tmp_path):
    """Issue 81, item 8: ``mcp --transport http --tenant-keys FILE``: a tenant's retrieve
    searches its namespace whatever the call says (the operator's answer for that namespace,
    with the ids the tenant reads: ``memo`` where the index keeps ``acme/memo``); a call
    naming another namespace is a tool error; an unknown key is 401."""
    import os
    import httpx
    import httpx2
    recs = [{**r, "metadata": {"namespace": "acme" if i % 2 else "globex"}}
            for i, r in enumerate(_records(40))]
    recs.append({"id": "acme/memo", "title": "Memo", "text": "Acme hires Bo in June.",
                 "metadata": {"namespace": "acme"}})
    ix = PropositionIndex.build(recs, EMB, show_progress=False).save(tmp_path / "ix")
    acme, op = "acme-key-0123456789", "operator-key-0123456"
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({acme: {"namespace": "acme"}}))
    proc, port = _http_server(ix, "--tenant-keys", str(keys), "--api-key-env", "MCP_KEY",
                              env={**os.environ, "MCP_KEY": op})
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        async def call(key, args):
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"},
                                          timeout=60) as hc, \
                    streamable_http_client(url, http_client=hc) as (read, write), \
                    ClientSession(read, write) as s:
                await s.initialize()
                tools = {t.name: t for t in (await s.list_tools()).tools}
                assert "ctx" not in tools["retrieve"].input_schema["properties"]
                return await s.call_tool("retrieve", args)

        async def run():
            q = {"question": QUESTIONS[0], "k": 6}
            m = {"question": "who does acme hire?", "k": 1, "include_trace": True}
            return (await call(acme, q), await call(op, {**q, "namespace": "acme"}),
                    await call(acme, {**q, "namespace": "globex"}), await call(op, q),
                    await call(acme, {**m, "filter": ["memo"], "answer": True}),
                    await call(op, {**m, "filter": ["acme/memo"], "namespace": "acme"}))
        mine, theirs_view, other, everyone, memo, memo_op = asyncio.run(
            asyncio.wait_for(run(), 180))
        no = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                        headers={"Accept": "application/json, text/event-stream",
                                 "Authorization": "Bearer " + "x" * 20}, timeout=30)
    finally:
        proc.terminate()
        proc.wait(30)
    idx = PropositionIndex.load(ix)
    space = {p.id: p.metadata["namespace"] for p in idx.passages}
    got = [p["id"] for p in mine.structured_content["passages"]]
    assert not mine.is_error and got and {space[i] for i in got} == {"acme"}
    from evireform.application import shown_id
    assert mine.structured_content["passages"] == [
        {**p, "id": shown_id(p["id"], "acme")}
        for p in theirs_view.structured_content["passages"]]
    assert [p["id"] for p in memo.structured_content["passages"]] == ["memo"]
    assert [c["id"] for c in memo.structured_content["answer"]["cites"]] == ["memo"]
    assert "[memo]" in memo.content[0].text and "acme/memo" not in memo.content[0].text
    assert [p["id"] for p in memo_op.structured_content["passages"]] == ["acme/memo"]
    assert "globex" in {space[p["id"]] for p in everyone.structured_content["passages"]}
    assert other.is_error and "acme" in other.content[0].text
    assert no.status_code == 401
