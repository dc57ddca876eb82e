"""Tiled conversion kernels: a register-tile transpose per work-item, and a
work-group tile moved through ``__local`` memory.

Both apply where the source is read in runs of consecutive elements along
some destination axis ``a`` other than the innermost ``z`` (a transpose,
NCHW <-> NCHWc): a tile is read along ``a`` (whole runs of the source) and
written along ``z`` (whole rows of the destination), so both sides touch
whole cache lines.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from laytune.codegen._emit import Scope, pointer, vector_store
from laytune.codegen._gather import (
    affine_in_digits,
    as_values,
    merged_digits,
    row_major,
    widest,
    work_items,
)
from laytune.codegen._runs import contiguous_along
from laytune.codegen._shuffle import TRANSPOSE_WIDTHS, transpose_lines
from laytune.codegen._source import decompose
from laytune.layout import Const, Expr, Layout, Var, substitute

__all__ = ["generic_tile", "local_tile", "register_tile", "square_tile", "tile_attributes"]

_LANES = "0123456789abcdef"


def square_tile(va: int, vb: int) -> bool:
    """Whether a ``va`` x ``vb`` register tile is transposed by a shuffle network."""
    return va == vb and va in TRANSPOSE_WIDTHS


def generic_tile(va: int, inner: int) -> int:
    """The destination width of the generic kernels' register tile, whose
    source width is ``va``: ``va`` itself where it divides the innermost
    extent ``inner`` (a square tile, shuffled), else up to 8."""
    if square_tile(va, va) and inner % va == 0:
        return va
    return widest(inner, 8)


def tile_attributes(ctype: str, va: int, vb: int) -> str:
    """The kernel attributes of a register-tile kernel: a square tile's
    vectors are the unit of work (``vec_type_hint``), so that the compiler
    keeps its shuffles instead of vectorising across work-items."""
    return f"__attribute__((vec_type_hint({ctype}{va}))) " if square_tile(va, vb) else ""


def register_tile(
    scope: Scope,
    itype: str,
    ctype: str,
    index_vars: Sequence[Var],
    dims: Sequence[int],
    tile_axis: int,
    va: int,
    vb: int,
    src_offset: Expr,
    nontemporal: bool = False,
) -> tuple[list[str], int]:
    """Body of a register-tile transpose over the destination's row-major
    ``dims``: each work-item loads ``vb`` vectors of ``va`` source elements
    (``tile_axis`` steps by one in the source) and stores ``va`` vectors of
    ``vb`` elements along the destination's innermost axis (``nontemporal``
    stores where asked). Returns the body and the number of work-items.

    When both offsets are affine in the work-item's digits (transposes,
    blocking), the work-item computes its first source and destination
    element from the global id alone, with the digits merged
    (:func:`merged_digits`): a compiler that vectorises across work-items
    then sees strided, not gathered, accesses.
    """
    steps = [1] * len(dims)
    steps[tile_axis], steps[-1] = va, vb
    last = len(dims) - 1
    loads = [[b if t == last else 0 for t in range(len(dims))] for b in range(vb)]
    stores = [[a if t == tile_axis else 0 for t in range(len(dims))] for a in range(va)]
    extents = [d // s for d, s in zip(dims, steps, strict=True)]
    digits = [
        scope.var(f"{scope.name(v)}_digit", 0, e - 1)
        for v, e in zip(index_vars, extents, strict=True)
    ]
    src = affine_in_digits(scope, src_offset, digits, steps, loads)
    dst = affine_in_digits(scope, row_major(index_vars, dims), digits, steps, stores)
    if src is not None and dst is not None:
        gid_total = math.prod(extents)
        gid = scope.var("gid", 0, gid_total - 1)
        body = [f"const {itype} {scope.name(gid)} = get_global_id(0);"]
        firsts = []
        for name, (coeffs, _), what in (("src0", src, "read"), ("dst0", dst, "written")):
            first = scope.simplify(merged_digits(gid, extents, coeffs))
            var = scope.var(name, *scope.bounds(first))
            body.append(
                f"const {itype} {scope.name(var)} = {scope.c(first)};  /* first element {what} */"
            )
            firsts.append(var)
        src_at = [scope.c(Var(firsts[0].index) + k) for k in src[1]]
        dst_at = [scope.c(Var(firsts[1].index) + k) for k in dst[1]]
    else:
        body, base, _, gid_total = work_items(scope, itype, dims, index_vars, steps)
        src_at = [
            scope.c(
                substitute(
                    src_offset,
                    as_values(scope, [Var(v.index) + k for v, k in zip(base, lane, strict=True)]),
                )
            )
            for lane in loads
        ]
        dst_at = [
            scope.c(row_major([Var(v.index) + k for v, k in zip(base, lane, strict=True)], dims))
            for lane in stores
        ]
    vec = f"{ctype}{va}" if va > 1 else ctype
    for b, off in enumerate(src_at):
        load = f"vload{va}(0, {pointer('src', off)})" if va > 1 else f"src[{off}]"
        body.append(f"const {vec} r{b} = {load};")
    if square_tile(va, vb):
        lines, columns = transpose_lines([f"r{b}" for b in range(vb)], ctype, "t")
        body += lines
        for column, off in zip(columns, dst_at, strict=True):
            body.append(vector_store(column, vb, pointer("dst", off), ctype, nontemporal))
        return body, gid_total
    for a, off in enumerate(dst_at):
        lanes = [f"r{b}.s{_LANES[a]}" if va > 1 else f"r{b}" for b in range(vb)]
        if vb > 1:
            value = f"({ctype}{vb})({', '.join(lanes)})"
            body.append(vector_store(value, vb, pointer("dst", off), ctype, nontemporal))
        else:
            body.append(f"dst[{off}] = {lanes[0]};")
    return body, gid_total


def _tile_offset(layout: Layout, row: Expr, col: Expr) -> Expr:
    """Flat offset of element (row, col) of a 2-D ``__local`` tile in ``layout``."""
    total: Expr = Const(0)
    exprs = layout.index_map.flat_offset_exprs(layout.shape)
    for e, extent in zip(exprs, layout.flat_shape, strict=True):
        total = total * extent + e
    return substitute(total, [row, col])


def local_tile(
    scope: Scope,
    itype: str,
    ctype: str,
    index_vars: Sequence[Var],
    dims: Sequence[int],
    axis: int,
    tile: tuple[int, int],
    tile_layout: Layout,
    vector: int,
    items: int,
    src_offset: Expr,
    nontemporal: bool = False,
) -> tuple[list[str], tuple[int, ...], tuple[int, ...]]:
    """Body of a work-group tile moved through ``__local`` memory, with its
    global and local sizes.

    A work-group moves ``tile = (ta, tz)`` destination elements along
    ``axis`` (the source is consecutive along it) and the innermost axis
    ``z``, for one index of every other axis. Its ``ta / vector`` by
    ``tz / items`` work-items first read ``items`` runs of ``vector``
    consecutive source elements each (rows ``z`` of the tile) into the
    ``__local`` tile, laid out as ``tile_layout`` over shape ``(tz, ta)``;
    then, after a barrier, the same work-items write ``items`` runs of
    ``vector`` consecutive destination elements each (a column ``a`` of the
    tile, read across its rows: what a padded or swizzled tile layout keeps
    apart in the local memory banks).
    """
    ta, tz = tile
    n = len(dims)
    z = n - 1
    lx, ly = ta // vector, tz // items
    outer = [t for t in range(n) if t not in (axis, z)]
    groups = (dims[axis] // ta, dims[z] // tz, math.prod(dims[t] for t in outer))
    body: list[str] = []
    ids = []
    for name, call, extent in (
        ("ga", "get_group_id(0)", groups[0]),
        ("gz", "get_group_id(1)", groups[1]),
        ("go", "get_group_id(2)", groups[2]),
        ("lx", "get_local_id(0)", lx),
        ("ly", "get_local_id(1)", ly),
    ):
        var = scope.var(name, 0, extent - 1)
        body.append(f"const {itype} {scope.name(var)} = {call};")
        ids.append(var)
    ga, gz, go, lxv, lyv = ids
    lines, digits = decompose(
        scope, itype, go, [dims[t] for t in outer], [f"o{t}" for t in outer], [1] * len(outer)
    )
    body += lines
    body.append(f"__local {ctype} tile[{tile_layout.physical_size}];")

    def point(a_local: Expr, z_local: Expr) -> list[Expr]:
        values: list[Expr] = [Const(0)] * n
        for t, digit in zip(outer, digits, strict=True):
            values[t] = Var(digit.index)
        values[axis] = Var(ga.index) * ta + a_local
        values[z] = Var(gz.index) * tz + z_local
        return values

    vec = f"{ctype}{vector}" if vector > 1 else ctype
    lanes = [f".s{_LANES[k]}" if vector > 1 else "" for k in range(vector)]
    whole_rows = contiguous_along(tile_layout, 1, vector) is None
    for r in range(items):
        a_local, z_local = Var(lxv.index) * vector, Var(lyv.index) * items + r
        at = scope.c(substitute(src_offset, as_values(scope, point(a_local, z_local))))
        load = f"vload{vector}(0, {pointer('src', at)})" if vector > 1 else f"src[{at}]"
        body.append(f"const {vec} in{r} = {load};")
        if whole_rows and vector > 1:
            to = scope.c(_tile_offset(tile_layout, z_local, a_local))
            body.append(f"vstore{vector}(in{r}, 0, {pointer('tile', to)});")
            continue
        for k in range(vector):
            to = scope.c(_tile_offset(tile_layout, z_local, a_local + k))
            body.append(f"tile[{to}] = in{r}{lanes[k]};")
    body.append("barrier(CLK_LOCAL_MEM_FENCE);")
    flat = scope.var("t", 0, lx * ly - 1)
    body.append(
        f"const {itype} {scope.name(flat)} = {scope.c(Var(lyv.index) * lx + Var(lxv.index))};"
    )
    across = tz // vector
    i2 = scope.var("zi", 0, across - 1)
    j2 = scope.var("ai", 0, ta // items - 1)
    body.append(f"const {itype} {scope.name(i2)} = {scope.c(Var(flat.index) % across)};")
    body.append(f"const {itype} {scope.name(j2)} = {scope.c(Var(flat.index) // across)};")
    for r in range(items):
        a_local, z_local = Var(j2.index) * items + r, Var(i2.index) * vector
        reads = [
            f"tile[{scope.c(_tile_offset(tile_layout, z_local + k, a_local))}]"
            for k in range(vector)
        ]
        to = scope.c(row_major(point(a_local, z_local), dims))
        if vector > 1:
            value = f"({vec})({', '.join(reads)})"
            body.append(vector_store(value, vector, pointer("dst", to), ctype, nontemporal))
        else:
            body.append(f"dst[{to}] = {reads[0]};")
    global_size = (groups[0] * lx, groups[1] * ly, groups[2])
    return body, global_size, (lx, ly, 1)
