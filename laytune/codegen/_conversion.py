"""Pack and unpack kernels, generated from a layout's index map and inverse.

``pack``: logical (dense row-major) -> physical. The work-items walk the
physical buffer; each physical position reads its logical element through
the inverse map, or writes the pad value where the padding predicate fails.
``unpack``: physical -> logical, the work-items walk the logical buffer and
read through the forward map.

Both are one gather: ``dst[d] = src[f(d)]`` over a dense destination domain.
Two shapes of work-item:

* **tiled** (no padding, global memory): when stepping some destination axis
  ``q`` other than the innermost moves the source offset by exactly one (a
  transpose, NCHW -> NCHWc), a work-item moves a ``Va x Vb`` tile: ``Vb``
  vector loads of ``Va`` consecutive source elements, a register transpose,
  ``Va`` vector stores of ``Vb`` consecutive destination elements. Both sides
  then touch whole cache lines. Where both offsets are affine in the
  work-item's position (transposes, blocking), the work-item computes its
  first source and destination element from the global id alone (NCHW4c is
  read at ``32 * gid``), which keeps the addressing of a compiler that
  vectorises across work-items strided instead of gathered.
* **elementwise**: ``V`` consecutive destination elements per work-item,
  each with its own source offset and padding test (``V = 1`` is the naive
  one-element-per-work-item kernel; image destinations take one texel).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from laytune.codegen._emit import (
    BufferAccess,
    Scope,
    c_float,
    c_ident,
    contiguous_along,
    ctype_of,
    paren,
    pointer,
)
from laytune.codegen._source import decompose, indent
from laytune.layout import Const, Expr, Layout, Var, substitute
from laytune.space import IMAGE_DTYPES, affine_terms

__all__ = ["ConversionKernel", "pack_kernel", "unpack_kernel"]

_TILE_WIDTHS = (16, 8, 4, 2)
_LANES = "0123456789abcdef"


@dataclass(frozen=True)
class ConversionKernel:
    name: str
    source: str
    global_size: int


def _pad_text(pad_value: object, dtype: str) -> str:
    # None (never read) and UNDEF get NaN, like laytune.layout.pack: a kernel
    # that forgets its guard reads NaN and fails verification.
    value = pad_value if isinstance(pad_value, (int, float)) else math.nan
    return c_float(float(value), dtype)


def _widest(extent: int, limit: int) -> int:
    return next((w for w in _TILE_WIDTHS if w <= limit and extent % w == 0), 1)


def _row_major(indices: Sequence[Expr], shape: Sequence[int]) -> Expr:
    total: Expr = Const(0)
    for index, extent in zip(indices, shape, strict=True):
        total = total * extent + index
    return total


def _steps_by_one(scope: Scope, offset: Expr, domain: Sequence[Var], t: int) -> bool:
    """Whether moving domain axis ``t`` by one moves ``offset`` by exactly one."""
    v = domain[t]
    lo, hi = scope.ranges[v.index]
    if hi - lo < 1:
        return False
    scope.set_range(v, lo, hi - 1)
    moved = [d + 1 if d is v else d for d in domain]
    step = scope.simplify(substitute(offset, _as_values(scope, moved)) - offset)
    scope.set_range(v, lo, hi)
    return step == Const(1)


def _unit_step_axis(
    scope: Scope, offset: Expr, domain: Sequence[Var], shape: Sequence[int]
) -> int | None:
    """The last non-innermost domain axis along which ``offset`` steps by exactly 1."""
    for t in range(len(domain) - 2, -1, -1):
        if shape[t] > 1 and _steps_by_one(scope, offset, domain, t):
            return t
    return None


def _contiguous_run_axis(layout: Layout) -> tuple[int | None, int]:
    """A non-innermost logical axis whose aligned runs of ``width`` elements are
    consecutive physical elements (the widest such run), or (None, 1)."""
    shape = layout.shape
    for t in range(len(shape) - 2, -1, -1):
        for width in _TILE_WIDTHS:
            if shape[t] % width == 0 and contiguous_along(layout, t, width) is None:
                return t, width
    return None, 1


def _as_values(scope: Scope, values: Sequence[Expr]) -> list[Expr]:
    """Substitution list for an expression over the first len(values) scope variables."""
    full: list[Expr] = [Var(k, n) for k, n in enumerate(scope.names)]
    for k, value in enumerate(values):
        full[k] = value
    return full


def _work_items(
    scope: Scope, itype: str, dims: Sequence[int], index_vars: Sequence[Var], steps: Sequence[int]
) -> tuple[list[str], list[Var], Var, int]:
    """One work-item per block of ``steps`` elements of the row-major ``dims``:
    the lines that read the global id and split it into the block's first
    index (``base``, one variable per axis), the id variable, and the number
    of work-items."""
    extents = [e // s for e, s in zip(dims, steps, strict=True)]
    gid_total = math.prod(extents)
    gid = scope.var("gid", 0, gid_total - 1)
    lines, base = decompose(
        scope, itype, gid, extents, [f"{scope.name(v)}_" for v in index_vars], steps
    )
    return [f"const {itype} {scope.name(gid)} = get_global_id(0);", *lines], base, gid, gid_total


def _merged_digits(gid: Var, extents: Sequence[int], coeffs: Sequence[int]) -> Expr:
    """``sum(coeffs[t] * digit_t)`` over the row-major digits of ``gid`` (digit
    ``t`` ranges over ``extents[t]``), with neighbouring digits merged into one
    quotient where they line up: ``224 * (gid // 28 % 224) + 8 * (gid % 28)``
    is ``8 * (gid % 6272)``, and a work-item that walks its source in order
    reads at ``32 * gid``."""
    strides = [math.prod(extents[t + 1 :]) for t in range(len(extents))]
    total: Expr = Const(0)
    t = len(extents) - 1
    while t >= 0:
        if extents[t] == 1:  # always 0
            t -= 1
            continue
        lo, span = t, extents[t]
        while t > 0 and (extents[t - 1] == 1 or coeffs[t - 1] == coeffs[lo] * span):
            t -= 1
            span *= extents[t]
        if coeffs[lo]:
            quotient = gid // strides[lo] if strides[lo] > 1 else gid
            total = total + (quotient % span) * coeffs[lo]
        t -= 1
    return total


def _affine_in_digits(
    scope: Scope,
    offset: Expr,
    digits: Sequence[Var],
    steps: Sequence[int],
    lanes: Sequence[Sequence[int]],
) -> tuple[list[int], list[int]] | None:
    """When ``offset`` at the tile element ``digit * step + lane`` is
    ``sum(coeffs[t] * digit_t) + shift[lane]`` for every lane: (coeffs, shifts)."""
    coeffs: list[int] | None = None
    shifts = []
    for lane in lanes:
        at = [Var(d.index) * s + k for d, s, k in zip(digits, steps, lane, strict=True)]
        terms = affine_terms(scope.simplify(substitute(offset, _as_values(scope, at))))
        if terms is None or not set(terms[0]) <= {d.index for d in digits}:
            return None
        form = [terms[0].get(d.index, 0) for d in digits]
        if coeffs not in (None, form):
            return None
        coeffs = form
        shifts.append(terms[1])
    assert coeffs is not None
    return coeffs, shifts


def _tile_transpose(
    scope: Scope,
    itype: str,
    ctype: str,
    index_vars: Sequence[Var],
    dims: Sequence[int],
    tile_axis: int,
    va: int,
    vb: int,
    src_offset: Expr,
) -> tuple[list[str], int]:
    """Body of a register-tile transpose over the destination's row-major
    ``dims``: each work-item loads ``vb`` vectors of ``va`` source elements
    (``tile_axis`` steps by one in the source) and stores ``va`` vectors of
    ``vb`` elements along the destination's innermost axis. Returns the body
    and the number of work-items.

    When both offsets are affine in the work-item's digits (transposes,
    blocking), the work-item computes its first source and destination
    element from the global id alone, with the digits merged
    (:func:`_merged_digits`): a compiler that vectorises across work-items
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
    src = _affine_in_digits(scope, src_offset, digits, steps, loads)
    dst = _affine_in_digits(scope, _row_major(index_vars, dims), digits, steps, stores)
    if src is not None and dst is not None:
        gid_total = math.prod(extents)
        gid = scope.var("gid", 0, gid_total - 1)
        body = [f"const {itype} {scope.name(gid)} = get_global_id(0);"]
        firsts = []
        for name, (coeffs, _), what in (("src0", src, "read"), ("dst0", dst, "written")):
            first = scope.simplify(_merged_digits(gid, extents, coeffs))
            var = scope.var(name, *scope.bounds(first))
            body.append(
                f"const {itype} {scope.name(var)} = {scope.c(first)};  /* first element {what} */"
            )
            firsts.append(var)
        src_at = [scope.c(Var(firsts[0].index) + k) for k in src[1]]
        dst_at = [scope.c(Var(firsts[1].index) + k) for k in dst[1]]
    else:
        body, base, _, gid_total = _work_items(scope, itype, dims, index_vars, steps)
        src_at = [
            scope.c(
                substitute(
                    src_offset,
                    _as_values(scope, [Var(v.index) + k for v, k in zip(base, lane, strict=True)]),
                )
            )
            for lane in loads
        ]
        dst_at = [
            scope.c(_row_major([Var(v.index) + k for v, k in zip(base, lane, strict=True)], dims))
            for lane in stores
        ]
    vec = f"{ctype}{va}" if va > 1 else ctype
    for b, off in enumerate(src_at):
        load = f"vload{va}(0, {pointer('src', off)})" if va > 1 else f"src[{off}]"
        body.append(f"const {vec} r{b} = {load};")
    for a, off in enumerate(dst_at):
        lanes = [f"r{b}.s{_LANES[a]}" if va > 1 else f"r{b}" for b in range(vb)]
        if vb > 1:
            body.append(f"vstore{vb}(({ctype}{vb})({', '.join(lanes)}), 0, {pointer('dst', off)});")
        else:
            body.append(f"dst[{off}] = {lanes[0]};")
    return body, gid_total


def _header(kind: str, name: str, layout: Layout, pad_value: object) -> list[str]:
    lines = [
        f"/* {kind} {name}: {layout.index_map}",
        f"   logical {layout.shape} -> physical {layout.flat_shape}",
    ]
    if layout.has_padding:
        lines.append(
            f"   padding holds {'NaN (pad_value None)' if pad_value is None else pad_value}"
        )
    lines[-1] += " */"
    return lines


def pack_kernel(
    name: str,
    layout: Layout,
    dtype: str,
    pad_value: object = None,
    memory: str = "global",
    elements_per_item: int | None = None,
    kernel_name: str | None = None,
) -> ConversionKernel:
    """Kernel ``<name>_pack(src, dst)``: logical ``src`` -> physical ``dst``.

    ``elements_per_item=None`` picks the tiled kernel where it applies, else
    four elements per work-item along the physical innermost axis; an integer
    forces the elementwise kernel with that many (1: naive).
    """
    ctype = ctype_of(dtype)
    kname = kernel_name or f"{c_ident(name)}_pack"
    pshape = layout.physical_shape
    inverse = layout.inverse()
    scope = Scope()
    # physical index variables first: inverse expressions use Var(t) for them
    phys = [scope.var(f"p{t}", 0, e - 1) for t, e in enumerate(pshape)]
    logical = [substitute(e, phys) for e in inverse.index_map.outputs]
    src_offset = _row_major(logical, layout.shape)
    conditions = [(substitute(c.expr, phys), c.lo, c.hi) for c in inverse.conditions]
    itype = (
        "int" if scope.fits_int(_row_major(phys, pshape)) and scope.fits_int(src_offset) else "long"
    )
    pad = _pad_text(pad_value, dtype)
    image = memory == "image2d"
    dst_param = "__write_only image2d_t dst" if image else f"__global {ctype}* restrict dst"
    signature = f"__kernel void {kname}(__global const {ctype}* restrict src, {dst_param})"

    tile_axis = None
    if not image and not conditions and elements_per_item is None and len(pshape) > 1:
        tile_axis = _unit_step_axis(scope, src_offset, phys, pshape)

    body: list[str] = []
    gid_total: int
    if tile_axis is not None:
        va, vb = _widest(pshape[tile_axis], 16), _widest(pshape[-1], 8)
        tile_body, gid_total = _tile_transpose(
            scope, itype, ctype, phys, pshape, tile_axis, va, vb, src_offset
        )
        body += tile_body
        note = f"   tile {va} x {vb}: physical axes {tile_axis} and {len(pshape) - 1}"
    else:
        width = 4 if image else (elements_per_item or _widest(pshape[-1], 4))
        if pshape[-1] % width:
            raise ValueError(
                f"{width} elements per item do not divide the innermost extent {pshape[-1]}"
            )
        steps = [1] * (len(pshape) - 1) + [width]
        prologue, base, gid, gid_total = _work_items(scope, itype, pshape, phys, steps)
        body += prologue
        values = []
        contiguous = (
            not conditions and width > 1 and _steps_by_one(scope, src_offset, phys, len(pshape) - 1)
        )
        if contiguous and not image:
            at = _as_values(scope, [Var(v.index) for v in base])
            off = scope.c(substitute(src_offset, at))
            dst_off = scope.c(_row_major([Var(v.index) for v in base], pshape))
            body.append(
                f"vstore{width}(vload{width}(0, {pointer('src', off)}), 0, {pointer('dst', dst_off)});"
            )
        for lane in range(0 if contiguous and not image else width):
            at = [Var(v.index) + (lane if t == len(pshape) - 1 else 0) for t, v in enumerate(base)]
            at_values = _as_values(scope, at)
            read = f"src[{scope.c(substitute(src_offset, at_values))}]"
            tests = _condition_c(scope, conditions, at_values)
            values.append(f"({tests}) ? {read} : {pad}" if tests else read)
        if width == 1:
            body.append(f"dst[{scope.name(gid)}] = {values[0]};")
        elif values:
            for lane, value in enumerate(values):
                body.append(f"const {ctype} v{lane} = {value};")
            vector = f"({ctype}{width})({', '.join(f'v{k}' for k in range(width))})"
            if image:
                x, y = _texel_coords(layout, [Var(v.index) for v in base])
                write = IMAGE_DTYPES[dtype].write
                body.append(f"{write}(dst, (int2)({scope.c(x)}, {scope.c(y)}), {vector});")
            else:
                off = scope.c(_row_major([Var(v.index) for v in base], pshape))
                body.append(f"vstore{width}({vector}, 0, {pointer('dst', off)});")
        note = f"   {width} element{'s' if width > 1 else ''} per work-item"
    head = _header("pack", name, layout, pad_value)
    head[-1] = head[-1][:-3]
    head += [note + " */"]
    text = "\n".join([*head, signature + " {", *indent(body), "}"])
    return ConversionKernel(kname, text, gid_total)


def unpack_kernel(
    name: str,
    layout: Layout,
    dtype: str,
    memory: str = "global",
    elements_per_item: int | None = None,
    kernel_name: str | None = None,
) -> ConversionKernel:
    """Kernel ``<name>_unpack(src, dst)``: physical ``src`` -> logical ``dst``."""
    ctype = ctype_of(dtype)
    kname = kernel_name or f"{c_ident(name)}_unpack"
    shape = layout.shape
    scope = Scope()
    xs = [scope.var(f"x{d}", 0, e - 1) for d, e in enumerate(shape)]
    access = BufferAccess(name, "src", layout, dtype, memory)
    image = memory == "image2d"
    src_offset = None if image else access.flat_offset(xs)
    flat_phys = math.prod(layout.flat_shape)
    itype = "int" if max(flat_phys, math.prod(shape)) < 2**31 else "long"
    src_param = "__read_only image2d_t src" if image else f"__global const {ctype}* restrict src"
    signature = f"__kernel void {kname}({src_param}, __global {ctype}* restrict dst)"

    tile_axis, va = None, 1
    if not image and elements_per_item is None and len(shape) > 1:
        tile_axis = _unit_step_axis(scope, src_offset, xs, shape)  # type: ignore[arg-type]
        va = _widest(shape[tile_axis], 16) if tile_axis is not None else 1
        if tile_axis is None:  # runs of consecutive elements, as in a blocked axis (c % 4)
            tile_axis, va = _contiguous_run_axis(layout)
    body: list[str] = []
    if tile_axis is not None:
        vb = _widest(shape[-1], 8)
        tile_body, gid_total = _tile_transpose(
            scope,
            itype,
            ctype,
            xs,
            shape,
            tile_axis,
            va,
            vb,
            src_offset,  # type: ignore[arg-type]
        )
        body += tile_body
        note = f"tile {va} x {vb}: logical axes {tile_axis} and {len(shape) - 1}"
    else:
        width = elements_per_item or _widest(shape[-1], 4)
        if shape[-1] % width:
            raise ValueError(
                f"{width} elements per item do not divide the innermost extent {shape[-1]}"
            )
        steps = [1] * (len(shape) - 1) + [width]
        prologue, base, gid, gid_total = _work_items(scope, itype, shape, xs, steps)
        body += prologue
        reads = []
        for lane in range(width):
            at = [Var(v.index) + (lane if d == len(shape) - 1 else 0) for d, v in enumerate(base)]
            reads.append(access.load(at, scope))
        contiguous = (
            not image and width > 1 and _steps_by_one(scope, src_offset, xs, len(shape) - 1)
        )  # type: ignore[arg-type]
        if width == 1:
            body.append(f"dst[{scope.name(gid)}] = {reads[0]};")
        elif contiguous:
            at = [Var(v.index) for v in base]
            read = access.load(at, scope, width)
            off = scope.c(_row_major(at, shape))
            body.append(f"vstore{width}({read}, 0, {pointer('dst', off)});")
        else:
            off = scope.c(_row_major([Var(v.index) for v in base], shape))
            body.append(
                f"vstore{width}(({ctype}{width})({', '.join(reads)}), 0, {pointer('dst', off)});"
            )
        note = f"{width} element{'s' if width > 1 else ''} per work-item"
    head = _header("unpack", name, layout, None)
    head[-1] = head[-1][:-3] + f"\n   {note} */"
    text = "\n".join([*head, signature + " {", *indent(body), "}"])
    return ConversionKernel(kname, text, gid_total)


def _texel_coords(layout: Layout, phys: Sequence[Expr]) -> tuple[Expr, Expr]:
    """(x, y) of the texel holding physical index ``phys`` (last index: the lane)."""
    pshape = layout.physical_shape
    (a, b), (c, _) = layout.index_map.groups
    y = _row_major(phys[a:b], pshape[a:b])
    x = _row_major(phys[c:-1], pshape[c:-1])
    return x, y


def _condition_c(
    scope: Scope, conditions: Sequence[tuple[Expr, int, int]], values: list[Expr]
) -> str:
    parts = []
    for expr, lo, hi in conditions:
        e = scope.simplify(substitute(expr, values))
        elo, ehi = scope.bounds(e)
        text = paren(scope.c(e))
        if lo == hi:
            if not elo == ehi == lo:
                parts.append(f"{text} == {lo}")
            continue
        if elo < lo:
            parts.append(f"{text} >= {lo}")
        if ehi > hi:
            parts.append(f"{text} <= {hi}")
    return " && ".join(parts)
