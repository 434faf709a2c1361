"""POST /v1/audio/transcriptions on a Whisper server (OpenAI's audio API, as vLLM serves it),
driven by the official openai client and raw HTTP, against the tiny random Whisper fixture (a
2 s window and a byte-level tokenizer: its text is random but deterministic): every response
format in its shape, the same text twice, uploads that are not audio or are too long refused
with a 400 before anything runs, the other endpoints refused, the metrics counted."""

import io
import re
import socket
import struct
import subprocess
import wave

import openai
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from conftest import BINARY, MODEL_NAME, ROOT, Server

WHISPER_DIR = ROOT / "tests" / "golden" / "fixtures" / "whisper" / "tiny_random"
WHISPER_NAME = "tiny-whisper"
AUDIO_DIR = ROOT / "tests" / "golden" / "fixtures" / "audio"
FORMATS = ["text", "json", "verbose_json", "srt", "vtt"]
SRT_TIME = r"\d\d:\d\d:\d\d,\d\d\d"
VTT_TIME = r"\d\d:\d\d:\d\d\.\d\d\d"


def wav_bytes(rate=16000, seconds=1.5, channels=1):
    """A WAV of a rising tone, made with the wave module."""
    frames = int(rate * seconds)
    samples = b"".join(struct.pack("<h", int(8000 * ((i * 37) % 200 - 100) / 100)) * channels
                       for i in range(frames))
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples)
    return out.getvalue()


def wav_header(rate, data_bytes, bits=16, channels=1):
    """A canonical 44-byte PCM WAV header declaring `data_bytes` of samples."""
    block = channels * bits // 8
    return (b"RIFF" + struct.pack("<I", 36 + data_bytes) + b"WAVE" + b"fmt " +
            struct.pack("<IHHIIHH", 16, 1, channels, rate, rate * block, block, bits) +
            b"data" + struct.pack("<I", data_bytes))


@pytest.fixture(scope="module")
def speech():
    """The committed 16 kHz recording, or a generated one where it is absent."""
    path = AUDIO_DIR / "hello_16k.wav"
    return path.read_bytes() if path.exists() else wav_bytes()


@pytest.fixture(scope="module")
def whisper_server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("whisper_server"), model_dir=WHISPER_DIR,
               model_name=WHISPER_NAME)
    yield s
    assert s.stop() == 0, s.log_text()


@pytest.fixture(scope="module")
def whisper_client(whisper_server):
    return openai.OpenAI(base_url=whisper_server.url + "/v1", api_key="unused", max_retries=0,
                         timeout=60)


def transcribe(client, audio, **kwargs):
    return client.audio.transcriptions.create(model=WHISPER_NAME, file=("speech.wav", audio),
                                              **kwargs)


def post_form(server, fields=None, file=None, file_name="speech.wav"):
    """A raw multipart POST: `fields` as text parts, `file` (bytes) as the upload."""
    parts = {k: (None, v) for k, v in (fields or {}).items()}
    if file is not None:
        parts["file"] = (file_name, file, "application/octet-stream")
    return requests.post(server.url + "/v1/audio/transcriptions", files=parts, timeout=60)


def assert_envelope(r, status, param=None):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == status and err["message"]
    if param is not None:
        assert err["param"] == param
    return err


def srt_blocks(body):
    return [b.split("\n") for b in body.strip("\n").split("\n\n") if b]


@pytest.mark.parametrize("response_format", FORMATS)
def test_each_format_with_the_openai_client(whisper_client, speech, response_format):
    out = transcribe(whisper_client, speech, response_format=response_format)
    if response_format == "json":
        assert isinstance(out, openai.types.audio.Transcription)
        assert out.text
    elif response_format == "verbose_json":
        assert out.task == "transcribe" and out.language == "english"
        assert 1.0 < out.duration < 3.0
        assert out.segments
        for i, s in enumerate(out.segments):
            assert s.id == i + 1
            assert 0.0 <= s.start < s.end <= out.duration + 0.02
            assert s.text and s.tokens
        assert out.text == "".join(s.text for s in out.segments).strip()
    elif response_format == "text":
        assert isinstance(out, str) and out.endswith("\n") and out.strip()
    elif response_format == "srt":
        blocks = srt_blocks(out)
        assert blocks
        for n, block in enumerate(blocks, start=1):
            assert block[0] == str(n)
            assert re.fullmatch(f"{SRT_TIME} --> {SRT_TIME}", block[1]), block
    else:
        assert out.startswith("WEBVTT\n\n")
        cues = srt_blocks(out[len("WEBVTT\n\n"):])
        assert cues
        for cue in cues:
            assert re.fullmatch(f"{VTT_TIME} --> {VTT_TIME}", cue[0]), cue


def test_an_open_file_as_the_openai_docs_send_it(whisper_client, speech, tmp_path):
    path = tmp_path / "speech.wav"
    path.write_bytes(speech)
    with open(path, "rb") as f:
        out = whisper_client.audio.transcriptions.create(model=WHISPER_NAME, file=f)
    assert out.text == transcribe(whisper_client, speech, response_format="json").text


def test_formats_agree_and_repeat(whisper_client, speech):
    text = transcribe(whisper_client, speech, response_format="text")
    assert transcribe(whisper_client, speech, response_format="text") == text
    assert transcribe(whisper_client, speech, response_format="json").text == text.strip()
    verbose = transcribe(whisper_client, speech, response_format="verbose_json")
    srt = srt_blocks(transcribe(whisper_client, speech, response_format="srt"))
    assert len(srt) == len(verbose.segments)
    for block, s in zip(srt, verbose.segments):
        assert "\n".join(block[2:]) == s.text.strip()


def test_concurrent_requests_get_their_own_transcripts(whisper_client):
    """Six uploads at once share the engine's batched decoder steps; each answer is what the
    same upload gets alone."""
    from concurrent.futures import ThreadPoolExecutor
    clips = [(AUDIO_DIR / n).read_bytes() for n in ("hello_16k.wav", "fox_16k.wav")
             if (AUDIO_DIR / n).exists()]
    clips += [wav_bytes(seconds=s) for s in (0.7, 3.5, 5.0)]  # up to three 2 s windows
    clips.append(wav_bytes(rate=22050, seconds=2.5, channels=2))
    alone = [transcribe(whisper_client, c, response_format="verbose_json").model_dump()
             for c in clips]
    with ThreadPoolExecutor(len(clips)) as pool:
        together = list(pool.map(
            lambda c: transcribe(whisper_client, c, response_format="verbose_json").model_dump(),
            clips))
    assert together == alone


def test_raw_content_types(whisper_server, speech):
    for fmt, ctype in (("json", "application/json"), ("verbose_json", "application/json"),
                       ("text", "text/plain"), ("srt", "text/plain"), ("vtt", "text/plain")):
        r = post_form(whisper_server, {"response_format": fmt}, speech)
        assert r.status_code == 200, r.text
        assert r.headers["Content-Type"].startswith(ctype)
    # json is the default, as OpenAI's.
    r = post_form(whisper_server, {}, speech)
    assert r.headers["Content-Type"] == "application/json" and list(r.json()) == ["text"]


def test_every_field_is_accepted(whisper_client, speech):
    sampled = [transcribe(whisper_client, speech, language="en", prompt="Quantserve",
                          temperature=0.5, timestamp_granularities=["segment"],
                          response_format="verbose_json") for _ in range(2)]
    # The fallback's sampling is seeded per request: the same answer twice.
    assert sampled[0].text == sampled[1].text
    assert all(s.temperature == 0.5 for s in sampled[0].segments)


def test_other_formats_of_the_same_speech(whisper_client):
    for name in ("hello_16k.mp3", "hello_16k.ogg", "fox_22050_stereo.flac"):
        path = AUDIO_DIR / name
        if path.exists():
            out = whisper_client.audio.transcriptions.create(
                model=WHISPER_NAME, file=(name, path.read_bytes()), response_format="json")
            assert isinstance(out.text, str)


def test_unknown_model_is_404(whisper_client, speech):
    with pytest.raises(openai.NotFoundError) as e:
        whisper_client.audio.transcriptions.create(model="whisper-large",
                                                   file=("a.wav", speech))
    assert "whisper-large" in e.value.message


def test_word_timestamps_are_refused(whisper_client, speech):
    with pytest.raises(openai.BadRequestError) as e:
        transcribe(whisper_client, speech, response_format="verbose_json",
                   timestamp_granularities=["word"])
    assert "Word-level timestamps are not supported" in e.value.message


@pytest.mark.parametrize("name,fields,file,param,words", [
    ("no file", {"model": WHISPER_NAME}, None, "file", "'file' is required"),
    ("empty", {}, b"", "file", "empty"),
    ("not audio", {}, b"this is plain text, not a recording " * 20, "file", "not a sound file"),
    ("truncated", {}, "TRUNCATED", "file", "truncated"),
    ("0 Hz", {}, wav_header(0, 3200) + bytes(3200), "file", "0 Hz"),
    ("absurd rate", {}, wav_header(4_000_000, 3200) + bytes(3200), "file", "4000000 Hz"),
    # Three hours declared and a few bytes sent: refused from the header.
    ("3 h header", {}, wav_header(16000, 16000 * 2 * 3 * 3600) + bytes(3200), "file", "WAV"),
    # Three whole hours at 1 kHz, 8 bits (10.8 MB): refused from its header, not decoded.
    ("3 h recording", {}, "THREE_HOURS", "file", "above the limit of 3600.0 s"),
    ("response_format", {"response_format": "xml"}, "SPEECH", "response_format", "'xml'"),
    ("temperature", {"temperature": "hot"}, "SPEECH", "temperature", "from 0 to 1"),
    ("temperature range", {"temperature": "1.5"}, "SPEECH", "temperature", "from 0 to 1"),
    ("word", {"timestamp_granularities[]": "word"}, "SPEECH", "timestamp_granularities",
     "Word-level"),
    ("language", {"language": "en us"}, "SPEECH", "language", "language code"),
    ("stream", {"stream": "true"}, "SPEECH", "stream", "Streaming"),
])
def test_bad_requests_are_400(whisper_server, speech, name, fields, file, param, words):
    if file == "SPEECH":
        file = speech
    elif file == "TRUNCATED":
        file = speech[:len(speech) // 3]
    elif file == "THREE_HOURS":
        file = wav_header(1000, 1000 * 3 * 3600, bits=8) + b"\x80" * (1000 * 3 * 3600)
    err = assert_envelope(post_form(whisper_server, fields, file), 400, param)
    assert err["type"] == "BadRequestError"
    assert words in err["message"], err["message"]
    assert requests.get(whisper_server.url + "/health", timeout=10).status_code == 200


def test_a_body_that_is_not_a_form_is_400(whisper_server):
    r = requests.post(whisper_server.url + "/v1/audio/transcriptions", json={"file": "x"},
                      timeout=30)
    err = assert_envelope(r, 400, "file")
    assert "multipart/form-data" in err["message"]


def test_a_body_over_the_limit_is_413(whisper_server):
    # Refused from its Content-Length, before the body is read.
    with socket.create_connection(("127.0.0.1", whisper_server.port), timeout=30) as sock:
        sock.sendall(b"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: multipart/form-data; boundary=b\r\n"
                     b"Content-Length: 100000000\r\n\r\n")
        reply = sock.recv(4096).decode(errors="replace")
    assert reply.startswith("HTTP/1.1 413"), reply
    assert "too large" in reply


def test_still_transcribing_after_the_errors(whisper_client, whisper_server, speech):
    for bad in (b"", b"xyz" * 100, wav_header(0, 64) + bytes(64)):
        assert_envelope(post_form(whisper_server, {}, bad), 400, "file")
    assert transcribe(whisper_client, speech, response_format="json").text


def test_models_lists_the_whisper_model(whisper_client):
    assert [m.id for m in whisper_client.models.list().data] == [WHISPER_NAME]


def test_llm_endpoints_on_a_whisper_server(whisper_client, whisper_server):
    with pytest.raises(openai.BadRequestError) as e:
        whisper_client.completions.create(model=WHISPER_NAME, prompt="hi", max_tokens=2)
    assert "does not support Completions API" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        whisper_client.chat.completions.create(model=WHISPER_NAME,
                                               messages=[{"role": "user", "content": "hi"}])
    assert "does not support Chat Completions API" in e.value.message
    r = requests.post(whisper_server.url + "/tokenize", json={"prompt": "hi"}, timeout=10)
    assert r.status_code == 400 and "Tokenization" in r.json()["error"]["message"]


def test_transcriptions_on_an_llm_server_is_400(client, speech):
    with pytest.raises(openai.BadRequestError) as e:
        client.audio.transcriptions.create(model=MODEL_NAME, file=("a.wav", speech))
    assert "The model does not support Transcriptions API" in e.value.message


def test_metrics_count_transcriptions(whisper_client, whisper_server, speech):
    def read():
        text = requests.get(whisper_server.url + "/metrics", timeout=10).text
        samples = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return samples

    label = (("model_name", WHISPER_NAME),)
    before = read()
    verbose = transcribe(whisper_client, speech, response_format="verbose_json")
    after = read()
    requests_key = ("quantserve:transcription_requests_total", label)
    seconds_key = ("quantserve:transcription_audio_seconds_total", label)
    assert after[requests_key] == before[requests_key] + 1
    assert after[seconds_key] == pytest.approx(before[seconds_key] + verbose.duration)
    success = ("vllm:request_success_total", (("finished_reason", "stop"),) + label)
    assert after[success] == before[success] + 1


def test_max_audio_seconds_flag(tmp_path, speech):
    s = Server(tmp_path, model_dir=WHISPER_DIR, model_name=WHISPER_NAME,
               extra_args=["--max-audio-seconds", "1"])
    try:
        err = assert_envelope(post_form(s, {}, wav_bytes(seconds=1.5)), 400, "file")
        assert "above the limit of 1.0 s" in err["message"]
        assert post_form(s, {}, wav_bytes(seconds=0.5)).status_code == 200
    finally:
        assert s.stop() == 0, s.log_text()
    out = subprocess.run([str(BINARY), "serve", str(WHISPER_DIR), "--port", "0",
                          "--max-audio-seconds", "0"], capture_output=True, timeout=30)
    assert out.returncode == 2
    assert b"--max-audio-seconds" in out.stderr
