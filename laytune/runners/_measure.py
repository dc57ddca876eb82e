"""The measurement protocol on the device; runs inside the runner's worker process.

Everything here is plain sequential pyopencl on one in-order profiling queue.
The worker owns one :class:`DeviceSession` for its whole life; each
candidate gets fresh buffers and a program created from the builder's binary.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyopencl as cl

from laytune.codegen import ArgRef, BufferSpec, KernelProgram, Launch
from laytune.runners._config import MeasureConfig, Tolerance
from laytune.runners._devices import Device
from laytune.runners._results import (
    ConversionTiming,
    ErrorKind,
    LaunchCounts,
    OutputCheck,
    RunResult,
)

__all__ = ["DeviceSession", "PreparedWorkload", "measure_candidate"]

_MIN_FLUSH_BYTES = 64 << 20
_STATISTICS: dict[str, Callable[[np.ndarray], float]] = {
    "median": lambda times: float(np.median(times)),
    "mean": lambda times: float(np.mean(times)),
    "min": lambda times: float(np.min(times)),
}


@dataclass(frozen=True)
class PreparedWorkload:
    """A workload's inputs and reference outputs, made once per worker."""

    key: str
    inputs: dict[str, np.ndarray]
    references: dict[str, np.ndarray]
    reduction_length: int = 1


class DeviceSession:
    """A context and a profiling queue on one device, for one worker's life."""

    def __init__(self, device: Device) -> None:
        self.device = device
        self.cl_device = device.open()
        self.context = cl.Context([self.cl_device])
        self.queue = cl.CommandQueue(
            self.context, properties=cl.command_queue_properties.PROFILING_ENABLE
        )
        self._flush_buffer: cl.Buffer | None = None
        self._flush_bytes = 0

    def flush_buffer(self, nbytes: int | None) -> tuple[cl.Buffer, int]:
        if nbytes is None:
            nbytes = max(2 * int(self.cl_device.global_mem_cache_size), _MIN_FLUSH_BYTES)
            nbytes = min(nbytes, int(self.cl_device.max_mem_alloc_size))
        if self._flush_buffer is None or self._flush_bytes != nbytes:
            self._flush_buffer = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, nbytes)
            self._flush_bytes = nbytes
        return self._flush_buffer, nbytes


class _Failure(Exception):
    """A candidate failure inside this module; becomes a RunResult at the boundary."""

    def __init__(self, kind: ErrorKind, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.code = code


def _status_name(code: int) -> str:
    try:
        return str(cl.status_code.to_string(code))
    except (ValueError, KeyError):
        return "UNKNOWN_STATUS"


@dataclass
class _Enqueuer:
    """The one place kernels and flushes are enqueued and counted."""

    queue: cl.CommandQueue
    counts: dict[str, int] = field(
        default_factory=lambda: {"pack": 0, "compute": 0, "unpack": 0, "flush": 0}
    )

    def launch(self, stage: str, kernel: cl.Kernel, launch: Launch) -> cl.Event:
        try:
            event = cl.enqueue_nd_range_kernel(
                self.queue, kernel, launch.global_size, launch.local_size
            )
        except cl.Error as exc:
            raise _Failure(
                ErrorKind.RUN,
                f"enqueue of {stage} kernel {launch.kernel!r} (global {launch.global_size}, "
                f"local {launch.local_size}) failed: {_status_name(exc.code)} ({exc.code})",
                exc.code,
            ) from exc
        self.counts[stage] += 1
        return event

    def flush(self, buffer: cl.Buffer, nbytes: int) -> None:
        pattern = np.uint8(self.counts["flush"] & 0xFF)
        cl.enqueue_fill_buffer(self.queue, buffer, pattern, 0, nbytes)
        self.counts["flush"] += 1
        self.finish()

    def finish(self) -> None:
        """Block until the queue is empty (a blocking wait, never a polling loop)."""
        try:
            self.queue.finish()
        except cl.Error as exc:
            raise _Failure(
                ErrorKind.DEVICE_LOST,
                f"waiting for the queue failed: {_status_name(exc.code)} ({exc.code})",
                exc.code,
            ) from exc

    def check(self, events: Sequence[cl.Event]) -> None:
        for event in events:
            status = event.command_execution_status
            if status < 0:
                raise _Failure(
                    ErrorKind.DEVICE_LOST,
                    f"a launch completed with error status {_status_name(status)} ({status})",
                    status,
                )

    def launch_counts(self) -> LaunchCounts:
        return LaunchCounts(**self.counts)


def _sentinel(dtype: np.dtype) -> np.ndarray:
    """What unwritten output elements hold, so that a kernel that skips some shows."""
    if np.issubdtype(dtype, np.floating):
        return np.full(1, np.nan, dtype=dtype)
    if np.issubdtype(dtype, np.integer):
        return np.full(1, np.iinfo(dtype).max, dtype=dtype)
    return np.full(1, 0xAB, dtype=np.uint8)


def _image_format(spec: BufferSpec) -> cl.ImageFormat:
    channel_types = {"float32": cl.channel_type.FLOAT, "float16": cl.channel_type.HALF_FLOAT}
    dtype = np.dtype(spec.dtype).name
    if dtype not in channel_types:
        raise _Failure(
            ErrorKind.RUN, f"image2d buffer {spec.name!r} has dtype {dtype}; float32 or float16"
        )
    return cl.ImageFormat(cl.channel_order.RGBA, channel_types[dtype])


class _Buffers:
    """Device memory of one candidate: a logical and (if used) a physical object per buffer."""

    def __init__(self, session: DeviceSession, program: KernelProgram) -> None:
        self.session = session
        self.program = program
        self.objects: dict[tuple[str, str], cl.MemoryObject] = {}
        used_physical = {
            ref.buffer
            for launch in (*program.pack, *program.compute, *program.unpack)
            for ref in launch.args
            if ref.view == "physical"
        }
        mf = cl.mem_flags
        try:
            for spec in program.buffers:
                itemsize = np.dtype(spec.dtype).itemsize
                logical_bytes = max(1, int(np.prod(spec.shape)) * itemsize)
                self.objects[(spec.name, "logical")] = cl.Buffer(
                    session.context, mf.READ_WRITE, logical_bytes
                )
                if spec.name not in used_physical:
                    continue
                if spec.memory == "image2d":
                    self.objects[(spec.name, "physical")] = cl.Image(
                        session.context, mf.READ_WRITE, _image_format(spec), shape=spec.image_shape
                    )
                else:
                    physical_bytes = max(1, int(np.prod(spec.physical_shape)) * itemsize)
                    self.objects[(spec.name, "physical")] = cl.Buffer(
                        session.context, mf.READ_WRITE, physical_bytes
                    )
        except cl.Error as exc:
            self.release()
            raise _Failure(
                ErrorKind.RUN,
                f"allocating buffers failed: {_status_name(exc.code)} ({exc.code})",
                exc.code,
            ) from exc

    def get(self, ref: ArgRef) -> cl.MemoryObject:
        try:
            return self.objects[(ref.buffer, ref.view)]
        except KeyError:
            raise _Failure(
                ErrorKind.RUN, f"launch argument names unknown buffer {ref.buffer!r}"
            ) from None

    def fill_sentinel(self, spec: BufferSpec) -> None:
        queue = self.session.queue
        value = _sentinel(np.dtype(spec.dtype))
        for view in ("logical", "physical"):
            obj = self.objects.get((spec.name, view))
            if obj is None:
                continue
            if isinstance(obj, cl.Image):
                width, height = spec.image_shape
                color = np.full(4, np.nan, dtype=np.float32)
                cl.enqueue_fill_image(queue, obj, color, origin=(0, 0), region=(width, height))
            elif obj.size % value.nbytes == 0:
                cl.enqueue_fill_buffer(queue, obj, value, 0, obj.size)

    def release(self) -> None:
        for obj in self.objects.values():
            obj.release()
        self.objects.clear()


def _conversion_buffer(launch: Launch) -> str:
    names = sorted({ref.buffer for ref in launch.args})
    return "+".join(names)


def _compare(buffer: str, out: np.ndarray, ref: np.ndarray, tolerance: Tolerance) -> OutputCheck:
    if out.shape != ref.shape:
        return OutputCheck(buffer, float("inf"), tolerance, False)
    if not (np.issubdtype(out.dtype, np.floating) or np.issubdtype(ref.dtype, np.floating)):
        diff = np.abs(out.astype(np.float64) - ref.astype(np.float64))
        worst = float(diff.max()) if diff.size else 0.0
        return OutputCheck(buffer, worst, tolerance, bool(np.array_equal(out, ref)))
    got = out.astype(np.float64)
    want = ref.astype(np.float64)
    finite = np.isfinite(want)
    same_special = ~finite & ((got == want) | (np.isnan(got) & np.isnan(want)))
    scale = max(1.0, float(np.abs(want[finite]).max())) if finite.any() else 1.0
    with np.errstate(invalid="ignore"):
        diff = np.abs(got - want)
        within = diff <= tolerance.atol * scale + tolerance.rtol * np.abs(want)
    passed = bool(np.all(within | same_special))
    bad_finite = finite & ~np.isfinite(got)
    if bad_finite.any():
        worst = float("inf")
    elif finite.any():
        worst = float(diff[finite].max())
    else:
        worst = 0.0
    return OutputCheck(buffer, worst, tolerance, passed)


def _timed_repeats(
    enqueuer: _Enqueuer,
    stage: str,
    group: Sequence[tuple[cl.Kernel, Launch]],
    config: MeasureConfig,
    flush: tuple[cl.Buffer, int] | None,
    *,
    extend: bool,
) -> tuple[list[float], list[float]]:
    """``config.warmup`` untimed then timed repeats of ``group``: (event times, wall times)."""
    for _ in range(config.warmup):
        for kernel, launch in group:
            enqueuer.launch(stage, kernel, launch)
    enqueuer.finish()
    event_times: list[float] = []
    wall_times: list[float] = []
    total = 0.0
    while len(event_times) < config.repeats or (
        extend
        and config.min_total_time_s > 0
        and total < config.min_total_time_s
        and len(event_times) < config.max_repeats
    ):
        if flush is not None:
            enqueuer.flush(*flush)
        start = time.perf_counter()
        events = [enqueuer.launch(stage, kernel, launch) for kernel, launch in group]
        enqueuer.finish()
        wall = time.perf_counter() - start
        enqueuer.check(events)
        event = sum(e.profile.end - e.profile.start for e in events) * 1e-9
        event_times.append(event)
        wall_times.append(wall)
        total += event if config.clock == "event" else wall
    return event_times, wall_times


def measure_candidate(
    session: DeviceSession,
    program: KernelProgram,
    binary: bytes,
    workload: PreparedWorkload,
    config: MeasureConfig,
) -> RunResult:
    """Verify then time one built program; every failure comes back as a RunResult."""
    started = time.perf_counter()
    enqueuer = _Enqueuer(session.queue)
    base = {
        "program_name": program.name,
        "source_hash": program.source_hash,
        "workload_key": workload.key,
        "device_key": session.device.key,
        "statistic": config.statistic,
        "clock": config.clock,
    }
    buffers: _Buffers | None = None
    outputs: tuple[OutputCheck, ...] = ()
    max_error: float | None = None
    try:
        cl_program = _load_binary(session, program, binary)
        buffers = _Buffers(session, program)
        stages = {
            "pack": _bind(cl_program, program.pack, buffers),
            "compute": _bind(cl_program, program.compute, buffers),
            "unpack": _bind(cl_program, program.unpack, buffers),
        }
        _upload_inputs(session, program, buffers, workload)
        events = [
            enqueuer.launch(stage, kernel, launch)
            for stage in ("pack", "compute", "unpack")
            for kernel, launch in stages[stage]
        ]
        enqueuer.finish()
        enqueuer.check(events)
        outputs = _check_outputs(session, program, buffers, workload)
        max_error = max((check.max_abs_error for check in outputs), default=0.0)
        failed = [check for check in outputs if not check.passed]
        if failed:
            described = ", ".join(
                f"{c.buffer} (max abs error {c.max_abs_error:.3g}, "
                f"rtol {c.tolerance.rtol:.3g}, atol {c.tolerance.atol:.3g})"
                for c in failed
            )
            raise _Failure(
                ErrorKind.WRONG_RESULT, f"outputs differ from the reference: {described}"
            )

        flush = session.flush_buffer(config.flush_bytes) if config.flush_cache else None
        pack_times: list[ConversionTiming] = []
        unpack_times: list[ConversionTiming] = []
        if config.measure_conversions:
            for stage, sink in (("pack", pack_times), ("unpack", unpack_times)):
                for kernel, launch in stages[stage]:
                    ev, wall = _timed_repeats(
                        enqueuer, stage, [(kernel, launch)], config, flush, extend=False
                    )
                    chosen = ev if config.clock == "event" else wall
                    sink.append(
                        ConversionTiming(
                            buffer=_conversion_buffer(launch),
                            kernel=launch.kernel,
                            event_times_s=tuple(ev),
                            wall_times_s=tuple(wall),
                            value_s=_STATISTICS[config.statistic](np.asarray(chosen)),
                        )
                    )
        event_times, wall_times = _timed_repeats(
            enqueuer, "compute", stages["compute"], config, flush, extend=True
        )
    except _Failure as failure:
        return RunResult(
            **base,
            error_kind=failure.kind,
            error_message=failure.message,
            cl_error_code=failure.code,
            max_error=max_error,
            outputs=outputs,
            warmup=config.warmup,
            launches=enqueuer.launch_counts(),
            measure_seconds=time.perf_counter() - started,
        )
    finally:
        if buffers is not None:
            buffers.release()

    chosen = np.asarray(event_times if config.clock == "event" else wall_times)
    event_median = float(np.median(event_times))
    wall_median = float(np.median(wall_times))
    disagreement = abs(wall_median - event_median) > (
        config.clock_rtol * event_median + config.clock_atol_s
    )
    return RunResult(
        **base,
        value_s=_STATISTICS[config.statistic](chosen),
        event_times_s=tuple(event_times),
        wall_times_s=tuple(wall_times),
        clock_disagreement=disagreement,
        max_error=max_error,
        outputs=outputs,
        pack_times=tuple(pack_times),
        unpack_times=tuple(unpack_times),
        warmup=config.warmup,
        launches=enqueuer.launch_counts(),
        measure_seconds=time.perf_counter() - started,
    )


def _load_binary(session: DeviceSession, program: KernelProgram, binary: bytes) -> cl.Program:
    try:
        cl_program = cl.Program(session.context, [session.cl_device], [binary])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", cl.CompilerWarning)
            cl_program.build(options=list(program.build_options))
    except cl.Error as exc:
        raise _Failure(
            ErrorKind.BUILD,
            f"creating the program from its binary failed: {_status_name(exc.code)} ({exc.code})",
            exc.code,
        ) from exc
    return cl_program


def _bind(
    cl_program: cl.Program, launches: Sequence[Launch], buffers: _Buffers
) -> list[tuple[cl.Kernel, Launch]]:
    bound = []
    for launch in launches:
        try:
            kernel = cl.Kernel(cl_program, launch.kernel)
            kernel.set_args(*(buffers.get(ref) for ref in launch.args))
        except cl.Error as exc:
            raise _Failure(
                ErrorKind.RUN,
                f"binding kernel {launch.kernel!r} failed: {_status_name(exc.code)} ({exc.code})",
                exc.code,
            ) from exc
        bound.append((kernel, launch))
    return bound


def _upload_inputs(
    session: DeviceSession, program: KernelProgram, buffers: _Buffers, workload: PreparedWorkload
) -> None:
    packed = {ref.buffer for launch in program.pack for ref in launch.args}
    queue = session.queue
    for spec in program.buffers:
        if spec.role in ("output", "inout"):
            buffers.fill_sentinel(spec)
        if spec.role not in ("input", "inout"):
            continue
        if spec.name not in workload.inputs:
            raise _Failure(
                ErrorKind.RUN,
                f"workload {workload.key!r} has no input {spec.name!r} "
                f"(it has {sorted(workload.inputs)})",
            )
        array = np.ascontiguousarray(workload.inputs[spec.name], dtype=np.dtype(spec.dtype))
        if array.shape != spec.shape:
            raise _Failure(
                ErrorKind.RUN,
                f"input {spec.name!r} of workload {workload.key!r} has shape {array.shape}, "
                f"program {program.name!r} expects {spec.shape}",
            )
        cl.enqueue_copy(queue, buffers.objects[(spec.name, "logical")], array)
        physical = buffers.objects.get((spec.name, "physical"))
        if physical is None or spec.name in packed:
            continue
        # No pack launch: the physical storage is the logical array when it
        # is a global buffer of the same size (an identity layout).
        if isinstance(physical, cl.Image) or physical.size != array.nbytes:
            raise _Failure(
                ErrorKind.RUN,
                f"input {spec.name!r} has no pack launch and its physical storage "
                f"{spec.physical_shape} ({spec.memory}) is not its logical shape {spec.shape}",
            )
        cl.enqueue_copy(queue, physical, array)
    queue.finish()


def _check_outputs(
    session: DeviceSession, program: KernelProgram, buffers: _Buffers, workload: PreparedWorkload
) -> tuple[OutputCheck, ...]:
    unpacked = {ref.buffer for launch in program.unpack for ref in launch.args}
    checks = []
    for spec in program.buffers:
        if spec.role not in ("output", "inout"):
            continue
        if spec.name not in workload.references:
            raise _Failure(
                ErrorKind.RUN,
                f"workload {workload.key!r} has no reference for output {spec.name!r}",
            )
        dtype = np.dtype(spec.dtype)
        out = np.empty(spec.shape, dtype=dtype)
        source = buffers.objects[(spec.name, "logical")]
        if spec.name not in unpacked:
            physical = buffers.objects.get((spec.name, "physical"))
            if physical is not None:
                if isinstance(physical, cl.Image) or physical.size != out.nbytes:
                    raise _Failure(
                        ErrorKind.RUN,
                        f"output {spec.name!r} has no unpack launch and its physical storage "
                        f"{spec.physical_shape} ({spec.memory}) is not its logical shape",
                    )
                source = physical
        cl.enqueue_copy(session.queue, out, source)
        tolerance = Tolerance.for_dtype(dtype, workload.reduction_length)
        reference = np.asarray(workload.references[spec.name])
        checks.append(_compare(spec.name, out, reference, tolerance))
    return tuple(checks)
