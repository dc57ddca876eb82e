"""Candidate layouts per buffer: each family's parameters enumerated for a shape.

:class:`SpaceOptions` holds every choice a user may make about the size of a
space (which families, which parameters, the padding budget, extra
constraints). :func:`global_layouts` and :func:`local_layouts` list the
layouts of one buffer, deduplicated: two layouts that put every logical
element at the same flat physical offset with the same flat shape are one
(the first generated is kept), so that permuting a unit axis or blocking the
innermost axis by a divisor never counts twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from laytune.exceptions import LayoutError
from laytune.layout import (
    LAYOUT_FAMILIES,
    Layout,
    identity,
    probe_digest,
    same_offsets,
)
from laytune.space._constraints import Constraint
from laytune.space._knobs import knob_spec
from laytune.space._workload import IMAGE_DTYPES, VECTOR_WIDTHS

__all__ = [
    "GLOBAL_FAMILIES",
    "LOCAL_FAMILIES",
    "OPTIONAL_LOCAL_FAMILIES",
    "SpaceOptions",
    "global_layouts",
    "layout_fingerprint",
    "local_layouts",
    "same_layout_offsets",
]


GLOBAL_FAMILIES = tuple(
    name for name, f in LAYOUT_FAMILIES.items() if f.scopes & {"global", "image"}
)
"""Family names a global buffer's layouts are drawn from, in the order they
are generated (see :data:`~laytune.layout.LAYOUT_FAMILIES`)."""

LOCAL_FAMILIES = tuple(
    name for name, f in LAYOUT_FAMILIES.items() if "local" in f.scopes and f.local_by_default
)
"""Family names a ``__local`` tile buffer's layouts are drawn from by
default, in the order a tile's layouts are generated."""

OPTIONAL_LOCAL_FAMILIES = tuple(
    name for name, f in LAYOUT_FAMILIES.items() if "local" in f.scopes and not f.local_by_default
)
"""Local families a space offers only when its options name them (``pad_every``:
``local_pad_amounts`` after every ``pad_every_rows`` rows), generated after
the others."""


def _tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value)


@dataclass(frozen=True)
class SpaceOptions:
    """How large a space is. Every field has a sane default.

    ``families``: the families of every global buffer (identity is always
    kept, as the baseline). ``families_per_buffer``: per buffer name, a
    narrower (or wider) family list that replaces ``families`` for it.
    ``padding_budget``: the largest padding fraction of a global layout.
    ``constraints``: per buffer name, extra constraints every layout of that
    buffer must pass (soft ones only add a score), e.g. a
    ``RowPointerTileLoad`` for a tile that feeds ldmatrix.
    ``max_layouts_per_buffer``: keep at most this many layouts per buffer
    (identity first, then in generation order). ``vectors``, ``copies``,
    ``subgroups``, ``blocks``, ``groups``, ``splits`` and ``unrolls`` are the
    values the knobs of those kinds are
    offered with (defaults: :data:`~laytune.space._knobs.KNOB_SPECS`);
    ``max_block_points`` bounds the outputs of one register block (None:
    what the device's registers hold, :meth:`DeviceInfo.register_block_points`). The
    remaining fields are the parameter values the families are enumerated
    with.
    """

    families: tuple[str, ...] = GLOBAL_FAMILIES
    families_per_buffer: tuple[tuple[str, tuple[str, ...]], ...] = ()
    padding_budget: float = 0.25
    constraints: tuple[tuple[str, tuple[Constraint, ...]], ...] = ()
    max_layouts_per_buffer: int | None = None
    block_factors: tuple[int, ...] = (2, 3, 4, 6, 8, 16, 32, 48)
    block2_factors: tuple[int, ...] = (4, 8, 16)
    # the outer block of a filter's two (OIHW[x]i[y]o): a work-item's run of
    # filters, up to four vectors of AVX-512's 16 lanes
    block2_outer_factors: tuple[int, ...] = (4, 8, 16, 32, 64)
    pad_amounts: tuple[int, ...] = (1, 4, 8)
    pad_every_rows: tuple[int, ...] = (2, 8)
    tile_sizes: tuple[int, ...] = (4, 8, 16)
    swizzle_bits: tuple[int, ...] = (2, 3)
    swizzle_bases: tuple[int, ...] = (0, 2, 3)
    xor_periods: tuple[int, ...] = (8,)
    xor_chunks: tuple[int, ...] = (1, 4, 8)
    local_families: tuple[str, ...] = LOCAL_FAMILIES
    local_pad_amounts: tuple[int, ...] = (1, 2, 4, 8)
    local_xor_periods: tuple[int, ...] = (4, 8, 16, 32)
    local_xor_chunks: tuple[int, ...] = (1, 2, 4, 8)
    vectors: tuple[int, ...] = knob_spec("vector").values or (1,)
    copies: tuple[str, ...] = knob_spec("copy").values or ("elementwise",)
    subgroups: tuple[int, ...] = knob_spec("subgroup").values or (0,)
    blocks: tuple[int, ...] = knob_spec("block").values or (1,)
    groups: tuple[int, ...] = knob_spec("group").values or (0,)
    splits: tuple[int, ...] = knob_spec("split").values or (1,)
    unrolls: tuple[int, ...] = knob_spec("unroll").values or (1,)
    max_block_points: int | None = None
    banks: int = 32
    bank_bytes: int = 4

    def __post_init__(self) -> None:
        for name in (
            "families",
            "block_factors",
            "block2_factors",
            "block2_outer_factors",
            "pad_amounts",
            "pad_every_rows",
            "tile_sizes",
            "swizzle_bits",
            "swizzle_bases",
            "xor_periods",
            "xor_chunks",
            "local_families",
            "local_pad_amounts",
            "local_xor_periods",
            "local_xor_chunks",
            "vectors",
            "blocks",
            "groups",
            "splits",
            "unrolls",
        ):
            object.__setattr__(self, name, _tuple(getattr(self, name)))
        per_buffer = self.families_per_buffer
        if isinstance(per_buffer, Mapping):
            per_buffer = per_buffer.items()
        object.__setattr__(
            self, "families_per_buffer", tuple(sorted((k, tuple(v)) for k, v in per_buffer))
        )
        constraints = self.constraints
        if isinstance(constraints, Mapping):
            constraints = constraints.items()
        object.__setattr__(
            self, "constraints", tuple(sorted((k, tuple(v)) for k, v in constraints))
        )
        for fam in (*self.families, *(f for _, fs in self.families_per_buffer for f in fs)):
            if fam not in GLOBAL_FAMILIES:
                raise LayoutError(f"unknown layout family {fam!r} (known: {GLOBAL_FAMILIES})")
        for fam in self.local_families:
            if fam not in (*LOCAL_FAMILIES, *OPTIONAL_LOCAL_FAMILIES):
                known = (*LOCAL_FAMILIES, *OPTIONAL_LOCAL_FAMILIES)
                raise LayoutError(f"unknown local layout family {fam!r} (known: {known})")
        if not 0.0 <= self.padding_budget < 1.0:
            raise LayoutError(f"padding_budget must be in [0, 1), got {self.padding_budget!r}")
        if self.max_layouts_per_buffer is not None and self.max_layouts_per_buffer < 1:
            raise LayoutError(
                f"max_layouts_per_buffer must be at least 1, got {self.max_layouts_per_buffer!r}"
            )
        if any(v not in VECTOR_WIDTHS for v in self.vectors) or 1 not in self.vectors:
            raise LayoutError(
                f"vectors must include 1 and be among {VECTOR_WIDTHS}, got {self.vectors!r}"
            )
        for name, values, least in (
            ("blocks", self.blocks, 1),
            ("groups", self.groups, 0),
            ("splits", self.splits, 1),
            ("unrolls", self.unrolls, 1),
        ):
            if any(isinstance(v, bool) or not isinstance(v, int) or v < least for v in values):
                raise LayoutError(f"{name} must be ints of at least {least}, got {values!r}")
        if self.max_block_points is not None and self.max_block_points < 1:
            raise LayoutError(f"max_block_points must be positive, got {self.max_block_points!r}")

    def families_for(self, buffer: str) -> tuple[str, ...]:
        return dict(self.families_per_buffer).get(buffer, self.families)

    def constraints_for(self, buffer: str) -> tuple[Constraint, ...]:
        return dict(self.constraints).get(buffer, ())


def layout_fingerprint(layout: Layout) -> tuple[tuple[int, ...], str]:
    """(flat shape, digest of the flat offsets of the first indices of every
    axis): equal when the layouts store every logical element at the same
    place in the same physical array; layouts that do not may share one too
    (:func:`same_layout_offsets` tells them apart)."""
    return layout.flat_shape, probe_digest(layout.index_map, layout.shape)


def same_layout_offsets(a: Layout, b: Layout) -> bool:
    """Whether ``a`` and ``b`` store every logical element at the same place
    in the same physical array (exact, on their periods, not element by element)."""
    return (
        a.shape == b.shape
        and a.flat_shape == b.flat_shape
        and same_offsets(a.index_map, b.index_map, a.shape)
    )


def _try(make: Callable[[], Layout]) -> Layout | None:
    try:
        return make()
    except LayoutError:
        return None


def _global_makers(
    shape: tuple[int, ...], dtype: str, families: Sequence[str], opts: SpaceOptions
) -> Iterator[Callable[[], Layout]]:
    for name in families:
        family = LAYOUT_FAMILIES[name]
        if "global" in family.scopes:
            yield from family.layouts(shape, opts, "global")
        elif "image" in family.scopes and dtype in IMAGE_DTYPES:
            yield from family.layouts(shape, opts, "image")


def _dedupe(makers: Iterator[Callable[[], Layout]], limit: int | None) -> list[Layout]:
    seen: dict[tuple[tuple[int, ...], str], list[Layout]] = {}
    out: list[Layout] = []
    for make in makers:
        layout = _try(make)
        if layout is None:
            continue
        alike = seen.setdefault(layout_fingerprint(layout), [])
        if any(same_layout_offsets(layout, kept) for kept in alike):
            continue
        alike.append(layout)
        out.append(layout)
        if limit is not None and len(out) >= limit:
            break
    return out


def global_layouts(
    shape: Sequence[int], dtype: str, families: Sequence[str], opts: SpaceOptions
) -> list[Layout]:
    """Identity first, then every family's layouts on ``shape`` in the order
    of ``families``, deduplicated; unchecked (the space applies constraints)."""
    shape = tuple(int(s) for s in shape)

    def makers() -> Iterator[Callable[[], Layout]]:
        yield lambda: identity(shape)
        yield from _global_makers(shape, dtype, [f for f in families if f != "identity"], opts)

    return _dedupe(makers(), opts.max_layouts_per_buffer)


def local_layouts(shape: Sequence[int], opts: SpaceOptions) -> list[Layout]:
    """Layouts of a ``__local`` tile: identity, ``pad_rows``, bijective
    (unpadded) ``row_xor`` and, when the options name it, ``pad_every``,
    deduplicated."""
    shape = tuple(int(s) for s in shape)

    def makers() -> Iterator[Callable[[], Layout]]:
        yield lambda: identity(shape)
        if len(shape) < 2:
            return
        for name in (*LOCAL_FAMILIES, *OPTIONAL_LOCAL_FAMILIES):
            if name != "identity" and name in opts.local_families:
                yield from LAYOUT_FAMILIES[name].layouts(shape, opts, "local")

    return [
        lay
        for lay in _dedupe(makers(), None)
        if LAYOUT_FAMILIES[lay.family].pads_tiles or not lay.has_padding
    ]
