"""Re-checking one candidate against a workload and a device.

:func:`check_candidate` is what codegen calls before lowering: it accepts
every candidate a :class:`~laytune.space.SearchSpace` produces and rejects,
with the constraint's reasons, every candidate the kernel could not run
correctly (a vector the layout cannot serve, an image that is written, a
work-group the device refuses, an overcompute over a non-neutral pad, ...).
The knobs are judged by the same rule steps the space counts and samples
with (:mod:`laytune.space._rules`), over *every* value codegen can lower
(any block, work-group, split or unroll), not only those a space offers. It
does not apply a space's *preferences* (padding budget, family lists, knob
value lists): ``SearchSpace.check`` adds those.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from laytune.device_info import DeviceInfo
from laytune.dtypes import DTYPES
from laytune.exceptions import LayoutRejectedError
from laytune.layout import UNDEF, Layout
from laytune.ops import reduction
from laytune.space._candidate import Candidate
from laytune.space._constraints import (
    Constraint,
    Image2DRead,
    LocalMemoryBudget,
    UnalignedVectorAccess,
    VectorAccess,
    Verdict,
)
from laytune.space._copies import (
    COPY_VARIANTS,
    SUBGROUP_SIZES,
    TileCopyFacts,
    footprints_inside,
    local_copy_facts,
    subgroup_sizes,
)
from laytune.space._facts import (
    facts_of,
    order_buffers,
    serves_vector,
    stores_lane_by_lane,
    transposable,
    vector_dim,
)
from laytune.space._generate import SpaceOptions
from laytune.space._knobs import axis_by_name, grid_dims, knob_names
from laytune.space._matrix import half_storage_only
from laytune.space._rules import Rules, Setting, build_steps
from laytune.space._staging import (
    StagingPlan,
    local_vector_dims,
    local_window_dims,
    staging_plan,
)
from laytune.space._workload import (
    VECTOR_WIDTHS,
    WorkloadLike,
    local_buffer_name,
    window_vector_dim,
)

__all__ = [
    "check_candidate",
    "dtype_reasons",
    "implied_constraints",
    "order_buffers",
    "space_setting",
    "stageable_buffers",
    "usable_staging",
]

# What check_candidate accepts beyond any space's option lists: codegen lowers
# these, however slow some of them are.
_MAX_BLOCK = 64
_MAX_BLOCK_POINTS = 1024
_MAX_UNROLL = 64


def usable_staging(workload: WorkloadLike) -> StagingPlan | None:
    """The workload's staging plan when the kernel can run it: None when the
    workload cannot be staged, or when the plan blocks an axis that shares
    its NDRange dimension with others (see ``grid_dims``). Kept per workload
    (held weakly): checking and lowering a candidate each ask, several times."""
    found = _STAGING.get(workload, _UNKNOWN)
    if found is _UNKNOWN:
        found = _STAGING[workload] = _usable_staging(workload)
    return found  # type: ignore[return-value]


_STAGING: weakref.WeakKeyDictionary[Any, StagingPlan | None] = weakref.WeakKeyDictionary()
_UNKNOWN = object()


def _usable_staging(workload: WorkloadLike) -> StagingPlan | None:
    try:
        plan = staging_plan(workload)
    except LayoutRejectedError:
        return None
    for axes in grid_dims(workload):
        if len(axes) > 1 and any(plan.block[k] > 1 for k in axes):
            return None
    return plan


def dtype_reasons(workload: WorkloadLike, device: DeviceInfo) -> list[str]:
    """Why ``device`` cannot compute in the workload's dtypes (empty: it can)."""
    reasons = []
    for name in sorted({b.dtype for b in workload.buffers}):
        extension = DTYPES[name].extension
        if DTYPES[name].emitted and extension and not device.has_extension(extension):
            reasons.append(f"dtype {name} needs {extension}, which {device.name} lacks")
    if reasons and half_storage_only(workload, device):
        return []  # the matrix kernels; the matrix step refuses every other candidate
    return reasons


def stageable_buffers(workload: WorkloadLike) -> dict[str, tuple[int, ...]]:
    """Inputs that ``local_stage`` stages, with their local tile shapes;
    empty for a workload that cannot be staged."""
    plan = usable_staging(workload)
    return plan.tiles if plan else {}


def space_setting(
    workload: WorkloadLike,
    device: DeviceInfo,
    options: SpaceOptions,
    staging: StagingPlan | None,
) -> Setting:
    """The rule setting of a space: the knob values its options offer."""
    return Setting(
        workload,
        device,
        vectors=tuple(options.vectors),
        blocks=tuple(options.blocks),
        groups=tuple(options.groups),
        splits=tuple(options.splits),
        unrolls=tuple(options.unrolls),
        max_block_points=(
            device.register_block_points()
            if options.max_block_points is None
            else options.max_block_points
        ),
        staging=staging,
        orders=order_buffers(workload),
        copies=tuple(options.copies),
        subgroups=tuple(options.subgroups),
        outside=_outside(workload, staging),
    )


def _outside(workload: WorkloadLike, staging: StagingPlan | None) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(footprints_inside(workload, staging).items())) if staging else ()


def _check_setting(workload: WorkloadLike, device: DeviceInfo) -> Setting:
    limit = max(device.max_work_group_size, *device.max_work_item_sizes)
    staging = usable_staging(workload)
    return Setting(
        workload,
        device,
        vectors=VECTOR_WIDTHS,
        blocks=tuple(range(1, _MAX_BLOCK + 1)),
        groups=tuple(range(0, limit + 1)),
        splits=tuple(range(1, max((a.extent for a in workload.axes), default=1) + 1)),
        unrolls=tuple(range(1, _MAX_UNROLL + 1)),
        max_block_points=_MAX_BLOCK_POINTS,
        staging=staging,
        orders=order_buffers(workload),
        copies=COPY_VARIANTS,
        subgroups=(0, *SUBGROUP_SIZES),
        outside=_outside(workload, staging),
    )


def implied_constraints(
    workload: WorkloadLike, candidate: Candidate
) -> dict[str, tuple[Constraint, ...]]:
    """The per-buffer constraints a candidate's knobs and layouts imply:
    ``VectorAccess(dim, vector)`` for each buffer indexed by the vector axis
    (``UnalignedVectorAccess`` where the vector does not divide the axis's
    extent: overlapping last blocks), (along the ``vector_transpose`` axis for an input read across it), (and, with ``local_stage``, for the local tile of such an input along the
    matching tile dimension), none for an output in its logical layout that
    is not contiguous along the axis (it is stored lane by lane), ``Image2DRead(role)`` for each layout with an
    axis separator, ``LocalMemoryBudget()`` for each local buffer."""
    out: dict[str, list[Constraint]] = {}
    vector = candidate.knob("vector", 1)
    axis_name = candidate.knob("vector_axis", "")
    names = [a.name for a in workload.axes]
    if isinstance(vector, int) and vector in (2, 4, 8, 16) and axis_name in names:
        axis = axis_by_name(workload, axis_name)
        across = candidate.knob("vector_transpose", "")
        across_axis = axis_by_name(workload, across) if across in names else None
        layouts = candidate.layout_map
        for buf in workload.buffers:
            dim = vector_dim(buf, axis)
            if isinstance(dim, str):
                window = window_vector_dim(workload, buf, axis)  # a window: unaligned runs
                if isinstance(window, int):
                    out.setdefault(buf.name, []).append(UnalignedVectorAccess(window, vector))
                continue
            if dim is None:
                continue
            layout = layouts.get(buf.name)
            if (
                across_axis is not None
                and across_axis != axis
                and layout is not None
                and transposable(buf, layout, axis, across_axis, workload)
                and not serves_vector(buf, layout, axis, vector)
            ):
                dim = vector_dim(buf, across_axis)  # read along the transpose axis
            if workload.axes[axis].extent % vector:  # overlapping last blocks: unaligned runs
                out.setdefault(buf.name, []).append(UnalignedVectorAccess(dim, vector))
                continue
            access = VectorAccess(dim, vector)  # type: ignore[arg-type]
            extent = workload.axes[axis].extent
            if layout is not None and stores_lane_by_lane(buf, layout, access, extent):
                continue  # the output stored lane by lane
            out.setdefault(buf.name, []).append(access)
        plan = usable_staging(workload)
        if candidate.knob("local_stage", False) is True and plan is not None:
            for local, dim in local_vector_dims(workload, plan).items():
                out.setdefault(local, []).append(VectorAccess(dim, vector))
            for local, dim in local_window_dims(workload, plan).items():
                out.setdefault(local, []).append(UnalignedVectorAccess(dim, vector))
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
    nothing else but the staged local buffers); every knob of
    :func:`~laytune.space._knobs.knob_names` present and no other; each
    layout against the constraints it implies (:func:`implied_constraints`)
    and the extra hard ``constraints`` given per buffer; the knobs against
    the rules between them; the local tiles and pad values. Every failure is
    listed; ``Verdict.constraint`` is ``"check_candidate"``.

    Without extra ``constraints`` the verdict is remembered for the last
    few hundred (workload, candidate, device): a candidate is judged when
    the space offers it and again when it is lowered, and the judgement is
    a pure function of the three.
    """
    if any((constraints or {}).values()):
        return _check(workload, candidate, device, constraints)
    remembered = _REMEMBERED.setdefault(workload, {})
    # by the candidate's key: knobs 1 and True are equal values but not one candidate
    key = (candidate.key, device)
    verdict = remembered.get(key)
    if verdict is None:
        verdict = _check(workload, candidate, device, None)
        if len(remembered) >= _REMEMBER:
            del remembered[next(iter(remembered))]  # the oldest
        remembered[key] = verdict
    return verdict


#: Per workload (held weakly: the registry of defined workloads forgets one
#: nothing holds), the last verdicts by candidate key and device.
_REMEMBERED: weakref.WeakKeyDictionary[Any, dict[tuple[str, DeviceInfo], Verdict]] = (
    weakref.WeakKeyDictionary()
)
_REMEMBER = 512


def _check(
    workload: WorkloadLike,
    candidate: Candidate,
    device: DeviceInfo,
    constraints: Mapping[str, Sequence[Constraint]] | None,
) -> Verdict:
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
    reasons += dtype_reasons(workload, device)
    names = knob_names(workload)
    missing = [k for k in names if k not in knobs]
    if missing:
        reasons.append(f"knobs {missing} are missing (every candidate holds {list(names)})")
    unknown = sorted(set(knobs) - set(names))
    if unknown:
        reasons.append(f"unknown knobs {unknown} (known: {list(names)})")
    if reasons:
        return Verdict.reject("check_candidate", *reasons)

    plan = usable_staging(workload)
    stageable = plan.tiles if plan else {}
    dtypes = {name: buf.dtype for name, buf in buffers.items()}
    for name in stageable:
        dtypes[local_buffer_name(name)] = buffers[name].dtype

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

    facts, refused = facts_of(workload, {n: layouts[n] for n in buffers}, device, plan)
    rules = Rules(build_steps(_check_setting(workload, device), lambda key: refused.get(key, "")))
    state = rules.state_of(facts)
    state["@local_copies"] = _local_copies(
        plan, layouts, dtypes, knobs["local_stage"] is True, subgroup_sizes(device)
    )
    reasons += rules.explain(state, knobs)

    local_names = {local_buffer_name(n) for n in stageable}
    present = {n for n in layouts if n not in buffers}
    if knobs["local_stage"] is True and plan is not None:
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
    elif present:
        reasons.append(f"local_stage False but the candidate has layouts for {sorted(present)}")

    if knobs["pad_mode"] == "overcompute":
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


def _local_copies(
    plan: StagingPlan | None,
    layouts: Mapping[str, Layout],
    dtypes: Mapping[str, str],
    staged: bool,
    sizes: tuple[int, ...],
) -> tuple[TileCopyFacts, ...]:
    """The copy facts of the candidate's local tile layouts (those of the
    right shape; the others are reported apart)."""
    if plan is None or not staged:
        return ()
    out = []
    for tile in plan.inputs:
        local = local_buffer_name(tile.buffer)
        layout = layouts.get(local)
        if layout is not None and layout.shape == tile.tile:
            out.append(local_copy_facts(tile, layout, dtypes[local], sizes))
    return tuple(out)


def _overcompute_reasons(workload: WorkloadLike, candidate: Candidate) -> list[str]:
    combine = reduction(workload.reduction)
    reasons = []
    for buf in workload.buffers:
        if buf.role != "input":
            continue
        layout = candidate.layout(buf.name)
        if not layout.has_padding:
            continue
        value = candidate.pad_value(buf.name)
        if combine is None:
            if value is None:
                reasons.append(
                    f"overcompute reads the padding of input {buf.name!r}, whose pad_value is "
                    f"None (never written); give it a value or UNDEF"
                )
        elif value is UNDEF or value is None or float(value) != combine.neutral:
            reasons.append(
                f"overcompute of a {workload.reduction} reads the padding of input "
                f"{buf.name!r}: its pad_value is {value!r}, not the neutral element "
                f"{combine.neutral}"
            )
    return reasons
