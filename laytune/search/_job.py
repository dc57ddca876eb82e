"""A tuning job's shared state, its result, and the callbacks that watch it."""

from __future__ import annotations

import functools
import logging
import math
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from laytune.records import Boundary, Record, is_baseline, layout_text
from laytune.runners import timed_cold
from laytune.space import Candidate, SearchSpace

__all__ = [
    "Job",
    "LogBatches",
    "Persist",
    "Progress",
    "TuneCallback",
    "TuneResult",
    "speedup_text",
]

log = logging.getLogger("laytune.search")


@dataclass
class Job:
    """What the loop and its callbacks share while a job runs.

    ``records`` are the records this job wrote (in order), ``references``
    how many of them are layout references (measured after the search,
    outside the trial budget); ``best`` and ``baseline`` are the best
    verified record and the identity baseline of the workload on the
    device, counting earlier jobs (records are shared), priced under the
    job's ``boundary`` by ``pricing`` (a
    :class:`~laytune.search._pricing.JobPricing`): their ``value_s`` is the
    job's objective. ``run`` names this job in its records.
    """

    workload: Any
    device: Any
    space: SearchSpace
    database: Any
    study: Any
    study_name: str
    strategy: str
    trials: int
    timeout: float | None = None
    patience: int | None = None
    started: float = field(default_factory=time.monotonic)
    records: list[Record] = field(default_factory=list)
    references: int = 0
    run: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    cached: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    best: Record | None = None
    baseline: Record | None = None
    baseline_candidate: Candidate | None = None  # the space's identity(), set by tune
    boundary: Boundary = field(default_factory=lambda: Boundary(()))
    pricing: Any = None
    since_improvement: int = 0
    stop_reason: str | None = None

    @property
    def measured(self) -> int:
        """Candidates this job measured for its search (references excluded)."""
        return len(self.records) - self.references

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    @property
    def time_left_s(self) -> float | None:
        """Seconds left of the time budget; else an estimate from the pace so far."""
        if self.timeout is not None:
            return max(0.0, self.timeout - self.elapsed_s)
        if not self.records:
            return None
        return self.elapsed_s / self.measured * max(0, self.trials - self.measured)

    @property
    def speedup(self) -> float | None:
        if self.best is None or self.baseline is None or self.baseline.value_s is None:
            return None
        assert self.best.value_s is not None
        return self.baseline.value_s / self.best.value_s

    def out_of_budget(self) -> str | None:
        """Why the job should stop proposing, or None."""
        if self.stop_reason is not None:
            return self.stop_reason
        if self.measured >= self.trials:
            return f"trial budget ({self.trials}) spent"
        if self.timeout is not None and self.elapsed_s >= self.timeout:
            return f"time budget ({self.timeout:g} s) spent"
        if self.patience is not None and self.since_improvement >= self.patience:
            return f"no improvement in {self.patience} trials"
        return None

    def is_baseline(self, record: Record) -> bool:
        """Whether ``record`` is this job's baseline: identity layouts with the
        baseline knobs, or the space's own baseline candidate (where the
        device runs only matrix kernels)."""
        base = self.baseline_candidate
        return is_baseline(record) or (base is not None and record.candidate.key == base.key)

    def note(self, record: Record, *, reference: bool = False) -> None:
        """Update best, baseline, failures and patience with a new record
        (``reference``: a layout reference, outside the trial budget)."""
        self.records.append(record)
        self.references += reference
        if not record.ok:
            self.failures[record.status] += 1
        priced = record.ok and record.objective is not None
        if priced and self.is_baseline(record):
            self.baseline = record
        if priced and (self.best is None or record.value_s < self.best.value_s):  # type: ignore[operator]
            self.best = record
            self.since_improvement = 0
        else:
            self.since_improvement += 1


@dataclass(frozen=True)
class TuneResult:
    """The outcome of :func:`laytune.tune`.

    ``best`` is the best verified record of the workload on the device in
    the database (this job's or an earlier one's). Two speed-ups say what
    it bought: :attr:`speedup` over ``baseline`` (identity layouts with the
    baseline knobs: the whole candidate), :attr:`layout_speedup` over
    ``reference`` (identity layouts with the best's own knobs: the layouts
    alone; ``None`` when the space has no such candidate). Every time is the
    job's objective under ``boundary``: the compute kernels plus the
    conversions the boundary charges (:class:`laytune.records.Price`); the
    records' ``compute_s`` is the kernel alone. ``measured``
    counts the search's candidates, ``references`` the layout references
    measured after it. ``trials`` is a DataFrame of this study's records
    (columns: :data:`laytune.records.FRAME_COLUMNS`). ``no_reference`` says
    why there is no ``reference`` when there is none (the space's reason
    for refusing identity layouts with the best's knobs, or what became of
    its measurement).

    ``trials`` is read from the database on first use (and kept), so that a
    caller that only prints :meth:`summary` (``laytune tune``) never imports
    pandas; ``read_trials`` is what reads it.
    """

    workload_key: str
    device_key: str
    device_name: str
    study_name: str
    strategy: str
    database: str
    best: Record | None
    baseline: Record | None
    reference: Record | None
    measured: int
    references: int
    cached: int
    failures: dict[str, int]
    stop_reason: str
    elapsed_s: float
    read_trials: Callable[[], Any] = field(default=lambda: None, repr=False, compare=False)
    boundary: Boundary = field(default_factory=lambda: Boundary(()))
    no_reference: str = ""

    @functools.cached_property
    def trials(self) -> Any:
        """This study's records as a DataFrame (:data:`laytune.records.FRAME_COLUMNS`)."""
        return self.read_trials()

    @property
    def speedup(self) -> float | None:
        """Baseline time over best time: what the whole best candidate bought."""
        return _ratio(self.baseline, self.best)

    @property
    def layout_speedup(self) -> float | None:
        """Reference time over best time: what the best candidate's layouts
        bought over identity layouts with the same knobs."""
        return _ratio(self.reference, self.best)

    def explain(self) -> str:
        """Why the best layouts won over identity layouts with the same knobs,
        or why identity layouts are the best, in words and the records'
        figures: both prices, the buffers whose layouts differ and what their
        boundary makes of them, the kernel's and the conversions' shares."""
        from laytune.search._explain import explain_layouts

        return explain_layouts(self)

    def summary(self) -> str:
        """The outcome in a few lines: the best time, both speed-ups, the layouts."""
        extra = f" (+{self.references} layout reference)" if self.references else ""
        lines = [
            f"{self.workload_key} on {self.device_name}: {self.measured} measured{extra}, "
            f"{self.cached} from records, stopped: {self.stop_reason} ({self.elapsed_s:.1f} s)"
        ]
        if self.best is None:
            lines.append("  no verified candidate")
            return "\n".join(lines)
        lines.append(f"  best {self.best.value_s * 1e3:.4f} ms end to end, record {self.best.id}")
        price = self.best.objective
        if price is not None and price.charges:
            lines.append(f"    {price.describe()} (boundary: {self.boundary})")
        elif self.best.compute_s is not None:
            lines.append(
                f"    the kernel alone: {self.best.compute_s * 1e3:.4f} ms "
                f"(boundary: {self.boundary}; nothing to convert)"
            )
        lines.append("    " + speedup_text(self.speedup, self.baseline, "over the baseline"))
        lines.append(
            "    "
            + speedup_text(
                self.layout_speedup, self.reference, "from the layouts", self.no_reference
            )
        )
        for name, layout in self.best.candidate.layouts:
            lines.append(f"    {name}: {layout_text(self.workload_key, name, layout)}")
        knobs = ", ".join(f"{k}={v}" for k, v in self.best.candidate.knobs)
        lines.append(f"    knobs: {knobs}")
        return "\n".join(lines)


def _ratio(reference: Record | None, record: Record | None) -> float | None:
    if reference is None or record is None or not reference.ok or not record.ok:
        return None
    return reference.value_s / record.value_s  # type: ignore[operator]


_REFERENCES = {
    "over the baseline": "identity layouts, baseline knobs",
    "from the layouts": "identity layouts, the same knobs",
}


def speedup_text(ratio: float | None, reference: Record | None, what: str, why: str = "") -> str:
    """One speed-up in words: ``"2.22x over the baseline (identity layouts,
    baseline knobs: 0.0105 ms, record 1)"``, or that there is none, and
    ``why`` when the caller knows (``"no reference: ..."``)."""
    described = _REFERENCES[what]
    if (ratio is None or reference is None) and why:
        return f"- {what} (no reference: {why})"
    if ratio is None or reference is None:
        return f"- {what} (not measured: {described})"
    return f"{ratio:.2f}x {what} ({described}: {reference.value_s * 1e3:.4f} ms, record {reference.id})"


class TuneCallback:
    """Watches a job: ``on_start``, ``on_batch`` after each measured batch (the
    records in candidate order), ``on_end`` once (also after Ctrl-C)."""

    def on_start(self, job: Job) -> None:
        pass

    def on_batch(self, job: Job, records: list[Record]) -> None:
        pass

    def on_end(self, job: Job) -> None:
        pass


class Persist(TuneCallback):
    """Writes each record whole, in its own transaction. The loop runs it
    before anything else looks at a batch, so everyone sees records with ids."""

    def on_batch(self, job: Job, records: list[Record]) -> None:
        for index, record in enumerate(records):
            records[index] = job.database.add(record)


def _ms(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value * 1e3:.4f} ms"


def status_line(job: Job) -> str:
    best = job.best.value_s if job.best is not None else None
    speedup = f"{job.speedup:.2f}x" if job.speedup else "-"
    failed = ", ".join(f"{k} {v}" for k, v in sorted(job.failures.items())) or "none"
    left = job.time_left_s
    left_text = "-" if left is None else f"{left:.0f} s"
    return (
        f"{job.measured}/{job.trials} measured ({job.cached} cached)  best {_ms(best)}  "
        f"speed-up {speedup}  failures: {failed}  left {left_text}"
    )


#: Where the progress line stops counting the space: an exact count walks the
#: rules once per distinct combination of layout facts, minutes for a fused
#: convolution with a residual input (2487 of them, 262 trillion candidates).
#: Up to a million the count takes 0.01-0.11 s for that conv, matmuls and a
#: 512^2 transpose; up to a billion it took 1.8 s (matmul 256 x 16 x 256),
#: 2.8 s (1024^3) and 4.4 s (the transpose's 35.7 million) at every job's
#: start, on the host the build workers compile on.
COUNT_CAP = 10**6


class Progress(TuneCallback):
    """Progress on the terminal: a live bar on a terminal, one line per batch
    otherwise (logs, notebooks)."""

    def __init__(self, console: Any = None) -> None:
        from rich.console import Console

        self.console = console if console is not None else Console(stderr=True, soft_wrap=True)
        self._bar: Any = None
        self._task: Any = None

    def on_start(self, job: Job) -> None:
        size = job.space.size_up_to(COUNT_CAP)
        counted = f"{size:,}" if size < COUNT_CAP else f"over {COUNT_CAP:,}"
        cold = timed_cold(job.workload, job.space.device.cache_size)
        self.console.print(
            f"[bold]{job.workload.key}[/] on {job.device.name}: {counted} valid "
            f"candidates, strategy {job.strategy}, study {job.study_name!r}"
            + (", timed cold (a cache flush before every timed run)" if cold else ""),
            highlight=False,
        )
        if self.console.is_terminal:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                BarColumn(),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                console=self.console,
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task(status_line(job), total=job.trials)

    def on_batch(self, job: Job, records: list[Record]) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=job.measured, description=status_line(job))
        else:
            self.console.print("  " + status_line(job), highlight=False)

    def on_end(self, job: Job) -> None:
        if self._bar is not None:  # the bar goes away: say where it ended
            self._bar.stop()
            self._bar = None
            self.console.print("  " + status_line(job), highlight=False)
        self.console.print(f"  stopped: {job.stop_reason}", highlight=False)


class LogBatches(TuneCallback):
    """Logs every record at DEBUG and each batch at INFO (logger ``laytune.search``)."""

    def on_batch(self, job: Job, records: list[Record]) -> None:
        for record in records:
            log.debug(
                "record %s trial %s %s %s %s",
                record.id,
                record.trial,
                record.status,
                _ms(record.value_s),
                record.candidate.describe(),
            )
        log.info("%s: %s", job.study_name, status_line(job))

    def on_end(self, job: Job) -> None:
        log.info("%s stopped: %s", job.study_name, job.stop_reason)
