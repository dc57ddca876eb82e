"""Builder: compile a batch of programs in parallel worker processes."""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections import deque
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, CancelledError, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from loky import ProcessPoolExecutor
from loky.process_executor import (
    BrokenProcessPool,
    ShutdownExecutorError,
    TerminatedWorkerError,
)

from laytune.codegen import KernelProgram
from laytune.exceptions import ConfigError
from laytune.runners._base import BaseBuilder
from laytune.runners._cache import DEFAULT_MAX_BYTES, BinaryCache
from laytune.runners._compile import compile_program, warm_worker
from laytune.runners._devices import Device, select_device
from laytune.runners._lifeline import follow_owner, spawning
from laytune.runners._results import BuildResult, ErrorKind

__all__ = ["Builder"]

_WARM_UP_HOLD_S = 0.05
# How often a build in flight looks whether close() was called (seconds).
_CLOSE_POLL_S = 0.25
#: How long killing the workers waits for the pool to reap them (seconds): a
#: SIGKILLed worker is reaped at once; a manager thread that cannot finish
#: (a worker killed from outside half-way through a result) is left to run.
_KILL_WAIT_S = 10.0


@dataclass
class _Task:
    index: int
    program: KernelProgram
    alone: bool = False  # crashed once beside other builds: retry it on its own
    deadline: float = 0.0


class Builder(BaseBuilder):
    """Compiles KernelPrograms for one device in parallel worker processes:
    the local :class:`BaseBuilder`.

    Contract (besides :class:`BaseBuilder`'s):

    - ``build(batch)`` returns one :class:`BuildResult` per program, in
      batch order, with the program binary (``cl.program_info.BINARIES``)
      on success so the measuring process loads it without compiling. A
      compiler error gives error kind ``build`` with the build log, and the
      result keeps the program (source and options). A build running longer
      than ``time_limit_s`` gives ``timeout``; a worker that dies gives
      ``crash``. Neither stops the batch.
    - Workers are loky's processes (joblib's pool, from its own package;
      started by exec, never forked from this process), ``max_workers``
      of them (default: the CPUs this process may use), each keeping one
      OpenCL context. They ignore SIGINT
      and SIGTERM and die within a second of this process, however it ends
      (see :mod:`laytune.runners._lifeline`). At most one build
      per worker is in flight, so a build's time limit starts when it is
      handed to an idle worker (plus ``startup_time_limit_s`` while workers
      are starting). A timeout kills every worker; builds that were in
      flight beside it are started again.
    - ``submit(batch)`` returns a future of the same list, so the caller can
      build batch k+1 while measuring batch k. Batches are compiled one after
      another in submission order; ``build`` and ``submit`` may be mixed
      from several threads. On a CPU device, builds compete with the
      measured kernels for the same cores; overlap them only where that
      noise is acceptable.
    - ``close`` (or leaving a ``with`` block) stops the workers within a
      second or so, also while a batch is being built (that batch's future
      and those of batches not started raise ``CancelledError``); a later
      build starts new workers.
    - With ``cache_dir``, every successful build is also written there, and
      a program already built for this device (same device key, source and
      options) is answered from it without compiling (``cached=True``). The
      directory may be shared between builders and processes, and holds
      about ``cache_max_bytes`` (the least recently used entries go first;
      None: no bound). A directory that cannot be made or written only
      costs compiles (one warning). Without it, nothing is written and
      every program is compiled.
    """

    def __init__(
        self,
        device: Device | int | str,
        *,
        max_workers: int | None = None,
        time_limit_s: float = 60.0,
        startup_time_limit_s: float = 60.0,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_max_bytes: int | None = DEFAULT_MAX_BYTES,
    ) -> None:
        if time_limit_s <= 0:
            raise ConfigError(f"time_limit_s must be positive, got {time_limit_s}")
        self._device = device if isinstance(device, Device) else select_device(device)
        self._max_workers = max_workers or len(os.sched_getaffinity(0))
        if self._max_workers < 1:
            raise ConfigError(f"max_workers must be >= 1, got {max_workers}")
        self._time_limit_s = time_limit_s
        self._startup_time_limit_s = startup_time_limit_s
        self._executor: ProcessPoolExecutor | None = None
        self._warm = False
        self._lock = threading.Lock()
        self._background: ThreadPoolExecutor | None = None
        self._closing = False
        self._cache: BinaryCache | None = None
        self._cache_warned = False
        if cache_dir is not None:
            try:
                self._cache = BinaryCache(cache_dir, max_bytes=cache_max_bytes)
            except OSError as exc:
                self._cache_warned = True
                warnings.warn(
                    f"the binary cache {cache_dir} cannot be made ({exc}); every program is compiled",
                    RuntimeWarning,
                    stacklevel=2,
                )

    @property
    def device(self) -> Device:
        return self._device

    @property
    def max_workers(self) -> int:
        return self._max_workers

    def warm_up(self) -> int:
        """Start every build worker now and have each open its context and load
        the compiler, so that the first batch does not wait for them.

        Builds start the workers on demand otherwise. Waits at most
        ``startup_time_limit_s``; returns how many distinct workers are
        ready (``max_workers`` unless some did not start in time).
        """
        with self._lock:
            pool = self._pool()
            deadline = time.monotonic() + self._startup_time_limit_s
            ready: set[int] = set()
            while len(ready) < self._max_workers and time.monotonic() < deadline:
                # Each call holds its worker a moment, so that the next ones
                # go to workers that have not answered yet.
                try:
                    with spawning():
                        calls = [
                            pool.submit(warm_worker, self._device, _WARM_UP_HOLD_S)
                            for _ in range(self._max_workers - len(ready))
                        ]
                except (BrokenProcessPool, ShutdownExecutorError):
                    self._kill_workers()
                    return 0
                done, _ = wait(calls, timeout=max(0.0, deadline - time.monotonic()))
                try:
                    ready.update(call.result() for call in done)
                except (TerminatedWorkerError, BrokenProcessPool):
                    self._kill_workers()
                    return 0
            self._warm = self._warm or bool(ready)
            return len(ready)

    def build(self, batch: Sequence[KernelProgram]) -> list[BuildResult]:
        with self._lock:
            return self._build(list(batch))

    def submit(self, batch: Sequence[KernelProgram]) -> Future[list[BuildResult]]:
        if self._background is None:
            self._background = ThreadPoolExecutor(max_workers=1, thread_name_prefix="laytune-build")
        return self._background.submit(self.build, list(batch))

    def close(self) -> None:
        """Stop the workers; a batch being built stops within ``_CLOSE_POLL_S``.

        The workers die before the thread that started them ends (the
        background thread of :meth:`submit`): Linux kills a worker whose
        starting thread ends (see :mod:`laytune.runners._lifeline`) wherever
        it is, half-way through sending a result too, and the pool's manager
        thread would then wait for the rest of that result forever, and the
        interpreter's exit with it.
        """
        self._closing = True
        try:
            with self._lock:  # after the batch being built has stopped
                self._kill_workers()
            if self._background is not None:
                self._background.shutdown(wait=True, cancel_futures=True)
                self._background = None
        finally:
            self._closing = False

    # -- scheduling ---------------------------------------------------------
    def _build(self, batch: list[KernelProgram]) -> list[BuildResult]:
        results: list[BuildResult | None] = [None] * len(batch)
        pending: deque[_Task] = deque()
        for index, program in enumerate(batch):
            results[index] = self._from_cache(program)
            if results[index] is None:
                pending.append(_Task(index, program))
        in_flight: dict[Future[BuildResult], _Task] = {}
        while pending or in_flight:
            if self._closing:
                self._kill_workers()
                raise CancelledError("the builder was closed while this batch was built")
            self._fill(pending, in_flight)
            nearest = min(task.deadline for task in in_flight.values())
            timeout = min(_CLOSE_POLL_S, max(0.0, nearest - time.monotonic()))
            done, _ = wait(in_flight, timeout=timeout, return_when=FIRST_COMPLETED)
            crashed: list[_Task] = []
            for future in done:
                task = in_flight.pop(future)
                try:
                    results[task.index] = result = future.result()
                    self._warm = True
                    self._to_cache(result)
                except (TerminatedWorkerError, BrokenProcessPool, ShutdownExecutorError) as exc:
                    # The worker died, or its pool was killed under it (a pool
                    # found broken is replaced in _submit): build it again.
                    if task.alone:
                        results[task.index] = self._failure(
                            task, ErrorKind.CRASH, f"the build worker died: {exc}"
                        )
                    else:
                        crashed.append(task)
                except Exception as exc:  # the worker raised: report, go on
                    results[task.index] = self._failure(
                        task, ErrorKind.BUILD, f"building raised {type(exc).__name__}: {exc}"
                    )
            now = time.monotonic()
            expired = [f for f, task in in_flight.items() if task.deadline <= now]
            if crashed or expired:
                for future in expired:
                    task = in_flight.pop(future)
                    results[task.index] = self._failure(
                        task,
                        ErrorKind.TIMEOUT,
                        f"building took longer than {self._time_limit_s:g} s; "
                        "the build workers were killed",
                    )
                # A dead or killed pool takes every build in flight with it:
                # start them again, crash suspects one at a time.
                restart = [task for task in in_flight.values()]
                in_flight.clear()
                for task in crashed:
                    task.alone = True
                pending.extendleft(reversed(crashed + restart))
                self._kill_workers()
        return [result for result in results if result is not None]

    def _fill(self, pending: deque[_Task], in_flight: dict[Future[BuildResult], _Task]) -> None:
        while pending and len(in_flight) < self._max_workers:
            if pending[0].alone and in_flight:
                return
            task = pending.popleft()
            future = self._submit(task.program)  # may start a fresh pool, not warm yet
            limit = self._time_limit_s + (0.0 if self._warm else self._startup_time_limit_s)
            task.deadline = time.monotonic() + limit
            in_flight[future] = task
            if task.alone:
                return

    def _submit(self, program: KernelProgram) -> Future[BuildResult]:
        """Hand one program to the pool, starting workers as needed. A pool
        found broken (its workers died while idle: see _lifeline on threads)
        is replaced once; nothing had been sent to it."""
        for attempt in (1, 2):
            pool = self._pool()
            try:
                with spawning():
                    return pool.submit(compile_program, self._device, program)
            except (BrokenProcessPool, ShutdownExecutorError):
                self._kill_workers()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _pool(self) -> ProcessPoolExecutor:
        if self._executor is None:
            with spawning():  # loky's threads, started here, keep the mask
                self._executor = ProcessPoolExecutor(
                    max_workers=self._max_workers,
                    initializer=follow_owner,
                    initargs=(os.getpid(),),
                )
            self._warm = False
        return self._executor

    def _kill_workers(self) -> None:
        """SIGKILL the workers and wait (at most ``_KILL_WAIT_S``) until the
        pool's manager thread has reaped them and ended."""
        executor, self._executor = self._executor, None
        if executor is None:
            return
        manager = getattr(executor, "_executor_manager_thread", None)  # shutdown drops it
        executor.shutdown(wait=False, kill_workers=True)
        if isinstance(manager, threading.Thread) and manager is not threading.current_thread():
            manager.join(_KILL_WAIT_S)

    def _from_cache(self, program: KernelProgram) -> BuildResult | None:
        if self._cache is None:
            return None
        started_at = time.time()
        start = time.perf_counter()
        entry = self._cache.load(self._device.key, program)
        if entry is None:
            return None
        binary, build_log = entry
        return BuildResult(
            program=program,
            device_key=self._device.key,
            binary=binary,
            build_log=build_log,
            build_seconds=time.perf_counter() - start,
            started_at=started_at,
            finished_at=time.time(),
            cached=True,
        )

    def _to_cache(self, result: BuildResult) -> None:
        if self._cache is None or not result.ok or result.binary is None:
            return
        try:
            self._cache.store(self._device.key, result.program, result.binary, result.build_log)
        except OSError as exc:  # a cache that cannot be written only costs rebuilds
            if not self._cache_warned:
                self._cache_warned = True
                warnings.warn(
                    f"the binary cache {self._cache.directory} refused an entry: {exc}",
                    RuntimeWarning,
                    stacklevel=2,
                )

    def _failure(self, task: _Task, kind: ErrorKind, message: str) -> BuildResult:
        return BuildResult(
            program=task.program,
            device_key=self._device.key,
            binary=None,
            error_kind=kind,
            error_message=message,
        )
