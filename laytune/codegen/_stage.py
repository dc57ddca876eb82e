"""Emitting local staging: the cooperative copy of each input's footprint into
its ``__local`` tile, the stage loop around the reduction, and the tile
index a read of the statement lands on.

The staging plan (:func:`laytune.space.staging_plan`) fixes the block of
outputs a work-group computes, the stepped reduce axis and each input's tile;
the grid prologue (:mod:`._grid`) gives the block's origin and the
work-item's offset in it. Per stage the work-group copies every tile (zero
outside the input: convolution padding, blocks that overshoot the output),
waits at a barrier, reduces over the tiles, and waits again before the next
stage overwrites them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from laytune.codegen._copy import copy_tile_with, local_alignment
from laytune.codegen._emit import BufferAccess, Scope, c_float, c_ident, ctype_of, paren
from laytune.codegen._grid import GridCode
from laytune.codegen._nest import Nest
from laytune.codegen._source import indent, split_index
from laytune.layout import Const, Expr, Var
from laytune.space import StagedInput, local_buffer_name

__all__ = ["local_accesses", "staged_loops", "tile_index"]

_BARRIER = "barrier(CLK_LOCAL_MEM_FENCE);"


def local_accesses(nest: Nest) -> dict[str, BufferAccess]:
    """Per staged input, how the kernel reaches its ``__local`` tile."""
    plan = nest.staging
    assert plan is not None
    out = {}
    for staged in plan.inputs:
        local = local_buffer_name(staged.buffer)
        dtype = nest.workload.buffer(staged.buffer).dtype
        out[staged.buffer] = BufferAccess(
            local, c_ident(local), nest.layouts[local], dtype, "local"
        )
    return out


def _origins(
    scope: Scope, nest: Nest, grid: GridCode, staged: StagedInput, stage_var: Var | None
) -> list[Expr]:
    """Per input dimension, the index of the footprint's first element."""
    plan = nest.staging
    assert plan is not None
    out: list[Expr] = []
    for coeffs, const in staged.terms:
        total: Expr = Const(const)
        for k, c in coeffs:
            if k in grid.block_base:
                total = total + c * grid.block_base[k]
            elif k in plan.spatial:
                total = total + c * grid.base[k]
            elif k == plan.stepped:
                assert stage_var is not None
                total = total + c * Var(stage_var.index)
        out.append(scope.simplify(total))
    return out


def tile_index(
    nest: Nest, grid: GridCode, staged: StagedInput, offsets: Sequence[int]
) -> list[Expr]:
    """Index into the local tile of the element the statement reads at the
    register block's point ``offsets`` (per axis)."""
    plan = nest.staging
    assert plan is not None
    out: list[Expr] = []
    for d in staged.dims:
        coeffs, _ = staged.terms[d]
        total: Expr = Const(0)
        for k, c in coeffs:
            if k in grid.block_offset:
                total = total + c * (grid.block_offset[k] + offsets[k])
            elif k in plan.spatial or (k == plan.stepped and plan.block[k] == 1):
                continue  # the footprint's origin holds it
            else:
                total = total + c * Var(k)  # a reduce variable: the offset within the stage
        out.append(total)
    return out


def _copy_tile(
    scope: Scope,
    nest: Nest,
    grid: GridCode,
    tiles: dict[str, BufferAccess],
    staged: StagedInput,
    stage_var: Var | None,
    globals_: dict[str, BufferAccess],
) -> list[str]:
    decl = nest.workload.buffer(staged.buffer)
    acc = tiles[staged.buffer]
    size = math.prod(staged.tile)
    group = grid.group
    assert grid.lid is not None
    e = scope.var("e", 0, size - 1)
    tvars = [scope.var(f"{acc.c_name}{t}", 0, n - 1) for t, n in enumerate(staged.tile)]
    origin = _origins(scope, nest, grid, staged, stage_var)
    if nest.copy != "elementwise":
        return copy_tile_with(
            nest.copy, scope, staged, origin, globals_[staged.buffer], acc, group, nest.subgroup
        )
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
    value = globals_[staged.buffer].load(gidx, scope)
    if tests:
        value = f"({' && '.join(tests)}) ? {value} : {c_float(0.0, decl.dtype)}"
    store = acc.store([Var(t.index) for t in tvars], value, scope)
    en, lid = scope.name(e), scope.name(grid.lid)
    digits = split_index(e, list(staged.tile), [1] * len(staged.tile))
    decls = [
        f"const int {scope.name(t)} = {scope.c(digit)};"
        for t, digit, n in zip(tvars, digits, staged.tile, strict=True)
        if n > 1
    ]
    note = f"/* {acc.name}: {decl.name}[{', '.join(scope.c(o) for o in origin)}] onwards */"
    if size <= group:
        head = f"if ({lid} < {size}) {{" if size < group else "{"
        return [note, head, f"    const int {en} = {lid};", *indent([*decls, store]), "}"]
    return [
        note,
        f"for (int {en} = {lid}; {en} < {size}; {en} += {group}) {{",
        *indent([*decls, store]),
        "}",
    ]


def staged_loops(
    scope: Scope,
    nest: Nest,
    grid: GridCode,
    tiles: dict[str, BufferAccess],
    globals_: dict[str, BufferAccess],
    reduce_loops: Callable[[], list[str]],
) -> list[str]:
    """Per stage: the copy of every tile, a barrier, the reduce loops over the
    tiles (``reduce_loops()``, emitted after the stage variables exist), a
    barrier before the next stage overwrites them."""
    w, plan = nest.workload, nest.staging
    assert plan is not None
    lines = []
    for staged in plan.inputs:
        acc = tiles[staged.buffer]
        align = local_alignment(nest.copy, staged, acc.dtype)
        attr = f" __attribute__((aligned({align})))" if align else ""
        lines.append(
            f"__local {ctype_of(acc.dtype)} {acc.c_name}[{acc.layout.physical_size}]{attr};"
        )
    stepped = plan.stepped
    stage_var: Var | None = None
    if stepped is not None:
        step, extent = plan.block[stepped], w.axes[stepped].extent
        if step == 1:  # the stage loop walks the axis itself
            stage_var = Var(stepped)
        else:
            stage_var = scope.var(f"{w.axes[stepped].name}_tile", 0, extent - step)
            # inside a stage the reduce variable is the offset within the tile
            scope.set_range(Var(stepped), 0, step - 1)
    copies: list[str] = []
    for staged in plan.inputs:
        copies += _copy_tile(scope, nest, grid, tiles, staged, stage_var, globals_)
    loops = reduce_loops()
    if stepped is None:
        return [
            *lines,
            "/* one stage: the tiles hold the whole reduction */",
            *copies,
            _BARRIER,
            *loops,
        ]
    assert stage_var is not None
    sname = scope.name(stage_var)
    step = plan.block[stepped]
    head = f"for (int {sname} = 0; {sname} < {w.axes[stepped].extent}; "
    head += f"++{sname}) {{" if step == 1 else f"{sname} += {step}) {{"
    head += f"  /* stage: {step} value{'s' if step > 1 else ''} of {w.axes[stepped].name} */"
    return [*lines, head, *indent([*copies, _BARRIER, *loops, _BARRIER]), "}"]
