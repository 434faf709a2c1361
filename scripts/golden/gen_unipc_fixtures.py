#!/usr/bin/env python3
"""Generates the UniPC scheduler fixtures in tests/golden/fixtures/unipc/.

diffusers' UniPCMultistepScheduler as Wan2.1/2.2 use it (prediction_type "flow_prediction",
use_flow_sigmas, a static flow_shift), driven without a model: each step's "model output" is
    model_output = a[k] * sample + b[k] * noise
with a fixed random `noise` and per-step float32 coefficients that depend on the timestep t
(so the output changes with both the sample and t, and the multistep history matters).

<config>/scheduler_config.json is each configuration as diffusers saves it (every field,
defaults included): the C++ test reads them with read_unipc_config. The configurations:
  wan_a14b          Wan2.2-T2V-A14B's: flow_shift 3, solver_order 2, bh2, final sigma zero
  shift5, shift12   the same at flow_shift 5 (TI2V-5B, 720p) and 12 (Wan2.1 480p advice)
  order3_bh1        solver_order 3, bh1, final sigma "sigma_min" (bh1 with "zero" ends in NaN)
  order3_bh2        solver_order 3, bh2
  order4_bh2        solver_order 4 (3x3 and 4x4 solves, rks cubed)
  order1_skip       solver_order 1, the corrector disabled after steps 0 and 2
  order2_nolof      lower_order_final false, bh1, final sigma "sigma_min"

reference.safetensors (float32 unless said):
  sample0 [2, 3, 4, 5], noise [2, 3, 4, 5]             shared by every run
  <run>_sigmas [steps + 1], <run>_timesteps [steps] i64  scheduler.sigmas / .timesteps
  <run>_a [steps], <run>_b [steps]                      the model's coefficients per step
  <run>_samples [steps, 2, 3, 4, 5]                     the sample after every step
where <run> is "<config>_<steps>". reference.json lists the runs (config, steps) and the
versions that produced them.

Install: the pins of scripts/golden/requirements.txt, then
    pip install --no-deps -r scripts/golden/requirements-diffusion.txt
Regenerate (deterministic on CPU; overwrites tests/golden/fixtures/unipc/):
    python scripts/golden/gen_unipc_fixtures.py
"""

import json
import shutil
from pathlib import Path

import diffusers
import numpy as np
import torch
from diffusers import UniPCMultistepScheduler
from safetensors.torch import save_file

REPO = Path(__file__).resolve().parents[2]
OUT_DIR = REPO / "tests" / "golden" / "fixtures" / "unipc"

# The options every configuration shares: Wan's scheduler_config.json.
WAN = dict(num_train_timesteps=1000, prediction_type="flow_prediction", use_flow_sigmas=True,
           predict_x0=True, final_sigmas_type="zero", lower_order_final=True,
           timestep_spacing="linspace")
CONFIGS = {
    "wan_a14b": dict(WAN, flow_shift=3.0, solver_order=2, solver_type="bh2"),
    "shift5": dict(WAN, flow_shift=5.0, solver_order=2, solver_type="bh2"),
    "shift12": dict(WAN, flow_shift=12.0, solver_order=2, solver_type="bh2"),
    "order3_bh1": dict(WAN, flow_shift=5.0, solver_order=3, solver_type="bh1",
                       final_sigmas_type="sigma_min"),
    "order3_bh2": dict(WAN, flow_shift=5.0, solver_order=3, solver_type="bh2"),
    "order4_bh2": dict(WAN, flow_shift=3.0, solver_order=4, solver_type="bh2"),
    "order1_skip": dict(WAN, flow_shift=3.0, solver_order=1, solver_type="bh2",
                        disable_corrector=[0, 2]),
    "order2_nolof": dict(WAN, flow_shift=5.0, solver_order=2, solver_type="bh1",
                         lower_order_final=False, final_sigmas_type="sigma_min"),
}
RUNS = [("wan_a14b", s) for s in (1, 2, 4, 10, 40)] + [
    ("shift5", 4), ("shift5", 40), ("shift12", 10), ("shift12", 40),
    ("order3_bh1", 4), ("order3_bh1", 10), ("order3_bh1", 40), ("order3_bh2", 10),
    ("order4_bh2", 10), ("order1_skip", 10), ("order2_nolof", 10)]
SHAPE = (2, 3, 4, 5)


def coefficients(t):
    """The model's (a, b) at integer timestep t, as float32 0-dim tensors."""
    x = float(t) / 1000.0
    return (torch.tensor(0.2 + 0.6 * x, dtype=torch.float32),
            torch.tensor(1.0 - 0.5 * np.cos(7.0 * x), dtype=torch.float32))


def run(config_dir, steps, sample0, noise, ref, name):
    sched = UniPCMultistepScheduler.from_pretrained(config_dir)
    sched.set_timesteps(steps)
    # WanPipeline does this before its loop: the step index counts from 0, never looked up.
    sched.set_begin_index(0)
    sample = sample0.clone()
    coef_a, coef_b, samples = [], [], []
    for t in sched.timesteps:
        a, b = coefficients(t.item())
        model_output = a * sample + b * noise
        sample = sched.step(model_output, t, sample, return_dict=False)[0]
        assert sample.dtype == torch.float32 and torch.isfinite(sample).all(), name
        coef_a.append(a)
        coef_b.append(b)
        samples.append(sample.clone())
    assert sched.sigmas.dtype == torch.float32 and sched.timesteps.dtype == torch.int64
    ref[f"{name}_sigmas"] = sched.sigmas.clone()
    ref[f"{name}_timesteps"] = sched.timesteps.clone()
    ref[f"{name}_a"] = torch.stack(coef_a)
    ref[f"{name}_b"] = torch.stack(coef_b)
    ref[f"{name}_samples"] = torch.stack(samples)


def main():
    torch.set_num_threads(1)
    if OUT_DIR.exists():
        for p in OUT_DIR.iterdir():
            if p.name != "README.md":
                shutil.rmtree(p) if p.is_dir() else p.unlink()
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for name, cfg in CONFIGS.items():
        UniPCMultistepScheduler(**cfg).save_config(OUT_DIR / name)
    gen = torch.Generator().manual_seed(0)
    sample0 = torch.randn(SHAPE, generator=gen, dtype=torch.float32)
    noise = torch.randn(SHAPE, generator=gen, dtype=torch.float32)
    ref = {"sample0": sample0, "noise": noise}
    info = {"runs": []}
    with torch.no_grad():
        for config, steps in RUNS:
            name = f"{config}_{steps}"
            run(OUT_DIR / config, steps, sample0, noise, ref, name)
            info["runs"].append(dict(name=name, config=config, steps=steps))
    save_file({k: v.contiguous() for k, v in ref.items()}, OUT_DIR / "reference.safetensors")
    info["model_output"] = "a[k] * sample + b[k] * noise (float32), a = 0.2 + 0.6 t/1000, " \
                           "b = 1 - 0.5 cos(7 t/1000)"
    info["versions"] = dict(torch=torch.__version__, numpy=np.__version__,
                            diffusers=diffusers.__version__)
    (OUT_DIR / "reference.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
