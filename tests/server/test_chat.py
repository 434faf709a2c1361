"""/v1/chat/completions: rendered with the chat template, same tokens as a completion."""

import requests

from conftest import MODEL_NAME

STORY = "Once upon a time"


def test_chat_matches_completion_of_the_same_tokens(client, server):
    ids = requests.post(server.url + "/tokenize",
                        json={"prompt": STORY, "add_special_tokens": False}).json()["tokens"]
    completion = client.completions.create(model=MODEL_NAME, prompt=ids, max_tokens=20,
                                           temperature=0)
    chat = client.chat.completions.create(model=MODEL_NAME, max_completion_tokens=20,
                                          temperature=0,
                                          messages=[{"role": "user", "content": STORY}])
    assert chat.object == "chat.completion"
    assert chat.id.startswith("chatcmpl-")
    assert chat.choices[0].message.role == "assistant"
    assert chat.choices[0].message.content == completion.choices[0].text
    assert chat.usage.prompt_tokens == len(ids)
    assert chat.usage.completion_tokens == 20


def test_chat_stream(client):
    whole = client.chat.completions.create(model=MODEL_NAME, max_tokens=15, temperature=0,
                                           messages=[{"role": "user", "content": STORY}])
    chunks = list(client.chat.completions.create(
        model=MODEL_NAME, max_tokens=15, temperature=0, stream=True,
        stream_options={"include_usage": True},
        messages=[{"role": "user", "content": [{"type": "text", "text": STORY}]}]))
    assert chunks[0].object == "chat.completion.chunk"
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finished = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finished) == 1 and finished[0].choices[0].finish_reason == "length"
    assert chunks[-1].usage.completion_tokens == 15


def test_chat_default_max_tokens_fills_the_context(server):
    # No max_tokens: vLLM allows what is left of the 512-token context.
    body = {"messages": [{"role": "user", "content": STORY}], "temperature": 0,
            "ignore_eos": True}
    j = requests.post(server.url + "/v1/chat/completions", json=body, timeout=60).json()
    assert j["usage"]["prompt_tokens"] + j["usage"]["completion_tokens"] == 512
    assert j["choices"][0]["finish_reason"] == "length"
