"""/v1/models, /tokenize, /detokenize, /health, /version, /metrics."""

import requests

from conftest import MODEL_DIR, MODEL_NAME


def test_models(client, server):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL_NAME]
    raw = requests.get(server.url + "/v1/models", timeout=10).json()
    assert raw["object"] == "list"
    card = raw["data"][0]
    assert card["object"] == "model" and card["owned_by"] == "vllm"
    assert card["root"] == str(MODEL_DIR)
    assert card["max_model_len"] == 512


def test_tokenize_round_trip(server):
    text = "Once upon a time, there was a little dog."
    t = requests.post(server.url + "/tokenize",
                      json={"model": MODEL_NAME, "prompt": text, "return_token_strs": True},
                      timeout=10).json()
    assert t["count"] == len(t["tokens"]) and t["max_model_len"] == 512
    assert t["tokens"][0] == 1  # BOS: add_special_tokens defaults to true
    assert len(t["token_strs"]) == t["count"]
    d = requests.post(server.url + "/detokenize", json={"tokens": t["tokens"]}, timeout=10).json()
    assert d["prompt"] == text
    no_bos = requests.post(server.url + "/tokenize",
                           json={"prompt": text, "add_special_tokens": False}, timeout=10).json()
    assert no_bos["tokens"] == t["tokens"][1:]
    chat = requests.post(server.url + "/tokenize",
                         json={"messages": [{"role": "user", "content": text}]}, timeout=10).json()
    assert chat["tokens"] == no_bos["tokens"]
    bad = requests.post(server.url + "/detokenize", json={"tokens": [100000]}, timeout=10)
    assert bad.status_code == 400


def test_health_and_version(server):
    r = requests.get(server.url + "/health", timeout=10)
    assert r.status_code == 200 and r.text == ""
    assert requests.get(server.url + "/version", timeout=10).json()["version"]


def test_metrics_count_a_request(client, scrape):
    before = scrape()
    model = (("model_name", MODEL_NAME),)
    r = client.completions.create(model=MODEL_NAME, prompt="Once upon a time", max_tokens=7,
                                  temperature=0, extra_body={"ignore_eos": True})
    after = scrape()

    def delta(name, labels=model):
        return after.get((name, labels), 0) - before.get((name, labels), 0)

    assert delta("vllm:prompt_tokens_total") == r.usage.prompt_tokens
    assert delta("vllm:generation_tokens_total") == 7
    length = tuple(sorted(model + (("finished_reason", "length"),)))
    assert delta("vllm:request_success_total", length) == 1
    assert delta("vllm:time_to_first_token_seconds_count") == 1
    assert delta("vllm:inter_token_latency_seconds_count") == 6
    assert delta("vllm:e2e_request_latency_seconds_count") == 1
    for gauge in ("vllm:num_requests_running", "vllm:num_requests_waiting",
                  "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"):
        assert (gauge, model) in after
    for counter in ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"):
        assert (counter, model) in after
    le = tuple(sorted(model + (("le", "0.001"),)))
    assert ("vllm:time_to_first_token_seconds_bucket", le) in after
