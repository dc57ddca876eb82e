"""Intrinsic constraints: what an access instruction needs from a layout.

A constraint is a frozen, hashable, JSON-serialisable value. ``check(layout,
logical_shape, dtype, device)`` decides it *exactly* on the concrete shape,
never by sampling and never by a Python loop over elements. The rules of
global buffers (vectors, sub-group runs, tiles) look at groups of elements
and hold or fail alike for two groups whose offsets differ by a multiple of
their alignment, so they are evaluated with numpy over the reduced box of
:func:`~laytune.layout.reduced_box` (one quasi-period of the layout's flat
offset per axis, a size that does not grow with the extents), each group of
the box counting for the groups of the shape it stands for; ``__local``
tiles are evaluated whole. A rejection names where the rule breaks ("row 2
of tile (0, 0) starts at offset 132, expected 128") and counts the failing
groups of the whole shape.

Offsets are in elements of the flat physical buffer (for a layout with an axis
separator, the row-major position in its ``flat_shape`` array); byte
quantities multiply by the dtype's size.

Hard constraints give ``Verdict(ok=False, ...)`` on rejection; the soft one
(:class:`BankConflicts`) always accepts unless given a ``max_degree`` and
reports its measure as ``Verdict.score`` (lower is better).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import numpy as np

from laytune.device_info import DeviceInfo
from laytune.dtypes import DTYPES
from laytune.exceptions import LayoutError, ShapeMismatchError
from laytune.intrinsics import MATRIX_INTRINSICS, MatrixIntrinsic, matrix_intrinsic
from laytune.layout import Layout, offsets_on, reduced_box
from laytune.space._workload import BUFFER_ROLES, IMAGE_DTYPES, VECTOR_WIDTHS, dtype_bytes

__all__ = [
    "MATRIX_DTYPES",
    "BankConflicts",
    "Constraint",
    "ContiguousTileCopy",
    "Image2DRead",
    "LocalMemoryBudget",
    "MatrixTileLoad",
    "PaddingBudget",
    "RowPointerTileLoad",
    "StridedTileCopy",
    "SubgroupBlockAccess",
    "TileNamer",
    "UnalignedVectorAccess",
    "VectorAccess",
    "Verdict",
    "constraint_from_json",
]

# How many located reasons a rejection lists before summarising the rest.
MAX_REASONS = 3


@dataclass(frozen=True)
class Verdict:
    """The outcome of a check: ``ok``, the ``reasons`` for a rejection (or
    notes for an acceptance), and for a soft constraint its ``score``.

    ``bool(verdict)`` is ``verdict.ok``. ``constraint`` names what decided.
    """

    ok: bool
    reasons: tuple[str, ...] = ()
    score: float | None = None
    constraint: str = ""

    def __bool__(self) -> bool:
        return self.ok

    @classmethod
    def accept(cls, constraint: str = "", score: float | None = None, *notes: str) -> Verdict:
        return cls(True, tuple(notes), score, constraint)

    @classmethod
    def reject(cls, constraint: str, *reasons: str) -> Verdict:
        if not reasons:
            raise ValueError("a rejection needs at least one reason")
        return cls(False, tuple(reasons), None, constraint)

    @classmethod
    def combine(cls, verdicts: Iterable[Verdict], constraint: str = "") -> Verdict:
        """All must accept; reasons of the rejecting ones are kept, prefixed by
        their constraint; the score is the sum of the scores present."""
        verdicts = list(verdicts)
        ok = all(v.ok for v in verdicts)
        reasons = tuple(
            f"{v.constraint}: {r}" if v.constraint else r
            for v in verdicts
            if not v.ok
            for r in v.reasons
        )
        scores = [v.score for v in verdicts if v.score is not None]
        return cls(ok, reasons, sum(scores) if scores else None, constraint)

    def __str__(self) -> str:
        head = "accepted" if self.ok else "rejected"
        if self.constraint:
            head = f"{self.constraint} {head}"
        if self.score is not None:
            head += f" (score {self.score:g})"
        return head + "".join(f"\n  - {r}" for r in self.reasons)


_REGISTRY: dict[str, type[Constraint]] = {}


@dataclass(frozen=True)
class Constraint:
    """Base of every constraint: a declarative value with an exact ``check``.

    Contract: ``check`` is pure (the same arguments give the same verdict),
    exact on ``logical_shape`` (every element considered), and raises only for
    misuse (``ShapeMismatchError`` when ``logical_shape`` is not the layout's
    shape); a layout the instruction cannot accept is a rejected Verdict.
    ``str(c)`` is how it is written: ``VectorAccess(axis=1, width=4)``.
    """

    soft: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _REGISTRY[cls.__name__] = cls

    @property
    def kind(self) -> str:
        return type(self).__name__

    def check(
        self, layout: Layout, logical_shape: Sequence[int], dtype: str, device: DeviceInfo
    ) -> Verdict:
        raise NotImplementedError

    def __str__(self) -> str:
        args = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self))
        return f"{self.kind}({args})"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": self.kind}
        for f in fields(self):
            data[f.name] = _to_plain(getattr(self, f.name))
        return data

    # helpers for subclasses
    def _reject(self, *reasons: str) -> Verdict:
        return Verdict.reject(str(self), *reasons)

    def _accept(self, score: float | None = None, *notes: str) -> Verdict:
        return Verdict.accept(str(self), score, *notes)


def _to_plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_to_plain(v) for v in value]
    return value


def _to_tuple(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_to_tuple(v) for v in value)
    return value


def constraint_from_json(data: Mapping[str, Any]) -> Constraint:
    """Rebuild a constraint from ``Constraint.to_json()`` (by registered kind name)."""
    if not isinstance(data, Mapping) or "kind" not in data:
        raise LayoutError(f"constraint JSON needs a 'kind' field, got {data!r}")
    cls = _REGISTRY.get(data["kind"])
    if cls is None:
        raise LayoutError(f"unknown constraint kind {data['kind']!r} (known: {sorted(_REGISTRY)})")
    args = {k: _to_tuple(v) for k, v in data.items() if k != "kind"}
    try:
        return cls(**args)
    except TypeError as err:
        raise LayoutError(
            f"malformed {data['kind']} constraint JSON {dict(data)!r}: {err}"
        ) from None


def _freeze_tile(constraint: Any) -> None:
    """Validate a tile-shaped constraint's ``tile`` and store it as a tuple."""
    object.__setattr__(constraint, "tile", tuple(constraint.tile))
    if not constraint.tile:
        raise LayoutError(f"{constraint.kind}: tile needs at least one extent")
    for t in constraint.tile:
        _positive_int(str(constraint), "tile extent", t)


# -- shared numpy helpers -----------------------------------------------------


def _offsets(layout: Layout, logical_shape: Sequence[int]) -> np.ndarray:
    shape = tuple(int(s) for s in logical_shape)
    if shape != layout.shape:
        raise ShapeMismatchError(
            f"constraint checked on shape {shape} but the layout {layout.describe()} is built "
            f"on {layout.shape}"
        )
    return layout.index_map.flat_offsets(shape).reshape(shape)


def _check_shape(layout: Layout, logical_shape: Sequence[int]) -> tuple[int, ...]:
    """``logical_shape``, which must be the layout's own."""
    shape = tuple(int(s) for s in logical_shape)
    if shape != layout.shape:
        raise ShapeMismatchError(
            f"constraint checked on shape {shape} but the layout {layout.describe()} is built "
            f"on {layout.shape}"
        )
    return shape


def _outer(counts: Sequence[np.ndarray]) -> np.ndarray:
    """The product of per-axis counts over their grid (one axis each)."""
    out = np.ones((), dtype=np.int64)
    for c in counts:
        out = np.multiply.outer(out, np.asarray(c, dtype=np.int64))
    return out


def _reduced_offsets(
    layout: Layout, logical_shape: Sequence[int], groups: Sequence[int], modulus: int
) -> tuple[np.ndarray, list[np.ndarray] | None]:
    """The layout's flat offsets on the box that decides a group query
    (:func:`~laytune.layout.reduced_box`), and the counts per axis."""
    shape = _check_shape(layout, logical_shape)
    box, counts = reduced_box(layout.index_map, shape, groups, modulus)
    return offsets_on(layout.index_map, shape, box), counts


def _fmt(index: Iterable[int]) -> str:
    return "(" + ", ".join(str(int(i)) for i in index) + ")"


def _more(count: int) -> tuple[str, ...]:
    return (f"... and {count - MAX_REASONS} more",) if count > MAX_REASONS else ()


def _positive_int(owner: str, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise LayoutError(f"{owner}: {name} must be a positive integer, got {value!r}")


def _tile_error(shape: tuple[int, ...], tile: tuple[int, ...]) -> str | None:
    """Why ``tile`` does not tile the last axes of ``shape``, or None."""
    if len(tile) > len(shape):
        return f"tile {_fmt(tile)} has more axes than the buffer shape {_fmt(shape)}"
    lead = len(shape) - len(tile)
    for k, t in enumerate(tile):
        if shape[lead + k] % t:
            return (
                f"axis {lead + k} extent {shape[lead + k]} is not a multiple of the tile extent {t} "
                f"(tile {_fmt(tile)} on shape {_fmt(shape)})"
            )
    return None


def _tiles(
    owner: str, offsets: np.ndarray, tile: tuple[int, ...]
) -> tuple[np.ndarray, tuple[int, ...], str | None]:
    """Offsets grouped by tile: an array (tiles, rows, cols) where rows run over
    all but the last tile axis (row-major) and cols over the last; plus the
    shape of the tile grid (leading axes + tile counts) for naming tiles.
    Returns an error text instead when the tile does not divide the shape."""
    shape = offsets.shape
    error = _tile_error(shape, tile)
    if error:
        return offsets, (), error
    lead = len(shape) - len(tile)
    split: list[int] = list(shape[:lead])
    for k, t in enumerate(tile):
        split += [shape[lead + k] // t, t]
    arr = offsets.reshape(split)
    outer = [lead + 2 * k for k in range(len(tile))]
    inner = [lead + 2 * k + 1 for k in range(len(tile))]
    arr = arr.transpose([*range(lead), *outer, *inner])
    grid = tuple(shape[:lead]) + tuple(shape[lead + k] // t for k, t in enumerate(tile))
    rows = math.prod(tile[:-1])
    return arr.reshape(-1, rows, tile[-1]), grid, None


def _reduced_tiles(
    owner: str, layout: Layout, logical_shape: Sequence[int], tile: tuple[int, ...], modulus: int
) -> tuple[np.ndarray, tuple[int, ...], str | None, np.ndarray | None]:
    """:func:`_tiles` on the box that decides a tile query whose verdict on a
    tile holds when ``modulus`` is added to its offsets, and how many tiles
    of the whole shape each tile stands for."""
    shape = _check_shape(layout, logical_shape)
    error = _tile_error(shape, tile)
    if error:
        return np.empty(0), (), error, None
    lead = len(shape) - len(tile)
    groups = [1] * lead + list(tile)
    offsets, counts = _reduced_offsets(layout, shape, groups, modulus)
    arr, grid, _ = _tiles(owner, offsets, tile)
    return arr, grid, None, None if counts is None else _outer(counts).reshape(-1)


def _alignment(alignment_bytes: int | None, dtype: str) -> int:
    """The element count whose multiples are the offsets aligned to ``alignment_bytes``."""
    if alignment_bytes is None:
        return 1
    return alignment_bytes // math.gcd(alignment_bytes, dtype_bytes(dtype))


def _weighed(bad: np.ndarray, weights: np.ndarray | None) -> tuple[int, int]:
    """(failing, all) over tiles (the first axis of ``bad``), each tile
    counting ``weights`` times."""
    if weights is None:
        return int(np.count_nonzero(bad)), int(bad.size)
    w = np.asarray(weights, dtype=np.int64).reshape((-1,) + (1,) * (bad.ndim - 1))
    w = np.broadcast_to(w, bad.shape)
    return int(w[bad].sum()), int(w.sum())


def _tile_start(tile_no: int, grid: tuple[int, ...], tile: tuple[int, ...]) -> tuple[int, ...]:
    """Logical index of the first element of tile ``tile_no``."""
    where = np.unravel_index(tile_no, grid)
    lead = len(grid) - len(tile)
    return tuple(int(w) for w in where[:lead]) + tuple(
        int(where[lead + k]) * t for k, t in enumerate(tile)
    )


def _row_start(row: int, tile: tuple[int, ...]) -> tuple[int, ...]:
    """Position inside a tile of the first element of its row ``row``."""
    if len(tile) == 1:
        return (0,)
    return (*(int(w) for w in np.unravel_index(row, tile[:-1])), 0)


# -- the constraints ----------------------------------------------------------


class _AlongAxis:
    """What the vector accesses along one logical axis share: their fields'
    checks, and :meth:`check` as :meth:`check_layout` on the layout's shape."""

    axis: int
    width: int

    def __post_init__(self) -> None:
        what = type(self).__name__
        if isinstance(self.axis, bool) or not isinstance(self.axis, int):
            raise LayoutError(f"{what}: axis must be an int, got {self.axis!r}")
        if self.width not in VECTOR_WIDTHS[1:]:
            raise LayoutError(
                f"{what}: width must be one of {VECTOR_WIDTHS[1:]}, got {self.width!r}"
            )

    def check(
        self, layout: Layout, logical_shape: Sequence[int], dtype: str, device: DeviceInfo
    ) -> Verdict:
        _check_shape(layout, logical_shape)
        return self.check_layout(layout)

    def check_layout(self, layout: Layout) -> Verdict:
        raise NotImplementedError


@dataclass(frozen=True)
class VectorAccess(_AlongAxis, Constraint):
    """vloadN / vstoreN of ``width`` elements along logical ``axis``.

    Accepts when the axis extent is a multiple of ``width`` (and, for an
    ``image2d`` layout, so is the image row), and, for every
    group of ``width`` logical elements ``x + 0 .. x + width-1`` along the
    axis starting at a multiple of ``width``, their physical offsets are
    ``o, o + 1, ..., o + width-1`` with ``o`` a multiple of ``width`` (vloadN
    needs an address aligned to the vector). ``width`` is one of 2, 4, 8, 16.
    """

    axis: int
    width: int

    def check_layout(self, layout: Layout) -> Verdict:
        """:meth:`check` on the layout's own shape, decided on its reduced box
        (:func:`~laytune.layout.reduced_box`: groups of ``width`` along the
        axis, offsets modulo ``width``), whatever the extents."""
        shape, n = layout.shape, self.width
        if not -len(shape) <= self.axis < len(shape):
            raise ShapeMismatchError(f"{self}: axis {self.axis} is out of range for {_fmt(shape)}")
        axis = self.axis % len(shape)
        if shape[axis] % n:
            return self._reject(
                f"axis {axis} has extent {shape[axis]}, not a multiple of the vector width {n}"
            )
        groups = [1] * len(shape)
        groups[axis] = n
        box, counts = reduced_box(layout.index_map, shape, groups, n)
        return self.check_offsets(layout, offsets_on(layout.index_map, shape, box), shape, counts)

    def check_offsets(
        self,
        layout: Layout,
        offsets: np.ndarray,
        shape: Sequence[int] | None = None,
        counts: Sequence[np.ndarray] | None = None,
    ) -> Verdict:
        """:meth:`check` on the layout's flat offsets, already computed: an
        array of the logical ``shape`` (the default), or of a reduced box of
        it, with ``counts`` the groups of ``shape`` each group of the box
        stands for (:func:`~laytune.layout.reduced_box`)."""
        n = self.width
        shape = tuple(offsets.shape if shape is None else shape)
        if not -len(shape) <= self.axis < len(shape):
            raise ShapeMismatchError(f"{self}: axis {self.axis} is out of range for {_fmt(shape)}")
        axis = self.axis % len(shape)
        extent = shape[axis]
        if extent % n:
            return self._reject(
                f"axis {axis} has extent {extent}, not a multiple of the vector width {n}"
            )
        if layout.image_rank == 2 and layout.flat_shape[-1] % n:
            return self._reject(
                f"the image rows of {layout.flat_shape[-1]} elements do not split into runs "
                f"of {n}, so a vector could straddle two rows"
            )
        moved = np.moveaxis(offsets, axis, -1)
        groups = moved.reshape(*moved.shape[:-1], moved.shape[-1] // n, n)
        first = groups[..., 0]
        consecutive = np.all(np.diff(groups, axis=-1) == 1, axis=-1)
        aligned = first % n == 0
        bad = ~(consecutive & aligned)
        if counts is None:
            count, total = int(np.count_nonzero(bad)), bad.size
        else:
            order = [k for k in range(len(shape)) if k != axis] + [axis]
            weights = _outer([counts[k] for k in order])
            count, total = int(weights[bad].sum()), math.prod(shape) // n
        if not count:
            return self._accept()
        reasons = []
        for flat in np.flatnonzero(bad)[:MAX_REASONS]:
            where = np.unravel_index(int(flat), bad.shape)
            logical = list(where[:-1])
            logical.insert(axis, int(where[-1]) * n)
            found = groups[where].tolist()
            if not consecutive[where]:
                breaks = int(np.flatnonzero(np.diff(groups[where]) != 1)[0])
                reasons.append(
                    f"the {n} elements along axis {axis} from logical {_fmt(logical)} lie at "
                    f"physical offsets {found}, not consecutive (break after element {breaks})"
                )
            else:
                reasons.append(
                    f"the {n} elements along axis {axis} from logical {_fmt(logical)} start at "
                    f"physical offset {found[0]}, not a multiple of {n}"
                )
        reasons += _more(count)
        if layout.has_padding:
            reasons.append(
                f"the layout {layout.describe()} is padded (physical shape "
                f"{_fmt(layout.physical_shape)} for logical {_fmt(layout.shape)})"
            )
        return self._reject(f"{count} of {total} vector groups fail", *reasons)


@dataclass(frozen=True)
class UnalignedVectorAccess(_AlongAxis, Constraint):
    """vloadN of ``width`` elements along logical ``axis`` from any start: the
    read of a window (``ow + kw``), whose vector of outputs ``ow0 ..
    ow0 + width - 1`` reads ``ow0 + kw ..``, a run that starts anywhere.

    Accepts when every two neighbours along the axis lie at neighbouring
    physical offsets (unit stride along the axis within each row), so every
    run of ``width`` lies at ``o .. o + width - 1``; vloadN needs only the
    element's alignment. An image layout (read through a sampler) is refused.
    Decided on the layout's reduced box: a difference of neighbours is kept
    by every translation by a quasi-period.
    """

    axis: int
    width: int

    def check_layout(self, layout: Layout) -> Verdict:
        """:meth:`check` on the layout's own shape."""
        shape, n = layout.shape, self.width
        if not -len(shape) <= self.axis < len(shape):
            raise ShapeMismatchError(f"{self}: axis {self.axis} is out of range for {_fmt(shape)}")
        axis = self.axis % len(shape)
        if shape[axis] < n:
            return self._reject(f"axis {axis} has extent {shape[axis]}, under the width {n}")
        if layout.image_rank == 2:
            return self._reject("an image layout is read through a sampler, not by vloadN")
        box, _ = reduced_box(layout.index_map, shape)
        wider = list(box)
        wider[axis] = min(shape[axis], box[axis] + 1)  # each start's right neighbour
        offsets = offsets_on(layout.index_map, shape, wider)
        steps = np.diff(offsets, axis=axis)
        bad = steps != 1
        if not bad.any():
            return self._accept()
        reasons = []
        for flat in np.flatnonzero(bad)[:MAX_REASONS]:
            where = [int(i) for i in np.unravel_index(int(flat), bad.shape)]
            reasons.append(
                f"logical {_fmt(where)} and its neighbour along axis {axis} lie "
                f"{int(steps[tuple(where)])} elements apart, not 1, so a run of {n} from an "
                "unaligned start is not contiguous"
            )
        return self._reject(*reasons)


@dataclass(frozen=True)
class Image2DRead(Constraint):
    """``read_imagef`` / ``read_imageh`` from an ``image2d_t`` of RGBA texels.

    Accepts when: ``role`` is "input" (kernels read ``read_only`` images; a
    written buffer cannot be one), the device has image support, the dtype is
    float32 (or float16 with ``cl_khr_fp16``), the layout has exactly one axis
    separator (flat physical rank 2), its innermost physical extent is 4 (one
    texel), and the image's width in texels (``flat_shape[1] // 4``) and its
    height (``flat_shape[0]``) are within ``device.image2d_max_width`` and
    ``device.image2d_max_height``.
    """

    role: str = "input"

    def __post_init__(self) -> None:
        if self.role not in BUFFER_ROLES:
            raise LayoutError(f"Image2DRead: role {self.role!r} is not one of {BUFFER_ROLES}")

    def check(
        self, layout: Layout, logical_shape: Sequence[int], dtype: str, device: DeviceInfo
    ) -> Verdict:
        _check_shape(layout, logical_shape)
        reasons = []
        if self.role != "input":
            reasons.append(
                f"the buffer's role is {self.role!r}: the kernel writes it, and image2d reads "
                f"need a read-only input"
            )
        if not device.image_support:
            reasons.append(f"device {device.name} has no image support")
        extension = DTYPES[dtype].extension if dtype in DTYPES else ""
        if dtype not in IMAGE_DTYPES:
            reasons.append(f"dtype {dtype} has no image channel type ({' or '.join(IMAGE_DTYPES)})")
        elif extension and not device.has_extension(extension):
            reasons.append(f"dtype {dtype} needs {extension}, which device {device.name} lacks")
        if layout.image_rank != 2:
            reasons.append(
                f"the layout {layout.describe()} has flat physical rank {layout.image_rank}, "
                f"an image2d needs 2 (one axis separator)"
            )
        elif layout.physical_shape[-1] != 4:
            reasons.append(
                f"the innermost physical extent is {layout.physical_shape[-1]}, an RGBA texel "
                f"needs 4"
            )
        else:
            height, elems = layout.flat_shape
            width = elems // 4
            if width > device.image2d_max_width:
                reasons.append(
                    f"the image is {width} texels wide, over the device's image2d_max_width "
                    f"{device.image2d_max_width}"
                )
            if height > device.image2d_max_height:
                reasons.append(
                    f"the image is {height} texels high, over the device's image2d_max_height "
                    f"{device.image2d_max_height}"
                )
        return self._reject(*reasons) if reasons else self._accept()


TileNamer = Callable[[int], str]
"""Names tile ``t`` of an array of tiles in a rejection (``"(16, 0)"``)."""


def _tile_namer(grid: tuple[int, ...], tile: tuple[int, ...]) -> TileNamer:
    return lambda t: _fmt(_tile_start(t, grid, tile))


def _aligned_bytes(owner: str, name: str, value: Any) -> None:
    if value is not None:
        _positive_int(owner, name, value)


@dataclass(frozen=True)
class ContiguousTileCopy(Constraint):
    """``async_work_group_copy`` of each tile: every tile of shape ``tile``
    (over the last ``len(tile)`` axes, tiles aligned to multiples of ``tile``)
    occupies one contiguous physical range of ``prod(tile)`` offsets."""

    tile: tuple[int, ...]

    def __post_init__(self) -> None:
        _freeze_tile(self)

    def check(
        self, layout: Layout, logical_shape: Sequence[int], dtype: str, device: DeviceInfo
    ) -> Verdict:
        arr, grid, error, weights = _reduced_tiles(str(self), layout, logical_shape, self.tile, 1)
        if error:
            return self._reject(error)
        return self.check_tiles(arr, dtype, _tile_namer(grid, self.tile), weights)

    def check_tiles(
        self, arr: np.ndarray, dtype: str, name: TileNamer, weights: np.ndarray | None = None
    ) -> Verdict:
        """The rule on tiles given as flat offsets ``arr`` of shape (tiles,
        rows, columns), wherever they lie (a staging plan's footprints);
        ``name(t)`` names tile ``t`` in a rejection; tile ``t`` counts
        ``weights[t]`` times in it (once each by default)."""
        flat = arr.reshape(arr.shape[0], -1)
        low, high = flat.min(axis=1), flat.max(axis=1)
        size = flat.shape[1]
        failing = high - low + 1 != size
        bad = np.flatnonzero(failing)
        if not bad.size:
            return self._accept()
        count, total = _weighed(failing, weights)
        reasons = [
            f"tile {name(int(t))} spans offsets {int(low[t])}..{int(high[t])} "
            f"({int(high[t] - low[t] + 1)} positions for {size} elements)"
            for t in bad[:MAX_REASONS]
        ]
        return self._reject(f"{count} of {total} tiles are not contiguous", *reasons, *_more(count))


@dataclass(frozen=True)
class StridedTileCopy(Constraint):
    """``async_work_group_strided_copy`` / wmma ``load_matrix_sync(ptr, ldm)``:
    within every tile of shape ``tile`` (rows = all but the last tile axis,
    row-major), ``offset(row, col) == base + row * stride + col`` with one
    positive constant ``stride`` per tile.

    ``stride``, when given, is the only stride accepted (a destination written
    row after row: ``stride`` = the row length). ``alignment_bytes``, when
    given, is what every row start's byte address must be a multiple of (the
    copy moves each row as one vector of the row's length, whose pointer must
    be aligned to its size).
    """

    tile: tuple[int, ...]
    stride: int | None = None
    alignment_bytes: int | None = None

    def __post_init__(self) -> None:
        _freeze_tile(self)
        _aligned_bytes("StridedTileCopy", "stride", self.stride)
        _aligned_bytes("StridedTileCopy", "alignment_bytes", self.alignment_bytes)

    def check(
        self, layout: Layout, logical_shape: Sequence[int], dtype: str, device: DeviceInfo
    ) -> Verdict:
        modulus = _alignment(self.alignment_bytes, dtype)
        arr, grid, error, weights = _reduced_tiles(
            str(self), layout, logical_shape, self.tile, modulus
        )
        if error:
            return self._reject(error)
        return self.check_tiles(arr, dtype, _tile_namer(grid, self.tile), weights)

    def check_tiles(
        self, arr: np.ndarray, dtype: str, name: TileNamer, weights: np.ndarray | None = None
    ) -> Verdict:
        """The rule on tiles given as flat offsets (see
        :meth:`ContiguousTileCopy.check_tiles`)."""
        ntiles, rows, _ = arr.shape
        row_ok = np.all(np.diff(arr, axis=2) == 1, axis=2)  # (tiles, rows)
        starts = arr[:, :, 0]
        if rows > 1:
            stride = starts[:, 1] - starts[:, 0]
            expected = starts[:, :1] + np.arange(rows) * stride[:, None]
            stride_ok = (starts == expected) & (stride > 0)[:, None]
        else:
            stride = np.full(ntiles, self.stride or 0, dtype=np.int64)
            expected = starts
            stride_ok = np.ones_like(row_ok)
        if self.stride is not None and rows > 1:
            stride_ok &= (stride == self.stride)[:, None]
        size = dtype_bytes(dtype)
        aligned = np.ones_like(row_ok)
        if self.alignment_bytes is not None:
            aligned = (starts * size) % self.alignment_bytes == 0
        failing = ~np.all(row_ok & stride_ok & aligned, axis=1)
        bad_tiles = np.flatnonzero(failing)
        if not bad_tiles.size:
            return self._accept()
        count, total = _weighed(failing, weights)
        reasons = []
        for t in bad_tiles[:MAX_REASONS]:
            tname = name(int(t))
            if not row_ok[t].all():
                r = int(np.flatnonzero(~row_ok[t])[0])
                c = int(np.flatnonzero(np.diff(arr[t, r]) != 1)[0]) + 1
                reasons.append(
                    f"row {r} of tile {tname} is not contiguous: column {c} is at offset "
                    f"{int(arr[t, r, c])}, expected {int(arr[t, r, c - 1]) + 1}"
                )
            elif stride[t] <= 0:
                reasons.append(
                    f"tile {tname} has row stride {int(stride[t])}; a strided copy needs a "
                    f"positive one"
                )
            elif self.stride is not None and stride[t] != self.stride:
                reasons.append(
                    f"tile {tname} has row stride {int(stride[t])}, not the {self.stride} of "
                    f"rows written back to back"
                )
            elif not stride_ok[t].all():
                r = int(np.flatnonzero(~stride_ok[t])[0])
                s = int(stride[t])
                step = int(starts[t, r] - starts[t, r - 1])
                reasons.append(
                    f"the stride breaks in tile {tname} at row {r}: it starts at offset "
                    f"{int(starts[t, r])}, expected {int(expected[t, r])} = {int(starts[t, 0])} + "
                    f"{r} * {s} (rows {r - 1} -> {r} step {step}, not the stride {s} of rows 0 -> 1)"
                )
            else:
                r = int(np.flatnonzero(~aligned[t])[0])
                reasons.append(
                    f"row {r} of tile {tname} starts at offset {int(starts[t, r])} "
                    f"({int(starts[t, r]) * size} bytes), not aligned to {self.alignment_bytes} "
                    f"bytes"
                )
        return self._reject(
            f"{count} of {total} tiles have no constant row stride"
            + (" with aligned rows" if self.alignment_bytes is not None else ""),
            *reasons,
            *_more(count),
        )


@dataclass(frozen=True)
class RowPointerTileLoad(Constraint):
    """ldmatrix-style load: one pointer per row. Each row segment of the
    tile (``row_elements`` logical elements along the last axis, or
    ``row_bytes`` worth of the dtype) is contiguous and its first element's
    byte address is a multiple of ``alignment_bytes``; rows may lie anywhere.
    ``rows`` is the number of rows per tile (the tile is ``(rows, row
    length)`` over the last two axes; a 1-D buffer takes ``rows=1``).

    ldmatrix .m8n8 .b16 is ``RowPointerTileLoad(rows=8, row_bytes=16)``; a
    copy of one ``async_work_group_copy`` per row of 32-bit elements is
    ``RowPointerTileLoad(rows, row_elements=n, alignment_bytes=4)``.
    """

    rows: int
    row_elements: int | None = None
    row_bytes: int | None = None
    alignment_bytes: int = 16

    def __post_init__(self) -> None:
        _positive_int("RowPointerTileLoad", "rows", self.rows)
        if (self.row_elements is None) == (self.row_bytes is None):
            raise LayoutError(
                f"RowPointerTileLoad: give exactly one of row_elements and row_bytes, got "
                f"row_elements={self.row_elements!r}, row_bytes={self.row_bytes!r}"
            )
        if self.row_elements is not None:
            _positive_int("RowPointerTileLoad", "row_elements", self.row_elements)
        if self.row_bytes is not None:
            _positive_int("RowPointerTileLoad", "row_bytes", self.row_bytes)
        _positive_int("RowPointerTileLoad", "alignment_bytes", self.alignment_bytes)

    def row_length(self, dtype: str) -> int:
        """Row length in elements for ``dtype``."""
        if self.row_elements is not None:
            return self.row_elements
        size = dtype_bytes(dtype)
        if self.row_bytes % size:  # type: ignore[operator]
            raise LayoutError(f"{self}: row_bytes is not a multiple of the {dtype} size {size}")
        return self.row_bytes // size  # type: ignore[operator]

    def check(
        self, layout: Layout, logical_shape: Sequence[int], dtype: str, device: DeviceInfo
    ) -> Verdict:
        shape = _check_shape(layout, logical_shape)
        length = self.row_length(dtype)
        tile = (self.rows, length) if len(shape) >= 2 else (length,)
        if len(shape) < 2 and self.rows != 1:
            return self._reject(f"a 1-D buffer {_fmt(shape)} has no tiles of {self.rows} rows")
        modulus = _alignment(self.alignment_bytes, dtype)
        arr, grid, error, weights = _reduced_tiles(str(self), layout, shape, tile, modulus)
        if error:
            return self._reject(error)
        return self.check_tiles(arr, dtype, _tile_namer(grid, tile), weights)

    def check_tiles(
        self, arr: np.ndarray, dtype: str, name: TileNamer, weights: np.ndarray | None = None
    ) -> Verdict:
        """The rule on tiles given as flat offsets (see
        :meth:`ContiguousTileCopy.check_tiles`); their rows are the rows."""
        length = arr.shape[2]
        size = dtype_bytes(dtype)
        contiguous = np.all(np.diff(arr, axis=2) == 1, axis=2)
        aligned = (arr[:, :, 0] * size) % self.alignment_bytes == 0
        bad = ~(contiguous & aligned)
        count, total = _weighed(bad, weights)
        if not count:
            return self._accept()
        reasons = []
        for flat in np.flatnonzero(bad)[:MAX_REASONS]:
            t, r = divmod(int(flat), arr.shape[1])
            row = arr[t, r]
            if not contiguous[t, r]:
                c = int(np.flatnonzero(np.diff(row) != 1)[0]) + 1
                reasons.append(
                    f"row {r} of tile {name(t)} is not contiguous: its {length} elements lie at "
                    f"offsets {row.tolist()} (column {c} at {int(row[c])}, expected "
                    f"{int(row[c - 1]) + 1})"
                )
            else:
                reasons.append(
                    f"row {r} of tile {name(t)} starts at offset {int(row[0])} "
                    f"({int(row[0]) * size} bytes), not aligned to {self.alignment_bytes} bytes"
                )
        return self._reject(
            f"{count} of {total} rows of {length} elements fail", *reasons, *_more(count)
        )


@dataclass(frozen=True)
class SubgroupBlockAccess(Constraint):
    """``intel_sub_group_block_read`` / ``_write`` (``cl_intel_subgroups``,
    and ``cl_intel_subgroup_local_block_io`` for ``__local`` pointers): the
    ``sub_group_size`` lanes of a sub-group read one pointer's consecutive
    elements, lane ``l`` the ``l``-th.

    Accepts when the axis extent is a multiple of ``sub_group_size`` and,
    for every run of ``sub_group_size`` logical elements along logical
    ``axis`` starting at a multiple of it, their physical offsets are
    consecutive and the first one's byte address is a multiple of
    ``alignment_bytes``: 16 for the block reads and writes of ``__local``
    memory and for writes of ``__global`` memory, 4 for reads of
    ``__global`` memory (Intel's extension specifications). Images are not
    buffers: an ``image2d`` layout is refused.
    """

    axis: int
    sub_group_size: int
    alignment_bytes: int = 16

    def __post_init__(self) -> None:
        if isinstance(self.axis, bool) or not isinstance(self.axis, int):
            raise LayoutError(f"SubgroupBlockAccess: axis must be an int, got {self.axis!r}")
        _positive_int("SubgroupBlockAccess", "sub_group_size", self.sub_group_size)
        _positive_int("SubgroupBlockAccess", "alignment_bytes", self.alignment_bytes)

    def check(
        self, layout: Layout, logical_shape: Sequence[int], dtype: str, device: DeviceInfo
    ) -> Verdict:
        _check_shape(layout, logical_shape)
        if layout.image_rank == 2:
            return self._reject(
                f"the layout {layout.describe()} is an image2d; block reads of a buffer need a "
                f"pointer"
            )
        full = layout.shape
        if not -len(full) <= self.axis < len(full):
            raise ShapeMismatchError(f"{self}: axis {self.axis} is out of range for {_fmt(full)}")
        axis = self.axis % len(full)
        n = self.sub_group_size
        if full[axis] % n:
            return self._reject(
                f"axis {axis} has extent {full[axis]}, not a multiple of the sub-group size {n}"
            )
        groups = [1] * len(full)
        groups[axis] = n
        offsets, counts = _reduced_offsets(
            layout, full, groups, _alignment(self.alignment_bytes, dtype)
        )
        shape = offsets.shape
        weights = None
        if counts is not None:
            order = [k for k in range(len(full)) if k != axis] + [axis]
            weights = _outer([counts[k] for k in order]).reshape(-1)
        moved = np.moveaxis(offsets, axis, -1)
        runs = moved.reshape(-1, 1, n)
        rest = moved.shape[:-1]

        def name(t: int) -> str:
            where = list(np.unravel_index(t // (shape[axis] // n), rest)) if rest else []
            where.insert(axis, (t % (shape[axis] // n)) * n)
            return _fmt(where)

        return self.check_tiles(runs, dtype, name, weights)

    def check_tiles(
        self, arr: np.ndarray, dtype: str, name: TileNamer, weights: np.ndarray | None = None
    ) -> Verdict:
        """The rule on rows of tiles given as flat offsets (see
        :meth:`ContiguousTileCopy.check_tiles`): each row splits into runs of
        ``sub_group_size`` elements from its start."""
        ntiles, rows, cols = arr.shape
        n = self.sub_group_size
        if cols % n:
            return self._reject(
                f"rows of {cols} elements do not split into runs of the sub-group size {n}"
            )
        runs = arr.reshape(ntiles, rows * (cols // n), n)
        size = dtype_bytes(dtype)
        contiguous = np.all(np.diff(runs, axis=2) == 1, axis=2)
        aligned = (runs[:, :, 0] * size) % self.alignment_bytes == 0
        bad = ~(contiguous & aligned)
        count, total = _weighed(bad, weights)
        if not count:
            return self._accept()
        reasons = []
        per_row = cols // n
        for flat in np.flatnonzero(bad)[:MAX_REASONS]:
            t, q = divmod(int(flat), runs.shape[1])
            where = f"run {q % per_row} of row {q // per_row} of {name(t)}"
            if runs.shape[1] == 1:
                where = f"the run from {name(t)}"
            run = runs[t, q]
            if not contiguous[t, q]:
                reasons.append(
                    f"{where}: the {n} lanes' elements lie at offsets {run.tolist()}, not "
                    f"consecutive"
                )
            else:
                reasons.append(
                    f"{where} starts at offset {int(run[0])} ({int(run[0]) * size} bytes), not "
                    f"aligned to {self.alignment_bytes} bytes"
                )
        return self._reject(
            f"{count} of {total} sub-group runs of {n} elements fail", *reasons, *_more(count)
        )


MATRIX_DTYPES = tuple(sorted({d for i in MATRIX_INTRINSICS.values() for d in i.dtypes}))
"""Input dtypes the matrix intrinsics multiply (fp32 accumulation)."""


@dataclass(frozen=True)
class MatrixTileLoad(Constraint):
    """How a matrix intrinsic (:data:`MATRIX_INTRINSICS`, by name) loads
    its ``operand`` (``"a"``: M x K rows of the left matrix, ``"b"``: K x N
    rows of the right one) from a ``__local`` tile: one pointer per fragment
    row, so rows may lie anywhere (a padded row, a pad every n rows, an XOR
    of row chunks) but each row segment is contiguous and its start aligned
    (the intrinsic's :class:`FragmentLoad` of the operand).

    * ``intel_dpas``: ``intel_sub_group_block_read`` of each 16-element row
      of an 8 x 16 A fragment and ``intel_sub_group_block_read_us`` of each
      8-element row of a 16 x 8 B fragment (16-byte aligned, the rule of
      ``__local`` block reads), then ``intel_sub_group_f16_f16_matrix_mad_k16``.
      Its older name ``intel_mad`` is read as it.
    * ``nv_mma``: ``ldmatrix.sync.aligned.m8n8.x4`` (``.trans`` for B): each
      of 32 lanes points at one 16-byte row of an 8 x 8 matrix (16-byte
      aligned), then ``mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32``.
    * ``nv_wmma``: the strided load, ``wmma.load.{a,b}.sync.aligned.row.
      m16n16k16.shared.f16 [ptr], stride``: every 16 x 16 fragment needs one
      constant row stride (:class:`StridedTileCopy`) with 16-byte aligned
      rows (a stride of a multiple of 8 halves) and a 32-byte aligned first
      row (``load_matrix_sync``'s 256-bit aligned pointer).

    The tile's last two extents must be multiples of the fragment's, and the
    dtype one the intrinsic multiplies.
    """

    intrinsic: str
    operand: str

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "intrinsic", matrix_intrinsic(self.intrinsic).name)
            self._intrinsic.load(self.operand)
        except LayoutError as err:
            raise LayoutError(f"MatrixTileLoad: {err}") from None

    @property
    def _intrinsic(self) -> MatrixIntrinsic:
        return MATRIX_INTRINSICS[self.intrinsic]

    @property
    def fragment_rows(self) -> RowPointerTileLoad:
        """The row-pointer rule one fragment load obeys."""
        load = self._intrinsic.load(self.operand)
        return RowPointerTileLoad(
            load.rows, row_elements=load.row_elements, alignment_bytes=load.alignment_bytes
        )

    def check(
        self, layout: Layout, logical_shape: Sequence[int], dtype: str, device: DeviceInfo
    ) -> Verdict:
        offsets = _offsets(layout, logical_shape)
        intrinsic = self._intrinsic
        if dtype not in intrinsic.dtypes:
            return self._reject(
                f"dtype {dtype}: {self.intrinsic} multiplies {' or '.join(intrinsic.dtypes)}"
            )
        if offsets.ndim < 2:
            return self._reject(f"a 1-D buffer {_fmt(offsets.shape)} holds no matrix fragment")
        if intrinsic.stride_alignment:
            return self._check_strided(layout, logical_shape, dtype, device, offsets)
        rows = self.fragment_rows
        verdict = rows.check(layout, logical_shape, dtype, device)
        if verdict.ok:
            return self._accept()
        return self._reject(*verdict.reasons)

    def _check_strided(
        self,
        layout: Layout,
        logical_shape: Sequence[int],
        dtype: str,
        device: DeviceInfo,
        offsets: np.ndarray,
    ) -> Verdict:
        load = self._intrinsic.load(self.operand)
        fragment, align = (load.rows, load.row_elements), self._intrinsic.stride_alignment
        verdict = StridedTileCopy(fragment, alignment_bytes=load.alignment_bytes).check(
            layout, logical_shape, dtype, device
        )
        if not verdict.ok:
            return self._reject(*verdict.reasons)
        arr, grid, error = _tiles(str(self), offsets, fragment)
        if error:
            return self._reject(error)
        size = dtype_bytes(dtype)
        firsts = arr[:, 0, 0] * size
        bad = np.flatnonzero(firsts % align)
        if bad.size:
            t = int(bad[0])
            return self._reject(
                f"fragment {_tile_namer(grid, fragment)(t)} starts at byte {int(firsts[t])}, "
                f"not aligned to {align} bytes"
            )
        return self._accept()


@dataclass(frozen=True)
class PaddingBudget(Constraint):
    """Padding is at most ``max_fraction`` of the physical buffer (0 <= f < 1)."""

    max_fraction: float = 0.25

    def __post_init__(self) -> None:
        if not 0.0 <= float(self.max_fraction) < 1.0:
            raise LayoutError(
                f"PaddingBudget: max_fraction must be in [0, 1), got {self.max_fraction!r}"
            )

    def check(
        self, layout: Layout, logical_shape: Sequence[int], dtype: str, device: DeviceInfo
    ) -> Verdict:
        _check_shape(layout, logical_shape)
        fraction = layout.padding_fraction
        if fraction <= self.max_fraction:
            return self._accept()
        return self._reject(
            f"padding is {fraction:.1%} of the physical buffer ({layout.padding_count} of "
            f"{layout.physical_size} elements), over the budget of {self.max_fraction:.1%}"
        )


@dataclass(frozen=True)
class LocalMemoryBudget(Constraint):
    """``__local`` buffers fit: their physical bytes sum to at most
    ``max_bytes`` (default: ``device.local_mem_size``). ``check`` tests one
    buffer; :meth:`check_buffers` the sum over all local buffers of a kernel."""

    max_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.max_bytes is not None:
            _positive_int("LocalMemoryBudget", "max_bytes", self.max_bytes)

    def budget(self, device: DeviceInfo) -> int:
        return self.max_bytes if self.max_bytes is not None else device.local_mem_size

    def check(
        self, layout: Layout, logical_shape: Sequence[int], dtype: str, device: DeviceInfo
    ) -> Verdict:
        _check_shape(layout, logical_shape)
        return self.check_buffers([("buffer", layout, dtype)], device)

    def check_buffers(
        self, buffers: Sequence[tuple[str, Layout, str]], device: DeviceInfo
    ) -> Verdict:
        """``buffers``: (name, layout, dtype) of every local buffer of one kernel."""
        sizes = [
            (name, layout.physical_size * dtype_bytes(dtype)) for name, layout, dtype in buffers
        ]
        total, budget = sum(s for _, s in sizes), self.budget(device)
        if total <= budget:
            return self._accept()
        parts = " + ".join(f"{name} {size}" for name, size in sizes)
        return self._reject(
            f"local buffers need {total} bytes ({parts}), over the budget of {budget} bytes"
        )


@dataclass(frozen=True)
class BankConflicts(Constraint):
    """Soft: the worst bank-conflict degree of a sub-group access over a
    ``__local`` buffer.

    ``lanes[l]`` lists the logical indices lane ``l`` accesses in one
    instruction. Each element's byte address ``offset * itemsize`` lies in
    word ``address // bank_bytes`` and bank ``word % banks``. The degree of a
    placement is the largest number of *distinct* words that fall in one bank
    (lanes reading the same word are a broadcast, not a conflict); 1 means
    conflict-free. With ``tiled`` the pattern is evaluated at every
    translation by multiples of its own extent (its bounding box) that keeps
    it inside the buffer and the score is the worst one; otherwise only at
    the indices given. The score is the degree; ``max_degree`` makes a
    higher degree a rejection.
    """

    soft: ClassVar[bool] = True

    lanes: tuple[tuple[tuple[int, ...], ...], ...]
    banks: int = 32
    bank_bytes: int = 4
    tiled: bool = True
    max_degree: int | None = None

    def __post_init__(self) -> None:
        lanes = tuple(tuple(tuple(int(i) for i in idx) for idx in lane) for lane in self.lanes)
        object.__setattr__(self, "lanes", lanes)
        if not lanes or any(not lane for lane in lanes):
            raise LayoutError("BankConflicts: every lane needs at least one index")
        ranks = {len(idx) for lane in lanes for idx in lane}
        if len(ranks) != 1:
            raise LayoutError(f"BankConflicts: indices of mixed ranks {sorted(ranks)}")
        _positive_int("BankConflicts", "banks", self.banks)
        _positive_int("BankConflicts", "bank_bytes", self.bank_bytes)
        if self.max_degree is not None:
            _positive_int("BankConflicts", "max_degree", self.max_degree)

    def __str__(self) -> str:
        return (
            f"BankConflicts({len(self.lanes)} lanes x {len(self.lanes[0])} elements, "
            f"{self.banks} banks of {self.bank_bytes} bytes)"
        )

    # -- common patterns ------------------------------------------------------
    @classmethod
    def row_segments(
        cls, lanes: int, elements: int, *, column: int = 0, rank: int = 2, **kwargs: Any
    ) -> BankConflicts:
        """Lane ``l`` reads ``elements`` consecutive elements of row ``l`` from
        ``column`` (ldmatrix: 8 lanes, 16-byte rows)."""
        lead = (0,) * (rank - 2)
        pattern = tuple(
            tuple((*lead, lane, column + e) for e in range(elements)) for lane in range(lanes)
        )
        return cls(pattern, **kwargs)

    @classmethod
    def column(cls, lanes: int, *, column: int = 0, rank: int = 2, **kwargs: Any) -> BankConflicts:
        """Lane ``l`` reads element ``(l, column)``: a read down a column."""
        lead = (0,) * (rank - 2)
        return cls(tuple(((*lead, lane, column),) for lane in range(lanes)), **kwargs)

    @classmethod
    def row(cls, lanes: int, *, rank: int = 2, **kwargs: Any) -> BankConflicts:
        """Lane ``l`` reads element ``(0, l)``: a read along a row."""
        lead = (0,) * (rank - 2)
        return cls(tuple(((*lead, 0, lane),) for lane in range(lanes)), **kwargs)

    def words(self, offsets: np.ndarray | Sequence[int], dtype: str) -> np.ndarray:
        """The bank word of each element at flat physical ``offsets`` (in
        elements): ``offset * itemsize // bank_bytes``."""
        return np.asarray(offsets, dtype=np.int64) * dtype_bytes(dtype) // self.bank_bytes

    def bank_of(self, offsets: np.ndarray | Sequence[int], dtype: str) -> np.ndarray:
        """The bank of each element at flat physical ``offsets`` (in elements):
        its word (:meth:`words`) modulo ``banks``; the shape of ``offsets``."""
        return self.words(offsets, dtype) % self.banks

    def degree(
        self, layout: Layout, logical_shape: Sequence[int], dtype: str
    ) -> tuple[int, tuple[int, ...], int]:
        """(worst degree, translation where it occurs, the bank)."""
        offsets = _offsets(layout, logical_shape)
        shape = offsets.shape
        pattern = np.array(self.lanes, dtype=np.int64)  # (lanes, elems, rank)
        if pattern.shape[-1] != len(shape):
            raise ShapeMismatchError(
                f"{self}: pattern indices have rank {pattern.shape[-1]}, the buffer {_fmt(shape)}"
            )
        low, high = pattern.reshape(-1, len(shape)).min(0), pattern.reshape(-1, len(shape)).max(0)
        if np.any(low < 0) or np.any(high >= np.array(shape)):
            raise ShapeMismatchError(
                f"{self}: pattern indices fall outside the buffer {_fmt(shape)}"
            )
        if self.tiled:
            span = high - low + 1
            counts = [(shape[d] - high[d] - 1) // span[d] + 1 for d in range(len(shape))]
            steps = np.stack(
                np.meshgrid(*[np.arange(c) * span[d] for d, c in enumerate(counts)], indexing="ij"),
                axis=-1,
            ).reshape(-1, len(shape))
        else:
            steps = np.zeros((1, len(shape)), dtype=np.int64)
        points = pattern.reshape(1, -1, len(shape)) + steps[:, None, :]  # (P, L*E, rank)
        flat = np.ravel_multi_index(tuple(np.moveaxis(points, -1, 0)), shape)
        words = self.words(offsets.reshape(-1)[flat], dtype)
        n_place = words.shape[0]
        words = np.sort(words, axis=1)
        distinct = np.ones(words.shape, dtype=bool)
        distinct[:, 1:] = words[:, 1:] != words[:, :-1]
        slots = np.arange(n_place, dtype=np.int64)[:, None] * self.banks + words % self.banks
        per_bank = np.bincount(slots[distinct], minlength=n_place * self.banks)
        worst = int(per_bank.argmax())
        p, bank = divmod(worst, self.banks)
        return int(per_bank[worst]), tuple(int(s) for s in steps[p]), bank

    def check(
        self, layout: Layout, logical_shape: Sequence[int], dtype: str, device: DeviceInfo
    ) -> Verdict:
        worst, shift, bank = self.degree(layout, logical_shape, dtype)
        note = (
            f"{worst}-way: {worst} distinct words in bank {bank} with the pattern shifted by "
            f"{_fmt(shift)}"
            if worst > 1
            else "conflict-free"
        )
        if self.max_degree is not None and worst > self.max_degree:
            return Verdict(
                False, (f"{note}, over the allowed {self.max_degree}-way",), worst, str(self)
            )
        return Verdict(True, (note,), float(worst), str(self))
