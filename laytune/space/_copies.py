"""What the staging copy of each tile may be, from the layouts on both sides.

With ``local_stage=True`` a work-group copies, per stage, each staged
input's *footprint* (a box of the global input, see
:mod:`laytune.space._staging`) into its ``__local`` tile. The ``copy`` knob
picks the instruction, and each instruction accepts only some pairs of
layouts:

=================== ============================================ ==========================================
``copy``            the global footprint (every box)             the local tile
=================== ============================================ ==========================================
``elementwise``     anything (one load and store per element)    anything
``rows``            each row contiguous (``RowPointerTileLoad``) each row contiguous (one
                    (one ``async_work_group_copy`` per row)      ``async_work_group_copy`` per row)
``async_strided``   rows contiguous at one constant stride,      rows back to back, row-major
                    aligned to a row vector (``StridedTileCopy``) (``StridedTileCopy(stride=row)``)
``async_contiguous`` one contiguous range (``ContiguousTileCopy``) one contiguous range, elements in the
                                                                 same order as in the footprint
``subgroup_block``  runs of the sub-group size contiguous        the same, 16-byte aligned
                    (``SubgroupBlockAccess``, 4-byte aligned)    (``__local`` block writes)
=================== ============================================ ==========================================

``async_strided`` moves a whole tile in one ``async_work_group_strided_copy``
whose element type is one row (``floatC`` for rows of C in 2, 4, 8, 16), so
the row stride is in rows' units and the rows must be aligned to the
vector. Every copy but ``elementwise`` reads the footprint as it lies, so it
needs every footprint inside its input (no zero fill of a convolution's
padding, no block overshooting the output): :func:`footprints_inside`.

A :class:`TileCopyFacts` records one side; the ``copy`` rule step
(:mod:`laytune.space._rules`) pairs a global buffer's facts with its local
tile's, for the space and ``check_candidate`` alike.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from laytune.device_info import DeviceInfo
from laytune.layout import Layout, offsets_at, translations
from laytune.space._constraints import (
    ContiguousTileCopy,
    RowPointerTileLoad,
    StridedTileCopy,
    SubgroupBlockAccess,
    TileNamer,
    Verdict,
)
from laytune.space._matrix import matrix_checks
from laytune.space._staging import StagedInput, StagingPlan
from laytune.space._workload import (
    VECTOR_WIDTHS,
    BufferLike,
    WorkloadLike,
    dtype_bytes,
    local_buffer_name,
)

__all__ = [
    "COPY_VARIANTS",
    "SUBGROUP_SIZES",
    "SubgroupFit",
    "TileCopyFacts",
    "footprints_inside",
    "global_copy_facts",
    "local_copy_facts",
    "subgroup_sizes",
]

COPY_VARIANTS = ("elementwise", "rows", "async_strided", "async_contiguous", "subgroup_block")
"""The values of the ``copy`` knob, the plain per-element loop first."""

SUBGROUP_SIZES = (4, 8, 16, 32, 64)
"""Every sub-group size a fact may name (the universe the facts intersect)."""


def subgroup_sizes(device: DeviceInfo) -> tuple[int, ...]:
    """The sub-group sizes whose block reads and writes the facts judge on
    ``device``: those it supports among the ``subgroup`` knob's values, none
    without ``cl_intel_subgroups`` (so that facts differ only where a
    candidate could tell them apart)."""
    if not device.has_extension("cl_intel_subgroups"):
        return ()
    return tuple(n for n in device.sub_group_sizes if n in SUBGROUP_SIZES)


@dataclass(frozen=True)
class TileCopyFacts:
    """One side of a staged input's copy: ``buffer`` (the global input or
    its ``"<input>.local"`` tile) accepts the copies in ``accepts`` (of
    ``rows``, ``async_strided``, ``async_contiguous``), holds each tile's
    elements in the order ``pattern`` names (a digest of their offsets from
    the tile's first position; None when the tiles are not contiguous or not
    alike), and serves block reads (global) or writes (local) of the
    sub-group sizes in ``subgroups``.

    ``reasons`` says why for each refusal (``(copy, why)``, the copy
    ``"subgroup_block:<size>"`` for a sub-group size). It takes no part in
    equality or hashing: two layouts that allow the same copies have equal
    facts, so the space counts them together; the reasons of either serve as
    an example.
    """

    buffer: str
    accepts: frozenset[str]
    pattern: str | None
    subgroups: frozenset[int]
    reasons: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def why(self, copy: str) -> str:
        """Why this side refuses ``copy`` ("" when it does not)."""
        return dict(self.reasons).get(copy, "")


@dataclass(frozen=True)
class SubgroupFit:
    """The sub-group sizes whose block reads and writes serve every staged
    tile's copy, and why each other size fails (``reasons``, not part of
    equality: the rule engine memoises on ``sizes`` alone)."""

    sizes: frozenset[int]
    reasons: tuple[tuple[int, str], ...] = field(default=(), compare=False)


def _decl(workload: WorkloadLike, name: str) -> BufferLike:
    return next(b for b in workload.buffers if b.name == name)


def _rows_view(tile: tuple[int, ...]) -> tuple[int, int]:
    """(rows, row length) of a tile: rows are every axis but the last."""
    return math.prod(tile[:-1]), tile[-1]


def _choices(
    workload: WorkloadLike, plan: StagingPlan, staged: StagedInput
) -> tuple[list[int], list[np.ndarray]]:
    """The axes a footprint's origin depends on, and the values each takes
    (evenly spaced, from 0)."""
    used = sorted({k for coeffs, _ in staged.terms for k, _ in coeffs})
    values = []
    for k in used:
        axis = workload.axes[k]
        if k in plan.spatial:
            values.append(np.arange(plan.counts[k], dtype=np.int64) * plan.block[k])
        elif k == plan.stepped:
            values.append(np.arange(0, axis.extent, plan.block[k], dtype=np.int64))
        else:  # a reduce axis a stage covers whole: its first value
            values.append(np.zeros(1, dtype=np.int64))
    return used, values


def _box_origins(
    workload: WorkloadLike,
    plan: StagingPlan,
    staged: StagedInput,
    periods: Sequence[int] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The first index of footprints of ``staged`` (one row per box that some
    work-group copies in some stage), shape (boxes, rank), and how many
    footprints each row stands for.

    Without ``periods``, every footprint once. With ``periods`` (per input
    dimension ``d``, a translation ``Q_d`` that leaves the verdict of a copy
    unchanged), one footprint per class of origins modulo ``Q`` (the first
    one met), counting the class: an origin is affine in the axes' values,
    so its residues repeat along each axis with a period of that axis's own,
    and only that many values per axis are listed."""
    used, values = _choices(workload, plan, staged)
    counts = []
    for position, k in enumerate(used):
        v = values[position]
        n = len(v)
        repeat = n
        if periods is not None and n > 1:
            step = int(v[1] - v[0])
            repeat = 1
            for d, (coeffs, _) in enumerate(staged.terms):
                c = dict(coeffs).get(k, 0) * step
                if c:
                    repeat = math.lcm(repeat, periods[d] // math.gcd(c, periods[d]))
            repeat = min(repeat, n)
        values[position] = v[:repeat]
        counts.append((n - 1 - np.arange(repeat, dtype=np.int64)) // repeat + 1)
    grids = np.meshgrid(*values, indexing="ij") if values else []
    at = {k: g.reshape(-1) for k, g in zip(used, grids, strict=True)}
    boxes = math.prod(len(v) for v in values)
    origins = np.empty((boxes, len(staged.terms)), dtype=np.int64)
    for d, (coeffs, const) in enumerate(staged.terms):
        origins[:, d] = const
        for k, c in coeffs:
            origins[:, d] += c * at[k]
    weights = np.ones((), dtype=np.int64)
    for c in counts:
        weights = np.multiply.outer(weights, c)
    weights = weights.reshape(-1)
    if periods is None:
        return origins, weights
    _, first, inverse = np.unique(
        origins % np.asarray(periods, dtype=np.int64),
        axis=0,
        return_index=True,
        return_inverse=True,
    )
    summed = np.bincount(inverse.reshape(-1), weights=weights).astype(np.int64)
    order = np.argsort(first, kind="stable")
    return origins[first[order]], summed[order]


def footprints_inside(workload: WorkloadLike, plan: StagingPlan) -> dict[str, str]:
    """Per staged input whose footprints leave its shape somewhere (a
    convolution's zero padding, a block overshooting the output), why: only
    the ``elementwise`` copy fills zeros there."""
    out = {}
    for staged in plan.inputs:
        shape = _decl(workload, staged.buffer).shape
        used, values = _choices(workload, plan, staged)
        extents = [1] * len(shape)
        for t, d in enumerate(staged.dims):
            extents[d] = staged.tile[t]
        for d, extent in enumerate(shape):
            coeffs, const = staged.terms[d]
            low = high = const  # an affine origin is extreme at its axes' extremes
            for k, c in coeffs:
                v = values[used.index(k)]
                ends = (c * int(v.min()), c * int(v.max()))
                low, high = low + min(ends), high + max(ends)
            high += extents[d] - 1
            if low < 0 or high > extent - 1:
                out[staged.buffer] = (
                    f"the footprints of {staged.buffer!r} span indices {low}..{high} of its "
                    f"dimension {d} (extent {extent}): only the elementwise copy fills zeros "
                    f"outside the input"
                )
                break
    return out


def _footprints(
    workload: WorkloadLike, plan: StagingPlan, staged: StagedInput, layout: Layout, modulus: int
) -> tuple[np.ndarray, TileNamer, np.ndarray]:
    """Flat offsets of the footprints under ``layout`` that decide a copy
    whose verdict holds when ``modulus`` is added to a footprint's offsets:
    (boxes, rows, row length), one footprint per class of
    :func:`_box_origins` under the layout's periods; the namer of a box (its
    first logical index); how many footprints each box stands for."""
    shape = layout.shape
    periods = translations(layout.index_map, shape, None, modulus)
    origins, weights = _box_origins(workload, plan, staged, periods)
    grids = np.meshgrid(*[np.arange(t) for t in staged.tile], indexing="ij")
    index = []
    for d in range(len(shape)):
        inner = grids[staged.dims.index(d)].reshape(-1) if d in staged.dims else 0
        index.append(origins[:, d][:, None] + inner)
    rows, length = _rows_view(staged.tile)
    arr = offsets_at(layout.index_map, shape, index).reshape(len(origins), rows, length)

    def name(t: int) -> str:
        return "footprint (" + ", ".join(str(int(v)) for v in origins[t]) + ")"

    return arr, name, weights


def _pattern(arr: np.ndarray) -> str | None:
    """A digest of the element order shared by every tile of ``arr``
    (offsets from the tile's lowest), or None when the tiles differ."""
    relative = arr - arr.reshape(arr.shape[0], -1).min(axis=1)[:, None, None]
    if not np.all(relative == relative[:1]):
        return None
    return hashlib.sha1(relative[0].astype(np.int64).tobytes()).hexdigest()[:16]


def _judge(
    buffer: str,
    arr: np.ndarray,
    name: TileNamer,
    dtype: str,
    checks: dict[str, Callable[[], Verdict] | str],
    subgroup: Callable[[int], SubgroupBlockAccess],
    sizes: tuple[int, ...],
    weights: np.ndarray | None = None,
) -> TileCopyFacts:
    accepts = set()
    reasons: dict[str, str] = {}
    for variant, check in checks.items():
        verdict = check if isinstance(check, str) else check()
        if isinstance(verdict, Verdict) and verdict.ok:
            accepts.add(variant)
        else:
            text = verdict if isinstance(verdict, str) else _text(verdict)
            reasons[variant] = f"{buffer!r}: {text}"
    subgroups = set()
    for size in sizes:
        verdict = subgroup(size).check_tiles(arr, dtype, name, weights)
        if verdict.ok:
            subgroups.add(size)
        else:
            reasons[f"subgroup_block:{size}"] = f"{buffer!r}: {_text(verdict)}"
    pattern = _pattern(arr) if "async_contiguous" in accepts else None
    return TileCopyFacts(
        buffer, frozenset(accepts), pattern, frozenset(subgroups), tuple(reasons.items())
    )


def _text(verdict: Verdict) -> str:
    return f"{verdict.constraint}: " + "; ".join(verdict.reasons[:2])


def _row_vector(length: int) -> str | None:
    if length in VECTOR_WIDTHS[1:]:
        return None
    return (
        f"rows of {length} elements are no OpenCL vector type (2, 4, 8, 16), the unit "
        f"async_work_group_strided_copy moves"
    )


def global_copy_facts(
    workload: WorkloadLike,
    plan: StagingPlan,
    staged: StagedInput,
    layout: Layout,
    sizes: tuple[int, ...],
) -> TileCopyFacts:
    """The copy facts of a staged input's global ``layout``, over every
    footprint the plan copies (all refused when the footprints leave the
    input or the layout is an image)."""
    name = staged.buffer
    dtype = _decl(workload, name).dtype
    tile = staged.tile
    rows, length = _rows_view(tile)
    refuse = footprints_inside(workload, plan).get(name, "")
    if not refuse and layout.image_rank == 2:
        refuse = f"{name!r} lies in an image2d; the copies need a global pointer"
    if refuse:
        whats = [*COPY_VARIANTS[1:4], *(f"subgroup_block:{n}" for n in sizes)]
        return TileCopyFacts(
            name, frozenset(), None, frozenset(), tuple((w, refuse) for w in whats)
        )
    # every copy's verdict on a footprint holds modulo the row vector and a 4-byte word
    arr, box, weights = _footprints(workload, plan, staged, layout, math.lcm(length, 4))
    size = dtype_bytes(dtype)
    vector = _row_vector(length)
    checks: dict[str, Callable[[], Verdict] | str] = {
        "rows": lambda: RowPointerTileLoad(
            rows, row_elements=length, alignment_bytes=size
        ).check_tiles(arr, dtype, box, weights),
        "async_strided": vector
        or (
            lambda: StridedTileCopy(tile, alignment_bytes=length * size).check_tiles(
                arr, dtype, box, weights
            )
        ),
        "async_contiguous": lambda: _same_order(
            ContiguousTileCopy(tile).check_tiles(arr, dtype, box, weights), arr
        ),
    }
    return _judge(
        name, arr, box, dtype, checks, lambda n: SubgroupBlockAccess(-1, n, 4), sizes, weights
    )


def _same_order(verdict: Verdict, arr: np.ndarray) -> Verdict:
    if verdict.ok and _pattern(arr) is None:
        return Verdict.reject(
            verdict.constraint,
            "the footprints are contiguous but hold their elements in "
            "different orders, so no one copy fits them all",
        )
    return verdict


def local_copy_facts(
    staged: StagedInput, layout: Layout, dtype: str, sizes: tuple[int, ...]
) -> TileCopyFacts:
    """The copy facts of a staged input's ``__local`` tile ``layout``, and
    of a float16 tile the matrix fragment loads it takes (``accepts`` holds
    ``"matrix:<variant>:<operand>"``, see :mod:`laytune.space._matrix`)."""
    name = local_buffer_name(staged.buffer)
    tile = staged.tile
    rows, length = _rows_view(tile)
    offsets = np.asarray(layout.index_map.flat_offsets(layout.shape))
    arr = offsets.reshape(1, rows, length)
    size = dtype_bytes(dtype)

    def whole(t: int) -> str:
        return f"{name} ({layout.describe()})"

    vector = _row_vector(length)
    checks: dict[str, Callable[[], Verdict] | str] = {
        "rows": lambda: RowPointerTileLoad(
            rows, row_elements=length, alignment_bytes=size
        ).check_tiles(arr, dtype, whole),
        "async_strided": vector
        or (
            lambda: StridedTileCopy(tile, stride=length, alignment_bytes=length * size).check_tiles(
                arr, dtype, whole
            )
        ),
        "async_contiguous": lambda: ContiguousTileCopy(tile).check_tiles(arr, dtype, whole),
        **matrix_checks(layout, dtype),
    }
    return _judge(name, arr, whole, dtype, checks, lambda n: SubgroupBlockAccess(-1, n, 16), sizes)
