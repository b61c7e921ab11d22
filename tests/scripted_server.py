"""An OpenAI-compatible chat-completions endpoint on 127.0.0.1 with scripted replies."""
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Script:
    def __init__(self, replies=(), default=None):
        self.replies = list(replies)
        self.default = default
        self.requests = []
        self.lock = threading.Lock()

    def next(self, body):
        with self.lock:
            self.requests.append(body)
            if self.replies:
                return self.replies.pop(0)
            return self.default or {"status": 500, "content": "empty script"}


def completion(content, model="scripted"):
    return {"id": "x", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}}


def serve(script: Script):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            n = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(n) or b"{}")
            if self.path.endswith("/embeddings"):
                return self._embeddings(body)
            r = script.next(body)
            if r.get("delay"):
                time.sleep(r["delay"])
            status = r.get("status", 200)
            payload = (json.dumps(completion(r["content"])) if status == 200
                       else json.dumps({"error": {"message": r.get("content", "error")}}))
            try:
                self.send_response(status)
                for k, v in r.get("headers", {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if r.get("drip"):  # the body one byte at a time, r["drip"] seconds apart
                    for ch in payload.encode():
                        self.wfile.write(bytes([ch]))
                        self.wfile.flush()
                        time.sleep(r["drip"])
                else:
                    self.wfile.write(payload.encode())
            except (BrokenPipeError, ConnectionResetError):
                pass

        def _embeddings(self, body):
            """Deterministic vectors (script.embed(text)); script.fail_next > 0 answers 500."""
            if getattr(script, "embed_delay", 0):  # a hung embeddings endpoint
                time.sleep(script.embed_delay)
            with script.lock:
                script.requests.append(body)
                fail = getattr(script, "fail_next", 0)
                if fail:
                    script.fail_next = fail - 1
            if fail:
                payload, status = json.dumps({"error": {"message": "busy"}}), 500
            else:
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                payload, status = json.dumps({"object": "list", "model": body.get("model"),
                                              "data": [{"object": "embedding", "index": i,
                                                        "embedding": script.embed(t)}
                                                       for i, t in enumerate(texts)],
                                              "usage": {"prompt_tokens": 1, "total_tokens": 1}}), 200
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload.encode())
            except (BrokenPipeError, ConnectionResetError):
                pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}/v1"
