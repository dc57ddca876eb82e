"""Layout families: the layouts the search samples per buffer.

A :class:`Layout` is an index map on one logical shape together with the name
and parameters of the family that made it (for records, pandas and plots).
Each family knows its inverse (for padded layouts, the inverse on the reached
positions plus the padding predicate), and families compose: the inverse of a
composition is the composition of the inverses, in reverse order.

Layouts are shape-specific because several families are: padding a row needs
the row length, a flat swizzle needs the flat offset.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import reduce
from operator import mul
from typing import Any

from laytune.exceptions import (
    ArgumentTypeError,
    LayoutError,
    LayoutSyntaxError,
    ShapeMismatchError,
    excerpt,
)
from laytune.layout._expr import MAX_SHIFT, Const, Expr
from laytune.layout._index_map import AXIS_SEPARATOR, IndexMap, Shape, default_names
from laytune.layout._index_map import compose as compose_maps
from laytune.layout._inverse import Inverse, inverse_from
from laytune.layout._json import load_versioned

__all__ = [
    "Layout",
    "block",
    "compose",
    "custom",
    "identity",
    "pad_every",
    "pad_rows",
    "panel",
    "permute",
    "row_xor",
    "swizzle",
    "texture",
    "tile",
]

JSON_VERSION = 1
Params = tuple[tuple[str, Any], ...]


def _prod(values: Sequence[int]) -> int:
    return reduce(mul, values, 1)


def _freeze(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


@dataclass(frozen=True)
class Layout:
    """A layout of one buffer: family, parameters, logical shape, index map.

    ``inverse_map`` (physical -> logical) is the family's own inverse; when it
    is None the inverse is derived from the index map.
    """

    family: str
    params: Params
    shape: Shape
    index_map: IndexMap
    inverse_map: IndexMap | None = field(default=None, compare=False, repr=False)
    parts: tuple[Layout, ...] = field(default=(), compare=False, repr=False)
    _inverse: list[Inverse] = field(default_factory=list, compare=False, repr=False, hash=False)
    #: Built by a family constructor or by composing two layouts: injective by
    #: construction (every family is a bijection onto its image, and so is a
    #: composition of such maps), so validity needs no look at the elements.
    _injective: bool = field(default=False, compare=False, repr=False, hash=False)

    def __post_init__(self) -> None:
        if self._injective:
            self.index_map._known_injective(self.shape)
        else:
            self.index_map.validate(self.shape)

    # -- queries --------------------------------------------------------------
    @property
    def physical_shape(self) -> Shape:
        return self.index_map.physical_shape(self.shape)

    @property
    def flat_shape(self) -> Shape:
        return self.index_map.flat_shape(self.shape)

    @property
    def physical_size(self) -> int:
        return _prod(self.physical_shape)

    @property
    def padding_count(self) -> int:
        return self.index_map.padding_count(self.shape)

    @property
    def padding_fraction(self) -> float:
        """Padding as a fraction of the physical buffer."""
        return self.padding_count / self.physical_size

    @property
    def has_padding(self) -> bool:
        return self.padding_count > 0

    @property
    def is_identity(self) -> bool:
        return self.index_map.is_identity()

    @property
    def image_rank(self) -> int:
        """Number of physical axes after separators (1: flat buffer)."""
        return len(self.index_map.separators) + 1

    def inverse(self) -> Inverse:
        """Physical -> logical, exact on reached positions, with the padding predicate."""
        if not self._inverse:
            if self.inverse_map is not None:
                inv = inverse_from(self.index_map, self.shape, self.inverse_map)
            else:
                inv = self.index_map.inverse(self.shape)
            self._inverse.append(inv)
        return self._inverse[0]

    @property
    def recorded_family(self) -> str:
        """The family name this layout's JSON and :meth:`describe` carry: its
        family's, or for a family renamed since (:data:`RECORDED_AS`) the name
        its layouts were first recorded under; a composition's joins its parts'."""
        return self._recorded()[0]

    def _recorded(self) -> tuple[str, Params]:
        if self.parts:
            named = tuple(p._recorded() for p in self.parts)
            return "+".join(name for name, _ in named), named
        name, lead = RECORDED_AS.get(self.family, (self.family, ()))
        return name, (*lead, *self.params)

    def describe(self) -> str:
        """Short human label, e.g. ``block(axis=1, factor=4)``."""
        if self.parts:
            return " then ".join(p.describe() for p in self.parts)
        if self.family == "swizzle" and dict(self.params).get("form") == "flat":
            p = dict(self.params)
            return f"Sw<{p['bits']},{p['base']},{p['shift']}>"
        family, params = self._recorded()
        args = ", ".join(f"{k}={v}" for k, v in params)
        return f"{family}({args})"

    def __str__(self) -> str:
        return str(self.index_map)

    # -- persistence -------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        family, params = self._recorded()
        data: dict[str, Any] = {
            "version": JSON_VERSION,
            "family": family,
            "params": {k: list(v) if isinstance(v, tuple) else v for k, v in params},
            "shape": list(self.shape),
            "index_map": str(self.index_map),
        }
        if self.parts:
            data["parts"] = [p.to_json() for p in self.parts]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any] | str) -> Layout:
        """Rebuild through the family's constructor (never by executing text)
        and check that it gives the recorded index map."""
        data = load_versioned(data, "layout", JSON_VERSION)
        try:
            family = data["family"]
            shape = tuple(int(s) for s in data["shape"])
            recorded = IndexMap.parse(data["index_map"])
            if "parts" in data:
                layout = _compose_all([cls.from_json(p) for p in data["parts"]])
            elif family == "custom":
                layout = custom(shape, recorded)
            else:
                if family not in FAMILIES:
                    raise LayoutSyntaxError(
                        f"unknown layout family {excerpt(family)!r} (known: {sorted(FAMILIES)})"
                    )
                params = {k: _freeze(v) for k, v in data["params"].items()}
                layout = FAMILIES[family](shape, **params)
        except (KeyError, TypeError) as err:
            raise LayoutSyntaxError(
                f"malformed layout JSON ({excerpt(repr(err))}): {excerpt(data)}"
            ) from None
        if layout.index_map != recorded or layout.shape != shape:
            raise LayoutSyntaxError(
                f"layout JSON says {excerpt(recorded)} on {excerpt(shape)} but family "
                f"{excerpt(family)!r} with its parameters gives {excerpt(layout.index_map)} on "
                f"{excerpt(layout.shape)}"
            )
        return layout


def _make(
    family: str,
    shape: Sequence[int],
    func: Callable[..., list[Any]],
    inverse: Callable[..., list[Any]] | None,
    **params: Any,
) -> Layout:
    shape = tuple(int(s) for s in shape)
    index_map = IndexMap.from_func(func, default_names(len(shape)))
    inverse_map = None
    if inverse is not None:
        inverse_map = IndexMap.from_func(inverse, tuple(f"p{k}" for k in range(index_map.ndim_out)))
    return Layout(family, tuple(params.items()), shape, index_map, inverse_map, _injective=True)


def _axis(shape: Sequence[int], axis: int) -> int:
    if not -len(shape) <= axis < len(shape):
        raise ShapeMismatchError(f"axis {axis} is out of range for shape {tuple(shape)}")
    return axis % len(shape)


def _positive(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise LayoutError(f"{name} must be a positive integer, got {value!r}")
    return value


def _row_major(indices: Sequence[Expr], extents: Sequence[int]) -> Expr:
    if not indices:
        return Const(0)
    flat = indices[0]
    for index, extent in zip(indices[1:], extents[1:], strict=True):
        flat = flat * extent + index
    return flat


def _unflatten(flat: Expr, extents: Sequence[int]) -> list[Expr]:
    out: list[Expr] = []
    for k in range(len(extents)):
        inner = _prod(extents[k + 1 :])
        value = flat // inner if inner > 1 else flat
        if k > 0:
            value = value % extents[k]
        out.append(value)
    return out


# -- families ---------------------------------------------------------------


def identity(shape: Sequence[int]) -> Layout:
    """Row-major, as the logical shape: ``[i, j]``."""
    return _make("identity", shape, lambda *x: list(x), lambda *p: list(p))


def permute(shape: Sequence[int], order: Sequence[int]) -> Layout:
    """Physical axis k is logical axis ``order[k]``: ``order=(1, 0)`` is ``[j, i]``."""
    order = tuple(int(o) for o in order)
    if sorted(order) != list(range(len(shape))):
        raise LayoutError(
            f"order {order} is not a permutation of the {len(shape)} axes of {tuple(shape)}"
        )
    back = [order.index(k) for k in range(len(order))]
    return _make(
        "permute",
        shape,
        lambda *x: [x[o] for o in order],
        lambda *p: [p[b] for b in back],
        order=order,
    )


def pad_rows(shape: Sequence[int], pad: int) -> Layout:
    """Flat, each row (last axis) followed by ``pad`` padding elements:
    ``i * (C + pad) + j``."""
    _positive("pad", pad)
    *lead, cols = shape
    pitch = cols + pad

    def forward(*x: Expr) -> list[Expr]:
        return [_row_major(x[:-1], lead) * pitch + x[-1]]

    def backward(p: Expr) -> list[Expr]:
        return [*_unflatten(p // pitch, lead), p % pitch]

    return _make("pad_rows", shape, forward, backward, pad=pad)


def pad_every(shape: Sequence[int], rows: int, pad: int) -> Layout:
    """Flat, ``pad`` padding elements after every ``rows`` rows:
    ``i * C + j + (i // rows) * pad`` (the auto memory planning layout)."""
    _positive("rows", rows)
    _positive("pad", pad)
    *lead, cols = shape
    group = rows * cols + pad

    def forward(*x: Expr) -> list[Expr]:
        r = _row_major(x[:-1], lead)
        return [r * cols + x[-1] + (r // rows) * pad]

    def backward(p: Expr) -> list[Expr]:
        within = p % group
        r = (p // group) * rows + within // cols
        return [*_unflatten(r, lead), within % cols]

    return _make("pad_every", shape, forward, backward, rows=rows, pad=pad)


def swizzle(shape: Sequence[int], bits: int, base: int, shift: int) -> Layout:
    """CuTe's ``Sw<bits,base,shift>`` on the flat row-major offset ``o``:
    ``o ^ (((o >> (base + shift)) & (2**bits - 1)) << base)``.

    ``shift >= bits`` makes it an involution (the bits it reads are not the
    bits it changes), which is how it knows its inverse.
    """
    for name, value in (("bits", bits), ("shift", shift)):
        _positive(name, value)
    if isinstance(base, bool) or not isinstance(base, int) or base < 0:
        raise LayoutError(f"base must be a non-negative integer, got {base!r}")
    if shift < bits:
        raise LayoutError(f"Sw<{bits},{base},{shift}> needs shift >= bits to be a bijection")
    if base + shift > MAX_SHIFT:  # checked before 1 << bits, which a record could make huge
        raise LayoutSyntaxError(
            f"Sw<{bits},{base},{shift}> shifts by {base + shift}, past the largest shift, "
            f"{MAX_SHIFT}"
        )
    mask = (1 << bits) - 1

    def sw(o: Expr) -> Expr:
        return o ^ (((o >> (base + shift)) & mask) << base)

    def forward(*x: Expr) -> list[Expr]:
        return [sw(_row_major(x, shape))]

    def backward(p: Expr) -> list[Expr]:
        return _unflatten(sw(p), shape)

    return _make(
        "swizzle", shape, forward, backward, form="flat", bits=bits, base=base, shift=shift
    )


def row_xor(shape: Sequence[int], period: int, chunk: int = 1) -> Layout:
    """XOR the column chunk with the row: ``[i, ((j // chunk) ^ (i % period)) * chunk + j % chunk]``
    on the last two axes (``chunk=1`` is ``[i, j ^ (i % period)]``)."""
    _positive("period", period)
    _positive("chunk", chunk)
    if len(shape) < 2:
        raise ShapeMismatchError(f"row_xor needs at least two axes, got shape {tuple(shape)}")

    def mix(row: Expr, col: Expr) -> Expr:
        if chunk == 1:
            return col ^ (row % period)
        return ((col // chunk) ^ (row % period)) * chunk + col % chunk

    def forward(*x: Expr) -> list[Expr]:
        return [*x[:-1], mix(x[-2], x[-1])]

    return _make("row_xor", shape, forward, forward, period=period, chunk=chunk)


def block(shape: Sequence[int], axis: int, factor: int) -> Layout:
    """Split ``axis`` by ``factor``: the outer part stays in place, the inner
    part becomes the last axis (NCHW -> NCHW4c is ``block(s, 1, 4)``).
    Padded when ``factor`` does not divide the extent."""
    axis = _axis(shape, axis)
    _positive("factor", factor)

    def forward(*x: Expr) -> list[Expr]:
        out = list(x)
        out[axis] = x[axis] // factor
        return [*out, x[axis] % factor]

    def backward(*p: Expr) -> list[Expr]:
        out = list(p[:-1])
        out[axis] = p[axis] * factor + p[-1]
        return out

    return _make("block", shape, forward, backward, axis=axis, factor=factor)


def panel(shape: Sequence[int], axis: int, factor: int) -> Layout:
    """Panels of ``factor`` along ``axis``, each stored whole: the panel index
    first, the other axes in order, the position in the panel last. A GEMM
    micro-kernel's packed operand: ``B[k, j]`` with ``axis=1`` is
    ``[j // NR, k, j % NR]``. Padded when ``factor`` does not divide the
    extent."""
    axis = _axis(shape, axis)
    _positive("factor", factor)
    rank = len(shape)

    def forward(*x: Expr) -> list[Expr]:
        others = [x[k] for k in range(rank) if k != axis]
        return [x[axis] // factor, *others, x[axis] % factor]

    def backward(*p: Expr) -> list[Expr]:
        out = list(p[1:-1])
        out.insert(axis, p[0] * factor + p[-1])
        return out

    return _make("panel", shape, forward, backward, axis=axis, factor=factor)


def tile(shape: Sequence[int], tile_shape: Sequence[int]) -> Layout:
    """Tiles of ``tile_shape`` over the last axes, tiles row-major, elements
    row-major inside a tile: ``[i // 16, j // 16, i % 16, j % 16]``."""
    tile_shape = tuple(_positive("tile extent", int(t)) for t in tile_shape)
    if not 0 < len(tile_shape) <= len(shape):
        raise ShapeMismatchError(f"tile {tile_shape} does not fit the axes of {tuple(shape)}")
    lead = len(shape) - len(tile_shape)

    def forward(*x: Expr) -> list[Expr]:
        tiled = x[lead:]
        return [
            *x[:lead],
            *(i // t for i, t in zip(tiled, tile_shape, strict=True)),
            *(i % t for i, t in zip(tiled, tile_shape, strict=True)),
        ]

    def backward(*p: Expr) -> list[Expr]:
        k = len(tile_shape)
        outer, inner = p[lead : lead + k], p[lead + k :]
        return [*p[:lead], *(o * t + i for o, i, t in zip(outer, inner, tile_shape, strict=True))]

    return _make("tile", shape, forward, backward, tile_shape=tile_shape)


def texture(shape: Sequence[int], axis: int, width_axis: int | None = None) -> Layout:
    """A 2-D image of RGBA texels: ``axis`` blocked by 4 into the texel, rows
    from the other axes with the blocked axis after the first, columns from
    ``width_axis`` (default: the last axis other than ``axis``) and the texel.
    NHWC with ``axis=3`` gives ``[n, c // 4, h, AXIS_SEPARATOR, w, c % 4]``."""
    axis = _axis(shape, axis)
    if len(shape) < 2:
        raise ShapeMismatchError(f"texture needs at least two axes, got shape {tuple(shape)}")
    if width_axis is None:
        width_axis = max(k for k in range(len(shape)) if k != axis)
    width_axis = _axis(shape, width_axis)
    if width_axis == axis:
        raise LayoutError("texture: the width axis must differ from the blocked axis")
    others = [k for k in range(len(shape)) if k not in (axis, width_axis)]
    rows: list[Any] = [*others[:1], "c", *others[1:]] if others else ["c"]

    def forward(*x: Expr) -> list[Any]:
        outer = [x[axis] // 4 if r == "c" else x[r] for r in rows]
        return [*outer, AXIS_SEPARATOR, x[width_axis], x[axis] % 4]

    def backward(*p: Expr) -> list[Expr]:
        out: list[Expr] = [Const(0)] * len(shape)
        for position, r in enumerate(rows):
            if r != "c":
                out[r] = p[position]
        out[axis] = p[rows.index("c")] * 4 + p[-1]
        out[width_axis] = p[-2]
        return out

    return _make("texture", shape, forward, backward, axis=axis, width_axis=width_axis)


def custom(shape: Sequence[int], index_map: IndexMap | str) -> Layout:
    """Any valid index map, for layouts outside the families."""
    if isinstance(index_map, str):
        index_map = IndexMap.parse(index_map)
    return Layout("custom", (), tuple(int(s) for s in shape), index_map)


FAMILIES: dict[str, Callable[..., Layout]] = {
    "identity": identity,
    "permute": permute,
    "pad_rows": pad_rows,
    "pad_every": pad_every,
    "block": block,
    "panel": panel,
    "tile": tile,
    "texture": texture,
}


def _swizzle_from_params(shape: Sequence[int], form: str, **params: Any) -> Layout:
    if form == "flat":
        return swizzle(shape, **params)
    if form == "rows":
        return row_xor(shape, **params)
    raise LayoutError(f"unknown swizzle form {form!r} (known: 'flat', 'rows')")


FAMILIES["swizzle"] = _swizzle_from_params
FAMILIES["row_xor"] = row_xor

RECORDED_AS: dict[str, tuple[str, Params]] = {"row_xor": ("swizzle", (("form", "rows"),))}
"""Families renamed since their layouts were first recorded, with the name
and leading parameters their text keeps: a layout's JSON (hence a
candidate's key, by which records are found) and its :meth:`Layout.describe`
(the names of a space's optuna choices, which a stored study holds) stay as
they were, so records and studies written before still match. ``row_xor``
layouts carried the family ``swizzle`` with ``form="rows"``."""


def compose(outer: Any, inner: Any) -> Any:
    """``outer`` after ``inner``: for IndexMaps ``g(f(x))``; for layouts, a
    composite layout on ``inner``'s logical shape (``outer`` must be built on
    ``inner``'s physical shape) whose inverse is ``inner^-1 . outer^-1``."""
    if isinstance(outer, IndexMap) and isinstance(inner, IndexMap):
        return compose_maps(outer, inner)
    if not (isinstance(outer, Layout) and isinstance(inner, Layout)):
        raise ArgumentTypeError(
            "compose takes two IndexMaps or two Layouts, "
            f"got {type(outer).__name__} and {type(inner).__name__}"
        )
    if outer.shape != inner.physical_shape:
        raise ShapeMismatchError(
            f"cannot compose {outer.describe()} (built on {outer.shape}) after "
            f"{inner.describe()} (physical shape {inner.physical_shape})"
        )
    index_map = compose_maps(outer.index_map, inner.index_map)
    inverse_map = None
    if outer.inverse_map is not None and inner.inverse_map is not None:
        inverse_map = compose_maps(inner.inverse_map, outer.inverse_map)
    parts = (*(inner.parts or (inner,)), *(outer.parts or (outer,)))
    family = "+".join(p.family for p in parts)
    params = tuple((p.family, p.params) for p in parts)
    return Layout(family, params, inner.shape, index_map, inverse_map, parts, _injective=True)


def _compose_all(parts: Sequence[Layout]) -> Layout:
    layout = parts[0]
    for part in parts[1:]:
        layout = compose(part, layout)
    return layout
