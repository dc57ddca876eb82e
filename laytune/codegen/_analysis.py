"""What lowering must know before it emits: padded reduce loops and overcompute.

A reduce axis ``r`` can run over a buffer's padded extent when every load
that depends on ``r`` indexes one dimension by exactly ``r`` and each such
buffer's layout keeps the same physical shape and stays injective when that
dimension grows to ``E' > E``: the positions ``r = E .. E'-1`` are then
padding of every buffer read (the row summation of RFC 77 over ``[i, j // 4,
j % 4]`` runs ``j`` to 16 on a (16, 14) buffer). The guarded kernel tests
``r < E`` there; the overcompute kernel does not, which is right only when
the statement's value at those positions is the reduction's neutral element.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from laytune.layout import UNDEF, IndexMap, Layout, Var, simplify, substitute, variables
from laytune.ops import (
    FUNCTIONS,
    VALUE_OPS,
    BinaryOp,
    Function,
    Literal,
    Load,
    Negate,
    Value,
    Workload,
    reduction,
)

__all__ = ["PaddedLoop", "neutral_at_padding", "padded_loop"]

_UNKNOWN = object()  # a finite value not known at compile time


@dataclass(frozen=True)
class PaddedLoop:
    """Reduce axis ``axis`` may run to ``extent`` (> its logical extent);
    ``dims`` gives, per buffer read, the dimension indexed by the axis."""

    axis: int
    extent: int
    dims: tuple[tuple[str, int], ...]


#: Grown shapes of at most this many elements are checked for injectivity
#: at every index when the layout's inverse does not prove it.
_WHOLE_CHECK = 1 << 16


@functools.lru_cache(maxsize=4096)  # a space's candidates share their layouts
def _max_extent(layout: Layout, dim: int, cap: int) -> int:
    """Largest extent of ``dim`` up to ``cap`` on which ``layout``'s map keeps
    its physical shape and stays injective (the logical extent when none).

    A family's layout carries its inverse (physical -> logical): where the
    round trip ``inverse(map(x)) == x`` holds on the grown shape, decided
    on its periods (:meth:`IndexMap.equivalent`), the map is injective there
    without a look at its elements. Otherwise only a small grown shape is
    looked at whole; a large one is taken not to fit (no padded loop, never
    a wrong one)."""
    m = layout.index_map
    pshape = layout.physical_shape
    round_trip = None
    if layout.inverse_map is not None and layout.inverse_map.ndim_in == m.ndim_out:
        back = tuple(substitute(out, m.outputs) for out in layout.inverse_map.outputs)
        round_trip = IndexMap(m.params, back)
    unchanged = IndexMap.identity(len(layout.shape))

    def fits(extent: int) -> bool:
        shape = list(layout.shape)
        shape[dim] = extent
        try:
            if m.physical_shape(shape) != pshape:
                return False
            if round_trip is not None and round_trip.equivalent(unchanged, shape):
                return True
            return math.prod(shape) <= _WHOLE_CHECK and m.is_injective(shape)
        except Exception:  # a negative index: the map does not extend
            return False

    lo, hi = layout.shape[dim], cap
    while lo < hi:  # the valid extents are a prefix (a subset of a valid domain is valid)
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def padded_loop(workload: Workload, layouts: Mapping[str, Layout], axis: int) -> PaddedLoop | None:
    extent = workload.axes[axis].extent
    dims: list[tuple[str, int]] = []
    best: int | None = None
    for decl in workload.inputs:
        # simplified with the axis ranges: ow * 14 + kw is kw when ow only takes 0
        indices = [simplify(e, workload.ranges) for e in decl.indices]
        using = [d for d, e in enumerate(indices) if axis in variables(e)]
        if not using:
            continue
        bare = [d for d in using if indices[d] == Var(axis)]
        if len(using) != 1 or len(bare) != 1:
            return None
        layout = layouts[decl.name]
        if layout.image_rank != 1:
            return None
        dim = bare[0]
        size = math.prod(layout.shape) // layout.shape[dim]
        cap = max(extent, layout.physical_size // max(size, 1))
        grown = _max_extent(layout, dim, min(cap, 2 * extent + 64))
        best = grown if best is None else min(best, grown)
        dims.append((decl.name, dim))
    if best is None or best <= extent:
        return None
    return PaddedLoop(axis, best, tuple(dims))


#: The infinity that an element-wise max or min returns whatever its other operand.
_BOUNDS = {"max": math.inf, "min": -math.inf}


def neutral_at_padding(
    workload: Workload, loop: PaddedLoop, pad_values: Mapping[str, object]
) -> str | None:
    """None when the statement's value at the padded positions of ``loop``
    is the reduction's neutral element (so overcompute is exact); else why not."""
    padded = {name for name, _ in loop.dims}
    combine = reduction(workload.reduction)
    assert combine is not None, "padded loops are reduce loops"
    neutral = combine.neutral

    def value(v: Value) -> object:
        if isinstance(v, Literal):
            return v.value
        if isinstance(v, Load):
            if v.buffer not in padded:
                return _UNKNOWN
            pad = pad_values.get(v.buffer)
            if pad is None or pad is UNDEF:
                return None  # not a known value: overcompute cannot be proven
            return float(pad)  # type: ignore[arg-type]
        if isinstance(v, Negate):
            inner = value(v.operand)
            return -inner if isinstance(inner, float) else inner
        if isinstance(v, Function):
            inner = value(v.operand)
            if not isinstance(inner, float):
                return inner
            with np.errstate(all="ignore"):
                return float(FUNCTIONS[v.name].compute(inner))
        a, b = value(v.lhs), value(v.rhs)
        if a is None or b is None:
            return None
        if isinstance(v, BinaryOp) and v.op == "*" and (a == 0.0 or b == 0.0):
            other = b if a == 0.0 else a
            return (
                0.0
                if other is _UNKNOWN or (isinstance(other, float) and math.isfinite(other))
                else None
            )
        if isinstance(a, float) and isinstance(b, float):
            return _apply(v.op, a, b)
        if v.op in _BOUNDS:  # max(x, inf) is inf and max(x, -inf) is x; min the mirror
            absorbing = _BOUNDS[v.op]
            if absorbing in (a, b):
                return absorbing
            if -absorbing in (a, b):
                return b if a == -absorbing else a
        return _UNKNOWN

    result = value(workload.statement.value)
    if isinstance(result, float) and (result == neutral):
        return None
    name = workload.axes[loop.axis].name
    shown = "unknown" if result is None or result is _UNKNOWN else result
    pads = ", ".join(f"{n}: {pad_values.get(n)!r}" for n in sorted(padded))
    return (
        f"overcompute over the padded extent {loop.extent} of axis {name!r} reads padding "
        f"({pads}) where the statement's value is {shown}, not the neutral {neutral} of "
        f"{workload.reduction}"
    )


def _apply(op: str, a: float, b: float) -> float:
    if op == "/" and not b:
        return math.nan
    return float(VALUE_OPS[op].compute(a, b))
