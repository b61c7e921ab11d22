"""A screenshot of the search page (`evireform serve`'s `/`) answering a HotpotQA question,
for the docs: builds a small index over the question's and its neighbours' passages with the
default embedder, serves it, and drives Debian's headless Chromium with Playwright.

    python scripts/page_screenshot.py                    # -> docs/search_page.png
    python scripts/page_screenshot.py --question "..." --out /tmp/page.png

``launch_chromium`` is also what tests/test_page.py drives the browser with."""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: a quiet, sandbox-free, offline Chromium (root in CI and containers needs --no-sandbox)
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--no-first-run", "--disable-background-networking", "--disable-sync",
                 "--disable-component-update", "--disable-default-apps", "--disable-quic"]


def chromium_path() -> str | None:
    """Debian's Chromium (the `chromium` package), or $CHROMIUM."""
    return os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which(
        "chromium-browser")


def launch_chromium(playwright):
    """A headless Chromium browser through Playwright, from the system's package (Playwright
    downloads nothing)."""
    exe = chromium_path()
    if exe is None:
        raise RuntimeError("no chromium on PATH (Debian: apt-get install chromium)")
    return playwright.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_ARGS)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, proc, timeout: float = 300) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError("evireform serve exited:\n" + proc.stderr.read().decode())
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("the service did not start")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"),
                    help="the data folder (hotpotqa/hotpotqa.json)")
    ap.add_argument("--question", default=None,
                    help="the question asked (default: the first HotpotQA question)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "search_page.png"))
    args = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright

    from evireform.cache import cached_index
    from evireform.embed import MiniLMEmbedder
    data = Path(args.data) / "hotpotqa"
    question = args.question or json.loads((data / "hotpotqa.json").read_text())[0]["question"]
    # the demo's index (make demo builds the same one), built here when missing
    _, ix, _ = cached_index(data / "hotpotqa_corpus.json", MiniLMEmbedder())
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "evireform", "serve", str(ix), "--port",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_ready(url, proc)
        with sync_playwright() as p:
            browser = launch_chromium(p)
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.goto(url + "/?" + urllib.parse.urlencode({"q": question}))
            page.wait_for_selector("#passages li")
            page.screenshot(path=args.out, full_page=True)
            n = page.locator("#passages li").count()
            browser.close()
    finally:
        proc.terminate()
        proc.wait(30)
    print(json.dumps({"question": question, "passages": n, "screenshot": args.out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
