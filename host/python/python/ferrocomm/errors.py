"""The exceptions ferrocomm raises: one class per kind of failure, each carrying the Rust error's message and,
where one rank or argument is to blame, ``rank`` and ``argument``.

Every class derives from :class:`FerrocommError`; where a built-in exception means the same, the class derives
from it too (a :class:`DeviceTimeoutError` is a ``TimeoutError``, a :class:`RequirementError` a ``ValueError``),
so generic handlers keep working.
"""

from __future__ import annotations


class FerrocommError(RuntimeError):
    """Any failure of ferrocomm. ``rank``: the rank to blame, if one is; ``argument``: the argument, if one is."""

    def __init__(self, message: str, *, rank: int | None = None, argument: str | None = None):
        super().__init__(message)
        self.rank = rank
        self.argument = argument


class ConfigError(FerrocommError):
    """The team cannot be formed as asked: launcher variables, backend, ranks per GPU."""


class NoGpuError(ConfigError):
    """No CUDA driver or GPU where the backend asked for one."""


class RequirementError(FerrocommError, ValueError):
    """An argument breaks a rule of the call: sizes that do not match, a wrong dtype, a non-contiguous
    tensor, a message larger than the path allows."""


class ForeignBufferError(FerrocommError, ValueError):
    """A tensor the team cannot use: on another device, of another team, or a stream of another context."""


class SymmetricRequiredError(RequirementError):
    """Ordinary memory where symmetric memory (``ferrocomm.empty``) is required: peers address it."""


class DeviceError(FerrocommError):
    """A kernel recorded an error on the device (the message names rank, block, thread and signal)."""


class DeviceTimeoutError(DeviceError, TimeoutError):
    """A device wait timed out: a peer never signalled (it did not launch, waited on another epoch, or died)."""


class KernelPanicError(DeviceError):
    """Device code panicked (a bounds check, a failed assertion): a bug, with its location."""


class HostTimeoutError(FerrocommError, TimeoutError):
    """A kernel never finished; the team is unusable and a new one must be made."""


class DisagreementError(FerrocommError):
    """The ranks made different calls (sizes, order) where they must agree."""


class PeersExitedError(FerrocommError):
    """Processes of the team exited while the others waited for them."""


class CapturingError(FerrocommError):
    """A call that cannot be recorded was made while a graph was being captured."""


class UnsupportedError(FerrocommError):
    """The backend cannot do this (the emulator has no CUDA streams)."""


class CudaError(FerrocommError):
    """A CUDA driver call failed."""


__all__ = [
    "FerrocommError",
    "ConfigError",
    "NoGpuError",
    "RequirementError",
    "ForeignBufferError",
    "SymmetricRequiredError",
    "DeviceError",
    "DeviceTimeoutError",
    "KernelPanicError",
    "HostTimeoutError",
    "DisagreementError",
    "PeersExitedError",
    "CapturingError",
    "UnsupportedError",
    "CudaError",
]
