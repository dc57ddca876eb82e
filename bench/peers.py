"""laytune's tuned kernels side by side with CLBlast, numpy and ONNX Runtime, on one device.

    python -m bench.peers [--quick] [--trials N] [--timeout S] [--repeats N] [--db URL]
                          [--only transpose matmul conv2d] [--match TEXT] [--matmul M,N,K]
                          [--fma-units N]
                          [--clock-ghz F] [--simd-lanes N] [--compute-units N] [--out FILE]

The device is ``laytune.runners.default_device()`` (``LAYTUNE_DEVICE`` picks
another). In one run:

- Transpose of a 4096 x 4096 float32 matrix: laytune's generated pack kernel
  for ``lambda i, j: [j, i]``, the best of ``laytune.tune`` on the transpose
  workload end to end (its kernel plus the pack of X and the unpack of Y,
  row-major in and out, as ``laytune tune transpose`` prices it), CLBlast's
  ``omatcopy`` (through the CLBlast library that pyclblast loads; pyclblast
  does not wrap it) and the tuned copy of ``bench.conversions`` over the same
  bytes as the bandwidth ceiling. GB/s counts the bytes read plus the bytes
  written; a line under the table gives the tuned end to end against the
  copy's bandwidth (target: 60 %) and against ``omatcopy`` (target: 2x).
- Matmul ``C = A @ B`` float32 at 512, 1024, 2048, a skinny M x N x K =
  64 x 4096 x 1024 and 128 (the matmul ``make tune`` tunes): laytune, CLBlast's sgemm (pyclblast, on the same OpenCL
  device) and numpy (its BLAS, on the host).
- conv2d float32, NCHW input, OIHW weights, 3x3, stride 1, zero padding 1:
  (1,32,56,56) x 32 filters, (1,64,56,56) x 64, (1,128,28,28) x 128: laytune,
  ONNX Runtime's CPU conv (a one-node model built here; weights are an
  initializer, so ONNX Runtime may prepack them when the session is made)
  and im2col + numpy.

Each laytune figure is the result of ``laytune.tune`` on the workload (from an
empty records database per workload in a temporary folder, so no row warm-starts
from another; ``--db`` tunes into one database instead, and resumes what it
holds) with the trial budget, the timeout and the wall time the tuning took
stated beside it. The best record's program is then measured again by
``laytune.runners.Runner`` under ``MeasureConfig(measure_conversions=True)``,
in the same session as the peers' rows of that workload, and shown twice:

- kernel: the compute launches, the buffers already in the candidate's layouts;
- end-to-end: the kernel plus every per-call conversion as the runner times
  it on its own (the pack of each input from the caller's logical layout, the
  unpack of the output to it). The weights of a conv2d are a constant: packed
  once (like ONNX Runtime's prepacked weights), so their pack is stated beside
  the row and not added per call. The peers' times are end-to-end by nature
  (row-major or NCHW buffers in and out).

Every time is a median over ``--repeats`` after warm-up. The wall clock is a
blocking call timed with ``time.perf_counter`` (enqueue, then
``queue.finish()``); event times are OpenCL profiling events of the kernels.
Rates and fractions of peak come from wall times, the end-to-end time for
laytune. Every result is checked before its time counts: matmuls by the
largest error relative to the largest element of a float64 reference
product, convolutions against a float64 reference convolution, laytune's by
the runner's own verification against the workload's numpy reference.

The peak is ``compute units x SIMD lanes x 2 (FMA) x FMA units per core x
clock`` (``bench._peak``), read from the OpenCL device where it reports the
factor and overridden by the flags; the report states the product and the
source of every factor.

Without pyclblast (``pip install pyclblast``, built against Debian's
``libclblast-dev``) or ONNX Runtime (the ``bench`` extra) their rows say so
and the rest runs. The tables are printed and written to
``bench/results/peers.md``. ``--quick`` is for development: matmul 512 and
the first conv2d only, small budgets, few repeats.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench import _report
from bench._clblast import CLBlast
from bench._convolution import OnnxRuntimeConv, im2col_conv, reference_conv
from bench._peak import Peak, add_peak_arguments, peak_from_arguments
from bench.conversions import tuned_copy
from laytune import layout as L
from laytune import ops
from laytune.codegen import KernelProgram, lower, lower_conversion
from laytune.device_info import DeviceInfo
from laytune.records import Record
from laytune.runners import (
    Builder,
    ConversionTiming,
    Device,
    MeasureConfig,
    RunInput,
    Runner,
    RunResult,
    build_source,
    default_device,
    default_flush_bytes,
)
from laytune.search import TuneOptions, standard_candidates
from laytune.space import Candidate, SearchSpace, is_default

RESULT_NAME = "peers.md"
TRANSPOSE = 4096
#: (M, N, K) of ``C[M, N] = A[M, K] @ B[K, N]``
MATMULS: tuple[tuple[int, int, int], ...] = (
    (512, 512, 512),
    (1024, 1024, 1024),
    (2048, 2048, 2048),
    (64, 4096, 1024),
    (128, 128, 128),  # the matmul of `make tune`
)
#: (batch, channels, height, width, filters), all 3x3, stride 1, padding 1
CONVS: tuple[tuple[int, int, int, int, int], ...] = (
    (1, 32, 56, 56, 32),
    (1, 64, 56, 56, 64),
    (1, 128, 28, 28, 128),
)
KERNEL, PADDING = 3, 1

#: Tuning budget per workload: at most this many trials, no new batch after
#: this many seconds (the batch in flight, the layout reference and reading the
#: job's records back still run), so that a workload takes under five minutes.
TRIALS, TIMEOUT_S, REPEATS = 64, 200.0, 9
#: Candidates per batch of ``laytune.tune``: small, so that the batch still in
#: flight when the timeout passes adds little.
BATCH = 4
QUICK_TRIALS, QUICK_TIMEOUT_S, QUICK_REPEATS = 12, 60.0, 5

#: Buffers that are constants of an operator: converted once, not per call.
CONSTANTS: dict[str, frozenset[str]] = {"conv2d": frozenset({"W"})}

#: A peer's float32 result passes when its largest error is at most this
#: fraction of the largest element of the float64 reference.
RELATIVE_TOLERANCE = 1e-4


# -- timing -------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """Medians of one implementation, in seconds: event (None where no set of
    profiling events covers the work) and wall clock."""

    event_s: float | None
    wall_s: float


def measure(
    call: Callable[[], Any],
    queue: Any,
    *,
    warmup: int,
    repeats: int,
    events: bool = True,
    before: Callable[[], Any] | None = None,
) -> Timing:
    """Median times of ``call()`` made blocking by ``queue.finish()`` (queue may
    be None for host work). With ``events``, ``call`` returns the pyopencl
    event of the kernel that does all the work, and its profiled duration
    is the event time. ``before`` runs untimed before every timed call (a
    :class:`HostFlush`, to time a peer cold as the runner times a kernel)."""

    def finish() -> None:
        if queue is not None:
            queue.finish()

    for _ in range(warmup):
        call()
        finish()
    walls, durations = [], []
    for _ in range(repeats):
        if before is not None:
            before()
        start = time.perf_counter()
        event = call()
        finish()
        walls.append(time.perf_counter() - start)
        if events:
            durations.append((event.profile.end - event.profile.start) * 1e-9)
    return Timing(statistics.median(durations) if events else None, statistics.median(walls))


class HostFlush:
    """A call that evicts the caches from the host, writing as many bytes as
    the runner's flush before a kernel timed cold
    (:func:`laytune.runners.default_flush_bytes`), so that a peer running on
    the host CPU can be timed as that kernel is: its weights and inputs come
    from memory. Each call writes every byte anew (``scratch``)."""

    def __init__(self, device_info: DeviceInfo) -> None:
        nbytes = default_flush_bytes(device_info.cache_size, device_info.max_mem_alloc_size)
        self.scratch = np.zeros(nbytes // 4, np.float32)
        self._calls = itertools.count(1)

    def __call__(self) -> None:
        self.scratch.fill(next(self._calls))


def relative_error(result: np.ndarray, reference: np.ndarray) -> float:
    """The largest absolute error over the largest absolute reference element."""
    scale = float(np.abs(reference).max()) or 1.0
    return float(np.abs(result.astype(np.float64) - reference).max()) / scale


# -- the tables -----------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One workload of the compute table and its flop count (a multiply-add is two)."""

    label: str
    workload: Any
    flops: int


def matmul_case(m: int, n: int, k: int) -> Case:
    label = f"matmul {m}" if m == n == k else f"matmul {m} x {n} x {k} (M x N x K)"
    workload = ops.matmul(m, n, k)
    return Case(label, workload, workload.flops)


def conv_case(batch: int, channels: int, height: int, width: int, filters: int) -> Case:
    workload = ops.conv2d(batch, channels, height, width, filters, KERNEL, padding=PADDING)
    label = f"conv2d ({batch},{channels},{height},{width}) x {filters}"
    return Case(label, workload, workload.flops)


@dataclass(frozen=True)
class Row:
    """One implementation of one case: its times (None when it has none), its
    rate (GFLOP/s or GB/s) and fraction of peak as text, and a note."""

    case: str
    implementation: str
    timing: Timing | None
    rate: str = "-"
    fraction: str = "-"
    note: str = ""

    def cells(self) -> list[str]:
        event = _ms(self.timing.event_s) if self.timing else "-"
        wall = _ms(self.timing.wall_s) if self.timing else "-"
        return [self.case, self.implementation, event, wall, self.rate, self.fraction, self.note]


def compute_row(
    case: Case, implementation: str, timing: Timing | None, peak: Peak, note: str = ""
) -> Row:
    """A row whose rate and fraction of peak come from the wall time."""
    if timing is None:
        return Row(case.label, implementation, None, note=note)
    rate = case.flops / timing.wall_s
    return Row(case.label, implementation, timing, f"{rate / 1e9:.1f}", peak.fraction(rate), note)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f}"


# -- transpose ----------------------------------------------------------------------


def transpose_rows(
    context: Any,
    queue: Any,
    blas: CLBlast,
    repeats: int,
    size: int = TRANSPOSE,
    tuned: Callable[[Any], tuple[Timing | None, str]] | None = None,
) -> list[Row]:
    """The transpose table's rows; ``tuned(workload)`` gives the end-to-end
    time of laytune's tuned best and its note (None: no row)."""
    import pyopencl as cl

    case = f"transpose {size} x {size} float32"
    mf = cl.mem_flags
    host = np.random.default_rng(0).standard_normal((size, size)).astype(np.float32)
    expected = np.ascontiguousarray(host.T)
    nbytes = host.nbytes
    src = cl.Buffer(context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=host)
    dst = cl.Buffer(context, mf.READ_WRITE, size=nbytes)

    def gbs(timing: Timing) -> str:
        return f"{2 * nbytes / timing.wall_s / 1e9:.1f}"

    def transposed(what: str) -> bool:
        out = np.empty_like(host)
        cl.enqueue_copy(queue, out, dst)
        cl.enqueue_fill_buffer(queue, dst, np.float32(0), 0, nbytes).wait()
        return bool(np.array_equal(out, expected))

    rows = []
    streaming = DeviceInfo.from_cl_device(queue.device).has_builtin("nontemporal_store")
    (kernel, global_size, local_size, args), what = tuned_copy(
        context, queue, size * size, repeats, streaming
    )
    timing = measure(
        lambda: kernel(queue, global_size, local_size, *args), queue, warmup=1, repeats=repeats
    )
    best = (timing, f"tuned copy ({what})")
    note = "the bandwidth ceiling: same bytes, no reordering"
    rows.append(Row(case, best[1], best[0], gbs(best[0]), note=note))

    layout = L.permute((size, size), (1, 0))
    program = lower_conversion("X", layout)
    (launch,) = program.pack
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pack = getattr(build_source(context, program.source), launch.kernel)
    timing = measure(
        lambda: pack(queue, launch.global_size, launch.local_size, src, dst),
        queue,
        warmup=1,
        repeats=repeats,
    )
    if transposed("laytune's pack kernel"):
        note = f"`{layout.index_map}`"
        rows.append(Row(case, "laytune pack (generated)", timing, gbs(timing), note=note))
    else:
        rows.append(Row(case, "laytune pack (generated)", None, note="wrong result: not counted"))

    if tuned is not None:
        timing, note = tuned(ops.transpose((size, size)))
        gb = "-" if timing is None else gbs(timing)
        rows.append(Row(case, "laytune tuned, end to end", timing, gb, note=note))

    if blas.omatcopy_missing is not None:
        rows.append(Row(case, "CLBlast omatcopy", None, note=f"skipped: {blas.omatcopy_missing}"))
        return rows
    timing = measure(
        lambda: blas.transpose(queue, src, dst, size, size), queue, warmup=2, repeats=repeats
    )
    if transposed("CLBlast's omatcopy"):
        note = "CLBlastSomatcopy through the C API (pyclblast does not wrap it)"
        rows.append(Row(case, "CLBlast omatcopy", timing, gbs(timing), note=note))
    else:
        rows.append(Row(case, "CLBlast omatcopy", None, note="wrong result: not counted"))
    return rows


def transpose_verdict(rows: Sequence[Row]) -> list[str]:
    """The tuned end to end against the copy's bandwidth and CLBlast's
    omatcopy (wall times; the same bytes, so the ratio of times)."""
    wall = {r.implementation: r.timing.wall_s for r in rows if r.timing is not None}
    copy = next((t for name, t in wall.items() if name.startswith("tuned copy")), None)
    tuned = wall.get("laytune tuned, end to end")
    if tuned is None or copy is None:
        return []
    line = (
        f"laytune tuned, end to end: {copy / tuned:.0%} of the tuned copy's bandwidth (target 60 %)"
    )
    blas = wall.get("CLBlast omatcopy")
    if blas is not None:
        line += f", {blas / tuned:.2f}x CLBlast's omatcopy (target 2x)"
    return [line + "."]


def tuned_transpose(
    device: Device, budget: Budget, database: str, repeats: int
) -> Callable[[Any], tuple[Timing | None, str]]:
    """Tune the transpose with ``budget`` and re-measure its best end to end."""

    def tuned(workload: Any) -> tuple[Timing | None, str]:
        case = Case(f"transpose {'x'.join(map(str, workload.buffer('X').shape))}", workload, 0)
        print(f"tuning {case.label} ({budget.text()}) ...", flush=True)
        search = tune_case(case, device, budget, database)
        job = (
            f"`laytune.tune`: {search.measured} trials measured (budget {budget.text()}) in "
            f"{search.seconds:.0f} s, stopped: {search.stop_reason}; best: {search.best_brief}"
        )
        if search.program is None:
            return None, f"{job}; no verified candidate"
        run = remeasure(device, workload, search.program, repeats)
        if not run.ok:
            return None, f"{job}; the best failed again: {run.error_message}"[:300]
        split = EndToEnd.of(run, frozenset())
        return split.total, f"{job}; {split.note()}"

    return tuned


# -- laytune --------------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    """What each ``laytune.tune`` call may spend."""

    trials: int
    timeout_s: float

    def text(self) -> str:
        return f"{self.trials} trials or {self.timeout_s:.0f} s"


@dataclass(frozen=True)
class Search:
    """What one tuning job found, as plain values (records and candidates are
    not kept: a validated layout of a large buffer caches arrays of its size).

    Times are the job's own kernel medians in seconds (None: not measured or
    failed). ``starts_ok`` of ``starts`` standard starts were measured and
    verified; ``best_start_s`` is the fastest of them. ``best_sampled_s`` is
    the fastest candidate the sampler proposed beyond the forced ones, and
    ``best_from`` says which kind of candidate the best one is.
    """

    label: str
    budget: Budget
    seconds: float
    measured: int
    stop_reason: str
    failures: str
    baseline_s: float | None
    best_s: float | None
    best_from: str
    best_brief: str
    best_start_s: float | None
    best_start_brief: str
    starts_ok: int
    starts: int
    best_sampled_s: float | None
    program: KernelProgram | None
    start_program: KernelProgram | None = None  # the best start's, where it is not the best


def _brief(candidate: Candidate) -> str:
    """The candidate's non-identity layouts and non-default knobs."""
    parts = [
        f"{name}: `{layout.index_map}`"
        for name, layout in candidate.layouts
        if layout.describe() != "identity()"
    ]
    parts += [f"{k}={v}" for k, v in candidate.knobs if not is_default(k, v)]
    return "; ".join(parts) or "identity layouts, default knobs"


def _time(record: Record | None) -> float | None:
    return None if record is None else record.value_s


def tune_case(case: Case, device: Device, budget: Budget, database: str) -> Search:
    """``laytune.tune`` on ``case``, and what its standard starts and its
    sampler measured (read from the job's trials, as tune tried them)."""
    started = time.perf_counter()
    options = TuneOptions(trials=budget.trials, timeout=budget.timeout_s, batch=BATCH)
    result = _report.tune(case.workload, device, options=options, database=database, progress=False)
    seconds = time.perf_counter() - started
    trials = result.trials
    times = {
        key: (None if status != "ok" else float(t))
        for key, status, t in zip(
            trials["candidate_key"], trials["status"], trials["time_s"], strict=True
        )
    }
    space = SearchSpace(case.workload, device.info)
    starts = {c.key: c for c in standard_candidates(space, budget.trials // 4)}
    measured_starts: list[tuple[float, Candidate]] = [
        (t, c) for k, c in starts.items() if (t := times.get(k)) is not None
    ]
    best_start = min(measured_starts, key=lambda tc: tc[0], default=None)
    forced = {*starts, space.identity().key}
    if result.reference is not None:
        forced.add(result.reference.candidate.key)
    sampled = [t for k, t in times.items() if t is not None and k not in forced]

    best = result.best
    key = None if best is None else best.candidate.key
    if key is None:
        best_from = "-"
    elif key in starts:
        best_from = "standard start"
    elif key == space.identity().key:
        best_from = "baseline"
    elif result.reference is not None and key == result.reference.candidate.key:
        best_from = "layout reference (identity layouts, a good candidate's knobs)"
    elif key in times:
        best_from = "sampler"
    else:
        best_from = "an earlier job in the database"
    failures = ", ".join(f"{n} {kind}" for kind, n in sorted(result.failures.items()))
    return Search(
        label=case.label,
        budget=budget,
        seconds=seconds,
        measured=result.measured,
        stop_reason=result.stop_reason,
        failures=failures or "none",
        baseline_s=_time(result.baseline),
        best_s=_time(best),
        best_from=best_from,
        best_brief="-" if best is None else _brief(best.candidate),
        best_start_s=None if best_start is None else best_start[0],
        best_start_brief="-" if best_start is None else _brief(best_start[1]),
        starts_ok=len(measured_starts),
        starts=len(starts),
        best_sampled_s=min(sampled, default=None),
        program=None if best is None else best.kernel_program(),
        start_program=(
            None
            if best_start is None or best_start[1].key == key
            else lower(case.workload, best_start[1], device.info)
        ),
    )


@contextlib.contextmanager
def remeasuring_all(
    device: Device,
    workload: Any,
    programs: Sequence[KernelProgram],
    repeats: int,
    warmup: int = 2,
) -> Iterator[Callable[[], list[RunResult]]]:
    """``programs`` built once, and a call that measures each of them again,
    conversions included, as often as asked, all in one runner (one worker
    process: a second runtime idling beside the first would fall on its
    times), each after ``warmup`` untimed launches. Each call starts from
    the next program in turn, so that none always runs first after the
    caller's idle (a 0.08 ms kernel read 0.12 ms there); the results come
    back in the order of ``programs``."""
    config = MeasureConfig(
        warmup=warmup, repeats=repeats, measure_conversions=True, time_limit_s=300
    )
    with Builder(device) as builder:
        builds = builder.build(list(programs))
    calls = itertools.count()
    with Runner(device, config) as runner:

        def again() -> list[RunResult]:
            first = next(calls) % len(builds)
            order = [*range(first, len(builds)), *range(first)]
            runs = runner.run([RunInput(builds[k], workload) for k in order])
            return [run for _, run in sorted(zip(order, runs, strict=True), key=lambda kr: kr[0])]

        yield again


@contextlib.contextmanager
def remeasuring(
    device: Device, workload: Any, program: KernelProgram, repeats: int
) -> Iterator[Callable[[], RunResult]]:
    """``program`` built once, and a call that measures it again, conversions
    included, as often as asked (:func:`remeasuring_all` of one)."""
    with remeasuring_all(device, workload, [program], repeats) as again:
        yield lambda: again()[0]


def remeasure(device: Device, workload: Any, program: KernelProgram, repeats: int) -> RunResult:
    """``program`` measured again, conversions included."""
    with remeasuring(device, workload, program, repeats) as again:
        return again()


def _median_wall(timing: ConversionTiming) -> float:
    """The median wall time; an aliased buffer's conversion, which runs no
    kernel and has no times, its value (0 s)."""
    return statistics.median(timing.wall_times_s) if timing.wall_times_s else timing.value_s


def _median_event(timing: ConversionTiming) -> float:
    return statistics.median(timing.event_times_s) if timing.event_times_s else timing.value_s


@dataclass(frozen=True)
class EndToEnd:
    """A verified run split into what a call pays and what it does not.

    ``total`` is ``kernel`` plus the median of every conversion in
    ``per_call``, clock by clock; ``once`` holds the conversions of constant
    buffers (packed once, not per call). Each conversion is (``"pack"`` or
    ``"unpack"``, its timing).
    """

    kernel: Timing
    total: Timing
    per_call: tuple[tuple[str, ConversionTiming], ...]
    once: tuple[tuple[str, ConversionTiming], ...]

    @classmethod
    def of(cls, run: RunResult, constants: frozenset[str]) -> EndToEnd:
        """Split ``run`` (a verified result measured with conversions)."""
        event = statistics.median(run.event_times_s)
        kernel = Timing(event, statistics.median(run.wall_times_s))
        conversions = [("pack", t) for t in run.pack_times]
        conversions += [("unpack", t) for t in run.unpack_times]
        per_call = tuple((verb, t) for verb, t in conversions if t.buffer not in constants)
        once = tuple((verb, t) for verb, t in conversions if t.buffer in constants)
        total = Timing(
            event + sum(_median_event(t) for _, t in per_call),
            kernel.wall_s + sum(_median_wall(t) for _, t in per_call),
        )
        return cls(kernel, total, per_call, once)

    def note(self) -> str:
        """The conversions in the total, and those left out, in wall ms."""

        def listed(timings: Sequence[tuple[str, ConversionTiming]]) -> str:
            return ", ".join(
                f"{verb} {t.buffer} {_median_wall(t) * 1e3:.3f}" for verb, t in timings
            )

        paid = listed(self.per_call) or "none (every buffer in its logical layout)"
        note = f"kernel + conversions (wall ms): {paid}"
        if self.once:
            note += f"; packed once, not per call: {listed(self.once)}"
        return note


def laytune_rows(case: Case, search: Search, run: RunResult | None, peak: Peak) -> list[Row]:
    """The kernel row and the end-to-end row of the re-measured best."""
    tuned = (
        f"`laytune.tune`: {search.measured} trials measured (budget {search.budget.text()}) "
        f"in {search.seconds:.0f} s, stopped: {search.stop_reason}"
    )
    if run is None:
        return [compute_row(case, "laytune", None, peak, f"{tuned}; no verified candidate")]
    if not run.ok:
        note = f"{tuned}; the best record failed again: {run.error_kind.value}: {run.error_message}"
        return [compute_row(case, "laytune", None, peak, note[:300])]
    split = EndToEnd.of(run, CONSTANTS.get(case.workload.name, frozenset()))
    error = "" if run.max_error is None else f"; verified, max abs error {run.max_error:.1e}"
    return [
        compute_row(case, "laytune kernel", split.kernel, peak, tuned + error),
        compute_row(case, "laytune end-to-end", split.total, peak, split.note()),
    ]


# -- peers ---------------------------------------------------------------------------


def checked_row(
    case: Case,
    implementation: str,
    timing: Timing,
    result: np.ndarray,
    reference: np.ndarray,
    peak: Peak,
    note: str,
) -> Row:
    """The row of a peer whose ``result`` passed the check, else a row
    without a time that says by how much it failed."""
    error = relative_error(result, reference)
    if error > RELATIVE_TOLERANCE:
        return compute_row(
            case, implementation, None, peak, f"wrong result (relative error {error:.1e})"
        )
    return compute_row(case, implementation, timing, peak, f"{note}; relative error {error:.1e}")


def matmul_peers(case: Case, queue: Any, blas: CLBlast, repeats: int, peak: Peak) -> list[Row]:
    import pyopencl.array as cla

    (m, k), (_, n) = case.workload.buffer("A").shape, case.workload.buffer("B").shape
    rng = np.random.default_rng(m * n + k)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    reference = a.astype(np.float64) @ b.astype(np.float64)
    c = np.empty((m, n), np.float32)
    timing = measure(lambda: np.matmul(a, b, out=c), None, warmup=2, repeats=repeats, events=False)
    rows = [checked_row(case, "numpy", timing, c, reference, peak, "on the host, its BLAS threads")]
    if blas.missing is not None:
        return [*rows, compute_row(case, "CLBlast sgemm", None, peak, f"skipped: {blas.missing}")]
    a_dev, b_dev = cla.to_device(queue, a), cla.to_device(queue, b)
    c_dev = cla.zeros(queue, (m, n), np.float32)
    timing = measure(
        lambda: blas.sgemm(queue, a_dev, b_dev, c_dev),
        queue,
        warmup=2,
        repeats=repeats,
        events=False,
    )
    note = "row-major buffers on the device; may launch several kernels"
    rows.append(checked_row(case, "CLBlast sgemm", timing, c_dev.get(), reference, peak, note))
    return rows


def conv_peers(case: Case, runtime: OnnxRuntimeConv, repeats: int, peak: Peak) -> list[Row]:
    x_shape = tuple(case.workload.buffer("X").shape)
    w_shape = tuple(case.workload.buffer("W").shape)
    rng = np.random.default_rng(sum(x_shape) + w_shape[0])
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = rng.standard_normal(w_shape, dtype=np.float32)
    reference = reference_conv(x, w, PADDING)
    rows = []
    if runtime.missing is not None:
        rows.append(compute_row(case, "ONNX Runtime", None, peak, f"skipped: {runtime.missing}"))
    else:
        run = runtime.session(x_shape, w, PADDING)
        timing = measure(lambda: run(x), None, warmup=3, repeats=repeats, events=False)
        note = "CPU execution provider, default session options; `session.run` per call"
        rows.append(checked_row(case, "ONNX Runtime", timing, run(x), reference, peak, note))
        del run  # its thread pool goes with the session
    timing = measure(
        lambda: im2col_conv(x, w, PADDING), None, warmup=2, repeats=repeats, events=False
    )
    result = im2col_conv(x, w, PADDING)
    note = "im2col copy + one matmul on the host"
    rows.append(checked_row(case, "im2col + numpy", timing, result, reference, peak, note))
    return rows


# -- the report -----------------------------------------------------------------------


def _ratio_rows(cases: Sequence[Case], rows: Sequence[Row]) -> list[list[str]]:
    """laytune's end-to-end and kernel speed relative to each peer's."""
    found: list[list[str]] = []
    for case in cases:
        mine = {r.implementation: r.timing for r in rows if r.case == case.label}
        ours_e2e, ours_kernel = mine.get("laytune end-to-end"), mine.get("laytune kernel")
        for name, theirs in mine.items():
            if name.startswith("laytune") or theirs is None:
                continue
            e2e = "-" if ours_e2e is None else f"{theirs.wall_s / ours_e2e.wall_s:.2f}x"
            kernel = "-" if ours_kernel is None else f"{theirs.wall_s / ours_kernel.wall_s:.2f}x"
            found.append([case.label, name, _ms(theirs.wall_s), e2e, kernel])
    return found


def _search_rows(searches: Sequence[Search]) -> list[list[str]]:
    return [
        [
            s.label,
            f"{s.measured} in {s.seconds:.0f} s",
            s.failures,
            _ms(s.baseline_s),
            f"{_ms(s.best_start_s)} ({s.starts_ok} of {s.starts} ok)",
            _ms(s.best_sampled_s),
            _ms(s.best_s),
            s.best_from,
            s.best_brief,
            s.best_start_brief,
        ]
        for s in searches
    ]


def compute_sections(
    cases: Sequence[Case], rows: Sequence[Row], searches: Sequence[Search]
) -> list[str]:
    """The markdown of the matmul and conv2d rows: the table, the ratios to
    the peers, what each search found."""
    if not rows:
        return []
    return [
        "## Matmul and conv2d",
        "",
        "GFLOP/s and % of peak from the wall time. laytune kernel: the compute "
        "launches with every buffer already in the tuned layouts; laytune end-to-end: "
        "the kernel plus the per-call pack and unpack launches, each timed on its own "
        "(wall), as `MeasureConfig(measure_conversions=True)` measures them. The peers "
        "take and give row-major (NCHW) buffers.",
        "",
        *_report.table(
            [
                "case",
                "implementation",
                "event (ms)",
                "wall (ms)",
                "GFLOP/s",
                "% of peak",
                "note",
            ],
            [r.cells() for r in rows],
            "llrrrrl",
        ),
        "",
        "## Ratios",
        "",
        "A peer's wall time over laytune's (above 1: laytune is faster).",
        "",
        *_report.table(
            ["case", "peer", "peer wall (ms)", "laytune end-to-end", "laytune kernel"],
            _ratio_rows(cases, rows),
            "llrrr",
        ),
        "",
        "## What the search found",
        "",
        "Kernel times (ms) as the tuning job recorded them (event medians of its own "
        "measurements, so they differ from the re-measured rows above): the identity "
        "baseline, the best of the standard starts (the register-blocked classics first, "
        "`laytune.search.standard_candidates`), the best candidate the sampler proposed "
        "beyond them, and the best of all.",
        "",
        *_report.table(
            [
                "case",
                "trials",
                "failures",
                "baseline",
                "best start",
                "best sampled",
                "best",
                "best from",
                "best candidate",
                "best start candidate",
            ],
            _search_rows(searches),
            "lllrrrrlll",
        ),
        "",
    ]


def _peer_versions(blas: CLBlast, runtime: OnnxRuntimeConv) -> str:
    """The versions of the peers (the environment lines give laytune's own)."""
    blas_info = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    clblast = f"pyclblast {blas.version}" + (f" ({blas.library})" if blas.library else "")
    return (
        f"peers: {clblast}, numpy's BLAS {blas_info.get('name', '?')} "
        f"{blas_info.get('version', '?')}, {runtime.version}"
    )


def _shape(text: str) -> tuple[int, int, int]:
    """``M,N,K`` as three positive integers."""
    try:
        m, n, k = (int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected M,N,K (three integers), got {text!r}") from None
    if min(m, n, k) < 1:
        raise argparse.ArgumentTypeError(f"every extent must be positive, got {text!r}")
    return m, n, k


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}, {five:.2f}, {fifteen:.2f}"


def main(argv: Sequence[str] | None = None) -> None:
    import pyopencl as cl

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small budgets, fewer sizes")
    parser.add_argument("--trials", type=int, help=f"trials per workload ({TRIALS})")
    parser.add_argument("--timeout", type=float, help=f"tuning seconds per workload ({TIMEOUT_S})")
    parser.add_argument("--repeats", type=int, help=f"timed repeats ({REPEATS})")
    parser.add_argument("--db", help="tune into this records database URL (default: fresh ones)")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=("transpose", "matmul", "conv2d"),
        default=("transpose", "matmul", "conv2d"),
    )
    parser.add_argument(
        "--match", help="only the matmul and conv2d cases whose label holds this text"
    )
    parser.add_argument(
        "--matmul",
        type=_shape,
        action="append",
        metavar="M,N,K",
        help="the matmul cases instead of the standard ones (repeatable): 4096,4096,4096",
    )
    add_peak_arguments(parser)
    parser.add_argument("--out", type=Path, help=f"markdown file (bench/results/{RESULT_NAME})")
    args = parser.parse_args(argv)

    quick = args.quick
    budget = Budget(
        args.trials or (QUICK_TRIALS if quick else TRIALS),
        args.timeout or (QUICK_TIMEOUT_S if quick else TIMEOUT_S),
    )
    repeats = args.repeats or (QUICK_REPEATS if quick else REPEATS)
    matmuls = args.matmul or (MATMULS[:1] if quick else MATMULS)
    convs = CONVS[:1] if quick else CONVS
    cases = [
        *(matmul_case(*s) for s in matmuls if "matmul" in args.only),
        *(conv_case(*s) for s in convs if "conv2d" in args.only),
    ]
    cases = [c for c in cases if args.match is None or args.match in c.label]

    device = default_device()
    cl_device = device.open()
    peak = peak_from_arguments(cl_device, args)
    blas, runtime = CLBlast(), OnnxRuntimeConv()
    skipped = [
        s for s in (blas.skipped, runtime.missing and f"ONNX Runtime: {runtime.missing}") if s
    ]
    for line in skipped:
        print(line)
    context = cl.Context([cl_device])
    queue = cl.CommandQueue(context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    load_before, started = _load(), time.perf_counter()

    rows: list[Row] = []
    searches: list[Search] = []
    transposes: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="laytune-peers-") as scratch:
        if "transpose" in args.only:
            database = args.db or f"sqlite:///{Path(scratch) / 'transpose.db'}"
            tuned = tuned_transpose(device, budget, database, repeats)
            transposes = transpose_rows(context, queue, blas, repeats, tuned=tuned)
        for index, case in enumerate(cases):
            database = args.db or f"sqlite:///{Path(scratch) / f'{index}.db'}"
            print(f"tuning {case.label} ({budget.text()}) ...", flush=True)
            search = tune_case(case, device, budget, database)
            searches.append(search)
            program = search.program
            run = None if program is None else remeasure(device, case.workload, program, repeats)
            rows += laytune_rows(case, search, run, peak)
            if case.workload.name == "matmul":
                rows += matmul_peers(case, queue, blas, repeats, peak)
            else:
                rows += conv_peers(case, runtime, repeats, peak)
            print(f"  done: {search.seconds:.0f} s of tuning", flush=True)

    lines = [
        "# laytune against its peers",
        "",
        *_report.environment(device),
        f"- {_peer_versions(blas, runtime)}",
        *(f"- {line}" for line in skipped),
        f"- peak: {peak.formula()}",
        f"- mode: {'--quick' if quick else 'full'}; tuning budget per workload: {budget.text()} "
        f"(`laytune.tune`, strategy {TuneOptions().strategy}, "
        + ("one database given by --db" if args.db else "an empty database per workload")
        + f"); medians of {repeats} timed repeats after warm-up; "
        f"{time.perf_counter() - started:.0f} s in all",
        f"- load average (1, 5, 15 min) at the start: {load_before}; at the end: {_load()}",
        "",
    ]
    if transposes:
        lines += [
            "## Transpose (bandwidth)",
            "",
            *_report.table(
                ["case", "implementation", "event (ms)", "wall (ms)", "GB/s", "note"],
                [[*r.cells()[:5], r.note] for r in transposes],
                "llrrrl",
            ),
            "",
            *transpose_verdict(transposes),
            "",
        ]
    lines += compute_sections(cases, rows, searches)
    text = "\n".join(lines)
    print(text)
    path = _report.write(RESULT_NAME, text, args.out)
    print(f"written to {_report.shown(path)}")


if __name__ == "__main__":
    main()
