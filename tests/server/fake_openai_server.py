"""A tiny OpenAI-compatible streaming server with known token timings, for testing
`quantserve bench serve` (tests/server/test_bench_client.py). Binds 127.0.0.1 only.

Each request streams `max_tokens` (chat: `max_completion_tokens`) token chunks: the first
after `ttft_s`, each next one `itl_s` later, one word per chunk. Usage is reported as vLLM
does (a final chunk with empty `choices`), as llama.cpp does (in the last token chunk), or
not at all, by `usage_mode`. Every request body is recorded in `server.requests`. GET
/v1/models lists one model (`model_id`, with `model_root` as vLLM's `root`).
"""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# stories260K's SentencePiece vocabulary has "▁a", so "a" then " a" ... tokenizes to one token
# per chunk: the client's fallback count (no usage) is then exactly the chunk count.
FIRST_WORD = "a"
NEXT_WORD = " a"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # keep pytest output clean
        pass

    def _send_chunk(self, data: bytes):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _event(self, obj):
        payload = obj if isinstance(obj, str) else json.dumps(obj)
        # Split each event in two writes so the client sees events cut mid-line.
        raw = ("data: " + payload + "\n\n").encode()
        half = len(raw) // 2
        self._send_chunk(raw[:half])
        self._send_chunk(raw[half:])

    def do_GET(self):
        srv = self.server
        if self.path != "/v1/models":
            self.send_error(404)
            return
        msg = json.dumps({"object": "list", "data": [
            {"id": srv.model_id, "object": "model", "root": srv.model_root}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(msg)))
        self.end_headers()
        self.wfile.write(msg)

    def do_POST(self):
        srv = self.server
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        with srv.lock:
            srv.requests.append({"path": self.path, "body": body,
                                 "x-request-id": self.headers.get("x-request-id")})
            srv.in_flight += 1
            srv.max_in_flight = max(srv.max_in_flight, srv.in_flight)
        try:
            self._respond(body)
        finally:
            with srv.lock:
                srv.in_flight -= 1

    def _respond(self, body):
        srv = self.server
        chat = self.path.endswith("/chat/completions")
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            self.send_response(404)
            msg = json.dumps({"error": {"message": "no such endpoint"}}).encode()
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(msg)))
            self.end_headers()
            self.wfile.write(msg)
            return
        n = int(body.get("max_completion_tokens" if chat else "max_tokens", 16))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        kind = "chat.completion.chunk" if chat else "text_completion"
        time.sleep(srv.ttft_s)
        for i in range(n):
            if i > 0:
                time.sleep(srv.itl_s)
            word = FIRST_WORD if i == 0 else NEXT_WORD
            choice = {"index": 0, "finish_reason": "length" if i == n - 1 else None}
            if chat:
                choice["delta"] = {"content": word}
            else:
                choice["text"] = word
            chunk = {"id": "x", "object": kind, "model": body.get("model"), "choices": [choice]}
            usage = {"prompt_tokens": srv.prompt_tokens, "completion_tokens": n,
                     "total_tokens": srv.prompt_tokens + n}
            if i == n - 1 and srv.usage_mode == "in_last_chunk":
                chunk["usage"] = usage
            self._event(chunk)
        if srv.usage_mode == "final_chunk":
            self._event({"id": "x", "object": kind, "choices": [], "usage": usage})
        self._event("[DONE]")
        self._send_chunk(b"")


class _Server(ThreadingHTTPServer):
    # socketserver's default backlog of 5 resets connections when hundreds arrive at once.
    request_queue_size = 1024
    daemon_threads = True


class FakeServer:
    """Starts on a free port; `url` is its base URL. Use as a context manager."""

    def __init__(self, ttft_s=0.05, itl_s=0.02, usage_mode="final_chunk", prompt_tokens=7,
                 model_id="served-model", model_root=""):
        self.httpd = _Server(("127.0.0.1", 0), _Handler)
        self.httpd.ttft_s = ttft_s
        self.httpd.itl_s = itl_s
        self.httpd.usage_mode = usage_mode
        self.httpd.prompt_tokens = prompt_tokens
        self.httpd.requests = []
        self.httpd.model_id = model_id
        self.httpd.model_root = model_root
        self.httpd.in_flight = 0
        self.httpd.max_in_flight = 0
        self.httpd.lock = threading.Lock()
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def requests(self):
        return self.httpd.requests

    @property
    def max_in_flight(self):
        return self.httpd.max_in_flight

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)


if __name__ == "__main__":
    import sys
    mode = sys.argv[1] if len(sys.argv) > 1 else "final_chunk"
    with FakeServer(usage_mode=mode) as s:
        print(s.url, flush=True)
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
