"""Tuned layouts against identity layouts and against the best standard fixed layout.

    python -m bench.tuned_vs_fixed [--quick] [--trials N] [--rounds R] [--out FILE]

For conv2d, matmul, sum and max_pool2d, on ``laytune.runners.default_device()``
(``LAYTUNE_DEVICE`` picks another):

1. ``laytune.tune`` (its default strategy) over the workload's whole default space, into a
   temporary database, measuring as many candidates as the knob sweeps of
   step 2 measure for all the fixed layouts together (``--trials`` sets
   another budget), twice: with the default ``fixed`` boundary (inputs and
   outputs held in their logical layouts, weights constant: candidates ranked
   by pack + compute + unpack) and with every buffer ``free`` (ranked by the
   compute kernels alone, as if producers and consumers adopted the layouts).
2. The standard fixed layouts, built by hand as candidates: NCHW (identity),
   NHWC (``permute(0, 2, 3, 1)`` of every NCHW tensor, weights OHWI) and
   NCHW4c (``block`` of the channel axis by 4; weights OIHW4i4o, that is
   [O/4, I/4, H, W, 4 inputs, 4 outputs], two ``block``s composed); for matmul,
   row-major A, B, C and row-major with B transposed (stored N x K). Each
   gets its best knobs from a sweep: every combination of order (logical, or
   following an output whose layout is not the identity), vectors, register
   blocks, work-groups, unroll and staging (off, or ``__local`` tiles in identity or
   ``pad_rows(4)`` layouts, copied by each ``copy`` instruction the rules allow) over the
   values listed in the report, kept where
   ``SearchSpace.check`` and ``laytune.codegen.lower`` accept it. The sweep
   measures each valid setting once; the fastest end to end (with its
   conversions) of each layout goes on.
3. Side by side in one ``Runner`` session with one ``MeasureConfig``: the
   identity candidate (``SearchSpace.identity()``: identity layouts, baseline
   knobs), each fixed layout with its best knobs, and the tuned best, in
   ``--rounds`` interleaved rounds (every candidate once per round). A
   candidate's time is the smallest over the rounds of its median event time
   (another process on a shared machine only ever slows a round down).
   The "best fixed" is the fastest fixed layout in this session. In the same
   rounds, the fastest staged candidate with each other ``copy`` forced
   (:mod:`bench._copies`): which copy the best candidates use, and what the
   others cost.

Each candidate has two times: its compute kernels with the buffers already
in its layouts (``kernel``), and ``end to end``: the kernels plus the pack
and unpack kernels of every input and output not in its logical layout
(weights are packed once and not counted), the price of the default
boundary (:func:`laytune.records.price_record`). Each result is checked
against numpy first. The table is printed and written to
``bench/results/tuned_vs_fixed.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import laytune
from bench import _report
from bench._copies import CopyVariant, copy_rows, copy_variants
from laytune import layout as L
from laytune import ops
from laytune.codegen import KernelProgram, lower
from laytune.exceptions import LayoutRejectedError
from laytune.layout import Layout
from laytune.records import Boundary, Record
from laytune.runners import Builder, Device, MeasureConfig, RunInput, Runner, default_device
from laytune.space import Candidate, SearchSpace, SpaceOptions

RESULT_NAME = "tuned_vs_fixed.md"
CONFIG = MeasureConfig(warmup=2, repeats=10, measure_conversions=True, time_limit_s=60)

# -- the standard fixed layouts --------------------------------------------------------

Layouts = dict[str, Layout]


def _nchw(shapes: Mapping[str, tuple[int, ...]], roles: Mapping[str, str]) -> Layouts:
    return {name: L.identity(shape) for name, shape in shapes.items()}


def _nhwc(shapes: Mapping[str, tuple[int, ...]], roles: Mapping[str, str]) -> Layouts:
    """Channels last: NHWC activations, OHWI weights; 2-D (N, C) stays as it is."""
    return {
        name: L.permute(shape, (0, 2, 3, 1)) if len(shape) == 4 else L.identity(shape)
        for name, shape in shapes.items()
    }


def _nchw4c(shapes: Mapping[str, tuple[int, ...]], roles: Mapping[str, str]) -> Layouts:
    """NCHW4c activations, OIHW4i4o weights; (N, C) blocked by 4 is (N, C) itself."""
    out = {}
    for name, shape in shapes.items():
        if len(shape) != 4:
            out[name] = L.identity(shape)
        elif roles[name] == "weights":
            inner = L.block(shape, 1, 4)
            out[name] = L.compose(L.block(inner.physical_shape, 0, 4), inner)
        else:
            out[name] = L.block(shape, 1, 4)
    return out


def _row_major(shapes: Mapping[str, tuple[int, ...]], roles: Mapping[str, str]) -> Layouts:
    return {name: L.identity(shape) for name, shape in shapes.items()}


def _b_transposed(shapes: Mapping[str, tuple[int, ...]], roles: Mapping[str, str]) -> Layouts:
    out = _row_major(shapes, roles)
    out["B"] = L.permute(shapes["B"], (1, 0))
    return out


Maker = Callable[[Mapping[str, tuple[int, ...]], Mapping[str, str]], Layouts]
IMAGE_LAYOUTS: dict[str, Maker] = {"NCHW": _nchw, "NHWC": _nhwc, "NCHW4c": _nchw4c}
MATRIX_LAYOUTS: dict[str, Maker] = {"row-major": _row_major, "B transposed": _b_transposed}


@dataclass(frozen=True)
class Case:
    title: str
    workload: Any
    fixed: Mapping[str, Maker]
    weights: tuple[str, ...] = ()  # buffers laid out as OIHW weights
    knob_options: SpaceOptions = field(default_factory=SpaceOptions)
    vectors: tuple[int, ...] = (1, 2, 4, 8, 16)

    def fixed_layouts(self) -> dict[str, Layouts]:
        shapes = {b.name: tuple(b.shape) for b in self.workload.buffers}
        roles = {name: "weights" if name in self.weights else "data" for name in shapes}
        return {name: make(shapes, roles) for name, make in self.fixed.items()}


def _knobs(quick: bool, **full: tuple[int, ...]) -> SpaceOptions:
    """The knob values of a sweep (the first two of each with ``quick``) and
    its ``__local`` tile layouts: identity or rows padded by 4."""
    if quick:
        full = {k: v[:2] for k, v in full.items()}
    return SpaceOptions(
        families=("identity",),
        local_families=("identity", "pad_rows"),
        local_pad_amounts=(4,),
        **full,
    )


def cases(quick: bool) -> list[Case]:
    return [
        Case(
            "conv2d 1x32x28x28, 32 filters 3x3, pad 1",
            ops.conv2d(1, 32, 28, 28, 32, 3, stride=1, padding=1),
            IMAGE_LAYOUTS,
            weights=("W",),
            knob_options=_knobs(quick, blocks=(1, 2, 4), groups=(0, 1, 8, 16), unrolls=(1,)),
        ),
        Case(
            "matmul 256x256x256",
            ops.matmul(256, 256, 256),
            MATRIX_LAYOUTS,
            knob_options=_knobs(quick, blocks=(1, 4, 8), groups=(0, 1, 4, 8), unrolls=(1, 4, 8)),
            vectors=(1, 4, 8),
        ),
        Case(
            "sum over H, W of 4x256x56x56",
            ops.sum((4, 256, 56, 56), (2, 3)),
            IMAGE_LAYOUTS,
            knob_options=_knobs(
                quick, blocks=(1, 2, 4, 8), groups=(0, 1, 8, 16), unrolls=(1, 4, 8)
            ),
        ),
        Case(
            "max_pool2d 1x64x112x112, 2x2 stride 2",
            ops.max_pool2d(1, 64, 112, 112, 2, 2),
            IMAGE_LAYOUTS,
            knob_options=_knobs(quick, blocks=(1, 2, 4), groups=(0, 1, 8, 16), unrolls=(1, 2)),
        ),
    ]


# -- knob sweeps of the fixed layouts ----------------------------------------------------


def knob_settings(case: Case, device: Device, layouts: Layouts) -> list[Candidate]:
    """The sweep of one fixed layout: every candidate of the space under
    ``case.knob_options`` (vectors restricted to ``case.vectors``) whose global
    buffers have ``layouts``."""
    options = dataclasses.replace(case.knob_options, vectors=tuple(case.vectors))
    space = SearchSpace(case.workload, device.info, options)
    return list(space.candidates_with(layouts))


@dataclass
class Entry:
    """A candidate to measure, with the program lowered for it."""

    label: str
    candidate: Candidate
    program: KernelProgram


def _lowered(space: SearchSpace, label: str, candidate: Candidate) -> Entry | None:
    if not space.check(candidate):
        return None
    try:
        program = lower(space.workload, candidate, device=space.device)
    except LayoutRejectedError:
        return None
    return Entry(label, candidate, program)


def sweep_entries(case: Case, device: Device) -> tuple[dict[str, list[Entry]], int]:
    """Per fixed layout, the valid candidates of the knob sweep; and the
    largest number of knob settings a fixed layout's sweep has."""
    space = SearchSpace(case.workload, device.info)
    out: dict[str, list[Entry]] = {}
    for name, layouts in case.fixed_layouts().items():
        entries = []
        for candidate in knob_settings(case, device, layouts):
            entry = _lowered(space, name, candidate)
            if entry is not None:
                entries.append(entry)
        out[name] = entries
    return out, max((len(e) for e in out.values()), default=0)


def measure(builder: Builder, runner: Runner, workload: Any, entries: Sequence[Entry]) -> list[Any]:
    """The runner's results, in order (a failed build is a failed result)."""
    built = builder.build([e.program for e in entries])
    return runner.run([RunInput(b, workload) for b in built])


def times(workload: Any, entry: Entry, result: Any) -> tuple[float, float]:
    """(kernel, end to end) seconds of one result (inf: failed, or a
    conversion without a time)."""
    if not result.ok or result.value_s is None:
        return math.inf, math.inf
    record = Record.measured(
        result, entry.candidate, entry.program, boundary=Boundary.default(workload)
    )
    priced = record.objective is not None
    return result.value_s, record.value_s if priced else math.inf  # type: ignore[return-value]


# -- one workload ----------------------------------------------------------------------


@dataclass
class Outcome:
    case: Case
    identity_s: tuple[float, float]  # (kernel, end to end); inf: failed
    fixed_s: dict[str, tuple[float, float]]  # fixed layout -> side-by-side times
    tuned_s: tuple[float, float]  # tuned with fixed boundaries
    free_s: tuple[float, float]  # tuned with free boundaries
    tuned: Candidate
    free: Candidate
    tuned_record_s: float  # the tuned best's price as recorded while tuning
    fixed_best: dict[str, Candidate]
    sweep_counts: dict[str, int]
    settings: int
    trials: int
    tune_s: float
    sweep_s: float
    notes: list[str]
    copy_base: str = ""  # the copy of the staged candidate the variants force others on
    copies: list[CopyVariant] = field(default_factory=list)
    copy_s: dict[str, float] = field(default_factory=dict)  # copy -> side-by-side time

    @property
    def best_fixed(self) -> tuple[str, tuple[float, float]]:
        """The fixed layout fastest end to end, and its times."""
        return min(self.fixed_s.items(), key=lambda kv: kv[1][1])


def run_case(case: Case, device: Device, trials: int | None, rounds: int, db_url: str) -> Outcome:
    """Tune (``trials`` candidates; None: as many as the fixed layouts' sweeps
    measure together), sweep the fixed layouts' knobs, then measure side by side."""
    workload = case.workload
    notes: list[str] = []
    sweeps, settings = sweep_entries(case, device)
    started = time.perf_counter()
    options = laytune.TuneOptions(
        trials=trials or sum(len(entries) for entries in sweeps.values()),
        warm_start=0,
        measure=CONFIG,
    )
    result = _report.tune(workload, device, options=options, database=db_url, progress=False)
    free_boundary = {b.name: "free" for b in workload.buffers}
    free = _report.tune(
        workload,
        device,
        options=options.replace(boundary=free_boundary, seed=1),
        database=db_url,
        progress=False,
    )
    tune_s = time.perf_counter() - started
    for job in (result, free):
        if job.best is None:
            raise SystemExit(f"{workload.key}: tuning found no verified candidate ({job.failures})")
        if job.failures:
            notes.append(f"tuning failures ({job.study_name}): {dict(job.failures)}")

    space = SearchSpace(workload, device.info)
    started = time.perf_counter()
    fixed_best: dict[str, Entry] = {}
    with Builder(device) as builder, Runner(device, CONFIG) as runner:
        for name, entries in sweeps.items():
            if not entries:
                notes.append(f"{name}: no knob setting of the sweep is valid")
                continue
            results = measure(builder, runner, workload, entries)
            timed = [
                (times(workload, e, r)[1], i, e)
                for i, (r, e) in enumerate(zip(results, entries, strict=True))
                if r.ok and r.value_s is not None
            ]
            if len(timed) < len(entries):
                notes.append(f"{name}: {len(entries) - len(timed)} of the sweep failed")
            if timed:
                fixed_best[name] = min(timed, key=lambda te: te[:2])[2]
        sweep_s = time.perf_counter() - started

        identity = _lowered(space, "identity", space.identity())
        tuned = _lowered(space, "tuned", result.best.candidate)
        untied = _lowered(space, "tuned free", free.best.candidate)
        assert identity is not None and tuned is not None and untied is not None
        ranked = [tuned.candidate, *(e.candidate for e in fixed_best.values())]
        variants = copy_variants(space, ranked)
        forced = [
            entry
            for v in variants
            if v.candidate is not None
            and (entry := _lowered(space, v.copy, v.candidate)) is not None
        ]
        base = next((c for c in ranked if c.knob_map.get("local_stage")), None)
        final = [identity, *fixed_best.values(), tuned, untied, *forced]
        seen: list[list[tuple[float, float]]] = [[] for _ in final]
        for _ in range(rounds):
            results = measure(builder, runner, workload, final)
            for out, e, r in zip(seen, final, results, strict=True):
                out.append(times(workload, e, r))
    best = [(min(k for k, _ in t), min(e for _, e in t)) for t in seen]
    at = 1 + len(fixed_best)  # the tuned candidate's place; the forced copies after the free one
    return Outcome(
        case=case,
        identity_s=best[0],
        fixed_s={e.label: t for e, t in zip(final[1:at], best[1:at], strict=True)},
        tuned_s=best[at],
        free_s=best[at + 1],
        tuned=result.best.candidate,
        free=free.best.candidate,
        tuned_record_s=result.best.value_s or math.inf,
        fixed_best={name: e.candidate for name, e in fixed_best.items()},
        sweep_counts={name: len(entries) for name, entries in sweeps.items()},
        settings=settings,
        trials=result.measured,
        tune_s=tune_s,
        sweep_s=sweep_s,
        notes=notes,
        copy_base=str(base.knob_map["copy"]) if base is not None else "",
        copies=variants,
        copy_s={  # kernel times: the copy is inside the compute kernel
            e.label: t[0] for e, t in zip(final[at + 2 :], best[at + 2 :], strict=True)
        },
    )


# -- the report ------------------------------------------------------------------------


def _ms(seconds: float) -> str:
    return "failed" if math.isinf(seconds) else f"{seconds * 1e3:.3f}"


def _ratio(slow: float, fast: float) -> str:
    return "-" if math.isinf(slow) or math.isinf(fast) else f"{slow / fast:.2f}x"


def _knob_text(candidate: Candidate) -> str:
    return ", ".join(f"{k}={v}" for k, v in candidate.knobs)


def _layout_text(candidate: Candidate) -> str:
    return "; ".join(f"{name}: {layout.describe()}" for name, layout in candidate.layouts)


def report(
    outcomes: Sequence[Outcome], device: Device, args: argparse.Namespace, wall: float
) -> str:
    rows = []
    for o in outcomes:
        name, fixed = o.best_fixed
        rows.append(
            [
                o.case.title,
                _ms(o.identity_s[1]),
                f"{_ms(fixed[1])} ({name})",
                _ms(o.tuned_s[1]),
                f"{_ms(o.free_s[0])} / {_ms(o.free_s[1])}",
                _ratio(o.identity_s[1], o.tuned_s[1]),
                _ratio(fixed[1], o.tuned_s[1]),
                _ratio(fixed[1], o.free_s[1]),
                f"{o.trials} / {sum(o.sweep_counts.values())}",
            ]
        )
    lines = [
        "# Tuned layouts against identity and the best standard fixed layout",
        "",
        *_report.environment(device),
        f"- {'quick run; ' if args.quick else ''}tuning: strategy "
        f"{laytune.TuneOptions().strategy} over the default space, "
        + (
            f"{args.trials} trials per workload"
            if args.trials
            else "as many trials as the fixed layouts' knob sweeps measure together"
        )
        + f"; every candidate measured with warmup {CONFIG.warmup}, "
        f"repeats {CONFIG.repeats} (median of the event times, compute kernels only, result "
        f"checked against numpy)",
        f"- side by side: one Runner session per workload, {args.rounds} interleaved rounds, "
        "each candidate's time the smallest of its round medians; the fixed layouts run with "
        f"the best knobs of a sweep (below); {wall:.0f} s in all",
        "",
        *_report.table(
            [
                "workload",
                "identity ms",
                "best fixed ms, end to end (which)",
                "tuned, fixed boundary: ms end to end",
                "tuned, free boundary: ms kernel / end to end",
                "tuned (fixed) vs identity",
                "tuned (fixed) vs best fixed",
                "tuned (free) vs best fixed, end to end",
                "measured: tuning / fixed sweeps",
            ],
            rows,
            "lrrrrrrrr",
        ),
        "",
        "Times are end to end (kernels plus the conversions of inputs and outputs from and to "
        "their logical layouts; weights packed once) unless marked kernel. "
        "A ratio is the slower time over the faster one's: above 1.00x the tuned candidate "
        "is faster. The free-boundary candidate is ranked by its kernel alone: its end-to-end "
        "time is what a caller holding logical arrays would pay for it. "
        "The identity candidate has identity layouts and baseline knobs (scalar, "
        "one point per work-item, the driver's work-group, no unroll, no staging). The last "
        "column is the search effort: candidates measured by the tuner, and by the knob "
        "sweeps of all the fixed layouts together.",
        "",
        "## Every fixed layout, side by side",
        "",
    ]
    fixed_rows = []
    for o in outcomes:
        for name, t in o.fixed_s.items():
            fixed_rows.append(
                [
                    o.case.title,
                    name,
                    f"{o.sweep_counts[name]}",
                    f"{_ms(t[0])} / {_ms(t[1])}",
                    _ratio(o.identity_s[1], t[1]),
                    _ratio(t[1], o.tuned_s[1]),
                    _knob_text(o.fixed_best[name]),
                ]
            )
    lines += _report.table(
        [
            "workload",
            "fixed layout",
            "settings swept",
            "ms kernel / end to end",
            "vs identity",
            "tuned vs this",
            "best knobs of the sweep",
        ],
        fixed_rows,
        "llrrrrl",
    )
    copy_table = []
    for o in outcomes:
        copy_table += copy_rows(o.case.title, o.copy_base, o.copies, o.copy_s, _ms)
    lines += [
        "",
        "## The staging copy",
        "",
        "The fastest staged candidate (the tuned one if it stages, else the fastest fixed "
        "layout that does) with each `copy` forced, all else equal, measured in the same "
        "rounds; the ratio is over that candidate's own copy (above 1.00x: slower).",
        "",
        *_report.table(
            ["workload", "copy", "ms", "vs its own copy", "refused because"], copy_table, "llrrl"
        ),
    ]
    lines += ["", "## Sweeps, tuning and the tuned candidates", ""]
    for o in outcomes:
        knobs = o.case.knob_options
        lines += [
            f"- {o.case.title} (`{o.case.workload.key}`): tuned {o.trials} trials in "
            f"{o.tune_s:.0f} s; sweep of {o.settings} knob combinations per fixed layout "
            f"(blocks {list(knobs.blocks)}, work-groups {list(knobs.groups)}, "
            f"unroll {list(knobs.unrolls)}, vector {list(o.case.vectors)} where valid, "
            f"staging with identity or pad_rows(4) tiles where offered, output order for "
            f"scalar settings; the valid ones measured) in {o.sweep_s:.0f} s",
            f"  - tuned, fixed boundary ({_ms(o.tuned_record_s)} ms end to end while tuning): "
            f"{_layout_text(o.tuned)}; {_knob_text(o.tuned)}",
            f"  - tuned, free boundary: {_layout_text(o.free)}; {_knob_text(o.free)}",
            *(f"  - {note}" for note in o.notes),
        ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sweeps, so fewer trials")
    parser.add_argument(
        "--trials", type=int, default=None, help="tuning trials (default: as the fixed sweeps)"
    )
    parser.add_argument("--rounds", type=int, default=None, help="side-by-side rounds (5; quick 2)")
    parser.add_argument("--out", type=Path, default=None, help="markdown file to write")
    args = parser.parse_args(argv)
    args.rounds = args.rounds or (2 if args.quick else 5)

    device = default_device()
    print(f"device: {device.name}", flush=True)
    started = time.perf_counter()
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="laytune-bench-") as scratch:
        db_url = str(Path(scratch, "tuned_vs_fixed.sqlite"))
        for case in cases(args.quick):
            print(f"{case.title} ...", flush=True)
            outcome = run_case(case, device, args.trials, args.rounds, db_url)
            name, fixed = outcome.best_fixed
            print(
                f"  end to end: identity {_ms(outcome.identity_s[1])} ms, best fixed "
                f"{_ms(fixed[1])} ms ({name}), tuned {_ms(outcome.tuned_s[1])} ms, tuned free "
                f"{_ms(outcome.free_s[1])} ms (kernel {_ms(outcome.free_s[0])} ms)",
                flush=True,
            )
            outcomes.append(outcome)
    text = report(outcomes, device, args, time.perf_counter() - started)
    print(text)
    path = _report.write(RESULT_NAME, text, args.out)
    print(f"written to {_report.shown(path)}")


if __name__ == "__main__":
    main()
