"""The tuner's own cost as the work grows: ratios from one run.

Run: ``python -m bench.scale [--quick] [--trials N] [--only TEXT] [--out FILE]``
(``--quick`` for a development run: the two
smallest sizes of each series, 6 trials each; 12 otherwise, 4 per batch). Pick the device with
``LAYTUNE_DEVICE`` (any ``select_device`` spec).

Each case runs in a fresh process (nothing cached by an earlier case): it
builds the ``SearchSpace`` once, timed, then tunes a short job (the default
strategy and boundary, an empty database) while this process samples the
resident memory of the job's whole process tree (main, build workers,
measuring worker). Per case the report gives:

- space construction: ``SearchSpace(workload, device)``, wall seconds;
- measure time per trial: what the measuring worker spent per record in
  ``measure_candidate`` (uploads, warm-ups, timed runs, cache flushes,
  read-back and the check against the reference), the device's share;
- host time per trial: the job's wall time from its start (space built)
  to its end, less the measure time, per record: proposing, lowering,
  building, pricing and writing records (the worker's start and the
  reference, once per job, are in it too); and the same after the job's
  first batch (the baseline, which pays those once), which the host ratio
  against the series' first case is taken of;
- peak resident memory of the job's processes together, the bytes of the
  workload's buffers (logical, row-major), the device memory of the largest
  candidate measured (``allocation_bytes`` of its program: a logical and a
  physical view of every buffer whose layout is not its logical one; on a
  CPU device that memory is the measuring process's own), and the peak's
  growth over the series' smallest case per byte grown of each (the
  target: at most 2 per byte of the buffers measured, the device memory).

Targets (issue 26): space construction under 1 s for every shape; host time
per trial of transpose 8192^2 within 1.5x of 512^2. The series' ratios are
from one run, on the same machine at about the same time: a machine shared
with other work shifts every figure, the ratios less so.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import _report

ROOT = Path(__file__).resolve().parent.parent

#: Most host time per trial at the largest transpose, as a multiple of the smallest.
HOST_RATIO_TARGET = 1.5
#: Most seconds to build a space.
SPACE_TARGET_S = 1.0
#: Candidates per batch: a job of a few trials still has batches after its first.
BATCH = 4
#: Most growth of the peak resident memory per byte of buffers grown.
MEMORY_TARGET = 2.0


@dataclass(frozen=True)
class Case:
    """One workload of a series; ``quick`` cases make the ``--quick`` run."""

    label: str
    series: str
    op: str
    params: tuple[tuple[str, int], ...]
    quick: bool = False

    def workload(self) -> Any:
        from laytune import ops

        params = dict(self.params)
        if self.op == "transpose":
            return ops.transpose((params["n"], params["n"]))
        return getattr(ops, self.op)(**params)


def _transpose(n: int, quick: bool = False) -> Case:
    return Case(f"transpose {n}^2", "transpose", "transpose", (("n", n),), quick)


def _matmul(m: int, n: int, k: int, quick: bool = False) -> Case:
    label = f"matmul {m}^3" if m == n == k else f"matmul {m} x {k} x {n}"
    return Case(label, "matmul", "matmul", (("M", m), ("N", n), ("K", k)), quick)


CASES: tuple[Case, ...] = (
    _transpose(512, quick=True),
    _transpose(1024),
    _transpose(2048, quick=True),
    _transpose(4096),
    _transpose(8192),
    _matmul(512, 512, 512, quick=True),
    _matmul(1024, 1024, 1024, quick=True),
    _matmul(2048, 2048, 2048),
    _matmul(4096, 4096, 4096),
    _matmul(4096, 4096, 11008),  # an LLM projection: 4096 x 11008 weights
    Case(
        "conv2d (1, 64, 224, 224) x 64, 3x3",
        "conv2d",
        "conv2d",
        (
            ("batch", 1),
            ("in_channels", 64),
            ("height", 224),
            ("width", 224),
            ("filters", 64),
            ("kernel", 3),
            ("padding", 1),
        ),
    ),
)


# -- the figures, from what a case's process reports ---------------------------------
@dataclass(frozen=True)
class Measured:
    """What one case's process reports (JSON between the two processes)."""

    space_s: float
    job_s: float
    measure_s: tuple[float, ...]  # per record written
    buffer_bytes: int
    failures: int = 0
    why_failed: tuple[str, ...] = ()  # each failed record's status and message, shortened
    first_batch: int = 0  # records of the job's first batch (its worker start and reference)
    first_s: float = 0.0  # from the job's start to the end of its first batch
    device_bytes: int = 0  # device memory of the largest candidate measured (all its views)


@dataclass(frozen=True)
class Row:
    """One line of the report: a case, its figures, and its ratios in its series."""

    case: Case
    measured: Measured
    peak_bytes: int
    host_ratio: float | None = None  # host time per trial over the series' first case
    memory_growth: float | None = None  # peak grown per byte of buffers grown, ditto
    device_growth: float | None = None  # peak grown per byte of device memory grown, ditto

    @property
    def trials(self) -> int:
        return len(self.measured.measure_s)

    @property
    def measure_per_trial_s(self) -> float:
        return math.fsum(self.measured.measure_s) / self.trials if self.trials else math.nan

    @property
    def host_per_trial_s(self) -> float:
        """Over the whole job, its one-off costs included."""
        return host_per_trial(self.measured.job_s, self.measured.measure_s)

    @property
    def steady_host_per_trial_s(self) -> float:
        """After the first batch: without the worker's start and the
        reference, which a job pays once, whatever its trials."""
        m = self.measured
        return host_per_trial(m.job_s - m.first_s, m.measure_s[m.first_batch :])


def host_per_trial(job_s: float, measure_s: Sequence[float]) -> float:
    """Seconds per record that the job spent outside the measuring worker's
    measurement (NaN without records)."""
    if not measure_s:
        return math.nan
    return max(0.0, job_s - math.fsum(measure_s)) / len(measure_s)


def with_ratios(rows: Sequence[Row]) -> list[Row]:
    """``rows`` with each one's host-time ratio and memory growth against the
    first row of its series (that row's ratio is 1)."""
    first: dict[str, Row] = {}
    out = []
    for row in rows:
        base = first.setdefault(row.case.series, row)
        steady, mine = base.steady_host_per_trial_s, row.steady_host_per_trial_s
        ratio = mine / steady if steady > 0 and math.isfinite(mine) else None
        peak = row.peak_bytes - base.peak_bytes
        grown = row.measured.buffer_bytes - base.measured.buffer_bytes
        growth = peak / grown if grown > 0 else None
        grown = row.measured.device_bytes - base.measured.device_bytes
        device = peak / grown if grown > 0 else None
        out.append(Row(row.case, row.measured, row.peak_bytes, ratio, growth, device))
    return out


def verdicts(rows: Sequence[Row]) -> list[str]:
    """One line per target: met or missed, with the figure that decides it."""
    lines = []
    slowest = max(rows, key=lambda r: r.measured.space_s, default=None)
    if slowest is not None:
        met = slowest.measured.space_s < SPACE_TARGET_S
        lines.append(
            f"- space construction under {SPACE_TARGET_S:g} s for every shape: "
            f"{'met' if met else 'missed'} (slowest {slowest.case.label}, "
            f"{slowest.measured.space_s:.2f} s)"
        )
    transposes = [r for r in rows if r.case.series == "transpose" and r.host_ratio is not None]
    if len(transposes) > 1:
        last = transposes[-1]
        met = last.host_ratio is not None and last.host_ratio <= HOST_RATIO_TARGET
        lines.append(
            f"- host time per trial of {last.case.label} within {HOST_RATIO_TARGET:g}x of "
            f"{transposes[0].case.label}: {'met' if met else 'missed'} ({last.host_ratio:.2f}x)"
        )
    # Per series, its largest case: the growth over the most bytes, where a
    # few MiB of difference between two processes' start-up weigh least.
    largest: dict[str, Row] = {}
    for row in rows:
        if row.device_growth is not None:
            largest[row.case.series] = row
    grown = list(largest.values())
    if grown:
        worst = max(grown, key=lambda r: r.device_growth or 0.0)
        met = (worst.device_growth or 0.0) <= MEMORY_TARGET
        lines.append(
            f"- peak memory grows by at most {MEMORY_TARGET:g} bytes per byte of the buffers "
            f"measured (device memory), each series' largest case: "
            f"{'met' if met else 'missed'} (worst "
            f"{worst.case.label}, {worst.device_growth:.2f}; per byte of the workload's "
            f"logical buffers {worst.memory_growth or math.nan:.2f})"
        )
    return lines


def _mib(value: float) -> str:
    return f"{value / 2**20:,.0f}"


def report(rows: Sequence[Row], trials: int, about: Sequence[str]) -> str:
    header = [
        "case",
        "space (s)",
        "records",
        "measure / trial (s)",
        "host / trial (s)",
        "after batch 1 (s)",
        "host ratio",
        "peak RSS (MiB)",
        "buffers (MiB)",
        "device memory (MiB)",
        "peak growth / buffer growth",
        "peak growth / device growth",
    ]
    body = []
    for row in rows:
        m = row.measured
        body.append(
            [
                row.case.label,
                f"{m.space_s:.2f}",
                f"{row.trials}" + (f" ({m.failures} failed)" if m.failures else ""),
                f"{row.measure_per_trial_s:.3f}",
                f"{row.host_per_trial_s:.3f}",
                f"{row.steady_host_per_trial_s:.3f}",
                "-" if row.host_ratio is None else f"{row.host_ratio:.2f}x",
                _mib(row.peak_bytes),
                _mib(m.buffer_bytes),
                _mib(m.device_bytes),
                "-" if row.memory_growth is None else f"{row.memory_growth:.2f}",
                "-" if row.device_growth is None else f"{row.device_growth:.2f}",
            ]
        )
    lines = [
        "## The tuner's own cost as the work grows (bench.scale)",
        "",
        *about,
        f"- {trials} trials per job, {BATCH} per batch (the baseline and the layout reference "
        "add records), "
        "default strategy and boundary, an empty database; each case in a fresh process",
        "",
        *_report.table(header, body, "lrrrrrrrrrrr"),
        "",
        *verdicts(rows),
        *failures(rows),
        "",
    ]
    return "\n".join(lines)


def failures(rows: Sequence[Row]) -> list[str]:
    """Why records failed, per case: each distinct reason once, with its count
    (a failed record has no measure time: its time counts as the host's)."""
    lines = []
    for row in rows:
        counts: dict[str, int] = {}
        for why in row.measured.why_failed:
            counts[why] = counts.get(why, 0) + 1
        for why, count in counts.items():
            lines.append(f"- {row.case.label}, {count} failed: {why}")
    return (["", "Failures:", *lines]) if lines else []


# -- one case, in its own process ------------------------------------------------------
def run_case(case: Case, trials: int) -> Measured:
    """Build the space (timed) and tune ``trials`` candidates of ``case``."""
    import numpy as np

    import laytune
    from laytune.codegen import lower
    from laytune.runners import default_device
    from laytune.runners._memory import allocation_bytes
    from laytune.search import TuneCallback
    from laytune.space import SearchSpace

    workload = case.workload()
    device = default_device()
    started = time.perf_counter()
    SearchSpace(workload, device.info)
    space_s = time.perf_counter() - started

    class Clock(TuneCallback):
        def __init__(self) -> None:
            self.start = self.end = 0.0
            self.measure: list[float] = []
            self.failures = 0
            self.why: list[str] = []
            self.first: tuple[int, float] | None = None
            self.device_bytes = 0

        def on_start(self, job: Any) -> None:
            self.start = time.perf_counter()

        def on_batch(self, job: Any, records: list[Any]) -> None:
            if self.first is None:
                self.first = (len(records), time.perf_counter() - self.start)
            for record in records:
                self.measure.append(float((record.result or {}).get("measure_seconds", 0.0)))
                try:
                    program = lower(workload, record.candidate, device.info)
                except Exception:  # a candidate refused before measuring allocated nothing
                    program = None
                if program is not None and record.ok:
                    size = sum(allocation_bytes(program).values())
                    self.device_bytes = max(self.device_bytes, size)
                if not record.ok:
                    self.failures += 1
                    self.why.append(
                        f"{record.status}: {record.error_message.splitlines()[0][:160]}"
                    )

        def on_end(self, job: Any) -> None:
            self.end = time.perf_counter()

    clock = Clock()
    with tempfile.TemporaryDirectory(prefix="laytune-scale-") as folder:
        _report.stop_if_interrupted(
            laytune.tune(
                workload,
                device,
                options=laytune.TuneOptions(trials=trials, batch=BATCH),
                database=f"sqlite:///{Path(folder) / 'scale.db'}",
                callbacks=[clock],
                progress=False,
            )
        )
    buffer_bytes = sum(math.prod(b.shape) * np.dtype(b.dtype).itemsize for b in workload.buffers)
    return Measured(
        space_s,
        clock.end - clock.start,
        tuple(clock.measure),
        int(buffer_bytes),
        clock.failures,
        tuple(clock.why),
        *(clock.first or (0, 0.0)),
        clock.device_bytes,
    )


def tree_rss(process: Any) -> int:
    """Resident bytes of ``process`` (a psutil Process) and all its descendants."""
    import psutil

    total = 0
    try:
        members = [process, *process.children(recursive=True)]
    except psutil.Error:
        return 0
    for member in members:
        try:
            total += member.memory_info().rss
        except psutil.Error:  # one that ended between the listing and the read
            continue
    return total


def measure_case(case: Case, trials: int, sample_s: float = 0.1) -> Row:
    """Run ``case`` in a fresh process, sampling its tree's memory; its row."""
    import psutil

    with tempfile.TemporaryDirectory(prefix="laytune-scale-") as folder:
        out = Path(folder) / "case.json"
        command = [
            sys.executable,
            "-m",
            "bench.scale",
            "--case",
            case.label,
            "--trials",
            str(trials),
            "--case-out",
            str(out),
        ]
        job = subprocess.Popen(command, cwd=ROOT)
        watched = psutil.Process(job.pid)
        peak = 0
        while job.poll() is None:
            peak = max(peak, tree_rss(watched))
            time.sleep(sample_s)
        if job.returncode != 0:
            raise SystemExit(f"{case.label}: the case's process exited with {job.returncode}")
        data = json.loads(out.read_text())
    data["measure_s"] = tuple(data["measure_s"])
    data["why_failed"] = tuple(data.get("why_failed", ()))
    return Row(case, Measured(**data), peak)


def environment() -> list[str]:
    """The report's lines on the device, the versions and the machine's load."""
    from laytune.runners import default_device

    lines = _report.environment(default_device())
    lines.append(f"- load average at the end: {os.getloadavg()[0]:.1f}")
    return lines


def main(argv: Sequence[str] | None = None, run: Callable[..., Row] = measure_case) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the smallest sizes, 6 trials")
    parser.add_argument("--trials", type=int, default=None, help="trials per job (12)")
    parser.add_argument("--only", default="", help="run the cases whose label holds this text")
    parser.add_argument("--out", type=Path, help="markdown file (bench/results/scale.md)")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--case-out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    trials = args.trials or (6 if args.quick else 12)
    if args.case:
        case = next(c for c in CASES if c.label == args.case)
        measured = run_case(case, trials)
        Path(args.case_out).write_text(json.dumps(asdict(measured)))
        return 0
    cases = [c for c in CASES if (c.quick or not args.quick) and args.only in c.label]
    rows = []
    for case in cases:
        print(f"{case.label} ...", file=sys.stderr, flush=True)
        rows.append(run(case, trials))
    text = report(with_ratios(rows), trials, environment())
    print(text)
    if args.out is not None or (not args.quick and not args.only):
        print(f"written to {_report.shown(_report.write('scale.md', text, args.out))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
