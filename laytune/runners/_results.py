"""Stage inputs and outputs of the runners: builds, runs and their failures as data."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from laytune.codegen import KernelProgram
from laytune.exceptions import ConfigError
from laytune.runners._config import Clock, Statistic, Tolerance
from laytune.runners._workload import VerifiableWorkload

__all__ = [
    "BuildResult",
    "ConversionTiming",
    "ErrorKind",
    "LaunchCounts",
    "OutputCheck",
    "RunInput",
    "RunResult",
]


class ErrorKind(enum.StrEnum):
    """Why a candidate has no valid time.

    ``build``: the OpenCL compiler rejected the program (the result keeps
    the log). ``run``: the device refused a launch or an allocation (bad
    work-group size, out of resources at enqueue), or the program does not
    fit the workload. ``timeout``: the build or the measurement passed its
    time limit (the process was killed). ``wrong_result``: the outputs differ
    from the numpy reference beyond tolerance. ``device_lost``: a launch was
    accepted but its completion reported an error, so the context is no
    longer trusted (the worker is replaced). ``crash``: the worker process
    died (a signal, ``os._exit``, an abort).
    """

    NONE = "none"
    BUILD = "build"
    RUN = "run"
    TIMEOUT = "timeout"
    WRONG_RESULT = "wrong_result"
    DEVICE_LOST = "device_lost"
    CRASH = "crash"


@dataclass(frozen=True)
class BuildResult:
    """A compiled program (``binary``) or why it did not compile.

    ``build_log`` is the compiler's log for the device, kept on success too.
    ``worker_pid``, ``started_at`` and ``finished_at`` (``time.time()`` in
    the worker) say where and when it compiled. ``cached`` is true when the
    binary and log came from the builder's binary cache instead of the
    compiler (``worker_pid`` is then ``None`` and the times are the lookup's).
    """

    program: KernelProgram
    device_key: str
    binary: bytes | None
    error_kind: ErrorKind = ErrorKind.NONE
    error_message: str = ""
    build_log: str = ""
    cl_error_code: int | None = None
    build_seconds: float = 0.0
    worker_pid: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    cached: bool = False

    @property
    def ok(self) -> bool:
        return self.error_kind is ErrorKind.NONE and self.binary is not None

    @property
    def source(self) -> str:
        return self.program.source

    @property
    def build_options(self) -> tuple[str, ...]:
        return self.program.build_options


@dataclass(frozen=True)
class RunInput:
    """One candidate to measure: a build and the workload that checks it.

    ``abandon_above_s`` lets a candidate stop early: when the ranking
    statistic of its first ``MeasureConfig.early_stop_after`` timed compute
    repeats exceeds it, the remaining repeats are skipped and the result is
    marked ``abandoned`` (see :class:`~laytune.runners.MeasureConfig`). The
    caller picks it, typically the best time so far times a margin; ``None``
    measures every repeat.
    """

    build: BuildResult
    workload: VerifiableWorkload
    abandon_above_s: float | None = None

    def __post_init__(self) -> None:
        threshold = self.abandon_above_s
        if threshold is not None and not threshold > 0:  # also refuses NaN
            raise ConfigError(f"abandon_above_s must be positive or None, got {threshold}")


@dataclass(frozen=True)
class LaunchCounts:
    """Enqueues of one candidate, counted where they are enqueued."""

    pack: int = 0
    compute: int = 0
    unpack: int = 0
    flush: int = 0

    @property
    def kernels(self) -> int:
        return self.pack + self.compute + self.unpack


@dataclass(frozen=True)
class ConversionTiming:
    """Timed launches of one pack or unpack kernel on its own. An aliased
    buffer (``BufferSpec.aliased``) has no such kernel: its entry names no
    kernel (``""``), holds no times, and its ``value_s`` is 0."""

    buffer: str
    kernel: str
    event_times_s: tuple[float, ...]
    wall_times_s: tuple[float, ...]
    value_s: float


@dataclass(frozen=True)
class OutputCheck:
    """How one output compared with the reference."""

    buffer: str
    max_abs_error: float
    tolerance: Tolerance
    passed: bool


@dataclass(frozen=True)
class RunResult:
    """The measurement of one candidate, or why there is none.

    ``value_s`` is ``statistic`` of the ``clock`` times (median of the event
    times by default); ``None`` unless ``error_kind`` is ``none``.
    ``event_times_s`` and ``wall_times_s`` hold every timed compute repeat,
    in order. ``max_error`` is the largest absolute difference to the
    reference over all outputs (set for wrong results too). ``abandoned`` is
    true when the candidate was verified but its timing stopped after
    ``MeasureConfig.early_stop_after`` repeats because it was slower than
    ``RunInput.abandon_above_s``; its times and ``value_s`` are those of the
    repeats it had, and ``error_kind`` is still ``none``. ``started_at`` and
    ``finished_at`` (``time.time()``) date the measurement; for a candidate
    whose build failed they are the build's, and either is ``None`` when
    unknown. ``warm_value_s`` (with ``warm_event_times_s`` and
    ``warm_wall_times_s``): for a workload timed cold by its own say
    (``timed_cold``, as conversion workloads are), the same repeats timed
    again without the flushes, on warm caches; None otherwise.
    ``contention``: on a CPU device where Linux reports CPU pressure, the
    share of the kept compute series' wall time during which some runnable
    task waited for a CPU (None where not read); a series above
    ``MeasureConfig.contention_limit`` was timed again and the calmer one
    kept, the other's event times in ``contended_event_times_s``.
    """

    program_name: str
    source_hash: str
    workload_key: str
    device_key: str
    error_kind: ErrorKind = ErrorKind.NONE
    error_message: str = ""
    cl_error_code: int | None = None
    statistic: Statistic = "median"
    clock: Clock = "event"
    value_s: float | None = None
    event_times_s: tuple[float, ...] = ()
    wall_times_s: tuple[float, ...] = ()
    clock_disagreement: bool = False
    max_error: float | None = None
    outputs: tuple[OutputCheck, ...] = ()
    pack_times: tuple[ConversionTiming, ...] = ()
    unpack_times: tuple[ConversionTiming, ...] = ()
    warmup: int = 0
    launches: LaunchCounts = field(default_factory=LaunchCounts)
    measure_seconds: float = 0.0
    abandoned: bool = False
    started_at: float | None = None
    finished_at: float | None = None
    warm_value_s: float | None = None
    warm_event_times_s: tuple[float, ...] = ()
    warm_wall_times_s: tuple[float, ...] = ()
    contention: float | None = None
    contended_event_times_s: tuple[float, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error_kind is ErrorKind.NONE

    def to_json(self) -> dict[str, Any]:
        """Plain JSON values (what a record stores)."""
        return {
            "program_name": self.program_name,
            "source_hash": self.source_hash,
            "workload_key": self.workload_key,
            "device_key": self.device_key,
            "error_kind": self.error_kind.value,
            "error_message": self.error_message,
            "cl_error_code": self.cl_error_code,
            "statistic": self.statistic,
            "clock": self.clock,
            "value_s": self.value_s,
            "event_times_s": list(self.event_times_s),
            "wall_times_s": list(self.wall_times_s),
            "clock_disagreement": self.clock_disagreement,
            "max_error": self.max_error,
            "outputs": [
                {
                    "buffer": check.buffer,
                    "max_abs_error": check.max_abs_error,
                    "rtol": check.tolerance.rtol,
                    "atol": check.tolerance.atol,
                    "passed": check.passed,
                }
                for check in self.outputs
            ],
            "pack_times": [_conversion_json(t) for t in self.pack_times],
            "unpack_times": [_conversion_json(t) for t in self.unpack_times],
            "warmup": self.warmup,
            "launches": {
                "pack": self.launches.pack,
                "compute": self.launches.compute,
                "unpack": self.launches.unpack,
                "flush": self.launches.flush,
            },
            "measure_seconds": self.measure_seconds,
            "abandoned": self.abandoned,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "warm_value_s": self.warm_value_s,
            "warm_event_times_s": list(self.warm_event_times_s),
            "warm_wall_times_s": list(self.warm_wall_times_s),
            "contention": self.contention,
            "contended_event_times_s": list(self.contended_event_times_s),
        }


def _conversion_json(timing: ConversionTiming) -> dict[str, Any]:
    return {
        "buffer": timing.buffer,
        "kernel": timing.kernel,
        "event_times_s": list(timing.event_times_s),
        "wall_times_s": list(timing.wall_times_s),
        "value_s": timing.value_s,
    }
