"""What a black-hole LLM endpoint costs: EviReform with the LLM roles against a scripted
server that never answers within the deadline (tests/scripted_server.py), N questions.

    python scripts/llm_dead_endpoint.py [--questions 4] [--deadline 3]

Prints the wall time and the threads and file descriptors gained (the scripted server runs
in this process: its own handler threads and sockets count too).
"""
import argparse
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--questions", type=int, default=4)
    ap.add_argument("--deadline", type=float, default=3.0)
    a = ap.parse_args()
    from scripted_server import Script, serve
    from test_fuzz import small_index

    from evireform import EviReform
    from evireform.embed import HashingEmbedder
    from evireform.llm import LLMClient, LLMConfig, LLMController, LLMReformulator, LLMSelector
    script = Script(default={"content": "{}", "delay": 10 * a.deadline})
    _, url = serve(script)
    c = LLMClient(LLMConfig(base_url=url, model="m", max_retries=0, timeout=60,
                            deadline=a.deadline))
    r = EviReform(small_index(), embedder=HashingEmbedder(16), selector=LLMSelector(c),
                  reformulator=LLMReformulator(c), controller=LLMController(c))
    th0, fd0 = threading.active_count(), len(os.listdir("/proc/self/fd"))
    t = time.perf_counter()
    for i in range(a.questions):
        r.retrieve(f"fact about e{i}")
    print(f"{a.questions} questions, black-hole endpoint, deadline {a.deadline:g} s: "
          f"{time.perf_counter() - t:.1f} s; requests sent {len(script.requests)}; threads "
          f"+{threading.active_count() - th0}, fds +{len(os.listdir('/proc/self/fd')) - fd0}")
    sys.stdout.flush()  # os._exit skips the interpreter's flush (stdout may be a pipe)
    os._exit(0)  # the scripted server's handlers are still sleeping


if __name__ == "__main__":
    main()
