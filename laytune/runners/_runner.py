"""Runner: measure a batch of built candidates in an isolated worker process."""

from __future__ import annotations

import shutil
import time
import weakref
from collections.abc import Sequence
from dataclasses import replace

import cloudpickle

from laytune.device_info import DeviceInfo
from laytune.exceptions import ConfigError, WorkerError, WorkerStartError
from laytune.runners._base import BaseRunner
from laytune.runners._config import MeasureConfig
from laytune.runners._devices import Device, select_device
from laytune.runners._memory import allocation_bytes, memory_refusal
from laytune.runners._results import ErrorKind, RunInput, RunResult
from laytune.runners._worker import (
    WorkerDied,
    WorkerProcess,
    WorkerTimeout,
    main_module_hint,
    new_kept_folder,
)
from laytune.runners._workload import timed_cold

__all__ = ["Runner"]


class Runner(BaseRunner):
    """Measures candidates one after another on one device, in a worker
    process: the local :class:`BaseRunner`.

    Contract (besides :class:`BaseRunner`'s):

    - ``run(batch)`` returns one :class:`RunResult` per input, in input
      order, and never raises for a candidate's failure: a failed build, a
      launch the device refuses, a wrong result, a hang past
      ``config.time_limit_s``, a crash of the worker process or a lost
      device each become a result with its :class:`ErrorKind`, and the rest
      of the batch is still measured. A candidate whose buffers would not
      fit the device's memory (:func:`memory_refusal`) is a ``run`` error
      that names the sizes, and is never sent to the worker.
    - Measurement is serial per device: one worker process, one candidate at
      a time. The worker is started with ``spawn`` on first use, keeps its
      context, and caches each workload's inputs and reference by key; a
      reference is computed once per runner (a worker started after a hang
      maps the one its predecessor wrote to a temporary folder, removed by
      ``close``, when the runner is collected or at exit, and by the next
      runner of any process when this process was killed outright). A
      batch goes to the worker in one message and the results come back one
      by one as each candidate finishes, so the worker never waits on this
      process between candidates; each candidate's time limit starts when
      the one before it has answered. After a timeout, a crash or a lost
      device the worker is killed, a fresh one is started at once, and the
      rest of the batch goes to it.
    - A candidate with an early-stop threshold (``RunInput.abandon_above_s``,
      or ``run(batch, abandon_above_s=...)`` for the inputs without one) may
      stop timing early and come back ``abandoned`` (see
      :class:`MeasureConfig`).
    - Inputs are made in the worker by ``workload.make_inputs(seed)`` with a
      seed fixed by ``config.seed`` and the workload key (see
      :class:`MeasureConfig`), so workloads and builds must pickle
      (cloudpickle: classes defined in ``__main__`` are fine); one that does
      not is a ``run`` error of its candidate.
    - Not thread-safe: call ``run`` from one thread at a time, best always
      the same one (the worker dies with the thread that started it, and
      is started again). ``close`` (or leaving a ``with`` block), or an
      exception such as KeyboardInterrupt in ``run``, stops the worker. It
      ignores SIGINT and SIGTERM and dies within a second of this process,
      however it ends (see :mod:`laytune.runners._lifeline`).
    """

    def __init__(
        self,
        device: Device | int | str,
        config: MeasureConfig | None = None,
        *,
        startup_time_limit_s: float = 120.0,
    ) -> None:
        self._device = device if isinstance(device, Device) else select_device(device)
        self._config = config if config is not None else MeasureConfig()
        self._startup_time_limit_s = startup_time_limit_s
        self._worker: WorkerProcess | None = None
        # References the workers computed, kept for the workers started after
        # them, in a folder removed by close, by collection, or at exit.
        self._kept: str | None = None
        self._kept_removal: weakref.finalize | None = None
        self.worker_starts = 0
        self._ever_ready = False  # a worker of this runner has opened the device
        # Tests only: program name -> the completion status the worker
        # reports for that program's launches (provokes a lost device).
        self._injected_statuses: dict[str, int] = {}

    @property
    def device(self) -> Device:
        return self._device

    @property
    def device_info(self) -> DeviceInfo:
        return self._device.info

    @property
    def config(self) -> MeasureConfig:
        return self._config

    @property
    def worker_pid(self) -> int | None:
        return self._worker.pid if self._worker is not None else None

    def run(
        self, batch: Sequence[RunInput], *, abandon_above_s: float | None = None
    ) -> list[RunResult]:
        """Measure ``batch``; ``abandon_above_s`` is the early-stop threshold of
        every input that does not set its own (see :class:`RunInput`)."""
        if abandon_above_s is not None and not abandon_above_s > 0:  # also refuses NaN
            raise ConfigError(f"abandon_above_s must be positive or None, got {abandon_above_s}")
        batch = [
            replace(item, abandon_above_s=abandon_above_s)
            if abandon_above_s is not None and item.abandon_above_s is None
            else item
            for item in batch
        ]
        results: list[RunResult | None] = [None] * len(batch)
        todo = []
        for index, item in enumerate(batch):
            refused = self._refusal(item)
            if refused is None:
                todo.append(index)
            else:
                results[index] = refused
        try:
            while todo:
                try:
                    worker = self._ready_worker()
                except RuntimeError as exc:  # WorkerError, or spawning failed
                    # Do not pay for a doomed start per candidate; the next batch tries again.
                    for index in todo:
                        results[index] = self._failure(
                            batch[index], ErrorKind.DEVICE_LOST, str(exc)
                        )
                    break
                todo = self._stream(worker, batch, todo, results)
        except BaseException:
            # Interrupted (KeyboardInterrupt, ...) while a worker started or
            # measured: it would go on and answer into the next batch.
            if self._worker is not None:
                self._worker.kill()
            self._worker = None
            raise
        return [result for result in results if result is not None]

    def close(self) -> None:
        super().close()  # the batches submitted so far finish first
        if self._worker is not None:
            self._worker.close()
            self._worker = None
        if self._kept_removal is not None:
            self._kept_removal()
            self._kept_removal = None
        self._kept = None

    # -- a batch --------------------------------------------------------------
    def _refusal(self, item: RunInput) -> RunResult | None:
        """The result of a candidate that cannot be measured here, else None."""
        build = item.build
        if not build.ok:
            return self._failure(
                item,
                build.error_kind if build.error_kind is not ErrorKind.NONE else ErrorKind.BUILD,
                build.error_message or "the program has no binary",
                build.cl_error_code,
                dated=(build.started_at, build.finished_at),
            )
        if build.device_key != self._device.key:
            return self._failure(
                item,
                ErrorKind.RUN,
                f"program was built for device {build.device_key}, "
                f"this runner measures on {self._device.key}",
            )
        too_large = memory_refusal(self._device.info, allocation_bytes(build.program))
        if too_large is not None:
            return self._failure(item, ErrorKind.RUN, f"not allocated: {too_large}")
        return None

    def _stream(
        self,
        worker: WorkerProcess,
        batch: list[RunInput],
        todo: list[int],
        results: list[RunResult | None],
    ) -> list[int]:
        """Measure ``batch[i]`` for ``i`` in ``todo`` on ``worker``, filling ``results``.

        Returns the indices still to measure when the worker was lost on the
        way (it has been replaced then).
        """
        config = self._config
        workloads: dict[str, bytes] = {}
        cold: dict[str, bool] = {}  # per workload key: timed cold on this device
        items: list[tuple[int, bytes]] = []
        for index in todo:
            item = batch[index]
            key = item.workload.key
            try:
                if key not in workloads:
                    cold[key] = timed_cold(item.workload, self._device.info.cache_size)
                    workloads[key] = cloudpickle.dumps(item.workload)
                payload = (
                    item.build.program,
                    item.build.binary,
                    key,
                    item.abandon_above_s,
                    cold[key],
                )
                items.append((index, cloudpickle.dumps(payload)))
            except Exception as exc:  # anything pickling may raise
                results[index] = self._failure(
                    item,
                    ErrorKind.RUN,
                    f"the candidate could not be sent to the measuring worker: "
                    f"{type(exc).__name__}: {exc}",
                )
        if not items:
            return []

        position = 0
        doing = "measuring"
        limit_s = config.time_limit_s
        try:
            worker.send(("batch", config, workloads, items))
        except WorkerDied as exc:
            return self._lost(batch, items, position, results, ErrorKind.CRASH, f"{exc}")
        deadline = time.monotonic() + limit_s
        while position < len(items):
            index = items[position][0]
            try:
                reply = worker.receive(deadline)
            except WorkerTimeout:
                message = f"{doing} took longer than {limit_s:g} s; the worker was killed"
                return self._lost(batch, items, position, results, ErrorKind.TIMEOUT, message)
            except WorkerDied as exc:
                message = f"{exc} while {doing}"
                return self._lost(batch, items, position, results, ErrorKind.CRASH, message)
            kind = reply[0]
            if reply[1] != index:
                raise WorkerError(f"the measuring worker answered {reply!r} for candidate {index}")
            if kind == "preparing":
                doing = "preparing the workload's inputs and reference"
                limit_s = config.prepare_time_limit_s
            elif kind == "prepared":
                doing = "measuring"
                limit_s = config.time_limit_s
            elif kind == "alive":
                pass  # a step of the candidate ended: its time limit starts again
            else:
                if kind == "result":
                    result: RunResult = reply[2]
                else:
                    result = self._failure(batch[index], ErrorKind.RUN, str(reply[2]))
                results[index] = result
                position += 1
                doing = "measuring"
                limit_s = config.time_limit_s
                if result.error_kind is ErrorKind.DEVICE_LOST:
                    self._replace_worker()
                    return [i for i, _ in items[position:]]
            deadline = time.monotonic() + limit_s
        return []

    def _lost(
        self,
        batch: list[RunInput],
        items: list[tuple[int, bytes]],
        position: int,
        results: list[RunResult | None],
        kind: ErrorKind,
        message: str,
    ) -> list[int]:
        """The worker hung or died on ``items[position]``: that candidate fails
        with ``kind``, a new worker starts, and the rest is returned."""
        index = items[position][0]
        results[index] = self._failure(batch[index], kind, message)
        self._replace_worker()
        return [i for i, _ in items[position + 1 :]]

    # -- the worker -----------------------------------------------------------
    def _ready_worker(self) -> WorkerProcess:
        if self._worker is not None and self._worker.ready and not self._worker.process.is_alive():
            # It died between batches (killed from outside, or the thread that
            # started it ended: see _lifeline): no candidate of ours was in it.
            self._worker.kill()
            self._worker = None
        worker = self._worker if self._worker is not None else self._start_worker()
        try:
            worker.wait_ready(self._startup_time_limit_s)
        except (WorkerTimeout, WorkerDied) as exc:
            self._worker = None
            message = f"the measuring worker did not start: {exc}"
            hint = main_module_hint()
            if isinstance(exc, WorkerDied) and exc.exitcode == 1 and hint:
                message += f"; {hint}"
                if not self._ever_ready:  # it never started: every later start dies the same
                    raise WorkerStartError(message) from exc
            raise WorkerError(message) from exc
        except RuntimeError:
            self._worker = None
            raise
        self._ever_ready = True
        return worker

    def _start_worker(self) -> WorkerProcess:
        if self._kept is None:
            self._kept = new_kept_folder()
            self._kept_removal = weakref.finalize(
                self, shutil.rmtree, self._kept, ignore_errors=True
            )
        self._worker = WorkerProcess(self._device, self._injected_statuses, self._kept)
        self.worker_starts += 1
        return self._worker

    def _replace_worker(self) -> None:
        if self._worker is not None:
            self._worker.kill()
        # Start the replacement now: it opens the device while the caller goes on.
        self._start_worker()

    def _failure(
        self,
        item: RunInput,
        kind: ErrorKind,
        message: str,
        code: int | None = None,
        dated: tuple[float | None, float | None] | None = None,
    ) -> RunResult:
        """A failed result; ``dated`` is (start, end) of what failed, else it
        is dated when the failure was seen."""
        program = item.build.program
        started_at, finished_at = dated if dated is not None else (None, time.time())
        return RunResult(
            program_name=program.name,
            source_hash=program.source_hash,
            workload_key=item.workload.key,
            device_key=self._device.key,
            error_kind=kind,
            error_message=message,
            cl_error_code=code,
            statistic=self._config.statistic,
            clock=self._config.clock,
            started_at=started_at,
            finished_at=finished_at,
        )
