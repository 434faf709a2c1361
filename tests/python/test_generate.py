"""LLM.generate against the CLI and against itself: greedy text equal to `quantserve generate`
token for token, prompt order in a batch, token-id prompts, seeded parallel sampling, stop
strings and tokens, logprobs, the progress bar, streaming, and two LLMs in one process."""

import math
import subprocess
import sys

import pytest

import quantserve
from quantserve import LLM, SamplingParams

from conftest import MODEL_DIR, THREADS, run_cli

PROMPT = "Once upon a time"
GREEDY = SamplingParams(temperature=0, max_tokens=64)


def test_greedy_text_equals_the_cli(llm):
    out = llm.generate(PROMPT, GREEDY, use_tqdm=False)
    cli = run_cli("generate", "--model", MODEL_DIR, "--prompt", PROMPT, "--max-tokens", 64,
                  "--temperature", 0, "--threads", THREADS)
    assert len(out) == 1
    completion = out[0].outputs[0]
    assert completion.text == cli.stdout
    assert len(completion.token_ids) == 64
    assert completion.finish_reason == "length"
    assert out[0].prompt == PROMPT
    assert out[0].prompt_token_ids == llm.get_tokenizer().encode(PROMPT)
    assert out[0].finished


def test_a_list_of_prompts_comes_back_in_order(llm):
    prompts = ["Once upon a time", "The little dog", "Lily and Tom went to the park", "Sam"]
    params = SamplingParams(temperature=0, max_tokens=24)
    batch = llm.generate(prompts, params, use_tqdm=False)
    assert [o.prompt for o in batch] == prompts
    assert len({o.request_id for o in batch}) == len(prompts)
    for prompt, out in zip(prompts, batch):
        alone = llm.generate(prompt, params, use_tqdm=False)[0].outputs[0]
        assert out.outputs[0].token_ids == alone.token_ids
        assert out.outputs[0].text == alone.text


def test_one_sampling_params_per_prompt(llm):
    params = [SamplingParams(temperature=0, max_tokens=5), SamplingParams(temperature=0,
                                                                          max_tokens=9)]
    out = llm.generate(["Once upon a time", "The cat"], params, use_tqdm=False)
    assert [len(o.outputs[0].token_ids) for o in out] == [5, 9]
    with pytest.raises(ValueError, match="lengths of prompts and sampling_params"):
        llm.generate(["a", "b", "c"], params, use_tqdm=False)


def test_token_id_prompts(llm):
    ids = llm.get_tokenizer().encode(PROMPT)
    by_text = llm.generate(PROMPT, GREEDY, use_tqdm=False)[0]
    by_ids = llm.generate({"prompt_token_ids": ids}, GREEDY, use_tqdm=False)[0]
    assert by_ids.prompt is None
    assert by_ids.prompt_token_ids == ids
    assert by_ids.outputs[0].token_ids == by_text.outputs[0].token_ids
    both = llm.generate([{"prompt_token_ids": ids}, {"prompt": PROMPT}], GREEDY,
                        use_tqdm=False)
    assert both[0].outputs[0].text == both[1].outputs[0].text == by_text.outputs[0].text


def test_parallel_sampling_with_a_seed_is_reproducible(llm):
    params = SamplingParams(n=4, temperature=1.0, seed=1234, max_tokens=20)
    first = llm.generate(PROMPT, params, use_tqdm=False)[0].outputs
    again = llm.generate(PROMPT, params, use_tqdm=False)[0].outputs
    assert [c.index for c in first] == [0, 1, 2, 3]
    assert [c.token_ids for c in first] == [c.token_ids for c in again]
    assert len({tuple(c.token_ids) for c in first}) > 1  # seed + i: different completions
    other = llm.generate(PROMPT, SamplingParams(n=4, temperature=1.0, seed=99, max_tokens=20),
                         use_tqdm=False)[0].outputs
    assert [c.token_ids for c in other] != [c.token_ids for c in first]
    # Completion i of a seeded request is the single request seeded with seed + i.
    second = llm.generate(PROMPT, SamplingParams(temperature=1.0, seed=1235, max_tokens=20),
                          use_tqdm=False)[0].outputs[0]
    assert second.token_ids == first[1].token_ids


def test_unseeded_requests_follow_the_llm_seed():
    params = SamplingParams(temperature=1.0, max_tokens=16)
    a = LLM(str(MODEL_DIR), threads=THREADS, seed=7)
    b = LLM(str(MODEL_DIR), threads=THREADS, seed=7)
    texts_a = [o.outputs[0].text for o in a.generate([PROMPT] * 3, params, use_tqdm=False)]
    texts_b = [o.outputs[0].text for o in b.generate([PROMPT] * 3, params, use_tqdm=False)]
    assert texts_a == texts_b
    assert len(set(texts_a)) > 1


def test_stop_strings(llm):
    full = llm.generate(PROMPT, GREEDY, use_tqdm=False)[0].outputs[0].text
    stop = full[10:16]
    assert stop and full.index(stop) == 10
    out = llm.generate(PROMPT, SamplingParams(temperature=0, max_tokens=64, stop=[stop]),
                       use_tqdm=False)[0].outputs[0]
    assert out.text == full[:10]
    assert out.finish_reason == "stop"
    assert out.stop_reason == stop
    kept = llm.generate(PROMPT, SamplingParams(temperature=0, max_tokens=64, stop=stop,
                                               include_stop_str_in_output=True),
                        use_tqdm=False)[0].outputs[0]
    assert kept.text == full[:16]


def test_stop_token_ids(llm):
    ids = llm.generate(PROMPT, GREEDY, use_tqdm=False)[0].outputs[0].token_ids
    out = llm.generate(PROMPT, SamplingParams(temperature=0, max_tokens=64,
                                              stop_token_ids=[ids[5]]),
                       use_tqdm=False)[0].outputs[0]
    first = ids.index(ids[5])
    assert out.token_ids == ids[:first + 1]
    assert out.finish_reason == "stop"
    assert out.stop_reason == ids[5]


def test_logprobs_shape(llm):
    out = llm.generate(PROMPT, SamplingParams(temperature=0, max_tokens=8, logprobs=3),
                       use_tqdm=False)[0].outputs[0]
    assert len(out.logprobs) == len(out.token_ids) == 8
    total = 0.0
    for token, entry in zip(out.token_ids, out.logprobs):
        assert token in entry
        assert 3 <= len(entry) <= 4
        assert next(iter(entry)) == token  # the sampled token first
        ranked = sorted((lp.rank, lp.logprob) for lp in entry.values() if lp.rank is not None)
        assert [r for r, _ in ranked] == [1, 2, 3]
        assert all(a >= b for (_, a), (_, b) in zip(ranked, ranked[1:]))
        assert entry[token].rank == 1  # greedy: the sampled token is the most likely
        assert all(lp.logprob <= 0 for lp in entry.values())
        assert isinstance(entry[token].decoded_token, str)
        total += entry[token].logprob
    assert math.isclose(out.cumulative_logprob, total, rel_tol=1e-6)
    plain = llm.generate(PROMPT, SamplingParams(temperature=0, max_tokens=8),
                         use_tqdm=False)[0].outputs[0]
    assert plain.logprobs is None and plain.cumulative_logprob is None
    assert plain.token_ids == out.token_ids
    only_sampled = llm.generate(PROMPT, SamplingParams(temperature=0, max_tokens=4, logprobs=0),
                                use_tqdm=False)[0].outputs[0]
    assert [len(e) for e in only_sampled.logprobs] == [1, 1, 1, 1]


def test_max_tokens_none_runs_to_the_end_of_the_context():
    llm = LLM(str(MODEL_DIR), threads=THREADS, max_model_len=40)
    out = llm.generate(PROMPT, SamplingParams(temperature=0, max_tokens=None, ignore_eos=True),
                       use_tqdm=False)[0]
    assert len(out.prompt_token_ids) + len(out.outputs[0].token_ids) == 40
    assert out.outputs[0].finish_reason == "length"


def test_eos_ignore_eos_and_min_tokens(llm, model_copy):
    # stories260K's greedy stories run past 300 tokens without </s>: make "." the model's EOS
    # (generation_config.json's eos_token_id, merged as vLLM merges them) so that one comes.
    text = llm.generate(PROMPT, GREEDY, use_tqdm=False)[0].outputs[0]
    tok = llm.get_tokenizer()
    period = next(t for t in text.token_ids if tok.decode([t]) == ".")
    first = text.token_ids.index(period)
    (model_copy / "generation_config.json").write_text(
        '{"bos_token_id": 1, "eos_token_id": [2, %d]}' % period)
    dotted = LLM(str(model_copy), threads=THREADS)
    stopped = dotted.generate(PROMPT, GREEDY, use_tqdm=False)[0].outputs[0]
    assert stopped.token_ids == text.token_ids[:first + 1]
    assert stopped.finish_reason == "stop" and stopped.stop_reason is None  # EOS, as vLLM
    ignored = dotted.generate(PROMPT, SamplingParams(temperature=0, max_tokens=64,
                                                     ignore_eos=True), use_tqdm=False)
    assert ignored[0].outputs[0].token_ids == text.token_ids
    late = dotted.generate(PROMPT, SamplingParams(temperature=0, max_tokens=64,
                                                  min_tokens=first + 3), use_tqdm=False)
    late_ids = late[0].outputs[0].token_ids
    assert len(late_ids) >= first + 3  # EOS masked until min_tokens
    assert period not in late_ids[:first + 3]


def test_default_sampling_params_come_from_generation_config(llm, model_copy):
    assert llm.get_default_sampling_params() == SamplingParams()
    (model_copy / "generation_config.json").write_text(
        '{"temperature": 0.0, "max_new_tokens": 7, "top_k": 5}')
    tuned = LLM(str(model_copy), threads=THREADS)
    defaults = tuned.get_default_sampling_params()
    assert (defaults.temperature, defaults.max_tokens, defaults.top_k) == (0.0, 7, 5)
    out = tuned.generate(PROMPT, use_tqdm=False)[0].outputs[0]
    assert len(out.token_ids) == 7
    greedy = llm.generate(PROMPT, SamplingParams(temperature=0, max_tokens=7),
                          use_tqdm=False)[0].outputs[0]
    assert out.token_ids == greedy.token_ids


def test_progress_bar_over_the_prompts(llm):
    seen = []

    class Bar:
        def __init__(self, total, desc):
            seen.append(("total", total))

        def update(self, n):
            seen.append(("update", n))

        def close(self):
            seen.append(("close",))

    llm.generate(["a", "b", "c"], SamplingParams(max_tokens=2), use_tqdm=Bar)
    assert seen == [("total", 3)] + [("update", 1)] * 3 + [("close",)]
    # tqdm's bar when tqdm is installed, silently none when it is not.
    assert len(llm.generate(["a", "b"], SamplingParams(max_tokens=2), use_tqdm=True)) == 2


def test_streaming_gives_the_same_completion(llm):
    whole = llm.generate(PROMPT, GREEDY, use_tqdm=False)[0].outputs[0]
    deltas = list(llm.generate_stream(PROMPT, GREEDY))
    assert len(deltas) > 1
    assert all(not d.finished for d in deltas[:-1]) and deltas[-1].finished
    assert "".join(d.outputs[0].text for d in deltas) == whole.text
    assert [t for d in deltas for t in d.outputs[0].token_ids] == whole.token_ids
    assert deltas[-1].outputs[0].finish_reason == "length"
    # n > 1: the deltas of each completion add up to the seeded completion generate() gives.
    params = SamplingParams(n=3, seed=5, max_tokens=12, logprobs=1)
    whole = llm.generate(PROMPT, params, use_tqdm=False)[0].outputs
    texts, last = ["", "", ""], {}
    deltas = list(llm.generate_stream(PROMPT, params))
    for d in deltas:
        texts[d.outputs[0].index] += d.outputs[0].text
        last[d.outputs[0].index] = d.outputs[0].cumulative_logprob
    assert texts == [c.text for c in whole]
    assert [last[i] for i in range(3)] == pytest.approx([c.cumulative_logprob for c in whole])
    assert [d.finished for d in deltas].count(True) == 1 and deltas[-1].finished


def test_a_stream_closed_early_is_aborted_and_others_keep_working(llm):
    stream = llm.generate_stream(PROMPT, SamplingParams(temperature=0, max_tokens=200,
                                                        ignore_eos=True))
    first = next(stream)
    assert not first.finished
    # Another call while the stream is open: it steps the engine for both.
    mid = llm.generate("The cat", SamplingParams(temperature=0, max_tokens=8), use_tqdm=False)
    assert len(mid[0].outputs[0].token_ids) == 8
    rest = next(stream)
    assert rest.outputs[0].token_ids
    stream.close()
    out = llm.generate(PROMPT, GREEDY, use_tqdm=False)[0].outputs[0]
    assert len(out.token_ids) == 64
    assert not llm._inbox  # nothing left behind for the closed stream


def test_two_llms_in_one_process(llm):
    other = LLM(str(MODEL_DIR), threads=1, enable_prefix_caching=False,
                kv_cache_dtype="bfloat16")
    a = llm.generate(PROMPT, GREEDY, use_tqdm=False)[0].outputs[0]
    b = other.generate(PROMPT, SamplingParams(temperature=0, max_tokens=64),
                       use_tqdm=False)[0].outputs[0]
    assert len(b.token_ids) == 64
    # The same model: the first tokens agree even with a bf16 KV cache.
    assert a.token_ids[:8] == b.token_ids[:8]
    assert llm.generate(PROMPT, GREEDY, use_tqdm=False)[0].outputs[0].text == a.text


def test_sampling_params_defaults_and_repr():
    p = SamplingParams()
    assert (p.n, p.temperature, p.top_p, p.top_k, p.min_p, p.seed, p.max_tokens) == \
        (1, 1.0, 1.0, 0, 0.0, None, 16)
    assert p.stop == [] and p.stop_token_ids == [] and p.logprobs is None
    assert "max_tokens=16" in repr(p)
    assert p.clone() == p
    assert SamplingParams(stop="x").stop == ["x"]


def test_the_package_ships_its_data_and_the_cli_reads_it(tmp_path):
    import os

    from quantserve import _paths

    assert (_paths.DATA_DIR / "calibration" / "c4.utf8").is_file()
    assert (_paths.DATA_DIR / "eval" / "wiki.test.raw.406").is_file()
    assert os.environ["QS_DATA_DIR"] == str(_paths.DATA_DIR)
    assert _paths.BINARY.is_file()
    # eval's default dataset comes from the package's data/, through QS_DATA_DIR.
    ok = run_cli("eval", "--model", MODEL_DIR, "--max-tokens", 64, "--seqlen", 32,
                 "--threads", THREADS)
    assert "| ppl |" in ok.stdout and "| 62 |" in ok.stdout
    elsewhere = tmp_path / "no-data"
    proc = subprocess.run([sys.executable, "-m", "quantserve", "eval", "--model", str(MODEL_DIR),
                           "--max-tokens", "64"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "QS_DATA_DIR": str(elsewhere)})
    assert proc.returncode != 0
    assert str(elsewhere / "eval" / "wiki.test.raw.406") in proc.stderr


def test_an_interrupt_between_steps_aborts_the_call(llm):
    # Ctrl-C lands between two engine steps, where Python code runs; a progress bar that
    # raises KeyboardInterrupt when the first prompt finishes puts it there deterministically.
    class Interrupt:
        def __init__(self, total, desc):
            pass

        def update(self, n):
            raise KeyboardInterrupt

        def close(self):
            pass

    params = [SamplingParams(temperature=0, max_tokens=2),
              SamplingParams(temperature=0, max_tokens=200, ignore_eos=True)]
    with pytest.raises(KeyboardInterrupt):
        llm.generate(["Once upon a time", "The cat"], params, use_tqdm=Interrupt)
    assert not llm._inbox
    out = llm.generate(PROMPT, GREEDY, use_tqdm=False)[0].outputs[0]
    assert len(out.token_ids) == 64
    assert not llm._core.has_unfinished()  # the long request was aborted, not left running


def test_two_threads_on_one_llm(llm):
    import threading

    prompts = ["Once upon a time", "The little dog", "Sam and Mia", "A big red ball"]
    params = SamplingParams(temperature=0, max_tokens=32)
    expected = {p: llm.generate(p, params, use_tqdm=False)[0].outputs[0].text for p in prompts}
    got = {}

    def work(prompt):
        for _ in range(3):
            got.setdefault(prompt, []).append(
                llm.generate(prompt, params, use_tqdm=False)[0].outputs[0].text)

    errors = []

    def guarded(prompt):
        try:
            work(prompt)
        except BaseException as e:  # noqa: B902 - reported below, not lost in the thread
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(p,)) for p in prompts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert got == {p: [expected[p]] * 3 for p in prompts}


def test_int8_lm_head_equals_the_cli():
    # The CLI's --lm-head-dtype through LLM(lm_head_dtype=): the same int8 head, the same text.
    llm = LLM(MODEL_DIR, threads=THREADS, lm_head_dtype="int8")
    out = llm.generate(PROMPT, GREEDY, use_tqdm=False)[0].outputs[0]
    cli = run_cli("generate", "--model", MODEL_DIR, "--prompt", PROMPT, "--max-tokens", 64,
                  "--temperature", 0, "--threads", THREADS, "--lm-head-dtype", "int8")
    assert out.text == cli.stdout
    with pytest.raises(ValueError, match="auto or int8"):
        LLM(MODEL_DIR, threads=THREADS, lm_head_dtype="fp4")


def test_device_is_the_clis():
    # LLM(device=) takes the CLI's --device: "cpu" gives the default's text here, a device the
    # build or machine lacks is refused at load with the reason, a misspelling with the choices.
    out = LLM(MODEL_DIR, threads=THREADS, device="cpu").generate(PROMPT, GREEDY, use_tqdm=False)
    default = LLM(MODEL_DIR, threads=THREADS).generate(PROMPT, GREEDY, use_tqdm=False)
    assert out[0].outputs[0].text == default[0].outputs[0].text
    with pytest.raises(ValueError, match="expected cpu, cuda or cuda:N"):
        LLM(MODEL_DIR, threads=THREADS, device="gpu")
    with pytest.raises(Exception, match="cuda:9"):
        LLM(MODEL_DIR, threads=THREADS, device="cuda:9")
