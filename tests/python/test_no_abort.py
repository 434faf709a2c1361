"""Running out of memory is an exception, not the end of the interpreter (issue 35, "Errors as
exceptions"). Sizes a user sets (kv_cache_memory_bytes, max_model_len, a batch) decide how much
the engine allocates; an allocation that fails comes back as MemoryError naming what was under
way, and the process goes on. Bad arguments and corrupt files are test_errors.py's subject.

Each case runs in a child interpreter whose address space is capped (RLIMIT_AS), so that an
allocation fails deterministically on any host without touching more than a few hundred MB; a
child that aborted would end with a signal instead of printing its report."""

import json
import subprocess
import sys

from conftest import MODEL_DIR, THREADS

# The child: caps its address space 2 GiB above what it uses after importing quantserve,
# makes the LLM of the case, then shows that it keeps working with a cache that fits.
CHILD = r"""
import json, resource, sys
import quantserve
from quantserve import LLM, SamplingParams

def vm_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024

model, threads, kwargs = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
cap = vm_bytes() + (2 << 30)
resource.setrlimit(resource.RLIMIT_AS, (cap, resource.getrlimit(resource.RLIMIT_AS)[1]))
report = {}
try:
    LLM(model, threads=threads, **kwargs)
    report["error"] = None
except MemoryError as e:
    report["error"] = type(e).__name__
    report["message"] = str(e)
    report["is_quantserve_error"] = isinstance(e, quantserve.Error)
llm = LLM(model, threads=threads, max_model_len=64)
out = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=4), use_tqdm=False)
report["tokens_after"] = len(out[0].outputs[0].token_ids)
print(json.dumps(report))
"""


def run_child(**kwargs):
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(MODEL_DIR), str(THREADS), json.dumps(kwargs)],
        capture_output=True, text=True, timeout=300)
    # Before issue 35's fix the child died here with SIGABRT (returncode -6) from
    # "src/core/tensor.cc: check failed: p != nullptr".
    assert proc.returncode == 0, f"child ended with {proc.returncode}:\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_kv_cache_larger_than_memory_is_memory_error():
    # 40 GB of KV cache for stories260K: each layer's K (or V) is a 4 GB tensor, more than the
    # 2 GiB the child may still map, while the block tables (about 180 MB) fit.
    report = run_child(kv_cache_memory_bytes=40 * 10**9)
    assert report["error"] == "MemoryError"
    assert report["message"].startswith(
        "out of memory while loading the model and allocating its KV cache"), report["message"]
    assert "kv_cache_memory_bytes" in report["message"]
    assert not report["is_quantserve_error"]  # Python's own MemoryError, as numpy raises
    assert report["tokens_after"] == 4


def test_kv_cache_that_fits_is_unchanged():
    # The same child with a cache that fits: no error, so the cap above is not what fails.
    report = run_child(kv_cache_memory_bytes=64 * 10**6)
    assert report["error"] is None
    assert report["tokens_after"] == 4
