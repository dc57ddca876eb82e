"""Emitting the NDRange prologue: from the work-item's ids to the first point
of its register block along every spatial axis.

Three shapes, one per kind of grid the nest plans:

* **logical** (``order="logical"``, unstaged): NDRange dimension ``d`` counts
  the register blocks of its axes; a block index ``b`` along axis ``k``
  starts at ``b * block[k]`` (the last block may overshoot the extent);
  along a vector axis whose extent the vector does not divide, at
  ``min(b * block[k], extent - block[k])``: the last block overlaps the one
  before it and every point is inside, so that axis needs no test; so too
  along another axis whose overshooting block would test a load
  (:func:`may_overlap`).
* **staged**: a work-group computes one block of the staging plan; along a
  blocked axis the group id picks the block and the local id the work-item's
  register block in it, so the first point is
  ``group * plan_block + local * block``.
* **physical** (``order=<buffer>``): one work-item per physical position of
  the buffer; the logical point comes from the layout's inverse, padding
  positions return early (writing the pad value of an output).

Every value is an expression of the kernel's variables, so that offsets
through a layout simplify exactly (``(i_blk * 8 + 3) // 8`` is ``i_blk``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from laytune.codegen._emit import Scope, c_float
from laytune.codegen._nest import GridDim, Nest
from laytune.codegen._source import decompose, split_index
from laytune.layout import Condition, Const, Expr, Var, substitute

__all__ = ["GridCode", "axis_value", "emit_grid", "padding_tests"]


@dataclass
class GridCode:
    """What the prologue declares: ``base[k]`` is the value of spatial axis
    ``k`` at the work-item's first point. Staged grids also give the
    work-group's ``block_base[k]``, the work-item's ``block_offset[k]`` within
    the block, its linear local id ``lid`` and the work-group size."""

    lines: list[str]
    base: dict[int, Expr]
    block_base: dict[int, Expr] = field(default_factory=dict)
    block_offset: dict[int, Expr] = field(default_factory=dict)
    lid: Var | None = None
    group: int = 0


def axis_value(
    scope: Scope,
    nest: Nest,
    k: int,
    value: Expr,
    lines: list[str],
    overlap: frozenset[int] = frozenset(),
) -> Expr:
    """Declare ``value`` as the axis's block index (when the axis is blocked)
    or the axis variable itself; return the axis's first point (the last
    block's overlapping the one before it along the ``overlap`` axes, which
    the caller took from :func:`may_overlap`, and where :func:`overlaps`)."""
    w = nest.workload
    block = nest.tile.blocks[k]
    if w.axes[k].extent == 1:
        return Const(0)
    lo, hi = scope.bounds(value)
    if block == 1:
        scope.set_range(Var(k), lo, hi)
        lines.append(f"const int {scope.name(Var(k))} = {scope.c(value)};")
        return Var(k)
    blk = scope.var(f"{w.axes[k].name}_blk", lo, hi)
    lines.append(f"const int {scope.name(blk)} = {scope.c(value)};")
    extent = w.axes[k].extent
    if overlaps(nest, k) or k in overlap:
        # overlapping last block: it starts at extent - block, every point inside
        first = scope.var(f"{w.axes[k].name}0", 0, extent - block)
        lines.append(
            f"const int {scope.name(first)} = min({scope.name(blk)} * {block}, {extent - block});"
        )
        return Var(first.index)
    return Var(blk.index) * block


def overlaps(nest: Nest, k: int) -> bool:
    """Whether the last register block along spatial axis ``k`` always
    starts at ``extent - block``: along a vector axis whose extent the
    vector does not divide (the space checked that every buffer indexed by
    it holds runs from any start)."""
    tile = nest.tile
    return tile.vector_axis == k and nest.workload.axes[k].extent % tile.vector != 0


def may_overlap(nest: Nest, k: int) -> bool:
    """Whether the last register block along spatial axis ``k`` of a logical
    grid may start at ``extent - block`` instead of overshooting the extent.

    Its points are then all inside, so no load or store along ``k`` is
    tested, and the outputs it shares with the block before it are computed
    and stored twice, the same values. The code generator does so where the
    overshooting block would test a load (:func:`~laytune.codegen._kernel.compute_kernel`):
    a tested load is a select in the reduce loop, while a layout that holds
    the overshoot in its padding (a packed panel) reads it untested and keeps
    its block-aligned offsets. Along a vector axis the vector divides
    (``extent - block`` is then a multiple of it, so runs stay aligned) or
    any other axis of a block that fits the extent; not where the kernel
    reads across a sub-group or transposes vectors in registers, whose reads
    assume block-aligned starts. A 127 x 257 x 509 matmul in 8 x 48 blocks
    over row-major operands took 0.146 ms with the tested tail and 0.124
    with the overlapping block."""
    extent, block = nest.workload.axes[k].extent, nest.tile.blocks[k]
    if block <= 1 or block > extent or extent % block == 0:
        return False
    return not nest.knobs.get("vector_transpose") and not nest.knobs.get("subgroup")


def _rounded(d: int, dim: GridDim) -> list[str]:
    """The early return of the items a rounded NDRange dimension holds past
    the ones that compute (none where the work-groups divide them)."""
    if dim.global_size == dim.count:
        return []
    return [f"if (get_global_id({d}) >= {dim.count}) return;  /* past the last block */"]


def _logical(scope: Scope, nest: Nest, overlap: frozenset[int]) -> GridCode:
    lines: list[str] = []
    base: dict[int, Expr] = {}
    for d, dim in enumerate(nest.grid):
        lines += _rounded(d, dim)
    for d, dim in enumerate(nest.grid):
        if len(dim.axes) == 1:
            gid = scope.builtin(f"get_global_id({d})", 0, dim.count - 1)
            base[dim.axes[0]] = axis_value(scope, nest, dim.axes[0], gid, lines, overlap)
            continue
        gid = scope.var(f"g{d}", 0, dim.count - 1)
        lines.append(f"const int {scope.name(gid)} = get_global_id({d});")
        digits = split_index(gid, list(dim.items), [1] * len(dim.items))
        for k, digit in zip(dim.axes, digits, strict=True):
            base[k] = axis_value(scope, nest, k, digit, lines, overlap)
    return GridCode(lines, base)


def _staged(scope: Scope, nest: Nest) -> GridCode:
    plan = nest.staging
    assert plan is not None
    lines: list[str] = []
    code = GridCode(lines, {})
    local_ids: list[Var] = []
    for d, dim in enumerate(nest.grid):
        grp = scope.var(f"grp{d}", 0, dim.global_size // dim.local - 1)
        lines.append(f"const int {scope.name(grp)} = get_group_id({d});")
        if dim.local > 1:
            (k,) = dim.axes
            lid = scope.var(f"lid{d}", 0, dim.local - 1)
            lines.append(f"const int {scope.name(lid)} = get_local_id({d});")
            local_ids.append(lid)
            code.block_base[k] = Var(grp.index) * plan.block[k]
            code.block_offset[k] = Var(lid.index) * nest.tile.blocks[k]
            code.base[k] = code.block_base[k] + code.block_offset[k]
            continue
        counts = [plan.counts[k] for k in dim.axes]
        digits = split_index(grp, counts, [plan.block[k] for k in dim.axes])
        for k, digit in zip(dim.axes, digits, strict=True):
            if plan.block[k] > 1:  # blocked, but the work-group has one item along it
                code.block_base[k] = digit
                code.block_offset[k] = Const(0)
                code.base[k] = digit
            else:
                code.base[k] = axis_value(scope, nest, k, digit, lines)
    code.group = math.prod(d.local for d in nest.grid)
    if local_ids:
        linear: Expr = Var(local_ids[-1].index)
        for lid in reversed(local_ids[:-1]):
            linear = linear * (scope.ranges[lid.index][1] + 1) + Var(lid.index)
        if len(local_ids) == 1:
            code.lid = local_ids[0]
        else:
            code.lid = scope.var("lid", 0, code.group - 1)
            lines.append(f"const int {scope.name(code.lid)} = {_linear_c(scope, local_ids)};")
    else:
        code.lid = scope.var("lid", 0, 0)
        lines.append(f"const int {scope.name(code.lid)} = 0;")
    return code


def _linear_c(scope: Scope, local_ids: Sequence[Var]) -> str:
    """The work-item's index in its work-group, dimension 0 fastest."""
    terms, stride = [], 1
    for lid in local_ids:
        name = scope.name(lid)
        terms.append(f"{name} * {stride}" if stride > 1 else name)
        stride *= scope.ranges[lid.index][1] + 1
    return " + ".join(terms)


def padding_tests(scope: Scope, conditions: Sequence[Condition], values: list[Expr]) -> list[str]:
    """C tests, one of which holds exactly at padding positions."""
    from laytune.codegen._emit import paren

    tests = []
    for c in conditions:
        e = scope.simplify(substitute(c.expr, values))
        text = paren(scope.c(e))
        tests += [f"{text} {_FAILS[op]} {v}" for op, v in c.comparisons(*scope.bounds(e))]
    return tests


_FAILS = {"==": "!=", ">=": "<", "<=": ">"}
"""The comparison that holds where a :meth:`Condition.comparisons` entry fails."""


def _physical(scope: Scope, nest: Nest) -> GridCode:
    w = nest.workload
    decl = w.buffer(nest.order)
    layout = nest.layouts[decl.name]
    pshape = layout.physical_shape
    gid = scope.var("gid", 0, layout.physical_size - 1)
    lines = [
        *_rounded(0, nest.grid[0]),
        f"const int {scope.name(gid)} = get_global_id(0);",
        f"/* work-items walk the physical positions of {decl.name} */",
    ]
    names = [f"p{t}" for t in range(len(pshape))]
    decl_lines, phys = decompose(scope, "int", gid, list(pshape), names, [1] * len(pshape))
    lines += decl_lines
    inverse = layout.inverse()
    values = [Var(p.index) for p in phys]
    if inverse.conditions:
        tests = padding_tests(scope, inverse.conditions, values)
        pad = nest.pad_values.get(decl.name) if decl.role == "output" else None
        lines.append(f"if ({' || '.join(tests)}) {{  /* padding */")
        if pad is not None:
            lines.append(f"    {decl.name}[{scope.name(gid)}] = {c_float(float(pad), decl.dtype)};")  # type: ignore[arg-type]
        lines.append("    return;")
        lines.append("}")
    base: dict[int, Expr] = {}
    for d, index in enumerate(decl.indices):
        k = index.index  # type: ignore[union-attr]
        value = substitute(inverse.index_map.outputs[d], values)
        base[k] = axis_value(scope, nest, k, value, lines)
    return GridCode(lines, base)


def emit_grid(scope: Scope, nest: Nest, overlap: frozenset[int] = frozenset()) -> GridCode:
    """The prologue of ``nest``'s compute kernel (see the module docstring);
    a logical grid's last blocks along the ``overlap`` axes (each one that
    :func:`may_overlap` allows) overlap the ones before them."""
    if nest.staging is not None:
        return _staged(scope, nest)
    if nest.order != "logical":
        return _physical(scope, nest)
    return _logical(scope, nest, overlap)
