#!/usr/bin/env python3
"""Soak test of `quantserve serve` (not in CI): N minutes of mixed load on 127.0.0.1, then
checks that the server did not crash, that its resident memory stayed flat after warm-up and
that every KV block is free at the end.

The load, from --clients threads, each request chosen at random: streaming and non-streaming
completions and chat, n > 1, clients that hang up mid-stream or while a non-streaming answer
is being generated, malformed JSON, wrong types, unknown models and prompts longer than
--max-model-len. Every request has a timeout and a bounded max_tokens; --max-requests bounds
the count. Standard library only, so any python3 runs it:

    scripts/soak.py --model models/stories260K --minutes 10

Exit 0 when every check passes, 1 otherwise; the summary goes to stdout.
"""

import argparse
import http.client
import json
import os
import random
import re
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL_NAME = "soak"
CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
WORDS = ["Once", "upon", "a", "time", "Lily", "Tom", "dog", "park", "sun", "happy", "ran",
         "the", "big", "tree", "and", "saw", "little", "bird", "sky", "played"]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--binary", default=os.path.join(ROOT, "build", "quantserve"))
    p.add_argument("--model", default=os.path.join(ROOT, "models", "stories260K"))
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--warmup-fraction", type=float, default=0.2,
                   help="share of the run before resident memory must be flat")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--max-requests", type=int, default=200000)
    p.add_argument("--max-model-len", type=int, default=512)
    p.add_argument("--max-tokens", type=int, default=64, help="upper bound per request")
    p.add_argument("--threads", type=int, default=1, help="server --threads")
    # Small on purpose: the KV pool's pages are touched on first use, so a large pool makes
    # RSS creep for as long as new blocks come into use, which reads like a leak. A pool the
    # warm-up fills settles at once (6544 tokens for stories260K; the clients' longest
    # requests together could still overflow it, so preemption may run too).
    p.add_argument("--kv-cache-memory", default="8MiB", help="server --kv-cache-memory")
    p.add_argument("--rss-tolerance-mib", type=float, default=16.0,
                   help="allowed rise of the post-warm-up RSS median, last window vs first")
    p.add_argument("--server-args", default="", help="more `serve` flags, one string")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", choices=["good", "disconnect", "bad"],
                   help="one group of requests only (to find which one moves RSS)")
    p.add_argument("--print-every", type=int, default=12, help="RSS samples (5 s) per line")
    p.add_argument("--log", default="soak-server.log", help="server log file")
    return p.parse_args()


class Server:
    def __init__(self, args):
        self.log_path = args.log
        self.log = open(self.log_path, "w")
        cmd = [args.binary, "serve", args.model, "--port", "0", "--threads", str(args.threads),
               "--served-model-name", MODEL_NAME, "--chat-template", CHAT_TEMPLATE,
               "--max-model-len", str(args.max_model_len),
               "--kv-cache-memory", args.kv_cache_memory, *shlex.split(args.server_args)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + 60
        self.port = None
        while time.monotonic() < deadline and self.port is None:
            m = re.search(r"on http://127\.0\.0\.1:(\d+)", open(self.log_path).read())
            if m:
                self.port = int(m.group(1))
            elif self.proc.poll() is not None:
                sys.exit(f"server exited at start:\n{open(self.log_path).read()}")
            time.sleep(0.05)
        if self.port is None:
            sys.exit("server did not start")

    def rss_mib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return "killed after 30 s"


def metrics(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    out = {}
    for line in text.splitlines():
        m = re.match(r'(vllm:[a-z_]+)\{model_name="[^"]*"\} (\S+)$', line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def raw_request(port, path, body, timeout=60):
    """Sends one POST on a fresh socket; returns the socket (the caller reads or closes)."""
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
                 f"Connection: close\r\n\r\n".encode() + payload)
    return sock


def read_all(sock):
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    sock.close()
    return data


def status_of(response):
    m = re.match(rb"HTTP/1\.[01] (\d{3})", response)
    return int(m.group(1)) if m else None


class Load:
    """One kind of request each call; returns (kind, ok, detail)."""

    def __init__(self, args, port, rng):
        self.args, self.port, self.rng = args, port, rng

    def text(self, n_words):
        return " ".join(self.rng.choice(WORDS) for _ in range(n_words))

    def sampling(self):
        return {"max_tokens": self.rng.randint(1, self.args.max_tokens),
                "temperature": self.rng.choice([0, 0.7, 1.0]),
                "seed": self.rng.randint(0, 1000), "ignore_eos": self.rng.random() < 0.5}

    def body(self, chat, stream):
        b = {"model": MODEL_NAME, **self.sampling()}
        if chat:
            b["messages"] = [{"role": "user", "content": self.text(self.rng.randint(1, 40))}]
        else:
            b["prompt"] = self.text(self.rng.randint(1, 40))
        if stream:
            b["stream"] = True
            b["stream_options"] = {"include_usage": True}
        if self.rng.random() < 0.2:
            b["n"] = self.rng.randint(2, 4)
        return b

    def complete(self, chat, stream):
        path = "/v1/chat/completions" if chat else "/v1/completions"
        resp = read_all(raw_request(self.port, path, self.body(chat, stream)))
        ok = status_of(resp) == 200 and (not stream or b"data: [DONE]" in resp)
        return ("stream" if stream else "plain") + ("-chat" if chat else "-completion"), ok, \
            status_of(resp)

    def disconnect_stream(self):
        b = self.body(self.rng.random() < 0.5, True)
        b.update(max_tokens=400, ignore_eos=True)
        path = "/v1/chat/completions" if "messages" in b else "/v1/completions"
        sock = raw_request(self.port, path, b)
        got = b""
        want = self.rng.randint(1, 4)
        while got.count(b"data: ") < want:
            chunk = sock.recv(4096)
            if not chunk:
                break
            got += chunk
        sock.close()
        return "disconnect-stream", status_of(got) == 200, status_of(got)

    def disconnect_plain(self):
        b = self.body(False, False)
        b.update(max_tokens=400, ignore_eos=True)
        sock = raw_request(self.port, "/v1/completions", b)
        time.sleep(self.rng.uniform(0.0, 0.3))
        sock.close()
        return "disconnect-plain", True, None

    def bad(self, kind, body, path="/v1/completions", want=400):
        resp = read_all(raw_request(self.port, path, body))
        st = status_of(resp)
        ok = st == want and b'"error"' in resp
        return kind, ok, st

    # Share of each group of requests in [0, 1): --only narrows the draw to one group.
    GROUPS = {"good": (0.0, 0.50), "disconnect": (0.50, 0.70), "bad": (0.70, 1.0)}

    def __call__(self):
        lo, hi = self.GROUPS.get(self.args.only, (0.0, 1.0))
        r = lo + self.rng.random() * (hi - lo)
        if r < 0.50:
            return self.complete(chat=self.rng.random() < 0.5, stream=self.rng.random() < 0.5)
        if r < 0.62:
            return self.disconnect_stream()
        if r < 0.70:
            return self.disconnect_plain()
        if r < 0.76:
            cut = self.rng.randint(1, 30)
            return self.bad("malformed-json", b'{"model": "soak", "prompt": "Once upon'[:cut])
        if r < 0.82:
            return self.bad("wrong-type", {"model": MODEL_NAME, "prompt": "a",
                                           "max_tokens": self.rng.choice(["ten", -5, [1]])})
        if r < 0.88:
            return self.bad("unknown-model", {"model": "nope", "prompt": "a"}, want=404)
        if r < 0.94:
            words = self.args.max_model_len * 2
            return self.bad("oversized-prompt", {"model": MODEL_NAME, "prompt": self.text(words),
                                                 "max_tokens": 4})
        return self.bad("oversized-chat", {"model": MODEL_NAME, "max_tokens": 4, "messages": [
            {"role": "user", "content": self.text(self.args.max_model_len * 2)}]},
            path="/v1/chat/completions")


def main():
    args = parse_args()
    server = Server(args)
    print(f"soak: {args.binary} serve {args.model} on 127.0.0.1:{server.port}, "
          f"{args.clients} clients, {args.minutes} min", flush=True)
    t0 = time.monotonic()
    t_end = t0 + args.minutes * 60
    lock = threading.Lock()
    counts, failures = {}, []
    issued = [0]

    def client(i):
        rng = random.Random(args.seed * 1000 + i)
        load = Load(args, server.port, rng)
        while time.monotonic() < t_end:
            with lock:
                if issued[0] >= args.max_requests:
                    return
                issued[0] += 1
            try:
                kind, ok, detail = load()
            except (OSError, http.client.HTTPException) as e:
                kind, ok, detail = "transport", False, repr(e)
            with lock:
                c = counts.setdefault(kind, [0, 0])
                c[0 if ok else 1] += 1
                if not ok and len(failures) < 20:
                    failures.append((kind, detail))

    threads = [threading.Thread(target=client, args=(i,), daemon=True)
               for i in range(args.clients)]
    for t in threads:
        t.start()
    samples = []  # (seconds since start, RSS MiB)
    while any(t.is_alive() for t in threads):
        if server.proc.poll() is not None:
            break
        samples.append((time.monotonic() - t0, server.rss_mib()))
        if len(samples) % args.print_every == 1:
            print(f"  t={samples[-1][0]:6.0f} s  rss={samples[-1][1]:7.1f} MiB  "
                  f"requests={issued[0]}", flush=True)
        time.sleep(5)
    for t in threads:
        t.join(timeout=90)

    problems = []
    crashed = server.proc.poll() is not None
    if crashed:
        problems.append(f"server exited during the soak (code {server.proc.returncode})")
    # Idle: every request ended, so every block must be free (prefix-cache blocks that no
    # request holds count as free, as in vLLM's kv_cache_usage_perc).
    m = {}
    if not crashed:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = metrics(server.port)
            if m.get("vllm:num_requests_running", 1) == 0 and \
                    m.get("vllm:num_requests_waiting", 1) == 0 and \
                    m.get("vllm:kv_cache_usage_perc", 1) == 0:
                break
            time.sleep(0.2)
        for key in ["vllm:num_requests_running", "vllm:num_requests_waiting",
                    "vllm:kv_cache_usage_perc"]:
            if m.get(key) != 0:
                problems.append(f"{key} = {m.get(key)} at the end (want 0)")
        samples.append((time.monotonic() - t0, server.rss_mib()))

    warm = args.warmup_fraction * args.minutes * 60
    after = [rss for t, rss in samples if t >= warm]
    window = max(1, len(after) // 5)
    if len(after) >= 2:
        first, last = statistics.median(after[:window]), statistics.median(after[-window:])
        rise = last - first
        if rise > args.rss_tolerance_mib:
            problems.append(f"RSS rose {rise:.1f} MiB after warm-up (tolerance "
                            f"{args.rss_tolerance_mib} MiB)")
    else:
        first = last = rise = float("nan")
        problems.append("too few RSS samples after warm-up")
    n_ok = sum(c[0] for c in counts.values())
    n_bad = sum(c[1] for c in counts.values())
    if n_bad:
        problems.append(f"{n_bad} requests got an unexpected answer: {failures[:5]}")
    code = server.stop() if not crashed else server.proc.returncode
    if code != 0:
        problems.append(f"server exit code {code} after SIGTERM (want 0)")

    elapsed = time.monotonic() - t0
    print(f"\nsoak summary ({elapsed / 60:.1f} min, {n_ok + n_bad} requests, "
          f"{(n_ok + n_bad) / elapsed:.1f} req/s)")
    for kind in sorted(counts):
        print(f"  {kind:18s} ok {counts[kind][0]:6d}  unexpected {counts[kind][1]:4d}")
    print(f"  RSS MiB: start {samples[0][1]:.1f}, after warm-up (t>={warm:.0f} s) first-window "
          f"median {first:.1f}, last-window median {last:.1f}, rise {rise:+.1f}, "
          f"max {max(r for _, r in samples):.1f}")
    print(f"  end /metrics: running {m.get('vllm:num_requests_running')}, waiting "
          f"{m.get('vllm:num_requests_waiting')}, kv_cache_usage_perc "
          f"{m.get('vllm:kv_cache_usage_perc')}, preemptions {m.get('vllm:num_preemptions_total')}, "
          f"prefix-cache hits {m.get('vllm:prefix_cache_hits_total')}")
    print(f"  server exit code after SIGTERM: {code}")
    print("PASS" if not problems else "FAIL:\n  " + "\n  ".join(problems))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
