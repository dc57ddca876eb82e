"""Search efficiency: trials each strategy needs to come within 10% of the exhaustive best.

    python -m bench.search_efficiency [--quick] [--seeds N] [--within F] [--out FILE]

On ``laytune.runners.default_device()`` (``LAYTUNE_DEVICE`` picks another),
each space below (a workload with ``laytune.space.SpaceOptions`` narrowing it
to a few hundred candidates) is measured exhaustively once:
``laytune.tune(workload, options=TuneOptions(strategy="exhaustive", space=...), ...)``
into a temporary database, every buffer's boundary ``free`` (the compute
kernels alone are ranked; conversions are not measured). Then every other strategy of
``laytune.search.STRATEGIES`` is replayed against those measurements, once
per seed: an in-memory optuna study with the strategy's own sampler
(``make_sampler(strategy, seed)``), the identity candidate enqueued first (as
``tune`` measures it first), each trial turned into a candidate by
``SearchSpace.suggest`` and answered with the recorded time (a failed or
refused candidate as +inf; a candidate proposed again is answered again
without counting, as ``tune`` answers it from its records). The figure is
the number of distinct candidates a strategy evaluates until one is within
``--within`` (10%) of the exhaustive best; a strategy that proposes 64
candidates in a row that it has already seen stops there, as ``tune`` does,
and counts as not reaching it. Replaying the recorded times makes the
comparison free of measurement noise: every strategy and seed sees the same
value for the same candidate.

The baseline is the space's size (what the exhaustive strategy measures
before it knows the best). For reference the report also gives where the
exhaustive order first comes within reach, and how many trials uniform
random draws without replacement need on average, ``(N + 1) / (k + 1)`` for
``k`` good candidates among ``N``. Printed, and written to
``bench/results/search_efficiency.md``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import laytune
from bench import _report
from laytune import ops
from laytune.records import open_database
from laytune.runners import Device, MeasureConfig, default_device
from laytune.search import STRATEGIES, make_sampler, params_of
from laytune.space import SearchSpace, SpaceOptions

RESULT_NAME = "search_efficiency.md"
CONFIG = MeasureConfig(warmup=2, repeats=7, measure_conversions=False, time_limit_s=60)
MISS_LIMIT = 64  # proposals in a row already seen after which tune stops a sampler


@dataclass(frozen=True)
class Space:
    title: str
    workload: Any
    options: SpaceOptions
    summary: str  # what the options leave, in words


def spaces(quick: bool) -> list[Space]:
    wg = (0,) if quick else (0, 4)
    blocks = (1, 4) if quick else (1, 2, 4)
    return [
        Space(
            "matmul 256",
            ops.matmul(256, 256, 256),
            SpaceOptions(
                families=("identity", "permute", "pad_rows"),
                families_per_buffer={"C": ("identity",)},
                pad_amounts=(4,),
                vectors=(1, 4),
                blocks=(1, 4),
                groups=wg,
                splits=(1,),
                unrolls=(1, 4),
                local_families=("identity",),
            ),
            "A, B: identity, transposed, pad_rows(4); C identity; vectors 1, 4; blocks 1, 4; "
            f"work-groups {', '.join(map(str, wg))}; unroll 1, 4; identity tiles when staged",
        ),
        Space(
            "conv2d 1x32x28x28, 32 filters 3x3",
            ops.conv2d(1, 32, 28, 28, 32, 3, stride=1, padding=1),
            SpaceOptions(
                families=("identity", "permute", "block"),
                families_per_buffer={"W": ("identity", "permute"), "Y": ("identity", "block")},
                block_factors=(4,),
                vectors=(1, 4),
                blocks=blocks,
                groups=(0,),
                splits=(1,),
                local_families=("identity",),
            ),
            "W: identity, permutes; X: identity, permutes, block by 4; Y: identity, block by 4; "
            f"vectors 1, 4; blocks {', '.join(map(str, blocks))}; driver's work-group",
        ),
        Space(
            "max_pool2d 1x64x112x112, 2x2",
            ops.max_pool2d(1, 64, 112, 112, 2, 2),
            SpaceOptions(
                families=("identity", "permute", "block", "pad_rows"),
                block_factors=(4,),
                pad_amounts=(4,),
                vectors=(1, 4),
                blocks=(1, 4),
                groups=wg,
                splits=(1,),
                unrolls=(1,),
                local_families=("identity",),
            ),
            "X, Y: identity, permutes, block by 4, pad_rows(4); vectors 1, 4; blocks 1, 4; "
            f"work_group {', '.join(map(str, wg))}; no unroll; identity tiles when staged",
        ),
    ]


# -- the exhaustive measurement ------------------------------------------------------------


@dataclass
class Measured:
    space: Space
    search: SearchSpace
    values: dict[str, float]  # candidate key -> time (inf: failed or refused)
    identity_s: float
    failures: dict[str, int]
    missing: int  # candidates of the space without a record
    elapsed_s: float

    @property
    def best_s(self) -> float:
        return min(self.values.values())


def measure_exhaustively(space: Space, device: Device, scratch: Path) -> Measured:
    search = SearchSpace(space.workload, device.info, space.options)
    url = str(scratch / f"{space.workload.name}.sqlite")
    options = laytune.TuneOptions(
        trials=len(search),
        strategy="exhaustive",
        space=space.options,
        warm_start=0,
        measure=CONFIG,
        # the kernels alone are compared (conversions are not measured): every buffer free
        boundary={b.name: "free" for b in space.workload.buffers},
    )
    result = laytune.tune(space.workload, device, options=options, database=url, progress=False)
    recorded = open_database(url).measured(space.workload, device)
    values = {k: math.inf if v is None else v for k, v in recorded.items()}
    keys = [c.key for c in search.enumerate()]
    missing = sum(k not in values for k in keys)
    values = {k: values.get(k, math.inf) for k in keys}
    if math.isinf(min(values.values())):
        raise SystemExit(f"{space.title}: no candidate was verified ({result.failures})")
    return Measured(
        space,
        search,
        values,
        values[search.identity().key],
        dict(result.failures),
        missing,
        result.elapsed_s,
    )


# -- replays -----------------------------------------------------------------------------


def replay(measured: Measured, strategy: str, seed: int, target: float) -> int | None:
    """Distinct candidates ``strategy`` evaluates until one is at most
    ``target``; None when it stops first."""
    import optuna

    space, values = measured.search, measured.values
    study = optuna.create_study(sampler=make_sampler(strategy, seed), direction="minimize")
    found = params_of(space, space.identity())
    assert found is not None, "the identity is in every space"
    study.enqueue_trial(found[0])
    seen: set[str] = set()
    misses = 0
    while len(seen) < len(values):
        trial = study.ask()
        key = space.suggest(trial).key
        value = values.get(key, math.inf)
        study.tell(trial, value)
        if key in seen:
            misses += 1
            if misses >= MISS_LIMIT:
                return None
            continue
        misses = 0
        seen.add(key)
        if value <= target:
            return len(seen)
    return None


@dataclass
class Efficiency:
    strategy: str
    trials: list[int | None]  # per seed
    seconds: float

    @property
    def reached(self) -> list[int]:
        return [t for t in self.trials if t is not None]

    @property
    def median(self) -> float | None:
        """Median over seeds, a seed that never reached the target counting as
        infinitely many trials (None when the median itself is such a seed)."""
        ranked = sorted(self.trials, key=lambda t: math.inf if t is None else t)
        middle = ranked[(len(ranked) - 1) // 2 : len(ranked) // 2 + 1]
        if any(t is None for t in middle):
            return None
        return statistics.mean(t for t in middle if t is not None)


def efficiencies(measured: Measured, seeds: int, within: float) -> list[Efficiency]:
    target = measured.best_s * (1.0 + within)
    out = []
    for strategy in STRATEGIES:
        if strategy == "exhaustive":
            continue
        started = time.perf_counter()
        trials = [replay(measured, strategy, seed, target) for seed in range(seeds)]
        out.append(Efficiency(strategy, trials, time.perf_counter() - started))
    return out


# -- the report --------------------------------------------------------------------------


def _count(value: float | None) -> str:
    if value is None:
        return "not reached"
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


def report(
    results: Sequence[tuple[Measured, list[Efficiency]]],
    device: Device,
    args: argparse.Namespace,
    wall: float,
) -> str:
    percent = f"{args.within * 100:g}%"
    rows = []
    for measured, effs in results:
        size = len(measured.values)
        target = measured.best_s * (1.0 + args.within)
        good = sum(v <= target for v in measured.values.values())
        first = next(i for i, v in enumerate(measured.values.values(), 1) if v <= target)
        random_mean = (size + 1) / (good + 1)
        rows.append(
            [
                measured.space.title,
                "exhaustive",
                f"{size}",
                "-",
                "-",
                "1.0x",
                f"first within {percent} in enumeration order: #{first}",
            ]
        )
        for eff in effs:
            median = eff.median
            reached = eff.reached
            spread = f"{min(reached)}-{max(reached)}" if reached else "-"
            note = f"{len(reached)}/{len(eff.trials)} seeds reached"
            if eff.strategy == "random":
                note += f"; uniform draws need {random_mean:.1f} on average"
            rows.append(
                [
                    measured.space.title,
                    eff.strategy,
                    _count(median),
                    spread,
                    ", ".join(_count(t) for t in eff.trials),
                    "-" if median is None else f"{size / median:.1f}x",
                    note,
                ]
            )
    spaces_lines = []
    for measured, effs in results:
        size = len(measured.values)
        target = measured.best_s * (1.0 + args.within)
        good = sum(v <= target for v in measured.values.values())
        failed = sum(math.isinf(v) for v in measured.values.values())
        spaces_lines += [
            f"- {measured.space.title} (`{measured.space.workload.key}`): {size} candidates "
            f"({measured.space.summary}); measured in {measured.elapsed_s:.0f} s; best "
            f"{measured.best_s * 1e3:.4f} ms, identity {measured.identity_s * 1e3:.4f} ms "
            f"({measured.identity_s / measured.best_s:.2f}x the best); {good} within {percent} "
            f"of the best; {failed} failed or refused"
            + (f" ({measured.failures})" if measured.failures else "")
            + (
                f"; {measured.missing} without a record (counted as failed)"
                if measured.missing
                else ""
            )
            + "; replays took "
            + ", ".join(f"{e.strategy} {e.seconds:.1f} s" for e in effs),
        ]
    lines = [
        f"# Search efficiency: trials to come within {percent} of the exhaustive best",
        "",
        *_report.environment(device),
        f"- {'quick run; ' if args.quick else ''}each space measured exhaustively once "
        f"(warmup {CONFIG.warmup}, repeats {CONFIG.repeats}, median of the event times, "
        f"compute kernels only, results checked against numpy; tune's early stop of "
        f"candidates over 2x the best so far); then each strategy replayed on the recorded "
        f"times with seeds 0-{args.seeds - 1}; {wall:.0f} s in all",
        "- trials: distinct candidates evaluated up to and including the first within "
        f"{percent} of the best, the identity candidate first; median over the seeds "
        "(a seed that does not get there counts as more than any that does); "
        "exhaustive / median: the space's size (what exhaustive search measures before it "
        "knows the best) over the median",
        "- with one seed, the strategies' first draws coincide (optuna's TPE starts with 8 "
        "random trials, NSGA-II with a random generation of 16, from the same seeded "
        "generator as the random sampler), so they part ways only after those",
        "",
        *_report.table(
            [
                "space",
                "strategy",
                "trials (median)",
                "min-max",
                "per seed",
                "exhaustive / median",
                "note",
            ],
            rows,
            "llrrrrl",
        ),
        "",
        "## The spaces",
        "",
        *spaces_lines,
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller spaces")
    parser.add_argument("--seeds", type=int, default=5, help="seeds per strategy (5)")
    parser.add_argument("--within", type=float, default=0.10, help="how close to the best (0.10)")
    parser.add_argument("--out", type=Path, default=None, help="markdown file to write")
    args = parser.parse_args(argv)

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    device = default_device()
    print(f"device: {device.name}", flush=True)
    started = time.perf_counter()
    results = []
    with tempfile.TemporaryDirectory(prefix="laytune-bench-") as scratch:
        for space in spaces(args.quick):
            search = SearchSpace(space.workload, device.info, space.options)
            print(f"{space.title}: {len(search)} candidates, measuring ...", flush=True)
            measured = measure_exhaustively(space, device, Path(scratch))
            effs = efficiencies(measured, args.seeds, args.within)
            for eff in effs:
                print(f"  {eff.strategy}: {[_count(t) for t in eff.trials]}", flush=True)
            results.append((measured, effs))
    text = report(results, device, args, time.perf_counter() - started)
    print(text)
    path = _report.write(RESULT_NAME, text, args.out)
    print(f"written to {_report.shown(path)}")


if __name__ == "__main__":
    main()
