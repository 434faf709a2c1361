"""What the long-lived engine behind the server gives clients: logprobs, prefix-cache hits,
many concurrent clients batched into one forward with unchanged greedy results, KV blocks
freed when a client goes away, and requests that overflow the KV cache together both served
(one waits or is preempted and recomputed)."""

import concurrent.futures
import math
import time

import openai
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from conftest import MODEL_NAME, Server
from test_lifecycle import raw_stream

LABELS = (("model_name", MODEL_NAME),)


def test_completion_logprobs_are_a_distribution_around_the_greedy_token(client):
    r = client.completions.create(model=MODEL_NAME, prompt="Once upon a time", max_tokens=8,
                                  temperature=0, logprobs=5)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == r.usage.completion_tokens == 8
    for token, value, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert value <= 0
        # Greedy: the sampled token is the most likely one, and its logprob is the top one.
        best = max(top.values())
        assert value == pytest.approx(best, abs=1e-6)
        assert top[token] == pytest.approx(value, abs=1e-6)
        # Five of a softmax's probabilities sum to at most one.
        assert sum(math.exp(v) for v in top.values()) <= 1 + 1e-5
        assert len(top) <= 5


def test_chat_logprobs(client):
    r = client.chat.completions.create(model=MODEL_NAME, max_tokens=4, temperature=0,
                                       logprobs=True, top_logprobs=3,
                                       messages=[{"role": "user", "content": "a story"}])
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for entry in content:
        assert len(entry.top_logprobs) == 3
        assert entry.logprob == pytest.approx(entry.top_logprobs[0].logprob, abs=1e-6)
        assert bytes(entry.bytes).decode("utf-8", "replace") == entry.token


def test_repeated_prefix_hits_the_prefix_cache_with_the_same_output(client, scrape):
    prompt = "Once upon a time, there was a little girl named Lily. " * 6
    key_q = ("vllm:prefix_cache_queries_total", LABELS)
    key_h = ("vllm:prefix_cache_hits_total", LABELS)
    first = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=8,
                                      temperature=0)
    hits_before = scrape()[key_h]
    second = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=8,
                                       temperature=0)
    after = scrape()
    assert second.choices[0].text == first.choices[0].text
    # Every full block of the prompt but the one holding its last token is served from cache.
    n_prompt = second.usage.prompt_tokens
    assert after[key_h] - hits_before >= (n_prompt - 1) // 16 * 16 > 0
    assert after[key_q] >= after[key_h]


def test_prefix_hit_skips_the_prefill_of_the_shared_prefix(tmp_path):
    # vLLM's --enable-prompt-tokens-details reports, per response, the prompt tokens the
    # prefix cache served: the engine's own account of the prefill it did not redo, which is
    # where a hit's lower TTFT comes from (measured in docs/benchmarks.md).
    s = Server(tmp_path, extra_args=["--enable-prompt-tokens-details"])
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=60)
        prefix = "Tom had a red ball and he liked to play with it in the park. " * 16
        hits = ("vllm:prefix_cache_hits_total", LABELS)

        def hit_count():
            r = requests.get(s.url + "/metrics", timeout=10)
            return {(x.name, tuple(sorted(x.labels.items()))): x.value
                    for f in text_string_to_metric_families(r.text) for x in f.samples}[hits]

        first = c.completions.create(model=MODEL_NAME, prompt=prefix + "One day", max_tokens=8,
                                     temperature=0)
        before = hit_count()
        second = c.completions.create(model=MODEL_NAME, prompt=prefix + "One day", max_tokens=8,
                                      temperature=0)
        n_prompt = second.usage.prompt_tokens
        assert n_prompt == first.usage.prompt_tokens > 256
        assert first.usage.prompt_tokens_details.cached_tokens == 0
        cached = second.usage.prompt_tokens_details.cached_tokens
        # Every full block but the one holding the last prompt token (recomputed for its logits).
        assert cached == (n_prompt - 1) // 16 * 16
        assert hit_count() - before == cached
        assert n_prompt - cached <= 16  # prefill work: all of the prompt, then at most a block
        assert second.choices[0].text == first.choices[0].text
        # A third request sharing only the prefix hits it too; streamed usage says so as well.
        stream = c.completions.create(model=MODEL_NAME, prompt=prefix + "The sun", max_tokens=4,
                                      temperature=0, stream=True,
                                      stream_options={"include_usage": True})
        usage = [chunk.usage for chunk in stream if chunk.usage][-1]
        assert cached - 16 <= usage.prompt_tokens_details.cached_tokens <= cached
    finally:
        assert s.stop() == 0, s.log_text()


def test_prompt_tokens_details_is_null_by_default(server):
    r = requests.post(server.url + "/v1/completions", timeout=30,
                      json={"model": MODEL_NAME, "prompt": "Once", "max_tokens": 2})
    assert r.json()["usage"]["prompt_tokens_details"] is None


def test_sixteen_concurrent_clients_equal_generate(client, generate_cli):
    prompts = [f"Once upon a time {w}" for w in
               ["Tom", "Lily", "a dog", "the sun", "a cat", "Ben", "Sue", "the park",
                "a tree", "Mom", "a boat", "the sky", "a frog", "Max", "a bird", "the moon"]]

    def one(p):
        return client.completions.create(model=MODEL_NAME, prompt=p, max_tokens=24,
                                         temperature=0).choices[0].text

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        served = list(pool.map(one, prompts))
    for p, text in zip(prompts, served):
        assert text == generate_cli(p, 24), p


def test_sixty_four_concurrent_streams_complete(client):
    def one(i):
        stream = client.completions.create(model=MODEL_NAME, prompt=f"Story {i}:",
                                           max_tokens=16, stream=True,
                                           extra_body={"ignore_eos": True})
        return sum(len(chunk.choices) for chunk in stream if chunk.choices)

    with concurrent.futures.ThreadPoolExecutor(64) as pool:
        counts = list(pool.map(one, range(64)))
    assert all(c >= 16 for c in counts), counts


def test_disconnect_frees_the_kv_blocks(server, scrape):
    key = ("vllm:kv_cache_usage_perc", LABELS)
    body = {"model": MODEL_NAME, "prompt": "Once upon a time", "max_tokens": 480,
            "ignore_eos": True, "stream": True}
    sock, _ = raw_stream(server.port, body)
    assert scrape()[key] > 0
    sock.close()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and scrape()[key] > 0:
        time.sleep(0.05)
    assert scrape()[key] == 0
    assert scrape()[("vllm:num_requests_running", LABELS)] == 0


def test_requests_that_overflow_the_kv_cache_together_both_finish(tmp_path):
    # 32 KV blocks of 16 tokens: 512 tokens in all, exactly one full-length sequence.
    per_token = 2 * 4 * 5 * 4 * 8  # K and V, f32, 5 layers x 4 KV heads x head_dim 8
    s = Server(tmp_path, extra_args=["--kv-cache-memory", str(per_token * 512),
                                     "--max-model-len", "512"])
    try:
        url = s.url + "/v1/completions"
        ok = requests.post(url, json={"model": MODEL_NAME, "prompt": "Once", "max_tokens": 8},
                           timeout=30)
        assert ok.status_code == 200
        # Two long requests together need more than the cache: one waits or is preempted and
        # both still finish.
        body = {"model": MODEL_NAME, "prompt": "Once", "max_tokens": 400, "ignore_eos": True}
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            rs = list(pool.map(lambda _: requests.post(url, json=body, timeout=60), range(2)))
        assert [r.status_code for r in rs] == [200, 200]
        assert all(r.json()["usage"]["completion_tokens"] == 400 for r in rs)
    finally:
        assert s.stop() == 0, s.log_text()
