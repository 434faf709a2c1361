"""`serve --data-parallel-size 2`: two replicas of stories260K behind one endpoint, driven by
the openai client; their metrics under a replica label; prefix routing; a replica killed
mid-stream (the stream fails cleanly, the other replica keeps serving); the replicas gone
after the front is stopped, or killed; one replica per rank under mpirun."""

import os
import re
import shutil
import signal
import subprocess
import time

import openai
import pytest
import requests

from conftest import MODEL_NAME, Server

# Several blocks of 16 tokens: the prefix routing's unit is the engine's KV block.
LONG_PROMPT = ("Once upon a time, there was a little girl named Lily. She loved to play with "
               "her toys and her friends in the big green park near her house. One day, Lily saw "
               "a big red ball under a tree. She ran to the ball and picked it up. Her mom said")


def samples(url):
    from prometheus_client.parser import text_string_to_metric_families
    r = requests.get(url + "/metrics", timeout=10)
    assert r.status_code == 200
    out = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def per_replica(metrics, name):
    """{replica: value} of one sample name, over its other labels."""
    out = {}
    for (n, labels), v in metrics.items():
        if n == name:
            replica = dict(labels)["replica"]
            out[replica] = out.get(replica, 0) + v
    return out


def replica_pids(server):
    return {int(i): int(pid) for i, pid in
            re.findall(r"replica (\d+): pid (\d+)", server.log_text())}


def gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie still answers kill(0); it has ended all the same.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def wait_until(predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


@pytest.fixture(scope="module")
def dp_server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("dp"), ["--data-parallel-size", "2"])
    yield s
    assert s.stop() == 0, s.log_text()


@pytest.fixture(scope="module")
def dp_client(dp_server):
    return openai.OpenAI(base_url=dp_server.url + "/v1", api_key="unused", max_retries=0,
                         timeout=60)


def test_completion_matches_a_single_server(dp_client, generate_cli):
    out = dp_client.completions.create(model=MODEL_NAME, prompt="Once upon a time",
                                       max_tokens=24, temperature=0)
    assert out.choices[0].finish_reason == "length"
    assert out.usage.completion_tokens == 24
    assert out.choices[0].text == generate_cli("Once upon a time", 24)


def test_streaming_chat(dp_client):
    stream = dp_client.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "Once upon a time"}],
        max_tokens=12, temperature=0, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].usage.completion_tokens == 12


def test_models_health_and_errors_pass_through(dp_server, dp_client):
    assert [m.id for m in dp_client.models.list().data] == [MODEL_NAME]
    assert requests.get(dp_server.url + "/health", timeout=10).status_code == 200
    with pytest.raises(openai.NotFoundError):
        dp_client.completions.create(model="nope", prompt="a", max_tokens=2)
    with pytest.raises(openai.BadRequestError):
        dp_client.completions.create(model=MODEL_NAME, prompt="a", max_tokens=100000)
    r = requests.get(dp_server.url + "/nowhere", timeout=10)
    assert r.status_code == 404 and r.json()["error"]["code"] == 404


def test_metrics_carry_both_replicas(dp_server, dp_client):
    # Concurrent requests spread over both replicas (the least loaded takes each).
    import concurrent.futures
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: dp_client.completions.create(
            model=MODEL_NAME, prompt=f"Tale {i}:", max_tokens=200, n=4,
            extra_body={"ignore_eos": True}), range(8)))
    m = samples(dp_server.url)
    prompt_tokens = per_replica(m, "vllm:prompt_tokens_total")
    assert set(prompt_tokens) == {"0", "1"}
    assert all(v > 0 for v in prompt_tokens.values()), prompt_tokens
    routed = per_replica(m, "quantserve:dp_requests_routed_total")
    assert set(routed) == {"0", "1"} and sum(routed.values()) >= 8
    assert per_replica(m, "quantserve:dp_replica_healthy") == {"0": 1.0, "1": 1.0}
    # Every series of a replica's histogram carries its label too.
    assert ("vllm:time_to_first_token_seconds_count",
            (("model_name", MODEL_NAME), ("replica", "1"))) in m


def test_prefix_routing_keeps_a_prefix_on_one_replica(dp_server, dp_client):
    def delta(name, before, after):
        b, a = per_replica(before, name), per_replica(after, name)
        return {r: a[r] - b.get(r, 0) for r in a}

    before = samples(dp_server.url)
    for i in range(4):
        dp_client.completions.create(model=MODEL_NAME, prompt=LONG_PROMPT + f" {i}",
                                     max_tokens=2)
    after = samples(dp_server.url)
    # The first request went by load; the three after it followed their prefix.
    routed = delta("quantserve:dp_prefix_routed_requests_total", before, after)
    assert sorted(routed.values()) == [0, 3], routed
    hits = delta("vllm:prefix_cache_hits_total", before, after)
    tokenized = requests.post(dp_server.url + "/tokenize", timeout=10,
                              json={"model": MODEL_NAME, "prompt": LONG_PROMPT}).json()
    n_tokens = len(tokenized["tokens"])
    assert n_tokens >= 64
    # Each later request found the shared prefix's full blocks (all but the one it ends in),
    # all on the replica that prefix routing chose.
    assert max(hits.values()) >= 3 * (n_tokens // 16 - 1) * 16, (hits, n_tokens)
    assert min(hits.values()) == 0, hits


def test_round_robin_alternates(tmp_path):
    s = Server(tmp_path, ["--data-parallel-size", "2", "--data-parallel-routing", "round_robin"])
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=60)
        for i in range(4):
            c.completions.create(model=MODEL_NAME, prompt=LONG_PROMPT, max_tokens=2)
        m = samples(s.url)
        assert per_replica(m, "quantserve:dp_requests_routed_total") == {"0": 2.0, "1": 2.0}
        assert sum(per_replica(m, "quantserve:dp_prefix_routed_requests_total").values()) == 0
        assert "round_robin routing" in s.log_text()
    finally:
        assert s.stop() == 0


def test_bad_flags_are_refused(tmp_path):
    from conftest import BINARY, MODEL_DIR
    for args, message in ((["--data-parallel-size", "0"], "--data-parallel-size must be in"),
                          (["--data-parallel-size", "2", "--data-parallel-routing", "random"],
                           "prefix or round_robin")):
        r = subprocess.run([str(BINARY), "serve", str(MODEL_DIR), "--port", "0"] + args,
                           capture_output=True, timeout=60)
        assert r.returncode != 0
        assert message in r.stderr.decode()


def test_killed_replica_leaves_routing_and_its_stream_fails_cleanly(tmp_path):
    s = Server(tmp_path, ["--data-parallel-size", "2"])
    try:
        pids = replica_pids(s)
        assert sorted(pids) == [0, 1]
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=60)
        # 64 long choices keep a replica busy for seconds: the kill lands mid-stream.
        stream = c.completions.create(model=MODEL_NAME, prompt="Once upon a time",
                                      max_tokens=480, n=64, extra_body={"ignore_eos": True},
                                      stream=True)
        it = iter(stream)
        next(it)
        in_flight = per_replica(samples(s.url), "quantserve:dp_requests_in_flight")
        victim = [int(r) for r, v in in_flight.items() if v == 1]
        assert len(victim) == 1, in_flight
        victim = victim[0]
        os.kill(pids[victim], signal.SIGKILL)
        with pytest.raises(openai.APIError) as failure:
            for _ in it:
                pass
        assert "failed" in str(failure.value)
        assert requests.get(s.url + "/health", timeout=10).status_code == 200
        # Every request from now on is served by the other replica.
        for _ in range(3):
            out = c.completions.create(model=MODEL_NAME, prompt="Once upon a time", max_tokens=4)
            assert out.choices[0].finish_reason == "length"
        assert wait_until(lambda: per_replica(samples(s.url), "quantserve:dp_replica_healthy")
                          == {str(victim): 0.0, str(1 - victim): 1.0}, 10)
        assert "left routing" in s.log_text()
        # The dead replica's metrics are gone; the living one's remain.
        assert set(per_replica(samples(s.url), "vllm:prompt_tokens_total")) == {str(1 - victim)}
        # The last one killed too: no replica left, so 503 (and /health says so).
        os.kill(pids[1 - victim], signal.SIGKILL)
        assert wait_until(lambda: requests.get(s.url + "/health", timeout=10).status_code == 503,
                          10)
        with pytest.raises(openai.InternalServerError) as none_left:
            c.completions.create(model=MODEL_NAME, prompt="Once upon a time", max_tokens=4)
        assert none_left.value.status_code == 503
    finally:
        assert s.stop() == 0, s.log_text()


def test_sigterm_stops_every_replica(tmp_path):
    s = Server(tmp_path, ["--data-parallel-size", "2"])
    pids = replica_pids(s)
    assert len(pids) == 2 and not any(gone(p) for p in pids.values())
    assert s.stop() == 0, s.log_text()
    assert all(gone(p) for p in pids.values())
    assert "server stopped" in s.log_text()


def test_replicas_die_with_a_killed_front(tmp_path):
    s = Server(tmp_path, ["--data-parallel-size", "2"])
    pids = replica_pids(s)
    s.proc.kill()
    s.proc.wait()
    s.log.close()
    # PR_SET_PDEATHSIG: each replica gets SIGTERM when the front goes.
    assert wait_until(lambda: all(gone(p) for p in pids.values()), 20), pids


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs Open MPI's mpirun")
def test_one_replica_per_mpirun_rank(tmp_path):
    from conftest import BINARY, CHAT_TEMPLATE, MODEL_DIR, MPI_ENV, START_TIMEOUT_S, mpi_rank_pid
    log_path = tmp_path / "mpirun.log"
    env = {**os.environ, **MPI_ENV}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            ["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none", str(BINARY), "serve",
             str(MODEL_DIR), "--port", "0", "--threads", "1", "--served-model-name", MODEL_NAME,
             "--chat-template", CHAT_TEMPLATE, "--data-parallel-size", "2"],
            stdout=subprocess.DEVNULL, stderr=log, env=env)
    try:
        port = None
        deadline = time.monotonic() + 2 * START_TIMEOUT_S
        while port is None and time.monotonic() < deadline:
            text = log_path.read_text()
            if "built without MPI" in text:
                pytest.skip("this quantserve was built without MPI")
            m = re.search(r"on http://127\.0\.0\.1:(\d+)", text)
            port = int(m.group(1)) if m else None
            assert proc.poll() is None or port, f"mpirun exited early:\n{text}"
            time.sleep(0.1)
        assert port, log_path.read_text()
        url = f"http://127.0.0.1:{port}"
        assert "one per rank" in log_path.read_text()
        c = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
        # Two at once: the least loaded takes each, so both ranks' replicas serve one.
        import concurrent.futures
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            outs = list(pool.map(lambda i: c.completions.create(
                model=MODEL_NAME, prompt="Once upon a time", max_tokens=300, n=8,
                extra_body={"ignore_eos": True}), range(2)))
        assert all(len(o.choices) == 8 for o in outs)
        routed = per_replica(samples(url), "quantserve:dp_requests_routed_total")
        assert routed == {"0": 1.0, "1": 1.0}, routed
        # SIGTERM to rank 0, the front: it drains and tells the other rank to stop, and every
        # process exits 0. (mpirun would follow a SIGTERM it forwards with SIGKILL after 1 s.)
        os.kill(mpi_rank_pid(proc.pid, 0), signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log_path.read_text()
        assert log_path.read_text().count("server stopped") == 3  # the front, both replicas
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
