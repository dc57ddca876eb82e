"""Features of a candidate, computed without running it, for the cost model.

:func:`candidate_features` plans the candidate's loop nest
(:func:`laytune.codegen.plan_nest`) and evaluates each buffer's layout at a
few fixed logical points of the iteration space, so that what a kernel's
memory accesses look like is read off the layouts themselves:

* per buffer (named by role and position, ``in0``, ``in1``, ``out0``, the
  inputs by their part in the statement's structure where it has one, so
  that records of other operators line up): bytes of the physical buffer,
  padding overhead, vector width of its accesses, whether it is an image,
  and the physical stride of one step along the innermost reduce loop, along
  the vector axis and between neighbouring work-items;
* per local tile: the bank-conflict degree of a column and a row access;
* per candidate: register-tile size, vector width, work-items and
  work-group size against the device's limits (compute units, work-group
  size, local memory), reduce loops, trips and unroll, loads per
  multiply-add, staging, sub-groups, and every numeric knob by name;
* the statement's form (:func:`laytune.search.classify`: a contraction, a
  window or neither) and the register block along each axis by its role in
  that form, so that records of one contraction or convolution inform the
  next.

The result is a plain ``{name: float}``; names a candidate lacks (a buffer
the operator does not have) are absent, and the model reads them as
missing. The same candidate always gives the same features.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from laytune.codegen import Nest, plan_nest
from laytune.device_info import DeviceInfo
from laytune.layout import Layout, evaluate
from laytune.search._structure import Contraction, Structure, Window, classify
from laytune.space import Candidate, complete_knobs, dtype_bytes, vector_dim

__all__ = ["candidate_features"]

_POINTS = 16  # logical points each stride is measured at
_BANKS = 32
_SEED = 20261124  # fixed: features must not depend on a caller's seed


def _log2(value: float) -> float:
    return math.log2(value) if value > 0 else -1.0


def _slots(workload: Any, form: Structure) -> dict[str, str]:
    """Buffer name -> role slot (``in0``, ``in1``, ..., ``out0``): by the
    statement's structure where it has one (a contraction's left and right
    operands, a window's activations and filters), so that records of one
    contraction line up with the next whatever its buffers are called; by
    name order otherwise."""
    slots: dict[str, str] = {}
    if isinstance(form, Contraction):
        slots = {form.left: "in0", form.right: "in1"}
    elif isinstance(form, Window):
        slots = {form.activations: "in0", form.filters_buffer: "in1"}
    counters: dict[str, int] = {"in": len(slots)}
    for buf in sorted(workload.buffers, key=lambda b: (b.role != "input", b.name)):
        if buf.name in slots:
            continue
        prefix = "in" if buf.role == "input" else "out"
        slots[buf.name] = f"{prefix}{counters.get(prefix, 0)}"
        counters[prefix] = counters.get(prefix, 0) + 1
    return slots


def _structure_features(
    workload: Any, form: Structure, knobs: Mapping[str, Any]
) -> dict[str, float]:
    """The form (0: neither, 1: a contraction, 2: a window) and the register
    block along each axis by its role in the form, not its name: a
    contraction's rows and columns, a window's filters (or depthwise
    channels) and output columns."""
    if isinstance(form, Contraction):
        roles = {"rows": form.rows, "columns": form.columns}
        kind = 1.0
    elif isinstance(form, Window):
        vector = form.filters if form.filters is not None else form.depth
        roles = {"filters": vector, "columns": form.columns}
        kind = 2.0
    else:
        return {"form": 0.0}
    features = {"form": kind}
    for role, axis in roles.items():
        if axis is not None:
            block = knobs.get(f"block.{workload.axes[axis].name}", 1)
            features[f"block.{role}"] = _log2(float(block))
    return features


@functools.lru_cache(maxsize=64)
def _points(extents: tuple[int, ...]) -> np.ndarray:
    """``_POINTS`` fixed points of the iteration space, one row each, every
    coordinate at most extent - 2 (so that a step of one stays inside)."""
    rng = np.random.default_rng(_SEED)
    highs = np.maximum(np.asarray(extents, dtype=np.int64) - 1, 1)
    points = rng.integers(0, highs, size=(_POINTS, len(extents)))
    points.setflags(write=False)  # cached and shared: callers copy before they move it
    return points


def _offsets(layout: Layout, buf: Any, points: np.ndarray) -> np.ndarray:
    """Physical row-major offsets of ``buf``'s elements at ``points``."""
    args = [points[:, k] for k in range(points.shape[1])]
    logical = [np.broadcast_to(evaluate(e, args), points.shape[:1]) for e in buf.indices]
    clipped = [np.clip(i, 0, n - 1) for i, n in zip(logical, buf.shape, strict=True)]
    physical = layout.index_map.map_indices(tuple(clipped))
    return np.ravel_multi_index(tuple(physical), layout.physical_shape).astype(np.int64)


@functools.lru_cache(maxsize=8192)
def _stride(layout: Layout, buf: Any, extents: tuple[int, ...], axis: int, step: int) -> float:
    """Median |offset change| of ``buf`` when ``axis`` advances by ``step``, at
    the fixed points of an iteration space of ``extents``; memoised, as the
    candidates of a space share their layouts and differ in knobs."""
    points = _points(extents)
    moved = points.copy()
    moved[:, axis] += step
    delta = np.abs(_offsets(layout, buf, moved) - _offsets(layout, buf, points))
    return float(np.median(delta))


def _bank_degree(layout: Layout) -> float:
    """Worst bank multiplicity of 16 consecutive elements along each of the
    tile's last two logical axes (1: conflict-free)."""
    shape = layout.shape
    worst = 1
    for axis in range(max(0, len(shape) - 2), len(shape)):
        count = min(16, shape[axis])
        index = [np.zeros(count, dtype=np.int64) for _ in shape]
        index[axis] = np.arange(count, dtype=np.int64)
        physical = layout.index_map.map_indices(tuple(index))
        flat = np.ravel_multi_index(tuple(physical), layout.physical_shape)
        worst = max(worst, int(np.bincount(flat % _BANKS).max()))
    return float(worst)


def _buffer_features(
    nest: Nest, buf: Any, layout: Layout, extents: tuple[int, ...], slot: str
) -> dict[str, float]:
    tile = nest.tile
    width = 1
    if tile.vector_axis is not None and isinstance(vector_dim(buf, tile.vector_axis), int):
        width = tile.vector
    out = {
        "bytes": _log2(layout.physical_size * dtype_bytes(buf.dtype)),
        "padding": layout.padding_fraction,
        "vector": float(width),
        "image": float(nest.memory.get(buf.name) == "image2d"),
    }
    if nest.loops:
        stride = _stride(layout, buf, extents, nest.loops[-1].axis, 1)
        out["reduce_stride"] = _log2(stride)
        out["reduce_contiguous"] = float(stride == 1)
    if tile.vector_axis is not None:
        out["vector_stride"] = _log2(_stride(layout, buf, extents, tile.vector_axis, 1))
    dim = next((d for d in nest.grid if d.axes), None)
    if dim is not None:  # work-items next to each other along the NDRange's first dimension
        axis = dim.axes[-1]
        step = max(1, tile.blocks[axis])
        out["neighbour_stride"] = _log2(_stride(layout, buf, extents, axis, step))
    return {f"{slot}.{name}": value for name, value in out.items()}


def _loads_per_fma(nest: Nest, strides: Mapping[str, Sequence[float]]) -> float:
    """Distinct input elements a work-item loads per reduce step, over its
    register block's outputs (a 4x4 block of a matmul: 8 / 16)."""
    offsets = nest.tile.offsets()
    outputs = max(1, len(offsets))
    loads = 0
    for moving in strides.values():
        used = [k for k, s in enumerate(moving) if s != 0]
        loads += len({tuple(o[k] for k in used) for o in offsets})
    return loads / outputs


def candidate_features(workload: Any, device: DeviceInfo, candidate: Candidate) -> dict[str, float]:
    """The features of ``candidate`` of ``workload`` on ``device`` (module
    docstring); deterministic. A knob the candidate lacks (a record written
    before the knob existed, a user's own candidate) is read at its default,
    as :func:`laytune.codegen.lower` reads it, so that a candidate has the
    features of the kernel it lowers to. Raises what :func:`plan_nest`
    raises for a candidate that does not lower."""
    layouts = candidate.layout_map
    knobs = complete_knobs(workload, candidate.knob_map)
    nest = plan_nest(workload, knobs, layouts, dict(candidate.pad_values))
    extents = tuple(a.extent for a in workload.axes)
    form = classify(workload, windows_of_one=True)
    slots = _slots(workload, form)
    features: dict[str, float] = {}
    moving: dict[str, list[float]] = {}
    for buf in workload.buffers:
        layout = layouts[buf.name]
        features.update(_buffer_features(nest, buf, layout, extents, slots[buf.name]))
        if buf.role == "input":
            moving[buf.name] = [
                _stride(layout, buf, extents, k, 1) if extents[k] > 1 else 0.0
                for k in range(len(extents))
            ]
    locals_ = [n for n in layouts if n not in slots]
    for position, name in enumerate(sorted(locals_)):
        features[f"local{position}.bank_degree"] = _bank_degree(layouts[name])
    tile = nest.tile
    items = math.prod(nest.global_size)
    group = math.prod(nest.local_size) if nest.local_size else 0
    block = math.prod(tile.blocks)
    features.update(
        {
            "tile": _log2(block),
            "tile.vector": float(tile.vector),
            "items": _log2(items),
            "items_per_unit": _log2(items / max(1, device.compute_units)),
            "group": _log2(group) if group else 0.0,
            "group_share": group / max(1, device.max_work_group_size),
            "groups_per_unit": _log2(items / max(1, group or 1) / max(1, device.compute_units)),
            "reduce_loops": float(len(nest.loops)),
            "reduce_trips": _log2(math.prod(loop.trips for loop in nest.loops) or 1),
            "unroll": _log2(nest.loops[-1].unroll) if nest.loops else 0.0,
            "loads_per_fma": _loads_per_fma(nest, moving),
            "staged": float(nest.staging is not None),
            "subgroup": float(nest.subgroup),
            "block_reads": float(len(nest.block_reads)),
            "work": _log2(workload.flops + workload.bytes),
        }
    )
    features.update(_structure_features(workload, form, knobs))
    for name, value in sorted(knobs.items()):
        if isinstance(value, bool | int | float):
            features[f"knob.{name}"] = float(value)
    return features
