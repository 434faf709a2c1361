"""The exceptions quantserve raises. Every failure that a caller's input or a file can cause
comes back from the engine as a status; each status code has its class here, which derives
from quantserve.Error and from the built-in exception a Python user would catch for it
(ValueError, FileNotFoundError, ...). The message is the one the CLI prints for the same
failure. The extension module (_core, py_status.cc) picks the class by name."""


class Error(Exception):
    """Base class of every quantserve error."""


class InvalidArgumentError(Error, ValueError):
    """A malformed argument: a bad sampling parameter, an unknown quantization method or KV
    cache dtype, a prompt longer than the context."""


class NotFoundError(Error, FileNotFoundError):
    """A model directory, file or tensor that should be there is not."""


class CorruptFileError(Error, ValueError):
    """A file is truncated or contradicts its own layout (e.g. a cut-off safetensors file)."""


class UnsupportedError(Error, NotImplementedError):
    """Valid input that quantserve does not support (yet)."""


class FileReadError(Error, OSError):
    """A file exists but cannot be read."""


class InternalError(Error, RuntimeError):
    """quantserve broke one of its own promises: please report it."""
