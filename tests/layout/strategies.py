"""Hypothesis strategies: random index expressions, maps, shapes and family layouts."""

from __future__ import annotations

import math

from hypothesis import assume
from hypothesis import strategies as st

from laytune.exceptions import LayoutError
from laytune.layout import (
    IndexMap,
    Layout,
    block,
    compose,
    identity,
    pad_every,
    pad_rows,
    panel,
    permute,
    row_xor,
    swizzle,
    texture,
    tile,
)
from laytune.layout._expr import Const, Expr, Var, binary_op

shapes = st.lists(st.integers(1, 9), min_size=1, max_size=3).map(tuple)


def exprs(ndim: int) -> st.SearchStrategy[Expr]:
    leaves = st.one_of(
        st.integers(0, ndim - 1).map(Var),
        st.integers(-6, 12).map(Const),
    )

    def grow(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
        constant = st.integers(1, 9)
        return st.one_of(
            st.tuples(st.sampled_from(["+", "-", "^", "&"]), children, children),
            st.tuples(st.just("*"), children, st.integers(-4, 8).map(Const)),
            st.tuples(st.just("*"), children, children),
            st.tuples(st.sampled_from(["//", "%"]), children, constant.map(Const)),
            st.tuples(st.sampled_from(["<<", ">>"]), children, st.integers(0, 3).map(Const)),
        ).map(lambda t: binary_op(*t))

    return st.recursive(leaves, grow, max_leaves=8)


@st.composite
def maps_and_shapes(draw: st.DrawFn) -> tuple[IndexMap, tuple[int, ...]]:
    shape = draw(shapes)
    ndim = len(shape)
    outputs = draw(st.lists(exprs(ndim), min_size=1, max_size=3))
    names = tuple("ijk"[:ndim])
    seps = draw(st.sets(st.integers(1, max(1, len(outputs) - 1)), max_size=len(outputs) - 1))
    seps = tuple(sorted(s for s in seps if 0 < s < len(outputs)))
    return IndexMap(names, tuple(outputs), seps), shape


@st.composite
def family_layouts(draw: st.DrawFn, max_parts: int = 2) -> Layout:
    """A random valid layout: one family, possibly followed by another on its physical shape."""
    shape = draw(st.lists(st.integers(1, 12), min_size=2, max_size=3).map(tuple))
    layout = draw(one_family(shape))
    for _ in range(draw(st.integers(0, max_parts - 1))):
        pshape = layout.physical_shape
        if len(pshape) > 4:
            break
        try:
            layout = compose(draw(one_family(pshape)), layout)
        except LayoutError:
            assume(False)
    return layout


@st.composite
def one_family(draw: st.DrawFn, shape: tuple[int, ...]) -> Layout:
    ndim = len(shape)
    kind = draw(
        st.sampled_from(
            ["identity", "permute", "block", "tile", "pad_rows", "pad_every", "row_xor", "swizzle"]
        )
    )
    try:
        if kind == "identity":
            return identity(shape)
        if kind == "permute":
            return permute(shape, draw(st.permutations(range(ndim))))
        if kind == "block":
            return block(shape, draw(st.integers(0, ndim - 1)), draw(st.integers(1, 5)))
        if kind == "tile":
            k = draw(st.integers(1, min(2, ndim)))
            return tile(shape, draw(st.lists(st.integers(1, 5), min_size=k, max_size=k)))
        if kind == "pad_rows":
            return pad_rows(shape, draw(st.integers(1, 3)))
        if kind == "pad_every":
            return pad_every(shape, draw(st.integers(1, 3)), draw(st.integers(1, 3)))
        if kind == "row_xor":
            period = draw(st.sampled_from([1, 2, 4, 8]))
            chunk = draw(st.sampled_from([1, 2, 4]))
            assume(shape[-1] % chunk == 0 and (shape[-1] // chunk) % period == 0)
            return row_xor(shape, period, chunk)
        bits = draw(st.integers(1, 2))
        base = draw(st.integers(0, 2))
        shift = draw(st.integers(bits, 3))
        size = 1
        for s in shape:
            size *= s
        assume(size % (1 << (bits + base + shift)) == 0)
        return swizzle(shape, bits, base, shift)
    except LayoutError:
        assume(False)
        raise


FAMILIES = (
    "identity",
    "permute",
    "block",
    "panel",
    "tile",
    "pad_rows",
    "pad_every",
    "row_xor",
    "swizzle",
    "texture",
)
"""Every family a global buffer's layouts are drawn from."""


@st.composite
def one_of_every_family(draw: st.DrawFn, shape: tuple[int, ...]) -> Layout:
    """Any family with any parameters its constructor takes, padded ones included."""
    ndim = len(shape)
    kind = draw(st.sampled_from(FAMILIES))
    try:
        if kind == "identity":
            return identity(shape)
        if kind == "permute":
            return permute(shape, draw(st.permutations(range(ndim))))
        if kind == "block":
            return block(shape, draw(st.integers(0, ndim - 1)), draw(st.integers(1, 9)))
        if kind == "panel":
            return panel(shape, draw(st.integers(0, ndim - 1)), draw(st.integers(1, 9)))
        if kind == "tile":
            k = draw(st.integers(1, min(2, ndim)))
            return tile(shape, draw(st.lists(st.integers(1, 9), min_size=k, max_size=k)))
        if kind == "pad_rows":
            return pad_rows(shape, draw(st.integers(1, 9)))
        if kind == "pad_every":
            return pad_every(shape, draw(st.integers(1, 5)), draw(st.integers(1, 9)))
        if kind == "row_xor":
            return row_xor(shape, draw(st.integers(1, 9)), draw(st.sampled_from([1, 2, 3, 4])))
        if kind == "texture":
            return texture(shape, draw(st.integers(0, ndim - 1)))
        bits = draw(st.integers(1, 3))
        return swizzle(shape, bits, draw(st.integers(0, 3)), draw(st.integers(bits, 5)))
    except LayoutError:
        assume(False)
        raise


@st.composite
def every_family_layouts(draw: st.DrawFn, max_extent: int = 40) -> Layout:
    """A family on a shape up to ``max_extent`` per axis (larger than most
    periods, so that reduced shapes are smaller than the shape), possibly followed by a second
    one on its physical shape (texture last: it splits axes)."""
    shape = draw(st.lists(st.integers(1, max_extent), min_size=2, max_size=3).map(tuple))
    assume(math.prod(shape) <= 6000)
    layout = draw(one_of_every_family(shape))
    if draw(st.booleans()) and not layout.index_map.separators:
        pshape = layout.physical_shape
        assume(len(pshape) <= 4 and math.prod(pshape) <= 20000)
        layout = compose(draw(one_of_every_family(pshape)), layout)
    return layout
