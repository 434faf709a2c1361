"""API keys, client disconnects and shutdown, each on a server of its own where the test
needs one."""

import json
import signal
import socket
import time

import openai
import pytest
import requests

from conftest import MODEL_NAME, Server


def raw_stream(port, body):
    """Opens a streaming request on a bare socket and returns it after the first event."""
    payload = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Content-Type: application/json\r\n"
                 b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
    received = b""
    while b"data: " not in received:
        data = sock.recv(4096)
        assert data, "the server closed the stream before the first event"
        received += data
    return sock, received


@pytest.mark.parametrize("via_env", [False, True])
def test_api_key(tmp_path, via_env):
    args, env = ([], {"VLLM_API_KEY": "sesame"}) if via_env else (["--api-key", "sesame"], {})
    s = Server(tmp_path, args, env)
    try:
        assert requests.get(s.url + "/v1/models", timeout=10).status_code == 401
        r = requests.get(s.url + "/v1/models", headers={"Authorization": "Bearer nope"},
                         timeout=10)
        assert r.status_code == 401
        assert r.json()["error"]["code"] == 401
        ok = requests.get(s.url + "/v1/models", headers={"Authorization": "Bearer sesame"},
                          timeout=10)
        assert ok.status_code == 200
        # vLLM leaves the non-/v1 endpoints open.
        assert requests.get(s.url + "/health", timeout=10).status_code == 200
        assert requests.get(s.url + "/metrics", timeout=10).status_code == 200
        wrong = openai.OpenAI(base_url=s.url + "/v1", api_key="nope", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            wrong.completions.create(model=MODEL_NAME, prompt="a", max_tokens=2)
        right = openai.OpenAI(base_url=s.url + "/v1", api_key="sesame", max_retries=0)
        assert right.completions.create(model=MODEL_NAME, prompt="a", max_tokens=2).choices
    finally:
        assert s.stop() == 0


def test_client_disconnect_aborts_the_request(server, scrape):
    abort = (("finished_reason", "abort"), ("model_name", MODEL_NAME))
    before = scrape().get(("vllm:request_success_total", abort), 0)
    # Eight long choices keep the engine busy well past the moment the client hangs up.
    body = {"model": MODEL_NAME, "prompt": "Once upon a time", "max_tokens": 480, "n": 8,
            "ignore_eos": True, "stream": True}
    sock, _ = raw_stream(server.port, body)
    sock.close()
    deadline = time.monotonic() + 20
    aborted = 0
    while time.monotonic() < deadline and aborted < 8:
        aborted = scrape().get(("vllm:request_success_total", abort), 0) - before
        time.sleep(0.1)
    assert aborted == 8
    assert "aborting" in server.log_text()


def test_non_streaming_client_disconnect_aborts_the_request_and_frees_its_blocks(server, scrape):
    # httplib 0.11 sends a non-streaming answer only at the end; the server watches the
    # connection meanwhile, so a hang-up ends the choices as "abort" instead of "length".
    abort = (("finished_reason", "abort"), ("model_name", MODEL_NAME))
    labels = (("model_name", MODEL_NAME),)
    before = scrape().get(("vllm:request_success_total", abort), 0)
    payload = json.dumps({"model": MODEL_NAME, "prompt": "Once upon a time", "max_tokens": 480,
                          "n": 8, "ignore_eos": True}).encode()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Content-Type: application/json\r\n"
                 b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and scrape()[("vllm:num_requests_running", labels)] == 0:
        time.sleep(0.01)
    assert scrape()[("vllm:kv_cache_usage_perc", labels)] > 0
    sock.close()
    deadline = time.monotonic() + 20
    aborted = 0
    while time.monotonic() < deadline and aborted < 8:
        aborted = scrape().get(("vllm:request_success_total", abort), 0) - before
        time.sleep(0.05)
    assert aborted == 8
    after = scrape()
    assert after[("vllm:kv_cache_usage_perc", labels)] == 0
    assert after[("vllm:num_requests_running", labels)] == 0
    assert "client went away, aborting" in server.log_text()


def test_sigterm_ends_in_flight_streams_and_exits_zero(tmp_path):
    s = Server(tmp_path)
    body = {"model": MODEL_NAME, "prompt": "Once upon a time", "max_tokens": 480, "n": 8,
            "ignore_eos": True, "stream": True}
    sock, received = raw_stream(s.port, body)
    s.proc.send_signal(signal.SIGTERM)
    sock.settimeout(20)
    while b"data: [DONE]" not in received:
        data = sock.recv(65536)
        if not data:
            break
        received += data
    sock.close()
    assert s.stop(timeout=20) == 0
    # The stream was completed, not cut: every choice ended, most of them as "abort".
    assert b"data: [DONE]" in received
    assert b'"finish_reason":"abort"' in received
    assert "received SIGTERM" in s.log_text()


def test_sigint_exits_zero(tmp_path):
    s = Server(tmp_path)
    s.proc.send_signal(signal.SIGINT)
    assert s.proc.wait(timeout=20) == 0
    assert s.stop() == 0
