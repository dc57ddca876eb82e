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
3. The knobs, one step each in the order of
   :func:`~laytune.space._knobs.knob_names` (:mod:`._rules`), with the
   choice of local tile layouts after ``vector``. A knob's rules see the
   global layouts only through their :class:`~laytune.space._facts.LayoutFacts`,
   so ``len(space)`` sums, over the distinct facts, the number of layout
   combinations with those facts (a convolution over buffers, never the
   product itself) times the number of knob assignments valid for them
   (counted by the rule engine, memoised).

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

from laytune.device_info import DeviceInfo
from laytune.exceptions import LayoutRejectedError
from laytune.layout import Layout
from laytune.ops import reduction
from laytune.space._candidate import Candidate, PadValue
from laytune.space._check import check_candidate, dtype_reasons, space_setting, usable_staging
from laytune.space._constraints import (
    BankConflicts,
    Constraint,
    Image2DRead,
    LocalMemoryBudget,
    PaddingBudget,
    UnalignedVectorAccess,
    VectorAccess,
    Verdict,
)
from laytune.space._copies import TileCopyFacts, local_copy_facts, subgroup_sizes
from laytune.space._facts import LayoutFacts, buffer_facts, facts_of, neutral_facts
from laytune.space._generate import SpaceOptions, global_layouts, local_layouts
from laytune.space._knobs import baseline_knobs, spatial_axes
from laytune.space._matrix import STORAGE_HALF_VARIANTS, half_storage_only, matrix_capability
from laytune.space._matrix_rules import matrix_schedule
from laytune.space._rules import (
    JOINT_RULES,
    Rules,
    State,
    Step,
    build_steps,
    copy_outcome,
)
from laytune.space._staging import StagingPlan, local_vector_dims, local_window_dims
from laytune.space._workload import VECTOR_WIDTHS, WorkloadLike, dtype_bytes, local_buffer_name

__all__ = ["JOINT_RULES", "Rejection", "SearchSpace", "layout_keys"]

_LOCAL = "_local"  # state key of the local tile layout choice (not a knob)


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


@dataclass
class _BufferPlan:
    name: str
    shape: tuple[int, ...]
    dtype: str
    role: str
    layouts: list[Layout]
    keys: list[str]
    facts: list[LayoutFacts]


@dataclass
class _LocalPlan:
    name: str
    dtype: str
    layouts: list[Layout]
    keys: list[str]
    scores: list[float]
    widths: list[frozenset[int]]  # vector widths each layout serves (all when no vector reads it)
    sizes: list[int]  # bytes
    copies: list[TileCopyFacts]  # what each layout lets the staging copies do


def layout_keys(layouts: Sequence[Layout]) -> list[str]:
    """The names a space gives its layouts of one buffer: ``describe()``, with
    ``#2``, ``#3`` ... for layouts that describe alike (the optuna choices)."""
    keys, seen = [], Counter[str]()
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


class _LocalsStep(Step):
    """The layouts of the local tiles: a combination of one index per tile,
    best summed bank-conflict score first; ``()`` when not staged. Choosing
    one writes the tiles' copy facts (``@local_copies``) that the ``copy``
    step reads."""

    name = _LOCAL
    reads = frozenset({"local_stage", "vector_axis", "vector", "@copies"})

    @property
    def writes(self) -> frozenset[str]:
        return frozenset({"@local_copies"})

    def apply(self, state: State, value: Any) -> None:
        state[self.name] = value
        plans = self.space._local
        state["@local_copies"] = tuple(
            plan.copies[i] for plan, i in zip(plans, value, strict=False)
        )

    def classes(self, state: State, domain: Sequence[Any]) -> list[tuple[Any, int]]:
        """The domain grouped by what the copy steps conclude from the
        layouts' copy facts and the global ones (``@copies``): one
        representative per group and its size (cached)."""
        key = tuple(domain)
        by_facts = self._classes.get(key)
        if by_facts is None:
            groups: dict[tuple[Any, ...], list[Any]] = {}
            plans = self.space._local
            for value in domain:
                facts = tuple(p.copies[i] for p, i in zip(plans, value, strict=False))
                groups.setdefault(facts, []).append(value)
            by_facts = self._classes[key] = [(f, vs[0], len(vs)) for f, vs in groups.items()]
        copies = state["@copies"]
        found = self._outcomes.get((id(by_facts), copies))
        if found is None:
            outcomes: dict[tuple[Any, ...], list[Any]] = {}
            for facts, value, n in by_facts:
                entry = outcomes.setdefault(copy_outcome(copies, facts), [value, 0])
                entry[1] += n
            found = [(v, n) for v, n in outcomes.values()]
            self._outcomes[(id(by_facts), copies)] = found
        return found

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self._classes: dict[tuple[Any, ...], list[tuple[Any, Any, int]]] = {}
        self._outcomes: dict[tuple[Any, ...], list[tuple[Any, int]]] = {}
        locals_ = space._local
        combos = list(itertools.product(*(range(len(p.layouts)) for p in locals_)))
        combos.sort(key=lambda c: (sum(p.scores[i] for p, i in zip(locals_, c, strict=True)), c))
        self.combos = combos
        self.budget = LocalMemoryBudget().budget(space.device)

    def values(self, state: State) -> Sequence[Any]:
        return self.combos if state["local_stage"] else [()]

    def check(self, state: State, value: Any) -> list[tuple[str | None, str]]:
        if not state["local_stage"]:
            return []
        out: list[tuple[str | None, str]] = []
        plans = self.space._local
        inner = self.space.workload.axes[spatial_axes(self.space.workload)[-1]].name
        width = state["vector"] if state["vector_axis"] == inner else 1
        for plan, i in zip(plans, value, strict=True):
            if width not in plan.widths[i]:
                out.append(
                    (
                        "local_vector_access",
                        f"local tile {plan.name!r} layout {plan.keys[i]} cannot serve vector "
                        f"{width}",
                    )
                )
        total = sum(plan.sizes[i] for plan, i in zip(plans, value, strict=True))
        if total > self.budget:
            out.append(
                (
                    "local_memory_budget",
                    f"local tiles need {total} bytes, over the budget of {self.budget} bytes",
                )
            )
        return out


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
        unable = dtype_reasons(workload, device)
        if unable:
            raise LayoutRejectedError("; ".join(unable))
        self._layout_rejections: dict[str, list[Any]] = {}
        self._refused: dict[tuple[Any, ...], str] = {}
        self._staging: StagingPlan | None = usable_staging(workload)
        self._plans = [self._plan(buf) for buf in sorted(workload.buffers, key=lambda b: b.name)]
        self._local = self._local_plans()
        setting = space_setting(workload, device, self.options, self._staging)
        self._steps: list[Step] = build_steps(setting, self._reason)
        self._steps.insert(4, _LocalsStep(self))
        self._rules = Rules(self._steps)
        self._signatures = self._count_signatures()

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
        # a table's reads are literals in the kernel (Workload.tables): its layout is moot
        tables = {t[0] for t in getattr(self.workload, "tables", ())}
        families = () if name in tables else opts.families_for(name)
        for layout in global_layouts(shape, dtype, families, opts):
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
        facts = []
        for layout in kept:
            part, refused = buffer_facts(self.workload, buf, layout, self.device, self._staging)
            facts.append(part)
            for key, why in refused.items():
                self._refused.setdefault(key, why)
        return _BufferPlan(name, shape, dtype, buf.role, kept, layout_keys(kept), facts)

    def _reason(self, key: tuple[Any, ...]) -> str:
        """Why some layout of the space refuses a vector or a sub-group size."""
        return self._refused.get(key, "")

    def _local_plans(self) -> list[_LocalPlan]:
        buffers = {b.name: b for b in self.workload.buffers}
        vector_dims = local_vector_dims(self.workload, self._staging) if self._staging else {}
        window_dims = local_window_dims(self.workload, self._staging) if self._staging else {}
        out = []
        tiles = self._staging.tiles if self._staging else {}
        for name, shape in sorted(tiles.items()):
            dtype = buffers[name].dtype
            local = local_buffer_name(name)
            extra = self.options.constraints_for(local)
            scored = []
            for layout in local_layouts(shape, self.options):
                if not self._check_layout(local, layout, dtype, [LocalMemoryBudget(), *extra]):
                    continue
                scored.append((self._bank_score(layout, dtype), len(scored), layout))
            scored.sort(key=lambda t: (t[0], t[1]))
            layouts = [t[2] for t in scored]
            dim = vector_dims.get(local)
            window = window_dims.get(local)
            widths = [
                frozenset(
                    w
                    for w in VECTOR_WIDTHS
                    if w == 1
                    or (
                        (
                            dim is None
                            or VectorAccess(dim, w).check(layout, shape, dtype, self.device).ok
                        )
                        and (
                            window is None
                            or UnalignedVectorAccess(window, w)
                            .check(layout, shape, dtype, self.device)
                            .ok
                        )
                    )
                )
                for layout in layouts
            ]
            sizes = [lay.physical_size * dtype_bytes(dtype) for lay in layouts]
            assert self._staging is not None
            staged = next(s for s in self._staging.inputs if s.buffer == name)
            lanes = subgroup_sizes(self.device)
            copies = [local_copy_facts(staged, lay, dtype, lanes) for lay in layouts]
            out.append(
                _LocalPlan(
                    local,
                    dtype,
                    layouts,
                    layout_keys(layouts),
                    [t[0] for t in scored],
                    widths,
                    sizes,
                    copies,
                )
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

    def _count_signatures(self) -> dict[LayoutFacts, int]:
        counts: dict[LayoutFacts, int] = {neutral_facts(self.workload): 1}
        for plan in self._plans:
            per_layout = Counter(plan.facts)
            merged: Counter[LayoutFacts] = Counter()
            for sig, n in counts.items():
                for part, m in per_layout.items():
                    merged[sig.merge(part)] += n * m
            counts = dict(merged)
        return counts

    def _signature_of(self, choice: Sequence[int]) -> LayoutFacts:
        sig = neutral_facts(self.workload)
        for plan, k in zip(self._plans, choice, strict=True):
            sig = sig.merge(plan.facts[k])
        return sig

    # -- the public surface ----------------------------------------------------
    @property
    def buffers(self) -> tuple[str, ...]:
        """Global buffer names, in the order the space chooses their layouts."""
        return tuple(p.name for p in self._plans)

    @property
    def knobs(self) -> tuple[str, ...]:
        """The knob names of every candidate, in the order the space chooses them."""
        return tuple(step.name for step in self._steps if step.name != _LOCAL)

    def layouts(self, buffer: str) -> tuple[Layout, ...]:
        """The valid layouts of a buffer (global, or a ``"<input>.local"`` tile)."""
        for plan in self._plans:
            if plan.name == buffer:
                return tuple(plan.layouts)
        for local in self._local:
            if local.name == buffer:
                return tuple(local.layouts)
        raise KeyError(f"space has no buffer {buffer!r} (buffers: {self.buffers})")

    def local_scores(self) -> dict[str, tuple[tuple[str, float], ...]]:
        """Per local buffer: (layout, bank-conflict degree), best first."""
        return {p.name: tuple(zip(p.keys, p.scores, strict=True)) for p in self._local}

    def _count(self, lifted: frozenset[str] = frozenset()) -> int:
        return sum(
            n * self._rules.count(self._rules.state_of(sig), lifted)
            for sig, n in self._signatures.items()
        )

    def __len__(self) -> int:
        return self._count()

    @property
    def size(self) -> int:
        """``len(space)`` as a Python int (no ``sys.maxsize`` limit)."""
        return self._count()

    def size_up_to(self, cap: int) -> int:
        """``min(len(space), cap)``, counted only as far as the cap: whether a
        space is small costs a few walks down the rules, not a count of all."""
        total = 0
        for sig, n in self._signatures.items():
            total += n * self._rules.count(self._rules.state_of(sig), frozenset(), 0, cap)
            if total >= cap:
                return cap
        return total

    def identity(self) -> Candidate:
        """The baseline: identity layouts and the baseline knobs
        (:func:`~laytune.space._knobs.baseline_knobs`). Raises
        LayoutRejectedError if a buffer's extra constraints refuse it.

        Where the device runs the workload only in its matrix kernels
        (:func:`~laytune.space._matrix.half_storage_only`: float16 without
        ``cl_khr_fp16``), the baseline is the first of those kernels on
        identity layouts, global and local: the plainest kernel that runs."""
        layouts = {p.name: p.layouts[0] for p in self._plans}
        for plan in self._plans:
            if not plan.layouts[0].is_identity:
                raise LayoutRejectedError(
                    f"identity layout of buffer {plan.name!r} is rejected by this space's "
                    f"constraints; see space.rejections()"
                )
        knobs = baseline_knobs(self.workload)
        if half_storage_only(self.workload, self.device):
            available, _ = matrix_capability(self.device)
            knobs.update(matrix_schedule(self.workload))
            knobs["matrix"] = min(available & STORAGE_HALF_VARIANTS)
            for local in self._local:
                identity = next((lay for lay in local.layouts if lay.is_identity), None)
                if identity is None:
                    raise LayoutRejectedError(
                        f"identity layout of local tile {local.name!r} is rejected by this "
                        f"space's constraints; see space.rejections()"
                    )
                layouts[local.name] = identity
        return Candidate.make(layouts, knobs)

    def _candidate(self, choice: Sequence[int], state: State) -> Candidate:
        layouts = {p.name: p.layouts[k] for p, k in zip(self._plans, choice, strict=True)}
        return self._make(layouts, state)

    def _make(self, global_layouts: Mapping[str, Layout], state: State) -> Candidate:
        layouts = dict(global_layouts)
        for plan, k in zip(self._local, state[_LOCAL], strict=False):
            layouts[plan.name] = plan.layouts[k]
        knobs = {name: state[name] for name in self.knobs}
        return Candidate.make(layouts, knobs, self._pad_values(layouts, state["pad_mode"]))

    def _pad_values(self, layouts: Mapping[str, Layout], pad_mode: str) -> dict[str, PadValue]:
        """Guard: no pad values (padding never read). Overcompute: every padded
        input holds the reduction's neutral element (0.0 when element-wise)."""
        if pad_mode != "overcompute":
            return {}
        combine = reduction(self.workload.reduction)
        value = 0.0 if combine is None else combine.neutral
        return {
            p.name: value for p in self._plans if p.role == "input" and layouts[p.name].has_padding
        }

    def enumerate(self, held: Mapping[str, Any] | None = None) -> Iterator[Candidate]:
        """Every valid candidate once, in a deterministic order (for small
        spaces; it is a generator, so ``itertools.islice`` works on any).
        ``held`` (knob name -> value): only the candidates with those
        values, in the same order, the others never made (the staged
        candidates of a space: ``held={"local_stage": True}``)."""
        unknown = sorted(set(held or ()) - set(self.knobs))
        if unknown:
            raise KeyError(f"space has no knob {unknown} (knobs: {self.knobs})")
        ranges = [range(len(p.layouts)) for p in self._plans]
        for choice in itertools.product(*ranges):
            sig = self._signature_of(choice)
            for state in self._rules.walk(self._rules.state_of(sig), 0, held):
                yield self._candidate(choice, state)

    def candidates_with(self, layouts: Mapping[str, Layout]) -> Iterator[Candidate]:
        """Every valid knob setting (with local tile layouts) for the global
        buffers in ``layouts``, any layouts of the right shapes, in enumeration
        order: the knob sweep of a fixed layout. The layouts themselves are
        not checked against the space's families or budgets."""
        given = {p.name: layouts[p.name] for p in self._plans}
        facts, _ = facts_of(self.workload, given, self.device, self._staging)
        for state in self._rules.walk(self._rules.state_of(facts)):
            yield self._make(given, state)

    def suggest(self, trial: Any) -> Candidate:
        """One valid candidate from an optuna trial (or anything with
        ``suggest_categorical``).

        Parameters are chosen in dependency order: ``layout:<buffer>`` for
        each global buffer (choices: the layouts' ``describe()`` keys), then
        each knob in :attr:`knobs` order, with ``layout:<input>.local`` per
        staged tile after ``vector``. A knob's choices are its domain *given
        the earlier choices* (so every combination is valid, no re-mapping);
        because optuna needs one fixed choice list per name, a domain
        narrower than the knob's full list of values is asked under the
        name ``"<knob>|<choices>"``. Sets the trial's user attribute
        ``"candidate"`` to the canonical JSON when the trial supports user
        attributes.
        """
        choice = []
        for plan in self._plans:
            key = trial.suggest_categorical(f"layout:{plan.name}", plan.keys)
            choice.append(plan.keys.index(key))
        state = self._rules.state_of(self._signature_of(choice))
        rules = self._rules
        for i, step in enumerate(self._steps):
            domain = []
            for value in rules.domain(i, state):
                child = dict(state)
                step.apply(child, value)
                if rules.count(child, frozenset(), i + 1, cap=1):
                    domain.append(value)
            if not domain:
                raise LayoutRejectedError(
                    f"no valid value of {step.name} after {self._described(state)}"
                )
            if step.name == _LOCAL:
                value = self._suggest_locals(trial, domain) if state["local_stage"] else ()
            else:
                full = list(step.values({**state}))
                if set(domain) == set(full):
                    domain = full
                value = trial.suggest_categorical(_param_name(step.name, domain, full), domain)
            step.apply(state, value)
        candidate = self._candidate(choice, state)
        if hasattr(trial, "set_user_attr"):
            trial.set_user_attr("candidate", candidate.canonical_json())
        return candidate

    def _described(self, state: State) -> str:
        return ", ".join(f"{k}={v}" for k, v in state.items() if not k.startswith(("@", "#")))

    def _suggest_locals(self, trial: Any, domain: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
        picked: list[int] = []
        for position, local in enumerate(self._local):
            options = sorted({c[position] for c in domain if list(c[:position]) == picked})
            full = list(range(len(local.keys)))
            names = [local.keys[i] for i in options]
            param = _param_name(f"layout:{local.name}", options, full)
            if param != f"layout:{local.name}":
                digest = hashlib.sha1(",".join(names).encode()).hexdigest()[:10]
                param = f"layout:{local.name}|{digest}"
            key = trial.suggest_categorical(param, names)
            picked.append(local.keys.index(key))
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
        more: Counter[str] = Counter()
        for sig, n in self._signatures.items():
            for rule, added in self._rules.lifting_counts(self._rules.state_of(sig))[1].items():
                more[rule] += n * added
        for rule in JOINT_RULES:
            removed = more[rule]
            example = self._joint_example(rule) if removed else "nothing removed"
            out.append(Rejection(rule, "joint", removed, example))
        return tuple(out)

    def _joint_example(self, rule: str) -> str:
        """The reason of one value that ``rule`` alone refuses."""
        lifted = frozenset({rule})
        rules = self._rules

        def search(state: State, i: int) -> str | None:
            if i == len(self._steps):
                return None
            step = self._steps[i]
            for value in rules.domain(i, state, lifted):
                broken = [why for name, why in step.check(state, value) if name == rule]
                if broken:
                    return broken[0]
                child = dict(state)
                step.apply(child, value)
                # descend only where lifting the rule adds candidates
                if rules.lifting_counts(child, i + 1)[1].get(rule, 0):
                    found = search(child, i + 1)
                    if found:
                        return found
            return None

        for sig in self._signatures:
            found = search(rules.state_of(sig), 0)
            if found:
                return found
        return f"a candidate against rule {rule}"

    def describe(self) -> str:
        """A short text summary: layouts per buffer, knob values, size."""
        lines = [f"SearchSpace({self.workload.name} on {self.device.name}): {len(self)} candidates"]
        for plan in self._plans:
            lines.append(f"  {plan.name} {plan.shape}: {len(plan.layouts)} layouts")
        for local in self._local:
            lines.append(f"  {local.name}: {len(local.layouts)} local layouts")
        for step in self._steps:
            if step.name != _LOCAL:
                values = step.values(dict(baseline_knobs(self.workload)))
                lines.append(f"  {step.name}: {list(values)}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"SearchSpace({self.workload.name!r}, {self.device.name!r}, size={len(self)})"
