"""/v1/completions through the official openai client and raw HTTP: greedy output equal to
`quantserve generate`, streaming equal to non-streaming, stop strings, n > 1, seeds, usage."""

import json

import requests

from conftest import MODEL_NAME

PROMPT = "Once upon a time"


def complete(client, **kw):
    return client.completions.create(model=MODEL_NAME, prompt=kw.pop("prompt", PROMPT), **kw)


def test_greedy_matches_generate_cli(client, generate_cli):
    r = complete(client, max_tokens=40, temperature=0)
    assert r.choices[0].text == generate_cli(PROMPT, 40)
    assert r.choices[0].finish_reason == "length"
    assert r.object == "text_completion"
    assert r.id.startswith("cmpl-")
    assert r.model == MODEL_NAME


def test_usage_counts(client, server):
    n_prompt = len(requests.post(server.url + "/tokenize", json={"prompt": PROMPT}).json()["tokens"])
    r = complete(client, max_tokens=12, temperature=0)
    assert r.usage.prompt_tokens == n_prompt
    assert r.usage.completion_tokens == 12
    assert r.usage.total_tokens == n_prompt + 12


def test_stream_equals_non_stream_and_reports_usage(client):
    whole = complete(client, max_tokens=30, temperature=0)
    chunks = list(complete(client, max_tokens=30, temperature=0, stream=True,
                           stream_options={"include_usage": True}))
    token_chunks = [c for c in chunks if c.choices]
    assert "".join(c.choices[0].text for c in token_chunks) == whole.choices[0].text
    assert token_chunks[-1].choices[0].finish_reason == "length"
    assert all(c.choices[0].finish_reason is None for c in token_chunks[:-1])
    # The usage chunk comes last, with no choices.
    assert not chunks[-1].choices
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens
    assert len({c.id for c in chunks}) == 1


def test_sse_framing_on_the_wire(server):
    body = {"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 4, "temperature": 0,
            "stream": True}
    r = requests.post(server.url + "/v1/completions", json=body, stream=True, timeout=30)
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/event-stream")
    raw = r.content.decode()
    events = raw.split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]"
    for e in events[:-2]:
        assert e.startswith("data: ")
        chunk = json.loads(e[len("data: "):])
        assert chunk["object"] == "text_completion"
    assert "usage" not in json.loads(events[-3][len("data: "):])


def test_stop_string_cuts_the_text(client):
    text = complete(client, max_tokens=40, temperature=0).choices[0].text
    words = text.split()
    stop = words[3]
    r = complete(client, max_tokens=40, temperature=0, stop=[stop])
    assert r.choices[0].text == text[:text.index(stop)]
    assert r.choices[0].finish_reason == "stop"
    # vLLM's extra field: which stop string ended the choice.
    assert r.choices[0].model_extra["stop_reason"] == stop


def test_n_choices(client):
    r = complete(client, max_tokens=10, temperature=0, n=3)
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert len({c.text for c in r.choices}) == 1  # greedy: all the same
    assert r.usage.completion_tokens == 30


def test_list_of_prompts_and_token_ids(client, server):
    ids = requests.post(server.url + "/tokenize", json={"prompt": PROMPT}).json()["tokens"]
    by_text = complete(client, prompt=PROMPT, max_tokens=8, temperature=0)
    by_ids = complete(client, prompt=ids, max_tokens=8, temperature=0)
    assert by_ids.choices[0].text == by_text.choices[0].text
    both = complete(client, prompt=[PROMPT, "The cat"], max_tokens=8, temperature=0, n=2)
    assert [c.index for c in both.choices] == [0, 1, 2, 3]
    assert both.choices[0].text == by_text.choices[0].text


def test_seed_determinism(client):
    kw = dict(max_tokens=24, temperature=1.0, top_p=0.95)
    a = complete(client, seed=1234, **kw).choices[0].text
    assert complete(client, seed=1234, **kw).choices[0].text == a
    others = {complete(client, seed=s, **kw).choices[0].text for s in (1, 2, 3)}
    assert others != {a}


def test_echo_prepends_the_prompt(client):
    r = complete(client, max_tokens=5, temperature=0, echo=True)
    plain = complete(client, max_tokens=5, temperature=0)
    assert r.choices[0].text == PROMPT + plain.choices[0].text


def test_ignore_eos_and_request_id(server):
    body = {"prompt": PROMPT, "max_tokens": 300, "temperature": 0, "ignore_eos": True}
    r = requests.post(server.url + "/v1/completions", json=body,
                      headers={"X-Request-Id": "my-req-1"}, timeout=60)
    assert r.status_code == 200
    assert r.headers["X-Request-Id"] == "my-req-1"
    j = r.json()
    assert j["id"] == "cmpl-my-req-1"
    assert j["usage"]["completion_tokens"] == 300
    assert j["choices"][0]["finish_reason"] == "length"
    assert "my-req-1" in server.log_text()
