"""POST /v1/images/generations on a FLUX.1 pipeline server (vLLM-Omni's image API), driven by
the official openai client and raw HTTP, against the tiny random FLUX pipeline fixture: PNGs
of the asked size, seeds per image, the same bytes as `quantserve generate-image`, errors
with their statuses, the LLM endpoints refused, and a client hang-up cancelling its image."""

import base64
import json
import signal
import socket
import struct
import subprocess
import threading
import time

import openai
import pytest
import requests

from conftest import BINARY, ROOT, Server, wait_for_log

PIPELINE_DIR = ROOT / "tests" / "golden" / "fixtures" / "flux" / "tiny_pipeline"
PIPELINE_NAME = "tiny-flux"
# Small images and few steps: the tiny pipeline runs these in milliseconds.
FAST = {"num_inference_steps": 2}


@pytest.fixture(scope="module")
def image_server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("image_server"), model_dir=PIPELINE_DIR,
               model_name=PIPELINE_NAME)
    yield s
    assert s.stop() == 0, s.log_text()


@pytest.fixture(scope="module")
def image_client(image_server):
    return openai.OpenAI(base_url=image_server.url + "/v1", api_key="unused", max_retries=0,
                         timeout=60)


def png_size(data):
    """(width, height) from a PNG's IHDR chunk, after checking the signature."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def generate(client, size="32x16", seed=3, n=1, **extra):
    r = client.images.generate(model=PIPELINE_NAME, prompt="a red fox in the snow", n=n,
                               size=size, response_format="b64_json",
                               extra_body={"seed": seed, **FAST, **extra})
    return [base64.b64decode(d.b64_json) for d in r.data], r


def test_b64_png_of_the_requested_size(image_client):
    images, r = generate(image_client, size="48x32")
    assert len(images) == 1
    assert png_size(images[0]) == (48, 32)
    assert r.created > 0
    assert r.data[0].url is None and r.data[0].revised_prompt is None


def test_raw_body_shape(image_server):
    r = requests.post(image_server.url + "/v1/images/generations", timeout=60,
                      json={"prompt": "p", "size": "16x16", **FAST})
    assert r.status_code == 200
    body = r.json()
    assert list(body) == ["created", "data"]
    assert list(body["data"][0]) == ["b64_json", "url", "revised_prompt"]


def test_n_images_at_consecutive_seeds(image_client):
    two, _ = generate(image_client, n=2, seed=5)
    assert len(two) == 2
    assert two[0] != two[1]
    assert all(png_size(p) == (32, 16) for p in two)
    # Image i is drawn at seed + i (documented in README "Serving").
    assert generate(image_client, seed=5)[0][0] == two[0]
    assert generate(image_client, seed=6)[0][0] == two[1]


def test_same_seed_same_bytes(image_client):
    a, _ = generate(image_client, seed=11)
    b, _ = generate(image_client, seed=11)
    c, _ = generate(image_client, seed=12)
    assert a == b
    assert a != c


def test_equals_generate_image_cli(image_client, tmp_path):
    out = tmp_path / "cli.png"
    subprocess.run([str(BINARY), "generate-image", "--model", str(PIPELINE_DIR), "--prompt",
                    "a red fox in the snow", "--width", "32", "--height", "16", "--steps", "2",
                    "--seed", "3", "--negative-prompt", "blurry", "--true-cfg-scale", "2.5",
                    "--guidance-scale", "5", "--max-sequence-length", "64", "--out", str(out),
                    "--threads", "1"], check=True, capture_output=True, timeout=60)
    served, _ = generate(image_client, seed=3, negative_prompt="blurry", true_cfg_scale=2.5,
                         guidance_scale=5, max_sequence_length=64)
    assert served[0] == out.read_bytes()


def test_file_response_format(image_server, image_client):
    r = requests.post(image_server.url + "/v1/images/generations", timeout=60,
                      json={"prompt": "a red fox in the snow", "size": "32x16", "seed": 3,
                            "response_format": "file", **FAST})
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "image/png"
    assert "attachment" in r.headers["Content-Disposition"]
    assert r.content == generate(image_client, seed=3)[0][0]


def test_models_lists_the_pipeline(image_client):
    models = image_client.models.list()
    assert [m.id for m in models.data] == [PIPELINE_NAME]


def test_bad_size_is_400_naming_it(image_client):
    for size in ("64x", "big", "0x64"):
        with pytest.raises(openai.BadRequestError) as e:
            image_client.images.generate(prompt="p", size=size)
        assert size in e.value.message
    # Well-formed but not a multiple of the pipeline's latent unit: the pipeline's message.
    with pytest.raises(openai.BadRequestError) as e:
        image_client.images.generate(prompt="p", size="30x32")
    assert "30x32" in e.value.message and "multiples" in e.value.message


def test_n_out_of_range_is_422(image_client):
    for n in (0, 11):
        with pytest.raises(openai.UnprocessableEntityError) as e:
            image_client.images.generate(prompt="p", n=n, size="16x16")
        assert "'n'" in e.value.message
        assert e.value.body["param"] == "n"


def test_pipeline_validation_is_400_not_500(image_client):
    for extra, words in (({"num_inference_steps": 0}, "steps"),
                         ({"max_sequence_length": 0}, "max_sequence_length"),
                         ({"true_cfg_scale": -1}, "true_cfg")):
        with pytest.raises(openai.BadRequestError) as e:
            image_client.images.generate(prompt="p", size="16x16", extra_body=extra)
        assert words in e.value.message


def test_raw_http_errors(image_server):
    url = image_server.url + "/v1/images/generations"
    cases = [("{not json", 422, None), ("[]", 422, None), ("{}", 422, "prompt"),
             (json.dumps({"prompt": 1}), 422, "prompt"),
             (json.dumps({"prompt": "p", "response_format": "url"}), 400, "response_format"),
             (json.dumps({"prompt": "p", "size": "1x1x1"}), 400, "size")]
    for body, status, param in cases:
        r = requests.post(url, data=body, headers={"Content-Type": "application/json"},
                          timeout=30)
        assert r.status_code == status, (body, r.text)
        err = r.json()["error"]
        assert err["code"] == status and err["message"]
        assert err["param"] == param
    # The server is still serving.
    assert requests.get(image_server.url + "/health", timeout=10).status_code == 200


def test_llm_endpoints_on_an_image_server(image_client, image_server):
    with pytest.raises(openai.BadRequestError) as e:
        image_client.completions.create(model=PIPELINE_NAME, prompt="hi", max_tokens=2)
    assert "Completions API" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        image_client.chat.completions.create(model=PIPELINE_NAME,
                                             messages=[{"role": "user", "content": "hi"}])
    assert "Chat Completions API" in e.value.message
    r = requests.post(image_server.url + "/tokenize", json={"prompt": "hi"}, timeout=10)
    assert r.status_code == 400 and "Tokenization" in r.json()["error"]["message"]


def test_images_on_an_llm_server_is_503(client):
    with pytest.raises(openai.InternalServerError) as e:
        client.images.generate(prompt="p", size="256x256")
    assert e.value.status_code == 503
    assert "Diffusion engine not initialized" in e.value.message


def long_request(port, steps=1000):
    """A raw HTTP request for a slow image; returns the connected socket."""
    body = json.dumps({"prompt": "slow", "size": "128x128", "num_inference_steps": steps})
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall((f"POST /v1/images/generations HTTP/1.1\r\nHost: x\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                  f"{body}").encode())
    return sock


def test_client_hang_up_cancels_between_steps(image_server, image_client):
    sock = long_request(image_server.port)
    # The worker's line (the handler's comes before the job leaves the queue).
    wait_for_log(image_server, r"image job started: 1 image\(s\), 1000 steps")
    time.sleep(0.3)  # a few steps run
    sock.close()
    m = wait_for_log(image_server, r"image job ended: cancelled after step (\d+)/1000")
    assert int(m.group(1)) < 1000
    assert "client went away, cancelling its images" in image_server.log_text()
    # The engine thread is free again: the next request is answered.
    images, _ = generate(image_client, seed=1)
    assert png_size(images[0]) == (32, 16)


def test_concurrent_requests_each_get_their_own_image(image_server, image_client):
    results = {}

    def run(name, seed):
        results[name] = generate(image_client, size="64x64", seed=seed,
                                 num_inference_steps=8)[0][0]

    threads = [threading.Thread(target=run, args=(f"r{i}", 100 + i)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(results) == 3
    # Each answer is its own seed's image, whatever the interleaving on the HTTP side.
    for i in range(3):
        assert results[f"r{i}"] == generate(image_client, size="64x64", seed=100 + i,
                                            num_inference_steps=8)[0][0]


def test_sigterm_with_an_image_in_flight(tmp_path):
    s = Server(tmp_path, model_dir=PIPELINE_DIR, model_name=PIPELINE_NAME)
    sock = long_request(s.port)
    # The worker's line, not the handler's: a job still in the queue ends "cancelled before it
    # started", which is right but not what this test is about.
    wait_for_log(s, r"image job started: 1 image\(s\), 1000 steps")
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(timeout=30) == 0, s.log_text()
    reply = sock.recv(4096).decode(errors="replace")
    assert reply.startswith("HTTP/1.1 503"), reply
    assert "shutting down" in reply
    sock.close()
    s.log.close()
    assert "image job ended: cancelled after step" in s.log_text()


def test_other_model_name_is_served_with_a_warning(image_client, image_server):
    # vLLM-Omni logs a mismatch and serves its own model instead of answering 404.
    r = image_client.images.generate(model="someone-else", prompt="p", size="16x16",
                                     extra_body=FAST)
    assert png_size(base64.b64decode(r.data[0].b64_json)) == (16, 16)
    assert "model mismatch: request specifies 'someone-else'" in image_server.log_text()


def test_unsupported_pipeline_is_a_clear_start_error(tmp_path):
    (tmp_path / "model_index.json").write_text('{"_class_name": "StableDiffusionPipeline"}')
    out = subprocess.run([str(BINARY), "serve", str(tmp_path), "--port", "0"],
                         capture_output=True, timeout=30)
    assert out.returncode == 1
    assert b"StableDiffusionPipeline" in out.stderr and b"FluxPipeline" in out.stderr
