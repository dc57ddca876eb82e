"""The loop nest a compute kernel runs: a small description, planned from a
(workload, candidate) by pure steps and walked by the emitter.

Planning steps, each a function of the workload, the candidate and the
results of the steps before it (no state is shared):

1. :func:`memory_of`: where each buffer lives (``global`` or ``image2d``).
2. :func:`plan_grid`: the NDRange (:class:`GridDim` per dimension, from the
   ``order``, ``block.*``, ``group.*`` and ``local_stage`` knobs).
3. :func:`plan_tile`: the register block (:class:`Tile`, ``block.*``,
   ``vector_axis``, ``vector``, and the inputs ``vector_transpose`` reads
   across the vector).
4. :func:`plan_loops`: the reduce loops (:class:`ReduceLoop`, from
   ``reduce_order``, ``split``, ``unroll``, ``pad_mode`` and the layouts'
   padding, see :mod:`laytune.codegen._analysis`).
5. :func:`plan_block_reads`: the inputs an unstaged kernel reads with
   sub-group block reads (``subgroup``).
6. :func:`plan_prefetch`: the inputs whose next block each work-item
   prefetches a share of, and how often (``prefetch``).

:func:`plan_nest` runs them into a :class:`Nest`; :mod:`._kernel` emits it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from laytune.codegen._analysis import neutral_at_padding, padded_loop
from laytune.exceptions import LayoutRejectedError
from laytune.layout import Layout
from laytune.ops import Workload
from laytune.space import (
    ORDER_LOGICAL,
    StagingPlan,
    axis_by_name,
    block_knob,
    dtype_bytes,
    grid_dims,
    group_knob,
    parse_reduce_order,
    prefetch_inputs,
    serves_vector,
    shared_dims,
    spatial_axes,
    spatial_indexed,
    subgroup_inputs,
    usable_staging,
    vector_dim,
    walk_dim,
    walk_dims,
    window_vector_dim,
)

__all__ = ["GridDim", "Nest", "Prefetch", "ReduceLoop", "Tile", "memory_of", "plan_nest"]


@dataclass(frozen=True)
class GridDim:
    """One NDRange dimension: the spatial ``axes`` it spans (outer first;
    empty for a walk over a buffer's physical positions), the work-items
    along each (``items``), and the work-group extent (0: the driver's).

    ``count`` work-items compute; the NDRange (``global_size``) rounds them
    up to whole work-groups, and the items past ``count`` return at once
    (:mod:`._grid`), so a work-group need not divide the blocks: 125 blocks
    of rows in groups of 16 launch 128 items."""

    axes: tuple[int, ...]
    items: tuple[int, ...]
    local: int

    @property
    def count(self) -> int:
        return math.prod(self.items)

    @property
    def global_size(self) -> int:
        count = self.count
        return -(-count // self.local) * self.local if self.local else count


@dataclass(frozen=True)
class Tile:
    """The register block of a work-item: ``blocks[k]`` outputs along axis
    ``k`` (1 along reduce axes), vectors of ``vector`` along
    ``vector_axis`` (None: scalar). The inputs ``transposed`` are read in
    vectors along ``transpose_axis`` and transposed in registers. With
    ``reduce_vector`` > 1 the accumulators are vectors of that width along
    the innermost reduce loop's axis ``reduce_axis``, ``parts`` of them per
    point (``unroll``), combined across their lanes at the store. A reduce
    ``transpose_axis`` reads the transposed inputs into a private panel
    (:attr:`panel`)."""

    blocks: tuple[int, ...]
    vector_axis: int | None
    vector: int
    transpose_axis: int | None = None
    transposed: frozenset[str] = frozenset()
    reduce_axis: int | None = None
    reduce_vector: int = 1
    parts: int = 1
    walk: tuple[int, ...] = ()
    panel_axes: tuple[int, ...] = ()

    @property
    def panel(self) -> bool:
        """Whether the ``transposed`` inputs are read along a reduce axis into
        a private panel (``panel_axes``: the spatial axes whose block it
        holds) before the work-item walks every block of the ``walk`` axes."""
        return bool(self.panel_axes)

    @property
    def acc_width(self) -> int:
        """The width of each accumulator."""
        if self.vector_axis is not None:
            return self.vector
        return self.reduce_vector

    def offsets(self) -> list[tuple[int, ...]]:
        """Every point of the block as per-axis offsets, row-major; along the
        vector axis one point per vector (offsets 0, N, 2N, ...)."""
        ranges = [
            range(0, b, self.vector) if k == self.vector_axis else range(b)
            for k, b in enumerate(self.blocks)
        ]
        out: list[tuple[int, ...]] = [()]
        for r in ranges:
            out = [(*prefix, x) for prefix in out for x in r]
        return out

    def width(self, axis_uses: int | str | None) -> int:
        """The vector width of a buffer access, given how the buffer uses the
        vector axis (:func:`laytune.space.vector_dim`)."""
        return self.vector if isinstance(axis_uses, int) and self.vector_axis is not None else 1


@dataclass(frozen=True)
class ReduceLoop:
    """One reduce loop: walks ``trips`` values of a variable named ``name``,
    which contributes ``scale`` times itself to ``axis`` (a split axis has
    an outer loop of scale ``split`` and an inner one of scale 1). ``guard``
    is the axis's logical extent when the loop runs over a padded extent and
    tests it (0: no test); ``overcompute`` when it runs over padding that
    holds the neutral element; ``unroll`` copies of the body per step."""

    axis: int
    name: str
    trips: int
    scale: int
    unroll: int = 1
    guard: int = 0
    overcompute: bool = False


@dataclass(frozen=True)
class Prefetch:
    """An input whose block the work-group's items share and whose next
    block, the one the next work-group reads (along the first NDRange
    dimension of more than one group), they prefetch as they reduce (the
    ``prefetch`` knob).

    The next block starts ``ahead`` elements further along axis ``along``
    (the work-group's extent times the register block ``block``). A
    work-item's part of it is its ``block`` elements along ``along`` over
    every value of the ``reduce`` axes the input indexes (in its index
    order), taken in that order with ``along`` innermost: ``touches``
    prefetches of ``step`` elements apart (a cache line where it divides
    the block), dealt out ``share`` to each of the items along the
    NDRange dimensions ``shared`` (those whose items read the same block),
    ``per`` every ``every`` reduce steps (``per`` > 1 only where a share
    holds more lines than the reduction has steps, ``every`` then 1)."""

    buffer: str
    along: int
    block: int
    ahead: int
    reduce: tuple[int, ...]
    shared: tuple[int, ...]
    step: int
    touches: int
    share: int
    every: int
    per: int = 1


@dataclass(frozen=True)
class Nest:
    """Everything the emitter needs, and nothing it has to work out."""

    workload: Workload
    knobs: Mapping[str, Any]
    layouts: Mapping[str, Layout]
    memory: Mapping[str, str]
    pad_values: Mapping[str, object]
    order: str
    grid: tuple[GridDim, ...]
    tile: Tile
    loops: tuple[ReduceLoop, ...]
    grown: Mapping[str, Mapping[int, int]]  # buffer -> {dim: extent it is read over}
    staging: StagingPlan | None
    copy: str = "elementwise"  # the staging copy's instruction (see ._copy)
    subgroup: int = 0  # required sub-group size (0: none)
    block_reads: tuple[str, ...] = ()  # inputs read with sub-group block reads
    prefetch: tuple[Prefetch, ...] = ()  # inputs whose next block is prefetched

    @property
    def local_size(self) -> tuple[int, ...] | None:
        if not all(d.local for d in self.grid):
            return None
        return tuple(d.local for d in self.grid)

    @property
    def global_size(self) -> tuple[int, ...]:
        return tuple(d.global_size for d in self.grid)


def memory_of(workload: Workload, layouts: Mapping[str, Layout]) -> dict[str, str]:
    """``image2d`` for a layout with one axis separator, else ``global``."""
    return {
        d.name: "image2d" if layouts[d.name].image_rank == 2 else "global" for d in workload.buffers
    }


def plan_tile(workload: Workload, knobs: Mapping[str, Any], layouts: Mapping[str, Layout]) -> Tile:
    blocks = tuple(
        int(knobs[block_knob(workload, k)]) if a.kind == "spatial" else 1
        for k, a in enumerate(workload.axes)
    )
    axis_name = knobs["vector_axis"]
    reduce_vector = int(knobs.get("reduce_vector", 1))
    if reduce_vector > 1:
        order = parse_reduce_order(workload, knobs["reduce_order"])
        parts = int(knobs["unroll"])
        return Tile(
            blocks, None, 1, reduce_axis=order[-1], reduce_vector=reduce_vector, parts=parts
        )
    if not axis_name:
        return Tile(blocks, None, 1)
    axis, width = axis_by_name(workload, axis_name), int(knobs["vector"])
    across = knobs.get("vector_transpose", "")
    if not across:
        return Tile(blocks, axis, width)
    transposed = frozenset(
        b.name
        for b in workload.buffers
        if b.role == "input" and not serves_vector(b, layouts[b.name], axis, width)
    )
    u = axis_by_name(workload, across)
    if workload.axes[u].kind != "reduce":
        return Tile(blocks, axis, width, u, transposed)
    held = spatial_indexed(workload, [b for b in workload.buffers if b.name in transposed])
    walk = tuple(k for k in spatial_axes(workload) if k not in held)
    return Tile(blocks, axis, width, u, transposed, walk=walk, panel_axes=tuple(sorted(held)))


def plan_grid(
    workload: Workload,
    knobs: Mapping[str, Any],
    layouts: Mapping[str, Layout],
    tile: Tile,
    staging: StagingPlan | None,
) -> tuple[GridDim, ...]:
    dims = grid_dims(workload)
    locals_ = [int(knobs[group_knob(workload, d)]) for d in range(len(dims))]
    order = knobs["order"]
    if order != ORDER_LOGICAL:
        size = layouts[order].physical_size
        return (GridDim((), (size,), locals_[0]),)
    out = []
    for d, axes in enumerate(dims):
        items = []
        for k in axes:
            extent, block = workload.axes[k].extent, tile.blocks[k]
            if staging is not None:
                planned = staging.block[k]
                items.append(staging.counts[k] * planned // block)
            elif k in tile.walk:
                items.append(1)  # the work-item walks every block of it
            else:
                items.append(-(-extent // block))
        out.append(GridDim(axes, tuple(items), locals_[d]))
    return tuple(out)


def plan_loops(
    workload: Workload,
    knobs: Mapping[str, Any],
    layouts: Mapping[str, Layout],
    pad_values: Mapping[str, object],
    staging: StagingPlan | None,
) -> tuple[tuple[ReduceLoop, ...], dict[str, dict[int, int]]]:
    """The reduce loops, outermost first, and the (buffer, dim) pairs read
    over a padded extent. A staged kernel's loops walk one stage (see
    :mod:`._stage`); the stage loop itself is the emitter's."""
    order = parse_reduce_order(workload, knobs["reduce_order"])
    split = int(knobs["split"])
    unroll = int(knobs["unroll"])
    overcompute = knobs["pad_mode"] == "overcompute"
    grown: dict[str, dict[int, int]] = {}
    reduce_vector = int(knobs.get("reduce_vector", 1))
    if reduce_vector > 1:  # unstaged, unsplit (the space's rule): vectors of the last loop
        *outer, last = order
        loops = [ReduceLoop(k, workload.axes[k].name, workload.axes[k].extent, 1) for k in outer]
        step = reduce_vector * unroll
        name = f"{workload.axes[last].name}_v"
        loops.append(ReduceLoop(last, name, workload.axes[last].extent // step, step))
        return tuple(loops), grown
    if staging is not None:
        loops = [
            ReduceLoop(k, workload.axes[k].name, staging.block[k], 1)
            for k in order
            if not (k == staging.stepped and staging.block[k] == 1)
        ]
        if loops and loops[-1].axis == order[-1]:
            last = loops[-1]
            loops[-1] = ReduceLoop(last.axis, last.name, last.trips, 1, unroll)
        return tuple(loops), grown
    loops = []
    for position, k in enumerate(order):
        name = workload.axes[k].name
        extent = workload.axes[k].extent
        if position == 0 and split > 1:
            loops.append(ReduceLoop(k, f"{name}_blk", extent // split, split))
            continue
        innermost = position == len(order) - 1 and split == 1
        loop = padded_loop(workload, layouts, k)
        if loop is None or (innermost and loop.extent % unroll) or (k == order[0] and split > 1):
            loops.append(ReduceLoop(k, name, extent, 1, unroll if innermost else 1))
            continue
        if overcompute:
            why = neutral_at_padding(workload, loop, pad_values)
            if why:
                raise LayoutRejectedError(f"candidate rejected: {why}")
        for buffer, dim in loop.dims:
            grown.setdefault(buffer, {})[dim] = loop.extent
        loops.append(
            ReduceLoop(
                k,
                name,
                loop.extent,
                1,
                unroll if innermost else 1,
                guard=0 if overcompute else extent,
                overcompute=overcompute,
            )
        )
    if split > 1:
        first = order[0]
        name = workload.axes[first].name
        loops.append(ReduceLoop(first, f"{name}_in", split, 1, unroll))
    return tuple(loops), grown


def plan_block_reads(workload: Workload, knobs: Mapping[str, Any]) -> tuple[str, ...]:
    """The inputs an unstaged kernel with ``subgroup > 0`` reads along the
    innermost spatial axis with one block read per sub-group."""
    if knobs["local_stage"] or not int(knobs["subgroup"]):
        return ()
    return tuple(sorted(subgroup_inputs(workload)))


def plan_prefetch(
    workload: Workload,
    knobs: Mapping[str, Any],
    grid: tuple[GridDim, ...],
    loops: tuple[ReduceLoop, ...],
    line_bytes: int,
    memory: Mapping[str, str],
) -> tuple[Prefetch, ...]:
    """The :class:`Prefetch` of every input the ``prefetch`` knob applies to
    (:func:`laytune.space.prefetch_inputs` that index the innermost axis of
    the dimension the next work-group lies along, :func:`laytune.space.walk_dim`,
    and whose block the work-group's items share), in global memory (an image
    is read through its sampler, not at an address), in lines of
    ``line_bytes``."""
    if not knobs.get("prefetch"):
        return ()
    walk = walk_dim([d.count for d in grid], [d.local for d in grid])
    if walk is None:
        return ()
    along = grid[walk].axes[-1]
    block = int(knobs[block_knob(workload, along)])
    ahead = grid[walk].local * block
    steps = math.prod(loop.trips for loop in loops)
    out = []
    for name in prefetch_inputs(workload):
        shared = shared_dims(workload, name)
        items = math.prod(grid[d].local for d in shared)
        buf = workload.buffer(name)
        if walk not in walk_dims(workload, name) or items <= 1 or memory[name] != "global":
            continue
        reduce = tuple(
            e.index  # type: ignore[attr-defined]
            for e in buf.indices
            if workload.axes[e.index].kind == "reduce"  # type: ignore[attr-defined]
        )
        step = math.gcd(block, max(1, line_bytes // dtype_bytes(buf.dtype)))
        touches = block * math.prod(workload.axes[k].extent for k in reduce) // step
        share = -(-touches // items)
        every = 1 << max(0, (steps // share).bit_length() - 1) if steps >= share else 1
        per = -(-share // steps)  # two items over 512 steps share 1536 lines: 2 a step
        out.append(
            Prefetch(name, along, block, ahead, reduce, shared, step, touches, share, every, per)
        )
    return tuple(out)


def plan_nest(
    workload: Workload,
    knobs: Mapping[str, Any],
    layouts: Mapping[str, Layout],
    pad_values: Mapping[str, object],
    line_bytes: int = 64,
) -> Nest:
    """The loop nest of a candidate that ``check_candidate`` accepted, on a
    device whose cache lines hold ``line_bytes``."""
    staging = usable_staging(workload) if knobs["local_stage"] else None
    memory = memory_of(workload, layouts)
    tile = plan_tile(workload, knobs, layouts)
    grid = plan_grid(workload, knobs, layouts, tile, staging)
    loops, grown = plan_loops(workload, knobs, layouts, pad_values, staging)
    return Nest(
        workload,
        dict(knobs),
        dict(layouts),
        memory,
        dict(pad_values),
        knobs["order"],
        grid,
        tile,
        loops,
        grown,
        staging,
        str(knobs["copy"]) if staging is not None else "elementwise",
        int(knobs["subgroup"]),
        plan_block_reads(workload, knobs),
        plan_prefetch(workload, knobs, grid, loops, line_bytes, memory),
    )


def access_width(nest: Nest, buffer: str) -> int:
    """The vector width of ``buffer``'s accesses in the register block."""
    tile = nest.tile
    if tile.reduce_axis is not None:
        uses = vector_dim(nest.workload.buffer(buffer), tile.reduce_axis)
        return tile.reduce_vector if isinstance(uses, int) else 1
    if tile.vector_axis is None:
        return 1
    buf = nest.workload.buffer(buffer)
    uses = vector_dim(buf, tile.vector_axis)
    if isinstance(uses, str):  # a window (ow + kw): an unaligned run, where the space allows
        uses = window_vector_dim(nest.workload, buf, tile.vector_axis)
    return tile.width(uses)
