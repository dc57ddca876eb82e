"""The ``laytune`` command line.

``laytune devices`` lists the OpenCL devices; ``laytune tune OP --shape
NAME=VALUE ...`` searches layouts of one workload on one device and prints the
best ones. User mistakes end with a one-line error and exit code 2; a job
that ran but found no valid candidate exits with 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from laytune.exceptions import LayoutRejectedError, LaytuneError

__all__ = ["main"]

EXIT_OK, EXIT_NO_RESULT, EXIT_USAGE = 0, 1, 2


@dataclass(frozen=True)
class _Op:
    params: tuple[str, ...]
    build: Callable[[dict[str, int]], Any]
    help: str


def _ops() -> dict[str, _Op]:
    from laytune import ops

    return {
        "transpose": _Op(
            ("rows", "cols"),
            lambda s: ops.transpose((s["rows"], s["cols"]), (1, 0)),
            "2-D transpose",
        ),
        "copy": _Op(("rows", "cols"), lambda s: ops.copy((s["rows"], s["cols"])), "2-D copy"),
        "matmul": _Op(("M", "N", "K"), lambda s: ops.matmul(s["M"], s["N"], s["K"]), "C = A @ B"),
        "relu": _Op(("rows", "cols"), lambda s: ops.relu((s["rows"], s["cols"])), "max(x, 0)"),
        "sum": _Op(("rows", "cols"), lambda s: ops.sum((s["rows"], s["cols"]), (1,)), "row sums"),
        "conv2d": _Op(
            ("N", "C", "H", "W", "F", "K", "stride", "pad"),
            lambda s: ops.conv2d(
                s["N"], s["C"], s["H"], s["W"], s["F"], s["K"], s["stride"], s["pad"]
            ),
            "NCHW / OIHW convolution",
        ),
    }


def _parse_shape(items: Sequence[str], op: str, spec: _Op) -> dict[str, int]:
    values: dict[str, int] = {}
    for item in items:
        for part in item.split(","):
            name, sep, value = part.partition("=")
            if not sep or not value.strip().lstrip("-").isdigit():
                raise LaytuneError(f"--shape expects NAME=INTEGER, got {part!r}")
            values[name.strip()] = int(value)
    unknown = set(values) - set(spec.params)
    missing = [p for p in spec.params if p not in values]
    if unknown or missing:
        raise LaytuneError(
            f"{op} takes --shape {' '.join(f'{p}=...' for p in spec.params)}"
            + (f"; unknown: {sorted(unknown)}" if unknown else "")
            + (f"; missing: {missing}" if missing else "")
        )
    return values


# -- commands -----------------------------------------------------------------


def _cmd_devices(args: argparse.Namespace) -> int:
    from laytune.runners import device_builds, list_devices

    devices = list_devices()
    if not devices:
        print("no OpenCL device found; install laytune with the 'pocl' or 'intel' extra")
        return EXIT_NO_RESULT
    for device in devices:
        why = device_builds(device)
        status = "builds kernels" if why is None else f"cannot build: {why}"
        info = device.info
        print(f"{device}  [{info.device_type}, {info.compute_units} CU, key {device.key}] {status}")
    return EXIT_OK


@dataclass
class _Outcome:
    candidate: Any
    time_s: float | None
    error: str


def _tune_one(workload: Any, device: Any, trials: int, seed: int, batch: int) -> int:
    import optuna

    from laytune.codegen import lower
    from laytune.runners import Builder, MeasureConfig, RunInput, Runner
    from laytune.space import SearchSpace

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = SearchSpace(workload, device.info)
    print(f"\n== {workload.key} on {device.name}: {len(space)} valid candidates")
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
    outcomes: list[_Outcome] = []
    seen: set[str] = set()
    failures: Counter[str] = Counter()
    start = time.perf_counter()

    def propose(count: int) -> list[tuple[Any, Any]]:
        proposals = []
        for _ in range(count * 4):
            if len(proposals) == count:
                break
            trial = study.ask()
            candidate = space.suggest(trial)
            if candidate.key in seen:
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                continue
            seen.add(candidate.key)
            proposals.append((trial, candidate))
        return proposals

    def programs(proposals: list[tuple[Any, Any]]) -> list[Any]:
        """Lower each proposal; one that lowering refuses is a failure, not an abort."""
        kept, lowered = [], []
        for trial, candidate in proposals:
            try:
                lowered.append(lower(workload, candidate, device=device.info))
            except LayoutRejectedError as err:
                failures["rejected"] += 1
                outcomes.append(_Outcome(candidate, None, str(err)))
                if trial is not None:
                    study.tell(trial, float("inf"))
                continue
            kept.append((trial, candidate))
        proposals[:] = kept
        return lowered

    config = MeasureConfig(warmup=2, repeats=5)
    with Builder(device) as builder, Runner(device, config) as runner:
        baseline = space.identity()
        seen.add(baseline.key)
        pending: list[tuple[Any, Any]] = [(None, baseline), *propose(batch - 1)]
        future = builder.submit(programs(pending))
        while pending:
            built = future.result()
            remaining = trials - len(outcomes) - len(pending)
            following = propose(min(batch, remaining)) if remaining > 0 else []
            next_programs = programs(following)
            if next_programs:  # build the next batch while this one is measured
                future = builder.submit(next_programs)
            results = runner.run([RunInput(b, workload) for b in built])
            for (trial, candidate), result in zip(pending, results, strict=True):
                ok = result.error_kind.value == "none"
                value = result.value_s if ok else None
                if not ok:
                    failures[result.error_kind.value] += 1
                outcomes.append(_Outcome(candidate, value, "" if ok else result.message))
                if trial is not None:
                    study.tell(trial, value if ok else float("inf"))
            best = min((o.time_s for o in outcomes if o.time_s is not None), default=None)
            base = next((o.time_s for o in outcomes if o.candidate is baseline), None)
            speedup = f"{base / best:.2f}x over identity" if best and base else "n/a"
            failed = ", ".join(f"{k}: {v}" for k, v in failures.items()) or "none"
            print(
                f"  {len(outcomes)}/{trials} measured  best "
                f"{best * 1e3 if best else float('nan'):.3f} ms ({speedup})  "
                f"failures {failed}  {time.perf_counter() - start:.0f} s"
            )
            pending = following
    ranked = sorted((o for o in outcomes if o.time_s is not None), key=lambda o: o.time_s)
    if not ranked:
        print("  no candidate gave a verified result")
        return EXIT_NO_RESULT
    base = next((o.time_s for o in outcomes if o.candidate is baseline), None)
    print("  best layouts:")
    for outcome in ranked[:3]:
        ratio = f"{base / outcome.time_s:.2f}x" if base else "n/a"
        print(f"    {outcome.time_s * 1e3:8.3f} ms  {ratio:>6}  {outcome.candidate.describe()}")
    return EXIT_OK


def _cmd_tune(args: argparse.Namespace) -> int:
    from laytune.runners import default_device, select_device

    device = select_device(args.device) if args.device is not None else default_device()
    if args.demo:
        from laytune import ops

        jobs = [ops.transpose((512, 512), (1, 0)), ops.matmul(128, 128, 128)]
    else:
        if args.op is None:
            raise LaytuneError("tune needs an operator (or --demo); see laytune tune --help")
        table = _ops()
        if args.op not in table:
            raise LaytuneError(f"unknown operator {args.op!r}; known: {', '.join(table)}")
        jobs = [table[args.op].build(_parse_shape(args.shape, args.op, table[args.op]))]
    status = EXIT_OK
    for workload in jobs:
        status = max(status, _tune_one(workload, device, args.trials, args.seed, args.batch))
    return status


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="laytune", description="Search memory layouts of OpenCL kernels."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    devices = commands.add_parser("devices", help="list OpenCL devices and whether they build")
    devices.set_defaults(run=_cmd_devices)
    tune = commands.add_parser(
        "tune",
        help="search the layouts of one operator",
        epilog="operators: "
        + "; ".join(f"{name} ({', '.join(op.params)}): {op.help}" for name, op in _ops().items()),
    )
    tune.add_argument("op", nargs="?", help="operator to tune")
    tune.add_argument("--shape", action="append", default=[], metavar="NAME=VALUE")
    tune.add_argument("--trials", type=int, default=24, help="candidates to measure (24)")
    tune.add_argument("--batch", type=int, default=8, help="candidates built per batch (8)")
    tune.add_argument("--seed", type=int, default=0)
    tune.add_argument("--device", help="index, platform:device, or name substring")
    tune.add_argument("--demo", action="store_true", help="a transpose and a matmul")
    tune.set_defaults(run=_cmd_tune)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return int(args.run(args))
    except LaytuneError as err:
        print(f"laytune: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("laytune: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
