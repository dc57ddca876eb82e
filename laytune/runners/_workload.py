"""What the runner needs of a workload: :class:`VerifiableWorkload`."""

from __future__ import annotations

import hashlib
from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["VerifiableWorkload", "aligned", "input_seed", "timed_cold"]

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
    workloads are), and ``weights``, the names of its inputs that are a
    model's parameters: where they outgrow the device's cache the workload
    is timed cold too (:func:`timed_cold`).

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


def timed_cold(workload: object, cache_bytes: int) -> bool:
    """Whether ``workload`` is timed with a cache flush before every timed
    repeat on a device whose cache holds ``cache_bytes`` (``DeviceInfo.cache_size``;
    0, unknown: by the workload's own say only): where it says so
    (``timed_cold``), or where its weights (``weights``: the inputs that are
    a model's parameters, read once per call) outgrow that cache. Between
    two calls in a model every other operator runs, so such weights come
    back from memory each time; timed warm, a search ranks kernels by
    caches the model never has (on BERT's FFN the kernels that prefetch the
    next block of weights were 1.05x faster warm and 1.25x with the weights
    in memory, ``bench.hand_stream``). The rule depends on the workload and
    the device alone, so every record of one on one device is timed alike."""
    if getattr(workload, "timed_cold", False):
        return True
    names = set(getattr(workload, "weights", ()))
    if cache_bytes <= 0 or not names:
        return False
    weights = sum(
        int(np.prod(b.shape)) * np.dtype(b.dtype).itemsize
        for b in getattr(workload, "buffers", ())
        if b.name in names
    )
    return weights > cache_bytes
