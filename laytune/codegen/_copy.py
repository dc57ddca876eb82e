"""Emitting the staging copy instructions and sub-group block reads.

The ``copy`` knob (:mod:`laytune.space._knobs`) picks the instruction that
moves a footprint of a staged input into its ``__local`` tile; the rule step
of each copy (:mod:`laytune.space._copies`) has already checked that both
layouts allow it, so the emitters here compute pointers and trust them:

* ``rows``: one ``async_work_group_copy`` per tile row, from the row's first
  element in the input to its first element in the tile (row pointers: rows
  may lie anywhere, a pad every n rows included).
* ``async_strided``: one ``async_work_group_strided_copy`` of the whole tile
  whose unit is one row (``floatC``): the input's rows at one constant
  stride, the tile's rows back to back.
* ``async_contiguous``: one ``async_work_group_copy`` of the whole footprint,
  which lies in one range in the same element order as the tile.
* ``subgroup_block``: each sub-group copies runs of its size along the tile
  rows with ``intel_sub_group_block_read`` from the input and
  ``intel_sub_group_block_write`` into the tile.

Every work-item of the work-group reaches these calls with the same
arguments (they depend only on the work-group and the stage), as OpenCL
requires of the async copies; ``wait_group_events`` completes them before
the stage's barrier.

:func:`block_read` is the unstaged ``subgroup`` knob's load: lane ``l`` of a
sub-group reads the ``l``-th element after the pointer of lane 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from laytune.codegen._emit import BufferAccess, Scope, ctype_of, pointer, widened
from laytune.codegen._source import split_index
from laytune.layout import Const, Expr, Var, substitute
from laytune.space import StagedInput, dtype_bytes

__all__ = ["block_read", "copy_tile_with", "local_alignment"]

_BLOCK_TYPES = {4: ("uint", ""), 2: ("ushort", "_us")}
"""Per element size: the unsigned type and suffix of Intel's block functions."""


def local_alignment(copy: str, staged: StagedInput, dtype: str) -> int:
    """The byte alignment ``copy`` needs of a tile's first element (0: the
    element type's own): a row vector for the strided copy, 16 bytes for
    ``__local`` block writes."""
    if copy == "async_strided":
        return staged.tile[-1] * dtype_bytes(dtype)
    if copy == "subgroup_block":
        return 16
    return 0


def _at(scope: Scope, e: Expr, var: Var, value: int) -> Expr:
    values: list[Expr] = [Var(k) for k in range(len(scope.names))]
    values[var.index] = Const(value)
    return scope.simplify(substitute(e, values))


class _Copy:
    """The offsets of one footprint's elements in the input and in the tile."""

    def __init__(
        self,
        scope: Scope,
        staged: StagedInput,
        origin: Sequence[Expr],
        glob: BufferAccess,
        tile: BufferAccess,
    ) -> None:
        self.scope, self.staged, self.origin = scope, staged, origin
        self.glob, self.tile = glob, tile
        self.rows = math.prod(staged.tile[:-1])
        self.length = staged.tile[-1]

    def offsets(self, index: Sequence[Expr]) -> tuple[Expr, Expr]:
        """(input offset, tile offset) of the tile element at ``index``."""
        s = self.staged
        gidx = [
            self.origin[d] + (index[s.dims.index(d)] if d in s.dims else 0)
            for d in range(len(self.origin))
        ]
        scope = self.scope
        return (
            scope.simplify(self.glob.flat_offset(gidx)),
            scope.simplify(self.tile.flat_offset(list(index))),
        )

    def row_index(self, row: Var, column: Expr) -> list[Expr]:
        lead = list(self.staged.tile[:-1])
        digits = split_index(row, lead, [1] * len(lead)) if lead else []
        return [*digits, column]

    def pointers(self, goff: Expr, loff: Expr, vtype: str = "") -> tuple[str, str]:
        """C pointers to the tile (``__local``) and the input at the offsets,
        cast to ``vtype`` pointers when given."""
        c = self.scope.c
        dst, src = pointer(self.tile.c_name, c(loff)), pointer(self.glob.c_name, c(goff))
        if vtype:
            return f"(__local {vtype}*)({dst})", f"(const __global {vtype}*)({src})"
        return dst, src


def _rows(cp: _Copy, event: str) -> list[str]:
    scope = cp.scope
    r = scope.var("row", 0, cp.rows - 1)
    goff, loff = cp.offsets(cp.row_index(r, Const(0)))
    first = cp.pointers(_at(scope, goff, r, 0), _at(scope, loff, r, 0))
    lines = [f"{event} = async_work_group_copy({first[0]}, {first[1]}, {cp.length}, 0);"]
    if cp.rows > 1:
        scope.set_range(r, 1, cp.rows - 1)
        dst, src = cp.pointers(goff, loff)
        rn = scope.name(r)
        lines += [
            f"for (int {rn} = 1; {rn} < {cp.rows}; ++{rn})",
            f"    {event} = async_work_group_copy({dst}, {src}, {cp.length}, {event});",
        ]
    return lines


def _strided(cp: _Copy, event: str, ctype: str) -> list[str]:
    scope = cp.scope
    vtype = f"{ctype}{cp.length}"
    r = scope.var("row", 0, max(cp.rows - 1, 1))
    goff, loff = cp.offsets(cp.row_index(r, Const(0)))
    g0, l0 = _at(scope, goff, r, 0), _at(scope, loff, r, 0)
    stride = scope.simplify((_at(scope, goff, r, 1) - g0) // cp.length) if cp.rows > 1 else Const(1)
    dst, src = cp.pointers(g0, l0, vtype)
    return [
        f"{event} = async_work_group_strided_copy({dst}, {src}, {cp.rows}, {scope.c(stride)}, 0);"
    ]


def _contiguous(cp: _Copy, event: str) -> list[str]:
    layout = cp.tile.layout
    flat = np.asarray(layout.index_map.flat_offsets(layout.shape)).reshape(layout.shape)
    first = [Const(int(v)) for v in np.unravel_index(int(flat.argmin()), layout.shape)]
    dst, src = cp.pointers(*cp.offsets(first))
    size = math.prod(cp.staged.tile)
    return [f"{event} = async_work_group_copy({dst}, {src}, {size}, 0);"]


def _subgroup(cp: _Copy, group: int, size: int) -> list[str]:
    scope = cp.scope
    utype, suffix = _BLOCK_TYPES[dtype_bytes(cp.glob.dtype)]
    per_row = cp.length // size
    runs = cp.rows * per_row
    groups = group // size
    sg = scope.var("sg", 0, groups - 1)
    q = scope.var("run", 0, runs - 1)
    lead = list(cp.staged.tile[:-1])
    index = split_index(q, [*lead, per_row], [1] * len(lead) + [size])
    goff, loff = cp.offsets(index)
    dst, src = cp.pointers(goff, loff, utype)
    sn, qn = scope.name(sg), scope.name(q)
    copy = f"intel_sub_group_block_write{suffix}({dst}, intel_sub_group_block_read{suffix}({src}));"
    head = [f"const int {sn} = get_sub_group_id();  /* {groups} sub-groups of {size} */"]
    if runs <= groups:
        return [*head, f"if ({sn} < {runs}) {{", f"    const int {qn} = {sn};", f"    {copy}", "}"]
    return [*head, f"for (int {qn} = {sn}; {qn} < {runs}; {qn} += {groups})", f"    {copy}"]


def copy_tile_with(
    copy: str,
    scope: Scope,
    staged: StagedInput,
    origin: Sequence[Expr],
    glob: BufferAccess,
    tile: BufferAccess,
    group: int,
    subgroup: int,
) -> list[str]:
    """The lines that copy one footprint (first index ``origin``) of
    ``glob`` into ``tile`` with ``copy`` (anything but ``elementwise``), for
    a work-group of ``group`` work-items in sub-groups of ``subgroup``."""
    cp = _Copy(scope, staged, origin, glob, tile)
    note = f"/* {tile.name}: {copy} copy of {glob.name}[{', '.join(scope.c(o) for o in origin)}] onwards */"
    if copy == "subgroup_block":
        return [note, "{", *("    " + s for s in _subgroup(cp, group, subgroup)), "}"]
    event = scope.name(scope.var(f"ev_{tile.c_name}", 0, 0))
    if copy == "rows":
        body = _rows(cp, event)
    elif copy == "async_strided":
        body = _strided(cp, event, ctype_of(glob.dtype))
    elif copy == "async_contiguous":
        body = _contiguous(cp, event)
    else:
        raise ValueError(f"copy {copy!r} has no emitter (elementwise is the loop of ._stage)")
    return [
        note,
        "{",
        f"    event_t {body[0]}",
        *("    " + s for s in body[1:]),
        f"    wait_group_events(1, &{event});",
        "}",
    ]


def block_read(access: BufferAccess, index: Sequence[Expr], scope: Scope) -> str:
    """The element of ``access`` a lane reads with a sub-group block read,
    ``index`` being lane 0's logical index (the sub-group's pointer)."""
    utype, suffix = _BLOCK_TYPES[dtype_bytes(access.dtype)]
    src = pointer(access.c_name, scope.c(access.flat_offset(index)))
    cast = f"as_{ctype_of(access.dtype)}"
    read = f"{cast}(intel_sub_group_block_read{suffix}((const __global {utype}*)({src})))"
    return widened(access.dtype, read)
