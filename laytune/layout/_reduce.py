"""Facts of a layout decided on a reduced shape, in time independent of the extents.

A layout's flat offset ``F`` (row-major over its whole physical shape) has
along each logical axis ``k`` a quasi-period ``(P_k, D_k)``:
``F(x + P_k e_k) == F(x) + D_k`` (:mod:`laytune.layout._periods`). A query
that looks at groups of ``g_k`` consecutive indices (starting at multiples of
``g_k``) and whose verdict on a group does not change when a multiple of
``A`` is added to all its offsets (contiguity, a constant stride, alignment to
``A`` elements) is then decided exactly on the logical box
``min(S_k, Q_k)``, ``Q_k`` the :func:`~laytune.layout._periods.reduction` of
``(P_k, D_k)`` for ``g_k`` and ``A``: each group of the full shape is the
translate of one group of the box by multiples of ``Q_k``, its offsets moved
by a multiple of ``A``. :func:`reduced_box` gives the box and how many groups
of the full shape each group of the box stands for; :func:`offsets_on` the
flat offsets there (an array of the box's size, never the tensor's).

:func:`same_offsets` decides that two maps place every element of a shape at
the same flat offset, on the box where their difference's periods say so.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from functools import reduce
from operator import mul

import numpy as np

from laytune.layout import _expr as ex
from laytune.layout._expr import Const, Expr, Var
from laytune.layout._index_map import IndexMap, Shape
from laytune.layout._periods import Drift, drift, evaluate_box, reduction, vanishes

__all__ = [
    "flat_offset_expr",
    "offset_periods",
    "offsets_at",
    "offsets_on",
    "probe_digest",
    "reduced_box",
    "row_major_offsets",
    "same_offsets",
    "translations",
]

#: The logical box per axis whose offsets :func:`probe_digest` hashes.
PROBE_EXTENT = 16
#: Shapes of at most this many elements are looked at whole: their arrays
#: are small, and reducing them costs more bookkeeping than it saves.
WHOLE_BELOW = 1 << 12


def _prod(values: Sequence[int]) -> int:
    return reduce(mul, values, 1)


@functools.lru_cache(maxsize=4096)
def flat_offset_expr(index_map: IndexMap, shape: Shape) -> Expr:
    """The flat physical offset (row-major over the whole physical shape,
    separators ignored) of a logical index, as one expression."""
    pshape = index_map.physical_shape(shape)
    flat: Expr = Const(0)
    for k, out in enumerate(index_map.outputs):
        flat = flat + out * _prod(pshape[k + 1 :])
    return flat


@functools.lru_cache(maxsize=4096)
def offset_periods(index_map: IndexMap, shape: Shape) -> tuple[Drift | None, ...]:
    """The quasi-period of the flat offset along each logical axis (None: none proved)."""
    expr = flat_offset_expr(index_map, shape)
    ranges = [(0, s - 1) for s in shape]
    return tuple(drift(expr, k, ranges) for k in range(len(shape)))


def translations(
    index_map: IndexMap,
    shape: Sequence[int],
    groups: Sequence[int] | None = None,
    modulus: int = 1,
) -> tuple[int, ...] | None:
    """Per axis, the translation ``Q_k`` under which a group query that
    holds modulo ``modulus`` does not change (:func:`~laytune.layout._periods.reduction`;
    the extent where the offset has no period); None for a shape of at most
    :data:`WHOLE_BELOW` elements, looked at whole."""
    shape = tuple(int(s) for s in shape)
    if _prod(shape) <= WHOLE_BELOW:
        return None
    groups = tuple(groups) if groups is not None else (1,) * len(shape)
    periods = offset_periods(index_map, shape)
    return tuple(
        reduction(extent, period, group, modulus)
        for extent, period, group in zip(shape, periods, groups, strict=True)
    )


def reduced_box(
    index_map: IndexMap,
    shape: Sequence[int],
    groups: Sequence[int] | None = None,
    modulus: int = 1,
) -> tuple[Shape, list[np.ndarray] | None]:
    """The logical box a group query is decided on (see the module), and per
    axis, for each group start ``0, g, 2g ..`` of the box, how many group
    starts of the full axis it stands for (None: the box is the shape, each
    group stands for itself). ``groups`` default to 1; each extent of
    ``shape`` must be a multiple of its group."""
    shape = tuple(int(s) for s in shape)
    groups = tuple(groups) if groups is not None else (1,) * len(shape)
    moves = translations(index_map, shape, groups, modulus)
    if moves is None:
        return shape, None
    box, counts = [], []
    for extent, q, group in zip(shape, moves, groups, strict=True):
        kept = min(extent, q)
        starts = np.arange(0, kept, group, dtype=np.int64)
        box.append(kept)
        counts.append((extent - group - starts) // q + 1)
    return tuple(box), counts


#: The last boxes of offsets evaluated, by (map, shape): the checks of one
#: layout ask for boxes that nest (a vector of 4 needs a part of what one of
#: 16 does), so the largest serves the others. Bounded in count and size.
_BOXES: OrderedDict[tuple[IndexMap, Shape], np.ndarray] = OrderedDict()
_BOXES_LIMIT = 64
_BOX_ELEMENTS = 1 << 20
_BOXES_LOCK = threading.Lock()


def offsets_on(index_map: IndexMap, shape: Sequence[int], box: Sequence[int]) -> np.ndarray:
    """Flat offsets (on ``shape``'s physical shape) of the logical indices
    ``0 .. box_k - 1``: a read-only array of shape ``box``, in logical order."""
    shape, box = tuple(int(s) for s in shape), tuple(int(b) for b in box)
    key = (index_map, shape)
    with _BOXES_LOCK:
        held = _BOXES.get(key)
        if held is not None:
            _BOXES.move_to_end(key)
    if held is not None and all(b <= h for b, h in zip(box, held.shape, strict=True)):
        return held[tuple(slice(0, b) for b in box)]
    wanted = box
    if held is not None:
        box = tuple(max(b, h) for b, h in zip(box, held.shape, strict=True))
    values = evaluate_box(flat_offset_expr(index_map, shape), box)
    values.flags.writeable = False
    if values.size <= _BOX_ELEMENTS:
        with _BOXES_LOCK:
            _BOXES[key] = values
            _BOXES.move_to_end(key)
            while len(_BOXES) > _BOXES_LIMIT:
                _BOXES.popitem(last=False)
    return values[tuple(slice(0, b) for b in wanted)]


def offsets_at(
    index_map: IndexMap, shape: Sequence[int], index: Sequence[np.ndarray]
) -> np.ndarray:
    """Flat offsets (on ``shape``'s physical shape) of the logical indices
    given as one broadcastable integer array per axis (inside ``shape``)."""
    expr = flat_offset_expr(index_map, tuple(int(s) for s in shape))
    cols = [np.asarray(i, dtype=np.int64) for i in index]
    values = np.asarray(ex.evaluate(expr, cols), dtype=np.int64)
    return np.broadcast_to(values, np.broadcast_shapes(*(c.shape for c in cols))).copy()


def probe_digest(index_map: IndexMap, shape: Sequence[int]) -> str:
    """A digest of the flat offsets of the first :data:`PROBE_EXTENT` indices
    per axis: equal for maps that agree on ``shape`` (a bucket for
    :func:`same_offsets`, not a proof of equality)."""
    shape = tuple(int(s) for s in shape)
    box = tuple(min(s, PROBE_EXTENT) for s in shape)
    return hashlib.sha1(offsets_on(index_map, shape, box).tobytes()).hexdigest()


def same_offsets(a: IndexMap, b: IndexMap, shape: Sequence[int]) -> bool:
    """Whether ``a`` and ``b`` put every logical element of ``shape`` at the
    same flat offset (each on its own physical shape; compare the flat shapes
    apart)."""
    shape = tuple(int(s) for s in shape)
    return vanishes(flat_offset_expr(a, shape) - flat_offset_expr(b, shape), shape)


def same_offsets_reshaped(
    a: IndexMap, a_shape: Sequence[int], b: IndexMap, b_shape: Sequence[int]
) -> bool:
    """Whether a reshape from ``a_shape`` to ``b_shape`` (element ``n`` in
    row-major order of one is element ``n`` of the other) finds every
    element at the same flat offset under ``a`` and under ``b``. Decided on
    the flat offset of ``b`` rewritten in ``a``'s indices (``b``'s index of an
    element is its row-major rank divided and wrapped by ``b``'s extents),
    without a pass over the tensor."""
    a_shape, b_shape = tuple(int(s) for s in a_shape), tuple(int(s) for s in b_shape)
    if _prod(a_shape) != _prod(b_shape):
        return False
    rank = _row_major_rank(a_shape)
    at: list[Expr] = []
    stride = _prod(b_shape)
    for extent in b_shape:
        stride //= extent
        at.append((rank // stride) % extent)
    ranges = [(0, s - 1) for s in a_shape]
    moved = ex.simplify(ex.substitute(flat_offset_expr(b, b_shape), at), ranges)
    return vanishes(ex.simplify(flat_offset_expr(a, a_shape) - moved, ranges), a_shape)


def row_major_offsets(index_map: IndexMap, shape: Sequence[int]) -> bool:
    """Whether the flat offset of every logical index is its row-major rank."""
    shape = tuple(int(s) for s in shape)
    return vanishes(flat_offset_expr(index_map, shape) - _row_major_rank(shape), shape)


def _row_major_rank(shape: Shape) -> Expr:
    """The row-major rank of a logical index of ``shape``."""
    rank: Expr = Const(0)
    for k, extent in enumerate(shape):
        rank = rank * extent + Var(k)
    return rank
