"""Fixtures for the Python package's tests: the package as built and installed from a build
directory (docs/python.md: `cmake --install build-py --prefix build-py/site`, then
PYTHONPATH=build-py/site) or by pip, and the shipped stories260K model. No network."""

import json
import pathlib
import shutil
import signal
import subprocess
import sys

import pytest

import quantserve

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL_DIR = ROOT / "models" / "stories260K"
THREADS = 2


def run_cli(*args, check=True):
    """The package's `quantserve` command (python -m quantserve: the console script's main),
    as a subprocess; returns the CompletedProcess with text stdout and stderr."""
    proc = subprocess.run([sys.executable, "-m", "quantserve", *map(str, args)],
                          capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"quantserve {args} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def cli_error(*args):
    """The message the CLI prints for a failing command: its stderr line after
    'quantserve <command>: '."""
    proc = run_cli(*args, check=False)
    assert proc.returncode != 0, proc.stdout
    prefix = f"quantserve {args[0]}: "
    lines = [l for l in proc.stderr.splitlines() if l.startswith(prefix)]
    assert lines, proc.stderr
    return lines[-1][len(prefix):]


@pytest.fixture(scope="session")
def llm():
    return quantserve.LLM(str(MODEL_DIR), threads=THREADS)


@pytest.fixture
def model_copy(tmp_path):
    """A copy of stories260K that a test may change."""
    dst = tmp_path / "stories"
    shutil.copytree(MODEL_DIR, dst)
    return dst


def set_chat_template(model_dir, template):
    path = model_dir / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config["chat_template"] = template
    path.write_text(json.dumps(config))


@pytest.fixture
def python_sigint():
    """SIGINT raising KeyboardInterrupt, as in an interactive interpreter. A shell that starts a
    job in the background (nohup, `cmd &`, some CI runners) leaves SIGINT ignored, and Python
    keeps an ignored SIGINT ignored at start-up; the Ctrl-C tests need Python's own handler."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
