"""Shared analysis of conversion kernels: every pack, unpack and conversion
is one gather ``dst[d] = src[f(d)]`` over a dense destination domain.

These helpers read the source offset ``f`` symbolically: where it steps by
exactly one (so a work-item may load a vector), how a work-item's first
element follows from the global id, and the C text of padding tests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from laytune.codegen._emit import Scope, c_bits, c_float, paren
from laytune.codegen._runs import contiguous_along
from laytune.codegen._source import decompose
from laytune.layout import Const, Expr, Layout, Var, substitute
from laytune.space import affine_terms

__all__ = [
    "TILE_WIDTHS",
    "affine_in_digits",
    "as_values",
    "condition_c",
    "contiguous_run_axis",
    "merged_digits",
    "pad_text",
    "row_major",
    "steps_by_one",
    "texel_coords",
    "unit_step_axis",
    "vector_items",
    "widest",
    "work_items",
]

TILE_WIDTHS = (16, 8, 4, 2)


def pad_text(pad_value: object, dtype: str, storage: bool = True) -> str:
    """The pad value as a literal: of :func:`storage_ctype` (``storage``,
    the copies' type: a half's bits) or of the dtype's own C type."""
    # None (never read) and UNDEF get NaN, like laytune.layout.pack: a kernel
    # that forgets its guard reads NaN and fails verification.
    value = pad_value if isinstance(pad_value, (int, float)) else math.nan
    return (c_bits if storage else c_float)(float(value), dtype)


def widest(extent: int, limit: int) -> int:
    return next((w for w in TILE_WIDTHS if w <= limit and extent % w == 0), 1)


def row_major(indices: Sequence[Expr], shape: Sequence[int]) -> Expr:
    total: Expr = Const(0)
    for index, extent in zip(indices, shape, strict=True):
        total = total * extent + index
    return total


def steps_by_one(scope: Scope, offset: Expr, domain: Sequence[Var], t: int) -> bool:
    """Whether moving domain axis ``t`` by one moves ``offset`` by exactly one."""
    v = domain[t]
    lo, hi = scope.ranges[v.index]
    if hi - lo < 1:
        return False
    scope.set_range(v, lo, hi - 1)
    moved = [d + 1 if d is v else d for d in domain]
    step = scope.simplify(substitute(offset, as_values(scope, moved)) - offset)
    scope.set_range(v, lo, hi)
    return step == Const(1)


def unit_step_axis(
    scope: Scope, offset: Expr, domain: Sequence[Var], shape: Sequence[int]
) -> int | None:
    """The last non-innermost domain axis along which ``offset`` steps by exactly 1."""
    for t in range(len(domain) - 2, -1, -1):
        if shape[t] > 1 and steps_by_one(scope, offset, domain, t):
            return t
    return None


def contiguous_run_axis(layout: Layout) -> tuple[int | None, int]:
    """A non-innermost logical axis whose aligned runs of ``width`` elements are
    consecutive physical elements (the widest such run), or (None, 1)."""
    shape = layout.shape
    for t in range(len(shape) - 2, -1, -1):
        for width in TILE_WIDTHS:
            if shape[t] % width == 0 and contiguous_along(layout, t, width) is None:
                return t, width
    return None, 1


def as_values(scope: Scope, values: Sequence[Expr]) -> list[Expr]:
    """Substitution list for an expression over the first len(values) scope variables."""
    full: list[Expr] = [Var(k, n) for k, n in enumerate(scope.names)]
    for k, value in enumerate(values):
        full[k] = value
    return full


def work_items(
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


def vector_items(
    scope: Scope, itype: str, dims: Sequence[int], index_vars: Sequence[Var], width: int
) -> tuple[list[str], list[Var], Var, int]:
    """:func:`work_items` of ``width`` consecutive elements along the
    innermost of ``dims`` (one element along the others); ``width`` must
    divide the innermost extent."""
    if dims[-1] % width:
        raise ValueError(f"{width} elements per item do not divide the innermost extent {dims[-1]}")
    return work_items(scope, itype, dims, index_vars, [1] * (len(dims) - 1) + [width])


def merged_digits(gid: Var, extents: Sequence[int], coeffs: Sequence[int]) -> Expr:
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


def affine_in_digits(
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
        terms = affine_terms(scope.simplify(substitute(offset, as_values(scope, at))))
        if terms is None or not set(terms[0]) <= {d.index for d in digits}:
            return None
        form = [terms[0].get(d.index, 0) for d in digits]
        if coeffs not in (None, form):
            return None
        coeffs = form
        shifts.append(terms[1])
    assert coeffs is not None
    return coeffs, shifts


def texel_coords(layout: Layout, phys: Sequence[Expr]) -> tuple[Expr, Expr]:
    """(x, y) of the texel holding physical index ``phys`` (last index: the lane)."""
    pshape = layout.physical_shape
    (a, b), (c, _) = layout.index_map.groups
    y = row_major(phys[a:b], pshape[a:b])
    x = row_major(phys[c:-1], pshape[c:-1])
    return x, y


def condition_c(
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
