"""The knob table: every schedule knob a candidate holds, in one place.

A candidate's knobs describe the loop nest that ``laytune.codegen`` emits.
:data:`KNOB_SPECS` lists each kind of knob once (name, what it means, its
default, the values the space offers by default); :func:`knob_names` turns
the kinds into the knob names of one workload, in the order the space
chooses them (a later knob's rules may read earlier ones, never the other
way). The space (:mod:`laytune.space._rules`) decides which values are
valid together; the code generator reads the same names and defaults.

The loop nest the knobs describe
--------------------------------
* **NDRange.** The spatial axes (those indexing the output) map to up to
  three NDRange dimensions (:func:`grid_dims`): dimension 0 is the
  innermost spatial axis, dimension 1 the next one out, dimension 2 every
  remaining spatial axis, collapsed row-major. A work-item of the grid
  computes one *register block* of outputs.
* ``block.<axis>`` (one per spatial axis): the extent of the register block
  along that axis; a work-item loads each operand element once per reduce
  step and reuses it across the block (an outer product in registers). A
  block that does not divide its axis leaves a tail: the last block's
  points outside the output are computed and never stored, their loads
  reading a padded layout's padding untested; where some load would leave
  its buffer's memory, the last block starts at ``extent - block`` instead,
  overlapping the one before it (``laytune.codegen``), so nothing is tested.
* ``vector_axis`` / ``vector``: the spatial axis along which accumulators,
  loads and stores are ``floatN`` vectors (``""`` and 1: scalar). Every
  buffer indexed by that axis must hold runs of N consecutive elements there
  (``VectorAccess``), and the block along it is a multiple of N. A width
  that does not divide the axis's extent (but fits in it) runs the last
  block along it from ``extent - block``, overlapping the one before it
  (its outputs computed and stored again, the same values), so no point
  is outside; every buffer indexed by the axis must then hold runs that
  start anywhere (``UnalignedVectorAccess``), in an unstaged kernel without
  ``vector_transpose``, sub-groups or nontemporal stores (``vector_overlap``).
* ``vector_transpose``: ``""``, or a spatial axis ``u``: an input that
  cannot serve vectors along ``vector_axis`` ``v`` but can along ``u`` (a
  transpose's ``X[j, i]`` under a vector along ``j``) is read in ``N``
  vectors along ``u``, at ``N`` consecutive values of ``v``, and the
  ``N x N`` block is transposed in registers (a ``shuffle2`` network); the
  blocks along ``u`` and ``v`` are multiples of ``N``. Offered only where
  some buffer needs it. ``u`` may be a reduce axis (attention's
  ``K[b, j, k]``, contiguous along ``k`` alone): the work-item then reads
  such an input once, for its block of the spatial axes it indexes over
  the whole of ``u``, into a private panel (``PANEL_BYTES`` at most), and
  walks every register block of the spatial axes it does not index (the
  NDRange holds one work-item along them) over the panel: the pack of a
  transposed operand inside the kernel, in one launch.
* ``group.<axis>`` (one per NDRange dimension, named after the innermost
  axis of that dimension): the work-group extent along that dimension; all
  zero leaves the work-group to the driver. An extent need not divide the
  dimension's work-items: the launch rounds the dimension up to whole
  work-groups and the items past the last block return at once.
* ``order``: ``"logical"``, or the name of a buffer indexed by exactly the
  spatial axes whose *physical* order the work-items follow (a 1-D NDRange
  over its physical positions, one scalar point per work-item).
* ``reduce_order``: the reduce loops, outermost first (comma-separated axis
  names); ``split``: the first of them runs in blocks of ``split`` values,
  whose inner loop becomes the innermost (conv2d's ``c`` blocked by 16
  around ``kh, kw``: ``c // 16, kh, kw, c % 16``); ``unroll``: the innermost
  reduce loop is unrolled by that factor (the steps it leaves, where it
  does not divide the loop, run one by one after).
* ``reduce_vector``: 1, or a width N: the innermost reduce loop steps N
  values at a time, every input it indexes read in ``floatN`` vectors along
  it (each must hold those N elements contiguously, ``VectorAccess``), into
  ``floatN`` accumulators, ``unroll`` of them per point (one per unrolled
  copy, independent chains), folded into one and combined across the lanes
  before the store. A row's reduction ``Y[i] = max(X[i, j])`` then reads
  each row in vectors, where vectors across work-items (Intel's CPU
  runtime) read N rows a row apart. Scalar along the spatial axes
  (``vector_axis`` ''), unstaged, unsplit, no sub-groups.
* ``peel``: when some input is read outside its extent (a convolution's zero
  padding, the tail of a register block), the kernel also holds the reduce
  loops without any index test, and a work-item whose whole block reads
  inside every buffer runs those (index-set splitting, as direct-convolution
  libraries split interior and border).
* ``local_stage``: the work-group copies the input tiles of the workload's
  staging plan into ``__local`` memory before reducing over them (the
  candidate then holds a layout for each ``"<input>.local"`` tile).
* ``copy``: the instruction that copies the staged tiles: ``elementwise``
  (a loop of loads and stores over the tile, zero outside the input),
  ``rows`` (one ``async_work_group_copy`` per tile row), ``async_strided``
  (one ``async_work_group_strided_copy`` of the tile's rows at one stride),
  ``async_contiguous`` (one ``async_work_group_copy`` of the whole tile) or
  ``subgroup_block`` (``intel_sub_group_block_read`` from the input and
  ``intel_sub_group_block_write`` into the tile). Each is offered only for
  the global and local layouts its constraint accepts
  (:mod:`laytune.space._copies`).
* ``subgroup``: 0, or the sub-group size the kernel requires
  (``intel_reqd_sub_group_size``) on a device with ``cl_intel_subgroups``:
  a staged kernel's ``subgroup_block`` copy runs in sub-groups of that
  size; an unstaged kernel reads each input along the innermost spatial
  axis (NDRange dimension 0, one point per work-item) with one block read
  per sub-group, where its layout holds the sub-group's elements
  contiguously (``SubgroupBlockAccess``).
* ``store``: ``"plain"`` (``vstoreN``) or ``"nontemporal"``: the output's
  vectors are stored with clang's ``__builtin_nontemporal_store``, which
  bypasses the caches (a line written whole is not read first), where the
  device's compiler has it (``DeviceInfo.builtins``).
* ``pad_mode``: loops over padded physical extents test every index
  (``"guard"``) or run over the padding (``"overcompute"``), which holds the
  reduction's neutral element.
* ``prefetch`` (workloads with an input a work-group's items share, read
  along the innermost axis of some NDRange dimension and a reduce axis;
  offered where it is larger than the device's cache): each work-item also
  prefetches, a cache line every few reduce steps, its share of the block
  of that input that the next work-group (along the first dimension of
  more than one group) reads, where the device's compiler has
  ``__builtin_prefetch`` (:func:`prefetch_inputs`).
* ``matrix`` (matmul-like float16 workloads only, the last knob): ``none``
  (the nest above), or the matrix instruction that multiplies the staged
  tiles (``intel_dpas``, ``nv_wmma``, ``nv_mma``), offered where the device
  has it and the local tiles' layouts suit its fragment loads
  (:mod:`laytune.space._matrix`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from laytune.exceptions import LayoutError
from laytune.layout import Var
from laytune.space._copies import COPY_VARIANTS
from laytune.space._matrix import MATRIX_VARIANTS, offers_matrix
from laytune.space._workload import WorkloadLike, dtype_bytes

__all__ = [
    "KNOB_SPECS",
    "LEGACY_DEFAULTS",
    "ONE_GROUP",
    "ORDER_LOGICAL",
    "KnobSpec",
    "baseline_knobs",
    "block_knob",
    "grid_dims",
    "group_knob",
    "knob_default",
    "knob_names",
    "knob_slots",
    "knob_spec",
    "offers_prefetch",
    "parse_reduce_order",
    "prefetch_inputs",
    "prefetch_worth",
    "reduce_axes",
    "reduce_order_text",
    "shared_dims",
    "spatial_axes",
    "walk_dim",
    "walk_dims",
    "walk_step",
]

ORDER_LOGICAL = "logical"
"""The ``order`` value for row-major order of the spatial axes."""


@dataclass(frozen=True)
class KnobSpec:
    """One kind of knob.

    ``per`` is None for a single knob named ``name``, ``"axis"`` for one knob
    per spatial axis (``"block.j"``) and ``"dim"`` for one per NDRange
    dimension (``"group.j"``). ``offered``, where set, says which workloads
    have the knob at all (``matrix``: matmul-like float16 ones). ``default`` is the baseline's value, the one a
    person writing the plain kernel would pick; ``values`` the values the
    space offers unless its options say otherwise (None: derived from the
    workload, such as axis names).
    """

    name: str
    per: str | None
    default: Any
    values: tuple[Any, ...] | None
    doc: str
    offered: Callable[[WorkloadLike], bool] | None = None


KNOB_SPECS: tuple[KnobSpec, ...] = (
    KnobSpec(
        "order",
        None,
        ORDER_LOGICAL,
        None,
        "spatial iteration order: 'logical' or a buffer whose physical order to follow",
    ),
    KnobSpec("local_stage", None, False, (False, True), "stage input tiles in __local memory"),
    KnobSpec("vector_axis", None, "", None, "spatial axis the vectors run along ('' : scalar)"),
    KnobSpec("vector", None, 1, (1, 2, 4, 8, 16), "vector width along vector_axis"),
    KnobSpec(
        "vector_transpose",
        None,
        "",
        None,
        "axis along which inputs not contiguous along vector_axis are read, then "
        "transposed in registers (a reduce axis: into a private panel; '': none)",
    ),
    KnobSpec(
        "copy",
        None,
        COPY_VARIANTS[0],
        COPY_VARIANTS,
        "the instruction that copies staged tiles into __local memory",
    ),
    KnobSpec(
        "subgroup",
        None,
        0,
        (0, 8, 16, 32),
        "required sub-group size of cl_intel_subgroups block reads (0: no sub-groups)",
    ),
    KnobSpec(
        "block",
        "axis",
        1,
        (1, 2, 3, 4, 6, 7, 8, 12, 14, 16, 24, 32, 48, 64),
        "register block extent along one spatial axis",
    ),
    KnobSpec(
        "group",
        "dim",
        0,
        (0, 1, 2, 4, 8, 16, 32, 64, 128, 256),
        "work-group extent along one NDRange dimension (all 0: the driver's)",
    ),
    KnobSpec(
        "prefetch",
        None,
        False,
        (False, True),
        "each work-item prefetches its share of the input block the next work-group reads",
        offered=lambda workload: offers_prefetch(workload),
    ),
    KnobSpec(
        "reduce_order",
        None,
        "",
        None,
        "reduce loops, outermost first ('': the workload's own order)",
    ),
    KnobSpec(
        "split", None, 1, (1, 2, 4, 8, 16, 32), "block size of the first reduce loop (1: none)"
    ),
    KnobSpec("unroll", None, 1, (1, 2, 4, 8), "unroll factor of the innermost reduce loop"),
    KnobSpec(
        "reduce_vector",
        None,
        1,
        (1, 4, 8, 16),
        "vector width along the innermost reduce loop, lanes combined at the store (1: scalar)",
    ),
    KnobSpec(
        "peel",
        None,
        False,
        (False, True),
        "a second copy of the reduce loops without index tests, for work-items inside every buffer",
    ),
    KnobSpec("pad_mode", None, "guard", ("guard", "overcompute"), "loops over padded extents"),
    KnobSpec(
        "store",
        None,
        "plain",
        ("plain", "nontemporal"),
        "how the output's vectors are stored: vstoreN, or stores that bypass the caches",
    ),
    KnobSpec(
        "matrix",
        None,
        MATRIX_VARIANTS[0],
        MATRIX_VARIANTS,
        "the matrix instruction that multiplies staged float16 tiles ('none': fma per point)",
        offered=offers_matrix,
    ),
)
"""Every kind of knob, in the order the space chooses them (see the module
docstring)."""

_SPECS = {spec.name: spec for spec in KNOB_SPECS}


def knob_spec(name: str) -> KnobSpec:
    """The spec of a knob name (``"block.j"`` is a ``"block"`` knob)."""
    kind = name.split(".", 1)[0]
    try:
        return _SPECS[kind]
    except KeyError:
        raise LayoutError(f"unknown knob {name!r} (kinds: {', '.join(_SPECS)})") from None


def spatial_axes(workload: WorkloadLike) -> tuple[int, ...]:
    return tuple(k for k, a in enumerate(workload.axes) if a.kind == "spatial")


def reduce_axes(workload: WorkloadLike) -> tuple[int, ...]:
    return tuple(k for k, a in enumerate(workload.axes) if a.kind == "reduce")


def grid_dims(workload: WorkloadLike) -> tuple[tuple[int, ...], ...]:
    """The spatial axes of each NDRange dimension, dimension 0 first: the
    innermost spatial axis, the next one out, then the rest collapsed
    (outermost first within the dimension)."""
    spatial = spatial_axes(workload)
    if not spatial:
        return ((),)
    dims = [(k,) for k in reversed(spatial[-2:])]
    if len(spatial) > 2:
        dims.append(tuple(spatial[:-2]))
    return tuple(dims)


def block_knob(workload: WorkloadLike, axis: int) -> str:
    return f"block.{workload.axes[axis].name}"


def group_knob(workload: WorkloadLike, dim: int) -> str:
    return f"group.{workload.axes[grid_dims(workload)[dim][-1]].name}"


def knob_slots(workload: WorkloadLike) -> tuple[tuple[str, KnobSpec, int | None], ...]:
    """Every knob of ``workload`` as (name, spec, the axis or NDRange
    dimension it is per, None for a single knob), in the order of
    :data:`KNOB_SPECS`, which is the order the space chooses them; the
    blocks of each NDRange dimension's axes are chosen right before that
    dimension's work-group (which the sub-group size, chosen before, constrains)."""
    slots: list[tuple[str, KnobSpec, int | None]] = []
    for spec in KNOB_SPECS:
        if spec.offered is not None and not spec.offered(workload):
            continue
        if spec.per == "axis":
            group = _SPECS["group"]
            for dim, axes in enumerate(grid_dims(workload)):
                slots += [(block_knob(workload, k), spec, k) for k in axes]
                slots.append((group_knob(workload, dim), group, dim))
        elif spec.per is None:
            slots.append((spec.name, spec, None))
    return tuple(slots)


def knob_names(workload: WorkloadLike) -> tuple[str, ...]:
    """Every knob of ``workload``, in the order the space chooses them
    (:func:`knob_slots`)."""
    return tuple(name for name, _, _ in knob_slots(workload))


def knob_default(name: str) -> Any:
    """The baseline's value of knob ``name`` (the same for every workload)."""
    return knob_spec(name).default


def baseline_knobs(workload: WorkloadLike) -> dict[str, Any]:
    """The plain kernel's knobs: logical order, scalar, one point per
    work-item, the driver's work-group, the workload's reduce order, no
    split, unroll, staging or sub-groups, guarded padding."""
    return {name: knob_default(name) for name in knob_names(workload)}


def complete_knobs(workload: WorkloadLike, knobs: Mapping[str, Any]) -> dict[str, Any]:
    """``knobs`` with every missing knob of ``workload`` at its default."""
    return {**baseline_knobs(workload), **knobs}


LEGACY_DEFAULTS: Mapping[str, Any] = MappingProxyType({"per_item": 1, "work_group": 0})
"""The baseline values of knobs that records written before the multi-axis
register blocks hold (one point along the innermost axis per work-item, a
1-D work-group), so that their baselines are still recognised."""


def is_default(name: str, value: Any) -> bool:
    """Whether ``value`` is the baseline's value of knob ``name`` (of the
    table, or of :data:`LEGACY_DEFAULTS`); False for any other name."""
    if name in LEGACY_DEFAULTS:
        return bool(LEGACY_DEFAULTS[name] == value)
    try:
        return bool(knob_spec(name).default == value)
    except LayoutError:
        return False


def axis_by_name(workload: WorkloadLike, name: str) -> int:
    for k, axis in enumerate(workload.axes):
        if axis.name == name:
            return k
    raise LayoutError(f"workload {workload.name!r} has no axis {name!r}")


def reduce_order_text(workload: WorkloadLike, axes: Sequence[int]) -> str:
    """The ``reduce_order`` value of loops ``axes`` (outermost first): ``""``
    for the workload's own order."""
    if tuple(axes) == reduce_axes(workload):
        return ""
    return ",".join(workload.axes[k].name for k in axes)


def parse_reduce_order(workload: WorkloadLike, text: str) -> tuple[int, ...]:
    """The reduce axes named by a ``reduce_order`` value, outermost first."""
    if text == "":
        return reduce_axes(workload)
    axes = tuple(axis_by_name(workload, n) for n in str(text).split(","))
    if sorted(axes) != sorted(reduce_axes(workload)) or len(set(axes)) != len(axes):
        names = [workload.axes[k].name for k in reduce_axes(workload)]
        raise LayoutError(f"reduce_order {text!r} is not an order of the reduce axes {names}")
    return axes


def describe_knobs(knobs: Sequence[tuple[str, Any]]) -> str:
    return ", ".join(f"{k}={v}" for k, v in knobs)


# -- the prefetch knob's inputs -------------------------------------------------
# Which inputs a work-group may prefetch for the next one: the ``prefetch`` knob.
#
# A work-group whose items share one block of an input (a matmul's work-group
# walking down the rows under one panel of ``B``: every item reads the whole
# panel) reads that block from memory in its first item's pass when the input
# is larger than the cache, while the other items find it cached. With
# ``prefetch`` each item, as it reduces, also prefetches its share of the
# block that the next work-group reads, a cache line every few steps, so
# that the next group finds its block cached and the first pass is spread
# over the whole group's compute.
#
# The form decides which inputs may be prefetched (:func:`prefetch_inputs`):
# an input indexed by plain axes, among them the innermost axis of some
# NDRange dimension (so that the next work-group along it reads another block:
# :func:`walk_dims`; a matmul's columns, a convolution's filters) and a reduce
# axis (so that the block is read over the reduction), and by none of the
# axes of some other dimension (so that the work-group's items along it
# share its block: :func:`shared_dims`). The knobs decide which dimension the
# next work-group lies along (:func:`walk_dim`). The space offers the knob
# where such an input does not fit the device's cache; by hand on BERT's FFN
# matmul (128 x 3072 x 768, 9.4 MiB of weights) the prefetching kernel took
# 1.86 ms warm and 2.05 ms with the weights in memory, against 1.99 and 2.62
# ms without (``bench.hand_stream``).


def shared_dims(workload: WorkloadLike, buffer: str) -> tuple[int, ...]:
    """The NDRange dimensions none of whose axes ``buffer`` indexes: a
    work-group's items along them read the same elements of it."""
    buf = next(b for b in workload.buffers if b.name == buffer)
    used = {e.index for e in buf.indices if isinstance(e, Var)}
    dims = grid_dims(workload)
    return tuple(d for d in range(len(dims)) if dims[d] and not set(dims[d]) & used)


def walk_dims(workload: WorkloadLike, buffer: str) -> tuple[int, ...]:
    """The NDRange dimensions whose innermost axis ``buffer`` indexes: where
    the work-groups walk along one of them, the next group reads the next
    block of it."""
    buf = next(b for b in workload.buffers if b.name == buffer)
    used = {e.index for e in buf.indices if isinstance(e, Var)}
    return tuple(d for d, axes in enumerate(grid_dims(workload)) if axes and axes[-1] in used)


def prefetch_inputs(workload: WorkloadLike) -> tuple[str, ...]:
    """The inputs whose next block a work-group may prefetch (module
    docstring), by the statement's form alone."""
    out = []
    for buf in workload.buffers:
        if buf.role != "input" or not all(isinstance(e, Var) for e in buf.indices):
            continue
        used = {e.index for e in buf.indices}
        reduced = any(workload.axes[k].kind == "reduce" for k in used)
        walks = walk_dims(workload, buf.name)
        if walks and reduced and shared_dims(workload, buf.name):
            out.append(buf.name)
    return tuple(out)


ONE_GROUP = -1
"""The :func:`walk_step` of dimensions that each hold one work-group so far."""


def walk_step(walk: int | None, dim: int, items: int, group: int) -> int | None:
    """The dimension the next work-group lies along, given ``walk`` for the
    dimensions before ``dim`` (:data:`ONE_GROUP` while each holds one group,
    None where the driver picks the groups) and ``dim``'s ``items`` work-items
    in groups of ``group``: the first dimension of more than one group (the
    runtimes number groups dimension 0 fastest)."""
    if walk != ONE_GROUP:
        return walk
    if not group:
        return None
    return dim if items > group else ONE_GROUP


def walk_dim(items: Sequence[int], groups: Sequence[int]) -> int | None:
    """:func:`walk_step` over every dimension (``items`` work-items, ``groups``
    their work-group extents): None where the driver picks the work-groups
    or one group covers all."""
    walk: int | None = ONE_GROUP
    for d, (count, group) in enumerate(zip(items, groups, strict=True)):
        walk = walk_step(walk, d, count, group)
    return None if walk == ONE_GROUP else walk


def offers_prefetch(workload: WorkloadLike) -> bool:
    """Whether ``workload`` has the ``prefetch`` knob at all."""
    return bool(prefetch_inputs(workload))


def prefetch_worth(workload: WorkloadLike, cache_bytes: int) -> tuple[str, ...]:
    """The inputs of :func:`prefetch_inputs` larger than ``cache_bytes`` (the
    device's cache; 0, unknown: none), which the knob is offered for."""
    if cache_bytes <= 0:
        return ()
    out = []
    names = prefetch_inputs(workload)
    for buf in workload.buffers:
        if buf.name in names and math.prod(buf.shape) * dtype_bytes(buf.dtype) > cache_bytes:
            out.append(buf.name)
    return tuple(out)
