"""Choosing a model's kernels by timing them in its plan.

The records rank each layout-critical workload's candidates one launch at
a time, each timed in a cache state of its own (cold after a flush where
the weights outgrow the cache, warm otherwise) and at its own moment of a
job that may take minutes. A model runs its launches back to back: each
kernel reads the activations its producer has just written, and its
layouts decide how fast the planned operators around it run (a max pool
after a convolution runs vectors over NCHW8c, scalars over NCHW). So the
record that ranks first need not run fastest in the plan.

:func:`measure_choices` settles it by measuring: one workload at a time,
largest first, it compiles the plan once per candidate the records offer
(the planner's choice, the fastest kernel of each set of layouts it asks of
its neighbours, the fastest timed warm, the statement's derived start where
it was recorded), times those plans on the device in
interleaved rounds (each round runs every plan once, so that the machine's
drift between rounds falls on all alike), and keeps the candidate whose
plan ran fastest, comparing the launches where the plans differ (the
others run alike and would only add their noise). The others stay as they
are chosen so far.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from laytune.exceptions import LaytuneError
from laytune.plan._critical import random_inputs, tuned_workloads
from laytune.plan._graph import Graph
from laytune.plan._price import fastest_per_layouts
from laytune.records import model_seconds
from laytune.space import Candidate

__all__ = ["MeasuredChoice", "measure_choices", "measure_forms"]

#: Candidates per workload timed in the plan besides the current choice.
ALTERNATIVES = 4
#: Interleaved rounds per workload.
ROUNDS = 7
#: A candidate replaces the current choice only if its plan runs at most
#: this fraction of the current one's time (the rest is the device's noise).
MARGIN = 0.99


@dataclass(frozen=True)
class MeasuredChoice:
    """What :func:`measure_choices` found for one workload: the candidate
    kept, and per candidate timed, its plan's time relative to the first
    choice's (median over rounds; the first choice 1.0)."""

    workload_key: str
    candidate: Candidate
    relative: tuple[tuple[str, float], ...]

    @property
    def changed(self) -> bool:
        return self.candidate.key != self.relative[0][0]


def _warm_s(record: Any) -> float:
    """A record's warm kernel time: its warm repeats where it was timed cold."""
    warm = (record.result or {}).get("warm_value_s")
    return float(warm) if warm else float(record.compute_s)


def _offered(records: Any, workload: Any, device: Any, current: Candidate) -> list[Candidate]:
    """The current choice, then the recorded candidates worth timing in the
    plan: the derived start, the fastest kernel of each set of layouts asked
    (by :func:`~laytune.records.model_seconds`), the fastest kernels warm."""
    from laytune.plan._planner import _derived_option

    found = [
        r
        for r in records.records(workload=workload.key, device=device.key, status="ok")
        if r.compute_s is not None
    ]
    recorded = {r.candidate.key for r in found}
    by_kernel = sorted(found, key=lambda r: (model_seconds(r), r.id or 0))
    order = [
        *(o.candidate for o in _derived_option(workload, device) if o.candidate.key in recorded),
        *(r.candidate for r in fastest_per_layouts(by_kernel, workload.weights)),
        *(r.candidate for r in by_kernel),
    ]
    by_warm = [r.candidate for r in sorted(found, key=lambda r: (_warm_s(r), r.id or 0))]
    picked = {current.key: current}
    for candidate in itertools.chain.from_iterable(itertools.zip_longest(order, by_warm)):
        if candidate is not None:
            picked.setdefault(candidate.key, candidate)
        if len(picked) > ALTERNATIVES:
            break
    return list(picked.values())


def _time_plans(compiled: list[Any], inputs: Mapping[str, Any], rounds: int) -> list[float]:
    """Per plan, its time relative to the first plan's (the first's 1.0).

    Each of ``rounds`` rounds runs every plan once (a warm-up run, then two
    timed). A plan's time is the first plan's median device time (the sum of
    its launches' events) with the launches the two plans do not share
    (:func:`compared_launches`) taken at this plan's median times instead of
    the first's. The launches both run alike add the device's noise and
    nothing else: summed over ResNet-18's 23 launches, that noise was
    several times the 3 % between two kernels of one convolution."""
    times: list[list[list[float]]] = [[[] for _ in c.steps] for c in compiled]
    totals: list[float] = []
    for _ in range(rounds):
        for k, c in enumerate(compiled):
            timing = c.profile(inputs, repeats=2, warmup=1)
            if k == 0:
                totals.extend(timing.device_seconds)
            for i, (_, seconds) in enumerate(timing.per_step):
                times[k][i].append(seconds)
    medians = [[statistics.median(t) for t in plan] for plan in times]
    total = statistics.median(totals)
    first = compiled[0].steps
    relative = []
    for k, c in enumerate(compiled):
        labels = compared_launches(first, c.steps)
        mine = sum(m for s, m in zip(c.steps, medians[k], strict=True) if s.label in labels)
        theirs = sum(m for s, m in zip(first, medians[0], strict=True) if s.label in labels)
        relative.append((total - theirs + mine) / total)
    return relative


def compared_launches(a: Sequence[Any], b: Sequence[Any]) -> set[str]:
    """The labels of the launches (:class:`~laytune.plan.Step`) two plans
    do not share (a kernel, a range or a rewrite of one but not the other:
    ``Step.work``), and of the launch after each, which reads what it wrote
    in the cache state it left."""
    shared = {s.work for s in a} & {s.work for s in b}
    labels: set[str] = set()
    for steps in (a, b):
        for i, step in enumerate(steps):
            if step.work not in shared:
                labels.update(s.label for s in steps[i : i + 2])
    return labels


def measure_choices(
    graph: Graph,
    records: Any,
    device: Any,
    chosen: Mapping[str, Candidate],
    *,
    fuse: bool = True,
    rounds: int = ROUNDS,
    say: Callable[[str], None] | None = None,
) -> tuple[dict[str, Candidate], list[MeasuredChoice]]:
    """The candidates (workload key -> candidate, as a layout source maps
    them) that run ``graph`` fastest on ``device`` (a
    :class:`~laytune.runners.Device`), measured in its plan as the module
    docstring says, starting from ``chosen`` (the planner's choice from
    ``records``, a records store); and what was measured per workload."""
    import pyopencl as cl

    from laytune.plan._planner import plan_layouts

    tell = say or (lambda line: None)
    current = dict(chosen)
    inputs = random_inputs(graph)
    context = cl.Context([device.open()])
    programs: dict[str, Any] = {}  # the plans share all kernels but one or two
    found: list[MeasuredChoice] = []
    for item in tuned_workloads(graph, fuse):
        key = item.workload.key
        if key not in current:
            continue
        offered = _offered(records, item.workload, device.info, current[key])
        if len(offered) < 2:
            continue
        compiled, kept = [], []
        try:
            for k, candidate in enumerate(offered):
                try:
                    plan = plan_layouts(
                        graph, {**current, key: candidate}, device.info, fuse=fuse, records=records
                    )
                    compiled.append(plan.compile(context, programs=programs))
                except LaytuneError as err:
                    if k == 0:  # the current choice: the plan itself does not build
                        raise
                    tell(
                        f"  {key}: candidate {candidate.key} left out, its plan does not "
                        f"build: {err}"
                    )
                    continue
                kept.append(candidate)
            relative = _time_plans(compiled, inputs, rounds) if len(kept) > 1 else []
        finally:
            for c in compiled:
                c.release()
        offered = kept
        if not relative:
            continue
        best = min(range(len(offered)), key=lambda k: relative[k])
        keep = best if relative[best] <= MARGIN else 0
        current[key] = offered[keep]
        choice = MeasuredChoice(
            key, offered[keep], tuple((c.key, r) for c, r in zip(offered, relative, strict=True))
        )
        found.append(choice)
        times = ", ".join(f"{r:.3f}" for r in relative)
        tell(
            f"  {key} ({', '.join(item.ops)}): {len(offered)} candidates timed in the plan "
            f"(relative {times}): "
            + (f"took candidate {keep + 1}, {relative[keep]:.3f}" if keep else "kept the first")
        )
    return current, found


def measure_forms(
    model: Any,
    records: Any,
    device: Any,
    winograd: frozenset[str],
    *,
    fuse: bool = True,
    rounds: int = ROUNDS,
    say: Callable[[str], None] | None = None,
) -> frozenset[str]:
    """The convolutions of ``model`` (an ONNX path or ``ModelProto``) that run
    it fastest on ``device`` in Winograd's form, measured in its plan: from
    ``winograd`` (the records' choice,
    :func:`~laytune.plan.faster_in_records`), one direct key at a
    time, every convolution of that key is flipped to the other form, both
    plans timed as :func:`measure_choices` times candidates, and the flip
    kept where it runs at most :data:`MARGIN` of the other's time; ``say``
    gets a line first, then one per key.

    The records time each kernel alone; in the plan a form's kernels meet
    the caches the others leave. Winograd's filters are 16/9 of the direct
    ones: on ResNet-18's last stage (16.8 MB of them, read from memory at
    each run) the records' times ranked the forms within 10 % of each
    other, either way from one tuning to the next."""
    import pyopencl as cl

    from laytune.plan._forms import convolutions, tuned_keys
    from laytune.plan._onnx import from_onnx
    from laytune.plan._planner import plan_layouts

    tell = say or (lambda line: None)
    direct = from_onnx(model)
    tell(f"timing each convolution's form in the plan of {direct.name!r}")
    keys = tuned_keys(direct, fuse)
    groups: dict[str, list[str]] = {}
    for name in convolutions(direct, from_onnx(model, winograd=True)):
        groups.setdefault(keys[name], []).append(name)
    context = cl.Context([device.open()])
    programs: dict[str, Any] = {}
    inputs = random_inputs(direct)
    current = set(winograd)
    for names in groups.values():
        flipped = current ^ set(names)
        compiled = []
        try:
            for forms in (current, flipped):
                plan = plan_layouts(
                    from_onnx(model, winograd=forms), records, device.info, fuse=fuse
                )
                compiled.append(plan.compile(context, programs=programs))
            relative = _time_plans(compiled, inputs, rounds)
        finally:
            for c in compiled:
                c.release()
        now = "Winograd's form" if names[0] in current else "directly"
        kept = relative[1] <= MARGIN
        tell(
            f"  {', '.join(names)}: {now} 1.000, the other form {relative[1]:.3f}: "
            + ("took the other" if kept else "kept")
        )
        if kept:
            current = flipped
    return frozenset(current)
