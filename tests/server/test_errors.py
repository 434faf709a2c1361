"""Client mistakes get OpenAI's error envelope with vLLM's status codes, through the openai
client's exception classes and on the wire."""

import openai
import pytest
import requests

from conftest import MODEL_NAME


def post(server, path, body=None, data=None):
    return requests.post(server.url + path, json=body, data=data, timeout=30,
                         headers={"Content-Type": "application/json"})


def assert_envelope(r, status, param=None):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == status
    assert err["message"]
    if param is not None:
        assert err["param"] == param
    return err


def test_malformed_json(server):
    err = assert_envelope(post(server, "/v1/completions", data=b'{"prompt": "a",'), 400)
    assert err["type"] == "BadRequestError"
    assert_envelope(post(server, "/v1/chat/completions", data=b"[1, 2]"), 400)


def test_unknown_model(client, server):
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-model", prompt="a", max_tokens=2)
    err = assert_envelope(post(server, "/v1/completions", {"model": "x", "prompt": "a"}), 404)
    assert err["type"] == "NotFoundError"


def test_over_long_prompt(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_NAME, prompt="Once upon a time " * 200,
                                  max_tokens=2)
    assert "maximum context length is 512 tokens" in str(e.value)


@pytest.mark.parametrize("max_tokens", [-1, 0, 100000, 10**15])
def test_bad_max_tokens(server, max_tokens):
    assert_envelope(post(server, "/v1/completions", {"prompt": "a", "max_tokens": max_tokens}),
                    400, param="max_tokens")


@pytest.mark.parametrize("field,value", [
    ("temperature", "hot"), ("n", "2"), ("stream", "yes"), ("stop", 5), ("max_tokens", 2.5),
    ("top_k", [1]), ("seed", {}), ("prompt", 7)])
def test_wrong_types(server, field, value):
    body = {"prompt": "a", "max_tokens": 2, field: value}
    assert_envelope(post(server, "/v1/completions", body), 400, param=field)


def test_out_of_range_sampling(client):
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL_NAME, prompt="a", max_tokens=2, temperature=5)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL_NAME, max_tokens=2, top_logprobs=2,
                                       messages=[{"role": "user", "content": "a"}])


def test_stream_options_without_stream(server):
    body = {"prompt": "a", "stream_options": {"include_usage": True}}
    assert_envelope(post(server, "/v1/completions", body), 400, param="stream_options")


def test_logprobs_beyond_max_logprobs(server):
    err = assert_envelope(post(server, "/v1/completions",
                               {"prompt": "a", "max_tokens": 2, "logprobs": 21}), 400)
    assert "logprobs" in err["message"]


def test_unknown_fields_are_ignored_with_a_warning(server):
    r = post(server, "/v1/completions", {"prompt": "a", "max_tokens": 2, "frobnicate": True})
    assert r.status_code == 200
    assert "frobnicate" in server.log_text()


def test_unknown_path(server):
    r = requests.get(server.url + "/v1/nothing", timeout=10)
    assert_envelope(r, 404)
