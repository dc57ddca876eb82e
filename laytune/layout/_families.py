"""Layout families: the layouts the search samples per buffer.

A :class:`Layout` is an index map on one logical shape together with the name
and parameters of the family that made it (for records, pandas and plots).
Each family knows its inverse (for padded layouts, the inverse on the reached
positions plus the padding predicate), and families compose: the inverse of a
composition is the composition of the inverses, in reverse order.

Layouts are shape-specific because several families are: padding a row needs
the row length, a flat swizzle needs the flat offset.

Each family is one :class:`LayoutFamily` of :data:`LAYOUT_FAMILIES`, beside
its maker and the parameters a search space tries for a shape: the space,
the records (:data:`FAMILIES`, by which a recorded layout is rebuilt) and
the public names read nothing else of it.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
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
    "FAMILIES",
    "LAYOUT_FAMILIES",
    "SCOPES",
    "Layout",
    "LayoutFamily",
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
ParamSets = Iterator[dict[str, Any]]


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
    # a layout is a value: the facts of its form are computed once (planning
    # asks a layout whether it pads millions of times)
    @functools.cached_property
    def physical_shape(self) -> Shape:
        return self.index_map.physical_shape(self.shape)

    @functools.cached_property
    def flat_shape(self) -> Shape:
        return self.index_map.flat_shape(self.shape)

    @property
    def physical_size(self) -> int:
        return math.prod(self.physical_shape)

    @functools.cached_property
    def padding_count(self) -> int:
        return self.index_map.padding_count(self.shape)

    @property
    def padding_fraction(self) -> float:
        """Padding as a fraction of the physical buffer."""
        return self.padding_count / self.physical_size

    @functools.cached_property
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
        family's, or for a family renamed since (``LayoutFamily.recorded_as``) the name
        its layouts were first recorded under; a composition's joins its parts'."""
        return self._recorded()[0]

    def _recorded(self) -> tuple[str, Params]:
        if self.parts:
            named = tuple(p._recorded() for p in self.parts)
            return "+".join(name for name, _ in named), named
        family = LAYOUT_FAMILIES.get(self.family)
        if family is None or family.recorded_as is None:
            return self.family, self.params
        name, lead = family.recorded_as
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
        and check that it gives the recorded index map. Layouts are values:
        one read back again (a record's layouts, read for every query of a
        records database) is the one rebuilt before, from a bounded cache."""
        data = load_versioned(data, "layout", JSON_VERSION)
        try:
            text = json.dumps(data, sort_keys=True)
        except (TypeError, ValueError):
            return cls._from_json(data)
        return _layout_from_text(text)

    @classmethod
    def _from_json(cls, data: Mapping[str, Any]) -> Layout:
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
        inner = math.prod(extents[k + 1 :])
        value = flat // inner if inner > 1 else flat
        if k > 0:
            value = value % extents[k]
        out.append(value)
    return out


# -- families ---------------------------------------------------------------


def identity(shape: Sequence[int]) -> Layout:
    """Row-major, as the logical shape: ``[i, j]``."""
    key = tuple(shape)
    if all(type(s) is int for s in key):  # anything else is checked (and refused) anew
        return _identity(key)
    return _make("identity", shape, lambda *x: list(x), lambda *p: list(p))


@functools.lru_cache(maxsize=4096)
def _identity(shape: tuple[int, ...]) -> Layout:
    """:func:`identity`, made once per shape (a value; planning asks for it often)."""
    return _make("identity", shape, lambda *x: list(x), lambda *p: list(p))


def _no_params(shape: tuple[int, ...], opts: Any, scope: str) -> ParamSets:
    yield {}


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


def _permute_params(shape: tuple[int, ...], opts: Any, scope: str) -> ParamSets:
    rank = len(shape)
    if rank >= 2:
        for k in range(rank - 1):
            yield {"order": (*(a for a in range(rank) if a != k), k)}


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


def _pad_rows_params(shape: tuple[int, ...], opts: Any, scope: str) -> ParamSets:
    if len(shape) >= 2:
        for pad in opts.local_pad_amounts if scope == "local" else opts.pad_amounts:
            yield {"pad": pad}


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


def _pad_every_params(shape: tuple[int, ...], opts: Any, scope: str) -> ParamSets:
    if len(shape) < 2:
        return
    if scope == "local":
        for rows in opts.pad_every_rows:
            for pad in opts.local_pad_amounts:
                if rows < shape[-2]:
                    yield {"rows": rows, "pad": pad}
        return
    for n in opts.pad_every_rows:
        if n < math.prod(shape[:-1]):
            for pad in opts.pad_amounts:
                yield {"rows": n, "pad": pad}


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


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _swizzle_params(shape: tuple[int, ...], opts: Any, scope: str) -> ParamSets:
    if len(shape) < 2 or not _is_pow2(shape[-1]):
        return
    size, log_cols = math.prod(shape), shape[-1].bit_length() - 1
    for bits in opts.swizzle_bits:
        for base in opts.swizzle_bases:
            shift = max(bits, log_cols - base)
            if size % (1 << (base + shift + bits)) == 0:
                yield {"bits": bits, "base": base, "shift": shift}


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


def _row_xor_params(shape: tuple[int, ...], opts: Any, scope: str) -> ParamSets:
    if len(shape) < 2:
        return
    if scope == "local":  # a tile's rows may all share one period
        for period in opts.local_xor_periods:
            for chunk in opts.local_xor_chunks:
                if period <= shape[-2] and shape[-1] % (chunk * period) == 0:
                    yield {"period": period, "chunk": chunk}
        return
    for period in opts.xor_periods:
        for chunk in opts.xor_chunks:
            if period < shape[-2] and shape[-1] % (chunk * period) == 0:
                yield {"period": period, "chunk": chunk}


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


def _block_within(
    shape: tuple[int, ...], axis: int, factor: int, outer_factor: int = 0, outer_axis: int = 0
) -> Layout:
    """``block(shape, axis, factor)``; with ``outer_factor`` also axis
    ``outer_axis`` (the one before ``axis``) blocked by it, inside:
    OIHW[factor]i[outer_factor]o, ``[o // y, i // x, ..., i % x, o % y]``
    (a grouped convolution's ``W[g, f, c, kh, kw]``: ``f`` and ``c``)."""
    inner = block(shape, axis, factor)
    if not outer_factor:
        return inner
    return compose(block(inner.physical_shape, outer_axis, outer_factor), inner)


def _block_params(shape: tuple[int, ...], opts: Any, scope: str) -> ParamSets:
    rank = len(shape)
    for axis in range(rank - 1):
        for f in opts.block_factors:
            if shape[axis] > f:
                yield {"axis": axis, "factor": f}
    # two adjacent axes ahead of a window, the inner block of the second
    # before that of the first: a filter's output and input channels (OIHW,
    # OIW of a 1-D window, and a grouped convolution's GOIHW with its output
    # channels at axis 1)
    for outer in range(max(rank - 3, 1) if rank >= 3 else 0):
        for x in opts.block2_factors:
            for y in opts.block2_outer_factors:
                if shape[outer] >= y and shape[outer + 1] >= x:
                    yield {"axis": outer + 1, "factor": x, "outer_factor": y, "outer_axis": outer}


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


def _panel_params(shape: tuple[int, ...], opts: Any, scope: str) -> ParamSets:
    if len(shape) >= 2:
        for axis in range(1, len(shape)):
            for f in opts.block_factors:
                if shape[axis] > f:
                    yield {"axis": axis, "factor": f}


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


def _tile_params(shape: tuple[int, ...], opts: Any, scope: str) -> ParamSets:
    if len(shape) >= 2:
        for t in opts.tile_sizes:
            if shape[-1] % t == 0 and shape[-2] % t == 0 and t < shape[-1] and t < shape[-2]:
                yield {"tile_shape": (t, t)}


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


def _texture_params(shape: tuple[int, ...], opts: Any, scope: str) -> ParamSets:
    if len(shape) >= 2:
        for axis in range(len(shape)):
            if shape[axis] % 4 == 0:
                yield {"axis": axis}


def custom(shape: Sequence[int], index_map: IndexMap | str) -> Layout:
    """Any valid index map, for layouts outside the families."""
    if isinstance(index_map, str):
        index_map = IndexMap.parse(index_map)
    return Layout("custom", (), tuple(int(s) for s in shape), index_map)


def _swizzle_from_params(shape: Sequence[int], form: str, **params: Any) -> Layout:
    if form == "flat":
        return swizzle(shape, **params)
    if form == "rows":
        return row_xor(shape, **params)
    raise LayoutError(f"unknown swizzle form {form!r} (known: 'flat', 'rows')")


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


# -- the registry -------------------------------------------------------------

SCOPES = ("global", "local", "image")
"""The buffers a family may serve: global buffers, ``__local`` tiles, images."""


@dataclass(frozen=True)
class LayoutFamily:
    """One family of layouts: how its layouts are made and rebuilt, which of
    them a search space tries, and which buffers they serve.

    ``make(shape, **params)`` builds one layout; ``params(shape, options,
    scope)`` yields the parameters a space tries for a buffer of ``shape``
    in ``scope`` with its options (a ``laytune.space.SpaceOptions``, read
    by attribute; none where the family does not fit the shape); ``scopes``
    are those of :data:`SCOPES` it serves: ``global`` (a kernel's global
    buffers), ``local`` (a ``__local`` tile) and ``image`` (a global input
    held in an ``image2d``, offered only for a dtype an image holds).
    ``local_by_default``: a tile draws from it unless the space's options
    name the local families without it (else only when they name it, after
    the others). ``pads_tiles``: its padded layouts may serve a tile.
    ``rebuild(shape, **params)``: the layout a record of this family names
    (default ``make``). ``recorded_as``: for a family renamed since its
    layouts were first recorded, the name and leading parameters its text
    keeps, so that records and studies written before still match.
    """

    name: str
    make: Callable[..., Layout]
    params: Callable[[tuple[int, ...], Any, str], ParamSets]
    scopes: frozenset[str]
    local_by_default: bool = True
    pads_tiles: bool = True
    rebuild: Callable[..., Layout] | None = None
    recorded_as: tuple[str, Params] | None = None

    def layouts(
        self, shape: tuple[int, ...], options: Any, scope: str
    ) -> Iterator[Callable[[], Layout]]:
        """One maker per parameter set (a maker may raise ``LayoutError``:
        the space leaves that layout out)."""
        for params in self.params(shape, options, scope):
            yield lambda params=params: self.make(shape, **params)


def _family(
    name: str,
    make: Callable[..., Layout],
    params: Callable[[tuple[int, ...], Any, str], ParamSets],
    *scopes: str,
    **more: Any,
) -> LayoutFamily:
    return LayoutFamily(name, make, params, frozenset(scopes), **more)


LAYOUT_FAMILIES: Mapping[str, LayoutFamily] = MappingProxyType(
    {
        f.name: f
        for f in (
            _family("identity", identity, _no_params, "global", "local"),
            _family("permute", permute, _permute_params, "global"),
            # for rank 4 and more also both leading axes (OIHW16i16o weights)
            _family("block", _block_within, _block_params, "global", rebuild=block),
            # a GEMM micro-kernel's packed operand ([j // 16, k, j % 16])
            _family("panel", panel, _panel_params, "global"),
            _family("pad_rows", pad_rows, _pad_rows_params, "global", "local"),
            # the auto memory planning seed's tile layout
            _family(
                "pad_every", pad_every, _pad_every_params, "global", "local", local_by_default=False
            ),
            _family("tile", tile, _tile_params, "global"),
            # CuTe's flat Sw<bits,base,shift>; its records name row_xor's layouts too
            _family("swizzle", swizzle, _swizzle_params, "global", rebuild=_swizzle_from_params),
            # the row/column-chunk XOR; a tile's only when bijective
            _family(
                "row_xor",
                row_xor,
                _row_xor_params,
                "global",
                "local",
                pads_tiles=False,
                recorded_as=("swizzle", (("form", "rows"),)),
            ),
            # an axis separator: a 2-D image of RGBA texels
            _family("texture", texture, _texture_params, "image"),
        )
    }
)
"""Every layout family, by name, in the order a global buffer's layouts are
generated: adding a family is its maker, its parameters and one entry here."""

FAMILIES: Mapping[str, Callable[..., Layout]] = MappingProxyType(
    {name: f.rebuild or f.make for name, f in LAYOUT_FAMILIES.items()}
)
"""How a layout is rebuilt from its recorded family and parameters, by family
name (``custom`` and compositions aside)."""


@functools.lru_cache(maxsize=4096)
def _layout_from_text(text: str) -> Layout:
    """:meth:`Layout.from_json` of a canonical JSON text, rebuilt once."""
    return Layout._from_json(json.loads(text))
