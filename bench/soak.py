"""Soak: a 1,000-candidate tuning job, its resident memory and its pace.

Run: ``python -m bench.soak`` (``--candidates N`` for another length,
``--quick`` for 200). Pick the device with ``LAYTUNE_DEVICE``.

The job tunes a small copy (32 x 32 floats, a few microseconds a kernel) with
the random strategy, 8 candidates a batch, into a fresh SQLite file, in a
process of its own (``python -m bench.soak --job URL N``), so this process
can watch it from outside: every ``--sample-s`` seconds it reads the
resident memory (RSS) of the job's main process, of its build workers, of
its measuring worker and of the resource trackers (psutil, all of the job's
descendants), and the number of records the job has committed.

It prints and writes ``bench/results/soak.md``: RSS at every 100 candidates;
the growth per 100 candidates from the 100th on, in MiB and in percent of
the total at 100 (least-squares slope of the total against candidates over
the samples taken while the job measures: the first 100 are start-up,
imports, compilers loaded, pools filled; the job's last batch is followed by
its layout reference, the pools closing and its result, so the last sample
that counts is the last one taken before the job's final record count, with
its measuring worker alive); the growth from the 100th candidate to that last
sample (target: flat within 10 %); candidates per minute over the whole job
and from the 100th on.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil

from bench import _report

ROOT = Path(__file__).resolve().parents[1]
STEP = 100  # candidates between the rows of the table
ROLES = ("main", "build workers", "measuring worker", "resource trackers")


@dataclass(frozen=True)
class Sample:
    seconds: float
    records: int
    rss: dict[str, int]  # role -> bytes

    @property
    def total(self) -> int:
        return sum(self.rss.values())


def run_job(url: str, candidates: int) -> None:
    """The soaked job itself (``--job``): runs in its own process."""
    import laytune
    from laytune import ops

    options = laytune.TuneOptions(
        trials=candidates, batch=8, strategy="random", warm_start=0, seed=7
    )
    result = laytune.tune(ops.copy((32, 32)), options=options, database=url, progress=False)
    print(result.summary(), flush=True)


def _role(process: psutil.Process, job: int) -> str | None:
    if process.pid == job:
        return "main"
    command = " ".join(process.cmdline())
    if "resource_tracker" in command:
        return "resource trackers"
    if "loky.backend.popen_loky_posix" in command:
        return "build workers"
    if "multiprocessing.spawn" in command:
        return "measuring worker"
    return None


def sample(job: psutil.Process, db: Path, started: float) -> Sample | None:
    rss = dict.fromkeys(ROLES, 0)
    try:
        processes = [job, *job.children(recursive=True)]
    except psutil.NoSuchProcess:
        return None
    for process in processes:
        try:
            role = _role(process, job.pid)
            if role is not None:
                rss[role] += process.memory_info().rss
        except psutil.Error:  # a worker that ended between the listing and the read
            continue
    return Sample(time.monotonic() - started, _records(db), rss)


def _records(db: Path) -> int:
    import sqlite3

    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as conn:
            return int(conn.execute("SELECT count(*) FROM laytune_records").fetchone()[0])
    except sqlite3.OperationalError:  # not created yet
        return 0


def soak(candidates: int, sample_s: float) -> tuple[list[Sample], str, float]:
    """Run the job and watch it: the samples, its summary, its wall time."""
    with tempfile.TemporaryDirectory(prefix="laytune-soak-") as folder:
        db = Path(folder) / "soak.db"
        command = [sys.executable, "-m", "bench.soak", "--job", f"sqlite:///{db}", str(candidates)]
        started = time.monotonic()
        job = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        watched = psutil.Process(job.pid)
        samples = []
        while job.poll() is None:
            taken = sample(watched, db, started)
            if taken is not None and taken.records > 0:
                samples.append(taken)
                print(
                    f"\r{taken.records:5d} candidates, RSS {taken.total / 2**20:7.1f} MiB",
                    end="",
                    file=sys.stderr,
                    flush=True,
                )
            time.sleep(sample_s)
        print(file=sys.stderr)
        summary = job.stdout.read() if job.stdout else ""
        elapsed = time.monotonic() - started
        if job.returncode != 0:
            raise SystemExit(f"the soaked job failed with exit {job.returncode}")
    return samples, summary.strip(), elapsed


def at(samples: list[Sample], records: int) -> Sample:
    """The first sample with at least ``records`` candidates committed."""
    return next(s for s in samples if s.records >= records)


def measuring(samples: list[Sample]) -> list[Sample]:
    """The samples taken while the job measures, from its 100th candidate on:
    before its final record count (once the last batch is committed, the job
    measures its layout reference, closes its pools and writes its result,
    and the resident memory falls with the workers that end) and with its
    measuring worker alive. Empty when the job did not get that far."""
    if not samples:
        return []
    final = max(s.records for s in samples)
    return [
        s for s in samples if STEP <= s.records < final and s.rss.get("measuring worker", 0) > 0
    ]


@dataclass(frozen=True)
class Growth:
    """Resident memory against candidates over the samples while the job measures."""

    per_step_bytes: float  # least-squares slope, bytes per STEP candidates
    base: Sample  # the first sample at STEP candidates
    last: Sample  # the last sample while the job measures

    @property
    def per_step_percent(self) -> float:
        return 100.0 * self.per_step_bytes / self.base.total

    @property
    def overall_percent(self) -> float:
        return 100.0 * (self.last.total - self.base.total) / self.base.total


def growth(samples: list[Sample]) -> Growth:
    """The growth of the job's total resident memory per ``STEP`` candidates
    over :func:`measuring`'s samples (at least two, at two record counts)."""
    steady = measuring(samples)
    if len({s.records for s in steady}) < 2:
        raise SystemExit(
            f"too few samples while the job measured ({len(steady)} from the {STEP}th "
            "candidate on): run more candidates or sample more often (--sample-s)"
        )
    slope = np.polyfit([s.records for s in steady], [s.total for s in steady], 1)[0]
    return Growth(float(slope) * STEP, steady[0], steady[-1])


def report(candidates: int, samples: list[Sample], summary: str, elapsed: float) -> str:
    from laytune.runners import default_device

    grown = growth(samples)
    base, last = grown.base, grown.last
    marks = [m for m in range(STEP, candidates + 1, STEP) if last.records >= m]
    rows = []
    for mark in marks:
        s = at(samples, mark)
        rows.append(
            [
                str(mark),
                f"{s.seconds:.0f}",
                *(f"{s.rss[role] / 2**20:.1f}" for role in ROLES),
                f"{s.total / 2**20:.1f}",
            ]
        )
    overall = grown.overall_percent
    pace = 60.0 * max(s.records for s in samples) / elapsed
    steady_pace = 60.0 * (last.records - base.records) / (last.seconds - base.seconds)
    verdict = "within" if abs(overall) <= 10.0 else "outside"
    lines = [
        "# Soak: resident memory of a long tuning job",
        "",
        *_report.environment(default_device()),
        f"- job: copy 32 x 32 float32, strategy random, 8 candidates a batch, "
        f"{candidates} candidates, RSS sampled by psutil, {len(samples)} samples",
        "",
        *_report.table(
            ["candidates", "seconds", *(f"{r} (MiB)" for r in ROLES), "total (MiB)"],
            rows,
            "r" * (3 + len(ROLES)),
        ),
        "",
        f"growth per {STEP} candidates from the {STEP}th on, while the job measures: "
        f"{grown.per_step_bytes / 2**20:+.2f} MiB ({grown.per_step_percent:+.2f} % of "
        f"{base.total / 2**20:.1f} MiB; least-squares slope over "
        f"{len(measuring(samples))} samples)",
        "",
        f"growth from the {STEP}th to the {last.records}th candidate (the last sample "
        f"before the pools close): {overall:+.1f} % ({verdict} the 10 % target)",
        "",
        f"candidates per minute: {pace:.0f} over the whole job ({elapsed:.0f} s with "
        f"start-up), {steady_pace:.0f} from the {STEP}th on",
        "",
        "```",
        summary,
        "```",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="200 candidates")
    parser.add_argument("--sample-s", type=float, default=1.0, help="seconds between samples")
    parser.add_argument("--job", nargs=2, metavar=("URL", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.job:
        run_job(args.job[0], int(args.job[1]))
        return 0
    candidates = 200 if args.quick else args.candidates
    samples, summary, elapsed = soak(candidates, args.sample_s)
    text = report(candidates, samples, summary, elapsed)
    print(text)
    if not args.quick:
        print(f"written to {_report.shown(_report.write('soak.md', text))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
