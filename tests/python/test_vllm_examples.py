"""Scripts written the way vLLM's offline examples are (a list of prompts and one
SamplingParams through LLM.generate; a conversation, then a batch of conversations, through
LLM.chat; the model's default sampling parameters adjusted and reused) run with only the import
line changed from `vllm` to `quantserve` and the model name pointed at a local checkpoint. Each
script runs in a fresh interpreter, as a user would run it, and must print one line per prompt
or conversation; its output is the same on a second run (LLM's seed defaults to 0)."""

import subprocess
import sys
import textwrap

from conftest import set_chat_template

GENERATE = """
from vllm import LLM, SamplingParams

prompts = [
    "Once upon a time",
    "The little dog",
    "Lily wanted to",
    "One day, a boy",
]
sampling_params = SamplingParams(temperature=0.8, top_p=0.95)
llm = LLM(model=MODEL)
outputs = llm.generate(prompts, sampling_params)
for output in outputs:
    prompt = output.prompt
    generated_text = output.outputs[0].text
    print(f"Prompt: {prompt!r}, Generated text: {generated_text!r}")
"""

CHAT = """
from vllm import LLM, SamplingParams

llm = LLM(model=MODEL)
sampling_params = SamplingParams(temperature=0.5, max_tokens=24)

def print_outputs(outputs):
    for output in outputs:
        prompt = output.prompt
        generated_text = output.outputs[0].text
        print(f"Prompt: {prompt!r}, Generated text: {generated_text!r}")

conversation = [
    {"role": "system", "content": "You tell short stories"},
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "Hello! Which story would you like?"},
    {"role": "user", "content": "One about a cat and a ball."},
]
outputs = llm.chat(conversation, sampling_params=sampling_params, use_tqdm=False)
print_outputs(outputs)

conversations = [conversation for _ in range(3)]
outputs = llm.chat(conversations, sampling_params=sampling_params, use_tqdm=True)
print_outputs(outputs)
"""

DEFAULTS = """
from vllm import LLM

llm = LLM(model=MODEL)
sampling_params = llm.get_default_sampling_params()
sampling_params.max_tokens = 20
sampling_params.temperature = 0.7
sampling_params.top_k = 40
outputs = llm.generate(["Once upon a time", "The sun"], sampling_params)
for output in outputs:
    print(f"Prompt: {output.prompt!r}, Generated text: {output.outputs[0].text!r}")
"""


def run_example(script, model_dir):
    """The script with vllm's import swapped for quantserve's, in a fresh interpreter."""
    source = textwrap.dedent(script).replace("from vllm import", "from quantserve import")
    source = f"MODEL = {str(model_dir)!r}\n" + source
    proc = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return [line for line in proc.stdout.splitlines() if line.startswith("Prompt: ")]


def test_generate_example(model_copy):
    lines = run_example(GENERATE, model_copy)
    assert len(lines) == 4
    for line, prompt in zip(lines, ["Once upon a time", "The little dog", "Lily wanted to",
                                    "One day, a boy"]):
        assert line.startswith(f"Prompt: {prompt!r}, Generated text: '")
        assert line != f"Prompt: {prompt!r}, Generated text: ''"
    assert run_example(GENERATE, model_copy) == lines


def test_chat_example(model_copy):
    set_chat_template(model_copy,
                      "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                      "{% if add_generation_prompt %}assistant:{% endif %}")
    lines = run_example(CHAT, model_copy)
    assert len(lines) == 4  # one conversation, then a batch of three
    rendered = ("system: You tell short stories\\nuser: Hello\\nassistant: Hello! Which story "
                "would you like?\\nuser: One about a cat and a ball.\\nassistant:")
    for line in lines:
        assert line.startswith(f"Prompt: '{rendered}', Generated text: '")
    assert run_example(CHAT, model_copy) == lines


def test_default_sampling_params_example(model_copy):
    lines = run_example(DEFAULTS, model_copy)
    assert len(lines) == 2
    assert lines[0].startswith("Prompt: 'Once upon a time', Generated text: '")
    assert run_example(DEFAULTS, model_copy) == lines
