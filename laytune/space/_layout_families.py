"""The layout families a space draws from: one :class:`LayoutFamily` per
name in :data:`LAYOUT_FAMILIES`, saying how its layouts are made, which
parameters a space enumerates for a shape, and which buffers it serves.

Scopes: ``global`` (a kernel's global buffers), ``local`` (a ``__local``
tile) and ``image`` (a global input held in an ``image2d``: offered only
for a dtype an image holds). :func:`~laytune.space._generate.global_layouts`
and :func:`~laytune.space._generate.local_layouts` read nothing else of a
family; adding one is one entry here (and, for a tile, its place in the
tiles' order, :data:`LOCAL_FAMILIES`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from laytune.layout import (
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

__all__ = [
    "GLOBAL_FAMILIES",
    "LAYOUT_FAMILIES",
    "LOCAL_FAMILIES",
    "OPTIONAL_LOCAL_FAMILIES",
    "SCOPES",
    "LayoutFamily",
]

SCOPES = ("global", "local", "image")
"""The buffers a family may serve: global buffers, ``__local`` tiles, images."""

Params = Iterator[dict[str, Any]]


@dataclass(frozen=True)
class LayoutFamily:
    """One family of layouts.

    ``make(shape, **params)`` builds one layout; ``params(shape, options,
    scope)`` yields the parameters a space tries for a buffer of ``shape``
    in ``scope`` with its :class:`~laytune.space.SpaceOptions` (none where
    the family does not fit the shape); ``scopes`` are those of
    :data:`SCOPES` it serves.
    """

    name: str
    make: Callable[..., Layout]
    params: Callable[[tuple[int, ...], Any, str], Params]
    scopes: frozenset[str]

    def layouts(
        self, shape: tuple[int, ...], options: Any, scope: str
    ) -> Iterator[Callable[[], Layout]]:
        """One maker per parameter set (a maker may raise ``LayoutError``:
        the space leaves that layout out)."""
        for params in self.params(shape, options, scope):
            yield lambda params=params: self.make(shape, **params)


def _no_params(shape: tuple[int, ...], opts: Any, scope: str) -> Params:
    yield {}


def _permute(shape: tuple[int, ...], opts: Any, scope: str) -> Params:
    rank = len(shape)
    if rank >= 2:
        for k in range(rank - 1):
            yield {"order": (*(a for a in range(rank) if a != k), k)}


def _make_block(
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


def _block(shape: tuple[int, ...], opts: Any, scope: str) -> Params:
    rank = len(shape)
    for axis in range(rank - 1):
        for f in opts.block_factors:
            if shape[axis] > f:
                yield {"axis": axis, "factor": f}
    # two adjacent axes ahead of a 2-D window, the inner block of the second
    # before that of the first: a filter's output and input channels (OIHW,
    # and a grouped convolution's GOIHW with its output channels at axis 1)
    for outer in range(rank - 3):
        for x in opts.block2_factors:
            for y in opts.block2_factors:
                if shape[outer] >= y and shape[outer + 1] >= x:
                    yield {"axis": outer + 1, "factor": x, "outer_factor": y, "outer_axis": outer}


def _panel(shape: tuple[int, ...], opts: Any, scope: str) -> Params:
    if len(shape) >= 2:
        for axis in range(1, len(shape)):
            for f in opts.block_factors:
                if shape[axis] > f:
                    yield {"axis": axis, "factor": f}


def _pad_rows(shape: tuple[int, ...], opts: Any, scope: str) -> Params:
    if len(shape) >= 2:
        for pad in opts.local_pad_amounts if scope == "local" else opts.pad_amounts:
            yield {"pad": pad}


def _pad_every(shape: tuple[int, ...], opts: Any, scope: str) -> Params:
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


def _tile(shape: tuple[int, ...], opts: Any, scope: str) -> Params:
    if len(shape) >= 2:
        for t in opts.tile_sizes:
            if shape[-1] % t == 0 and shape[-2] % t == 0 and t < shape[-1] and t < shape[-2]:
                yield {"tile_shape": (t, t)}


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _swizzle(shape: tuple[int, ...], opts: Any, scope: str) -> Params:
    if len(shape) < 2 or not _is_pow2(shape[-1]):
        return
    size, log_cols = math.prod(shape), shape[-1].bit_length() - 1
    for bits in opts.swizzle_bits:
        for base in opts.swizzle_bases:
            shift = max(bits, log_cols - base)
            if size % (1 << (base + shift + bits)) == 0:
                yield {"bits": bits, "base": base, "shift": shift}


def _row_xor(shape: tuple[int, ...], opts: Any, scope: str) -> Params:
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


def _texture(shape: tuple[int, ...], opts: Any, scope: str) -> Params:
    if len(shape) >= 2:
        for axis in range(len(shape)):
            if shape[axis] % 4 == 0:
                yield {"axis": axis}


def _family(
    name: str,
    make: Callable[..., Layout],
    params: Callable[[tuple[int, ...], Any, str], Params],
    *scopes: str,
) -> LayoutFamily:
    return LayoutFamily(name, make, params, frozenset(scopes))


LAYOUT_FAMILIES: Mapping[str, LayoutFamily] = MappingProxyType(
    {
        f.name: f
        for f in (
            _family("identity", identity, _no_params, "global", "local"),
            _family("permute", permute, _permute, "global"),
            # for rank 4 and more also both leading axes (OIHW16i16o weights)
            _family("block", _make_block, _block, "global"),
            # a GEMM micro-kernel's packed operand ([j // 16, k, j % 16])
            _family("panel", panel, _panel, "global"),
            _family("pad_rows", pad_rows, _pad_rows, "global", "local"),
            _family("pad_every", pad_every, _pad_every, "global", "local"),
            _family("tile", tile, _tile, "global"),
            # CuTe's flat Sw<bits,base,shift>
            _family("swizzle", swizzle, _swizzle, "global"),
            # the row/column-chunk XOR; a tile's only when bijective
            _family("row_xor", row_xor, _row_xor, "global", "local"),
            # an axis separator: a 2-D image of RGBA texels
            _family("texture", texture, _texture, "image"),
        )
    }
)
"""Every family a space draws from, by name, in the order a global buffer's
layouts are generated."""

GLOBAL_FAMILIES = tuple(
    name for name, f in LAYOUT_FAMILIES.items() if f.scopes & {"global", "image"}
)
"""Family names a global buffer's layouts are drawn from (``swizzle`` is CuTe's
flat ``Sw<bits,base,shift>``; ``row_xor`` the row/column-chunk XOR). ``block``
includes, for buffers of rank 4 and more, blocking both of the first two
axes (OIHW16i16o weights); ``panel`` is a GEMM micro-kernel's packed operand
(``[j // 16, k, j % 16]``)."""

LOCAL_FAMILIES = ("identity", "pad_rows", "row_xor")
"""Family names a ``__local`` tile buffer's layouts are drawn from by
default, in the order a tile's layouts are generated."""

OPTIONAL_LOCAL_FAMILIES = ("pad_every",)
"""Local families a space offers only when its options name them:
``pad_every`` (``local_pad_amounts`` after every ``pad_every_rows`` rows),
the auto memory planning seed's tile layout; generated after the others."""
