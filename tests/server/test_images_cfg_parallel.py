"""CFG parallelism through the server: `mpirun -np 2 quantserve serve TINYFLUX
--cfg-parallel-size 2` (rank 0 serves, rank 1 runs the negative branch of every true-CFG image)
answers /v1/images/generations with the same PNG bytes as a single-process server; a client
that hangs up mid-image leaves the pair in step; SIGTERM to rank 0 ends both ranks with exit 0
(mpirun 0); a rank 1
that stops answering fails the image in flight with 503 and ends the job non-zero within the
bounded wait (30 s plus three forwards). Skipped where mpirun is missing."""

import base64
import json
import os
import signal
import socket
import subprocess
import time

import pytest
import requests

from conftest import (BINARY, MPI_ENV, MPIRUN, ROOT, START_TIMEOUT_S, MpiServer, Server,
                      wait_for_log)

PIPELINE_DIR = ROOT / "tests" / "golden" / "fixtures" / "flux" / "tiny_pipeline"
# Two ranks on whatever cores the machine has.
MPI_ARGS = ["-np", "2", "--oversubscribe", "--bind-to", "none"]

pytestmark = pytest.mark.skipif(MPIRUN is None, reason="needs mpirun (openmpi-bin)")


class PairServer(MpiServer):
    """`mpirun -np 2 quantserve serve PIPELINE --cfg-parallel-size 2`."""

    def __init__(self, tmp_path):
        super().__init__(tmp_path, 2, [str(PIPELINE_DIR), "--port", "0", "--threads", "1",
                                       "--served-model-name", "tiny-flux",
                                       "--cfg-parallel-size", "2"])


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    s = PairServer(tmp_path_factory.mktemp("pair"))
    yield s
    assert s.stop(timeout=START_TIMEOUT_S) == 0, s.log_text()


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("single"), model_dir=PIPELINE_DIR, model_name="tiny-flux")
    yield s
    assert s.stop() == 0, s.log_text()


def image(server, **fields):
    body = {"prompt": "a red fox in the snow", "size": "48x32", "seed": 3,
            "num_inference_steps": 3, **fields}
    r = requests.post(server.url + "/v1/images/generations", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return [base64.b64decode(d["b64_json"]) for d in r.json()["data"]]


TRUE_CFG = {"negative_prompt": "blurry, low quality", "true_cfg_scale": 2.5}


@pytest.mark.parametrize("fields", [
    # 96 image and 77 text tokens: each rank's linears run the kernels of the batch-2 forward.
    {**TRUE_CFG, "max_sequence_length": 77},
    # The golden's shape (64 image tokens: GEMV per rank, GEMM batched), two images.
    {**TRUE_CFG, "size": "32x32", "max_sequence_length": 32, "n": 2},
    # No true CFG: rank 0 alone.
    {"max_sequence_length": 77},
])
def test_same_png_as_a_single_process_server(pair, single, fields):
    assert image(pair, **fields) == image(single, **fields)


def long_request(port, steps=1000):
    """A raw HTTP request for a slow true-CFG image; returns the connected socket."""
    body = json.dumps({"prompt": "slow", "size": "128x128", "num_inference_steps": steps,
                       **TRUE_CFG})
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.sendall((f"POST /v1/images/generations HTTP/1.1\r\nHost: x\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                  f"{body}").encode())
    return sock


def test_client_hang_up_mid_image_keeps_the_pair_in_step(pair, single):
    sock = long_request(pair.port)
    wait_for_log(pair, r"image job started: 1 image\(s\), 1000 steps")
    time.sleep(0.3)
    sock.close()
    m = wait_for_log(pair, r"image job ended: cancelled after step (\d+)/1000")
    # Rank 1 stopped at the step rank 0 did.
    wait_for_log(pair, rf"CFG-parallel rank 1: job ended: cancelled after step {m.group(1)}/1000")
    fields = {**TRUE_CFG, "max_sequence_length": 77}
    assert image(pair, **fields) == image(single, **fields)


def test_rank_1_that_stops_answering_fails_the_image_and_ends_the_job(tmp_path):
    s = PairServer(tmp_path)
    rank1 = s.ranks[1]
    sock = None
    try:
        sock = long_request(s.port)
        wait_for_log(s, r"image job started: 1 image\(s\), 1000 steps")
        os.kill(rank1, signal.SIGSTOP)
        stopped = time.monotonic()
        # Rank 0 waits 30 s plus three of its own forwards (milliseconds here) for rank 1.
        sock.settimeout(60)
        reply = sock.recv(4096).decode(errors="replace")
        assert reply.startswith("HTTP/1.1 503"), reply
        assert s.proc.wait(timeout=30) != 0
        assert time.monotonic() - stopped < 50
    finally:
        if sock is not None:
            sock.close()
        s.kill()
        s.log.close()
    log = s.log_text()
    assert "CFG-parallel rank 1 lost" in log and "no answer from the other ranks" in log, log


def test_cfg_parallel_without_mpirun_is_a_clear_error():
    out = subprocess.run([str(BINARY), "serve", str(PIPELINE_DIR), "--port", "0",
                          "--cfg-parallel-size", "2"], capture_output=True, timeout=60)
    assert out.returncode != 0
    assert b"run it under mpirun -np 2" in out.stderr


def test_tensor_parallel_on_an_image_pipeline_is_refused():
    out = subprocess.run([MPIRUN, *MPI_ARGS, str(BINARY), "serve", str(PIPELINE_DIR), "--port",
                          "0", "--cfg-parallel-size", "2", "--tensor-parallel-size", "2"],
                         capture_output=True, timeout=60, env={**os.environ, **MPI_ENV})
    assert out.returncode != 0
    assert b"--tensor-parallel-size applies to decoder LLMs" in out.stderr
