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

from laytune._lazy import lazy_exports

TYPE_CHECKING = False  # not typing's: importing typing would slow every worker's start
if TYPE_CHECKING:
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

# each name is imported on first use: a worker process that unpickles one
# class of this package imports that class's module, not the whole package
__getattr__, __dir__ = lazy_exports(
    globals(),
    {
        "laytune.codegen._conversion": ("ConversionKernel",),
        "laytune.codegen._convert": ("conversion_kernel", "lower_conversion_workload"),
        "laytune.codegen._lower": ("GENERIC_DEVICE", "lower", "lower_conversion"),
        "laytune.codegen._nest": ("GridDim", "Nest", "ReduceLoop", "Tile", "plan_nest"),
        "laytune.codegen._program": ("ArgRef", "BufferSpec", "KernelProgram", "Launch"),
    },
)
