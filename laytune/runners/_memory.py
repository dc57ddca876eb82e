"""What a candidate needs of a device's memory, checked before anything is allocated.

The measuring process gives each buffer of a program device memory per view
(:func:`device_views`); :func:`memory_refusal` says why a set of allocations
cannot be on a device at once, from its :class:`~laytune.device_info.DeviceInfo`
(the largest single allocation, ``max_mem_alloc_size``, and the global
memory, ``global_mem_size``, both read from the device). The runner refuses
such a candidate without sending it to its worker, and ``tune`` refuses a
workload whose logical buffers alone do not fit before it starts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from laytune.codegen import BufferSpec, KernelProgram
from laytune.device_info import DeviceInfo

__all__ = ["allocation_bytes", "device_views", "memory_refusal"]


def device_views(program: KernelProgram) -> list[tuple[BufferSpec, str]]:
    """The (buffer, view) pairs the measuring process allocates: every view a
    launch names; a buffer that no launch names keeps a logical view. An
    aliased buffer (``BufferSpec.aliased``) is one allocation, its physical
    view, which its logical view names too."""
    used = {
        (ref.buffer, ref.view)
        for launch in (*program.pack, *program.compute, *program.unpack)
        for ref in launch.args
    }
    views = []
    for spec in program.buffers:
        if spec.aliased:
            views.append((spec, "physical"))
            continue
        physical = (spec.name, "physical") in used
        if (spec.name, "logical") in used or not physical:
            views.append((spec, "logical"))
        if physical:
            views.append((spec, "physical"))
    return views


def allocation_bytes(program: KernelProgram) -> dict[str, int]:
    """Bytes of each allocation, named ``"<buffer> (<view>)"`` (an image2d's
    RGBA texels take as many bytes as its flat physical shape)."""
    sizes = {}
    for spec, view in device_views(program):
        shape = spec.shape if view == "logical" else spec.physical_shape
        sizes[f"{spec.name} ({view})"] = max(1, math.prod(shape) * np.dtype(spec.dtype).itemsize)
    return sizes


def memory_refusal(info: DeviceInfo, sizes: Mapping[str, int]) -> str | None:
    """Why allocations of ``sizes`` (name -> bytes) cannot all be on the device
    described by ``info`` at once, naming the sizes; None when they can."""
    too_large = {name: n for name, n in sizes.items() if n > info.max_mem_alloc_size}
    if too_large:
        listed = ", ".join(f"{name} {_bytes(n)}" for name, n in too_large.items())
        return (
            f"{listed}: more than the {_bytes(info.max_mem_alloc_size, exact=True)} that "
            f"{info.name} allocates at most in one buffer"
        )
    total = sum(sizes.values())
    if total > info.global_mem_size:
        listed = ", ".join(f"{name} {_bytes(n)}" for name, n in sizes.items())
        return (
            f"the buffers take {_bytes(total, exact=True)} together ({listed}), more than the "
            f"{_bytes(info.global_mem_size, exact=True)} of global memory of {info.name}"
        )
    return None


def _bytes(count: int, *, exact: bool = False) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.4g} {unit}" + (f" ({count} bytes)" if exact else "")
    return f"{count} bytes"
