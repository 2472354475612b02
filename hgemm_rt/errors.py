"""Exception types. Every message names the kernel (where there is one) and the values at fault."""


class HgemmError(Exception):
    """Base class of every error this package raises on purpose."""


class ValidationError(HgemmError, ValueError):
    """Input refused before anything touched the GPU (shape, dtype, layout, alignment, divisibility)."""


class ArgumentTypeError(ValidationError, TypeError):
    """An argument of the wrong type (a list for an array, a complex or a string for alpha, a float for a
    stream, a string for a flag): a TypeError, as torch and CuPy raise; still a ValidationError (so a
    ValueError) for callers that catch every refused input that way."""


class UnknownKernelError(HgemmError, KeyError):
    """No kernel of that name in the manifest; the message lists close matches."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0]) if self.args else ""


class ManifestError(HgemmError):
    """The build artifacts are missing, stale, altered or from another schema; says how to rebuild."""


class NotBuiltForDeviceError(HgemmError):
    """No cubin (or PTX) in the manifest can run on this GPU; says which --arch to build."""


class DriverError(HgemmError, RuntimeError):
    """A CUDA driver call failed: names the operation, the kernel, the CUresult and its explanation."""

    def __init__(self, message: str, result_name: str = "", code: int = -1):
        super().__init__(message)
        self.result_name = result_name
        self.code = code


class NoGpuError(HgemmError, RuntimeError):
    """No usable CUDA driver or device on this machine."""
