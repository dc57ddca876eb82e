"""Re-checking one candidate against a workload and a device.

:func:`check_candidate` is what codegen calls before lowering: it accepts
every candidate a :class:`~laytune.space.SearchSpace` produces and rejects,
with the constraint's reasons, every candidate the kernel could not run
correctly (a vector the layout cannot serve, an image that is written, a
work-group the device refuses, an overcompute over a non-neutral pad, ...).
It does not apply a space's *preferences* (padding budget, family lists):
``SearchSpace.check`` adds those.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from laytune.device_info import DeviceInfo
from laytune.exceptions import LayoutRejectedError
from laytune.layout import UNDEF, Layout, Var
from laytune.space._candidate import Candidate
from laytune.space._constraints import (
    Constraint,
    Image2DRead,
    LocalMemoryBudget,
    VectorAccess,
    Verdict,
)
from laytune.space._staging import (
    StagingPlan,
    local_vector_dims,
    staging_knob_reasons,
    staging_plan,
)
from laytune.space._workload import (
    KNOB_LOCAL_STAGE,
    KNOB_ORDER,
    KNOB_PAD_MODE,
    KNOB_PER_ITEM,
    KNOB_UNROLL,
    KNOB_VECTOR,
    KNOB_WORK_GROUP,
    KNOBS,
    ORDER_LOGICAL,
    PAD_MODES,
    VECTOR_WIDTHS,
    WorkloadLike,
    index_text,
    innermost_reduce_axis,
    innermost_spatial_axis,
    local_buffer_name,
    neutral_element,
    spatial_points,
    vector_access_requirements,
)

__all__ = [
    "check_candidate",
    "implied_constraints",
    "order_buffers",
    "stageable_buffers",
    "work_items",
]


def order_buffers(workload: WorkloadLike) -> tuple[str, ...]:
    """Buffers the ``order`` knob may follow: those indexed by exactly the
    spatial axis variables, each once (in any order)."""
    spatial = {k for k, a in enumerate(workload.axes) if a.kind == "spatial"}
    names = []
    for buf in workload.buffers:
        idx = buf.indices
        if idx and all(isinstance(e, Var) for e in idx):
            used = [e.index for e in idx]  # type: ignore[union-attr]
            if len(set(used)) == len(used) and set(used) == spatial:
                names.append(buf.name)
    return tuple(names)


def staging_plan_or_none(workload: WorkloadLike) -> StagingPlan | None:
    """:func:`laytune.space.staging_plan`, or None when the workload cannot be staged."""
    try:
        return staging_plan(workload)
    except LayoutRejectedError:
        return None


def stageable_buffers(workload: WorkloadLike) -> dict[str, tuple[int, ...]]:
    """Inputs that ``local_stage`` stages, with their local tile shapes (see
    :func:`laytune.space.staging_plan`); empty for a workload that cannot be
    staged."""
    plan = staging_plan_or_none(workload)
    return plan.tiles if plan else {}


def work_items(
    workload: WorkloadLike, order: str, per_item: int, layouts: Mapping[str, Layout]
) -> int:
    """NDRange size without staging: spatial points / per_item in logical
    order, else the followed buffer's physical size (a staged NDRange is
    ``staging_plan(workload).groups * work_group``)."""
    if order == ORDER_LOGICAL:
        return max(spatial_points(workload) // per_item, 1)
    return layouts[order].physical_size


def _int_knob(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def implied_constraints(
    workload: WorkloadLike, candidate: Candidate
) -> dict[str, tuple[Constraint, ...]]:
    """The per-buffer constraints a candidate's knobs and layouts imply:
    ``VectorAccess(dim, vector)`` for each buffer a vector touches by the bare
    innermost spatial variable (and, with ``local_stage``, for the local tile
    of such an input along the matching tile dimension), ``Image2DRead(role)``
    for each layout with an axis separator, ``LocalMemoryBudget()`` for each
    local buffer."""
    out: dict[str, list[Constraint]] = {}
    vector = candidate.knob(KNOB_VECTOR, 1)
    if _int_knob(vector) and vector > 1 and vector in VECTOR_WIDTHS:
        for name, dim in vector_access_requirements(workload).items():
            if dim is not None:
                out.setdefault(name, []).append(VectorAccess(dim, vector))
        if candidate.knob(KNOB_LOCAL_STAGE, False) is True:
            plan = staging_plan_or_none(workload)
            for local, dim in (local_vector_dims(workload, plan) if plan else {}).items():
                out.setdefault(local, []).append(VectorAccess(dim, vector))
    roles = {b.name: b.role for b in workload.buffers}
    for name, layout in candidate.layouts:
        if layout.image_rank == 2:
            out.setdefault(name, []).append(Image2DRead(roles.get(name, "local")))
        if name not in roles:
            out.setdefault(name, []).append(LocalMemoryBudget())
    return {k: tuple(v) for k, v in out.items()}


def check_candidate(
    workload: WorkloadLike,
    candidate: Candidate,
    device: DeviceInfo,
    constraints: Mapping[str, Sequence[Constraint]] | None = None,
) -> Verdict:
    """Accept or reject ``candidate`` for ``workload`` on ``device``.

    Checks, in order: a layout of the right shape for every buffer (and
    nothing else but the staged local buffers); each layout against the
    constraints it implies (:func:`implied_constraints`) and the extra hard
    ``constraints`` given per buffer; every knob of the vocabulary present
    and within its rules (see ``laytune.space._workload``). Every failure is
    listed; ``Verdict.constraint`` is ``"check_candidate"``.
    """
    reasons: list[str] = []
    layouts = candidate.layout_map
    knobs = candidate.knob_map
    buffers = {b.name: b for b in workload.buffers}
    for name, buf in buffers.items():
        layout = layouts.get(name)
        if layout is None:
            reasons.append(f"buffer {name!r} has no layout")
        elif layout.shape != tuple(buf.shape):
            reasons.append(
                f"buffer {name!r} has shape {tuple(buf.shape)} but its layout "
                f"{layout.describe()} is built on {layout.shape}"
            )
        elif layout.image_rank > 2:
            reasons.append(
                f"buffer {name!r}: layout {layout.describe()} has {layout.image_rank} physical "
                f"axes; buffers are flat or image2d"
            )
    missing = [k for k in KNOBS if k not in knobs]
    if missing:
        reasons.append(f"knobs {missing} are missing (every candidate holds {list(KNOBS)})")
    unknown = sorted(set(knobs) - set(KNOBS))
    if unknown:
        reasons.append(f"unknown knobs {unknown} (known: {list(KNOBS)})")
    if reasons:
        return Verdict.reject("check_candidate", *reasons)

    dtypes = {name: buf.dtype for name, buf in buffers.items()}
    stageable = stageable_buffers(workload)
    for name in stageable:
        dtypes[local_buffer_name(name)] = buffers[name].dtype

    # layouts against what they imply and the extra constraints
    implied = implied_constraints(workload, candidate)
    extra = {k: tuple(v) for k, v in (constraints or {}).items()}
    for name, layout in candidate.layouts:
        if name not in dtypes:
            continue
        for constraint in (*implied.get(name, ()), *extra.get(name, ())):
            if constraint.soft and getattr(constraint, "max_degree", None) is None:
                continue
            verdict = constraint.check(layout, layout.shape, dtypes[name], device)
            if not verdict.ok:
                reasons += [f"buffer {name!r}: {verdict.constraint}: {r}" for r in verdict.reasons]

    order = knobs[KNOB_ORDER]
    vector, per_item = knobs[KNOB_VECTOR], knobs[KNOB_PER_ITEM]
    group, unroll = knobs[KNOB_WORK_GROUP], knobs[KNOB_UNROLL]
    stage, pad_mode = knobs[KNOB_LOCAL_STAGE], knobs[KNOB_PAD_MODE]

    # order
    if order != ORDER_LOGICAL and order not in order_buffers(workload):
        reasons.append(
            f"order {order!r} is neither 'logical' nor a buffer indexed by exactly the spatial "
            f"axes ({list(order_buffers(workload))})"
        )
    elif order != ORDER_LOGICAL and (per_item != 1 or vector != 1):
        reasons.append(
            f"order {order!r} follows a physical order: it needs per_item 1 and vector 1, got "
            f"per_item {per_item} and vector {vector}"
        )

    # vector and per_item
    inner = innermost_spatial_axis(workload)
    inner_extent = workload.axes[inner].extent if inner is not None else 1
    if not _int_knob(vector) or vector not in VECTOR_WIDTHS:
        reasons.append(f"vector {vector!r} is not one of {VECTOR_WIDTHS}")
    elif vector > 1:
        if inner_extent % vector:
            reasons.append(
                f"vector {vector} does not divide the innermost spatial extent {inner_extent}"
            )
        for name, dim in vector_access_requirements(workload).items():
            if dim is None:
                reasons.append(
                    f"vector {vector}: buffer {name!r} is indexed by the innermost spatial axis "
                    f"other than as a bare index ({index_text(workload, buffers[name])}), so it allows "
                    f"no vector"
                )
    if not _int_knob(per_item) or per_item < 1:
        reasons.append(f"per_item {per_item!r} is not a positive int")
    else:
        if inner_extent % per_item:
            reasons.append(
                f"per_item {per_item} does not divide the innermost spatial extent {inner_extent}"
            )
        if _int_knob(vector) and vector >= 1 and per_item % vector:
            reasons.append(f"per_item {per_item} is not a multiple of vector {vector}")

    # work-group (a staged NDRange is one work-group per block: see local staging)
    if not _int_knob(group) or group < 0:
        reasons.append(f"work_group {group!r} is not a non-negative int")
    elif group and order in (ORDER_LOGICAL, *order_buffers(workload)) and _int_knob(per_item):
        limit = min(device.max_work_group_size, device.max_work_item_sizes[0])
        items = work_items(workload, order, max(per_item, 1), layouts)
        if group > limit:
            reasons.append(
                f"work_group {group} is over the device's limit {limit} (max_work_group_size "
                f"{device.max_work_group_size}, max_work_item_sizes[0] "
                f"{device.max_work_item_sizes[0]})"
            )
        if items % group and stage is not True:
            reasons.append(f"work_group {group} does not divide the {items} work-items")

    # unroll
    red = innermost_reduce_axis(workload)
    red_extent = workload.axes[red].extent if red is not None else 1
    if not _int_knob(unroll) or unroll < 1 or red_extent % unroll:
        reasons.append(
            f"unroll {unroll!r} does not divide the innermost reduction extent {red_extent}"
        )

    # local staging
    local_names = {local_buffer_name(n) for n in stageable}
    present = {n for n in layouts if n not in buffers}
    if stage is True:
        try:
            plan = staging_plan(workload)
        except LayoutRejectedError as err:
            reasons.append(
                f"local_stage True but workload {workload.name!r} cannot be staged: {err}"
            )
        else:
            if all(_int_knob(v) for v in (per_item, group, unroll)):
                reasons += [
                    r
                    for _, r in staging_knob_reasons(workload, plan, order, per_item, group, unroll)
                ]
        for name, shape in stageable.items():
            local = local_buffer_name(name)
            if local not in layouts:
                reasons.append(f"local_stage True but the candidate has no layout for {local!r}")
            elif layouts[local].shape != shape:
                reasons.append(
                    f"local buffer {local!r} has tile shape {shape} but its layout is built on "
                    f"{layouts[local].shape}"
                )
        stray = sorted(present - local_names)
        if stray:
            reasons.append(f"layouts for unknown buffers {stray}")
        staged = [(n, layouts[n], dtypes[n]) for n in sorted(local_names & present)]
        verdict = LocalMemoryBudget().check_buffers(staged, device)
        if not verdict.ok:
            reasons += [f"{verdict.constraint}: {r}" for r in verdict.reasons]
    elif stage is False:
        if present:
            reasons.append(f"local_stage False but the candidate has layouts for {sorted(present)}")
    else:
        reasons.append(f"local_stage {stage!r} is not a bool")

    # pad mode
    if pad_mode not in PAD_MODES:
        reasons.append(f"pad_mode {pad_mode!r} is not one of {PAD_MODES}")
    elif pad_mode == "overcompute":
        reasons += _overcompute_reasons(workload, candidate)
    for name, value in candidate.pad_values:
        buf = buffers.get(name)
        if buf is not None and buf.role == "output" and value is not None:
            reasons.append(
                f"output {name!r} has pad_value {value!r}; outputs' padding is never read (None)"
            )

    if reasons:
        return Verdict.reject("check_candidate", *reasons)
    return Verdict.accept("check_candidate")


def _overcompute_reasons(workload: WorkloadLike, candidate: Candidate) -> list[str]:
    neutral = neutral_element(workload.reduction)
    reasons = []
    for buf in workload.buffers:
        if buf.role != "input":
            continue
        layout = candidate.layout(buf.name)
        if not layout.has_padding:
            continue
        value = candidate.pad_value(buf.name)
        if workload.reduction is None:
            if value is None:
                reasons.append(
                    f"overcompute reads the padding of input {buf.name!r}, whose pad_value is "
                    f"None (never written); give it a value or UNDEF"
                )
        elif value is UNDEF or value is None or float(value) != neutral:
            reasons.append(
                f"overcompute of a {workload.reduction} reads the padding of input "
                f"{buf.name!r}: its pad_value is {value!r}, not the neutral element {neutral}"
            )
    return reasons
