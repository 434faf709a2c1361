"""Images and sound clips in /v1/chat/completions on the tiny random Qwen2.5-Omni thinker
fixture, driven by the official openai client as vLLM serves Qwen2.5-Omni: an image as a data
URL and a clip as input_audio in one message give transformers' greedy text
(tests/golden/fixtures/omni/chat_reference.json), the same twice, the second time served from
the prefix cache (usage.prompt_tokens_details.cached_tokens); a clip as vLLM's audio_url works
too; every bad clip or part is a 400 in the error envelope, and the server stays healthy."""

import base64
import json
import struct

import openai
import pytest
import requests

from conftest import ROOT, Server

OMNI_DIR = ROOT / "tests" / "golden" / "fixtures" / "omni"
OMNI_MODEL = OMNI_DIR / "qwen2_5_omni_thinker"
VL_DIR = ROOT / "tests" / "golden" / "fixtures" / "vl"
NAME = "tiny-omni"
REFERENCE = json.loads((OMNI_DIR / "chat_reference.json").read_text())
IMAGE_A = (VL_DIR / "chat_image_a.png").read_bytes()
CLIP = (OMNI_DIR / "chat_audio.wav").read_bytes()
ASK = {"type": "text", "text": "What do you see and hear?"}


def b64(data):
    return base64.b64encode(data).decode()


def image_part(data):
    return {"type": "image_url", "image_url": {"url": "data:image/png;base64," + b64(data)}}


def audio_part(data, fmt="wav"):
    return {"type": "input_audio", "input_audio": {"data": b64(data), "format": fmt}}


def user(*parts):
    return [{"role": "user", "content": list(parts)}]


def wav(n):
    """A 16 kHz mono 16-bit WAV of n samples."""
    pcm = b"".join(struct.pack("<h", (i * 37) % 2000 - 1000) for i in range(n))
    return (b"RIFF" + struct.pack("<I", 36 + len(pcm)) + b"WAVEfmt " +
            struct.pack("<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16) + b"data" +
            struct.pack("<I", len(pcm)) + pcm)


@pytest.fixture(scope="module")
def omni_server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("omni"), model_dir=OMNI_MODEL, model_name=NAME,
               extra_args=["--enable-prompt-tokens-details", "--limit-mm-per-prompt",
                           '{"image": 1, "audio": 2}'])
    yield s
    assert s.stop() == 0, s.log_text()


@pytest.fixture(scope="module")
def omni(omni_server):
    return openai.OpenAI(base_url=omni_server.url + "/v1", api_key="unused", max_retries=0,
                         timeout=60)


def greedy(client, messages, **kw):
    return client.chat.completions.create(model=NAME, messages=messages, max_tokens=8,
                                          temperature=0, extra_body={"ignore_eos": True}, **kw)


def test_image_and_input_audio_give_transformers_text_twice_the_second_from_cache(omni):
    ref = REFERENCE["chat_image_audio"]
    first = greedy(omni, user(image_part(IMAGE_A), audio_part(CLIP), ASK))
    second = greedy(omni, user(image_part(IMAGE_A), audio_part(CLIP), ASK))
    assert first.choices[0].message.content == ref["greedy_text"]
    assert second.choices[0].message.content == first.choices[0].message.content
    # The prompt counts the widened placeholders, as vLLM's usage does.
    assert first.usage.prompt_tokens == len(ref["ids"])
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert second.usage.prompt_tokens_details.cached_tokens > 0


def test_a_different_clip_is_not_served_from_the_first_clips_cache(omni):
    ref = REFERENCE["chat_image_audio"]
    greedy(omni, user(image_part(IMAGE_A), audio_part(CLIP), ASK))
    # The same length of other samples: the same ids, other embeddings.
    other = CLIP[:44] + bytes(len(CLIP) - 44)
    r = greedy(omni, user(image_part(IMAGE_A), audio_part(other), ASK))
    assert r.usage.prompt_tokens == len(ref["ids"])
    # Only the blocks before the clip's placeholders may come from the cache.
    first_audio = ref["ids"].index(292)
    assert r.usage.prompt_tokens_details.cached_tokens <= first_audio


def test_audio_url_and_the_string_format_system_prompt(omni):
    ref = REFERENCE["chat_audio"]
    messages = [{"role": "system", "content": "You transcribe."},
                {"role": "user", "content": [
                    {"type": "audio_url", "audio_url": {"url": "data:audio/wav;base64," +
                                                        b64(CLIP)}},
                    {"type": "text", "text": "Words?"}]}]
    r = greedy(omni, messages)
    assert r.choices[0].message.content == ref["greedy_text"]
    assert r.usage.prompt_tokens == len(ref["ids"])
    chunks = greedy(omni, messages, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == \
        ref["greedy_text"]


VIDEO_DIR = ROOT / "tests" / "golden" / "fixtures" / "video"
VIDEO_REFERENCE = json.loads((VIDEO_DIR / "chat_reference.json").read_text())


def test_a_video_heard_with_its_sound_track_gives_transformers_text(omni):
    ref = VIDEO_REFERENCE["omni_video_audio"]
    url = "data:video/mp4;base64," + b64((VIDEO_DIR / ref["video"]).read_bytes())
    messages = [{"role": "system", "content": "Watch."},
                user({"type": "video_url", "video_url": {"url": url}},
                     {"type": "text", "text": "What moves?"})[0]]
    r = omni.chat.completions.create(
        model=NAME, messages=messages, max_tokens=8, temperature=0,
        extra_body={"ignore_eos": True,
                    "mm_processor_kwargs": {"use_audio_in_video": True, "fps": ref["fps"]}})
    assert r.choices[0].message.content == ref["greedy_text"]
    assert r.usage.prompt_tokens == len(ref["ids"])


BAD = {
    "corrupt clip": (user(audio_part(CLIP[:40])), "Invalid audio"),
    "not a sound file": (user(audio_part(b"hello, this is text")), "Invalid audio"),
    "too short for one embedding": (user(audio_part(wav(320))), "too short"),
    "not base64": (user({"type": "input_audio",
                         "input_audio": {"data": "@@@@", "format": "wav"}}), "not valid base64"),
    "format that is no file type": (user(audio_part(CLIP, "wav/../x")), "format"),
    "input_audio without data": (user({"type": "input_audio", "input_audio": {"format": "wav"}}),
                                 "input_audio"),
    "remote audio_url": (user({"type": "audio_url",
                               "audio_url": {"url": "https://example.com/a.wav"}}),
                         "does not fetch"),
    "more clips than the limit": (user(*[audio_part(CLIP)] * 3), "At most 2 audio clips"),
    "more images than the limit": (user(image_part(IMAGE_A), image_part(IMAGE_A)),
                                   "At most 1 images"),
    "typed placeholder": (user(audio_part(CLIP), {"type": "text", "text": "<|AUDIO|>"}),
                          "placeholder"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_inputs_are_400s_and_the_server_stays_healthy(omni_server, case):
    messages, message = BAD[case]
    r = requests.post(omni_server.url + "/v1/chat/completions", timeout=60,
                      json={"model": NAME, "messages": messages, "max_tokens": 2})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert message in error["message"]
    assert error["code"] == 400 and error["type"] == "BadRequestError"
    assert requests.get(omni_server.url + "/health", timeout=10).status_code == 200


def test_audio_to_a_model_without_an_audio_tower_is_a_400(server):
    r = requests.post(server.url + "/v1/chat/completions", timeout=60,
                      json={"messages": user(audio_part(CLIP), ASK), "max_tokens": 2})
    assert r.status_code == 400, r.text
    assert "does not accept audio clips" in r.json()["error"]["message"]
    assert requests.get(server.url + "/health", timeout=10).status_code == 200
