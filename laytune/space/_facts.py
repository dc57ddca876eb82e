"""What the knob rules need to know of a candidate's global layouts.

The rules between knobs (:mod:`laytune.space._rules`) never look at a layout
itself, only at a few :class:`LayoutFacts`: which vectors every buffer can
serve, whether any buffer is padded, for each buffer the ``order`` knob
may follow, whether its layout keeps the logical order and its physical
size, which staging copies each staged input's layout allows
(:mod:`laytune.space._copies`) and which sub-group sizes every input read
along the sub-group's axis serves with block reads. The space counts and samples over the distinct facts of its layout
combinations (a convolution over buffers, never their product);
``check_candidate`` derives the facts of one candidate's layouts with the
same functions, so the two cannot disagree.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from laytune.device_info import DeviceInfo
from laytune.layout import Layout, Var, bounds, row_major_offsets
from laytune.space._constraints import SubgroupBlockAccess, UnalignedVectorAccess, VectorAccess
from laytune.space._copies import (
    SUBGROUP_SIZES,
    TileCopyFacts,
    global_copy_facts,
    subgroup_sizes,
)
from laytune.space._knobs import reduce_axes, spatial_axes
from laytune.space._staging import StagingPlan
from laytune.space._workload import (
    VECTOR_WIDTHS,
    BufferLike,
    WorkloadLike,
    index_text,
    vector_dim,
    window_vector_dim,
)

TRANSPOSE_WIDTHS = (2, 4, 8, 16)
"""Widths of an in-register transpose (OpenCL's ``shuffle2`` vectors)."""

PANEL_BYTES = 16 * 1024
"""The most bytes a work-item's private panel holds (``vector_transpose``
along a reduce axis): a third of the 48 KiB L1 data cache of a recent x86
core, beside the register block's own operands. An OpenCL device reports no
private-memory size; on a GPU the panel lives in registers and spills, and
the search measures it like any other candidate."""

__all__ = [
    "PANEL_BYTES",
    "TRANSPOSE_WIDTHS",
    "LayoutFacts",
    "buffer_facts",
    "facts_of",
    "keeps_logical_order",
    "neutral_facts",
    "order_buffers",
    "panel_axes",
    "panel_input",
    "serves_vector",
    "spatial_indexed",
    "stores_lane_by_lane",
    "subgroup_inputs",
    "transposable",
    "vector_dim",
]

Refused = dict[tuple[Any, ...], str]
"""Why a layout refuses something: ``(axis, width)`` a vector, ``("subgroup",
size)`` block reads of that sub-group size (the copies' reasons travel in
their :class:`~laytune.space._copies.TileCopyFacts`)."""


@dataclass(frozen=True)
class LayoutFacts:
    """``vectors``: the (axis, width) pairs, width > 1, that every
    buffer indexed by that axis can serve with vloadN/vstoreN (spatial axes
    for ``vector``, reduce axes for ``reduce_vector``). ``padded``:
    some buffer's layout has padding. ``orders``: per buffer the ``order``
    knob may follow, (name, its layout keeps the logical order, its physical
    size). ``copies``: per staged input, what its layout lets each staging
    copy do. ``subgroups``: the sub-group sizes whose block reads every input
    of :func:`subgroup_inputs` serves. ``crossed``: the ``(v, width, u)``
    triples under which every buffer indexed by spatial axis ``v`` serves a
    vector of ``width`` along ``v`` either directly or, an input, through an
    in-register transpose of vectors read along axis ``u`` (spatial, or a
    reduce axis: the input held in a private panel, :func:`panel_input`)
    (:func:`transposable`). ``overlap``: the (spatial axis, width) pairs
    whose width does not divide the axis's extent (but is within it) and
    that every buffer indexed by the axis serves as unaligned runs
    (``UnalignedVectorAccess``): the last register block along the axis
    starts at ``extent - block``, overlapping the one before it.
    ``lanes``: the pairs of ``vectors`` that the output serves only lane by
    lane (in its logical layout, not contiguous along the axis: each lane of
    a finished vector is stored on its own, as a scatter), so no vector
    store (nontemporal) applies to them."""

    vectors: frozenset[tuple[int, int]]
    padded: bool
    orders: tuple[tuple[str, bool, int], ...]
    copies: tuple[TileCopyFacts, ...] = ()
    subgroups: frozenset[int] = frozenset(SUBGROUP_SIZES)
    crossed: frozenset[tuple[int, int, int]] = frozenset()
    overlap: frozenset[tuple[int, int]] = frozenset()
    lanes: frozenset[tuple[int, int]] = frozenset()

    def merge(self, other: LayoutFacts) -> LayoutFacts:
        """The facts of two disjoint sets of buffers together."""
        return LayoutFacts(
            self.vectors & other.vectors,
            self.padded or other.padded,
            self.orders + other.orders,
            self.copies + other.copies,
            self.subgroups & other.subgroups,
            self.crossed & other.crossed,
            self.overlap & other.overlap,
            self.lanes | other.lanes,
        )


def order_buffers(workload: WorkloadLike) -> tuple[str, ...]:
    """Buffers the ``order`` knob may follow: those indexed by exactly the
    spatial axis variables, each once (in any order)."""
    spatial = set(spatial_axes(workload))
    names = []
    for buf in workload.buffers:
        idx = buf.indices
        if idx and all(isinstance(e, Var) for e in idx):
            used = [e.index for e in idx]  # type: ignore[union-attr]
            if len(set(used)) == len(used) and set(used) == spatial:
                names.append(buf.name)
    return tuple(names)


def subgroup_inputs(workload: WorkloadLike) -> dict[str, int]:
    """Inputs whose loads a sub-group reads as one block: indexed by the
    innermost spatial axis (the NDRange dimension 0, whose consecutive
    work-items form a sub-group) as one bare index, and never read outside
    their shape (a guarded load is not one every lane executes). Maps each
    to the dimension the lanes run along."""
    spatial = spatial_axes(workload)
    if not spatial:
        return {}
    inner = spatial[-1]
    ranges = [(0, a.extent - 1) for a in workload.axes]
    out = {}
    for buf in workload.buffers:
        dim = vector_dim(buf, inner)
        if buf.role != "input" or not isinstance(dim, int):
            continue
        inside = all(
            bounds(e, ranges)[0] >= 0 and bounds(e, ranges)[1] <= extent - 1
            for e, extent in zip(buf.indices, buf.shape, strict=True)
        )
        if inside:
            out[buf.name] = dim
    return out


def keeps_logical_order(workload: WorkloadLike, buf: BufferLike, layout: Layout) -> bool:
    """Whether following ``buf``'s physical order is the logical order itself
    (so ``order=<buf>`` would duplicate ``order='logical'``)."""
    axes = [e.index for e in buf.indices if isinstance(e, Var)]
    if axes != sorted(axes) or layout.has_padding or layout.image_rank != 1:
        return False
    return row_major_offsets(layout.index_map, layout.shape)


def buffer_facts(
    workload: WorkloadLike,
    buf: BufferLike,
    layout: Layout,
    device: DeviceInfo,
    staging: StagingPlan | None = None,
) -> tuple[LayoutFacts, Refused]:
    """The facts of one global buffer under ``layout`` (its staging copies
    under ``staging``, the workload's usable plan), and for everything it
    refuses, why."""
    accepted: set[tuple[int, int]] = set()
    overlap: set[tuple[int, int]] = set()
    lane_stores: set[tuple[int, int]] = set()
    refused: Refused = {}
    for axis in vector_axes(workload):
        extent = workload.axes[axis].extent
        dim = vector_dim(buf, axis)
        for width in VECTOR_WIDTHS[1:]:
            if extent % width:
                if (axis, width) in all_overlapping(workload):
                    why = _overlap_refused(workload, buf, layout, axis, width)
                    if why:
                        refused[(axis, width)] = why
                    else:
                        overlap.add((axis, width))
                continue
            if dim is None:
                accepted.add((axis, width))
                continue
            if isinstance(dim, str):
                window = window_vector_dim(workload, buf, axis)
                if isinstance(window, str):
                    refused[(axis, width)] = f"{window} ({index_text(workload, buf)})"
                    continue
                assert window is not None
                access: VectorAccess | UnalignedVectorAccess = UnalignedVectorAccess(window, width)
            else:
                access = VectorAccess(dim, width)
            verdict = access.check_layout(layout)
            if verdict.ok:
                accepted.add((axis, width))
            elif _lanes_possible(buf, layout, access, extent):  # the verdict refused it
                accepted.add((axis, width))
                lane_stores.add((axis, width))
            else:
                refused[(axis, width)] = (
                    f"buffer {buf.name!r} layout {layout.describe()}: "
                    + "; ".join(verdict.reasons[:2])
                )
    orders: tuple[tuple[str, bool, int], ...] = ()
    if buf.name in order_buffers(workload):
        keeps = keeps_logical_order(workload, buf, layout)
        orders = ((buf.name, keeps, layout.physical_size),)
    sizes = subgroup_sizes(device)
    subgroups = frozenset(sizes)
    lanes = subgroup_inputs(workload).get(buf.name)
    if lanes is not None:
        subgroups = frozenset()
        for size in sizes:
            verdict = SubgroupBlockAccess(lanes, size, 4).check(
                layout, layout.shape, buf.dtype, device
            )
            if verdict.ok:
                subgroups |= {size}
            else:
                refused[("subgroup", size)] = (
                    f"buffer {buf.name!r} layout {layout.describe()}: {verdict.constraint}: "
                    + "; ".join(verdict.reasons[:2])
                )
    copies: tuple[TileCopyFacts, ...] = ()
    staged = next((s for s in staging.inputs if s.buffer == buf.name), None) if staging else None
    if staged is not None:
        assert staging is not None
        copies = (global_copy_facts(workload, staging, staged, layout, sizes),)
    reduced = set(reduce_axes(workload))
    crossed = frozenset(
        (v, width, u)
        for v, width, u in all_crossed(workload)
        # a panel's kernel stores whole vectors: an output stored lane by lane
        # along v does not take one
        if ((v, width) in accepted and not (u in reduced and (v, width) in lane_stores))
        or ((u, width) in accepted and transposable(buf, layout, v, u, workload))
    )
    facts = LayoutFacts(
        frozenset(accepted),
        layout.has_padding,
        orders,
        copies,
        subgroups,
        crossed,
        frozenset(overlap),
        frozenset(lane_stores),
    )
    return facts, refused


def stores_lane_by_lane(buf: BufferLike, layout: Layout, access: object, extent: int) -> bool:
    """Whether ``buf`` stores the vector ``access`` lane by lane: it is the
    output in its logical layout (the caller's, so that no unpack follows the
    kernel: any other layout that cannot hold the lanes is one the output
    would be unpacked from anyway), the vector runs along a bare index and
    divides the axis's ``extent`` (not a window's run, nor overlapping last
    blocks), and the layout does not hold the lanes side by side
    (``VectorAccess`` refuses it)."""
    return _lanes_possible(buf, layout, access, extent) and not access.check_layout(layout).ok


def _lanes_possible(buf: BufferLike, layout: Layout, access: object, extent: int) -> bool:
    """:func:`stores_lane_by_lane` but for the layout's verdict, which a caller
    holding it need not compute again."""
    return (
        buf.role == "output"
        and layout.is_identity
        and type(access) is VectorAccess
        and not extent % access.width
    )


def _overlap_refused(
    workload: WorkloadLike, buf: BufferLike, layout: Layout, axis: int, width: int
) -> str:
    """Why ``buf`` under ``layout`` cannot serve overlapping runs of
    ``width`` along spatial axis ``axis`` (a width that does not divide
    its extent); ``""`` when it can."""
    dim = vector_dim(buf, axis)
    if dim is None:
        return ""
    if isinstance(dim, str):
        window = window_vector_dim(workload, buf, axis)
        if isinstance(window, str):
            return f"{window} ({index_text(workload, buf)})"
        assert window is not None
        dim = window
    verdict = UnalignedVectorAccess(dim, width).check_layout(layout)
    if verdict.ok:
        return ""
    return (
        f"the last block overlaps the one before it, so buffer {buf.name!r} must hold "
        f"unaligned runs of {width}, and its layout {layout.describe()} does not: "
        + "; ".join(verdict.reasons[:2])
    )


def transposable(
    buf: BufferLike, layout: Layout, v: int, u: int, workload: WorkloadLike | None = None
) -> bool:
    """Whether ``buf`` (whose layout serves vectors along axis ``u``) can be
    read along ``u`` and transposed in registers into vectors along spatial
    axis ``v``: an input of global memory indexed by both axes as bare
    indices. Along a reduce axis ``u`` (a panel, :func:`panel_input`) every
    index is bare and ``u`` is the only reduce axis it indexes."""
    if (
        workload is not None
        and workload.axes[u].kind == "reduce"
        and not panel_input(workload, buf, u)
    ):
        return False
    return (
        buf.role == "input"
        and layout.image_rank == 1
        and isinstance(vector_dim(buf, v), int)
        and isinstance(vector_dim(buf, u), int)
    )


def panel_axes(workload: WorkloadLike, v: int, u: int) -> frozenset[int]:
    """The spatial axes that a private panel over reduce axis ``u`` holds a
    block of: those indexed by an input indexed by spatial axis ``v`` that
    :func:`panel_input` accepts (the work-item walks the other spatial axes)."""
    return spatial_indexed(
        workload,
        [
            buf
            for buf in workload.buffers
            if buf.role == "input"
            and isinstance(vector_dim(buf, v), int)
            and panel_input(workload, buf, u)
        ],
    )


def spatial_indexed(workload: WorkloadLike, buffers: Sequence[BufferLike]) -> frozenset[int]:
    """The spatial axes that some of ``buffers`` index as a bare index."""
    spatial = set(spatial_axes(workload))
    return frozenset(
        e.index for buf in buffers for e in buf.indices if isinstance(e, Var) and e.index in spatial
    )


def panel_input(workload: WorkloadLike, buf: BufferLike, u: int) -> bool:
    """Whether a work-item may hold input ``buf`` in a private panel over the
    whole of reduce axis ``u``: its indices are distinct bare axes, ``u``
    the only reduce axis among them (attention's ``K[b, j, k]``), so the
    panel of one register block is the block of its spatial axes times the
    extent of ``u``."""
    axes = [e.index for e in buf.indices if isinstance(e, Var)]
    if len(axes) != len(buf.indices) or len(set(axes)) != len(axes):
        return False
    return [k for k in axes if workload.axes[k].kind == "reduce"] == [u]


def serves_vector(buf: BufferLike, layout: Layout, axis: int, width: int) -> bool:
    """Whether ``buf`` under ``layout`` serves vloadN/vstoreN of ``width``
    along spatial axis ``axis`` (it does when it does not use the axis)."""
    dim = vector_dim(buf, axis)
    if dim is None:
        return True
    if isinstance(dim, str):
        return False
    return VectorAccess(dim, width).check_layout(layout).ok


def vector_axes(workload: WorkloadLike) -> tuple[int, ...]:
    """The axes vectors may run along: the spatial ones (``vector``), then
    the reduce ones (``reduce_vector``)."""
    return spatial_axes(workload) + reduce_axes(workload)


def all_vectors(workload: WorkloadLike) -> frozenset[tuple[int, int]]:
    """Every (axis of :func:`vector_axes`, width > 1) whose width divides the axis."""
    return frozenset(
        (axis, width)
        for axis in vector_axes(workload)
        for width in VECTOR_WIDTHS[1:]
        if workload.axes[axis].extent % width == 0
    )


def all_overlapping(workload: WorkloadLike) -> frozenset[tuple[int, int]]:
    """Every (spatial axis, width > 1) whose width does not divide the axis's
    extent but fits in it: the vectors whose last block overlaps the one
    before it (``LayoutFacts.overlap``)."""
    return frozenset(
        (axis, width)
        for axis in spatial_axes(workload)
        for width in VECTOR_WIDTHS[1:]
        if workload.axes[axis].extent % width and width <= workload.axes[axis].extent
    )


def all_crossed(workload: WorkloadLike) -> frozenset[tuple[int, int, int]]:
    """Every ``(v, width, u)`` of a spatial axis ``v`` and another axis ``u``
    (spatial, or reduce: a panel) whose extents ``width`` divides, ``width``
    one an in-register transpose takes."""
    spatial = set(spatial_axes(workload))
    vectors = all_vectors(workload)
    return frozenset(
        (v, width, u)
        for (v, width) in vectors
        if v in spatial
        for (u, other) in vectors
        if other == width and u != v and width in TRANSPOSE_WIDTHS
    )


def neutral_facts(workload: WorkloadLike) -> LayoutFacts:
    """The facts of no buffer: what merging the buffers' facts starts from."""
    return LayoutFacts(
        all_vectors(workload),
        False,
        (),
        crossed=all_crossed(workload),
        overlap=all_overlapping(workload),
    )


def facts_of(
    workload: WorkloadLike,
    layouts: Mapping[str, Layout],
    device: DeviceInfo,
    staging: StagingPlan | None = None,
) -> tuple[LayoutFacts, Refused]:
    """The facts of a whole candidate's global layouts, and the first reason
    each refused thing is refused for."""
    facts = neutral_facts(workload)
    reasons: Refused = {}
    for buf in sorted(workload.buffers, key=lambda b: b.name):
        layout = layouts[buf.name]
        try:
            part, refused = _kept_buffer_facts(
                workload, buf, layout, layout.describe(), device, staging
            )
        except TypeError:  # something unhashable: not kept
            part, refused = buffer_facts(workload, buf, layout, device, staging)
        facts = facts.merge(part)
        for pair, why in refused.items():
            reasons.setdefault(pair, why)
    return facts, reasons


#: Per workload (held weakly: the registry of defined workloads forgets one
#: nothing holds), its buffer facts by buffer, layout, description, device
#: and staging plan.
_KEPT_FACTS: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], tuple[LayoutFacts, Refused]]] = (
    weakref.WeakKeyDictionary()
)
#: The most facts kept per workload; past it they are forgotten and kept anew.
_KEPT_PER_WORKLOAD = 4096


def _kept_buffer_facts(
    workload: WorkloadLike,
    buf: BufferLike,
    layout: Layout,
    described: str,
    device: DeviceInfo,
    staging: StagingPlan | None,
) -> tuple[LayoutFacts, Refused]:
    """:func:`buffer_facts`, kept: checking a candidate (every ``lower``
    does) derives the facts of each of its layouts, and the candidates of one
    space share a few layouts per buffer. ``described`` is in the key because
    the reasons quote the layout's description, and layouts equal by their
    maps may be described apart (a composition names its parts). Callers
    only read the reasons."""
    kept = _KEPT_FACTS.setdefault(workload, {})
    key = (buf, layout, described, device, staging)
    found = kept.get(key)
    if found is None:
        if len(kept) >= _KEPT_PER_WORKLOAD:
            kept.clear()
        found = kept[key] = buffer_facts(workload, buf, layout, device, staging)
    return found
