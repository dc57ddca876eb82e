"""Local-memory staging: which box of each input a work-group copies to ``__local``.

With ``local_stage=True`` a work-group computes a *block* of output points
(``StagingPlan.block`` along each spatial axis) and walks the reduction in
*stages*: per stage it copies, cooperatively and behind a barrier, the box of
every input that the block reads during that stage (its *footprint*) into a
``__local`` tile, then reduces over the tiles. This module decides the block,
the stages and the tiles from the workload alone, so that the space (which
offers tile layouts and checks the knobs against the block) and codegen (which
emits the copy) agree.

Two ways to a plan:

* **declared**: the workload's ``local_tiles`` name every input with its tile
  shape; the inputs are indexed by bare axis variables (matmul ``A[i, k]``),
  so a tile extent along a spatial axis is the block extent and along the
  one reduce axis the stage step (``{"A": (16, 16), "B": (16, 16)}``: 16 x
  16 outputs per work-group, 16 values of ``k`` per stage).
* **window** (derived when nothing is declared): a reduction whose inputs are
  read at affine indices with non-negative coefficients, some through a
  sliding window (an index using a spatial and a reduce variable, as conv2d
  ``X[n, c, oh * s + kh - p, ow * s + kw - p]``). The reduce axes of the
  windows (``kh``, ``kw``) are taken whole in every stage; at most one other
  reduce axis (``c``) is walked one value per stage. The innermost spatial
  axis and the innermost other spatial axis that a window uses are blocked
  (``oh`` x ``ow``: 4, 8 or 16 each, 64 to 256 outputs, least overshoot of
  the output extents first, then squarest); the other spatial
  axes take one value per work-group. The footprint of ``X`` then includes
  the halo of the kernel window and the stride: ``(b - 1) * s + k`` rows and
  columns; its tile's rows are rounded up to a multiple of 4 elements, so
  that row XOR swizzles apply. Blocks may overshoot the output extents: the
  extra work-items copy and wait like the others but store nothing.

A tile drops the input dimensions whose footprint is one element (the
conv2d ``W`` tile of one filter and one channel is ``(kh, kw)``).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from laytune.exceptions import LayoutRejectedError
from laytune.layout import BinOp, Const, Expr, Var
from laytune.space._workload import (
    WorkloadLike,
    local_buffer_name,
    local_tiles,
    vector_dim,
    window_vector_dim,
)

__all__ = [
    "StagedInput",
    "StagingPlan",
    "affine_terms",
    "local_vector_dims",
    "local_window_dims",
    "staging_plan",
]

_PLANE_CHOICES = (4, 8, 16)  # block extents when two spatial axes are blocked
_LINE_CHOICES = (64, 128, 256)  # block extent when only one is
_MIN_OUTPUTS = 64
_MAX_OUTPUTS = 256
_ROW_MULTIPLE = 4  # window tiles' rows are rounded up to this many elements


@dataclass(frozen=True)
class StagedInput:
    """One staged input: ``tile`` is the shape of its ``"<buffer>.local"``
    buffer, ``dims[t]`` the input dimension that tile dimension ``t`` spans.
    ``terms[d]`` is the affine index of input dimension ``d`` (coefficient per
    axis, constant), from which both the copy's global index and the tile
    index of a read follow."""

    buffer: str
    tile: tuple[int, ...]
    dims: tuple[int, ...]
    terms: tuple[tuple[tuple[tuple[int, int], ...], int], ...]


@dataclass(frozen=True)
class StagingPlan:
    """How ``local_stage=True`` runs a workload.

    ``block[k]`` for each axis ``k`` of ``workload.axes``: along a spatial
    axis, the output points a work-group computes; along a reduce axis, the
    values one stage covers (the whole extent, or the step of the stepped
    axis). ``stepped`` is the reduce axis whose values the stage loop walks
    (None: a single stage). ``counts[k]`` is the number of blocks along axis
    ``k`` (``ceil(extent / block)`` along the ``spatial`` axes, 1 along the
    reduce axes). ``declared``: the tiles come from ``local_tiles``.
    """

    block: tuple[int, ...]
    counts: tuple[int, ...]
    spatial: tuple[int, ...]
    stepped: int | None
    inputs: tuple[StagedInput, ...]
    declared: bool

    @property
    def outputs(self) -> int:
        """Output points per work-group: what its work-items' register blocks cover."""
        return math.prod(self.block[k] for k in self.spatial)

    @property
    def groups(self) -> int:
        """Work-groups of the NDRange."""
        return math.prod(self.counts)

    @property
    def tiles(self) -> dict[str, tuple[int, ...]]:
        """Tile shape per staged input."""
        return {s.buffer: s.tile for s in self.inputs}

    def stage_extent(self, axis: int) -> int:
        """Values of reduce ``axis`` inside one stage."""
        return self.block[axis]


def affine_terms(expr: Expr) -> tuple[dict[int, int], int] | None:
    """``expr`` as ``sum(coefficient * Var(k)) + constant``: ({k: coefficient},
    constant), or None when it is not affine (``//``, ``%``, bit operations
    other than a shift left, products of variables)."""
    if isinstance(expr, Const):
        return {}, expr.value
    if isinstance(expr, Var):
        return {expr.index: 1}, 0
    assert isinstance(expr, BinOp)
    if expr.op in ("+", "-"):
        lhs, rhs = affine_terms(expr.lhs), affine_terms(expr.rhs)
        if lhs is None or rhs is None:
            return None
        sign = 1 if expr.op == "+" else -1
        coeffs = dict(lhs[0])
        for k, c in rhs[0].items():
            coeffs[k] = coeffs.get(k, 0) + sign * c
        return {k: c for k, c in coeffs.items() if c}, lhs[1] + sign * rhs[1]
    if expr.op == "*" or expr.op == "<<":
        lhs, rhs = affine_terms(expr.lhs), affine_terms(expr.rhs)
        if lhs is None or rhs is None:
            return None
        if expr.op == "<<":
            if rhs[0]:
                return None
            rhs = ({}, 1 << rhs[1])
        if lhs[0] and rhs[0]:
            return None
        (coeffs, const), factor = (rhs, lhs[1]) if not lhs[0] else (lhs, rhs[1])
        return {k: c * factor for k, c in coeffs.items() if c * factor}, const * factor
    return None


def staging_plan(workload: WorkloadLike) -> StagingPlan:
    """The staging plan of ``workload`` (see the module docstring).

    Raises :class:`~laytune.exceptions.LayoutRejectedError` saying why the
    workload cannot be staged (no reduction, declared tiles that disagree,
    an index that is not affine, no sliding window and nothing declared).
    """
    if not any(a.kind == "reduce" for a in workload.axes):
        raise LayoutRejectedError(
            f"workload {workload.name!r} has no reduce axis: nothing is read twice, so "
            f"nothing is staged"
        )
    terms = {}
    for buf in workload.buffers:
        if buf.role != "input":
            continue
        if not buf.indices:
            raise LayoutRejectedError(f"input {buf.name!r} has no index expressions to stage by")
        parsed = [affine_terms(e) for e in buf.indices]
        if any(p is None or any(c < 0 for c in p[0].values()) for p in parsed):
            raise LayoutRejectedError(
                f"input {buf.name!r} is read at a non-affine index (or with a negative "
                f"coefficient): its footprint is not a box"
            )
        terms[buf.name] = parsed
    declared = local_tiles(workload)
    if declared:
        return _declared_plan(workload, declared, terms)  # type: ignore[arg-type]
    return _window_plan(workload, terms)  # type: ignore[arg-type]


def _frozen_terms(parsed: list[tuple[dict[int, int], int]]) -> tuple:
    return tuple((tuple(sorted(c.items())), const) for c, const in parsed)


def _declared_plan(
    workload: WorkloadLike,
    declared: dict[str, tuple[int, ...]],
    terms: dict[str, list[tuple[dict[int, int], int]]],
) -> StagingPlan:
    axes = workload.axes
    reduce_axes = [k for k, a in enumerate(axes) if a.kind == "reduce"]
    if len(reduce_axes) != 1:
        raise LayoutRejectedError(
            f"declared local tiles need exactly one reduce axis (the stage loop walks it); "
            f"workload {workload.name!r} has {len(reduce_axes)}"
        )
    (red,) = reduce_axes
    missing = sorted(set(terms) - set(declared))
    if missing:
        raise LayoutRejectedError(f"local_tiles stage some inputs but not {missing}")
    block = [1] * len(axes)
    set_by: dict[int, str] = {}
    for name, tile in sorted(declared.items()):
        if name not in terms:
            raise LayoutRejectedError(f"local tile for {name!r}, which is not an input")
        index = [(c, const) for c, const in terms[name]]
        bare = [next(iter(c)) for c, const in index if len(c) == 1 and const == 0]
        if len(bare) != len(index) or any(c[k] != 1 for (c, _), k in zip(index, bare, strict=True)):
            raise LayoutRejectedError(
                f"declared local tile of {name!r} needs bare axis indices (each dimension "
                f"indexed by one axis variable)"
            )
        if len(tile) != len(index):
            raise LayoutRejectedError(
                f"local tile {tile} of {name!r} has {len(tile)} extents for a {len(index)}-D input"
            )
        for k, t in zip(bare, tile, strict=True):
            if k in set_by and block[k] != t:
                raise LayoutRejectedError(
                    f"local tiles of {set_by[k]!r} and {name!r} disagree on axis "
                    f"{axes[k].name!r}: {block[k]} and {t}"
                )
            if t <= 0 or t > axes[k].extent:
                raise LayoutRejectedError(
                    f"local tile extent {t} of {name!r} on axis {axes[k].name!r} is not "
                    f"in 1..{axes[k].extent}"
                )
            block[k], set_by[k] = t, name
    if red not in set_by:
        raise LayoutRejectedError("no declared local tile is indexed by the reduce axis")
    if axes[red].extent % block[red]:
        raise LayoutRejectedError(
            f"local tile extent {block[red]} does not divide the reduce axis "
            f"{axes[red].name!r} ({axes[red].extent})"
        )
    inputs = tuple(
        StagedInput(
            name,
            tuple(declared[name]),
            tuple(range(len(declared[name]))),
            _frozen_terms(terms[name]),
        )
        for name in sorted(declared)
    )
    return _finish(workload, block, red, inputs, declared=True)


def _window_plan(
    workload: WorkloadLike, terms: dict[str, list[tuple[dict[int, int], int]]]
) -> StagingPlan:
    axes = workload.axes
    spatial = [k for k, a in enumerate(axes) if a.kind == "spatial"]
    reduce_axes = [k for k, a in enumerate(axes) if a.kind == "reduce"]
    window_spatial: set[int] = set()
    window_reduce: set[int] = set()
    for parsed in terms.values():
        for coeffs, _ in parsed:
            s = {k for k in coeffs if k in spatial}
            r = {k for k in coeffs if k in reduce_axes}
            if s and r:
                window_spatial |= s
                window_reduce |= r
    if not window_reduce:
        raise LayoutRejectedError(
            f"workload {workload.name!r} declares no local_tiles and reads no input through "
            f"a sliding window (an index using a spatial and a reduce axis)"
        )
    walked = [k for k in reduce_axes if k not in window_reduce]
    if len(walked) > 1:
        names = [axes[k].name for k in walked]
        raise LayoutRejectedError(
            f"window staging walks one reduce axis outside the windows, {names} are several"
        )
    stepped = walked[0] if walked else None
    block = [a.extent if a.kind == "reduce" else 1 for a in axes]
    if stepped is not None:
        block[stepped] = 1
    inner = spatial[-1]
    blocked = [inner]
    others = [k for k in spatial[:-1] if k in window_spatial]
    if others:
        blocked.insert(0, others[-1])
    for k, b in zip(blocked, _block_extents([axes[k].extent for k in blocked]), strict=True):
        block[k] = b
    inputs = []
    for name in sorted(terms):
        parsed = terms[name]
        footprint = [1 + sum(c * (block[k] - 1) for k, c in coeffs.items()) for coeffs, _ in parsed]
        dims = [d for d, f in enumerate(footprint) if f > 1] or [len(footprint) - 1]
        tile = [footprint[d] for d in dims]
        if any(k in blocked for k in parsed[dims[-1]][0]):
            tile[-1] = -(-tile[-1] // _ROW_MULTIPLE) * _ROW_MULTIPLE
        inputs.append(StagedInput(name, tuple(tile), tuple(dims), _frozen_terms(parsed)))
    return _finish(workload, block, stepped, tuple(inputs), declared=False)


def _finish(
    workload: WorkloadLike,
    block: list[int],
    stepped: int | None,
    inputs: tuple[StagedInput, ...],
    declared: bool,
) -> StagingPlan:
    spatial = tuple(k for k, a in enumerate(workload.axes) if a.kind == "spatial")
    counts = tuple(
        -(-a.extent // b) if k in spatial else 1
        for k, (a, b) in enumerate(zip(workload.axes, block, strict=True))
    )
    return StagingPlan(tuple(block), counts, spatial, stepped, inputs, declared)


def _block_extents(extents: list[int]) -> tuple[int, ...]:
    """Block extents for the blocked spatial axes (one or two): powers of two
    (work-group sizes are), at least ``_MIN_OUTPUTS`` and at most
    ``_MAX_OUTPUTS`` outputs; least overshoot of the extents first, then the
    squarest (least halo per output), then the most outputs, then the widest."""
    if len(extents) == 1:
        choices = [(b,) for b in _LINE_CHOICES]
    else:
        choices = [
            c
            for c in itertools.product(_PLANE_CHOICES, repeat=len(extents))
            if _MIN_OUTPUTS <= math.prod(c) <= _MAX_OUTPUTS
        ]

    def key(c: tuple[int, ...]) -> tuple[int, int, int, int]:
        padded = math.prod(-(-e // b) * b for e, b in zip(extents, c, strict=True))
        return padded, max(c) - min(c), -math.prod(c), -c[-1]

    return min(choices, key=key)


def local_vector_dims(workload: WorkloadLike, plan: StagingPlan) -> dict[str, int]:
    """Per staged input whose tile a vector of the innermost spatial axis
    reads (the input indexed by that axis's bare variable): the tile
    dimension the vector runs along, keyed by the local buffer name."""
    inner = max(k for k, a in enumerate(workload.axes) if a.kind == "spatial")
    out = {}
    for buf in workload.buffers:
        dim = vector_dim(buf, inner)
        staged = next((s for s in plan.inputs if s.buffer == buf.name), None)
        if staged is not None and isinstance(dim, int) and dim in staged.dims:
            out[local_buffer_name(buf.name)] = staged.dims.index(dim)
    return out


def local_window_dims(workload: WorkloadLike, plan: StagingPlan) -> dict[str, int]:
    """Per staged input whose tile a vector of the innermost spatial axis
    reads as a window (``ow + kw``, :func:`window_vector_dim`): the tile
    dimension its unaligned runs lie along, keyed by the local buffer name."""
    inner = max(k for k, a in enumerate(workload.axes) if a.kind == "spatial")
    out = {}
    for buf in workload.buffers:
        if not isinstance(vector_dim(buf, inner), str):
            continue
        dim = window_vector_dim(workload, buf, inner)
        staged = next((s for s in plan.inputs if s.buffer == buf.name), None)
        if staged is not None and isinstance(dim, int) and dim in staged.dims:
            out[local_buffer_name(buf.name)] = staged.dims.index(dim)
    return out
