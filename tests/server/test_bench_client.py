"""`quantserve bench serve` against a fake OpenAI-compatible streaming server with known token
timings (fake_openai_server.py): the result JSON's counts are exact and its TTFT/ITL are the
fake's delays, whether the server reports usage as vLLM does, as llama.cpp does, or not at all.

Run from the repository root after building build/quantserve:
    python3 -m venv .venv-server && .venv-server/bin/pip install -r tests/server/requirements-bench-client.txt
    .venv-server/bin/python -m pytest tests/server/test_bench_client.py
"""

import glob
import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fake_openai_server import FakeServer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.environ.get("QS_BINARY", os.path.join(ROOT, "build", "quantserve"))
TOKENIZER = os.path.join(ROOT, "models", "stories260K")
SHAREGPT_FIXTURE = os.path.join(ROOT, "tests", "unit", "fixtures", "bench", "sharegpt_small.json")

TTFT_S = 0.05
ITL_S = 0.02
# Scheduling noise on a loaded machine only ever adds delay, so the bounds are one-sided-wide.
SLACK_S = 0.1


def run_bench(server, tmp_path, *extra, expect_rc=0, model_args=None):
    if model_args is None:
        model_args = ["--model", "fake-model", "--tokenizer", TOKENIZER]
    cmd = [BINARY, "bench", "serve", "--base-url", server.url, *model_args, "--disable-tqdm",
           "--save-result", "--result-dir", str(tmp_path), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == expect_rc, proc.stdout + proc.stderr
    return proc


def load_result(tmp_path):
    files = glob.glob(os.path.join(str(tmp_path), "*.json"))
    assert len(files) == 1, files
    with open(files[0]) as f:
        return os.path.basename(files[0]), json.load(f)


@pytest.fixture(autouse=True)
def _need_binary():
    if not os.path.exists(BINARY):
        pytest.skip("build/quantserve is not built (cmake --build build --target quantserve)")


def check_timings(result, n_tokens):
    for ttft in result["ttfts"]:
        assert TTFT_S <= ttft < TTFT_S + SLACK_S
    for itl in result["itls"]:
        assert len(itl) == n_tokens - 1  # one chunk per token: one gap per chunk after the first
        # A gap after a late chunk can be short, but the gaps of a request add up to the
        # fake's pacing, less at most the lateness of the first chunk.
        for gap in itl:
            assert 0 < gap < ITL_S + SLACK_S
        assert (n_tokens - 1) * ITL_S - 0.02 <= sum(itl) < (n_tokens - 1) * ITL_S + SLACK_S
    assert ITL_S * 1000 * 0.5 <= result["median_itl_ms"] < (ITL_S + SLACK_S) * 1000
    assert ITL_S * 1000 * 0.8 <= result["mean_tpot_ms"] < (ITL_S + SLACK_S) * 1000
    assert TTFT_S * 1000 <= result["median_ttft_ms"] < (TTFT_S + SLACK_S) * 1000


def test_completions_with_usage_chunk(tmp_path):
    with FakeServer(ttft_s=TTFT_S, itl_s=ITL_S, usage_mode="final_chunk", prompt_tokens=7) as s:
        proc = run_bench(s, tmp_path, "--dataset-name", "random", "--random-input-len", "16",
                         "--random-output-len", "6", "--num-prompts", "5",
                         "--result-filename", "out.json",
                         "--percentile-metrics", "ttft,tpot,itl,e2el",
                         "--metric-percentiles", "50,99")
        requests = list(s.requests)
    name, r = load_result(tmp_path)
    assert name == "out.json"
    for key in ["date", "backend", "model_id", "tokenizer_id", "num_prompts", "request_rate",
                "burstiness", "max_concurrency", "duration", "completed", "total_input_tokens",
                "total_output_tokens", "request_throughput", "request_goodput",
                "output_throughput", "total_token_throughput", "input_lens", "output_lens",
                "ttfts", "itls", "generated_texts", "errors"] + [
                    f"{stat}_{m}_ms" for m in ["ttft", "tpot", "itl", "e2el"]
                    for stat in ["mean", "median", "std", "p50", "p99"]]:
        assert key in r, key
    assert r["backend"] == "openai"
    assert r["model_id"] == "fake-model"
    assert r["num_prompts"] == 5
    assert r["request_rate"] == "inf"
    assert r["max_concurrency"] is None
    assert r["request_goodput"] is None
    assert r["completed"] == 5 and r["failed"] == 0
    assert r["output_lens"] == [6] * 5
    assert r["total_output_tokens"] == 30
    assert r["input_lens"] == [7] * 5  # usage.prompt_tokens replaces the client's count
    assert r["total_input_tokens"] == 35
    assert r["errors"] == [""] * 5
    assert r["generated_texts"] == ["a" + " a" * 5] * 5
    check_timings(r, 6)
    e2el = TTFT_S + 5 * ITL_S
    assert e2el <= r["median_e2el_ms"] / 1000 < e2el + SLACK_S
    assert r["output_throughput"] == pytest.approx(30 / r["duration"])
    assert r["request_throughput"] == pytest.approx(5 / r["duration"])

    # What went over the wire: vLLM's payload.
    assert len(requests) == 5
    for req in requests:
        body = req["body"]
        assert req["path"] == "/v1/completions"
        assert body["model"] == "fake-model"
        assert body["max_tokens"] == 6
        assert body["stream"] is True
        assert body["stream_options"] == {"include_usage": True}
        assert body["ignore_eos"] is True  # forced for the random dataset
        assert isinstance(body["prompt"], str) and body["prompt"]
    assert sorted(q["x-request-id"] for q in requests) == [
        f"benchmark-serving{i}" for i in range(5)]

    # The printed block.
    out = proc.stdout
    assert "============ Serving Benchmark Result ============" in out
    assert "Successful requests:                     5         \n" in out
    assert "Total generated tokens:                  30        \n" in out
    assert "----------------End-to-end Latency----------------" in out
    assert "P50 ITL (ms):" in out and "P99 TTFT (ms):" in out


def test_completions_without_usage_counts_text_with_tokenizer(tmp_path):
    with FakeServer(ttft_s=TTFT_S, itl_s=ITL_S, usage_mode="none") as s:
        run_bench(s, tmp_path, "--dataset-name", "random", "--random-input-len", "16",
                  "--random-output-len", "4", "--num-prompts", "3")
    _, r = load_result(tmp_path)
    assert r["completed"] == 3
    # "a a a a" is four stories260K tokens: the fallback count is exact here.
    assert r["output_lens"] == [4] * 3
    assert r["total_output_tokens"] == 12
    # Without usage the client's own prompt counts stand (16 minus BOS, give or take re-encoding).
    assert all(13 <= n <= 17 for n in r["input_lens"])
    assert r["total_input_tokens"] == sum(r["input_lens"])
    check_timings(r, 4)


def test_chat_endpoint_with_usage_in_last_chunk(tmp_path):
    # llama.cpp's style: usage rides on the last token chunk, not on a chunk of its own.
    with FakeServer(ttft_s=TTFT_S, itl_s=ITL_S, usage_mode="in_last_chunk", prompt_tokens=9) as s:
        run_bench(s, tmp_path, "--endpoint", "/v1/chat/completions", "--dataset-name", "random",
                  "--random-input-len", "12", "--random-output-len", "5", "--num-prompts", "4")
        requests = list(s.requests)
    name, r = load_result(tmp_path)
    assert name.startswith("openai-chat-infqps-fake-model-") and name.endswith(".json")
    assert r["backend"] == "openai-chat"
    assert r["completed"] == 4
    assert r["output_lens"] == [5] * 4
    assert r["input_lens"] == [9] * 4
    check_timings(r, 5)
    for req in requests:
        body = req["body"]
        assert req["path"] == "/v1/chat/completions"
        assert body["max_completion_tokens"] == 5
        content = body["messages"][0]["content"]
        assert body["messages"][0]["role"] == "user"
        assert content[0]["type"] == "text" and content[0]["text"]


def test_sharegpt_at_a_rate_with_max_concurrency(tmp_path):
    with FakeServer(ttft_s=TTFT_S, itl_s=ITL_S) as s:
        proc = run_bench(s, tmp_path, "--dataset-name", "sharegpt",
                         "--dataset-path", SHAREGPT_FIXTURE, "--sharegpt-output-len", "3",
                         "--num-prompts", "6", "--request-rate", "20", "--burstiness", "2",
                         "--max-concurrency", "2", "--seed", "3")
        requests = list(s.requests)
        max_in_flight = s.max_in_flight
    name, r = load_result(tmp_path)
    assert name.startswith("openai-20.0qps-concurrency2-fake-model-")
    assert r["request_rate"] == 20.0
    assert r["burstiness"] == 2.0
    assert r["max_concurrency"] == 2
    assert r["completed"] == 6
    assert r["output_lens"] == [3] * 6
    assert max_in_flight <= 2
    assert r["max_concurrent_requests"] <= 2
    assert all(q["body"]["max_tokens"] == 3 for q in requests)
    assert all("ignore_eos" not in q["body"] for q in requests)  # not asked, not random
    # The last request cannot leave before n/rate = 0.3 s.
    assert r["duration"] >= 0.3
    assert "Maximum request concurrency:             2         \n" in proc.stdout
    assert "Request rate configured (RPS):           20.00     \n" in proc.stdout


def test_goodput(tmp_path):
    with FakeServer(ttft_s=TTFT_S, itl_s=ITL_S) as s:
        proc = run_bench(s, tmp_path, "--dataset-name", "random", "--random-input-len", "8",
                         "--random-output-len", "3", "--num-prompts", "3",
                         "--goodput", "ttft:5000", "e2el:10000")
    _, r = load_result(tmp_path)
    assert r["request_goodput"] == pytest.approx(3 / r["duration"])
    assert "Request goodput (req/s):" in proc.stdout
    # A TPOT objective of 1 ms cannot be met at 20 ms per token.
    tmp2 = tmp_path / "strict"
    tmp2.mkdir()
    with FakeServer(ttft_s=TTFT_S, itl_s=ITL_S) as s:
        run_bench(s, tmp2, "--dataset-name", "random", "--random-input-len", "8",
                  "--random-output-len", "3", "--num-prompts", "3", "--goodput", "tpot:1")
    _, r2 = load_result(tmp2)
    assert r2["request_goodput"] == 0


def test_every_request_failing_is_an_error(tmp_path):
    with FakeServer() as s:
        proc = run_bench(s, tmp_path, "--endpoint", "/v1/bogus", "--dataset-name", "random",
                         "--random-input-len", "8", "--random-output-len", "2",
                         "--num-prompts", "2", expect_rc=1)
    _, r = load_result(tmp_path)
    assert r["completed"] == 0 and r["failed"] == 2
    assert all(e.startswith("HTTP 404") for e in r["errors"])
    assert "Error 0: HTTP 404" in proc.stdout


def test_model_and_tokenizer_from_the_servers_model_list(tmp_path):
    # No --model: vLLM asks GET /v1/models; the listed root is a directory, so it is also the
    # tokenizer.
    with FakeServer(model_id="served-model", model_root=TOKENIZER) as s:
        proc = run_bench(s, tmp_path, "--dataset-name", "random", "--random-input-len", "8",
                         "--random-output-len", "2", "--num-prompts", "2", model_args=[])
        requests = list(s.requests)
    _, r = load_result(tmp_path)
    assert r["model_id"] == "served-model"
    assert r["tokenizer_id"] == TOKENIZER
    assert r["completed"] == 2
    assert all(q["body"]["model"] == "served-model" for q in requests)
    assert "First model name: served-model" in proc.stdout


def test_base_url_path_prefix_and_missing_tokenizer(tmp_path):
    # A base URL with a path prefix is kept in front of the endpoint: here it yields 404s.
    with FakeServer() as s:
        proc = run_bench(s, tmp_path, "--dataset-name", "random", "--random-input-len", "8",
                         "--random-output-len", "2", "--num-prompts", "1",
                         model_args=["--model", "fake-model", "--tokenizer", TOKENIZER,
                                     "--base-url", s.url + "/api/"],
                         expect_rc=1)
        assert [q["path"] for q in s.requests] == ["/api/v1/completions"]
    # A model name that is no directory, and no --tokenizer: a usage error naming the fix.
    with FakeServer() as s:
        proc = subprocess.run([BINARY, "bench", "serve", "--base-url", s.url, "--model", "x/y",
                               "--num-prompts", "1"], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 1
        assert "--tokenizer DIR is needed" in proc.stderr
        assert s.requests == []
