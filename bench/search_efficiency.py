"""Search efficiency: trials each strategy needs to come within 10% of the best known.

    python -m bench.search_efficiency [--spaces small|default|all] [--only TITLE,...] [--quick]
        [--seeds N] [--budget N] [--reference N] [--strategies S,...] [--within F]
        [--scratch DIR] [--out FILE]

On ``laytune.runners.default_device()`` (``LAYTUNE_DEVICE`` picks another),
two kinds of spaces:

* **small** (``--spaces small``): a workload with ``laytune.space.SpaceOptions``
  narrowing it to a few hundred candidates, measured exhaustively once:
  ``laytune.tune(workload, options=TuneOptions(strategy="exhaustive", space=...), ...)``
  into a temporary database, every buffer's boundary ``free`` (the compute
  kernels alone are ranked); the best known is the exhaustive best.
* **default** (``--spaces default``): the full default spaces of matmul 1024
  and conv2d (1, 64, 56, 56) x 64 filters 3x3 (billions of candidates). A
  reference run (``--reference`` candidates: half uniform draws, half a local
  search around the best so far, measured in batches of 8) is measured once
  and kept in ``bench/results/search_reference/<space>.jsonl``; the replays
  below measure every candidate the file lacks and append it there, so a
  later run measures nothing twice. The best known is the least time in the
  file after the replays.

Then each strategy is replayed, once per seed, ``--budget`` distinct
candidates at most (``bench._replay``): the optuna strategies of
``laytune.search.STRATEGIES`` with their own samplers, the identity
candidate first, and the model strategy (``laytune.search.ModelSearch``,
batches of 8 after the identity). Reported per strategy: the median over
seeds of the trials to come within ``--within`` (10%) of the best known (a
seed that does not get there counts as more than any that does), and the
median best found after 32, 64 and 128 trials, as a multiple of the best
known. Replaying recorded times makes the comparison free of measurement
noise: every strategy and seed sees the same value for the same candidate.

Prediction quality: the cost model trained on a random half of a space's
measured candidates (the exhaustive set, or the reference file), Spearman's
rank correlation of its predictions with the times of the other half.
Printed, and written to ``bench/results/search_efficiency.md``.
"""

from __future__ import annotations

import argparse
import json
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
from bench._replay import (
    MODEL_BATCH,
    Oracle,
    best_at,
    held_out_spearman,
    replay_model,
    replay_sampler,
    trials_to,
)
from laytune import ops
from laytune.records import open_database
from laytune.runners import Device, MeasureConfig, default_device
from laytune.search import STRATEGIES, ModelSearch, pool_for, standard_candidates
from laytune.space import SearchSpace, SpaceOptions

RESULT_NAME = "search_efficiency.md"
CONFIG = MeasureConfig(warmup=2, repeats=7, measure_conversions=False, time_limit_s=60)
# the default spaces' kernels take up to seconds each: fewer repeats
LARGE_CONFIG = MeasureConfig(warmup=1, repeats=3, measure_conversions=False, time_limit_s=60)
REFERENCES = _report.RESULTS / "search_reference"
CHECKPOINTS = (32, 64, 128)


@dataclass(frozen=True)
class Space:
    title: str
    workload: Any
    options: SpaceOptions | None  # None: the default space
    summary: str  # what the options leave, in words
    slug: str = ""  # the reference file's name, for a default space


def default_spaces() -> list[Space]:
    return [
        Space("matmul 1024", ops.matmul(1024, 1024, 1024), None, "the default space", "matmul1024"),
        Space(
            "conv2d 1x64x56x56, 64 filters 3x3",
            ops.conv2d(1, 64, 56, 56, 64, 3, stride=1, padding=1),
            None,
            "the default space",
            "conv2d64x56",
        ),
    ]


def spaces(quick: bool) -> list[Space]:
    wg = (0,) if quick else (0, 4)
    blocks = (1, 4) if quick else (1, 2, 4)
    suffix = "-quick" if quick else ""
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
            "matmul256" + suffix,
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
            "conv2d32x28" + suffix,
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
            "max_pool112" + suffix,
        ),
    ]


# -- the exhaustive measurement ------------------------------------------------------------


@dataclass
class Measured:
    space: Space
    search: SearchSpace
    oracle: Oracle  # candidate key -> time (inf: failed or refused)
    identity_s: float
    failures: dict[str, int]
    missing: int  # candidates of the space without a record
    elapsed_s: float
    candidates: list[Any]  # what prediction quality is measured on
    reference: int = 0  # candidates of the reference run (default spaces)
    read_back: bool = False  # every time came from the space's reference file

    @property
    def values(self) -> dict[str, float]:
        return self.oracle.values

    @property
    def best_s(self) -> float:
        return min(self.values.values())


def measure_exhaustively(space: Space, device: Device, scratch: Path) -> Measured:
    """Every candidate of a small space: read back from its file under
    ``bench/results/search_reference/`` when that holds them all, else
    measured with the exhaustive strategy and written there."""
    assert space.options is not None, "a small space"
    started = time.perf_counter()
    search = SearchSpace(space.workload, device.info, space.options)
    candidates = list(search.enumerate())
    path = REFERENCES / f"{space.slug}.jsonl"
    oracle = Oracle.load(path)
    failures: dict[str, int] = {}
    read_back = all(c.key in oracle.values for c in candidates)
    if not read_back:
        url = str(scratch / f"{space.slug}.sqlite")
        options = laytune.TuneOptions(
            trials=len(search),
            strategy="exhaustive",
            space=space.options,
            warm_start=0,
            measure=CONFIG,
            # the kernels alone are compared (conversions are not measured): every buffer free
            boundary={b.name: "free" for b in space.workload.buffers},
        )
        result = _report.tune(space.workload, device, options=options, database=url, progress=False)
        failures = dict(result.failures)
        recorded = open_database(url).measured(space.workload, device)
        values = {c.key: recorded.get(c.key) for c in candidates}
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = [
            json.dumps(
                {"key": c.key, "value_s": values[c.key], "candidate": c.canonical_json()},
                sort_keys=True,
            )
            for c in candidates
        ]
        _report.write(path.name, "\n".join(rows) + "\n", path)
        oracle = Oracle.load(path)
    missing = sum(c.key not in oracle.values for c in candidates)
    oracle.values = {c.key: oracle.values.get(c.key, math.inf) for c in candidates}
    if math.isinf(min(oracle.values.values())):
        raise SystemExit(f"{space.title}: no candidate was verified ({failures})")
    return Measured(
        space,
        search,
        oracle,
        oracle.values[search.identity().key],
        failures,
        missing,
        time.perf_counter() - started,
        candidates,
        read_back=read_back,
    )


def measure_reference(space: Space, device: Device, size: int, seed: int = 12345) -> Measured:
    """The default space's reference run, topped up to ``size`` candidates:
    half uniform draws, then a local search (neighbours of the best so far)."""
    started = time.perf_counter()
    search = SearchSpace(space.workload, device.info)
    path = REFERENCES / f"{space.slug}.jsonl"
    oracle = Oracle.load(path, workload=space.workload, device=device, config=LARGE_CONFIG)
    walker = ModelSearch(search, seed)
    identity = search.identity()
    oracle(identity)
    while len(oracle.values) < size:
        local = len(oracle.values) >= size // 2
        best = min(oracle.candidates.values(), key=lambda c: oracle.values[c.key])
        batch = [walker.neighbour(best) if local else walker.draw() for _ in range(8)]
        oracle.many([c for c in batch if c.key not in oracle.values])
        print(
            f"  reference: {len(oracle.values)} candidates, best {min(oracle.values.values()) * 1e3:.3f} ms",
            flush=True,
        )
    return Measured(
        space,
        search,
        oracle,
        oracle(identity),
        {},
        0,
        time.perf_counter() - started,
        list(oracle.candidates.values()),
        len(oracle.values),
    )


# -- replays -----------------------------------------------------------------------------


@dataclass
class Efficiency:
    strategy: str
    runs: list[list[float]]  # per seed: the times of the distinct candidates, in order
    seconds: float

    def trials(self, target: float) -> list[int | None]:
        return [trials_to(run, target) for run in self.runs]

    def median_trials(self, target: float) -> float | None:
        """Median over seeds, a seed that never reached the target counting as
        infinitely many trials (None when the median itself is such a seed)."""
        ranked = sorted(self.trials(target), key=lambda t: math.inf if t is None else t)
        middle = ranked[(len(ranked) - 1) // 2 : len(ranked) // 2 + 1]
        if any(t is None for t in middle):
            return None
        return statistics.mean(t for t in middle if t is not None)

    def median_best(self, trials: int) -> float | None:
        """Median over seeds of the best time within the first ``trials``
        (None when a run is shorter than that: the space ran out)."""
        if any(len(run) < trials for run in self.runs):
            return None
        return statistics.median(best_at(run, trials) for run in self.runs)


def efficiencies(
    measured: Measured, seeds: int, budget: int, strategies: Sequence[str], starts: int = 0
) -> list[Efficiency]:
    """Each strategy replayed once per seed; ``starts``: how many of
    ``laytune.tune``'s standard candidates come right after the identity."""
    search, oracle = measured.search, measured.oracle
    forced = standard_candidates(search, starts) if starts else []
    out = []
    for strategy in strategies:
        started = time.perf_counter()
        runs = []
        for seed in range(seeds):
            if strategy == "model":
                runs.append(replay_model(search, oracle, seed, budget, starts=forced))
            else:
                runs.append(replay_sampler(search, oracle, strategy, seed, budget, forced))
        out.append(Efficiency(strategy, runs, time.perf_counter() - started))
    return out


# -- the report --------------------------------------------------------------------------


def _count(value: float | None) -> str:
    if value is None:
        return "not reached"
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


def _ratio(value: float | None, best: float) -> str:
    if value is None:
        return "-"
    return "failed" if math.isinf(value) else f"{value / best:.2f}x"


def _targets(results: Sequence[tuple[Measured, list[Efficiency], Any]], within: float) -> list[str]:
    """The issue's targets, checked on what was run."""
    lines = []
    for measured, effs, _ in results:
        by_name = {e.strategy: e for e in effs}
        target = measured.best_s * (1.0 + within)
        model, random = by_name.get("model"), by_name.get("random")
        if model is None:
            continue
        title = measured.space.title
        if measured.space.options is None:
            seeds = model.trials(target)
            hits = sum(t is not None and t <= 64 for t in seeds)
            lines.append(
                f"- {title}: model within {within * 100:g}% of the best known in at most 64 "
                f"trials in {hits} of {len(seeds)} seeds (target: all)"
            )
        if random is not None:
            mine, theirs = model.median_trials(target), random.median_trials(target)
            budget = max(len(run) for run in random.runs)
            if mine is None:
                verdict = "not met"
            elif theirs is None:  # random's median lies beyond the budget
                verdict = (
                    f"met (random needs more than {budget})"
                    if mine <= budget / 2
                    else f"not shown (random needs more than {budget}, whose half is "
                    f"{budget / 2:g})"
                )
            else:
                verdict = "met" if mine <= theirs / 2 else "not met"
            lines.append(
                f"- {title}: model median {_count(mine)} against random's {_count(theirs)} "
                f"trials: {verdict} (target: at most half)"
            )
    return lines


def report(
    results: Sequence[tuple[Measured, list[Efficiency], Any]],
    device: Device,
    args: argparse.Namespace,
    wall: float,
) -> str:
    percent = f"{args.within * 100:g}%"
    rows = []
    for measured, effs, _ in results:
        best = measured.best_s
        target = best * (1.0 + args.within)
        for eff in effs:
            trials = eff.trials(target)
            reached = [t for t in trials if t is not None]
            rows.append(
                [
                    measured.space.title,
                    eff.strategy,
                    _count(eff.median_trials(target)),
                    ", ".join(_count(t) for t in trials),
                    f"{len(reached)}/{len(trials)}",
                    *(_ratio(eff.median_best(n), best) for n in CHECKPOINTS),
                ]
            )
    space_lines = []
    for measured, effs, quality in results:
        best = measured.best_s
        target = best * (1.0 + args.within)
        size = len(measured.search)
        known = len(measured.values)
        good = sum(v <= target for v in measured.values.values())
        failed = sum(math.isinf(v) for v in measured.values.values())
        if measured.space.options is None:
            how = (
                f"reference run of {measured.reference} candidates (half uniform draws, half "
                f"local search; warmup {LARGE_CONFIG.warmup}, repeats {LARGE_CONFIG.repeats}); "
                f"{known} candidates measured after the replays ({measured.oracle.measured} "
                f"in this run"
                + (
                    f"; {measured.oracle.skipped} rows of another device or host not read"
                    if measured.oracle.skipped
                    else ""
                )
                + ")"
            )
        elif measured.read_back and measured.oracle.path is not None:
            how = (
                f"measured exhaustively once, read back from "
                f"bench/results/search_reference/{measured.oracle.path.name}"
            )
        else:
            how = f"measured exhaustively in {measured.elapsed_s:.0f} s"
        rho, trained, tested = quality
        space_lines.append(
            f"- {measured.space.title} (`{measured.space.workload.key}`): {size} candidates "
            f"({measured.space.summary}); {how}; best known {best * 1e3:.4f} ms, identity "
            f"{measured.identity_s * 1e3:.4f} ms; {good} within {percent} of the best known; "
            f"{failed} failed or refused; model's Spearman on held-out records "
            f"{rho:.2f} (trained on {trained}, tested on {tested}); replays took "
            + ", ".join(f"{e.strategy} {e.seconds:.0f} s" for e in effs)
        )
    lines = [
        f"# Search efficiency: trials to come within {percent} of the best known",
        "",
        *_report.environment(device),
        f"- {'quick run; ' if args.quick else ''}each strategy replayed on recorded times "
        f"with seeds 0-{args.seeds - 1}, budget {args.budget} distinct candidates, the identity "
        "candidate first"
        + (
            f", then {args.starts} of tune's standard candidates (as a job forces them)"
            if args.starts
            else ""
        )
        + f" (small spaces: measured exhaustively, warmup {CONFIG.warmup}, "
        f"repeats {CONFIG.repeats}; compute kernels only, results checked against numpy); "
        f"{wall:.0f} s in all",
        f"- trials: distinct candidates evaluated up to and including the first within "
        f"{percent} of the best known; median over the seeds (a seed that does not get there "
        "counts as more than any that does); best at N: median over seeds of the best "
        "time among the first N, over the best known ('-': the space holds fewer)",
        "- strategies: random, tpe (optuna TPE, 8 random starts), tpe-mv (multivariate TPE "
        "grouped by conditional sub-space), nsga2, model (gradient-boosted cost model, "
        f"batches of {MODEL_BATCH}, the best predicted of {pool_for(args.budget)} pooled "
        "candidates, as tune runs it for this budget; 1 in 8 explored)",
        "",
        *_report.table(
            [
                "space",
                "strategy",
                "trials (median)",
                "per seed",
                "seeds reached",
                *(f"best at {n}" for n in CHECKPOINTS),
            ],
            rows,
            "llrrrrrr",
        ),
        "",
        "## Targets",
        "",
        *_targets(results, args.within),
        "",
        "## The spaces",
        "",
        *space_lines,
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--spaces", choices=("small", "default", "all"), default="all", help="which spaces (all)"
    )
    parser.add_argument("--quick", action="store_true", help="smaller small spaces")
    parser.add_argument("--seeds", type=int, default=5, help="seeds per strategy (5)")
    parser.add_argument("--budget", type=int, default=128, help="trials per replay (128)")
    parser.add_argument(
        "--reference", type=int, default=512, help="reference run of a default space (512)"
    )
    names = [s for s in STRATEGIES if s != "exhaustive"]
    parser.add_argument(
        "--strategies", default=",".join(names), help=f"comma-separated ({','.join(names)})"
    )
    parser.add_argument(
        "--scratch",
        type=Path,
        default=None,
        help="folder for the exhaustive measurements' databases, so that an interrupted "
        "measurement resumes (default: a temporary folder)",
    )
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated: the spaces whose title holds one of these texts (all)",
    )
    parser.add_argument(
        "--starts",
        type=int,
        default=0,
        help="tune's standard candidates replayed right after the identity, as a job forces "
        "them (0: the strategies alone; a job of N trials forces N // 4)",
    )
    parser.add_argument("--within", type=float, default=0.10, help="how close to the best (0.10)")
    parser.add_argument("--out", type=Path, default=None, help="markdown file to write")
    args = parser.parse_args(argv)
    strategies = [s for s in args.strategies.split(",") if s]
    unknown = sorted(set(strategies) - set(names))
    if unknown:
        parser.error(f"unknown strategies {unknown} (known: {', '.join(names)})")

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    device = default_device()
    print(f"device: {device.name}", flush=True)
    started = time.perf_counter()
    results = []
    with tempfile.TemporaryDirectory(prefix="laytune-bench-") as temporary:
        scratch = args.scratch or Path(temporary)
        scratch.mkdir(parents=True, exist_ok=True)
        chosen = []
        if args.spaces in ("small", "all"):
            chosen += spaces(args.quick)
        if args.spaces in ("default", "all"):
            chosen += default_spaces()
        wanted = args.only.split(",")
        for space in [s for s in chosen if any(w in s.title for w in wanted)]:
            print(f"{space.title}: measuring ...", flush=True)
            if space.options is None:
                measured = measure_reference(space, device, args.reference)
            else:
                measured = measure_exhaustively(space, device, scratch)
            # prediction quality on what the reference (or exhaustive) run measured
            quality = held_out_spearman(measured.search, measured.values, measured.candidates)
            print(f"  model's Spearman on held-out records: {quality[0]:.2f}", flush=True)
            try:
                effs = efficiencies(measured, args.seeds, args.budget, strategies, args.starts)
            finally:
                measured.oracle.close()
            target = measured.best_s * (1.0 + args.within)
            for eff in effs:
                print(f"  {eff.strategy}: {[_count(t) for t in eff.trials(target)]}", flush=True)
            results.append((measured, effs, quality))
    text = report(results, device, args, time.perf_counter() - started)
    print(text)
    path = _report.write(RESULT_NAME, text, args.out)
    print(f"written to {_report.shown(path)}")


if __name__ == "__main__":
    main()
