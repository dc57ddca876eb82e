"""What a SearchSpace needs to know of a workload, and the knob vocabulary.

The workloads of ``laytune.ops`` satisfy these protocols structurally (they
never import ``laytune.space``); :class:`Axis`, :class:`Buffer` and
:class:`WorkloadSpec` are plain implementations for tests, benchmarks and
hand-written descriptions.

The knobs a candidate holds besides its layouts are described in
:mod:`laytune.space._knobs` (one table) and the rules between them in
:mod:`laytune.space._rules`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from laytune.dtypes import DTYPES, ImageDtype, dtype_of
from laytune.exceptions import LayoutError
from laytune.layout import BinOp, Expr, Var, bounds, variables
from laytune.ops import reduction

__all__ = [
    "AXIS_KINDS",
    "BUFFER_ROLES",
    "DTYPE_BYTES",
    "IMAGE_DTYPES",
    "VECTOR_WIDTHS",
    "Axis",
    "AxisLike",
    "Buffer",
    "BufferLike",
    "ImageDtype",
    "WorkloadLike",
    "WorkloadSpec",
    "dtype_bytes",
    "index_text",
    "local_buffer_name",
    "local_tiles",
    "vector_dim",
    "window_vector_dim",
]

AXIS_KINDS = ("spatial", "reduce")
"""Kinds of a workload axis: a point of the NDRange, or a loop inside a work-item."""

BUFFER_ROLES = ("input", "output", "local")
"""Roles of a buffer: read-only global input, written global output, ``__local`` tile."""

DTYPE_BYTES: Mapping[str, int] = MappingProxyType({name: d.bytes for name, d in DTYPES.items()})
"""Bytes per element of the numpy dtype names buffers may carry (:data:`laytune.dtypes.DTYPES`)."""

IMAGE_DTYPES: Mapping[str, ImageDtype] = MappingProxyType(
    {name: d.image for name, d in DTYPES.items() if d.image is not None}
)
"""The dtypes a buffer may have in an ``image2d`` (``Image2DRead`` accepts
exactly these; codegen reads and runners allocate them as said here)."""

VECTOR_WIDTHS = (1, 2, 4, 8, 16)
"""The vector widths OpenCL C has (vload2 ... vload16; 1 is scalar)."""

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
    a name of ``laytune.ops.REDUCTIONS`` or None (element-wise).

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
        reduction(self.reduction)  # raises for an unknown reduction
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
    from laytune.layout import variables

    for k in variables(expr):
        if k >= n_axes:
            raise LayoutError(
                f"buffer {buffer!r}: index expression {expr} uses axis {k} of a "
                f"{n_axes}-axis workload"
            )


# -- helpers both space and codegen use ---------------------------------------


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a numpy dtype name."""
    return dtype_of(dtype).bytes


def index_text(workload: WorkloadLike, buffer: BufferLike) -> str:
    """A buffer's access in the workload's axis names: ``"[n, c, oh + kh, ow + kw]"``."""
    from laytune.layout import to_text

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


def vector_dim(buf: BufferLike, axis: int) -> int | str | None:
    """The dimension of ``buf`` a vector along ``axis`` runs along; None when
    the buffer does not use the axis (the vector leaves it alone, or
    broadcasts it); a reason (str) when it uses the axis other than as one
    bare index (``oh + kh``, ``2 * ow``, or twice), so no vector serves it."""
    bare = [d for d, e in enumerate(buf.indices) if isinstance(e, Var) and e.index == axis]
    using = [d for d, e in enumerate(buf.indices) if axis in variables(e)]
    if not using:
        return None
    if len(bare) == 1 and len(using) == 1:
        return bare[0]
    return f"buffer {buf.name!r} is indexed by the axis other than as one bare index"


def _terms(e: Expr, sign: int = 1) -> list[tuple[int, Expr]]:
    """The terms of a sum, each with its sign."""
    if isinstance(e, BinOp) and e.op in ("+", "-"):
        return _terms(e.lhs, sign) + _terms(e.rhs, sign if e.op == "+" else -sign)
    return [(sign, e)]


def window_vector_dim(workload: WorkloadLike, buf: BufferLike, axis: int) -> int | str | None:
    """The dimension of ``buf`` an unaligned vector along ``axis`` reads
    (:class:`~laytune.space.UnalignedVectorAccess`): the one index that uses
    the axis is ``axis + e``, ``e`` a sum of reduce axes and constants (a
    window: ``ow + kw``), whose reads stay inside the buffer's extent (a
    padded window's read can leave it: no vector). None when the buffer does
    not use the axis, an int when it uses it as one bare index (the aligned
    :func:`vector_dim`); otherwise why no vector serves it."""
    dim = vector_dim(buf, axis)
    if not isinstance(dim, str):
        return dim
    using = [d for d, e in enumerate(buf.indices) if axis in variables(e)]
    if len(using) != 1:
        return dim
    d = using[0]
    terms = _terms(buf.indices[d])
    bare = [t for sign, t in terms if sign == 1 and isinstance(t, Var) and t.index == axis]
    rest = [t for sign, t in terms if not (sign == 1 and isinstance(t, Var) and t.index == axis)]
    kinds = {a.kind for k, a in enumerate(workload.axes) if any(k in variables(t) for t in rest)}
    if len(bare) != 1 or any(axis in variables(t) for t in rest) or kinds - {"reduce"}:
        return dim
    ranges = [(0, a.extent - 1) for a in workload.axes]
    lo, hi = bounds(buf.indices[d], ranges)
    if lo < 0 or hi > buf.shape[d] - 1:
        return (
            f"buffer {buf.name!r} is read along the axis from {lo} to {hi}, outside its extent "
            f"{buf.shape[d]} (a padded window), so a vector could read outside it"
        )
    return d
