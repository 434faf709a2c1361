"""quantserve.AutoRound against `quantserve quantize`: the same settings and seed give the same
checkpoint, byte for byte in every file (AutoRound tuning, OPT-RTN and RTN, each export
format, a layer_config, a FLUX pipeline); a wrong scheme, format or argument, a missing model
and an existing output are exceptions carrying the command's message; Ctrl-C stops a run and
leaves nothing behind. The interpreter keeps working after each error."""

import os
import signal
import threading

import pytest

import quantserve
from quantserve import AutoRound

from conftest import MODEL_DIR, ROOT, THREADS, cli_error, run_cli

# stories260K's linears are 64 wide: group 32 quantizes the attention (the 172-wide MLP stays
# 16-bit, as the tool keeps shapes that are not multiples of 32).
COMMON = dict(scheme="W4A16", group_size=32, nsamples=8, seqlen=32, batch_size=2,
              threads=THREADS)
CLI_COMMON = ["--scheme", "W4A16", "--group_size", 32, "--nsamples", 8, "--seqlen", 32,
              "--batch_size", 2, "--threads", THREADS]


def files(directory):
    """{relative path: bytes} of every file under `directory`."""
    out = {}
    for root, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, directory)] = f.read()
    return out


def still_works(tmp_path):
    out = tmp_path / "still-works"
    AutoRound(str(MODEL_DIR), iters=0, disable_opt_rtn=True, **COMMON).quantize_and_save(
        str(out))
    assert (out / "model.safetensors").is_file()


TUNED = ({"iters": 4}, ["--iters", 4])
OPT_RTN = ({"iters": 0}, ["--iters", 0])
RTN_ASYM = ({"iters": 0, "disable_opt_rtn": True, "sym": False},
            ["--iters", 0, "--disable_opt_rtn", "--asym"])


@pytest.mark.parametrize("kwargs, cli, fmt", [
    (*TUNED, None),
    (*TUNED, "auto_gptq"),
    (*TUNED, "auto_awq"),
    (*OPT_RTN, "auto_round"),
    (*OPT_RTN, "auto_gptq"),
    (*RTN_ASYM, None),
    (*RTN_ASYM, "auto_awq"),
    # 40 iterations: enough for tuning to beat RTN here, so that each of these settings
    # changes the checkpoint (checked below), and a setting dropped on the way would show.
    ({"iters": 40, "seed": 7}, ["--iters", 40, "--seed", 7], None),
    ({"iters": 40, "amp": False}, ["--iters", 40, "--disable_amp"], None),
    ({"iters": 40, "lr": 0.01, "minmax_lr": 0.05},
     ["--iters", 40, "--lr", 0.01, "--minmax_lr", 0.05], None),
    ({"iters": 40, "gradient_accumulate_steps": 2}, ["--iters", 40,
                                                    "--gradient_accumulate_steps", 2], None),
    # Mixed schemes are written by auto_round only; 16-bit exceptions by every format.
    ({"iters": 2, "layer_config": {"q_proj": {"bits": 8}, "k_proj": "W2A16"}},
     ["--iters", 2, "--layer_config", '{"q_proj": {"bits": 8}, "k_proj": "W2A16"}'], None),
    ({"iters": 2, "layer_config": {"v_proj": {"bits": 16}}},
     ["--iters", 2, "--layer_config", '{"v_proj": {"bits": 16}}'], "auto_gptq"),
])
def test_checkpoint_bytes_equal_the_cli(tmp_path, kwargs, cli, fmt):
    ar = AutoRound(str(MODEL_DIR), **COMMON, **kwargs)
    py_dir = tmp_path / "python"
    assert ar.quantize_and_save(str(py_dir), **({"format": fmt} if fmt else {})) == str(py_dir)
    cli_dir = tmp_path / "cli"
    run_cli("quantize", "--model", MODEL_DIR, "--output_dir", cli_dir, *CLI_COMMON, *cli,
            *(["--format", fmt] if fmt else []))
    got, expected = files(py_dir), files(cli_dir)
    assert sorted(got) == sorted(expected)
    assert "model.safetensors" in got and "quantization_config.json" in got
    for name in expected:
        assert got[name] == expected[name], name
    if kwargs["iters"] == 40:
        default = tmp_path / "default"
        run_cli("quantize", "--model", MODEL_DIR, "--output_dir", default, *CLI_COMMON,
                "--iters", 40)
        assert files(default)["model.safetensors"] != got["model.safetensors"]
    assert ar.summary["n_quantized"] > 0
    assert ar.summary["bytes_after"] < ar.summary["bytes_before"]
    assert (len(ar.summary["blocks"]) == 5) == (kwargs["iters"] > 0 or
                                               not kwargs.get("disable_opt_rtn", False))


def test_settings_as_auto_round_reads_them():
    ar = AutoRound(str(MODEL_DIR), scheme="W2A16")
    assert (ar.bits, ar.group_size, ar.sym, ar.iters) == (2, 128, True, 200)
    ar = AutoRound(str(MODEL_DIR), scheme="W4A16", bits=8, group_size=32, sym=False, iters=10)
    assert (ar.bits, ar.group_size, ar.sym, ar.iters) == (8, 32, False, 10)
    # llm-compressor's presets are RTN in compressed-tensors unless told otherwise.
    ar = AutoRound(str(MODEL_DIR), scheme="W8A8")
    assert ar.iters == 0


def test_rtn_preset_bytes_equal_the_cli(tmp_path):
    AutoRound(str(MODEL_DIR), scheme="W8A8", threads=THREADS).quantize_and_save(
        str(tmp_path / "python"))
    run_cli("quantize", "--model", MODEL_DIR, "--output_dir", tmp_path / "cli", "--scheme",
            "W8A8", "--threads", THREADS)
    assert files(tmp_path / "python") == files(tmp_path / "cli")


@pytest.mark.parametrize("scheme", ["W5A16", "w4a16", "MXFP4"])
def test_wrong_scheme(tmp_path, scheme):
    with pytest.raises(ValueError) as info:
        AutoRound(str(MODEL_DIR), scheme=scheme)
    assert isinstance(info.value, quantserve.InvalidArgumentError)
    assert str(info.value) == cli_error("quantize", "--model", MODEL_DIR, "--output_dir",
                                        tmp_path / "out", "--scheme", scheme)
    still_works(tmp_path)


def test_wrong_format(tmp_path):
    ar = AutoRound(str(MODEL_DIR), **COMMON, iters=0)
    with pytest.raises(ValueError) as info:
        ar.quantize_and_save(str(tmp_path / "out"), format="gguf:q4_k_m")
    assert str(info.value) == cli_error("quantize", "--model", MODEL_DIR, "--output_dir",
                                        tmp_path / "out", "--format", "gguf:q4_k_m")
    assert not (tmp_path / "out").exists()
    still_works(tmp_path)


def test_settings_the_plan_refuses(tmp_path):
    # Errors that only planning finds (bits 5; a group size that divides no layer; a
    # layer_config key that matches nothing), with the command's messages.
    for kwargs, cli in [({"bits": 5}, ["--bits", 5]),
                        ({"group_size": 48}, ["--group_size", 48]),
                        ({"layer_config": {"no_such_layer": {"bits": 8}}},
                         ["--layer_config", '{"no_such_layer": {"bits": 8}}'])]:
        ar = AutoRound(str(MODEL_DIR), iters=0, threads=THREADS, **kwargs)
        with pytest.raises(quantserve.Error) as info:
            ar.quantize_and_save(str(tmp_path / "out"))
        assert str(info.value) == cli_error("quantize", "--model", MODEL_DIR, "--output_dir",
                                            tmp_path / "out", "--iters", 0, "--threads",
                                            THREADS, *cli)
        assert not (tmp_path / "out").exists()
    still_works(tmp_path)


def test_existing_output_and_overwrite(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("x")
    ar = AutoRound(str(MODEL_DIR), **COMMON, iters=0)
    with pytest.raises(quantserve.Error) as info:
        ar.quantize_and_save(str(out))
    assert str(info.value) == cli_error("quantize", "--model", MODEL_DIR, "--output_dir", out,
                                        *CLI_COMMON, "--iters", 0)
    assert (out / "old.txt").exists()
    ar.quantize_and_save(str(out), overwrite=True)
    assert not (out / "old.txt").exists() and (out / "model.safetensors").is_file()


def test_missing_model(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(FileNotFoundError) as info:
        AutoRound(str(missing))
    assert isinstance(info.value, quantserve.NotFoundError)
    assert str(info.value) == cli_error("quantize", "--model", missing, "--output_dir",
                                        tmp_path / "out")
    still_works(tmp_path)


def test_arguments_quantserve_does_not_take(tmp_path):
    with pytest.raises(ValueError, match="enable_adam"):
        AutoRound(str(MODEL_DIR), enable_adam=True)
    with pytest.raises(ValueError, match="platform"):
        AutoRound(str(MODEL_DIR), platform="model_scope")
    with pytest.raises(ValueError, match="tokenizer"):
        AutoRound(str(MODEL_DIR), tokenizer=object())
    with pytest.raises(ValueError, match="loaded model"):
        AutoRound(object())
    with pytest.raises(ValueError, match="fixed preset"):
        AutoRound(str(MODEL_DIR), scheme="W8A8", bits=4)
    with pytest.raises(ValueError, match="seed"):
        AutoRound(str(MODEL_DIR), seed=-1)
    with pytest.raises(TypeError, match="no_such_argument"):
        AutoRound(str(MODEL_DIR), no_such_argument=1)
    # Device and memory placement mean nothing on the CPU: accepted.
    AutoRound(str(MODEL_DIR), low_gpu_mem_usage=True, device_map="auto",
              enable_torch_compile=True)
    still_works(tmp_path)


def test_ctrl_c_stops_the_run_and_leaves_nothing(tmp_path, python_sigint):
    # Tuning blocks of thousands of iterations (about a second each here), interrupted as a
    # user's Ctrl-C would: the run stops after the block under way, its staging directory
    # is removed and the output location is as it was.
    ar = AutoRound(str(MODEL_DIR), **{**COMMON, "iters": 4000})
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            ar.quantize_and_save(str(tmp_path / "out"))
    finally:
        timer.cancel()
    # No output and no staging directory: the run was stopped, not finished and then
    # interrupted (the whole run takes about ten seconds on two cores).
    assert os.listdir(tmp_path) == []
    still_works(tmp_path)


def test_flux_pipeline_bytes_equal_the_cli(tmp_path):
    # A diffusers pipeline: its transformer's blocks quantized, the rest copied; then Omni makes
    # generate-image's pixels with the quantized transformer.
    from PIL import Image

    flux = ROOT / "tests" / "golden" / "fixtures" / "flux" / "tiny_pipeline"
    AutoRound(str(flux), iters=0, disable_opt_rtn=True, group_size=16,
              threads=THREADS).quantize_and_save(str(tmp_path / "python"))
    run_cli("quantize", "--model", flux, "--output_dir", tmp_path / "cli", "--iters", 0,
            "--disable_opt_rtn", "--group_size", 16, "--threads", THREADS)
    assert files(tmp_path / "python") == files(tmp_path / "cli")
    omni = quantserve.Omni(model=str(tmp_path / "python"), threads=THREADS)
    image = omni.generate("a cat", quantserve.OmniDiffusionSamplingParams(
        num_inference_steps=2, height=32, width=32, seed=3), use_tqdm=False)[0].images[0]
    run_cli("generate-image", "--model", tmp_path / "cli", "--prompt", "a cat", "--steps", 2,
            "--height", 32, "--width", 32, "--seed", 3, "--threads", THREADS, "--out",
            tmp_path / "cli.png")
    with Image.open(tmp_path / "cli.png") as expected:
        assert image.tobytes() == expected.tobytes()
