"""quantserve: an inference engine for quantized LLMs, with vLLM's offline API.

    from quantserve import LLM, SamplingParams
    llm = LLM("models/stories260K")
    outputs = llm.generate(["Once upon a time"], SamplingParams(temperature=0, max_tokens=32))
    print(outputs[0].outputs[0].text)

See docs/python.md. The `quantserve` command (the CLI) is installed with the package."""

from ._paths import export_data_dir

export_data_dir()  # before the engine can read a data file

from .errors import (  # noqa: E402
    CorruptFileError,
    Error,
    FileReadError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    UnsupportedError,
)
from .llm import LLM  # noqa: E402
from .autoround import AutoRound  # noqa: E402
from .evaluate import evaluate  # noqa: E402
from .omni import Omni  # noqa: E402
from .omni_outputs import OmniRequestOutput  # noqa: E402
from .omni_params import OmniDiffusionSamplingParams  # noqa: E402
from .outputs import CompletionOutput, Logprob, RequestOutput  # noqa: E402
from .sampling_params import SamplingParams  # noqa: E402
from .tokenizer import Tokenizer  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "LLM",
    "SamplingParams",
    "RequestOutput",
    "CompletionOutput",
    "Logprob",
    "Tokenizer",
    "Omni",
    "OmniDiffusionSamplingParams",
    "OmniRequestOutput",
    "AutoRound",
    "evaluate",
    "Error",
    "InvalidArgumentError",
    "NotFoundError",
    "CorruptFileError",
    "UnsupportedError",
    "FileReadError",
    "InternalError",
]
