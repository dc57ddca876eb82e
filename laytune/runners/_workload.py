"""What the runner needs of a workload: :class:`VerifiableWorkload`."""

from __future__ import annotations

import hashlib
from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["VerifiableWorkload", "aligned", "input_seed"]

#: Where the measuring process puts the arrays of its inputs: a page. A device
#: buffer made over an input (``USE_HOST_PTR``) is then the array itself on a
#: CPU device: Intel's CPU runtime copies one that is not 64-byte aligned
#: (numpy's large arrays lie 16 bytes past a page); Intel's GPU runtime wants a page.
INPUT_ALIGNMENT = 4096


@runtime_checkable
class VerifiableWorkload(Protocol):
    """A workload the runner can feed and check.

    ``key`` names the workload (operator, shapes, dtype) and is what the
    worker caches inputs and references under. ``make_inputs(seed)`` returns
    the logical array of every input buffer of the programs measured for it,
    the same arrays for the same seed. ``reference(inputs)`` returns the
    expected logical array of every output buffer.

    A workload may also carry ``reduction_length: int``, the number of terms
    summed into each output element (1 when absent); it widens the float
    tolerance (see :meth:`laytune.runners.Tolerance.for_dtype`), and
    ``timed_cold: bool``, true to be timed with a cache flush before every
    timed run whatever ``MeasureConfig.flush_cache`` says (conversion
    workloads are).

    Workloads are sent to the worker process with cloudpickle, so a class
    defined in a notebook or a script works as well as an importable one.
    """

    @property
    def key(self) -> str: ...

    def make_inputs(self, seed: int) -> dict[str, np.ndarray]: ...

    def reference(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...


def input_seed(base_seed: int, workload_key: str) -> int:
    """The seed a workload's inputs are made with: stable across processes and runs."""
    digest = hashlib.sha256(f"{base_seed}:{workload_key}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def aligned(array: np.ndarray, alignment: int = INPUT_ALIGNMENT) -> np.ndarray:
    """``array`` itself where it is C-contiguous and starts on an ``alignment``
    boundary, else a C-contiguous copy that does (the same values, dtype and
    shape; its base holds a few spare bytes)."""
    if array.flags.c_contiguous and array.ctypes.data % alignment == 0:
        return array
    raw = np.empty(array.nbytes + alignment, dtype=np.uint8)
    start = -raw.ctypes.data % alignment
    copy = raw[start : start + array.nbytes].view(array.dtype).reshape(array.shape)
    copy[...] = array
    return copy
