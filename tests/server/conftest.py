"""End-to-end fixtures: the built `quantserve serve` on 127.0.0.1 at a free port, serving the
shipped stories260K model. The binary is $QS_BINARY or build/quantserve; every wait is bounded."""

import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
import requests

ROOT = pathlib.Path(__file__).resolve().parents[2]
BINARY = pathlib.Path(os.environ.get("QS_BINARY", ROOT / "build" / "quantserve"))
MODEL_DIR = ROOT / "models" / "stories260K"
MODEL_NAME = "stories"
# Helpers shared with tests/python (hf_cache_layout.py).
sys.path.append(str(ROOT / "tests" / "common"))
# stories260K ships no chat template: this one sends the message contents as a plain story,
# so chat requests can be compared with completions of the same tokens.
CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
START_TIMEOUT_S = 30


class Server:
    """A running `quantserve serve` process; its log (stderr) goes to a file."""

    def __init__(self, tmp_path, extra_args=(), env=None, model_dir=MODEL_DIR,
                 model_name=MODEL_NAME):
        self.log_path = tmp_path / "server.log"
        args = [str(BINARY), "serve", str(model_dir), "--port", "0", "--threads", "1"]
        if model_name is not None:  # None: the server's default, the model as given
            args += ["--served-model-name", model_name]
        if model_dir == MODEL_DIR:
            args += ["--chat-template", CHAT_TEMPLATE]
        args += list(extra_args)
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=self.log,
                                     env={**os.environ, **(env or {})})
        self.port = self._wait_for_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._wait_healthy()

    def _wait_for_port(self):
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            m = re.search(r"on http://127\.0\.0\.1:(\d+)", self.log_path.read_text())
            if m:
                return int(m.group(1))
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited early:\n{self.log_path.read_text()}")
            time.sleep(0.05)
        raise RuntimeError(f"server did not start:\n{self.log_path.read_text()}")

    def _wait_healthy(self):
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                if requests.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.05)
        raise RuntimeError("server never became healthy")

    def log_text(self):
        return self.log_path.read_text()

    def stop(self, timeout=15):
        """SIGTERM, then the exit code (killed if it does not exit in time)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise
        self.log.close()
        return self.proc.returncode


def wait_for_log(server, pattern, timeout=30):
    """The first match of `pattern` in the server's log, waiting up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = re.search(pattern, server.log_text())
        if m:
            return m
        time.sleep(0.05)
    raise AssertionError(f"{pattern!r} not in the log:\n{server.log_text()}")


# Open MPI's launcher, for the servers that run as several ranks; mpirun refuses root without
# this environment.
MPIRUN = shutil.which("mpirun")
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def mpi_rank_pid(mpirun_pid, rank):
    """The pid of the process mpirun started as `rank` (its child, on this one host)."""
    children = subprocess.run(["pgrep", "-P", str(mpirun_pid)], capture_output=True,
                              text=True).stdout.split()
    for pid in children:
        try:
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
            return int(pid)
    raise AssertionError(f"no rank {rank} among mpirun {mpirun_pid}'s children {children}")


class MpiServer(Server):
    """`mpirun -np RANKS [MPI_ARGS] quantserve serve SERVE_ARGS`: every rank logs to one file,
    rank 0 the port line."""

    def __init__(self, tmp_path, ranks, serve_args, mpi_args=()):
        self.log_path = tmp_path / "server.log"
        args = [MPIRUN, "-np", str(ranks), "--oversubscribe", "--bind-to", "none", *mpi_args,
                str(BINARY), "serve", *serve_args]
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=self.log,
                                     env={**os.environ, **MPI_ENV})
        self.port = self._wait_for_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ranks = [self.rank_pid(r) for r in range(ranks)]
        self._wait_healthy()

    def rank_pid(self, rank):
        return mpi_rank_pid(self.proc.pid, rank)

    def stop(self, timeout=15):
        """SIGTERM to rank 0 (which releases the others), then mpirun's exit code. mpirun
        itself answers a SIGTERM of its own with exit 1 however its ranks end."""
        if self.proc.poll() is None:
            os.kill(self.ranks[0], signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise
        self.log.close()
        return self.proc.returncode

    def kill(self):
        """SIGKILL to every rank, then mpirun: a mpirun killed first would leave them."""
        for pid in self.ranks:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("server"))
    yield s
    assert s.stop() == 0, s.log_text()


@pytest.fixture(scope="session")
def client(server):
    import openai
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0,
                         timeout=60)


@pytest.fixture(scope="session")
def generate_cli():
    """`quantserve generate` output for a prompt, the reference for greedy decoding."""
    def run(prompt, max_tokens):
        out = subprocess.run([str(BINARY), "generate", "--model", str(MODEL_DIR), "--prompt",
                              prompt, "--temperature", "0", "--max-tokens", str(max_tokens),
                              "--threads", "1"], capture_output=True, timeout=60, check=True)
        return out.stdout.decode()
    return run


@pytest.fixture
def scrape(server):
    """Reads /metrics with prometheus_client's parser: {(sample name, labels): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    def read():
        r = requests.get(server.url + "/metrics", timeout=10)
        assert r.status_code == 200
        assert r.headers["Content-Type"].startswith("text/plain")
        samples = {}
        for family in text_string_to_metric_families(r.text):
            for s in family.samples:
                samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return samples
    return read
