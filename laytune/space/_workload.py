"""What a SearchSpace needs to know of a workload, and the knob vocabulary.

The workloads of ``laytune.ops`` satisfy these protocols structurally (they
never import ``laytune.space``); :class:`Axis`, :class:`Buffer` and
:class:`WorkloadSpec` are plain implementations for tests, benchmarks and
hand-written descriptions.

The iteration model the knobs refer to
---------------------------------------
A workload is a loop nest over ``axes``. Its *spatial* axes (``kind ==
"spatial"``) are the points of a 1-D NDRange; its *reduce* axes are loops
inside each work-item. The *innermost spatial axis* is the last spatial axis
of ``workload.axes`` (``j`` of a matmul ``i, j, k``; ``ow`` of a conv2d).
Each buffer is accessed at ``buffer.indices``: one index expression per
logical dimension of the buffer, written in the workload's axis variables
(``Var(k)`` is ``workload.axes[k]``). Matmul ``A`` is ``(Var(0), Var(2))``.

Knob vocabulary
---------------
A :class:`~laytune.space.Candidate` stores one value per knob in
``Candidate.knobs``. The names are the module constants below; every knob the
space offers is present in every candidate it produces (a knob that does not
apply to a workload holds its neutral value: ``unroll=1``,
``local_stage=False``).

``KNOB_ORDER`` ("order")
    ``"logical"``: work-item ``w`` takes the spatial points in row-major order
    of the spatial axes (``axes`` order). Otherwise the name of a buffer whose
    indices are exactly the spatial axis variables (each once, any order): the
    work-items then walk that buffer's *physical* element order (RFC 39: make
    the writes, or reads, of that buffer contiguous); the logical point of a
    physical position comes from the buffer's layout inverse, and padded
    positions are guarded or overcomputed as ``pad_mode`` says. Joint rule:
    ``order != "logical"`` needs ``per_item == 1`` and ``vector == 1`` (the
    register tile and vectors are defined along the logical innermost axis),
    and is not offered for a buffer whose layout leaves the logical order
    unchanged (identity layout with indices in axes order), which would
    duplicate ``"logical"``.
``KNOB_WORK_GROUP`` ("work_group")
    int: the work-group size of the 1-D NDRange; ``0`` leaves it to the
    driver. The NDRange has ``prod(spatial extents) // per_item`` work-items
    (``"logical"`` order) or the chosen buffer's physical size (buffer order);
    a nonzero size divides that count and is at most
    ``device.max_work_group_size`` and ``device.max_work_item_sizes[0]``.
``KNOB_PER_ITEM`` ("per_item")
    int: consecutive output points along the innermost spatial axis computed
    by one work-item (a register tile); divides that axis's extent and is a
    multiple of ``vector``.
``KNOB_VECTOR`` ("vector")
    int in :data:`VECTOR_WIDTHS`: vloadN/vstoreN width along the innermost
    spatial axis. Joint rule (:func:`vector_access_requirements`): every
    buffer with a dimension whose index expression is exactly that axis's
    variable must accept ``VectorAccess(dimension, N)`` under its chosen
    layout; a buffer that uses that variable in any other way (``oh + kh``,
    ``2 * ow``) forbids ``N > 1``.
``KNOB_UNROLL`` ("unroll")
    int: unroll factor of the innermost reduction loop; divides the extent of
    the innermost reduce axis (the last reduce axis of ``axes``). Always 1
    for a workload without reduce axes.
``KNOB_LOCAL_STAGE`` ("local_stage")
    bool: stage input tiles in ``__local`` memory, as the workload's staging
    plan says (:func:`laytune.space.staging_plan`: the tiles a workload
    declares in ``local_tiles``, see :class:`WorkloadLike`, or else, for a
    reduction that reads an input through a sliding window such as conv2d,
    the input patch a block of outputs needs, halo included). A work-group
    computes one block of outputs and cooperatively copies the tiles. Joint
    rules (:func:`laytune.space.staging_knob_reasons`): a nonzero
    ``work_group`` with ``work_group * per_item`` equal to the block's output
    count, ``per_item`` dividing the block's innermost extent, the logical
    ``order``, and ``unroll`` dividing the values of the innermost reduce
    axis in one stage; the NDRange is then one work-group per block (a block
    may overshoot the output), so ``work_group`` need not divide the
    unstaged work-items. When True the candidate also holds a layout for
    each staged input's local tile buffer, named :func:`local_buffer_name`
    (``"A.local"``), role ``"local"``, of the plan's tile shape, chosen from
    identity, ``pad_rows`` and ``row_xor``; a vector that reads a tile needs
    its layout to accept ``VectorAccess``; all local buffers together fit
    ``device.local_mem_size``; the space ranks them by bank conflicts.
``KNOB_PAD_MODE`` ("pad_mode")
    ``"guard"``: loops over a padded physical extent test every index and
    never read or write padding. ``"overcompute"``: those loops run over the
    padded extents without tests, so padding of inputs is read and padding of
    outputs may be written. Valid (:func:`laytune.space.check_candidate`) only
    when every padded input holds a ``pad_value`` that is the neutral element
    of ``workload.reduction`` (``0.0`` for ``"sum"``, ``-inf`` for
    ``"max"``), or, for an element-wise workload (``reduction is None``),
    any value other than None (``UNDEF`` included) while the output is
    written only at real elements. Offered only when some buffer is padded.
    Output pad values are always None (never read).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from laytune.exceptions import LayoutError
from laytune.layout import Expr, Var

__all__ = [
    "AXIS_KINDS",
    "BUFFER_ROLES",
    "DTYPE_BYTES",
    "KNOBS",
    "KNOB_LOCAL_STAGE",
    "KNOB_ORDER",
    "KNOB_PAD_MODE",
    "KNOB_PER_ITEM",
    "KNOB_UNROLL",
    "KNOB_VECTOR",
    "KNOB_WORK_GROUP",
    "ORDER_LOGICAL",
    "PAD_MODES",
    "REDUCTIONS",
    "VECTOR_WIDTHS",
    "Axis",
    "AxisLike",
    "Buffer",
    "BufferLike",
    "WorkloadLike",
    "WorkloadSpec",
    "dtype_bytes",
    "index_text",
    "innermost_reduce_axis",
    "innermost_spatial_axis",
    "local_buffer_name",
    "local_tiles",
    "neutral_element",
    "spatial_points",
    "vector_access_requirements",
]

AXIS_KINDS = ("spatial", "reduce")
"""Kinds of a workload axis: a point of the NDRange, or a loop inside a work-item."""

BUFFER_ROLES = ("input", "output", "local")
"""Roles of a buffer: read-only global input, written global output, ``__local`` tile."""

REDUCTIONS = (None, "sum", "max")
"""How a workload combines terms along its reduce axes (None: element-wise)."""

DTYPE_BYTES = {"float16": 2, "float32": 4, "float64": 8, "int32": 4, "int8": 1, "uint8": 1}
"""Bytes per element of the numpy dtype names buffers may carry."""

KNOB_ORDER = "order"
"""Spatial iteration order: ``"logical"`` or the name of a buffer to follow physically."""
KNOB_WORK_GROUP = "work_group"
"""Work-group size of the 1-D NDRange (0: the driver chooses)."""
KNOB_PER_ITEM = "per_item"
"""Output points along the innermost spatial axis per work-item (register tile)."""
KNOB_VECTOR = "vector"
"""vloadN/vstoreN width along the innermost spatial axis."""
KNOB_UNROLL = "unroll"
"""Unroll factor of the innermost reduction loop."""
KNOB_LOCAL_STAGE = "local_stage"
"""Stage input tiles in __local memory (adds ``"<buffer>.local"`` layouts)."""
KNOB_PAD_MODE = "pad_mode"
"""``"guard"`` or ``"overcompute"`` on padded extents."""

KNOBS = (
    KNOB_ORDER,
    KNOB_VECTOR,
    KNOB_PER_ITEM,
    KNOB_WORK_GROUP,
    KNOB_UNROLL,
    KNOB_LOCAL_STAGE,
    KNOB_PAD_MODE,
)
"""Every knob, in the dependency order the space chooses them in."""

ORDER_LOGICAL = "logical"
"""The ``order`` value for row-major order of the spatial axes."""

BASELINE_KNOBS: Mapping[str, Any] = MappingProxyType(
    {
        KNOB_ORDER: ORDER_LOGICAL,
        KNOB_VECTOR: 1,
        KNOB_PER_ITEM: 1,
        KNOB_WORK_GROUP: 0,
        KNOB_UNROLL: 1,
        KNOB_LOCAL_STAGE: False,
        KNOB_PAD_MODE: "guard",
    }
)
"""The baseline's knobs (with identity layouts, the kernel a person would
write): logical order, scalar, one point per work-item, the driver's
work-group, no unroll, no staging, guarded padding."""

VECTOR_WIDTHS = (1, 2, 4, 8, 16)
"""The vector widths OpenCL C has (vload2 ... vload16; 1 is scalar)."""

PAD_MODES = ("guard", "overcompute")
"""Values of the ``pad_mode`` knob."""

LOCAL_SUFFIX = ".local"


# -- protocols ----------------------------------------------------------------


@runtime_checkable
class AxisLike(Protocol):
    """One loop of a workload: ``name``, ``extent`` and ``kind`` ("spatial" or "reduce")."""

    @property
    def name(self) -> str: ...

    @property
    def extent(self) -> int: ...

    @property
    def kind(self) -> str: ...


@runtime_checkable
class BufferLike(Protocol):
    """One buffer of a workload.

    ``shape`` is the logical shape; ``dtype`` a numpy dtype name
    ("float32", "float16"); ``role`` "input", "output" or "local";
    ``indices`` one :class:`~laytune.layout.Expr` per logical dimension: the
    element the loop nest touches, in the workload's axis variables
    (``Var(k)`` is ``workload.axes[k]``).
    """

    @property
    def name(self) -> str: ...

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> str: ...

    @property
    def role(self) -> str: ...

    @property
    def indices(self) -> tuple[Expr, ...]: ...


@runtime_checkable
class WorkloadLike(Protocol):
    """What a SearchSpace reads of a workload.

    ``name`` is the operator name, ``key`` identifies operator and shapes,
    ``axes`` the loop nest, ``buffers`` the global buffers, ``reduction``
    "sum", "max" or None (element-wise).

    Optional member, read with ``getattr``: ``local_tiles: Mapping[str,
    tuple[int, ...]]``, the tile shape of each input, indexed by bare axis
    variables, that the kernel stages in ``__local`` memory (e.g. ``{"A":
    (16, 16), "B": (16, 16)}``). Without it the space offers
    ``local_stage=True`` only for a reduction that reads an input through a
    sliding window (see :func:`laytune.space.staging_plan`).
    """

    @property
    def name(self) -> str: ...

    @property
    def key(self) -> str: ...

    @property
    def axes(self) -> Sequence[AxisLike]: ...

    @property
    def buffers(self) -> Sequence[BufferLike]: ...

    @property
    def reduction(self) -> str | None: ...


# -- plain implementations ----------------------------------------------------


@dataclass(frozen=True)
class Axis:
    """A loop of a hand-written workload description."""

    name: str
    extent: int
    kind: str = "spatial"

    def __post_init__(self) -> None:
        if isinstance(self.extent, bool) or not isinstance(self.extent, int) or self.extent <= 0:
            raise LayoutError(
                f"axis {self.name!r}: extent must be a positive int, got {self.extent!r}"
            )
        if self.kind not in AXIS_KINDS:
            raise LayoutError(f"axis {self.name!r}: kind {self.kind!r} is not one of {AXIS_KINDS}")


@dataclass(frozen=True)
class Buffer:
    """A buffer of a hand-written workload description (see :class:`BufferLike`).

    ``indices`` may be left empty for a buffer whose access the space need not
    know (a local tile): then no vector or order knob refers to it.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    role: str = "input"
    indices: tuple[Expr, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        object.__setattr__(self, "indices", tuple(self.indices))
        if not self.shape or any(s <= 0 for s in self.shape):
            raise LayoutError(f"buffer {self.name!r}: shape {self.shape} needs positive extents")
        if self.role not in BUFFER_ROLES:
            raise LayoutError(
                f"buffer {self.name!r}: role {self.role!r} is not one of {BUFFER_ROLES}"
            )
        if self.dtype not in DTYPE_BYTES:
            raise LayoutError(
                f"buffer {self.name!r}: dtype {self.dtype!r} is not one of {sorted(DTYPE_BYTES)}"
            )
        if self.indices and len(self.indices) != len(self.shape):
            raise LayoutError(
                f"buffer {self.name!r}: {len(self.indices)} index expressions for a "
                f"{len(self.shape)}-D shape {self.shape}"
            )


@dataclass(frozen=True)
class WorkloadSpec:
    """A hand-written workload description (implements :class:`WorkloadLike`).

    ``local_tiles`` is sorted pairs so that the spec stays hashable; read it
    as a mapping with :func:`local_tiles`.
    """

    name: str
    axes: tuple[Axis, ...]
    buffers: tuple[Buffer, ...]
    reduction: str | None = None
    local_tiles: tuple[tuple[str, tuple[int, ...]], ...] = field(default=())
    key: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "axes", tuple(self.axes))
        object.__setattr__(self, "buffers", tuple(self.buffers))
        tiles = self.local_tiles
        if isinstance(tiles, Mapping):
            tiles = tiles.items()
        object.__setattr__(
            self,
            "local_tiles",
            tuple(sorted((str(k), tuple(int(t) for t in v)) for k, v in tiles)),
        )
        if self.reduction not in REDUCTIONS:
            raise LayoutError(f"reduction {self.reduction!r} is not one of {REDUCTIONS}")
        names = [b.name for b in self.buffers]
        if len(set(names)) != len(names):
            raise LayoutError(f"workload {self.name!r}: duplicate buffer names in {names}")
        for buf in self.buffers:
            for expr in buf.indices:
                _check_vars(expr, len(self.axes), buf.name)
        if not self.key:
            shapes = ",".join(f"{b.name}{list(b.shape)}:{b.dtype}" for b in self.buffers)
            object.__setattr__(self, "key", f"{self.name}({shapes})")


def _check_vars(expr: Expr, n_axes: int, buffer: str) -> None:
    from laytune.layout._expr import variables

    for k in variables(expr):
        if k >= n_axes:
            raise LayoutError(
                f"buffer {buffer!r}: index expression {expr} uses axis {k} of a "
                f"{n_axes}-axis workload"
            )


# -- helpers both space and codegen use ---------------------------------------


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a numpy dtype name."""
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise LayoutError(f"dtype {dtype!r} is not one of {sorted(DTYPE_BYTES)}") from None


def neutral_element(reduction: str | None) -> float | None:
    """What an overcomputed pad must hold: 0.0 for "sum", -inf for "max", None if element-wise."""
    if reduction is None:
        return None
    if reduction == "sum":
        return 0.0
    if reduction == "max":
        return -math.inf
    raise LayoutError(f"reduction {reduction!r} is not one of {REDUCTIONS}")


def innermost_spatial_axis(workload: WorkloadLike) -> int | None:
    """Position in ``workload.axes`` of the last spatial axis (None: no spatial axis)."""
    spatial = [k for k, a in enumerate(workload.axes) if a.kind == "spatial"]
    return spatial[-1] if spatial else None


def innermost_reduce_axis(workload: WorkloadLike) -> int | None:
    """Position in ``workload.axes`` of the last reduce axis (None: element-wise)."""
    reduce_ = [k for k, a in enumerate(workload.axes) if a.kind == "reduce"]
    return reduce_[-1] if reduce_ else None


def spatial_points(workload: WorkloadLike) -> int:
    """Number of points of the spatial iteration space."""
    return math.prod(a.extent for a in workload.axes if a.kind == "spatial")


def index_text(workload: WorkloadLike, buffer: BufferLike) -> str:
    """A buffer's access in the workload's axis names: ``"[n, c, oh + kh, ow + kw]"``."""
    from laytune.layout._expr import to_text

    names = [a.name for a in workload.axes]
    return "[" + ", ".join(to_text(e, names) for e in buffer.indices) + "]"


def local_buffer_name(buffer: str) -> str:
    """Name of the ``__local`` tile buffer that stages input ``buffer``: ``"A.local"``."""
    return f"{buffer}{LOCAL_SUFFIX}"


def local_tiles(workload: WorkloadLike) -> dict[str, tuple[int, ...]]:
    """The workload's optional ``local_tiles`` as a dict (empty when absent)."""
    tiles: Any = getattr(workload, "local_tiles", None) or {}
    if not isinstance(tiles, Mapping):
        tiles = dict(tiles)
    return {str(k): tuple(int(t) for t in v) for k, v in tiles.items()}


def vector_access_requirements(workload: WorkloadLike) -> dict[str, int | None]:
    """For each buffer the innermost spatial axis touches: the logical dimension
    a vector of that axis runs along, or None when the buffer uses the axis
    variable other than as a bare index (then only ``vector == 1`` is valid).

    Buffers the axis does not touch are absent (a vector leaves them alone).
    A buffer that indexes two dimensions by the bare variable also maps to None.
    """
    from laytune.layout._expr import variables

    axis = innermost_spatial_axis(workload)
    result: dict[str, int | None] = {}
    if axis is None:
        return result
    for buf in workload.buffers:
        bare = [d for d, e in enumerate(buf.indices) if isinstance(e, Var) and e.index == axis]
        other = [
            d
            for d, e in enumerate(buf.indices)
            if not (isinstance(e, Var) and e.index == axis) and axis in variables(e)
        ]
        if not bare and not other:
            continue
        result[buf.name] = bare[0] if len(bare) == 1 and not other else None
    return result
