"""The measurement protocol on the device; runs inside the runner's worker process.

Everything here is plain sequential pyopencl on one in-order profiling queue.
The worker owns one :class:`DeviceSession` for its whole life. Each candidate
gets a program created from the builder's binary, and device memory that the
session recycles from the previous candidate where kind and size match. Every
byte of that memory that no input upload overwrites starts as a sentinel (NaN
for floats), so nothing a previous candidate left behind can pass for a result.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyopencl as cl

from laytune._cl_build import build_binary
from laytune.codegen import ArgRef, BufferSpec, KernelProgram, Launch
from laytune.runners._config import MeasureConfig, Tolerance, default_flush_bytes
from laytune.runners._devices import Device
from laytune.runners._execute import image_format
from laytune.runners._memory import device_views
from laytune.runners._results import (
    ConversionTiming,
    ErrorKind,
    LaunchCounts,
    OutputCheck,
    RunResult,
)
from laytune.space import IMAGE_DTYPES

__all__ = ["DeviceSession", "PreparedWorkload", "measure_candidate"]

_STATISTICS: dict[str, Callable[[Sequence[float]], float]] = {
    "median": lambda times: float(np.median(times)),
    "mean": lambda times: float(np.mean(times)),
    "min": lambda times: float(np.min(times)),
}
_START = cl.profiling_info.START
_END = cl.profiling_info.END

# What a piece of device memory is, for recycling: ("buffer", nbytes) or
# ("image", channel order, channel type, width, height).
MemoryKey = tuple[Any, ...]


#: Elements of an output compared at a time: the float64 temporaries of a
#: comparison are a few chunks, never a few copies of the output.
_COMPARE_CHUNK = 1 << 18


def _chunks(array: np.ndarray) -> Iterable[np.ndarray]:
    flat = array.reshape(-1)
    for start in range(0, flat.size, _COMPARE_CHUNK):
        yield flat[start : start + _COMPARE_CHUNK]


@dataclass(frozen=True)
class _FloatReference:
    """What comparing a float output with its reference needs besides the
    reference itself: its largest finite magnitude (the scale of ``atol``)
    and whether it is finite everywhere. Two numbers, whatever its size."""

    scale: float
    all_finite: bool


class _Expected:
    """One reference output with its tolerance; the figures of its float
    comparison (:class:`_FloatReference`) are made once per workload."""

    def __init__(self, reference: np.ndarray, tolerance: Tolerance) -> None:
        self.reference = reference
        self.tolerance = tolerance
        self._kept: _FloatReference | None = None

    def float_reference(self) -> _FloatReference:
        if self._kept is None:
            largest, all_finite = 0.0, True
            for chunk in _chunks(self.reference):
                want = chunk.astype(np.float64)
                finite = np.isfinite(want)
                if finite.all():
                    largest = max(largest, float(np.abs(want).max(initial=0.0)))
                    continue
                all_finite = False
                if finite.any():
                    largest = max(largest, float(np.abs(want[finite]).max()))
            self._kept = _FloatReference(max(1.0, largest), all_finite)
        return self._kept


@dataclass(frozen=True)
class PreparedWorkload:
    """A workload's inputs and reference outputs, made once per worker."""

    key: str
    inputs: dict[str, np.ndarray]
    references: dict[str, np.ndarray]
    reduction_length: int = 1
    timed_cold: bool = False
    _expected: dict[tuple[str, str], _Expected] = field(
        default_factory=dict, repr=False, compare=False
    )

    def expected(self, buffer: str, dtype: np.dtype) -> _Expected:
        """The reference of output ``buffer`` with the tolerance of ``dtype``."""
        key = (buffer, dtype.str)
        if key not in self._expected:
            tolerance = Tolerance.for_dtype(dtype, self.reduction_length)
            # Contiguous once here, so that comparing never copies it whole.
            reference = np.ascontiguousarray(self.references[buffer])
            self._expected[key] = _Expected(reference, tolerance)
        return self._expected[key]


class DeviceSession:
    """A context and a profiling queue on one device, for one worker's life.

    It also keeps the device memory of the last candidate (handed out again
    by :meth:`take_memory`), the cache-flush buffer, per dtype, the host
    array of one chunk that outputs are read back into, and per prepared
    workload the read-only device buffers made over its host inputs
    (:meth:`shared_input`), until :meth:`drop_workload` or :meth:`close`.
    ``injected_statuses`` is for tests only: it maps a program name to the
    completion status its launches are reported to have, so a lost device
    can be provoked on a healthy one.
    """

    def __init__(
        self, device: Device, *, injected_statuses: Mapping[str, int] | None = None
    ) -> None:
        self.device = device
        self.cl_device = device.open()
        self.context = cl.Context([self.cl_device])
        self.queue = cl.CommandQueue(
            self.context, properties=cl.command_queue_properties.PROFILING_ENABLE
        )
        self.injected_statuses = dict(injected_statuses or {})
        self._flush_buffer: cl.Buffer | None = None
        self._flush_bytes = 0
        self._spares: dict[MemoryKey, list[cl.MemoryObject]] = {}
        self._chunk: dict[str, np.ndarray] = {}
        # workload key -> input name -> (the host array, the buffer over it)
        self._shared: dict[str, dict[str, tuple[np.ndarray, cl.Buffer]]] = {}
        #: bytes of device memory this session has allocated for candidates
        #: (shared inputs are not allocations: they are the host arrays)
        self.allocated_bytes = 0

    def flush_buffer(self, nbytes: int | None) -> tuple[cl.Buffer, int]:
        if nbytes is None:
            nbytes = default_flush_bytes(
                self.cl_device.global_mem_cache_size, self.cl_device.max_mem_alloc_size
            )
        if self._flush_buffer is None or self._flush_bytes != nbytes:
            self._flush_buffer = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, nbytes)
            self._flush_bytes = nbytes
        return self._flush_buffer, nbytes

    def take_memory(self, keys: Sequence[MemoryKey]) -> list[cl.MemoryObject]:
        """Device memory for each of ``keys``: a kept object of that kind and size,
        else a new one. Kept objects that nobody takes are released first, so
        at most one candidate's memory is ever kept. Raises ``cl.Error``."""
        taken = [self._spares[key].pop() if self._spares.get(key) else None for key in keys]
        self.release_spares()
        objects: list[cl.MemoryObject] = []
        try:
            for key, spare in zip(keys, taken, strict=True):
                objects.append(spare if spare is not None else self._allocate(key))
        except cl.Error:
            for obj in (*objects, *taken[len(objects) :]):
                if obj is not None:
                    obj.release()
            raise
        return objects

    def keep_memory(self, objects: Iterable[tuple[MemoryKey, cl.MemoryObject]]) -> None:
        """Keep a finished candidate's memory for the next one."""
        for key, obj in objects:
            self._spares.setdefault(key, []).append(obj)

    def release_spares(self) -> None:
        for objects in self._spares.values():
            for obj in objects:
                obj.release()
        self._spares.clear()

    def shared_input(self, workload: PreparedWorkload, spec: BufferSpec) -> cl.Buffer | None:
        """The logical view of input ``spec``: a read-only buffer over the
        workload's own host array (``USE_HOST_PTR``: no copy on a CPU device
        when the array is aligned, see :func:`~laytune.runners._workload.aligned`),
        made once per workload and input. None where the array cannot be
        shared as it is (another dtype or shape, not contiguous, empty): the
        caller then copies it into memory of its own, as before."""
        array = workload.inputs.get(spec.name)
        if (
            spec.role != "input"
            or not isinstance(array, np.ndarray)
            or array.dtype != np.dtype(spec.dtype)
            or array.shape != tuple(spec.shape)
            or not array.flags.c_contiguous
            or array.nbytes == 0
        ):
            return None
        kept = self._shared.setdefault(workload.key, {})
        entry = kept.get(spec.name)
        if entry is not None:
            if entry[0] is array:
                return entry[1]
            entry[1].release()  # another array under the same key: not ours any more
            del kept[spec.name]
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.USE_HOST_PTR
        try:
            buffer = cl.Buffer(self.context, flags, hostbuf=array)
        except (cl.Error, TypeError, ValueError):
            return None
        kept[spec.name] = (array, buffer)
        return buffer

    def shared_inputs(self) -> dict[str, tuple[str, ...]]:
        """The inputs shared so far, per workload key (for tests and reports)."""
        return {key: tuple(sorted(kept)) for key, kept in self._shared.items()}

    def drop_workload(self, key: str) -> None:
        """Release the buffers over the inputs of workload ``key``."""
        for _, buffer in self._shared.pop(key, {}).values():
            buffer.release()

    def close(self) -> None:
        """Release every device object the session keeps."""
        for key in list(self._shared):
            self.drop_workload(key)
        self.release_spares()
        if self._flush_buffer is not None:
            self._flush_buffer.release()
            self._flush_buffer = None

    def chunk_array(self, dtype: np.dtype) -> np.ndarray:
        """The host array of one comparison chunk of ``dtype`` that outputs
        are read back into, a chunk at a time, reused across candidates."""
        array = self._chunk.get(dtype.str)
        if array is None or array.size != _COMPARE_CHUNK:
            array = self._chunk[dtype.str] = np.empty(_COMPARE_CHUNK, dtype=dtype)
        return array

    def _allocate(self, key: MemoryKey) -> cl.MemoryObject:
        flags = cl.mem_flags.READ_WRITE
        if key[0] == "image":
            _, order, channel_type, width, height = key
            image_format = cl.ImageFormat(order, channel_type)
            image = cl.Image(self.context, flags, image_format, shape=(width, height))
            self.allocated_bytes += int(image.size)
            return image
        self.allocated_bytes += key[1]
        return cl.Buffer(self.context, flags, key[1])


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
    injected_status: int | None = None
    #: Called between steps (never inside a timed one): the worker tells its
    #: parent the candidate is still making progress.
    beat: Callable[[], None] = lambda: None
    counts: dict[str, int] = field(
        default_factory=lambda: {"pack": 0, "compute": 0, "unpack": 0, "flush": 0}
    )

    def launch(self, stage: str, kernel: cl.Kernel, launch: Launch) -> cl.Event:
        try:
            event = cl.enqueue_nd_range_kernel(
                self.queue, kernel, launch.global_size, launch.local_size
            )
        except cl.Error as exc:
            raise _cl_failure(
                ErrorKind.RUN,
                f"enqueue of {stage} kernel {launch.kernel!r} (global {launch.global_size}, "
                f"local {launch.local_size})",
                exc,
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
            raise _cl_failure(ErrorKind.DEVICE_LOST, "waiting for the queue", exc) from exc

    def check(self, events: Sequence[cl.Event]) -> None:
        for event in events:
            status = event.command_execution_status
            if self.injected_status is not None:
                status = self.injected_status
            if status < 0:
                raise _Failure(
                    ErrorKind.DEVICE_LOST,
                    f"a launch completed with error status {_status_name(status)} ({status})",
                    status,
                )

    def launch_counts(self) -> LaunchCounts:
        return LaunchCounts(**self.counts)


def _cl_failure(kind: ErrorKind, what: str, exc: cl.Error) -> _Failure:
    """The failure of an OpenCL call: ``what failed: <status name> (<code>)``."""
    return _Failure(kind, f"{what} failed: {_status_name(exc.code)} ({exc.code})", exc.code)


def _event_seconds(events: Sequence[cl.Event]) -> float:
    return sum(e.get_profiling_info(_END) - e.get_profiling_info(_START) for e in events) * 1e-9


def _sentinel(dtype: np.dtype) -> np.ndarray:
    """What unwritten elements hold, so that a kernel that skips some shows."""
    if np.issubdtype(dtype, np.floating):
        return np.full(1, np.nan, dtype=dtype)
    if np.issubdtype(dtype, np.integer):
        return np.full(1, np.iinfo(dtype).max, dtype=dtype)
    return np.full(1, 0xAB, dtype=np.uint8)


def _image_format(spec: BufferSpec) -> cl.ImageFormat:
    found = image_format(spec.dtype)
    if found is None:
        raise _Failure(
            ErrorKind.RUN,
            f"image2d buffer {spec.name!r} has dtype {spec.dtype}; one of {sorted(IMAGE_DTYPES)}",
        )
    return found


class _Buffers:
    """Device memory of one candidate, per buffer and view.

    A view is allocated when a launch names it; a buffer that no launch
    names keeps a logical view (its output then reads back as sentinels).
    An input's logical view is the session's buffer over the workload's host
    array where it can be (:meth:`DeviceSession.shared_input`): no memory of
    the candidate's, never written, never handed to the next candidate.
    """

    def __init__(
        self,
        session: DeviceSession,
        program: KernelProgram,
        workload: PreparedWorkload | None = None,
    ) -> None:
        self.session = session
        wanted: list[tuple[tuple[str, str], MemoryKey]] = []
        shared: dict[tuple[str, str], cl.MemoryObject] = {}
        for spec, view in device_views(program):
            itemsize = np.dtype(spec.dtype).itemsize
            if view == "logical" and workload is not None and spec.role == "input":
                over_host = session.shared_input(workload, spec)
                if over_host is not None:
                    shared[(spec.name, "logical")] = over_host
                    continue
            if view == "logical":
                nbytes = max(1, int(np.prod(spec.shape)) * itemsize)
                wanted.append(((spec.name, "logical"), ("buffer", nbytes)))
                continue
            if spec.memory == "image2d":
                image_format = _image_format(spec)
                width, height = spec.image_shape
                key = (
                    "image",
                    image_format.channel_order,
                    image_format.channel_data_type,
                    width,
                    height,
                )
            else:
                key = ("buffer", max(1, int(np.prod(spec.physical_shape)) * itemsize))
            wanted.append(((spec.name, "physical"), key))
        try:
            objects = session.take_memory([key for _, key in wanted])
        except cl.Error as exc:
            raise _cl_failure(ErrorKind.RUN, "allocating buffers", exc) from exc
        self.keys = dict(wanted)
        self.objects: dict[tuple[str, str], cl.MemoryObject] = dict(
            zip((view for view, _ in wanted), objects, strict=True)
        )
        #: views over a host input, the session's: read only, never kept as spares
        self.shared = frozenset(shared)
        self.objects.update(shared)
        #: buffers whose logical view is their physical one (one allocation)
        self.aliased = frozenset(spec.name for spec in program.buffers if spec.aliased)

    def get(self, ref: ArgRef) -> cl.MemoryObject:
        view = "physical" if ref.buffer in self.aliased else ref.view
        try:
            return self.objects[(ref.buffer, view)]
        except KeyError:
            raise _Failure(
                ErrorKind.RUN, f"launch argument names unknown buffer {ref.buffer!r}"
            ) from None

    def fill_sentinel(self, spec: BufferSpec, *views: str) -> None:
        queue = self.session.queue
        value = _sentinel(np.dtype(spec.dtype))
        for view in views:
            obj = self.objects.get((spec.name, view))
            if obj is None or (spec.name, view) in self.shared:
                continue
            if isinstance(obj, cl.Image):
                width, height = spec.image_shape
                color = np.full(4, np.nan, dtype=np.float32)
                cl.enqueue_fill_image(queue, obj, color, origin=(0, 0), region=(width, height))
            elif obj.size % value.nbytes == 0:
                cl.enqueue_fill_buffer(queue, obj, value, 0, obj.size)

    def release(self) -> None:
        """Hand the memory back to the session for the next candidate."""
        self.session.keep_memory(
            (self.keys[view], obj) for view, obj in self.objects.items() if view not in self.shared
        )
        self.objects.clear()


def _conversion_buffer(launch: Launch) -> str:
    names = sorted({ref.buffer for ref in launch.args})
    return "+".join(names)


def _no_conversions(program: KernelProgram, roles: tuple[str, ...]) -> list[ConversionTiming]:
    """The conversions of the aliased buffers of ``roles``: no kernel runs,
    so nothing is timed and each takes 0 s."""
    return [
        ConversionTiming(spec.name, "", (), (), 0.0)
        for spec in program.buffers
        if spec.aliased and spec.role in roles
    ]


class _DeviceOutput:
    """An output still in device memory, read back one comparison chunk at a
    time into the session's chunk array: the host never holds a copy of the
    whole output. Each chunk is overwritten by the next."""

    def __init__(
        self, session: DeviceSession, source: cl.Buffer, shape: tuple[int, ...], dtype: np.dtype
    ) -> None:
        self.session, self.source, self.shape, self.dtype = session, source, shape, dtype

    def chunks(self) -> Iterable[np.ndarray]:
        size = math.prod(self.shape)
        host = self.session.chunk_array(self.dtype)
        for start in range(0, size, _COMPARE_CHUNK):
            part = host[: min(_COMPARE_CHUNK, size - start)]
            try:
                cl.enqueue_copy(
                    self.session.queue,
                    part,
                    self.source,
                    src_offset=start * self.dtype.itemsize,
                    is_blocking=True,
                )
            except cl.Error as exc:
                raise _cl_failure(ErrorKind.DEVICE_LOST, "reading the output back", exc) from exc
            yield part


def _compare(buffer: str, out: np.ndarray | _DeviceOutput, expected: _Expected) -> OutputCheck:
    """Check ``out`` against the reference, one chunk of each at a time (one
    pass, so an output on the device is read once)."""
    ref = expected.reference
    tolerance = expected.tolerance
    if out.shape != ref.shape:
        return OutputCheck(buffer, float("inf"), tolerance, False)
    got_chunks = out.chunks() if isinstance(out, _DeviceOutput) else _chunks(out)
    floating = np.issubdtype(out.dtype, np.floating) or np.issubdtype(ref.dtype, np.floating)
    worst, passed, lost = 0.0, True, False  # lost: a finite reference value came out non-finite
    for got_chunk, want_chunk in zip(got_chunks, _chunks(ref), strict=True):
        if out.dtype == ref.dtype and np.array_equal(got_chunk, want_chunk):
            continue  # exact: nothing to add, and no float64 temporaries
        got, want = got_chunk.astype(np.float64), want_chunk.astype(np.float64)
        if not floating:
            worst = max(worst, float(np.abs(got - want).max()))
            passed = passed and bool(np.array_equal(got_chunk, want_chunk))
            continue
        floats = expected.float_reference()
        with np.errstate(invalid="ignore"):
            diff = np.abs(got - want)
            within = diff <= tolerance.atol * floats.scale + tolerance.rtol * np.abs(want)
        if floats.all_finite:
            # NaN in the output makes the max NaN; a non-finite output counts as inf.
            largest = float(diff.max()) if diff.size else 0.0
            worst = max(worst, math.inf if math.isnan(largest) else largest)
            passed = passed and bool(within.all())
            continue
        finite = np.isfinite(want)
        same_special = ~finite & ((got == want) | (np.isnan(got) & np.isnan(want)))
        passed = passed and bool(np.all(within | same_special))
        if (finite & ~np.isfinite(got)).any():
            lost = True
        elif finite.any():
            worst = max(worst, float(diff[finite].max()))
    if lost:
        worst = math.inf
    return OutputCheck(buffer, worst, tolerance, passed)


def _timed_repeats(
    enqueuer: _Enqueuer,
    stage: str,
    group: Sequence[tuple[cl.Kernel, Launch]],
    config: MeasureConfig,
    flush: tuple[cl.Buffer, int] | None,
    *,
    extend: bool,
    abandon_above_s: float | None = None,
) -> tuple[list[float], list[float], bool]:
    """``config.warmup`` untimed then timed repeats of ``group``.

    Returns (event times, wall times, abandoned); see :class:`MeasureConfig`
    for how many repeats and when ``abandon_above_s`` stops them early.
    """
    enqueuer.beat()
    for _ in range(config.warmup):
        for kernel, launch in group:
            enqueuer.launch(stage, kernel, launch)
    enqueuer.finish()
    event_times: list[float] = []
    wall_times: list[float] = []
    chosen = event_times if config.clock == "event" else wall_times
    statistic = _STATISTICS[config.statistic]
    total = 0.0

    def more_due() -> bool:
        if len(event_times) < config.repeats:
            return True
        return (
            extend
            and config.min_total_time_s > 0
            and total < config.min_total_time_s
            and len(event_times) < config.max_repeats
        )

    while more_due():
        enqueuer.beat()
        if flush is not None:
            enqueuer.flush(*flush)
        start = time.perf_counter()
        events = [enqueuer.launch(stage, kernel, launch) for kernel, launch in group]
        enqueuer.finish()
        wall = time.perf_counter() - start
        enqueuer.check(events)
        event = _event_seconds(events)
        event_times.append(event)
        wall_times.append(wall)
        total += chosen[-1]
        if (
            abandon_above_s is not None
            and len(chosen) == config.early_stop_after
            and more_due()
            and statistic(chosen) > abandon_above_s
        ):
            return event_times, wall_times, True
    return event_times, wall_times, False


#: Linux's CPU pressure (PSI): ``some ... total=`` counts the microseconds
#: during which some runnable task waited for a CPU.
CPU_PRESSURE = "/proc/pressure/cpu"


def cpu_stall_us(path: str = CPU_PRESSURE) -> int | None:
    """Microseconds some runnable task of the host has waited for a CPU since
    boot (Linux's ``/proc/pressure/cpu``); None where it is not reported."""
    try:
        with open(path) as pressure:
            for line in pressure:
                if line.startswith("some "):
                    return int(line.rsplit("total=", 1)[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


@dataclass(frozen=True)
class _Series:
    """One timed series of step 3 and the share of its wall time during which
    some task waited for a CPU (None: not read)."""

    event_times: list[float]
    wall_times: list[float]
    abandoned: bool
    contention: float | None


def _quiet_compute(
    enqueuer: _Enqueuer,
    group: Sequence[tuple[cl.Kernel, Launch]],
    config: MeasureConfig,
    flush: tuple[cl.Buffer, int] | None,
    abandon_above_s: float | None,
    watch: bool,
) -> tuple[_Series, tuple[float, ...]]:
    """Step 3 of :class:`MeasureConfig`, and step 6: with ``watch`` (a CPU
    device, whose kernels share the host's cores), a series during which
    other work kept runnable tasks waiting for a CPU past
    ``config.contention_limit`` of its wall time is timed again, and the
    calmer series kept. Returns it and the other's event times (none when
    step 3 ran once)."""

    def series() -> _Series:
        before = cpu_stall_us() if watch else None
        start = time.perf_counter()
        event, wall, abandoned = _timed_repeats(
            enqueuer,
            "compute",
            group,
            config,
            flush,
            extend=True,
            abandon_above_s=abandon_above_s,
        )
        seconds = time.perf_counter() - start
        after = None if before is None else cpu_stall_us()
        share = None if after is None else min(1.0, max(0.0, (after - before) * 1e-6 / seconds))
        return _Series(event, wall, abandoned, share)

    first = series()
    limit = config.contention_limit
    if limit is None or first.contention is None or first.contention <= limit:
        return first, ()
    second = series()
    if second.contention is not None and second.contention < first.contention:
        return second, tuple(first.event_times)
    return first, tuple(second.event_times)


def _ranked(config: MeasureConfig, event: Sequence[float], wall: Sequence[float]) -> float:
    """The value that ranks a set of repeats: ``config.statistic`` of its ``config.clock`` times."""
    return _STATISTICS[config.statistic](event if config.clock == "event" else wall)


def measure_candidate(
    session: DeviceSession,
    program: KernelProgram,
    binary: bytes,
    workload: PreparedWorkload,
    config: MeasureConfig,
    abandon_above_s: float | None = None,
    beat: Callable[[], None] | None = None,
) -> RunResult:
    """Verify then time one built program; every failure comes back as a RunResult.

    ``beat`` is called between the steps (each warm-up and timed launch
    group, the verification), outside every timed interval."""
    started = time.perf_counter()
    started_at = time.time()
    enqueuer = _Enqueuer(session.queue, session.injected_statuses.get(program.name))
    if beat is not None:
        enqueuer.beat = beat
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
        buffers = _Buffers(session, program, workload)
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
        read_back = _output_sources(session, program, buffers, workload)
        enqueuer.finish()
        enqueuer.check(events)
        outputs = tuple(
            _compare(spec.name, out, workload.expected(spec.name, out.dtype))
            for spec, out in read_back
        )
        max_error = max((check.max_abs_error for check in outputs), default=0.0)
        enqueuer.beat()
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

        cold = config.flush_cache or workload.timed_cold
        flush = session.flush_buffer(config.flush_bytes) if cold else None
        pack_times: list[ConversionTiming] = []
        unpack_times: list[ConversionTiming] = []
        if config.measure_conversions:
            pack_times += _no_conversions(program, ("input", "inout"))
            unpack_times += _no_conversions(program, ("output", "inout"))
            for stage, sink in (("pack", pack_times), ("unpack", unpack_times)):
                for kernel, launch in stages[stage]:
                    ev, wall, _ = _timed_repeats(
                        enqueuer, stage, [(kernel, launch)], config, flush, extend=False
                    )
                    sink.append(
                        ConversionTiming(
                            buffer=_conversion_buffer(launch),
                            kernel=launch.kernel,
                            event_times_s=tuple(ev),
                            wall_times_s=tuple(wall),
                            value_s=_ranked(config, ev, wall),
                        )
                    )
        kept, contended = _quiet_compute(
            enqueuer,
            stages["compute"],
            config,
            flush,
            abandon_above_s,
            watch=session.device.info.is_cpu,
        )
        event_times, wall_times, abandoned = kept.event_times, kept.wall_times, kept.abandoned
        warm_ev: list[float] = []
        warm_wall: list[float] = []
        if workload.timed_cold and not config.flush_cache and not abandoned:
            warm_ev, warm_wall, _ = _timed_repeats(
                enqueuer, "compute", stages["compute"], config, None, extend=False
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
            started_at=started_at,
            finished_at=time.time(),
        )
    finally:
        if buffers is not None:
            buffers.release()

    event_median = float(np.median(event_times))
    wall_median = float(np.median(wall_times))
    disagreement = abs(wall_median - event_median) > (
        config.clock_rtol * event_median + config.clock_atol_s
    )
    return RunResult(
        **base,
        value_s=_ranked(config, event_times, wall_times),
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
        abandoned=abandoned,
        started_at=started_at,
        finished_at=time.time(),
        warm_value_s=_ranked(config, warm_ev, warm_wall) if warm_ev else None,
        warm_event_times_s=tuple(warm_ev),
        warm_wall_times_s=tuple(warm_wall),
        contention=kept.contention,
        contended_event_times_s=contended,
    )


def _load_binary(session: DeviceSession, program: KernelProgram, binary: bytes) -> cl.Program:
    try:
        cl_program = build_binary(session.context, session.cl_device, binary, program.build_options)
    except cl.Error as exc:
        raise _cl_failure(ErrorKind.BUILD, "creating the program from its binary", exc) from exc
    return cl_program


def _bind(
    cl_program: cl.Program, launches: Sequence[Launch], buffers: _Buffers
) -> list[tuple[cl.Kernel, Launch]]:
    bound = []
    for launch in launches:
        try:
            kernel = cl.Kernel(cl_program, launch.kernel)
            # One set_arg per argument: Kernel.set_args would generate and
            # cache a Python invoker for every new kernel object.
            for position, ref in enumerate(launch.args):
                kernel.set_arg(position, buffers.get(ref))
        except cl.Error as exc:
            raise _cl_failure(ErrorKind.RUN, f"binding kernel {launch.kernel!r}", exc) from exc
        bound.append((kernel, launch))
    return bound


def _upload_inputs(
    session: DeviceSession, program: KernelProgram, buffers: _Buffers, workload: PreparedWorkload
) -> None:
    """Inputs into their logical views (and physical ones that no pack writes);
    every other view of every buffer gets the sentinel. A logical view over
    the host input itself (``buffers.shared``) already holds it: nothing is
    copied into it or filled in it."""
    packed = {ref.buffer for launch in program.pack for ref in launch.args}
    queue = session.queue
    for spec in program.buffers:
        if spec.role not in ("input", "inout"):
            buffers.fill_sentinel(spec, "logical", "physical")
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
        # Blocking copies: ``array`` may be a temporary conversion. An aliased
        # buffer has its physical view only, the logical array itself.
        logical = buffers.objects.get((spec.name, "logical"))
        if logical is not None and (spec.name, "logical") not in buffers.shared:
            cl.enqueue_copy(queue, logical, array)
        physical = buffers.objects.get((spec.name, "physical"))
        if physical is None:
            continue
        if spec.name in packed:
            buffers.fill_sentinel(spec, "physical")
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


def _output_sources(
    session: DeviceSession, program: KernelProgram, buffers: _Buffers, workload: PreparedWorkload
) -> list[tuple[BufferSpec, _DeviceOutput]]:
    """Every output as it lies on the device, to be read back a chunk at a
    time by its comparison (after the queue is finished)."""
    unpacked = {ref.buffer for launch in program.unpack for ref in launch.args}
    reads = []
    for spec in program.buffers:
        if spec.role not in ("output", "inout"):
            continue
        if spec.name not in workload.references:
            raise _Failure(
                ErrorKind.RUN,
                f"workload {workload.key!r} has no reference for output {spec.name!r}",
            )
        dtype = np.dtype(spec.dtype)
        source = buffers.objects.get((spec.name, "logical"))
        if spec.name not in unpacked:
            physical = buffers.objects.get((spec.name, "physical"))
            if physical is not None:
                if (
                    isinstance(physical, cl.Image)
                    or physical.size != math.prod(spec.shape) * dtype.itemsize
                ):
                    raise _Failure(
                        ErrorKind.RUN,
                        f"output {spec.name!r} has no unpack launch and its physical storage "
                        f"{spec.physical_shape} ({spec.memory}) is not its logical shape",
                    )
                source = physical
        reads.append((spec, _DeviceOutput(session, source, spec.shape, dtype)))
    return reads
