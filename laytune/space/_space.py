"""SearchSpace: every valid candidate of one workload on one device.

How the space is organised
--------------------------
1. Per global buffer, the layouts of the families (:mod:`._generate`),
   each checked against the padding budget, ``Image2DRead`` (layouts with an
   axis separator) and the buffer's extra constraints; what fails is counted
   in :meth:`SearchSpace.rejections`. Identity comes first.
2. Per staged input (the tiles of :func:`~laytune.space.staging_plan`), the
   ``__local`` tile layouts, each within the local memory budget, sorted by
   their bank-conflict score (ascending, stable): the worst of a column read
   by ``min(rows, 32)`` lanes and of ldmatrix-style 16-byte row segments read
   by ``min(rows, 8)`` lanes.
3. The knobs, chosen in the dependency order of ``KNOBS``: order, vector,
   per_item, work_group, unroll, local_stage (then the local layouts, those
   that accept the chosen vector where it reads a tile), pad_mode. Each
   knob's domain depends on the global layouts only through a small
   *signature* (the vector widths every vector buffer accepts, whether any
   buffer is padded, and for each order buffer whether its layout keeps the
   logical order and its physical size). ``len(space)`` sums, over the
   signatures, the number of layout combinations with that signature (a
   convolution over buffers, never the product itself) times the number of
   knob combinations valid for it.

Every candidate the space yields passes :func:`check_candidate`, so that
``laytune.codegen.lower`` accepts it, and ``enumerate`` and ``suggest``
yield exactly the same set.
"""

from __future__ import annotations

import hashlib
import itertools
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from laytune.device_info import DeviceInfo
from laytune.exceptions import LayoutRejectedError
from laytune.layout import Layout, Var
from laytune.space._candidate import Candidate, PadValue
from laytune.space._check import (
    check_candidate,
    order_buffers,
    staging_plan_or_none,
)
from laytune.space._constraints import (
    BankConflicts,
    Constraint,
    Image2DRead,
    LocalMemoryBudget,
    PaddingBudget,
    VectorAccess,
    Verdict,
)
from laytune.space._generate import SpaceOptions, global_layouts, local_layouts
from laytune.space._staging import (
    STAGING_RULES,
    StagingPlan,
    local_vector_dims,
    staging_knob_reasons,
)
from laytune.space._workload import (
    BASELINE_KNOBS,
    KNOB_LOCAL_STAGE,
    KNOB_ORDER,
    KNOB_PAD_MODE,
    KNOB_PER_ITEM,
    KNOB_UNROLL,
    KNOB_VECTOR,
    KNOB_WORK_GROUP,
    ORDER_LOGICAL,
    VECTOR_WIDTHS,
    WorkloadLike,
    dtype_bytes,
    index_text,
    innermost_reduce_axis,
    innermost_spatial_axis,
    local_buffer_name,
    neutral_element,
    spatial_points,
    vector_access_requirements,
)

__all__ = ["JOINT_RULES", "Rejection", "SearchSpace"]

JOINT_RULES = (
    "vector_access",
    "order_scalar",
    "order_duplicates_logical",
    "work_group_device_limit",
    *STAGING_RULES,
    "local_vector_access",
    "local_memory_budget",
    "overcompute_needs_padding",
)
"""Joint rules across buffers and knobs, as named in :meth:`SearchSpace.rejections`.

``vector_access``: a vector width needs every buffer it touches to accept
``VectorAccess``. ``order_scalar``: a physical order needs per_item = vector =
1. ``order_duplicates_logical``: following a buffer whose layout keeps the
logical order is not offered. ``work_group_device_limit``: work-group sizes
over the device's limits. ``local_stage_needs_work_group``,
``local_stage_block``, ``local_stage_order``, ``local_stage_unroll``: the
knobs staging needs (:func:`~laytune.space.staging_knob_reasons`: a nonzero
work-group that covers the staging plan's block of outputs, the logical
order, an unroll that divides a stage). ``local_vector_access``: a vector
that reads a local tile needs its layout to accept ``VectorAccess``.
``local_memory_budget``: the local tiles together fit
``device.local_mem_size``. ``overcompute_needs_padding``: overcompute is
offered only when some buffer is padded.
"""


@dataclass(frozen=True)
class Rejection:
    """What one constraint or joint rule removed from a space.

    ``scope`` is "layout" (``removed`` counts (buffer, layout) pairs that
    failed it; a layout failing several constraints counts for each) or
    "joint" (``removed`` counts whole candidates that lifting this rule
    alone would add). ``example`` is one removed item with its reason.
    """

    constraint: str
    scope: str
    removed: int
    example: str

    def __str__(self) -> str:
        return f"{self.constraint} [{self.scope}]: removed {self.removed}; e.g. {self.example}"


@dataclass(frozen=True)
class _Signature:
    widths: frozenset[int]
    padded: bool
    orders: tuple[tuple[str, bool, int], ...]  # (buffer, keeps logical order, physical size)


@dataclass
class _BufferPlan:
    name: str
    shape: tuple[int, ...]
    dtype: str
    role: str
    layouts: list[Layout]
    keys: list[str]
    widths: list[frozenset[int]]  # vector widths each layout accepts (all when untouched)
    keeps_order: list[bool]
    vector_reasons: dict[int, str]  # width -> first rejection reason among its layouts


def _unique_keys(layouts: Sequence[Layout]) -> list[str]:
    keys, seen = [], Counter()
    for layout in layouts:
        key = layout.describe()
        seen[key] += 1
        keys.append(key if seen[key] == 1 else f"{key}#{seen[key]}")
    return keys


def _param_name(base: str, domain: Sequence[Any], full: Sequence[Any]) -> str:
    """Optuna needs one fixed choice list per parameter name: a restricted
    domain gets its own name."""
    if list(domain) == list(full):
        return base
    text = ",".join(str(v) for v in domain)
    if len(text) > 40:
        text = hashlib.sha1(text.encode()).hexdigest()[:10]
    return f"{base}|{text}"


class SearchSpace:
    """The valid candidates of ``workload`` on ``device``.

    Build cost: every generated layout is checked once (vectorised numpy over
    its whole shape). ``len()`` is exact and cheap even for huge spaces;
    ``enumerate()`` is a generator in a deterministic order (buffers sorted
    by name, layouts identity first, then knobs in dependency order);
    ``suggest(trial)`` draws one candidate with optuna categorical
    parameters. The space is immutable after construction.
    """

    def __init__(
        self,
        workload: WorkloadLike,
        device: DeviceInfo,
        options: SpaceOptions | None = None,
    ) -> None:
        self.workload = workload
        self.device = device
        self.options = options or SpaceOptions()
        self._layout_rejections: dict[str, list[Any]] = {}
        self._vector_dims = vector_access_requirements(workload)
        self._order_buffers = order_buffers(workload)
        inner = innermost_spatial_axis(workload)
        self._inner_extent = workload.axes[inner].extent if inner is not None else 1
        red = innermost_reduce_axis(workload)
        self._reduce_extent = workload.axes[red].extent if red is not None else 1
        self._plans = [self._plan(buf) for buf in sorted(workload.buffers, key=lambda b: b.name)]
        self._staging: StagingPlan | None = staging_plan_or_none(workload)
        self._local = self._local_plans()
        self._local_combos_cache: dict[tuple[bool, int], list[tuple[int, ...]]] = {}
        self._signatures = self._count_signatures()
        self._knob_cache: dict[tuple[_Signature, frozenset[str]], list[dict[str, Any]]] = {}
        self._full_domains = self._collect_full_domains()

    # -- construction ---------------------------------------------------------
    def _reject_layout(self, constraint: str, buffer: str, layout: Layout, reason: str) -> None:
        entry = self._layout_rejections.setdefault(constraint, [0, ""])
        entry[0] += 1
        if not entry[1]:
            entry[1] = f"buffer {buffer!r} layout {layout.describe()}: {reason}"

    def _check_layout(
        self, name: str, layout: Layout, dtype: str, constraints: Sequence[Constraint]
    ) -> bool:
        ok = True
        for constraint in constraints:
            verdict = constraint.check(layout, layout.shape, dtype, self.device)
            if not verdict.ok:
                self._reject_layout(verdict.constraint, name, layout, verdict.reasons[0])
                ok = False
        return ok

    def _plan(self, buf: Any) -> _BufferPlan:
        opts = self.options
        name, shape, dtype = buf.name, tuple(buf.shape), buf.dtype
        budget = PaddingBudget(opts.padding_budget)
        extra = opts.constraints_for(name)
        kept: list[Layout] = []
        for layout in global_layouts(shape, dtype, opts.families_for(name), opts):
            constraints: list[Constraint] = [budget, *extra]
            if layout.image_rank == 2:
                constraints.append(Image2DRead(buf.role))
            elif layout.image_rank > 2:
                continue
            if self._check_layout(name, layout, dtype, constraints):
                kept.append(layout)
        if not kept:
            raise LayoutRejectedError(
                f"no layout of buffer {name!r} {shape} passes its constraints: "
                + "; ".join(f"{k}: {v[1]}" for k, v in self._layout_rejections.items())
            )
        all_widths = frozenset(w for w in VECTOR_WIDTHS if self._inner_extent % w == 0)
        widths: list[frozenset[int]] = []
        vector_reasons: dict[int, str] = {}
        dim = self._vector_dims.get(name, -1)
        for layout in kept:
            if name not in self._vector_dims:
                widths.append(all_widths)
            elif dim is None:
                widths.append(frozenset({1}))
            else:
                ok = {1}
                for w in sorted(all_widths - {1}):
                    verdict = VectorAccess(dim, w).check(layout, shape, dtype, self.device)
                    if verdict.ok:
                        ok.add(w)
                    elif w not in vector_reasons:
                        vector_reasons[w] = (
                            f"buffer {name!r} layout {layout.describe()}: {verdict.reasons[1]}"
                            if len(verdict.reasons) > 1
                            else verdict.reasons[0]
                        )
                widths.append(frozenset(ok))
        keeps = [self._keeps_logical_order(buf, layout) for layout in kept]
        return _BufferPlan(
            name, shape, dtype, buf.role, kept, _unique_keys(kept), widths, keeps, vector_reasons
        )

    def _keeps_logical_order(self, buf: Any, layout: Layout) -> bool:
        if buf.name not in self._order_buffers:
            return False
        axes = [e.index for e in buf.indices if isinstance(e, Var)]
        if axes != sorted(axes) or layout.has_padding or layout.image_rank != 1:
            return False
        offsets = layout.index_map.flat_offsets(layout.shape)
        return bool(np.array_equal(offsets, np.arange(offsets.size)))

    def _local_plans(self) -> list[tuple[str, str, list[Layout], list[str], list[float]]]:
        """(local name, dtype, layouts sorted by score, keys, scores) per staged input;
        fills ``self._local_widths``: per local buffer, the vector widths each of
        its layouts accepts (every width for a tile no vector reads)."""
        buffers = {b.name: b for b in self.workload.buffers}
        budget = LocalMemoryBudget()
        vector_dims = local_vector_dims(self.workload, self._staging) if self._staging else {}
        self._local_widths: list[list[frozenset[int]]] = []
        out = []
        tiles = self._staging.tiles if self._staging else {}
        for name, shape in sorted(tiles.items()):
            dtype = buffers[name].dtype
            local = local_buffer_name(name)
            extra = self.options.constraints_for(local)
            scored = []
            for layout in local_layouts(shape, self.options):
                if not self._check_layout(local, layout, dtype, [budget, *extra]):
                    continue
                scored.append((self._bank_score(layout, dtype), len(scored), layout))
            scored.sort(key=lambda t: (t[0], t[1]))
            layouts = [t[2] for t in scored]
            out.append((local, dtype, layouts, _unique_keys(layouts), [t[0] for t in scored]))
            dim = vector_dims.get(local)
            self._local_widths.append(
                [
                    frozenset(
                        w
                        for w in VECTOR_WIDTHS
                        if dim is None
                        or w == 1
                        or VectorAccess(dim, w).check(layout, shape, dtype, self.device).ok
                    )
                    for layout in layouts
                ]
            )
        return out

    def _bank_score(self, layout: Layout, dtype: str) -> float:
        rows, cols = layout.shape[-2:] if len(layout.shape) >= 2 else (1, layout.shape[0])
        rank, opts = len(layout.shape), self.options
        kwargs = {"banks": opts.banks, "bank_bytes": opts.bank_bytes, "rank": rank}
        patterns = []
        if rank >= 2:
            patterns.append(BankConflicts.column(min(rows, 32), **kwargs))
            seg = 16 // dtype_bytes(dtype)
            if seg and cols % seg == 0:
                patterns.append(BankConflicts.row_segments(min(rows, 8), seg, **kwargs))
        scores = [p.check(layout, layout.shape, dtype, self.device).score for p in patterns]
        return float(max((s for s in scores if s is not None), default=1.0))

    def _local_combos(self, budgeted: bool = True, vector: int = 1) -> list[tuple[int, ...]]:
        """Index tuples into the local layout lists, those within the local
        memory budget (all when not ``budgeted``) whose layouts accept
        ``vector`` (1: all), by summed score."""
        key = (budgeted, vector)
        if key in self._local_combos_cache:
            return self._local_combos_cache[key]
        budget = LocalMemoryBudget().budget(self.device)
        sizes = [
            [lay.physical_size * dtype_bytes(dtype) for lay in layouts]
            for _, dtype, layouts, _, _ in self._local
        ]
        scores = [plan[4] for plan in self._local]
        choices = [
            [i for i, widths in enumerate(per_layout) if vector in widths]
            for per_layout in self._local_widths
        ]
        combos = [
            combo
            for combo in itertools.product(*choices)
            if not budgeted or sum(s[i] for s, i in zip(sizes, combo, strict=True)) <= budget
        ]
        combos.sort(key=lambda c: (sum(s[i] for s, i in zip(scores, c, strict=True)), c))
        self._local_combos_cache[key] = combos
        return combos

    def _locals_for(
        self, vector: int, lifted: frozenset[str] = frozenset()
    ) -> list[tuple[int, ...]]:
        """The local layout combinations a staged candidate with ``vector`` may take."""
        width = 1 if "local_vector_access" in lifted else vector
        return self._local_combos("local_memory_budget" not in lifted, width)

    def _layout_signature_parts(self, plan: _BufferPlan, k: int) -> _Signature:
        layout = plan.layouts[k]
        orders: tuple[tuple[str, bool, int], ...] = ()
        if plan.name in self._order_buffers:
            orders = ((plan.name, plan.keeps_order[k], layout.physical_size),)
        return _Signature(plan.widths[k], layout.has_padding, orders)

    @staticmethod
    def _merge(a: _Signature, b: _Signature) -> _Signature:
        return _Signature(a.widths & b.widths, a.padded or b.padded, a.orders + b.orders)

    def _count_signatures(self) -> dict[_Signature, int]:
        all_widths = frozenset(VECTOR_WIDTHS)
        counts: dict[_Signature, int] = {_Signature(all_widths, False, ()): 1}
        for plan in self._plans:
            per_layout = Counter(
                self._layout_signature_parts(plan, k) for k in range(len(plan.layouts))
            )
            merged: Counter[_Signature] = Counter()
            for sig, n in counts.items():
                for part, m in per_layout.items():
                    merged[self._merge(sig, part)] += n * m
            counts = dict(merged)
        return counts

    # -- knob domains -----------------------------------------------------------
    def _knob_combos(
        self, sig: _Signature, lifted: frozenset[str] = frozenset()
    ) -> list[dict[str, Any]]:
        """Every valid knob assignment for layouts of signature ``sig``, in
        dependency order; ``lifted`` names joint rules to ignore (for
        rejection counts). Local layout choices multiply the assignments
        with ``local_stage=True`` (see :meth:`_knob_count`)."""
        cache_key = (sig, lifted)
        if cache_key in self._knob_cache:
            return self._knob_cache[cache_key]
        combos: list[dict[str, Any]] = []
        for order, size in self._order_domain(sig, lifted):
            for vector in self._vector_domain(sig, order, lifted):
                for per_item in self._per_item_domain(order, vector, lifted):
                    items = size if order != ORDER_LOGICAL else self._items(per_item)
                    for group in self._work_group_domain(items, per_item, lifted):
                        for unroll in self._unroll_domain():
                            knobs = (order, vector, per_item, items, group, unroll)
                            for stage in self._stage_domain(*knobs, lifted):
                                for pad_mode in self._pad_mode_domain(sig, lifted):
                                    combos.append(
                                        {
                                            KNOB_ORDER: order,
                                            KNOB_VECTOR: vector,
                                            KNOB_PER_ITEM: per_item,
                                            KNOB_WORK_GROUP: group,
                                            KNOB_UNROLL: unroll,
                                            KNOB_LOCAL_STAGE: stage,
                                            KNOB_PAD_MODE: pad_mode,
                                        }
                                    )
        self._knob_cache[cache_key] = combos
        return combos

    def _knob_count(self, sig: _Signature, lifted: frozenset[str] = frozenset()) -> int:
        """Knob assignments times local layout choices for ``sig``."""
        return sum(
            len(self._locals_for(c[KNOB_VECTOR], lifted)) if c[KNOB_LOCAL_STAGE] else 1
            for c in self._knob_combos(sig, lifted)
        )

    def _items(self, per_item: int) -> int:
        return max(spatial_points(self.workload) // per_item, 1)

    def _order_domain(self, sig: _Signature, lifted: frozenset[str]) -> list[tuple[str, int]]:
        out = [(ORDER_LOGICAL, 0)]
        for name, keeps, size in sig.orders:
            if keeps and "order_duplicates_logical" not in lifted:
                continue
            out.append((name, size))
        return out

    def _vector_domain(self, sig: _Signature, order: str, lifted: frozenset[str]) -> list[int]:
        if order != ORDER_LOGICAL and "order_scalar" not in lifted:
            return [1]
        widths = [w for w in VECTOR_WIDTHS if self._inner_extent % w == 0]
        if "vector_access" not in lifted:
            widths = [w for w in widths if w in sig.widths]
        return widths

    def _per_item_domain(self, order: str, vector: int, lifted: frozenset[str]) -> list[int]:
        if order != ORDER_LOGICAL and "order_scalar" not in lifted:
            return [1]
        values = sorted({*self.options.per_items, 1, vector})
        return [p for p in values if p % vector == 0 and self._inner_extent % p == 0]

    def _work_group_domain(self, items: int, per_item: int, lifted: frozenset[str]) -> list[int]:
        """0, and the sizes that divide ``items`` or could stage (a staged
        NDRange is one work-group per block); :meth:`_stage_domain` then
        says which of staging and not staging each size allows."""
        limit = min(self.device.max_work_group_size, self.device.max_work_item_sizes[0])
        out = [0]
        for g in sorted(set(self.options.work_groups) - {0}):
            stages = self._staging is not None and (
                g * per_item == self._staging.outputs or "local_stage_block" in lifted
            )
            if items % g and not stages:
                continue
            if g > limit and "work_group_device_limit" not in lifted:
                continue
            out.append(g)
        return out

    def _unroll_domain(self) -> list[int]:
        values = sorted({*self.options.unrolls, 1})
        return [u for u in values if self._reduce_extent % u == 0]

    def _stage_domain(
        self,
        order: str,
        vector: int,
        per_item: int,
        items: int,
        group: int,
        unroll: int,
        lifted: frozenset[str],
    ) -> list[bool]:
        """False when the NDRange takes ``group`` unstaged, True when staging
        can run these knobs; empty when neither."""
        out = [False] if group == 0 or items % group == 0 else []
        if self._staging is None or not self._locals_for(vector, lifted):
            return out
        broken = staging_knob_reasons(self.workload, self._staging, order, per_item, group, unroll)
        if all(rule in lifted for rule, _ in broken):
            out.append(True)
        return out

    def _pad_mode_domain(self, sig: _Signature, lifted: frozenset[str]) -> list[str]:
        if sig.padded or "overcompute_needs_padding" in lifted:
            return ["guard", "overcompute"]
        return ["guard"]

    def _collect_full_domains(self) -> dict[str, list[Any]]:
        values: dict[str, set[Any]] = {}
        for sig in self._signatures:
            for combo in self._knob_combos(sig):
                for k, v in combo.items():
                    values.setdefault(k, set()).add(v)
        return {k: sorted(v, key=lambda x: (str(type(x)), x)) for k, v in values.items()}

    # -- the public surface ----------------------------------------------------
    @property
    def buffers(self) -> tuple[str, ...]:
        """Global buffer names, in the order the space chooses their layouts."""
        return tuple(p.name for p in self._plans)

    def layouts(self, buffer: str) -> tuple[Layout, ...]:
        """The valid layouts of a buffer (global, or a ``"<input>.local"`` tile)."""
        for plan in self._plans:
            if plan.name == buffer:
                return tuple(plan.layouts)
        for local, _, layouts, _, _ in self._local:
            if local == buffer:
                return tuple(layouts)
        raise KeyError(f"space has no buffer {buffer!r} (buffers: {self.buffers})")

    def local_scores(self) -> dict[str, tuple[tuple[str, float], ...]]:
        """Per local buffer: (layout, bank-conflict degree), best first."""
        return {
            local: tuple(zip(keys, scores, strict=True))
            for local, _, _, keys, scores in self._local
        }

    def _count(self, lifted: frozenset[str] = frozenset()) -> int:
        return sum(n * self._knob_count(sig, lifted) for sig, n in self._signatures.items())

    def __len__(self) -> int:
        return self._count()

    @property
    def size(self) -> int:
        """``len(space)`` as a Python int (no ``sys.maxsize`` limit)."""
        return self._count()

    def identity(self) -> Candidate:
        """The baseline: identity layouts, logical order, scalar, one point
        per work-item, driver's work-group, no unroll, no staging, guard.
        Raises LayoutRejectedError if a buffer's extra constraints refuse it."""
        layouts = {p.name: p.layouts[0] for p in self._plans}
        for plan in self._plans:
            if not plan.layouts[0].is_identity:
                raise LayoutRejectedError(
                    f"identity layout of buffer {plan.name!r} is rejected by this space's "
                    f"constraints; see space.rejections()"
                )
        return Candidate.make(layouts, BASELINE_KNOBS)

    def _candidate(self, choice: Sequence[int], knobs: Mapping[str, Any]) -> Candidate:
        layouts = {p.name: p.layouts[k] for p, k in zip(self._plans, choice, strict=True)}
        for (local, _, local_layouts_, _, _), k in zip(self._local, knobs["_local"], strict=False):
            layouts[local] = local_layouts_[k]
        pad_values = self._pad_values(layouts, knobs[KNOB_PAD_MODE])
        public = {k: v for k, v in knobs.items() if k != "_local"}
        return Candidate.make(layouts, public, pad_values)

    def _pad_values(self, layouts: Mapping[str, Layout], pad_mode: str) -> dict[str, PadValue]:
        """Guard: no pad values (padding never read). Overcompute: every padded
        input holds the reduction's neutral element (0.0 when element-wise)."""
        if pad_mode != "overcompute":
            return {}
        neutral = neutral_element(self.workload.reduction)
        value = 0.0 if neutral is None else neutral
        return {
            p.name: value for p in self._plans if p.role == "input" and layouts[p.name].has_padding
        }

    def _signature_of(self, choice: Sequence[int]) -> _Signature:
        sig = _Signature(frozenset(VECTOR_WIDTHS), False, ())
        for plan, k in zip(self._plans, choice, strict=True):
            sig = self._merge(sig, self._layout_signature_parts(plan, k))
        return sig

    def enumerate(self) -> Iterator[Candidate]:
        """Every valid candidate once, in a deterministic order (for small
        spaces; it is a generator, so ``itertools.islice`` works on any)."""
        ranges = [range(len(p.layouts)) for p in self._plans]
        for choice in itertools.product(*ranges):
            sig = self._signature_of(choice)
            for knobs in self._knob_combos(sig):
                if not knobs[KNOB_LOCAL_STAGE]:
                    yield self._candidate(choice, {**knobs, "_local": ()})
                    continue
                for local in self._locals_for(knobs[KNOB_VECTOR]):
                    yield self._candidate(choice, {**knobs, "_local": local})

    def suggest(self, trial: Any) -> Candidate:
        """One valid candidate from an optuna trial (or anything with
        ``suggest_categorical``).

        Parameters are chosen in dependency order: ``layout:<buffer>`` for
        each global buffer (choices: the layouts' ``describe()`` keys), then
        each knob in ``KNOBS`` order, then ``layout:<input>.local`` per staged
        tile. A knob's choices are its domain *given the earlier choices*
        (so every combination is valid, no re-mapping); because optuna needs
        one fixed choice list per name, a domain narrower than the knob's
        domain over the whole space is asked under the name
        ``"<knob>|<choices>"``. Local layouts are restricted so that the
        tiles chosen so far plus the smallest of the rest fit the budget, and
        to those that accept the chosen vector.
        Sets the trial's user attribute ``"candidate"`` to the canonical JSON
        when the trial supports user attributes.
        """
        choice = []
        for plan in self._plans:
            key = trial.suggest_categorical(f"layout:{plan.name}", plan.keys)
            choice.append(plan.keys.index(key))
        sig = self._signature_of(choice)
        combos = self._knob_combos(sig)
        chosen: dict[str, Any] = {}
        for knob in (
            KNOB_ORDER,
            KNOB_VECTOR,
            KNOB_PER_ITEM,
            KNOB_WORK_GROUP,
            KNOB_UNROLL,
            KNOB_LOCAL_STAGE,
            KNOB_PAD_MODE,
        ):
            domain = list(dict.fromkeys(c[knob] for c in combos))
            full = self._full_domains[knob]
            if set(domain) == set(full):
                domain = full
            value = trial.suggest_categorical(_param_name(knob, domain, full), domain)
            chosen[knob] = value
            combos = [c for c in combos if c[knob] == value]
            if knob == KNOB_LOCAL_STAGE:
                chosen["_local"] = self._suggest_locals(trial, chosen[KNOB_VECTOR]) if value else ()
        candidate = self._candidate(choice, chosen)
        if hasattr(trial, "set_user_attr"):
            trial.set_user_attr("candidate", candidate.canonical_json())
        return candidate

    def _suggest_locals(self, trial: Any, vector: int) -> tuple[int, ...]:
        domain = self._locals_for(vector)
        picked: list[int] = []
        for position, (local, _, _, keys, _) in enumerate(self._local):
            options = sorted({c[position] for c in domain if list(c[:position]) == picked})
            full = list(range(len(keys)))
            names = [keys[i] for i in options]
            param = _param_name(f"layout:{local}", options, full)
            if param != f"layout:{local}":
                digest = hashlib.sha1(",".join(names).encode()).hexdigest()[:10]
                param = f"layout:{local}|{digest}"
            key = trial.suggest_categorical(param, names)
            picked.append(keys.index(key))
        return tuple(picked)

    def check(self, candidate: Candidate) -> Verdict:
        """:func:`check_candidate` plus this space's preferences: the padding
        budget and the extra constraints of its options."""
        extra = dict(self.options.constraints)
        verdict = check_candidate(self.workload, candidate, self.device, extra)
        budget = PaddingBudget(self.options.padding_budget)
        dtypes = {p.name: p.dtype for p in self._plans}
        reasons = list(verdict.reasons) if not verdict.ok else []
        for name, layout in candidate.layouts:
            if name in dtypes:
                v = budget.check(layout, layout.shape, dtypes[name], self.device)
                if not v.ok:
                    reasons += [f"buffer {name!r}: {v.constraint}: {r}" for r in v.reasons]
        if reasons:
            return Verdict.reject("SearchSpace.check", *reasons)
        return Verdict.accept("SearchSpace.check")

    def rejections(self) -> tuple[Rejection, ...]:
        """Per constraint (layout scope) and per joint rule: how much it
        removed and one example. Rules that removed nothing are listed too,
        with ``removed == 0``, so a report shows what was checked."""
        out = [
            Rejection(name, "layout", count, example)
            for name, (count, example) in sorted(self._layout_rejections.items())
        ]
        total = self._count()
        for rule in JOINT_RULES:
            removed = self._count(frozenset({rule})) - total
            out.append(Rejection(rule, "joint", removed, self._joint_example(rule, removed)))
        return tuple(out)

    def _joint_example(self, rule: str, removed: int) -> str:
        if removed == 0:
            return "nothing removed"
        if rule == "vector_access":
            buffers = {b.name: b for b in self.workload.buffers}
            for name, dim in self._vector_dims.items():
                if dim is None:
                    indices = index_text(self.workload, buffers[name])
                    return (
                        f"buffer {name!r} is indexed {indices}: the innermost spatial axis "
                        f"appears other than as a bare index, so no vector > 1 is offered"
                    )
            for plan in self._plans:
                for width, reason in sorted(plan.vector_reasons.items()):
                    return f"vector {width}: {reason}"
            return "a vector width some touched buffer's layout cannot serve"
        if rule == "work_group_device_limit":
            return (
                f"work-group sizes over the device's limit "
                f"{min(self.device.max_work_group_size, self.device.max_work_item_sizes[0])}"
            )
        if rule == "local_vector_access":
            for (local, _, _, keys, _), widths in zip(self._local, self._local_widths, strict=True):
                for key, ok in zip(keys, widths, strict=True):
                    refused = sorted(set(VECTOR_WIDTHS) - ok)
                    if refused:
                        return (
                            f"local tile {local!r} layout {key} cannot serve vector "
                            f"{refused[0]} along the innermost spatial axis"
                        )
        if rule in STAGING_RULES:
            return self._staging_example(rule)
        if rule == "local_memory_budget":
            combos = set(self._local_combos(False)) - set(self._local_combos(True))
            combo = min(combos)
            items = [(p[0], p[2][i], p[1]) for p, i in zip(self._local, combo, strict=True)]
            verdict = LocalMemoryBudget().check_buffers(items, self.device)
            return "; ".join(verdict.reasons)
        return {
            "order_scalar": "order=<buffer> with per_item or vector > 1",
            "order_duplicates_logical": "order=<buffer> whose layout keeps the logical order",
            "local_vector_access": "a vector that a local tile's layout cannot serve",
            "overcompute_needs_padding": "pad_mode=overcompute when no buffer is padded",
        }[rule]

    def _staging_example(self, rule: str) -> str:
        """The reason of one knob combination that ``rule`` alone refuses staging."""
        assert self._staging is not None
        for sig in self._signatures:
            for c in self._knob_combos(sig, frozenset({rule})):
                if not c[KNOB_LOCAL_STAGE]:
                    continue
                knobs = (c[KNOB_ORDER], c[KNOB_PER_ITEM], c[KNOB_WORK_GROUP], c[KNOB_UNROLL])
                broken = staging_knob_reasons(self.workload, self._staging, *knobs)
                for name, reason in broken:
                    if name == rule:
                        return reason
        return f"local_stage=True against rule {rule}"

    def describe(self) -> str:
        """A short text summary: layouts per buffer, knob domains, size."""
        lines = [f"SearchSpace({self.workload.name} on {self.device.name}): {len(self)} candidates"]
        for plan in self._plans:
            lines.append(f"  {plan.name} {plan.shape}: {len(plan.layouts)} layouts")
        for local, _, layouts, _, _ in self._local:
            lines.append(f"  {local}: {len(layouts)} local layouts")
        for knob, values in self._full_domains.items():
            if knob != "_local":
                lines.append(f"  {knob}: {values}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"SearchSpace({self.workload.name!r}, {self.device.name!r}, size={len(self)})"
