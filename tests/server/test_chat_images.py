"""Images and videos in /v1/chat/completions on the tiny random Qwen2.5-VL fixture, driven by the
official openai client as vLLM serves Qwen2.5-VL: an image part as a data URL (or a file:// URL
under --allowed-local-media-path) gives transformers' greedy text (chat_reference.json), the
same twice, the second time served from the prefix cache; so does a video_url part
(fixtures/video/chat_reference.json); every bad image or part is a 400 in the
error envelope, and the server stays healthy."""

import base64
import json
import struct
import subprocess
import zlib

import openai
import pytest
import requests

from conftest import BINARY, ROOT, Server

VL_DIR = ROOT / "tests" / "golden" / "fixtures" / "vl"
VL_MODEL = VL_DIR / "qwen2_5_vl"
VL_NAME = "tiny-vl"
REFERENCE = json.loads((VL_DIR / "chat_reference.json").read_text())


def png(width, height, rgb=(200, 30, 60)):
    """An RGB PNG of one colour, written with zlib and struct."""
    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff))
    rows = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" +
            chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def data_url(data, mime="image/png"):
    return f"data:{mime};base64," + base64.b64encode(data).decode()


def image_part(url):
    return {"type": "image_url", "image_url": {"url": url}}


def user(*parts):
    return [{"role": "user", "content": list(parts)}]


IMAGE_A = (VL_DIR / "chat_image_a.png").read_bytes()
DESCRIBE = {"type": "text", "text": "Describe this image."}


@pytest.fixture(scope="module")
def vl_server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("vl"), model_dir=VL_MODEL, model_name=VL_NAME,
               extra_args=["--enable-prompt-tokens-details", "--allowed-local-media-path",
                           str(VL_DIR), "--limit-mm-per-prompt", '{"image": 2}'])
    yield s
    assert s.stop() == 0, s.log_text()


@pytest.fixture(scope="module")
def vl(vl_server):
    return openai.OpenAI(base_url=vl_server.url + "/v1", api_key="unused", max_retries=0,
                         timeout=60)


def greedy(client, messages, **kw):
    return client.chat.completions.create(model=VL_NAME, messages=messages, max_tokens=8,
                                          temperature=0, extra_body={"ignore_eos": True}, **kw)


def test_image_data_url_gives_transformers_text_twice_the_second_from_cache(vl):
    ref = REFERENCE["chat_one_image"]
    first = greedy(vl, user(image_part(data_url(IMAGE_A)), DESCRIBE))
    second = greedy(vl, user(image_part(data_url(IMAGE_A)), DESCRIBE))
    assert first.choices[0].message.content == ref["greedy_text"]
    assert second.choices[0].message.content == first.choices[0].message.content
    # The prompt counts the expanded placeholders, as vLLM's usage does.
    assert first.usage.prompt_tokens == len(ref["ids"])
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert second.usage.prompt_tokens_details.cached_tokens > 0


def test_two_images_and_a_file_url(vl):
    ref = REFERENCE["chat_two_images"]
    messages = [{"role": "system", "content": "You compare pictures."},
                {"role": "user", "content": [
                    {"type": "text", "text": "First:"}, image_part(data_url(IMAGE_A)),
                    {"type": "text", "text": " and second:"},
                    image_part("file://" + str(VL_DIR / "chat_image_b.png")),
                    {"type": "text", "text": " differ how?"}]}]
    r = greedy(vl, messages)
    assert r.choices[0].message.content == ref["greedy_text"]
    assert r.usage.prompt_tokens == len(ref["ids"])
    # Streamed, the same text.
    chunks = greedy(vl, messages, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == \
        ref["greedy_text"]


VIDEO_DIR = ROOT / "tests" / "golden" / "fixtures" / "video"
VIDEO_REFERENCE = json.loads((VIDEO_DIR / "chat_reference.json").read_text())


def test_a_video_url_gives_transformers_text_and_repeats_from_cache(vl):
    ref = VIDEO_REFERENCE["vl_video"]
    url = data_url((VIDEO_DIR / "pattern_rgb.mov").read_bytes(), "video/quicktime")
    messages = user({"type": "video_url", "video_url": {"url": url}},
                    {"type": "text", "text": "What moves?"})
    first = greedy(vl, messages)
    second = greedy(vl, messages)
    assert first.choices[0].message.content == ref["greedy_text"]
    assert second.choices[0].message.content == ref["greedy_text"]
    assert first.usage.prompt_tokens == len(ref["ids"])
    assert second.usage.prompt_tokens_details.cached_tokens > 0


def test_text_only_requests_still_work(vl):
    r = vl.chat.completions.create(model=VL_NAME, messages=[{"role": "user", "content": "hi"}],
                                   max_tokens=4, temperature=0)
    assert r.choices[0].finish_reason in ("length", "stop")


def test_a_one_pixel_image_is_processed_as_transformers_does(vl):
    # transformers 5.23's smart_resize grows it to 56 x 56 (min_pixels): 4 placeholders.
    r = greedy(vl, user(image_part(data_url(png(1, 1))), DESCRIBE))
    assert r.usage.prompt_tokens == len(REFERENCE["chat_one_image"]["ids"]) - 6 + 4


BAD = {
    "corrupt image": (user(image_part(data_url(IMAGE_A[:len(IMAGE_A) // 2]))), "Invalid image"),
    "aspect ratio past 200": (user(image_part(data_url(png(300, 1)))), "aspect ratio"),
    "30000x30000 header": (user(image_part(data_url(
        (ROOT / "tests/golden/fixtures/vision/huge_header_30000x30000.png").read_bytes()))),
        "30000x30000"),
    "not base64": (user(image_part("data:image/png;base64,@@@@"), DESCRIBE), "not valid base64"),
    "not a base64 data URL": (user(image_part("data:image/png,raw")), "Only base64"),
    "unknown part type": (user({"type": "hologram", "hologram": {}}), "Unknown part type"),
    "embeddings part": (user({"type": "image_embeds", "image_embeds": "AAAA"}),
                   "not supported"),
    "remote URL": (user(image_part("https://example.com/cat.png")), "does not fetch"),
    "file outside the allowed path": (user(image_part("file:///etc/hostname")), "subpath"),
    "more images than the limit": (user(*[image_part(data_url(IMAGE_A))] * 3), "At most 2"),
    "image_url without url": (user({"type": "image_url", "image_url": {}}), "image_url"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_inputs_are_400s_and_the_server_stays_healthy(vl_server, case):
    messages, message = BAD[case]
    r = requests.post(vl_server.url + "/v1/chat/completions", timeout=60,
                      json={"model": VL_NAME, "messages": messages, "max_tokens": 2})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert message in error["message"]
    assert error["code"] == 400 and error["type"] == "BadRequestError"
    assert requests.get(vl_server.url + "/health", timeout=10).status_code == 200


def test_openai_client_raises_bad_request(vl):
    with pytest.raises(openai.BadRequestError):
        greedy(vl, user(image_part(data_url(b"not an image"))))


def test_an_image_to_a_text_model_is_a_400(server):
    r = requests.post(server.url + "/v1/chat/completions", timeout=60,
                      json={"messages": user(image_part(data_url(IMAGE_A)), DESCRIBE),
                            "max_tokens": 2})
    assert r.status_code == 400, r.text
    assert "does not accept images" in r.json()["error"]["message"]
    assert requests.get(server.url + "/health", timeout=10).status_code == 200


@pytest.mark.parametrize("flags", [["--limit-mm-per-prompt", "4"],
                                   ["--limit-mm-per-prompt", '{"image": -1}'],
                                   ["--limit-mm-per-prompt", '{"smell": 1}'],
                                   ["--allowed-local-media-path", "/nonexistent/dir"]])
def test_bad_media_flags_stop_the_server_before_it_loads(flags):
    out = subprocess.run([str(BINARY), "serve", str(VL_MODEL), "--port", "0", *flags],
                         capture_output=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert flags[0] in out.stderr.decode()
