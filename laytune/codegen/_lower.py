"""Lowering a workload and a candidate to a KernelProgram.

The compute kernel runs a 1-D NDRange over the spatial points; every buffer
access goes through the candidate's layout of that buffer. Knobs (see
``laytune.space._workload`` for the vocabulary):

* ``order``: ``"logical"`` decomposes the item index row-major over the
  spatial axes; a buffer name walks that buffer's physical positions and
  recovers the spatial point through the layout's inverse (padding positions
  are skipped, or get the output's constant pad value).
* ``per_item`` / ``vector``: a work-item computes ``per_item`` consecutive
  points of the innermost spatial axis, ``vector`` at a time with
  ``vloadN``/``vstoreN`` for every buffer indexed by that axis's bare variable;
  loads that do not depend on it are hoisted out of the tile (a register tile).
* ``unroll``: the innermost reduce loop is unrolled by hand.
* ``local_stage``: a work-group computes one block of outputs of the
  workload's staging plan (:func:`laytune.space.staging_plan`: matmul's
  declared 16 x 16 tiles, conv2d's input patch with the halo of its window).
  Per stage it copies every input's footprint into a ``__local`` tile laid
  out by the candidate's ``"<name>.local"`` layout (zero outside the input:
  convolution padding, blocks that overshoot the output), waits at a
  barrier, and reduces over the tiles; points of an overshooting block store
  nothing.
* ``pad_mode``: a reduce loop over a padded physical extent (see
  :mod:`laytune.codegen._analysis`) tests ``r < E`` ("guard") or reads the
  neutral padding ("overcompute").
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from laytune.codegen._analysis import PaddedLoop, neutral_at_padding, padded_loop
from laytune.codegen._conversion import pack_kernel, unpack_kernel
from laytune.codegen._emit import (
    BufferAccess,
    Scope,
    c_float,
    c_ident,
    contiguous_along,
    ctype_of,
    paren,
)
from laytune.codegen._program import ArgRef, BufferSpec, KernelProgram, Launch
from laytune.codegen._source import Source, decompose, indent, split_index
from laytune.device_info import DeviceInfo
from laytune.exceptions import LayoutRejectedError
from laytune.layout import UNDEF, Condition, Const, Expr, Layout, Var
from laytune.layout._expr import substitute, variables
from laytune.ops._statement import BinaryOp, Literal, Load, Negate, Value, loads
from laytune.ops._workload import BufferDecl, Workload
from laytune.space import (
    Candidate,
    StagedInput,
    StagingPlan,
    check_candidate,
    local_buffer_name,
    staging_plan,
)

__all__ = ["DEFAULT_KNOBS", "GENERIC_DEVICE", "lower", "lower_conversion"]

DEFAULT_KNOBS: dict[str, Any] = {
    "order": "logical",
    "work_group": 0,
    "per_item": 1,
    "vector": 1,
    "unroll": 1,
    "local_stage": False,
    "pad_mode": "guard",
}
"""What a knob missing from a candidate means."""

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


@dataclass
class _Plan:
    workload: Workload
    layouts: dict[str, Layout]
    knobs: dict[str, Any]
    pad_values: dict[str, object]
    memory: dict[str, str] = field(default_factory=dict)


def lower(
    workload: Workload, candidate: Candidate, device: DeviceInfo | None = None
) -> KernelProgram:
    """The KernelProgram of ``workload`` under ``candidate``.

    Refuses (:class:`~laytune.exceptions.LayoutRejectedError`, with the
    reasons) every candidate that ``laytune.space.check_candidate`` rejects on
    ``device`` (``GENERIC_DEVICE`` when None) and every one this code
    generator cannot serve exactly. Missing knobs take ``DEFAULT_KNOBS``.
    Outputs may carry a constant pad value, which the program writes into
    their padding.
    """
    device = device or GENERIC_DEVICE
    knobs = {**DEFAULT_KNOBS, **candidate.knob_map}
    layouts = candidate.layout_map
    outputs = {b.name for b in workload.buffers if b.role == "output"}
    pads = {name: value for name, value in candidate.pad_values}
    checked = Candidate.make(layouts, knobs, {k: v for k, v in pads.items() if k not in outputs})
    verdict = check_candidate(workload, checked, device)
    if not verdict.ok:
        raise _reject(list(verdict.reasons))
    plan = _Plan(workload, layouts, knobs, pads)
    if workload.dtype == "float16" and not device.supports_fp16:
        raise _reject(f"dtype float16 needs cl_khr_fp16, which {device.name} lacks")
    for decl in workload.buffers:
        layout = layouts[decl.name]
        if layout.physical_size >= 2**31:
            raise _reject(
                f"buffer {decl.name!r} has {layout.physical_size} physical elements; the compute "
                f"kernel indexes with 32-bit ints"
            )
        if layout.image_rank == 2:
            if decl.dtype != "float32":
                raise _reject(
                    f"image2d buffer {decl.name!r}: this codegen reads float32 images only"
                )
            plan.memory[decl.name] = "image2d"
        else:
            plan.memory[decl.name] = "global"
    return _Lowering(plan).program()


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
    source.add(pack.source, dtype)
    source.add(unpack.source, dtype)
    spec = _buffer_spec(name, layout, dtype, "input", memory, _pad_float(pad_value))
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


def _buffer_spec(
    name: str, layout: Layout, dtype: str, role: str, memory: str, pad: float | None
) -> BufferSpec:
    physical = layout.flat_shape if memory == "image2d" else (layout.physical_size,)
    return BufferSpec(name, dtype, layout.shape, physical, role, memory, pad)  # type: ignore[arg-type]


class _Lowering:
    def __init__(self, plan: _Plan) -> None:
        self.plan = plan
        self.w = plan.workload
        self.ctype = ctype_of(self.w.dtype)
        self.knobs = plan.knobs
        self.scope = Scope()
        # the workload's axis variables are the first scope variables: Var(k) is axis k
        self.axis_vars = [self.scope.var(a.name, 0, a.extent - 1) for a in self.w.axes]
        self.access = {
            d.name: BufferAccess(d.name, d.name, plan.layouts[d.name], d.dtype, plan.memory[d.name])
            for d in self.w.buffers
        }
        self.inner = self.w.spatial_axes[-1]
        self.per_item = int(self.knobs["per_item"])
        self.vector = int(self.knobs["vector"])
        self.groups = self.per_item // self.vector
        self.order = self.knobs["order"]
        self.stage = bool(self.knobs["local_stage"])
        self.unroll = int(self.knobs["unroll"])
        self.overcompute = self.knobs["pad_mode"] == "overcompute"
        self.loops: dict[int, PaddedLoop] = {}
        self.grown: set[tuple[str, int]] = set()  # (buffer, dim) read over a padded extent
        self.staging: StagingPlan | None = staging_plan(self.w) if self.stage else None
        self.staged: dict[str, BufferAccess] = {}
        self.block_base: dict[int, Var] = {}  # first point of the work-group's block, per axis
        self.tile_notes: dict[str, str] = {}  # what each local tile holds, for the comments
        # values an axis variable takes: its extent, or the blocks' span when they overshoot it
        self.spans = [a.extent for a in self.w.axes]
        self.base: Var | None = None  # first point of the register tile
        # the register tile's vector group: a variable, so that offsets within a block simplify
        self.g = self.scope.var("g", 0, self.groups - 1)
        self.block_offset: dict[int, Expr] = {}  # a point's offset within its block, per axis

    # -- checks of what this code generator relies on -----------------------
    def _check(self) -> None:
        w, layouts = self.w, self.plan.layouts
        if self.vector > 1:
            for decl in w.buffers:
                dims = [d for d, e in enumerate(decl.indices) if e == Var(self.inner)]
                if not dims:
                    continue
                row = layouts[decl.name].flat_shape[-1]
                if self.plan.memory[decl.name] == "image2d" and row % self.vector:
                    raise _reject(
                        f"vector {self.vector} on image2d buffer {decl.name!r}: its rows of {row} "
                        f"elements do not split into runs of {self.vector}"
                    )
                why = contiguous_along(layouts[decl.name], dims[0], self.vector)
                if why:
                    raise _reject(f"vector {self.vector} on buffer {decl.name!r}: {why}")
        if self.stage:
            return  # the copy reads only inside the inputs; no loop runs over padding
        for axis in w.reduce_axes:
            loop = padded_loop(w, layouts, axis)
            if loop is None:
                continue
            if axis == w.reduce_axes[-1] and loop.extent % self.unroll:
                continue  # keep the logical extent, which the unroll divides
            if self.overcompute:
                why = neutral_at_padding(w, loop, self.plan.pad_values)
                if why:
                    raise _reject(why)
            self.loops[axis] = loop
            # offsets of the buffers read there are simplified on the grown extent
            self.scope.set_range(self.axis_vars[axis], 0, loop.extent - 1)
            for name, dim in loop.dims:
                acc = self.access[name]
                shape = list(acc.offset_shape or acc.layout.shape)
                shape[dim] = loop.extent
                self.access[name] = BufferAccess(
                    acc.name, acc.c_name, acc.layout, acc.dtype, acc.memory, tuple(shape)
                )
                self.grown.add((name, dim))

    # -- program ------------------------------------------------------------
    def program(self) -> KernelProgram:
        self._check()
        w = self.w
        source = Source(f"{w.name}: {w.describe()}")
        compute_name = f"{w.name}_compute"
        kernel, items, local = self._compute_kernel(compute_name)
        source.add(kernel, w.dtype)
        args = tuple(ArgRef(d.name, "physical") for d in w.buffers)
        compute = [Launch(compute_name, args, (items,), local)]
        specs, pack, unpack = [], [], []
        for decl in w.buffers:
            layout = self.plan.layouts[decl.name]
            memory = self.plan.memory[decl.name]
            pad_value = self.plan.pad_values.get(decl.name)
            pad = _pad_float(pad_value)
            specs.append(_buffer_spec(decl.name, layout, decl.dtype, decl.role, memory, pad))
            if decl.role == "input":
                k = pack_kernel(decl.name, layout, decl.dtype, pad_value, memory)
                source.add(k.source, decl.dtype)
                views = (ArgRef(decl.name, "logical"), ArgRef(decl.name, "physical"))
                pack.append(Launch(k.name, views, (k.global_size,)))
                continue
            if layout.has_padding and pad is not None and self.order != decl.name:
                source.add(self._fill_padding_kernel(decl, layout, pad), decl.dtype)
                fill = (ArgRef(decl.name, "physical"),)
                compute.append(Launch(f"{decl.name}_fill_padding", fill, (layout.physical_size,)))
            k = unpack_kernel(decl.name, layout, decl.dtype, memory)
            source.add(k.source, decl.dtype)
            views = (ArgRef(decl.name, "physical"), ArgRef(decl.name, "logical"))
            unpack.append(Launch(k.name, views, (k.global_size,)))
        cand = Candidate.make(self.plan.layouts, self.knobs, self.plan.pad_values)
        return KernelProgram(
            name=f"{w.name}_{cand.key[:10]}",
            source=source.text(),
            buffers=tuple(specs),
            compute=tuple(compute),
            pack=tuple(pack),
            unpack=tuple(unpack),
        )

    # -- the compute kernel --------------------------------------------------
    def _params(self) -> str:
        params = []
        for decl in self.w.buffers:
            if self.plan.memory[decl.name] == "image2d":
                params.append(f"__read_only image2d_t {decl.name}")
            elif decl.role == "input":
                params.append(f"__global const {self.ctype}* restrict {decl.name}")
            else:
                params.append(f"__global {self.ctype}* restrict {decl.name}")
        return ", ".join(params)

    def _comments(self) -> list[str]:
        lines = [f"/* {self.w.statement.text}"]
        for decl in self.w.buffers:
            layout = self.plan.layouts[decl.name]
            extra = ""
            if layout.has_padding:
                extra = f", padding holds {self.plan.pad_values.get(decl.name)!r}"
            memory = " (image2d)" if self.plan.memory[decl.name] == "image2d" else ""
            lines.append(f"   {decl.name}{list(decl.shape)}: {layout.index_map}{memory}{extra}")
        for buffer, acc in self.staged.items():
            lines.append(
                f"   {acc.name}{list(acc.shape)} (__local, {self.tile_notes[buffer]}): "
                f"{acc.layout.index_map}"
            )
        knobs = ", ".join(f"{k}={v}" for k, v in sorted(self.knobs.items()))
        lines.append(f"   {knobs} */")
        return lines

    def _compute_kernel(self, name: str) -> tuple[str, int, tuple[int, ...] | None]:
        group = int(self.knobs["work_group"])
        if self.stage:
            head, items = self._staged_decompose(group)
        elif self.order != "logical":
            head, items = self._physical_decompose()
        else:
            head, items = self._logical_decompose()
        body = head + self._compute_body()
        lines = self._comments()
        lines.append(f"__kernel void {name}({self._params()}) {{")
        lines += indent(body)
        lines.append("}")
        return "\n".join(lines), items, ((group,) if group else None)

    def _declare_axis(self, k: int, value: Expr) -> list[str]:
        if self.w.axes[k].extent == 1:
            return []  # the constant 0, folded wherever it is used
        v = self.axis_vars[k]
        return [f"const int {self.scope.name(v)} = {self.scope.c(value)};"]

    def _declare_base(self, value: Expr) -> list[str]:
        span = self.spans[self.inner]
        self.base = self.scope.var(f"{self.w.axes[self.inner].name}0", 0, span - self.per_item)
        return [f"const int {self.scope.name(self.base)} = {self.scope.c(value)};"]

    def _logical_decompose(self) -> tuple[list[str], int]:
        w, scope = self.w, self.scope
        spatial = list(w.spatial_axes)
        extents = [w.axes[k].extent for k in spatial]
        extents[-1] //= self.per_item
        items = math.prod(extents)
        gid = scope.var("gid", 0, items - 1)
        lines = [f"const int {scope.name(gid)} = get_global_id(0);"]
        steps = [1] * (len(spatial) - 1) + [self.per_item]
        for k, value in zip(spatial, split_index(gid, extents, steps), strict=True):
            if k == self.inner and self.groups > 1:
                lines += self._declare_base(value)
            else:
                lines += self._declare_axis(k, value)
        return lines, items

    def _physical_decompose(self) -> tuple[list[str], int]:
        w, scope = self.w, self.scope
        decl = w.buffer(self.order)
        layout = self.plan.layouts[decl.name]
        pshape = layout.physical_shape
        items = layout.physical_size
        gid = scope.var("gid", 0, items - 1)
        lines = [
            f"const int {scope.name(gid)} = get_global_id(0);",
            f"/* work-items walk the physical positions of {decl.name} */",
        ]
        names = [f"p{t}" for t in range(len(pshape))]
        decl_lines, phys = decompose(scope, "int", gid, list(pshape), names, [1] * len(pshape))
        lines += decl_lines
        inverse = layout.inverse()
        values = [Var(p.index) for p in phys]
        if inverse.conditions:
            tests = _padding_tests(scope, inverse.conditions, values)
            pad = _pad_float(self.plan.pad_values.get(decl.name)) if decl.role == "output" else None
            lines.append(f"if ({' || '.join(tests)}) {{  /* padding */")
            if pad is not None:
                lines.append(f"    {decl.name}[{scope.name(gid)}] = {c_float(pad, decl.dtype)};")
            lines.append("    return;")
            lines.append("}")
        for d, index in enumerate(decl.indices):
            k = index.index  # type: ignore[union-attr]
            lines += self._declare_axis(k, substitute(inverse.index_map.outputs[d], values))
        return lines, items

    def _staged_decompose(self, group: int) -> tuple[list[str], int]:
        """A work-group computes one block of outputs of the staging plan:
        ``grp`` picks the block, ``lid`` the point (register tile) in it."""
        w, scope, plan = self.w, self.scope, self.staging
        assert plan is not None
        for staged in plan.inputs:
            local = local_buffer_name(staged.buffer)
            self.staged[staged.buffer] = BufferAccess(
                local,
                c_ident(local),
                self.plan.layouts[local],
                w.buffer(staged.buffer).dtype,
                "local",
            )
        spatial = list(plan.spatial)
        blocked = [k for k in spatial if plan.block[k] > 1]
        grp = scope.var("grp", 0, plan.groups - 1)
        self.lid = scope.var("lid", 0, group - 1)
        lines = [
            f"const int {scope.name(grp)} = get_group_id(0);",
            f"const int {scope.name(self.lid)} = get_local_id(0);",
        ]
        counts = [plan.counts[k] for k in spatial]
        steps = [plan.block[k] for k in spatial]
        for k, value in zip(spatial, split_index(grp, counts, steps), strict=True):
            if plan.block[k] == 1:
                lines += self._declare_axis(k, value)  # one value per work-group
                continue
            span = plan.counts[k] * plan.block[k]
            self.spans[k] = span
            # a block may run past the extent: the axis variable ranges over the blocks
            scope.set_range(self.axis_vars[k], 0, span - 1)
            base = scope.var(f"{w.axes[k].name}_blk", 0, span - plan.block[k])
            self.block_base[k] = base
            if plan.counts[k] > 1:  # else the constant 0, folded wherever it is used
                lines.append(f"const int {scope.name(base)} = {scope.c(value)};")
        extents = [plan.block[k] for k in blocked]
        extents[-1] //= self.per_item
        steps = [1] * (len(blocked) - 1) + [self.per_item]
        names = [f"{w.axes[k].name}_in" for k in blocked]
        offset_lines, offsets = decompose(scope, "int", self.lid, extents, names, steps)
        lines += offset_lines
        for k, offset in zip(blocked, offsets, strict=True):
            value = Var(self.block_base[k].index) + Var(offset.index)
            if k == self.inner and self.groups > 1:
                lines += self._declare_base(value)
                self.block_offset[k] = Var(offset.index) + Var(self.g.index) * self.vector
            else:
                lines += self._declare_axis(k, value)
                self.block_offset[k] = Var(offset.index)
        return lines, plan.groups * group

    # -- body -------------------------------------------------------------------
    def _vtype(self) -> str:
        return f"{self.ctype}{self.vector}" if self.vector > 1 else self.ctype

    def _combine(self, value: str, acc: str) -> list[str]:
        if self.w.reduction == "sum":
            return [f"{acc} += {value};"]
        return [f"{acc} = fmax({acc}, {value});"]

    def _compute_body(self) -> list[str]:
        w = self.w
        out = w.output
        if w.reduction is None:
            return self._tile(lambda value, acc: [self._store(out, value)])
        init = c_float(0.0 if w.reduction == "sum" else -math.inf, w.dtype)
        vt = self._vtype()
        if self.groups > 1:
            g = self.scope.name(self.g)
            lines = [
                f"{vt} acc[{self.groups}];",
                f"for (int {g} = 0; {g} < {self.groups}; ++{g}) acc[{g}] = {init};",
            ]
        else:
            lines = [f"{vt} acc = {init};"]
        if self.stage:
            lines += self._staged_loops()
        else:
            lines += self._reduce_loops(self._tile(self._combine))
        acc = self._acc()
        store = self._store(out, acc)
        outside = self._overshoot_tests()
        if outside:
            store = f"if ({' && '.join(outside)}) {store}  /* the block overshoots the output */"
        lines += self._tile_frame([store], hoisted=[])
        return lines

    def _overshoot_tests(self) -> list[str]:
        """Tests that a point of a staged block lies inside the output."""
        return [
            f"{self.scope.name(self.axis_vars[k])} < {self.w.axes[k].extent}"
            for k in self.block_base
            if self.spans[k] > self.w.axes[k].extent
        ]

    def _store(self, decl: BufferDecl, value: str) -> str:
        return self.access[decl.name].store(list(decl.indices), value, self.scope, self.vector)

    def _acc(self) -> str:
        return f"acc[{self.scope.name(self.g)}]" if self.groups > 1 else "acc"

    def _tile_frame(self, per_group: list[str], hoisted: list[str]) -> list[str]:
        """``per_group`` once per vector group of the register tile."""
        lines = list(hoisted)
        if self.groups > 1:
            assert self.base is not None
            x = self.scope.name(self.axis_vars[self.inner])
            g = self.scope.name(self.g)
            step = f"{g} * {self.vector}" if self.vector > 1 else g
            lines.append("#pragma unroll")
            lines.append(f"for (int {g} = 0; {g} < {self.groups}; ++{g}) {{")
            if re.search(rf"\b{x}\b", "\n".join(per_group)):  # staged reads use block offsets
                lines.append(f"    const int {x} = {self.scope.name(self.base)} + {step};")
            lines += indent(per_group)
            lines.append("}")
        else:
            lines += per_group
        return lines

    def _tile(self, combine: Callable[[str, str], list[str]]) -> list[str]:
        """The statement at one point of the reduce loops, for the whole register tile;
        loads that do not depend on the innermost spatial axis are read once."""
        hoisted: list[str] = []
        per_group: list[str] = []
        names: dict[str, tuple[str, bool]] = {}
        for load in loads(self.w.statement.value):
            decl = self.w.buffer(load.buffer)
            depends = any(self.inner in variables(e) for e in decl.indices)
            width = self.vector if depends else 1
            tmp = f"v{decl.name}"
            ctype = f"{self.ctype}{width}" if width > 1 else self.ctype
            line = f"const {ctype} {tmp} = {self._load(decl, width)};"
            (per_group if depends and self.groups > 1 else hoisted).append(line)
            names[decl.name] = (tmp, width > 1)
        value, _ = self._value(self.w.statement.value, names)
        per_group += combine(value, self._acc())
        return self._tile_frame(per_group, hoisted)

    def _load(self, decl: BufferDecl, width: int) -> str:
        scope = self.scope
        idx = list(decl.indices)
        if decl.name in self.staged:
            assert self.staging is not None
            staged = next(s for s in self.staging.inputs if s.buffer == decl.name)
            return self.staged[decl.name].load(self._tile_index(staged), scope, width)
        text = self.access[decl.name].load(idx, scope, width)
        tests = []
        for d, (e, extent) in enumerate(zip(idx, decl.shape, strict=True)):
            if (decl.name, d) in self.grown:
                continue  # runs into padding on purpose (see _check)
            lo, hi = scope.bounds(e)
            if lo < 0:
                tests.append(f"{paren(scope.c(e))} >= 0")
            if hi > extent - 1:
                tests.append(f"{paren(scope.c(e))} < {extent}")
        if tests:  # outside the buffer the statement reads zero (convolution padding)
            return f"({' && '.join(tests)}) ? {text} : {c_float(0.0, decl.dtype)}"
        return text

    def _value(self, v: Value, names: Mapping[str, tuple[str, bool]]) -> tuple[str, bool]:
        if isinstance(v, Load):
            return names[v.buffer]
        if isinstance(v, Literal):
            return c_float(v.value, self.w.dtype), False
        if isinstance(v, Negate):
            text, vec = self._value(v.operand, names)
            return f"-({text})", vec
        assert isinstance(v, BinaryOp)
        a, av = self._value(v.lhs, names)
        b, bv = self._value(v.rhs, names)
        if v.op in ("max", "min"):
            fn = "fmax" if v.op == "max" else "fmin"
            if bv and not av:  # fmax(gentype, scalar) exists, fmax(scalar, gentype) does not
                a, b = b, a
            return f"{fn}({a}, {b})", av or bv
        return f"({a} {v.op} {b})", av or bv

    def _loop(self, name: str, extent: int, body: list[str], note: str, unroll: int) -> list[str]:
        if unroll == 1:
            return [
                f"for (int {name} = 0; {name} < {extent}; ++{name}) {{{note}",
                *indent(body),
                "}",
            ]
        outer = f"{name}{unroll}"
        out = [f"for (int {outer} = 0; {outer} < {extent}; {outer} += {unroll}) {{{note}"]
        for u in range(unroll):
            out.append(f"    {{ const int {name} = {outer}{f' + {u}' if u else ''};")
            out += indent(body, 2)
            out.append("    }")
        out.append("}")
        return out

    def _reduce_loops(self, body: list[str]) -> list[str]:
        w, scope = self.w, self.scope
        axes = list(w.reduce_axes)
        lines = body
        for k in reversed(axes):
            axis = w.axes[k]
            name = scope.name(self.axis_vars[k])
            loop = self.loops.get(k)
            note = ""
            if loop and self.overcompute:
                note = f"  /* padded extent {loop.extent}: padding holds the neutral element */"
            elif loop:
                note = f"  /* padded extent {loop.extent}, guarded */"
                lines = [f"if ({name} < {axis.extent}) {{", *indent(lines), "}"]
            extent = loop.extent if loop else axis.extent
            lines = self._loop(name, extent, lines, note, self.unroll if k == axes[-1] else 1)
        return lines

    def _staged_loops(self) -> list[str]:
        """Per stage: the cooperative copy of every tile, a barrier, the reduce
        loops over the tiles, a barrier before the next stage overwrites them."""
        w, scope, plan = self.w, self.scope, self.staging
        assert plan is not None
        group = int(self.knobs["work_group"])
        lines = [
            f"__local {ctype_of(acc.dtype)} {acc.c_name}[{acc.layout.physical_size}];"
            for acc in self.staged.values()
        ]
        stepped = plan.stepped
        stage_var: Var | None = None
        if stepped is not None:
            step, extent = plan.block[stepped], w.axes[stepped].extent
            if step == 1:  # the stage loop walks the axis itself
                stage_var = self.axis_vars[stepped]
            else:
                name = f"{w.axes[stepped].name}_tile"
                stage_var = scope.var(name, 0, extent - step)
                # inside a stage the reduce variable is the offset within the tile
                scope.set_range(self.axis_vars[stepped], 0, step - 1)
        copies: list[str] = []
        for staged in plan.inputs:
            copies += self._copy_tile(staged, stage_var, group)
        loops = self._tile(self._combine)
        reduce_axes = [k for k in w.reduce_axes if not (k == stepped and plan.block[k] == 1)]
        for k in reversed(reduce_axes):
            unroll = self.unroll if k == w.reduce_axes[-1] else 1
            name = scope.name(self.axis_vars[k])
            loops = self._loop(name, plan.block[k], loops, "", unroll)
        barrier = "barrier(CLK_LOCAL_MEM_FENCE);"
        if stepped is None:
            return [
                *lines,
                "/* one stage: the tiles hold the whole reduction */",
                *copies,
                barrier,
                *loops,
            ]
        assert stage_var is not None
        sname = scope.name(stage_var)
        step = plan.block[stepped]
        head = f"for (int {sname} = 0; {sname} < {w.axes[stepped].extent}; "
        head += f"++{sname}) {{" if step == 1 else f"{sname} += {step}) {{"
        head += f"  /* stage: {step} value{'s' if step > 1 else ''} of {w.axes[stepped].name} */"
        return [*lines, head, *indent([*copies, barrier, *loops, barrier]), "}"]

    def _copy_tile(self, staged: StagedInput, stage_var: Var | None, group: int) -> list[str]:
        """The work-group's copy of one input's footprint into its local tile,
        reading zero outside the input (convolution padding, ragged blocks)."""
        scope, plan = self.scope, self.staging
        assert plan is not None
        decl = self.w.buffer(staged.buffer)
        acc = self.staged[staged.buffer]
        size = math.prod(staged.tile)
        e = scope.var("e", 0, size - 1)
        tvars = [scope.var(f"{acc.c_name}{t}", 0, n - 1) for t, n in enumerate(staged.tile)]
        origin = self._origins(staged, stage_var)
        gidx = [
            origin[d] + (Var(tvars[staged.dims.index(d)].index) if d in staged.dims else 0)
            for d in range(len(decl.shape))
        ]
        tests = []
        for index, extent in zip(gidx, decl.shape, strict=True):
            lo, hi = scope.bounds(index)
            if lo < 0:
                tests.append(f"{paren(scope.c(index))} >= 0")
            if hi > extent - 1:
                tests.append(f"{paren(scope.c(index))} < {extent}")
        value = self.access[staged.buffer].load(gidx, scope)
        if tests:
            value = f"({' && '.join(tests)}) ? {value} : {c_float(0.0, decl.dtype)}"
        store = acc.store([Var(t.index) for t in tvars], value, scope)
        en = scope.name(e)
        digits = split_index(e, list(staged.tile), [1] * len(staged.tile))
        decls = [
            f"const int {scope.name(t)} = {scope.c(digit)};"
            for t, digit, n in zip(tvars, digits, staged.tile, strict=True)
            if n > 1
        ]
        self.tile_notes[staged.buffer] = (
            f"{decl.name}[{', '.join(scope.c(o) for o in origin)}] onwards"
        )
        if size <= group:
            head = f"if ({scope.name(self.lid)} < {size}) {{" if size < group else "{"
            return [
                head,
                f"    const int {en} = {scope.name(self.lid)};",
                *indent([*decls, store]),
                "}",
            ]
        return [
            f"for (int {en} = {scope.name(self.lid)}; {en} < {size}; {en} += {group}) {{",
            *indent([*decls, store]),
            "}",
        ]

    def _origins(self, staged: StagedInput, stage_var: Var | None) -> list[Expr]:
        """Per input dimension, the index of the footprint's first element."""
        plan = self.staging
        assert plan is not None
        out: list[Expr] = []
        for coeffs, const in staged.terms:
            total: Expr = Const(const)
            for k, c in coeffs:
                if k in self.block_base:
                    total = total + c * Var(self.block_base[k].index)
                elif k in plan.spatial:
                    total = total + c * Var(self.axis_vars[k].index)
                elif k == plan.stepped:
                    assert stage_var is not None
                    total = total + c * Var(stage_var.index)
            out.append(self.scope.simplify(total))
        return out

    def _tile_index(self, staged: StagedInput) -> list[Expr]:
        """Index into the local tile of the element the statement reads."""
        plan = self.staging
        assert plan is not None
        out: list[Expr] = []
        for d in staged.dims:
            coeffs, _ = staged.terms[d]
            total: Expr = Const(0)
            for k, c in coeffs:
                if k in self.block_offset:
                    total = total + c * self.block_offset[k]
                elif k in plan.spatial or (k == plan.stepped and plan.block[k] == 1):
                    continue  # the footprint's origin holds it
                else:
                    total = total + c * Var(self.axis_vars[k].index)
            out.append(total)
        return out

    # -- output padding ----------------------------------------------------------
    def _fill_padding_kernel(self, decl: BufferDecl, layout: Layout, pad: float) -> str:
        scope = Scope()
        pshape = layout.physical_shape
        gid = scope.var("gid", 0, layout.physical_size - 1)
        names = [f"p{t}" for t in range(len(pshape))]
        lines, phys = decompose(scope, "int", gid, list(pshape), names, [1] * len(pshape))
        tests = _padding_tests(scope, layout.inverse().conditions, [Var(p.index) for p in phys])
        body = [f"const int {scope.name(gid)} = get_global_id(0);", *lines]
        body.append(
            f"if ({' || '.join(tests)}) {decl.name}[{scope.name(gid)}] = {c_float(pad, decl.dtype)};"
        )
        head = [
            f"/* pad value {pad} into the padding of {decl.name}: {layout.index_map} */",
            f"__kernel void {decl.name}_fill_padding(__global {self.ctype}* restrict {decl.name}) {{",
        ]
        return "\n".join([*head, *indent(body), "}"])


def _padding_tests(scope: Scope, conditions: Sequence[Condition], values: list[Expr]) -> list[str]:
    """C tests, one of which holds exactly at padding positions."""
    tests = []
    for c in conditions:
        e = scope.simplify(substitute(c.expr, values))
        lo, hi = scope.bounds(e)
        text = paren(scope.c(e))
        if c.lo == c.hi:
            tests.append(f"{text} != {c.lo}")
            continue
        if lo < c.lo:
            tests.append(f"{text} < {c.lo}")
        if hi > c.hi:
            tests.append(f"{text} > {c.hi}")
    return tests
