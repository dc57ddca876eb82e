"""Runner: measure a batch of built candidates in an isolated worker process."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from laytune.device_info import DeviceInfo
from laytune.runners._config import MeasureConfig
from laytune.runners._devices import Device, select_device
from laytune.runners._results import ErrorKind, RunInput, RunResult
from laytune.runners._worker import WorkerDied, WorkerProcess, WorkerTimeout

__all__ = ["Runner"]


class Runner:
    """Measures candidates one after another on one device, in a worker process.

    Contract:

    - ``run(batch)`` returns one :class:`RunResult` per input, in input
      order, and never raises for a candidate's failure: a failed build, a
      launch the device refuses, a wrong result, a hang past
      ``config.time_limit_s``, a crash of the worker process or a lost
      device each become a result with its :class:`ErrorKind`, and the rest
      of the batch is still measured.
    - Measurement is serial per device: one worker process, one candidate at
      a time. The worker is started with ``spawn`` on first use, keeps its
      context, and caches each workload's inputs and reference by key. After
      a timeout, a crash or a lost device it is killed and a fresh one is
      started in the background (the next candidate waits for it).
    - Inputs are made in the worker by ``workload.make_inputs(seed)`` with a
      seed fixed by ``config.seed`` and the workload key (see
      :class:`MeasureConfig`), so workloads and builds must pickle
      (cloudpickle: classes defined in ``__main__`` are fine).
    - Not thread-safe: call ``run`` from one thread at a time. ``close``
      (or leaving a ``with`` block) stops the worker.
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
        self._startup_failure: str | None = None
        self.worker_starts = 0

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

    def run(self, batch: Sequence[RunInput]) -> list[RunResult]:
        self._startup_failure = None
        return [self._run_one(item) for item in batch]

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- one candidate ------------------------------------------------------
    def _run_one(self, item: RunInput) -> RunResult:
        build = item.build
        workload_key = item.workload.key
        if not build.ok:
            return self._failure(
                item,
                build.error_kind if build.error_kind is not ErrorKind.NONE else ErrorKind.BUILD,
                build.error_message or "the program has no binary",
                build.cl_error_code,
            )
        if build.device_key != self._device.key:
            return self._failure(
                item,
                ErrorKind.RUN,
                f"program was built for device {build.device_key}, "
                f"this runner measures on {self._device.key}",
            )
        if self._startup_failure is not None:
            # Do not pay for a doomed start per candidate; the next batch tries again.
            return self._failure(item, ErrorKind.DEVICE_LOST, self._startup_failure)
        try:
            worker = self._ready_worker()
        except RuntimeError as exc:
            self._startup_failure = str(exc)
            return self._failure(item, ErrorKind.DEVICE_LOST, str(exc))

        config = self._config
        for _ in range(2):  # a second round only if the worker dropped the workload
            if workload_key not in worker.prepared:
                reply = self._call(
                    worker,
                    ("prepare", workload_key, item.workload, config.seed),
                    config.prepare_time_limit_s,
                    item,
                    "preparing the workload's inputs and reference",
                )
                if isinstance(reply, RunResult):
                    return reply
                if reply[0] != "prepared":
                    return self._failure(item, ErrorKind.RUN, str(reply[1]))
                worker.prepared.add(workload_key)
            reply = self._call(
                worker,
                ("measure", build.program, build.binary, workload_key, config),
                config.time_limit_s,
                item,
                "measuring",
            )
            if isinstance(reply, RunResult):
                return reply
            if reply[0] == "unprepared":
                worker.prepared.discard(workload_key)
                continue
            if reply[0] != "result":
                return self._failure(item, ErrorKind.RUN, str(reply[1]))
            result: RunResult = reply[1]
            if result.error_kind is ErrorKind.DEVICE_LOST:
                self._replace_worker()
            return result
        return self._failure(item, ErrorKind.RUN, "the worker kept dropping the workload")

    def _call(
        self,
        worker: WorkerProcess,
        message: tuple[Any, ...],
        time_limit_s: float,
        item: RunInput,
        doing: str,
    ) -> tuple[Any, ...] | RunResult:
        try:
            return worker.call(message, time_limit_s)
        except WorkerTimeout:
            self._replace_worker()
            return self._failure(
                item,
                ErrorKind.TIMEOUT,
                f"{doing} took longer than {time_limit_s:g} s; the worker was killed",
            )
        except WorkerDied as exc:
            self._replace_worker()
            return self._failure(item, ErrorKind.CRASH, f"{exc} while {doing}")

    def _ready_worker(self) -> WorkerProcess:
        worker = self._worker if self._worker is not None else self._start_worker()
        try:
            worker.wait_ready(self._startup_time_limit_s)
        except (WorkerTimeout, WorkerDied) as exc:
            self._worker = None
            raise RuntimeError(f"the measuring worker did not start: {exc}") from exc
        except RuntimeError:
            self._worker = None
            raise
        return worker

    def _start_worker(self) -> WorkerProcess:
        self._worker = WorkerProcess(self._device)
        self.worker_starts += 1
        return self._worker

    def _replace_worker(self) -> None:
        if self._worker is not None:
            self._worker.kill()
        # Start the replacement now: it opens the device while the caller goes on.
        self._start_worker()

    def _failure(
        self, item: RunInput, kind: ErrorKind, message: str, code: int | None = None
    ) -> RunResult:
        program = item.build.program
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
        )
