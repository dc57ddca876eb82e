"""The rules between knobs: one step per knob, walked by one engine.

Each knob of :func:`laytune.space._knobs.knob_names` is a :class:`Step`: the
values it may take and, for a value, the rules it breaks given the knobs
chosen before it and the :class:`~laytune.space._facts.LayoutFacts` of the
layouts. A broken rule is ``(name, reason)``: a *joint rule* has a name (it
is counted in ``SearchSpace.rejections()`` and may be lifted to see what it
removes); a *structural* rule has ``None`` (it keeps each candidate's form
canonical, e.g. ``vector == 1`` exactly when ``vector_axis == ""``, and is
never lifted).

:class:`Rules` uses the steps three ways, so that they cannot disagree:
``count`` (the exact number of valid knob assignments, memoised on what the
remaining steps read, so spaces of billions of candidates count in
milliseconds), ``walk`` (every valid assignment, in order) and ``explain``
(why one given assignment is invalid: ``check_candidate``). The space's
``suggest`` asks one step at a time for its domain given the earlier choices.

State keys: knob names hold chosen values; ``@vectors``, ``@crossed``, ``@padded``,
``@orders``, ``@copies`` and ``@subgroups`` the layout facts;
``@local_copies`` the copy facts of the chosen local tile layouts (set by
the space's choice of local layouts, or by ``check_candidate`` from the
candidate's); ``#copy_subgroups`` the sub-group sizes the chosen copy allows;
``#blocks`` and ``#groups`` the products of the register
blocks and work-group extents chosen so far; ``#order_items`` the work-items
of the chosen order (dimension 0); ``@reduce_vectors`` the part of
``@vectors`` along reduce axes (:meth:`Rules.state_of` derives it). A late
step reads such a part, not the whole fact, so that the counts after the
last step reading the whole are shared by the layouts that differ only in
what it asked.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from laytune.device_info import DeviceInfo
from laytune.layout import bounds, variables
from laytune.space._copies import SUBGROUP_SIZES, SubgroupFit, TileCopyFacts
from laytune.space._facts import PANEL_BYTES, LayoutFacts, panel_axes, subgroup_inputs, vector_axes
from laytune.space._knobs import (
    ONE_GROUP,
    ORDER_LOGICAL,
    axis_by_name,
    block_knob,
    grid_dims,
    group_knob,
    knob_slots,
    parse_reduce_order,
    prefetch_worth,
    reduce_axes,
    reduce_order_text,
    shared_dims,
    spatial_axes,
    walk_dims,
    walk_step,
)
from laytune.space._matrix_rules import MatrixStep, watch_schedule
from laytune.space._step import Broken, Setting, State, Step, strict_in
from laytune.space._workload import WorkloadLike, dtype_bytes

__all__ = ["JOINT_RULES", "PREFERENCES", "Rules", "Setting", "Step", "strict_in"]

JOINT_RULES = (
    "vector_access",
    "vector_transpose",
    "vector_block",
    "vector_overlap",
    "order_scalar",
    "order_duplicates_logical",
    "register_budget",
    "work_group_divides",
    "work_group_device_limit",
    "split_divides",
    "unroll_divides",
    "reduce_vector",
    "local_stage_order",
    "local_stage_vector",
    "local_stage_block",
    "local_stage_needs_work_group",
    "local_stage_reduce",
    "local_stage_unroll",
    "local_vector_access",
    "local_memory_budget",
    "copy_inside",
    "copy_rows",
    "copy_strided",
    "copy_contiguous",
    "copy_subgroup_block",
    "subgroup_lanes",
    "subgroup_block_access",
    "device_capability",
    "overcompute_needs_padding",
    "nontemporal_store",
    "prefetch_shared",
    "matrix_capability",
    "matrix_tile_load",
)
"""Every joint rule, as :meth:`SearchSpace.rejections` names them.

``vector_access``: every buffer indexed by the vector axis serves the width
(``VectorAccess``), directly or through ``vector_transpose``.
``vector_transpose``: an in-register transpose along an axis is offered only
where some buffer refuses the vector directly and every such buffer is an
input that serves it along that axis, in an unstaged kernel.
``vector_block``: the blocks along the vector axis and the transpose axis are
multiples of the width. ``vector_overlap``: a width that does not divide
the vector axis's extent runs the last register block along it from
``extent - block`` (overlapping the block before it, whose outputs it
computes and stores again, the same values: a statement never reads its
output); it needs every buffer indexed by the axis to serve unaligned runs
(``UnalignedVectorAccess``: unit stride along the axis, output included)
(a block longer than the extent is no value of its knob), and refuses what reads or stores vectors
at aligned positions or shares them across work-items: ``vector_transpose``,
``local_stage``, ``subgroup`` and nontemporal stores. ``order_scalar``: following a buffer's physical order
is scalar, one point per work-item. ``order_duplicates_logical``: following
a buffer whose layout keeps the logical order is not offered.
``register_budget``: the register block holds at most the options'
``max_block_points`` outputs (an element-wise statement that transposes
chunks in registers holds one chunk: it stores each before the next is read). ``work_group_divides``: a work-group extent
divides its NDRange dimension in a kernel of sub-group block reads
(elsewhere the NDRange rounds up to whole work-groups and the items past the
last block return at once). ``work_group_device_limit``: the device's
``max_work_item_sizes`` and ``max_work_group_size``. ``split_divides``:
reduce loops have no tails. ``unroll_divides``: an unroll no longer than its
loop (one that does not divide it leaves its last steps to a loop of single
steps; a prime depth of 509 unrolled 4 times). ``reduce_vector``: vectors
along the innermost reduce loop need every input indexed by it to serve them
(``VectorAccess``), ``reduce_vector`` times ``unroll`` to divide the loop,
and a scalar, unstaged, unsplit kernel in the logical order without
sub-groups. ``local_stage_*``: what
staging needs (the logical order, vectors along the innermost axis only, a
work-group that covers the staging plan's block with its register blocks, no
reduce reordering, an unroll that divides a stage).
``local_vector_access``: a vector that reads a local tile needs its layout to
serve it. ``local_memory_budget``: the tiles fit ``local_mem_size``.
``copy_inside``: a copy other than ``elementwise`` needs every footprint
inside its input. ``copy_rows``, ``copy_strided``, ``copy_contiguous``,
``copy_subgroup_block``: the global and local layouts of every staged tile
pass the copy's constraint (``RowPointerTileLoad``, ``StridedTileCopy``,
``ContiguousTileCopy``, ``SubgroupBlockAccess``; see
:mod:`laytune.space._copies`). ``subgroup_lanes``: a sub-group's lanes are
consecutive work-items of one work-group row that read consecutive
elements (the logical order, one scalar point per work-item along the
innermost axis, a work-group whose dimension-0 extent the sub-group size
divides). ``subgroup_block_access``: every input read along that axis
serves the block read (``SubgroupBlockAccess``). ``device_capability``: the
device has the extension an instruction needs (``cl_intel_subgroups``,
``cl_intel_subgroup_local_block_io``) and the sub-group size.
``overcompute_needs_padding``: overcompute is offered only when some buffer
is padded. ``nontemporal_store``: nontemporal stores are vector stores of the
output (a ``vector_axis``), of an output too large to stay in the
last-level cache (``DeviceInfo.holds``: streamed past the cache, a 0.8 MiB
output saved its kernel 3 us and cost the kernel reading it next 56, on a
Zen 5 host); ``device_capability`` also refuses them where the
device's compiler lacks ``__builtin_nontemporal_store``. ``prefetch_shared``:
prefetching the next work-group's block needs an unstaged kernel in the
logical order without sub-groups or a private panel, set work-groups, more
than one of them along some NDRange dimension (the first such is where the
next group lies), and some input larger than the cache that it reads along
that dimension and whose block the work-group's items share (``device_capability``: the
compiler has ``__builtin_prefetch``). ``matrix_capability``: the device has the matrix instruction
(:func:`laytune.space._matrix.matrix_capability` says why not).
``matrix_tile_load``: both local tiles suit the instruction's fragment load
(``MatrixTileLoad``).
"""

COPY_RULES = {
    "rows": "copy_rows",
    "async_strided": "copy_strided",
    "async_contiguous": "copy_contiguous",
    "subgroup_block": "copy_subgroup_block",
}
"""The joint rule of each copy but ``elementwise``."""


PREFERENCES = frozenset({"order_duplicates_logical", "register_budget"})
"""Joint rules that keep a space lean but whose candidates still lower:
``check_candidate`` accepts what breaks only these."""


class OrderStep(Step):
    """``order``. Writes ``#order_items``: the work-items along NDRange
    dimension 0 when the chosen order follows a buffer's layout (its
    physical size), 0 in the logical order; the work-group steps read that,
    not the layouts' orders."""

    name = "order"
    reads = frozenset({"@orders"})

    @property
    def writes(self) -> frozenset[str]:
        return frozenset({"#order_items"})

    def values(self, state: State) -> Sequence[Any]:
        return (ORDER_LOGICAL, *self.s.orders)

    def apply(self, state: State, value: Any) -> None:
        state[self.name] = value
        state["#order_items"] = (
            0
            if value == ORDER_LOGICAL
            else next(size for name, _, size in state["@orders"] if name == value)
        )

    def check(self, state: State, value: Any) -> list[Broken]:
        for name, keeps, _ in state["@orders"]:
            if name == value and keeps:
                return [
                    (
                        "order_duplicates_logical",
                        f"order {value!r}: the layout of {value!r} keeps the logical order, "
                        f"which 'logical' already walks",
                    )
                ]
        return []


class StageStep(Step):
    """``local_stage``. Choosing it forgets the layout facts the choice makes
    irrelevant (the copies of an unstaged kernel, the block reads of a staged
    one), so that the engine counts the layouts that differ only there
    together."""

    name = "local_stage"
    reads = frozenset({"order"})

    @property
    def writes(self) -> frozenset[str]:
        return frozenset({"@copies", "@subgroups"})

    def apply(self, state: State, value: Any) -> None:
        state[self.name] = value
        if value:
            state["@subgroups"] = frozenset()
        else:
            state["@copies"] = ()

    def values(self, state: State) -> Sequence[Any]:
        return (False, True) if self.s.staging is not None else (False,)

    def check(self, state: State, value: Any) -> list[Broken]:
        if value and state["order"] != ORDER_LOGICAL:
            return [
                (
                    "local_stage_order",
                    f"local staging walks the logical order; order {state['order']!r} is not "
                    f"'logical'",
                )
            ]
        return []


class VectorAxisStep(Step):
    name = "vector_axis"
    reads = frozenset({"order", "local_stage"})

    def values(self, state: State) -> Sequence[Any]:
        return ("", *(self.s.axis_name(k) for k in spatial_axes(self.s.workload)))

    def check(self, state: State, value: Any) -> list[Broken]:
        out: list[Broken] = []
        if value and state["order"] != ORDER_LOGICAL:
            out.append(("order_scalar", f"order {state['order']!r} is scalar: no vector_axis"))
        inner = self.s.axis_name(spatial_axes(self.s.workload)[-1])
        if value and state["local_stage"] and value != inner:
            out.append(
                (
                    "local_stage_vector",
                    f"local staging vectorises along the innermost spatial axis {inner!r} only, "
                    f"not {value!r}",
                )
            )
        return out


class VectorStep(Step):
    name = "vector"
    reads = frozenset({"vector_axis", "local_stage", "@vectors", "@crossed", "@overlap"})

    def __init__(self, setting: Setting, reasons: Callable[[int, int], str] | None) -> None:
        super().__init__(setting)
        self.reasons = reasons

    def values(self, state: State) -> Sequence[Any]:
        return self.s.vectors

    def check(self, state: State, value: Any) -> list[Broken]:
        axis_name = state["vector_axis"]
        if not axis_name:
            return [] if value == 1 else [(None, "vector > 1 needs a vector_axis")]
        if value == 1:
            return [(None, "a vector_axis needs vector > 1 (vector 1 is written vector_axis '')")]
        axis = next(k for k, a in enumerate(self.s.workload.axes) if a.name == axis_name)
        extent = self.s.extent(axis)
        if extent % value and value > extent:
            return [(None, f"vector {value} is wider than the extent {extent} of {axis_name!r}")]
        if extent % value:
            return self._overlap(state, axis, value)
        if (axis, value) not in state["@vectors"] and not any(
            (axis, value, u) in state["@crossed"] for u in vector_axes(self.s.workload)
        ):
            why = self.reasons(axis, value) if self.reasons else ""
            return [("vector_access", f"vector {value} along {axis_name!r}: {why}".rstrip(": "))]
        return []

    def _overlap(self, state: State, axis: int, value: int) -> list[Broken]:
        """A width that does not divide the extent: overlapping last blocks."""
        name, extent = self.s.axis_name(axis), self.s.extent(axis)
        out: list[Broken] = []
        if (axis, value) not in state["@overlap"]:
            why = self.reasons(axis, value) if self.reasons else ""
            out.append(
                (
                    "vector_overlap",
                    "vector_overlap: "
                    f"vector {value} does not divide the extent {extent} of {name!r}: "
                    f"{why or 'some buffer indexed by it does not hold unaligned runs'}",
                )
            )
        if state["local_stage"]:
            out.append(
                (
                    "vector_overlap",
                    "vector_overlap: "
                    f"vector {value} does not divide the extent {extent} of {name!r}: a staged "
                    "kernel's tiles are not read in overlapping runs",
                )
            )
        return out


def overlapping(setting: Setting, state: State) -> bool:
    """Whether the chosen vector does not divide its axis's extent (the last
    register block along it overlaps the one before it)."""
    name = state.get("vector_axis")
    if not name:
        return False
    return bool(setting.extent(axis_by_name(setting.workload, name)) % state["vector"])


class VectorTransposeStep(Step):
    """``vector_transpose``: the axis along which the inputs that cannot serve
    the vector are read, then transposed in registers (see
    :mod:`laytune.space._knobs`)."""

    name = "vector_transpose"
    reads = frozenset(
        {"vector_axis", "vector", "local_stage", "@vectors", "@crossed", "@overlap", "@padded"}
    )

    def __init__(self, setting: Setting, reasons: Callable[[int, int], str] | None) -> None:
        super().__init__(setting)
        self.reasons = reasons

    def values(self, state: State) -> Sequence[Any]:
        return ("", *(self.s.axis_name(k) for k in vector_axes(self.s.workload)))

    def check(self, state: State, value: Any) -> list[Broken]:
        axis_name, width = state["vector_axis"], state["vector"]
        if not axis_name:
            return [] if not value else [(None, "vector_transpose needs a vector_axis")]
        axis = axis_by_name(self.s.workload, axis_name)
        if overlapping(self.s, state):
            if not value:
                return []  # the vector step decided
            return [
                (
                    "vector_overlap",
                    "vector_overlap: "
                    f"vector {width} does not divide the extent {self.s.extent(axis)} of "
                    f"{axis_name!r}: overlapping runs are read directly, not transposed",
                )
            ]
        direct = (axis, width) in state["@vectors"]
        if not value:
            if direct:
                return []
            why = self.reasons(axis, width) if self.reasons else ""
            return [("vector_access", f"vector {width} along {axis_name!r}: {why}".rstrip(": "))]
        if value == axis_name:
            return [(None, "vector_transpose reads along an axis other than vector_axis")]
        if direct:
            return [
                (
                    "vector_transpose",
                    f"every buffer serves vector {width} along {axis_name!r}: nothing to "
                    f"transpose along {value!r}",
                )
            ]
        out: list[Broken] = []
        if state["local_stage"]:
            out.append(("vector_transpose", "a staged kernel reads its tiles, not transposes"))
        across = axis_by_name(self.s.workload, value)
        if self.s.workload.axes[across].kind == "reduce" and state["@padded"]:
            # a padded layout may run the reduce loop past the panel's extent
            out.append(("vector_transpose", f"a panel along {value!r} needs unpadded layouts"))
        if (axis, width, across) not in state["@crossed"]:
            why = self.reasons(across, width) if self.reasons else ""
            out.append(
                (
                    "vector_transpose",
                    f"vector {width} along {axis_name!r} through {value!r}: some input that "
                    f"refuses it directly does not serve vector {width} along {value!r} "
                    f"({why})".replace(" ()", ""),
                )
            )
        return out


def subgroup_extensions(dtype: str, staged: bool) -> tuple[str, ...]:
    """The extensions sub-group block reads (and, ``staged``, the block
    writes into ``__local`` tiles) of ``dtype`` need."""
    needed = ["cl_intel_subgroups"]
    if dtype_bytes(dtype) == 2:  # the _us block reads and writes of 16-bit elements
        needed.append("cl_intel_subgroups_short")
    if staged:
        needed.append("cl_intel_subgroup_local_block_io")
    return tuple(needed)


def _missing(device: DeviceInfo, extensions: Sequence[str]) -> list[str]:
    return [e for e in extensions if not device.has_extension(e)]


class CopyStep(Step):
    """The ``copy`` knob: the instruction of the staging copy, for every
    staged tile (see :mod:`laytune.space._copies`). Pairs each staged
    input's global facts (``@copies``) with its local tile's
    (``@local_copies``). Choosing ``subgroup_block`` writes the sub-group
    sizes that serve every pair (``#copy_subgroups``) for the ``subgroup``
    step, so that no later step reads the layouts' facts."""

    name = "copy"
    reads = frozenset({"local_stage", "@copies", "@local_copies"})

    def __init__(self, setting: Setting) -> None:
        super().__init__(setting)
        # the facts of many layout combinations are equal: judge each once
        self._checked: dict[tuple[Any, ...], list[Broken]] = {}
        self._fits: dict[tuple[Any, ...], SubgroupFit] = {}

    @property
    def writes(self) -> frozenset[str]:
        return frozenset({"#copy_subgroups"})

    def values(self, state: State) -> Sequence[Any]:
        return self.s.copies

    def apply(self, state: State, value: Any) -> None:
        state[self.name] = value
        fit = None
        if value == "subgroup_block":
            key = (state["@copies"], state.get("@local_copies"))
            fit = self._fits.get(key)
            if fit is None:
                fit = self._fits[key] = _subgroup_fit(_pairs(state))
        state["#copy_subgroups"] = fit

    def check(self, state: State, value: Any) -> list[Broken]:
        if value == "elementwise":
            return []
        key = (value, state["local_stage"], state["@copies"], state.get("@local_copies"))
        found = self._checked.get(key)
        if found is None:
            found = self._checked[key] = self._check(state, value)
        return found

    def _check(self, state: State, value: Any) -> list[Broken]:
        if not state["local_stage"]:
            return [(None, f"copy {value!r} copies staged tiles; local_stage is False")]
        if self.s.outside:
            return [("copy_inside", f"copy {value!r}: {self.s.outside[0][1]}")]
        out: list[Broken] = []
        if value == "subgroup_block":
            dtype = self.s.workload.buffers[0].dtype
            missing = _missing(self.s.device, subgroup_extensions(dtype, staged=True))
            if missing:  # the device's reason alone: no layout would do
                return [
                    (
                        "device_capability",
                        f"copy 'subgroup_block' needs {', '.join(missing)}, which "
                        f"{self.s.device.name} lacks",
                    )
                ]
        rule = COPY_RULES[value]
        for glob, local in _pairs(state):
            why = _pair_refuses(value, glob, local)
            if why:
                out.append((rule, f"copy {value!r}: {why}"))
        return out


def copy_outcome(copies: Any, local_copies: Any) -> tuple[Any, ...]:
    """What the ``copy`` and ``subgroup`` steps conclude from the global
    copy facts ``copies`` paired with the local ``local_copies``: the copies
    they allow, the sub-group sizes of ``subgroup_block`` and the matrix
    fragment loads each local tile takes (read by the ``matrix`` step).
    Local layouts with the same outcome count alike."""
    pairs = _pairs({"@copies": copies, "@local_copies": local_copies})
    allowed = tuple(
        copy for copy in COPY_RULES if not any(_pair_refuses(copy, g, x) for g, x in pairs)
    )
    matrix = tuple(
        frozenset(k for k in local.accepts if k.startswith("matrix:")) for local in local_copies
    )
    return allowed, _subgroup_fit(pairs).sizes, matrix


def _pairs(state: State) -> list[tuple[TileCopyFacts, TileCopyFacts]]:
    """(global, local) copy facts of every staged input whose tile has a
    layout to judge (``check_candidate`` reports a missing one)."""
    locals_ = {f.buffer: f for f in state.get("@local_copies") or ()}
    return [
        (glob, locals_[f"{glob.buffer}.local"])
        for glob in state["@copies"]
        if f"{glob.buffer}.local" in locals_
    ]


def _subgroup_fit(pairs: Sequence[tuple[TileCopyFacts, TileCopyFacts]]) -> SubgroupFit:
    sizes = frozenset(SUBGROUP_SIZES)
    reasons: dict[int, str] = {}
    for glob, local in pairs:
        for side in (glob, local):
            for n in sizes - side.subgroups:
                reasons.setdefault(n, side.why(f"subgroup_block:{n}"))
            sizes &= side.subgroups
    return SubgroupFit(sizes, tuple(sorted(reasons.items())))


def _pair_refuses(copy: str, glob: TileCopyFacts, local: TileCopyFacts) -> str:
    """Why ``copy`` cannot move ``glob``'s footprints into ``local``'s tile
    ("" when it can; for ``subgroup_block``, when no sub-group size serves
    both sides)."""
    if copy == "subgroup_block":
        if glob.subgroups & local.subgroups:
            return ""
        fit = _subgroup_fit([(glob, local)])
        return next((why for _, why in fit.reasons if why), "") or (
            f"no sub-group size serves both {glob.buffer!r} and {local.buffer!r}"
        )
    for side in (glob, local):
        if copy not in side.accepts:
            return side.why(copy)
    if copy == "async_contiguous" and glob.pattern != local.pattern:
        return (
            f"the footprints of {glob.buffer!r} hold their elements in another order than "
            f"{local.buffer!r}'s layout, so one contiguous copy would misplace them"
        )
    return ""


def panel_across(setting: Setting, state: State) -> int | None:
    """The reduce axis the chosen vector is transposed through into a
    private panel (``vector_transpose`` naming a reduce axis), or None."""
    across = state["vector_transpose"]
    if not across or not state["vector_axis"]:
        return None
    u = axis_by_name(setting.workload, across)
    return u if setting.workload.axes[u].kind == "reduce" else None


class BlockStep(Step):
    def __init__(self, setting: Setting, axis: int) -> None:
        super().__init__(setting)
        self.axis = axis
        self.name = block_knob(setting.workload, axis)
        self.reads = frozenset(
            {
                "order",
                "local_stage",
                "vector_axis",
                "vector",
                "vector_transpose",
                "#blocks",
                "#panel",
                "subgroup",
            }
        )
        self.innermost = axis == grid_dims(setting.workload)[0][-1]
        self._extends: dict[tuple[int, int], bool] = {}

    @property
    def writes(self) -> frozenset[str]:
        return frozenset({"#blocks", "#panel"})

    def values(self, state: State) -> Sequence[Any]:
        return tuple(b for b in self.s.blocks if b <= self.s.extent(self.axis)) or (1,)

    def _panel(self, state: State) -> int:
        """The extent of reduce axis ``u`` when the vector is transposed
        through it into a private panel whose block this axis extends; 0
        otherwise."""
        u = panel_across(self.s, state)
        if u is None:
            return 0
        v = axis_by_name(self.s.workload, state["vector_axis"])
        extends = self._extends.get((v, u))
        if extends is None:  # counting asks for every state: the axes once per pair
            extends = self._extends[(v, u)] = self.axis in panel_axes(self.s.workload, v, u)
        return self.s.extent(u) if extends else 0

    def apply(self, state: State, value: Any) -> None:
        state[self.name] = value
        state["#blocks"] = state.get("#blocks", 1) * value
        if self._panel(state):
            state["#panel"] = state.get("#panel", 1) * value

    def check(self, state: State, value: Any) -> list[Broken]:
        out: list[Broken] = []
        name = self.s.axis_name(self.axis)
        if value > 1 and state["order"] != ORDER_LOGICAL:
            out.append(("order_scalar", f"order {state['order']!r} computes one point per item"))
        if name in (state["vector_axis"], state["vector_transpose"]) and value % state["vector"]:
            out.append(
                (
                    "vector_block",
                    f"{self.name} {value} is not a multiple of the vector {state['vector']}",
                )
            )
        extent = self._panel(state)
        if extent:
            size = (
                state.get("#panel", 1)
                * value
                * extent
                * dtype_bytes(self.s.workload.buffers[0].dtype)
            )
            if size > PANEL_BYTES:
                out.append(
                    (
                        "vector_transpose",
                        f"vector_transpose {state['vector_transpose']!r}: a private panel of "
                        f"{size} bytes, over the budget of {PANEL_BYTES}",
                    )
                )
        points = state.get("#blocks", 1) * value
        if self.s.workload.reduction is None and state["vector_transpose"] and not extent:
            # stored chunk by chunk as each is transposed: one chunk is held
            points = state["vector"] * state["vector"]
        if points > self.s.max_block_points:
            out.append(
                (
                    "register_budget",
                    f"the register block would hold {points} outputs, over the budget of "
                    f"{self.s.max_block_points}",
                )
            )
        if self.innermost and value != 1 and state["subgroup"] and not state["local_stage"]:
            out.append(
                (
                    "subgroup_lanes",
                    f"subgroup {state['subgroup']}: the lanes read consecutive points of "
                    f"{name!r}, one per work-item: {self.name} is not 1",
                )
            )
        plan = self.s.staging
        if state["local_stage"] and plan is not None:
            blocked = plan.block[self.axis] if self.axis in plan.spatial else 1
            if blocked % value:
                out.append(
                    (
                        "local_stage_block",
                        f"local staging: {self.name} {value} does not divide the staging "
                        f"block's {blocked} values of {name!r}",
                    )
                )
        return out


class GroupStep(Step):
    def __init__(self, setting: Setting, dim: int) -> None:
        super().__init__(setting)
        self.dim = dim
        self.axes = grid_dims(setting.workload)[dim]
        self.name = group_knob(setting.workload, dim)
        blocks = {block_knob(setting.workload, k) for k in self.axes}
        # a later dimension reads whether the first took the driver's group
        # (0), not its value: counting keys its memo on what later steps read
        self.reads = frozenset(
            {"order", "local_stage", "#groups", "#order_items", "subgroup", *blocks}
            | ({"#walk", "#driver"} if dim else set())
        )

    @property
    def writes(self) -> frozenset[str]:
        return frozenset({"#groups", "#walk"} | (set() if self.dim else {"#driver"}))

    def values(self, state: State) -> Sequence[Any]:
        return self.s.groups

    def apply(self, state: State, value: Any) -> None:
        state[self.name] = value
        state["#groups"] = state.get("#groups", 1) * max(value, 1)
        if not self.dim:
            state["#driver"] = value == 0
        # the dimension the next work-group lies along (``prefetch``)
        walk = state["#walk"] if self.dim else ONE_GROUP
        if walk == ONE_GROUP:  # count the items only while it is still open
            walk = walk_step(walk, self.dim, self.items(state), value)
        state["#walk"] = walk

    def items(self, state: State) -> int:
        """Work-items along this dimension (unstaged)."""
        order = state["order"]
        if order != ORDER_LOGICAL:
            if self.dim:
                return 1
            return state["#order_items"]
        w = self.s.workload
        return math.prod(-(-self.s.extent(k) // state[block_knob(w, k)]) for k in self.axes)

    def staged_extent(self, state: State) -> int:
        """The work-group extent local staging needs along this dimension."""
        plan = self.s.staging
        assert plan is not None
        if len(self.axes) != 1:
            return 1
        (axis,) = self.axes
        if axis not in plan.spatial:
            return 1
        return plan.block[axis] // state[block_knob(self.s.workload, axis)]

    def check(self, state: State, value: Any) -> list[Broken]:
        out: list[Broken] = []
        if self.dim and state["#driver"] != (value == 0):
            return [(None, "work-group extents are all 0 (the driver's) or all set")]
        size = state["subgroup"]
        if not self.dim and size and (value == 0 or value % size):
            out.append(
                (
                    "subgroup_lanes",
                    f"subgroup {size}: a sub-group's lanes are consecutive work-items of one "
                    f"work-group row (a partial sub-group's block reads are undefined): "
                    f"{self.name} {value} is not a multiple of {size}",
                )
            )
        if state["local_stage"]:
            if value == 0:
                return [
                    (
                        "local_stage_needs_work_group",
                        "local staging needs a work-group of its own (group 0: the driver's)",
                    )
                ]
            need = self.staged_extent(state)
            if value != need:
                out.append(
                    (
                        "local_stage_block",
                        f"local staging: {self.name} must be {need} so that the work-group "
                        f"covers the staging block, got {value}",
                    )
                )
        elif value and size:
            # elsewhere the NDRange rounds up to whole work-groups and the
            # items past the last block return at once; a sub-group's block
            # reads need every item of it
            items = self.items(state)
            if items % value:
                out.append(
                    (
                        "work_group_divides",
                        f"{self.name} {value} does not divide the {items} work-items of "
                        f"NDRange dimension {self.dim} (subgroup {size}: a partial "
                        f"sub-group's block reads are undefined)",
                    )
                )
        device = self.s.device
        if value and (
            value > device.max_work_item_sizes[self.dim]
            or state.get("#groups", 1) * value > device.max_work_group_size
        ):
            out.append(
                (
                    "work_group_device_limit",
                    f"{self.name} {value}: over the device's limits (max_work_item_sizes "
                    f"{tuple(device.max_work_item_sizes)}, max_work_group_size "
                    f"{device.max_work_group_size})",
                )
            )
        return out


class SubgroupStep(Step):
    """The ``subgroup`` knob: 0, or the sub-group size of the kernel's block
    reads (see :mod:`laytune.space._knobs`)."""

    name = "subgroup"

    def __init__(self, setting: Setting, reasons: Callable[[int], str] | None) -> None:
        super().__init__(setting)
        self.reasons = reasons
        w = setting.workload
        spatial = spatial_axes(w)
        self.inner = spatial[-1] if spatial else None
        self.inputs = subgroup_inputs(w)
        self.reads = frozenset(
            {
                "order",
                "local_stage",
                "copy",
                "vector_axis",
                "vector",
                "vector_transpose",
                "@subgroups",
                "#copy_subgroups",
            }
        )

    def values(self, state: State) -> Sequence[Any]:
        return self.s.subgroups

    def check(self, state: State, value: Any) -> list[Broken]:
        staged = bool(state["local_stage"])
        copying = state["copy"] == "subgroup_block"
        if value == 0:
            return [(None, "copy 'subgroup_block' needs a sub-group size")] if copying else []
        if panel_across(self.s, state) is not None:
            return [("vector_transpose", f"subgroup {value}: a panel's kernel reads no block")]
        if overlapping(self.s, state):
            return [
                (
                    "vector_overlap",
                    "vector_overlap: "
                    f"subgroup {value}: vector {state['vector']} does not divide the extent of "
                    f"{state['vector_axis']!r}, and overlapping blocks run without sub-groups",
                )
            ]
        if staged and not copying:
            return [
                (
                    None,
                    "a staged kernel uses sub-groups only for its copy: subgroup > 0 needs "
                    "copy 'subgroup_block'",
                )
            ]
        if not staged and not self.inputs:
            return [(None, "no input is read along the innermost axis as one bare index")]
        device, out = self.s.device, []
        dtype = self.s.workload.buffers[0].dtype
        missing = _missing(device, subgroup_extensions(dtype, staged))
        if missing or value not in device.sub_group_sizes:
            have = (
                f"sub-group sizes {list(device.sub_group_sizes)}"
                if not missing
                else (f"no {', '.join(missing)}")
            )
            return [("device_capability", f"subgroup {value}: {device.name} has {have}")]
        if staged:
            return out + self._copy_rules(state, value)
        return out + self._load_rules(state, value)

    def _copy_rules(self, state: State, value: int) -> list[Broken]:
        fit: SubgroupFit = state["#copy_subgroups"]
        if value in fit.sizes:
            return []
        why = dict(fit.reasons).get(value, "")
        return [("copy_subgroup_block", f"copy 'subgroup_block': {why}".rstrip(": "))]

    def _load_rules(self, state: State, value: int) -> list[Broken]:
        out: list[Broken] = []
        w, inner = self.s.workload, self.inner
        assert inner is not None
        lanes = f"subgroup {value}: the lanes must be consecutive points of {w.axes[inner].name!r}"
        if state["order"] != ORDER_LOGICAL:
            out.append(("subgroup_lanes", f"{lanes}; order {state['order']!r} is not 'logical'"))
        axis_name = state["vector_axis"]
        if axis_name:
            axis = next(k for k, a in enumerate(w.axes) if a.name == axis_name)
            vectored = [
                b.name for b in w.buffers if b.name in self.inputs and axis in variables_of(b)
            ]
            if vectored:
                out.append(
                    (
                        "subgroup_lanes",
                        f"{lanes}, each reading one element: the vector along {axis_name!r} "
                        f"reads {vectored[0]!r}",
                    )
                )
        if value not in state["@subgroups"]:
            why = self.reasons(value) if self.reasons else ""
            out.append(("subgroup_block_access", f"subgroup {value}: {why}".rstrip(": ")))
        return out


class ReduceOrderStep(Step):
    name = "reduce_order"
    reads = frozenset({"local_stage"})

    def values(self, state: State) -> Sequence[Any]:
        w = self.s.workload
        orders = itertools.permutations(reduce_axes(w))
        return tuple(dict.fromkeys(reduce_order_text(w, order) for order in orders))

    def check(self, state: State, value: Any) -> list[Broken]:
        if value and state["local_stage"]:
            return [("local_stage_reduce", "local staging keeps the workload's reduce order")]
        return []


def innermost_loop(setting: Setting, state: State) -> tuple[str, int]:
    """(name, trip count) of the innermost reduce loop under ``state``."""
    w = setting.workload
    loops = parse_reduce_order(w, state["reduce_order"])
    if state["split"] > 1:
        return f"{setting.axis_name(loops[0])} % {state['split']}", state["split"]
    plan = setting.staging
    last = loops[-1]
    if state["local_stage"] and plan is not None:
        return setting.axis_name(last), plan.stage_extent(last)
    return setting.axis_name(last), setting.extent(last)


class SplitStep(Step):
    name = "split"
    reads = frozenset({"reduce_order", "local_stage"})

    def values(self, state: State) -> Sequence[Any]:
        return self.s.splits

    def check(self, state: State, value: Any) -> list[Broken]:
        if value == 1:
            return []
        w = self.s.workload
        loops = parse_reduce_order(w, state["reduce_order"])
        if len(loops) < 2:
            return [(None, "split reorders nothing with fewer than two reduce axes")]
        extent = self.s.extent(loops[0])
        if value >= extent:
            return [(None, f"split {value} covers the whole axis {self.s.axis_name(loops[0])!r}")]
        out: list[Broken] = []
        if extent % value:
            out.append(
                (
                    "split_divides",
                    f"split {value} does not divide the extent {extent} of "
                    f"{self.s.axis_name(loops[0])!r}",
                )
            )
        if state["local_stage"]:
            out.append(("local_stage_reduce", "local staging does not split reduce loops"))
        return out


class UnrollStep(Step):
    name = "unroll"
    reads = frozenset({"reduce_order", "split", "local_stage"})

    def values(self, state: State) -> Sequence[Any]:
        return self.s.unrolls

    def check(self, state: State, value: Any) -> list[Broken]:
        if value == 1:
            return []
        if not reduce_axes(self.s.workload):
            return [(None, "an element-wise workload has no reduce loop to unroll")]
        name, trips = innermost_loop(self.s, state)
        if state["local_stage"] and trips % value:
            why = f"unroll {value} does not divide one stage's {trips} values of {name!r}"
            return [("local_stage_unroll", why)]
        if value > trips:
            return [("unroll_divides", f"unroll {value} exceeds the {trips} values of {name!r}")]
        return []


class ReduceVectorStep(Step):
    """``reduce_vector`` (see :mod:`laytune.space._knobs`)."""

    name = "reduce_vector"
    reads = frozenset(
        {
            "order",
            "local_stage",
            "vector_axis",
            "subgroup",
            "reduce_order",
            "split",
            "unroll",
            "@reduce_vectors",
        }
    )

    def derived(self, state: State) -> State:
        """``@reduce_vectors``: the pairs of ``@vectors`` along reduce axes."""
        reduce = set(reduce_axes(self.s.workload))
        return {"@reduce_vectors": frozenset(p for p in state["@vectors"] if p[0] in reduce)}

    def values(self, state: State) -> Sequence[Any]:
        w = self.s.workload
        return super().values(state) if reduce_axes(w) and w.reduction else (1,)

    def check(self, state: State, value: Any) -> list[Broken]:
        if value == 1:
            return []
        why = []
        if state["vector_axis"]:
            why.append(f"its accumulators run along the reduce loop, not {state['vector_axis']!r}")
        if state["order"] != ORDER_LOGICAL or state["local_stage"] or state["subgroup"]:
            why.append("it runs in the logical order, unstaged, without sub-groups")
        if state["split"] > 1:
            why.append("it vectorises an unsplit innermost loop")
        loops = parse_reduce_order(self.s.workload, state["reduce_order"])
        axis, unroll = loops[-1], state["unroll"]
        name, extent = self.s.axis_name(axis), self.s.extent(axis)
        if extent % (value * unroll):
            why.append(f"{value} x unroll {unroll} does not divide the {extent} values of {name!r}")
        elif (axis, value) not in state["@reduce_vectors"]:
            why.append(f"some input does not hold {value} consecutive values of {name!r}")
        return [("reduce_vector", f"reduce_vector {value}: {w}") for w in why]


def reads_outside(workload: WorkloadLike) -> bool:
    """Whether some input is read outside its shape (its zero padding)."""
    ranges = [(0, a.extent - 1) for a in workload.axes]
    for buf in workload.buffers:
        if buf.role != "input":
            continue
        for index, extent in zip(buf.indices, buf.shape, strict=True):
            lo, hi = bounds(index, ranges)
            if lo < 0 or hi > extent - 1:
                return True
    return False


class PeelStep(Step):
    name = "peel"
    reads = frozenset({"local_stage", "subgroup"})

    def values(self, state: State) -> Sequence[Any]:
        return (False, True) if reads_outside(self.s.workload) else (False,)

    def check(self, state: State, value: Any) -> list[Broken]:
        if value and state["local_stage"]:
            return [(None, "local staging reads tiles that hold the zeros: nothing to peel")]
        if value and state["subgroup"]:
            return [
                (
                    "subgroup_lanes",
                    f"subgroup {state['subgroup']}: the peeled interior and border may split a "
                    f"sub-group, and every lane must reach its block reads",
                )
            ]
        return []


class PadModeStep(Step):
    name = "pad_mode"
    reads = frozenset({"@padded"})

    def check(self, state: State, value: Any) -> list[Broken]:
        if value == "overcompute" and not state["@padded"]:
            return [("overcompute_needs_padding", "overcompute needs some padded buffer")]
        return []


class StoreStep(Step):
    """``store``: how the output's vectors are stored (see :mod:`laytune.space._knobs`)."""

    name = "store"
    reads = frozenset({"vector_axis", "vector", "@lanes"})

    def check(self, state: State, value: Any) -> list[Broken]:
        if value != "nontemporal":
            return []
        out: list[Broken] = []
        device = self.s.device
        if not device.has_builtin("nontemporal_store"):
            out.append(
                (
                    "device_capability",
                    f"store 'nontemporal': the compiler of {device.name} has no "
                    f"__builtin_nontemporal_store",
                )
            )
        written = sum(
            math.prod(b.shape) * dtype_bytes(b.dtype)
            for b in self.s.workload.buffers
            if b.role == "output"
        )
        if device.holds(written):
            out.append(
                (
                    "nontemporal_store",
                    f"store 'nontemporal': the output ({written / 2**20:.2f} MiB) stays in "
                    f"{device.name}'s last-level cache for whoever reads it next; stored past "
                    "the cache, that reader waits on memory",
                )
            )
        if not state["vector_axis"]:
            out.append(("nontemporal_store", "store 'nontemporal' stores vectors: no vector_axis"))
        elif overlapping(self.s, state):
            out.append(
                (
                    "vector_overlap",
                    "vector_overlap: "
                    f"store 'nontemporal' needs vectors aligned to their width; vector "
                    f"{state['vector']} does not divide the extent of {state['vector_axis']!r}, "
                    "so the last block's stores are unaligned",
                )
            )
        else:
            axis = axis_by_name(self.s.workload, state["vector_axis"])
            if (axis, state["vector"]) in state["@lanes"]:
                out.append(
                    (
                        "nontemporal_store",
                        "store 'nontemporal' stores vectors whole; the output's layout is not "
                        f"contiguous along {state['vector_axis']!r}, so it is stored lane by lane",
                    )
                )
        return out


class PrefetchStep(Step):
    """``prefetch``: each work-item prefetches its share of the next
    work-group's block of an input its items share (see
    :func:`laytune.space._knobs.prefetch_inputs`)."""

    name = "prefetch"

    def __init__(self, setting: Setting) -> None:
        super().__init__(setting)
        w = setting.workload
        self.inputs = prefetch_worth(w, setting.device.cache_size)
        self.groups = [group_knob(w, d) for d in range(len(grid_dims(w)))]
        self.shared = {name: shared_dims(w, name) for name in self.inputs}
        self.walks = {name: walk_dims(w, name) for name in self.inputs}
        shared = {self.groups[d] for name in self.inputs for d in self.shared[name]}
        # read right after the work-groups are chosen (the knob table's
        # order), so that no later step's memo keeps them; nothing where the
        # knob is not offered
        self.reads = frozenset(
            {"order", "local_stage", "vector_transpose", "subgroup", "#walk", *shared}
            if self.inputs
            else ()
        )

    def values(self, state: State) -> Sequence[Any]:
        return (False, True) if self.inputs else (False,)

    def check(self, state: State, value: Any) -> list[Broken]:
        if not value:
            return []
        out: list[Broken] = []
        device = self.s.device
        if not device.has_builtin("prefetch"):
            out.append(
                (
                    "device_capability",
                    f"the compiler of {device.name} has no __builtin_prefetch",
                )
            )
        if state["order"] != ORDER_LOGICAL or state["local_stage"] or state["subgroup"]:
            out.append(
                (
                    "prefetch_shared",
                    "it walks the logical grid of an unstaged kernel without sub-groups",
                )
            )
        elif state["vector_transpose"]:
            out.append(("prefetch_shared", "a private panel is read once, not shared"))
        elif state["#walk"] is None:
            out.append(("prefetch_shared", "it needs set work-groups (group 0: the driver's)"))
        elif state["#walk"] == ONE_GROUP:
            out.append(("prefetch_shared", "one work-group covers the grid: there is no next one"))
        else:
            walk = state["#walk"]
            ahead = [n for n in self.inputs if walk in self.walks[n]]
            sharing = [
                n for n in ahead if math.prod(state[self.groups[d]] for d in self.shared[n]) > 1
            ]
            if not ahead:
                out.append(
                    (
                        "prefetch_shared",
                        f"the next work-group lies along NDRange dimension {walk}, which "
                        f"{', '.join(self.inputs)} does not index: it reads the same block",
                    )
                )
            elif not sharing:
                out.append(
                    (
                        "prefetch_shared",
                        f"no work-group's items share a block of {', '.join(ahead)}",
                    )
                )
        return out


Reasons = Callable[[Any], str] | None
"""Why the layouts refuse a vector (``(axis, width)``) or sub-group block
reads (``("subgroup", size)``); None when no one asks."""

#: The rule step of each kind of knob of :data:`~laytune.space._knobs.KNOB_SPECS`:
#: (setting, reasons, the axis or NDRange dimension of a per-axis or per-dimension knob).
STEPS: dict[str, Callable[[Setting, Reasons, Any], Step]] = {
    "order": lambda s, r, _: OrderStep(s),
    "local_stage": lambda s, r, _: StageStep(s),
    "vector_axis": lambda s, r, _: VectorAxisStep(s),
    "vector": lambda s, r, _: VectorStep(s, (lambda a, w: r((a, w))) if r else None),
    "vector_transpose": lambda s, r, _: VectorTransposeStep(
        s, (lambda a, w: r((a, w))) if r else None
    ),
    "copy": lambda s, r, _: CopyStep(s),
    "subgroup": lambda s, r, _: SubgroupStep(s, (lambda n: r(("subgroup", n))) if r else None),
    "block": lambda s, r, axis: BlockStep(s, axis),
    "group": lambda s, r, dim: GroupStep(s, dim),
    "reduce_order": lambda s, r, _: ReduceOrderStep(s),
    "split": lambda s, r, _: SplitStep(s),
    "unroll": lambda s, r, _: UnrollStep(s),
    "reduce_vector": lambda s, r, _: ReduceVectorStep(s),
    "peel": lambda s, r, _: PeelStep(s),
    "pad_mode": lambda s, r, _: PadModeStep(s),
    "store": lambda s, r, _: StoreStep(s),
    "prefetch": lambda s, r, _: PrefetchStep(s),
    "matrix": lambda s, r, _: MatrixStep(s),
}


def build_steps(setting: Setting, reasons: Reasons = None) -> list[Step]:
    """The steps of ``setting.workload``, one per knob of
    :func:`~laytune.space._knobs.knob_slots`, in its order (the order of
    the knob table: it exists once)."""
    return watch_schedule(
        [STEPS[spec.name](setting, reasons, arg) for _, spec, arg in knob_slots(setting.workload)]
    )


def facts_state(facts: LayoutFacts) -> State:
    return {
        "@vectors": facts.vectors,
        "@crossed": facts.crossed,
        "@padded": facts.padded,
        "@orders": facts.orders,
        "@copies": facts.copies,
        "@subgroups": facts.subgroups,
        "@overlap": facts.overlap,
        "@lanes": facts.lanes,
    }


def variables_of(buf: Any) -> set[int]:
    """The workload axes a buffer's indices use."""
    return {k for e in buf.indices for k in variables(e)}


class Rules:
    """Counting, walking and explaining over a list of steps (see the module
    docstring). ``extra`` is appended after the knob steps: a step whose
    value is not a knob (the space's choice of local tile layouts)."""

    def __init__(self, steps: Sequence[Step]) -> None:
        self.steps = list(steps)
        needed: list[frozenset[str]] = [frozenset()] * (len(self.steps) + 1)
        for i in range(len(self.steps) - 1, -1, -1):
            needed[i] = needed[i + 1] | self.steps[i].reads
        self._needed = [tuple(sorted(n)) for n in needed]
        self._needed_sets = needed
        self._memo: dict[tuple[Any, ...], int] = {}
        self._reads = [tuple(sorted(step.reads)) for step in self.steps]
        self._domains: dict[tuple[Any, ...], list[Any]] = {}
        self._lifting: dict[tuple[Any, ...], tuple[int, dict[str, int]]] = {}
        self._break_memo: dict[tuple[Any, ...], tuple[list[Any], list[tuple[Any, str]]]] = {}

    def state_of(self, facts: LayoutFacts) -> State:
        """The state the steps start from: the layout facts
        (:func:`facts_state`) and the parts of them steps read instead
        (:meth:`Step.derived`)."""
        state = facts_state(facts)
        base = dict(state)
        for step in self.steps:
            state.update(step.derived(base))
        return state

    def domain(self, i: int, state: State, lifted: frozenset[str] = frozenset()) -> list[Any]:
        """The values of step ``i`` that break no rule but those in
        ``lifted`` (memoised on what the step reads)."""
        step = self.steps[i]
        key = (i, lifted, tuple(map(state.get, self._reads[i])))
        found = self._domains.get(key)
        if found is None:
            found = self._domains[key] = [
                v
                for v in step.values(state)
                if all(rule is not None and rule in lifted for rule, _ in step.check(state, v))
            ]
        return found

    def count(
        self, state: State, lifted: frozenset[str] = frozenset(), i: int = 0, cap: int = 0
    ) -> int:
        """Valid assignments of steps ``i`` onward, given ``state``; with a
        positive ``cap``, ``min(count, cap)``, which stops summing a step's
        values once the cap is reached (``cap=1``: whether any assignment is
        valid, the first one found ends the walk)."""
        if i == len(self.steps):
            return 1
        values = tuple(map(state.get, self._needed[i]))
        found = self._memo.get((i, lifted, 0, values))  # the full count serves every cap
        if found is not None:
            return min(found, cap) if cap else found
        key = (i, lifted, cap, values)
        if cap:
            found = self._memo.get(key)
            if found is not None:
                return found
        step = self.steps[i]
        domain = self.domain(i, state, lifted)
        read_later = self._needed_sets[i + 1]
        if step.name not in read_later and not (step.writes & read_later):
            total = len(domain) * self.count(state, lifted, i + 1, cap) if domain else 0
        else:
            total = 0
            classes = None if step.name in read_later else step.classes(state, domain)
            for value, n in classes or [(v, 1) for v in domain]:
                child = dict(state)
                step.apply(child, value)
                total += n * self.count(child, lifted, i + 1, cap)
                if cap and total >= cap:
                    break
        if cap:
            total = min(total, cap)
        self._memo[key] = total
        return total

    def lifting_counts(self, state: State, i: int = 0) -> tuple[int, dict[str, int]]:
        """Valid assignments of steps ``i`` onward, and per rule how many
        more there are with that rule alone lifted: ``count(state,
        frozenset({rule}), i) == base + more.get(rule, 0)``, for every rule
        at once. One pass whose memo is shared by all rules, where a count
        per lifted rule would walk the space once per rule."""
        if i == len(self.steps):
            return 1, {}
        key = (i, tuple(map(state.get, self._needed[i])))
        found = self._lifting.get(key)
        if found is not None:
            return found
        step = self.steps[i]
        valid, alone = self._breaks(i, state)
        read_later = self._needed_sets[i + 1]
        # every value leaves the same state to the later steps
        independent = step.name not in read_later and not (step.writes & read_later)
        base, more = 0, Counter[str]()

        def add(value: Any, rule: str | None, times: int = 1) -> None:
            nonlocal base
            if independent:
                child = state
            else:
                child = dict(state)
                step.apply(child, value)
            if rule is None:  # valid as it is: every rule's count has its subtree
                b, d = self.lifting_counts(child, i + 1)
                base += times * b
                for r, n in d.items():
                    more[r] += times * n
            else:  # valid once ``rule`` is lifted: below it, that rule alone is
                more[rule] += times * self.count(child, frozenset({rule}), i + 1)

        if independent:
            if valid:
                add(None, None, len(valid))
            for rule, n in Counter(rule for _, rule in alone).items():
                add(None, rule, n)
        else:
            # values that leave the later steps the same state count once,
            # times how many they are (the local tile layouts' copy classes)
            grouped = step.name not in read_later
            for value, n in (grouped and step.classes(state, valid)) or [(v, 1) for v in valid]:
                add(value, None, n)
            by_rule: dict[str, list[Any]] = {}
            for value, rule in alone:
                by_rule.setdefault(rule, []).append(value)
            for rule, values in by_rule.items():
                for value, n in (grouped and step.classes(state, values)) or [
                    (v, 1) for v in values
                ]:
                    add(value, rule, n)
        found = self._lifting[key] = (base, {r: n for r, n in more.items() if n})
        return found

    def _breaks(self, i: int, state: State) -> tuple[list[Any], list[tuple[Any, str]]]:
        """Step ``i``'s values that break no rule, and those that break one
        liftable rule only (with it); memoised on what the step reads."""
        key = (i, tuple(map(state.get, self._reads[i])))
        found = self._break_memo.get(key)
        if found is None:
            step = self.steps[i]
            valid, alone = [], []
            for value in step.values(state):
                rules = {rule for rule, _ in step.check(state, value)}
                if not rules:
                    valid.append(value)
                elif len(rules) == 1 and None not in rules:
                    alone.append((value, rules.pop()))
            found = self._break_memo[key] = (valid, alone)
        return found

    def walk(
        self, state: State, i: int = 0, held: Mapping[str, Any] | None = None
    ) -> Iterator[State]:
        """Every valid assignment of steps ``i`` onward, in order; with
        ``held`` (step name -> value), only those that give its steps those
        values (the others are not walked)."""
        if i == len(self.steps):
            yield state
            return
        step = self.steps[i]
        for value in self.domain(i, state):
            if held and step.name in held and not strict_in(value, (held[step.name],)):
                continue
            child = dict(state)
            step.apply(child, value)
            if self.count(child, frozenset(), i + 1, cap=1):
                yield from self.walk(child, i + 1, held)

    def explain(self, state: State, values: Mapping[str, Any]) -> list[str]:
        """Why the assignment ``values`` is invalid (empty when valid); the
        space's :data:`PREFERENCES` are not invalidity. An invalid value is
        explained, then replaced by the first valid one so that later steps
        can still be judged."""
        reasons: list[str] = []
        for i, step in enumerate(self.steps):
            value = values.get(step.name)
            choices = step.values(state)
            if not strict_in(value, choices):
                shown = list(choices) if len(choices) <= 12 else f"{list(choices[:12])[:-1]} ..."
                reasons.append(f"{step.name} {value!r} is not one of {shown}")
                domain = self.domain(i, state, PREFERENCES)
                value = domain[0] if domain else choices[0]
            else:
                broken = step.check(state, value)
                reasons += [
                    f"{step.name}: {why}" for rule, why in broken if rule not in PREFERENCES
                ]
            step.apply(state, value)
        return reasons
