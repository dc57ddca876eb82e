"""Lowering a (workload, candidate) to OpenCL source: the KernelProgram.

Pipeline stage after :mod:`laytune.space`: :func:`lower` turns a workload of
:mod:`laytune.ops` and a :class:`~laytune.space.Candidate` into the compute
kernel (every access through the candidate's layouts) and the pack/unpack
kernels between logical and physical layouts; a
:class:`~laytune.space.ConversionWorkload` (a buffer from one layout to
another) lowers to the conversion kernel its candidate's knobs describe.
Nothing here touches a device.
"""

from __future__ import annotations

from laytune.codegen._conversion import ConversionKernel
from laytune.codegen._convert import conversion_kernel, lower_conversion_workload
from laytune.codegen._lower import GENERIC_DEVICE, lower, lower_conversion
from laytune.codegen._nest import GridDim, Nest, ReduceLoop, Tile, plan_nest
from laytune.codegen._program import ArgRef, BufferSpec, KernelProgram, Launch

__all__ = [
    "GENERIC_DEVICE",
    "ArgRef",
    "BufferSpec",
    "ConversionKernel",
    "GridDim",
    "KernelProgram",
    "Launch",
    "Nest",
    "ReduceLoop",
    "Tile",
    "conversion_kernel",
    "lower",
    "lower_conversion",
    "lower_conversion_workload",
    "plan_nest",
]
