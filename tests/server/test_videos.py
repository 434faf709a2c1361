"""vLLM-Omni's videos API (/v1/videos, /v1/videos/sync and the job endpoints) on Wan2.2
pipeline servers, driven by multipart forms as `curl -F` sends them, against the tiny random
T2V and I2V fixtures: MP4s that ffprobe reads with the asked frames and rate, the async job's
lifecycle, listing and deleting, image to video, errors before anything runs, the memory budget,
and clients that hang up or delete a running job."""

import base64
import json
import re
import shutil
import socket
import struct
import subprocess
import time
import uuid
import zlib

import pytest
import requests

from conftest import BINARY, ROOT, Server, wait_for_log

WAN = ROOT / "tests" / "golden" / "fixtures" / "wan"
T2V_DIR = WAN / "t2v_a14b" / "pipeline"
I2V_DIR = WAN / "i2v_a14b" / "pipeline"
I2V_IMAGE = WAN / "i2v_a14b" / "i2v_input.png"
OTHER_IMAGE = WAN / "i2v_a14b" / "resize_input.png"
T2V_NAME = "tiny-wan-t2v"
I2V_NAME = "tiny-wan-i2v"
# The fixtures' own run: 32x32, 9 frames, a 16-token UMT5 prompt; the tiny pipeline makes it in
# well under a second.
FAST = {"size": "32x32", "num_frames": 9, "fps": 8, "num_inference_steps": 2,
        "max_sequence_length": 16, "seed": 7}
FFPROBE = shutil.which("ffprobe")
FFMPEG = shutil.which("ffmpeg")
CURL = shutil.which("curl")


def form(**fields):
    """multipart/form-data text parts, as `curl -F name=value` sends them."""
    return {k: (None, str(v)) for k, v in fields.items()}


def solid_png(side, value):
    """A side x side 8-bit RGB PNG of one grey level."""
    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    rows = b"".join(b"\x00" + bytes([value]) * (3 * side) for _ in range(side))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def is_mp4(data):
    return len(data) > 8 and data[4:8] == b"ftyp"


def same_video(a, b, tmp_path):
    """Whether two MP4s are the same video: vision::encode_mp4 gives the same bytes for the
    same frames (tests/unit/video_writer_test.cc, SameFramesSameBytes), so bytes are compared."""
    assert is_mp4(a) and is_mp4(b)
    return a == b


def probe(path):
    """(frames, frame rate, width, height) of the first video stream, as ffprobe counts them."""
    out = subprocess.run([FFPROBE, "-v", "error", "-select_streams", "v:0", "-count_frames",
                          "-show_entries", "stream=nb_read_frames,r_frame_rate,width,height",
                          "-of", "json", str(path)], capture_output=True, check=True, timeout=60)
    s = json.loads(out.stdout)["streams"][0]
    return int(s["nb_read_frames"]), s["r_frame_rate"], s["width"], s["height"]


@pytest.fixture(scope="module")
def video_server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("video_server"), model_dir=T2V_DIR, model_name=T2V_NAME,
               extra_args=["--threads", "2"])
    yield s
    assert s.stop() == 0, s.log_text()


@pytest.fixture(scope="module")
def i2v_server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("i2v_server"), model_dir=I2V_DIR, model_name=I2V_NAME)
    yield s
    assert s.stop() == 0, s.log_text()


def sync(server, fields=None, files=None, timeout=120):
    fields = fields or {**FAST, "prompt": "a red fox in the snow"}
    return requests.post(server.url + "/v1/videos/sync", files={**form(**fields),
                                                                 **(files or {})},
                         timeout=timeout)


def create(server, **fields):
    r = requests.post(server.url + "/v1/videos", files=form(**{**FAST, **fields}), timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def wait_for_count(server, pattern, count, timeout=60):
    """Waits until `pattern` has matched `count` times in the log; returns the last match."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = list(re.finditer(pattern, server.log_text()))
        if len(found) >= count:
            return found[count - 1]
        time.sleep(0.05)
    raise AssertionError(f"{pattern!r} not {count} times in the log:\n{server.log_text()}")


CANCELLED = r"video job ended: cancelled after step (\d+)/200"


def wait_done(server, video_id, timeout=120):
    """Polls the job until it has finished; returns every progress seen and the last body."""
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = requests.get(f"{server.url}/v1/videos/{video_id}", timeout=10).json()
        seen.append(job["progress"])
        if job["status"] in ("completed", "failed"):
            return seen, job
        time.sleep(0.01)
    raise AssertionError(f"{video_id} still {job['status']} after {timeout} s")


def test_startup_line_models_and_health(video_server):
    assert re.search(r"serving .* as 'tiny-wan-t2v' on http://.*\(WanPipeline, /v1/videos, "
                     r"2 threads, weights [\d.]+ GiB, video memory budget [\d.]+ GiB\)",
                     video_server.log_text())
    models = requests.get(video_server.url + "/v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == [T2V_NAME]
    assert requests.get(video_server.url + "/health", timeout=10).status_code == 200


def test_sync_multipart_is_an_mp4_of_the_asked_frames_and_rate(video_server, tmp_path):
    r = sync(video_server)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"] == "video/mp4"
    assert is_mp4(r.content)
    if FFPROBE:
        path = tmp_path / "out.mp4"
        path.write_bytes(r.content)
        assert probe(path) == (9, "8/1", 32, 32)


@pytest.mark.skipif(CURL is None, reason="curl is not installed")
def test_curl_form(video_server, tmp_path):
    out = tmp_path / "curl.mp4"
    args = [CURL, "-sS", "-o", str(out), "-w", "%{http_code}", video_server.url + "/v1/videos/sync"]
    for k, v in {**FAST, "prompt": "a red fox in the snow"}.items():
        args += ["-F", f"{k}={v}"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.stdout == "200", done.stderr
    data = out.read_bytes()
    assert is_mp4(data)
    # curl's form is the same request as requests' form: the same seed gives the same video.
    assert same_video(data, sync(video_server, {**FAST, "prompt": "a red fox in the snow"}).content,
                      tmp_path) is not False


@pytest.mark.skipif(FFMPEG is None, reason="ffmpeg is not installed")
def test_seed_decides_the_video(video_server, tmp_path):
    a = sync(video_server, {**FAST, "prompt": "p", "seed": 3}).content
    b = sync(video_server, {**FAST, "prompt": "p", "seed": 3}).content
    c = sync(video_server, {**FAST, "prompt": "p", "seed": 4}).content
    assert same_video(a, b, tmp_path)
    assert not same_video(a, c, tmp_path)


def test_seconds_times_fps_and_model_fps(video_server, tmp_path):
    # No num_frames: seconds x fps = 8 frames, made 9 (4k + 1) as vLLM-Omni's Wan pipeline does;
    # no fps: the A14B models' 16.
    fields = {k: v for k, v in FAST.items() if k not in ("num_frames", "fps")}
    r = sync(video_server, {**fields, "prompt": "p", "seconds": 1, "fps": 8})
    assert r.status_code == 200, r.text
    r16 = sync(video_server, {**fields, "prompt": "p", "num_frames": 5})
    assert r16.status_code == 200, r16.text
    if FFPROBE:
        (tmp_path / "a.mp4").write_bytes(r.content)
        (tmp_path / "b.mp4").write_bytes(r16.content)
        assert probe(tmp_path / "a.mp4")[:2] == (9, "8/1")
        assert probe(tmp_path / "b.mp4")[:2] == (5, "16/1")
    assert "8 frames asked; 9 made" in video_server.log_text()


def test_json_and_urlencoded_bodies(video_server, tmp_path):
    body = {**FAST, "prompt": "p"}
    multipart = sync(video_server, body).content
    r = requests.post(video_server.url + "/v1/videos/sync", json=body, timeout=120)
    assert r.status_code == 200, r.text
    assert same_video(r.content, multipart, tmp_path) is not False
    r = requests.post(video_server.url + "/v1/videos/sync", data=body, timeout=120)
    assert r.status_code == 200, r.text
    assert same_video(r.content, multipart, tmp_path) is not False


# A job of about a second: long enough to be seen at work by a client polling it.
MID = {"size": "256x256", "num_inference_steps": 100}


def test_async_job_lifecycle(video_server, tmp_path):
    job = create(video_server, prompt="a slow one", **MID)
    assert re.fullmatch(r"video_gen_[0-9a-f]{32}", job["id"])
    assert job["object"] == "video" and job["status"] in ("queued", "in_progress")
    assert job["model"] == T2V_NAME and job["prompt"] == "a slow one"
    assert job["size"] == "256x256" and job["seconds"] == "2" and job["progress"] == 0
    assert job["media_type"] == "video/mp4" and job["completed_at"] is None
    assert isinstance(job["created_at"], int)
    seen, done = wait_done(video_server, job["id"])
    assert done["status"] == "completed", done
    assert seen == sorted(seen) and seen[-1] == 100
    assert any(0 < p < 100 for p in seen), seen
    assert done["completed_at"] >= done["created_at"]
    assert done["file_name"] == job["id"] + ".mp4"
    assert done["inference_time_s"] > 0 and done["error"] is None
    assert list(done["stage_durations"]) == ["denoise", "decode", "encode"]
    assert all(t >= 0 for t in done["stage_durations"].values())
    r = requests.get(f"{video_server.url}/v1/videos/{job['id']}/content", timeout=30)
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "video/mp4"
    assert job["id"] + ".mp4" in r.headers["Content-Disposition"]
    # The job's video is the blocking endpoint's for the same request.
    blocking = sync(video_server, {**FAST, "prompt": "a slow one", **MID})
    assert same_video(r.content, blocking.content, tmp_path) is not False
    if FFPROBE:
        (tmp_path / "job.mp4").write_bytes(r.content)
        assert probe(tmp_path / "job.mp4") == (9, "8/1", 256, 256)


def test_list_and_delete(video_server):
    a = create(video_server, prompt="first")["id"]
    b = create(video_server, prompt="second")["id"]
    wait_done(video_server, a)
    wait_done(video_server, b)
    listed = requests.get(video_server.url + "/v1/videos", timeout=10).json()
    assert listed["object"] == "list"
    ids = [j["id"] for j in listed["data"]]
    assert ids.index(b) < ids.index(a)  # newest first, vLLM-Omni's default order
    assert listed["first_id"] == ids[0] and listed["last_id"] == ids[-1]
    assert listed["has_more"] is False
    page = requests.get(video_server.url + "/v1/videos",
                        params={"limit": 1, "order": "asc", "after": a}, timeout=10).json()
    assert [j["id"] for j in page["data"]] == [ids[ids.index(a) - 1]]
    assert page["has_more"] == (ids.index(a) > 1)
    r = requests.delete(f"{video_server.url}/v1/videos/{a}", timeout=10)
    assert r.status_code == 200
    assert r.json() == {"id": a, "deleted": True, "object": "video.deleted"}
    for path in (f"/v1/videos/{a}", f"/v1/videos/{a}/content"):
        r = requests.get(video_server.url + path, timeout=10)
        assert r.status_code == 404 and r.json()["error"]["message"] == "Video not found"
    assert requests.delete(f"{video_server.url}/v1/videos/{a}", timeout=10).status_code == 404
    assert a not in [j["id"] for j in
                     requests.get(video_server.url + "/v1/videos", timeout=10).json()["data"]]
    assert requests.get(f"{video_server.url}/v1/videos/{b}/content", timeout=10).status_code == 200
    r = requests.get(video_server.url + "/v1/videos", params={"limit": 101}, timeout=10)
    assert r.status_code == 422


# A job the tiny pipeline takes seconds over: a bigger grid and every step vLLM-Omni allows.
SLOW = {"size": "256x256", "num_frames": 33, "num_inference_steps": 200,
        "max_sequence_length": 16}


def test_delete_cancels_a_running_job(video_server):
    cancelled = len(re.findall(CANCELLED, video_server.log_text()))
    job = create(video_server, prompt="slow", **SLOW)
    wait_for_log(video_server, r"video job started: 256x256, 33 frames at 8 fps, 200 steps")
    r = requests.get(f"{video_server.url}/v1/videos/{job['id']}/content", timeout=10)
    assert r.status_code == 404 and "in-progress" in r.json()["error"]["message"]
    assert requests.delete(f"{video_server.url}/v1/videos/{job['id']}",
                           timeout=10).status_code == 200
    m = wait_for_count(video_server, CANCELLED, cancelled + 1)
    assert int(m.group(1)) < 200
    # The engine is free again.
    assert is_mp4(sync(video_server).content)


def test_errors_before_anything_runs(video_server):
    started = video_server.log_text().count("video job started")
    cases = [
        ({"prompt": "p", "size": "30x32"}, 400, None, "30"),
        ({"prompt": "p", "size": "32x40"}, 400, None, "40"),
        ({"prompt": "p", "num_frames": 0}, 400, "num_frames", "num_frames"),
        ({"prompt": "p", "num_frames": 1000000}, 400, None, "frames"),
        ({"prompt": "p", "num_inference_steps": 0}, 400, "num_inference_steps", "between 1 and 200"),
        ({"prompt": "p", "num_inference_steps": 201}, 400, "num_inference_steps", "200"),
        ({"prompt": "p", "guidance_scale": 21}, 400, "guidance_scale", "between 0 and 20"),
        ({"prompt": "p", "boundary_ratio": 1.5}, 400, "boundary_ratio", "between 0 and 1"),
        ({"prompt": "p", "fps": 0}, 400, "fps", "fps"),
        ({"prompt": "p", "size": "0x32"}, 400, "size", "0x32"),
        ({"prompt": "p", "lora": '{"name": "x"}'}, 400, "lora", "lora"),
        ({"prompt": "p", "generate_sound": "true"}, 400, "generate_sound", "generate_sound"),
        # FastAPI's answer to a text part where an UploadFile is expected.
        ({"prompt": "p", "input_reference": "not a file"}, 422, "input_reference", "file"),
        ({"size": "32x32"}, 422, "prompt", "prompt"),
        ({"prompt": "p", "size": "big"}, 422, "size", "big"),
        ({"prompt": "p", "seconds": "0"}, 422, "seconds", "seconds"),
        ({"prompt": "p", "num_frames": "nine"}, 422, "num_frames", "nine"),
        ({"prompt": "p", "guidance_scale": "nan"}, 422, "guidance_scale", "nan"),
    ]
    for fields, status, param, words in cases:
        for path in ("/v1/videos/sync", "/v1/videos"):
            r = requests.post(video_server.url + path, files=form(**{**FAST, **fields})
                              if "prompt" in fields else form(**fields), timeout=30)
            assert r.status_code == status, (fields, r.text)
            err = r.json()["error"]
            assert err["code"] == status and words in err["message"], (fields, err)
            if param is not None:
                assert err["param"] == param, (fields, err)
    r = requests.post(video_server.url + "/v1/videos/sync", data="prompt", timeout=30,
                      headers={"Content-Type": "text/plain"})
    assert r.status_code == 422
    # A text-to-video model takes no image.
    r = sync(video_server, files={"input_reference": ("a.png", I2V_IMAGE.read_bytes(),
                                                       "image/png")})
    assert r.status_code == 400 and "text to video" in r.json()["error"]["message"]
    assert video_server.log_text().count("video job started") == started
    assert requests.get(video_server.url + "/health", timeout=10).status_code == 200


def test_unknown_fields_are_ignored_with_a_warning(video_server):
    r = sync(video_server, {**FAST, "prompt": "p", "extra_params": "{}", "user": "u",
                            "true_cfg_scale": 4})
    assert r.status_code == 200, r.text
    log = video_server.log_text()
    assert "present in the request but ignored: extra_params" in log
    assert "present in the request but ignored: true_cfg_scale" in log


def slow_sync_socket(port, fields):
    """A raw multipart POST /v1/videos/sync; returns the connected socket."""
    boundary = uuid.uuid4().hex
    body = "".join(f"--{boundary}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n"
                   for k, v in fields.items()) + f"--{boundary}--\r\n"
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall((f"POST /v1/videos/sync HTTP/1.1\r\nHost: x\r\n"
                  f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
                  f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
    return sock


def test_sync_client_hang_up_cancels_its_video(video_server):
    cancelled = len(re.findall(CANCELLED, video_server.log_text()))
    sock = slow_sync_socket(video_server.port, {**SLOW, "prompt": "hang up", "fps": 12})
    wait_for_log(video_server, r"video job started: 256x256, 33 frames at 12 fps, 200 steps")
    time.sleep(0.3)  # a few steps run
    sock.close()
    m = wait_for_count(video_server, CANCELLED, cancelled + 1)
    assert int(m.group(1)) < 200
    assert "client went away, cancelling its video" in video_server.log_text()
    # The server still serves.
    assert is_mp4(sync(video_server).content)


def test_image_to_video(i2v_server, tmp_path):
    png = I2V_IMAGE.read_bytes()
    r = sync(i2v_server, {**FAST, "prompt": "a cat"},
             files={"input_reference": ("i2v_input.png", png, "image/png")})
    assert r.status_code == 200, r.text
    assert is_mp4(r.content)
    if FFPROBE:
        (tmp_path / "i2v.mp4").write_bytes(r.content)
        assert probe(tmp_path / "i2v.mp4") == (9, "8/1", 32, 32)
    # Another image (50x38, resized to 32x32 first) is served too.
    other = sync(i2v_server, {**FAST, "prompt": "a cat"},
                 files={"input_reference": ("other.png", OTHER_IMAGE.read_bytes(), "image/png")})
    assert other.status_code == 200, other.text
    assert is_mp4(other.content)
    # The image decides the video: a black first frame and a white one.
    black, white = (sync(i2v_server, {**FAST, "prompt": "a cat"},
                         files={"input_reference": ("solid.png", solid_png(32, v), "image/png")})
                    for v in (0, 255))
    assert same_video(black.content, white.content, tmp_path) is not True
    # The same image as a data URL in a JSON body.
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    j = requests.post(i2v_server.url + "/v1/videos/sync", timeout=120,
                      json={**FAST, "prompt": "a cat", "image_reference": {"image_url": url}})
    assert j.status_code == 200, j.text
    assert same_video(j.content, r.content, tmp_path) is not False


def test_image_to_video_needs_a_readable_image(i2v_server):
    started = i2v_server.log_text().count("video job started")
    r = sync(i2v_server, {**FAST, "prompt": "a cat"})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "input_reference" and "image" in err["message"]
    r = sync(i2v_server, {**FAST, "prompt": "a cat"},
             files={"input_reference": ("broken.png", b"\x89PNG\r\n\x1a\nnot a png", "image/png")})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "input_reference" and "broken.png" in err["message"]
    assert i2v_server.log_text().count("video job started") == started


def test_request_over_the_memory_budget_is_refused(tmp_path):
    s = Server(tmp_path, model_dir=T2V_DIR, model_name=T2V_NAME,
               extra_args=["--video-memory-budget", "64MiB"])
    try:
        assert "video memory budget 0.06 GiB" in s.log_text()
        big = {**FAST, "prompt": "p", "size": "512x512", "num_frames": 81}
        for path in ("/v1/videos/sync", "/v1/videos"):
            r = requests.post(s.url + path, files=form(**big), timeout=30)
            assert r.status_code == 400, r.text
            message = r.json()["error"]["message"]
            assert "budget of 0.06 GiB" in message and "--video-memory-budget" in message
            assert re.search(r"needs [\d.]+ GiB", message)
        # The small one fits, and is served.
        assert is_mp4(sync(s).content)
        assert s.log_text().count("video job started") == 1
    finally:
        assert s.stop() == 0, s.log_text()


def test_bad_budget_flag_is_a_start_error(tmp_path):
    out = subprocess.run([str(BINARY), "serve", str(T2V_DIR), "--port", "0",
                          "--video-memory-budget", "lots"], capture_output=True, timeout=30)
    assert out.returncode == 2
    assert b"--video-memory-budget expects bytes" in out.stderr


def test_videos_on_other_servers_are_503(server):
    r = requests.post(server.url + "/v1/videos", files=form(prompt="p"), timeout=10)
    assert r.status_code == 503
    assert "Video generation handler not initialized" in r.json()["error"]["message"]
    assert requests.get(server.url + "/v1/videos", timeout=10).status_code == 503
