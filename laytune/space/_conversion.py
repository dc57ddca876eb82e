"""Converting a buffer between two layouts, as a workload with a space of its own.

A :class:`ConversionWorkload` is a copy whose input (``src``, the physical
array of one layout) and output (``dst``, the physical array of another)
layouts are fixed: ``dst[q] = src[S(L^-1(q))]`` over every physical position
``q`` of the destination layout ``L`` (its padding gets the workload's pad
value), ``S`` the source layout. Its key names both layouts
(:func:`conversion_key`), so its records live in the same database as every
other workload's and are found again by the layouts alone.

:class:`~laytune.space.ConversionSpace` holds the ways to run it.
:func:`conversion_geometry` says what a pair
of layouts allows: along which axes of the destination the source is read in
runs of consecutive elements, the condition of every tiled kernel.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from laytune.exceptions import LayoutError
from laytune.layout import (
    UNDEF,
    Const,
    Expr,
    Layout,
    Var,
    pack,
    simplify,
    substitute,
    unpack,
)
from laytune.ops import BufferDecl
from laytune.space._candidate import PadValue
from laytune.space._staging import affine_terms

__all__ = [
    "CONVERSION_OP",
    "ConversionGeometry",
    "ConversionWorkload",
    "conversion_geometry",
    "conversion_key",
    "layout_token",
    "source_offset",
]

#: The operator name of conversion workloads, as their keys and records write it.
CONVERSION_OP = "convert"

_MAX_RUN = 256
_TILE = "tile.local"


def layout_token(layout: Layout) -> str:
    """A short name of ``layout`` for a key: ``identity``, else its family and
    the first 8 hex digits of a hash of its index map (``block-6c1f0a2e``)."""
    if layout.is_identity:
        return "identity"
    digest = hashlib.sha256(f"{layout.index_map}|{layout.shape}".encode()).hexdigest()[:8]
    return f"{layout.recorded_family}-{digest}"


def _pad_token(pad: PadValue) -> str:
    if pad is None or pad is UNDEF:  # nothing promised: written as NaN
        return ""
    value = float(pad)
    return ",pad=" + ("inf" if value == math.inf else "ninf" if value == -math.inf else repr(value))


def conversion_key(src: Layout, dst: Layout, dtype: str = "float32", pad: PadValue = None) -> str:
    """The workload key of converting a buffer from ``src`` to ``dst`` (its
    padding holding ``pad`` when ``dst`` has padding):
    ``convert(shape=4096x4096,src=identity,dst=permute-8b0e51c6;float32)``."""
    shape = "x".join(str(s) for s in src.shape)
    padding = _pad_token(pad) if dst.has_padding else ""
    return (
        f"{CONVERSION_OP}(shape={shape},src={layout_token(src)},dst={layout_token(dst)}"
        f"{padding};{dtype})"
    )


@dataclass(frozen=True)
class ConversionWorkload:
    """Converting a buffer of logical shape ``src.shape`` from layout ``src``
    to layout ``dst`` (padding of ``dst`` holding ``pad_value``; ``None``:
    never read, written as NaN). Both layouts must be flat global buffers of
    one logical shape.

    Its buffers are the two physical arrays, ``src`` (input) and ``dst``
    (output), flat; it satisfies what the runners verify with
    (``key``, ``make_inputs``, ``reference``).
    """

    src: Layout
    dst: Layout
    dtype: str = "float32"
    pad_value: PadValue = None
    weights: tuple[str, ...] = field(default=(), init=False)

    def __post_init__(self) -> None:
        if self.pad_value is UNDEF:
            object.__setattr__(self, "pad_value", None)  # anything: NaN is one value
        if self.src.shape != self.dst.shape:
            raise LayoutError(
                f"a conversion keeps the logical shape: {self.src.shape} -> {self.dst.shape}"
            )
        for side in (self.src, self.dst):
            if side.image_rank != 1:
                raise LayoutError(
                    f"conversion workloads are between flat global buffers; {side.index_map} "
                    "has an axis separator (an image)"
                )

    name = CONVERSION_OP
    #: Timed with a cache flush before every timed run, whatever the runner's
    #: ``MeasureConfig.flush_cache``: a conversion meets its data between other
    #: kernels, which evicted it. Timed warm (repeated on buffers left in the
    #: last-level cache), rewrites of a few MiB predicted a quarter to a third
    #: of what they took in a plan; timed cold, four fifths.
    timed_cold = True

    @cached_property
    def key(self) -> str:
        return conversion_key(self.src, self.dst, self.dtype, self.pad_value)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.src.shape

    @property
    def buffers(self) -> tuple[BufferDecl, ...]:
        return (
            BufferDecl("src", (self.src.physical_size,), self.dtype, "input", ()),
            BufferDecl("dst", (self.dst.physical_size,), self.dtype, "output", ()),
        )

    @property
    def inputs(self) -> tuple[BufferDecl, ...]:
        return self.buffers[:1]

    @property
    def output(self) -> BufferDecl:
        return self.buffers[1]

    @property
    def bytes(self) -> int:
        """Bytes one conversion moves: the source read, the destination written."""
        return (self.src.physical_size + self.dst.physical_size) * np.dtype(self.dtype).itemsize

    def describe(self) -> str:
        return f"{self.src.index_map} -> {self.dst.index_map} on {self.shape} ({self.dtype})"

    def make_inputs(self, seed: int) -> dict[str, np.ndarray]:
        """The source's physical array of uniform values in [-1, 1) (padding: NaN)."""
        rng = np.random.default_rng(seed)
        logical = rng.uniform(-1.0, 1.0, size=self.shape).astype(self.dtype)
        return {"src": pack(logical, self.src.index_map).reshape(-1)}

    def reference(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        logical = unpack(inputs["src"], self.src.index_map, self.shape)
        pad = None if self.pad_value is UNDEF else self.pad_value
        return {"dst": pack(logical, self.dst.index_map, pad).reshape(-1)}


def source_offset(src: Layout, dst: Layout) -> tuple[tuple[int, ...], Expr, tuple[Any, ...]]:
    """(domain, offset, conditions): the destination's physical shape, the
    flat offset in ``src`` of the element that physical index ``q`` of
    ``dst`` holds (an expression of ``Var(0..len(domain))``), and the
    conditions under which ``q`` holds an element (else it is padding; each
    a ``Condition`` of the inverse over ``q``)."""
    domain = dst.physical_shape
    q = [Var(k, f"q{k}") for k in range(len(domain))]
    inverse = dst.inverse()
    logical = [substitute(e, q) for e in inverse.index_map.outputs]
    offsets = src.index_map.flat_offset_exprs(src.shape)
    total: Expr = Const(0)
    for e, extent in zip(offsets, src.flat_shape, strict=True):
        total = total * extent + e
    ranges = [(0, e - 1) for e in domain]
    return domain, simplify(substitute(total, logical), ranges), tuple(inverse.conditions)


def _run_width(domain: Sequence[int], offset: Expr, axis: int) -> int:
    """The widest aligned run (a power of two up to ``_MAX_RUN`` dividing the
    extent) along domain ``axis`` over which ``offset`` steps by exactly one."""
    n = len(domain)
    width = 1 << int(math.log2(min(domain[axis], _MAX_RUN)))
    while width > 1:
        if domain[axis] % width == 0:
            u, k = Var(n, "u"), Var(n + 1, "k")
            values: list[Expr] = [Var(j) for j in range(n)] + [u, k]
            values[axis] = u * width + k
            ranges = [(0, e - 1) for e in domain] + [(0, domain[axis] // width - 1), (0, width - 1)]
            terms = affine_terms(simplify(substitute(offset, values), ranges))
            if terms is not None and terms[0].get(n + 1) == 1:
                return width
        width //= 2
    return 1


@dataclass(frozen=True)
class ConversionGeometry:
    """What a conversion allows: the gather ``domain`` (the destination's
    physical shape), whether the destination has ``padding`` (positions that
    hold the pad value), ``inner_run`` (the aligned run along the innermost
    axis over which the source is read consecutively) and ``runs``: per
    other axis, the widest such run (1: none)."""

    domain: tuple[int, ...]
    padding: bool
    inner_run: int
    runs: tuple[int, ...]

    def tile_axes(self) -> list[int]:
        """Axes a tiled kernel may read the source along (runs of at least 2)."""
        return [a for a, width in enumerate(self.runs) if width >= 2]


def conversion_geometry(src: Layout, dst: Layout) -> ConversionGeometry:
    domain, offset, conditions = source_offset(src, dst)
    inner = _run_width(domain, offset, len(domain) - 1) if not conditions else 1
    runs = tuple(
        _run_width(domain, offset, a) if domain[a] > 1 else 1 for a in range(len(domain) - 1)
    )
    return ConversionGeometry(tuple(domain), bool(conditions), inner, runs)
