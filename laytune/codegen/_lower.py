"""Lowering a workload and a candidate to a KernelProgram.

``lower`` is a pipeline of small steps:

1. ``check_candidate`` (laytune.space) decides whether the candidate is
   valid on the device: the same rules the search space samples with.
2. :func:`~laytune.codegen._nest.plan_nest` plans the loop nest as data:
   the NDRange, the register block and its vectors, the reduce loops, the
   staging (:mod:`._nest`).
3. :func:`~laytune.codegen._kernel.compute_kernel` walks the nest into the
   compute kernel (:mod:`._grid` the prologue, :mod:`._stage` the local
   tiles, :mod:`._kernel` the loops, loads, updates and stores); a
   candidate with a ``matrix`` instruction gets
   :func:`~laytune.codegen._matrix.matrix_kernel` instead (the same buffer
   accesses and tile layouts, the instruction's fragment loads).
4. The pack and unpack kernels of every buffer (:mod:`._conversion`) and the
   fill of an output's padding complete the program. A buffer held in its
   identity layout in global memory has none: its physical storage is its
   logical array, one device buffer (:attr:`BufferSpec.aliased`), so a
   call pays no copy of it.

The knobs and their meaning are :mod:`laytune.space._knobs`'s; a knob
missing from a candidate takes its default there.
"""

from __future__ import annotations

import math

from laytune.codegen._conversion import pack_kernel, unpack_kernel
from laytune.codegen._convert import lower_conversion_workload
from laytune.codegen._emit import Scope, c_bits, storage_ctype
from laytune.codegen._grid import padding_tests
from laytune.codegen._kernel import compute_kernel
from laytune.codegen._matrix import matrix_kernel
from laytune.codegen._nest import plan_nest
from laytune.codegen._program import ArgRef, BufferSpec, KernelProgram, Launch
from laytune.codegen._source import Source, decompose, indent
from laytune.device_info import DeviceInfo
from laytune.exceptions import LayoutRejectedError
from laytune.layout import UNDEF, Layout, Var
from laytune.ops import BufferDecl, Workload
from laytune.space import (
    STORAGE_HALF_VARIANTS,
    Candidate,
    ConversionWorkload,
    check_candidate,
    complete_knobs,
)

__all__ = ["GENERIC_DEVICE", "lower", "lower_conversion"]

GENERIC_DEVICE = DeviceInfo(
    platform_name="generic",
    device_name="generic OpenCL device",
    max_work_group_size=1024,
    max_work_item_sizes=(1024, 1024, 64),
    local_mem_size=32 * 1024,
    image_support=True,
    image2d_max_width=16384,
    image2d_max_height=16384,
    extensions=("cl_khr_fp16",),
)
"""The limits ``lower(..., device=None)`` checks a candidate against."""


def _reject(why: str | list[str]) -> LayoutRejectedError:
    reasons = [why] if isinstance(why, str) else why
    return LayoutRejectedError("candidate rejected: " + "; ".join(reasons))


def _pad_float(value: object) -> float | None:
    return None if value is None or value is UNDEF else float(value)  # type: ignore[arg-type]


def _aliased(layout: Layout, memory: str) -> bool:
    """Whether a buffer in ``layout`` and ``memory`` keeps its logical array
    as its physical storage: an identity map in global memory with no
    padding (as many physical elements as logical ones). Decided from the
    map's form and the shapes, never from its elements."""
    return (
        memory == "global"
        and layout.is_identity
        and layout.physical_size == math.prod(layout.shape)
    )


def _buffer_spec(
    name: str,
    layout: Layout,
    dtype: str,
    role: str,
    memory: str,
    pad: float | None,
    *,
    may_alias: bool = True,
) -> BufferSpec:
    physical = layout.flat_shape if memory == "image2d" else (layout.physical_size,)
    return BufferSpec(
        name,
        dtype,
        layout.shape,
        physical,
        role,  # type: ignore[arg-type]
        memory,  # type: ignore[arg-type]
        pad,
        aliased=may_alias and _aliased(layout, memory),
    )


def lower(
    workload: Workload, candidate: Candidate, device: DeviceInfo | None = None
) -> KernelProgram:
    """The KernelProgram of ``workload`` under ``candidate``.

    Refuses (:class:`~laytune.exceptions.LayoutRejectedError`, with the
    reasons) every candidate that ``laytune.space.check_candidate`` rejects on
    ``device`` (``GENERIC_DEVICE`` when None). A
    :class:`~laytune.space.ConversionWorkload` lowers through
    :func:`~laytune.codegen.lower_conversion_workload`. Missing knobs take their
    defaults (:func:`laytune.space.baseline_knobs`). Outputs may carry a
    constant pad value, which the program writes into their padding.
    """
    if isinstance(workload, ConversionWorkload):
        return lower_conversion_workload(workload, candidate, device or GENERIC_DEVICE)
    device = device or GENERIC_DEVICE
    knobs = complete_knobs(workload, candidate.knob_map)
    layouts = candidate.layout_map
    outputs = {b.name for b in workload.buffers if b.role == "output"}
    pads = dict(candidate.pad_values)
    checked = Candidate.make(layouts, knobs, {k: v for k, v in pads.items() if k not in outputs})
    verdict = check_candidate(workload, checked, device)
    if not verdict.ok:
        raise _reject(list(verdict.reasons))
    for decl in workload.buffers:
        if layouts[decl.name].physical_size >= 2**31:
            raise _reject(
                f"buffer {decl.name!r} has {layouts[decl.name].physical_size} physical elements; "
                f"the compute kernel indexes with 32-bit ints"
            )
    nest = plan_nest(workload, knobs, layouts, pads, device.cacheline_size or 64)
    source = Source(f"{workload.name}: {workload.describe()}")
    compute_name = f"{workload.name}_compute"
    if knobs.get("matrix", "none") != "none":
        if workload.statement.epilogue is not None:
            raise _reject("a matrix instruction's kernel has no epilogue; this statement has one")
        kernel, launch = matrix_kernel(nest, compute_name)
    else:
        kernel, launch = compute_kernel(nest, compute_name)
    source.add(kernel, workload.dtype, computes=knobs.get("matrix") not in STORAGE_HALF_VARIANTS)
    compute, specs, pack, unpack = [launch], [], [], []
    for decl in workload.buffers:
        layout, memory = layouts[decl.name], nest.memory[decl.name]
        pad_value = pads.get(decl.name)
        pad = _pad_float(pad_value)
        spec = _buffer_spec(decl.name, layout, decl.dtype, decl.role, memory, pad)
        specs.append(spec)
        if spec.aliased:
            continue  # the kernels read and write the caller's array itself
        if decl.role == "input":
            k = pack_kernel(decl.name, layout, decl.dtype, pad_value, memory)
            source.add(k.source, decl.dtype, computes=memory == "image2d")
            views = (ArgRef(decl.name, "logical"), ArgRef(decl.name, "physical"))
            pack.append(Launch(k.name, views, (k.global_size,)))
            continue
        if layout.has_padding and pad is not None and nest.order != decl.name:
            source.add(_fill_padding_kernel(decl, layout, pad), decl.dtype, computes=False)
            fill = (ArgRef(decl.name, "physical"),)
            compute.append(Launch(f"{decl.name}_fill_padding", fill, (layout.physical_size,)))
        k = unpack_kernel(decl.name, layout, decl.dtype, memory)
        source.add(k.source, decl.dtype, computes=memory == "image2d")
        views = (ArgRef(decl.name, "physical"), ArgRef(decl.name, "logical"))
        unpack.append(Launch(k.name, views, (k.global_size,)))
    cand = Candidate.make(layouts, knobs, pads)
    return KernelProgram(
        name=f"{workload.name}_{cand.key[:10]}",
        source=source.text(),
        buffers=tuple(specs),
        compute=tuple(compute),
        pack=tuple(pack),
        unpack=tuple(unpack),
    )


def lower_conversion(
    name: str,
    layout: Layout,
    dtype: str = "float32",
    pad_value: object = None,
    memory: str = "global",
    elements_per_item: int | None = None,
) -> KernelProgram:
    """A program of one input buffer with only its pack and unpack launches
    (``compute`` is empty): for testing and measuring a layout conversion.
    ``elements_per_item`` forces the elementwise kernel (1: naive)."""
    source = Source(f"conversions of {name}: {layout.index_map}")
    pack = pack_kernel(name, layout, dtype, pad_value, memory, elements_per_item)
    unpack = unpack_kernel(name, layout, dtype, memory, elements_per_item)
    source.add(pack.source, dtype, computes=memory == "image2d")
    source.add(unpack.source, dtype, computes=memory == "image2d")
    # never aliased: converting is this program's whole point, even to the identity
    spec = _buffer_spec(
        name, layout, dtype, "input", memory, _pad_float(pad_value), may_alias=False
    )
    return KernelProgram(
        name=f"{name}_conversion",
        source=source.text(),
        buffers=(spec,),
        compute=(),
        pack=(
            Launch(
                pack.name, (ArgRef(name, "logical"), ArgRef(name, "physical")), (pack.global_size,)
            ),
        ),
        unpack=(
            Launch(
                unpack.name,
                (ArgRef(name, "physical"), ArgRef(name, "logical")),
                (unpack.global_size,),
            ),
        ),
    )


def _fill_padding_kernel(decl: BufferDecl, layout: Layout, pad: float) -> str:
    """A kernel writing ``pad`` into every padding position of an output."""
    scope = Scope()
    pshape = layout.physical_shape
    gid = scope.var("gid", 0, layout.physical_size - 1)
    names = [f"p{t}" for t in range(len(pshape))]
    lines, phys = decompose(scope, "int", gid, list(pshape), names, [1] * len(pshape))
    tests = padding_tests(scope, layout.inverse().conditions, [Var(p.index) for p in phys])
    body = [f"const int {scope.name(gid)} = get_global_id(0);", *lines]
    body.append(
        f"if ({' || '.join(tests)}) {decl.name}[{scope.name(gid)}] = {c_bits(pad, decl.dtype)};"
    )
    ctype = storage_ctype(decl.dtype)  # bits: no cl_khr_fp16 for a fill
    head = [
        f"/* pad value {pad} into the padding of {decl.name}: {layout.index_map} */",
        f"__kernel void {decl.name}_fill_padding(__global {ctype}* restrict {decl.name}) {{",
    ]
    return "\n".join([*head, *indent(body), "}"])
