"""The two seams of the runners stage: a builder and a runner.

:class:`Builder` and :class:`Runner` (local worker processes) are one
implementation each; a remote builder or a runner that measures on another
host implements the same base, and the tuning loop takes either.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Self

from laytune.codegen import KernelProgram
from laytune.runners._devices import Device
from laytune.runners._results import BuildResult, RunInput, RunResult

__all__ = ["BaseBuilder", "BaseRunner"]


class _Background:
    """One background thread that runs a stage's batches in submission order."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None

    def submit(self, call: Any, *args: Any, **kwargs: Any) -> Future[Any]:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._name)
            return self._executor.submit(call, *args, **kwargs)

    def shutdown(self) -> None:
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)


class _Stage:
    """What both seams share: batches submitted to one background thread
    (created on first use, so implementations need not call a base
    ``__init__``), and closing as a context manager."""

    _thread_name = "laytune-stage"

    def _stage_thread(self) -> _Background:
        return self.__dict__.setdefault("_stage_background", _Background(self._thread_name))

    def close(self) -> None:
        """Wait for the batches submitted here; implementations release their workers too."""
        background = self.__dict__.pop("_stage_background", None)
        if background is not None:
            background.shutdown()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class BaseBuilder(_Stage, abc.ABC):
    """Compiles batches of :class:`~laytune.codegen.KernelProgram` for one device.

    Contract every implementation keeps:

    - ``build(batch)`` returns one :class:`BuildResult` per program, in batch
      order (an empty batch gives an empty list). Each result names
      ``device`` (``device_key``) and keeps its program.
    - A program's failure is data, never an exception: a compiler error is a
      result with error kind ``build`` and the build log, a build past the
      implementation's time limit ``timeout``, a build that takes its worker
      down ``crash``; the rest of the batch is still built. ``build`` raises
      only for an interrupt (``KeyboardInterrupt``) or a fault of the
      builder itself, never because of a program.
    - ``submit(batch)`` returns a future of what ``build(batch)`` returns, so
      the caller measures batch k while batch k+1 builds; batches submitted
      from one thread complete in submission order. The base runs them on one
      background thread; an implementation with its own queue overrides it.
    - Thread safety: ``build`` and ``submit`` may be called from several
      threads at once.
    - ``close()`` (or leaving a ``with`` block) releases the workers and may
      be called more than once. A batch submitted and not finished either
      finishes first or its future raises ``CancelledError`` (the base
      waits; :class:`Builder` stops it).
    """

    _thread_name = "laytune-build"

    @property
    @abc.abstractmethod
    def device(self) -> Device:
        """The device every program is built for."""

    @abc.abstractmethod
    def build(self, batch: Sequence[KernelProgram]) -> list[BuildResult]:
        """One result per program of ``batch``, in order (see the class contract)."""

    def submit(self, batch: Sequence[KernelProgram]) -> Future[list[BuildResult]]:
        """A future of ``build(batch)``."""
        return self._stage_thread().submit(self.build, list(batch))


class BaseRunner(_Stage, abc.ABC):
    """Measures batches of built candidates on one device, verified against
    each workload's reference.

    Contract every implementation keeps:

    - ``run(batch)`` returns one :class:`RunResult` per :class:`RunInput`, in
      batch order (an empty batch gives an empty list).
    - A candidate's failure is data, never an exception: a build that failed
      or was made for another device, a launch the device refuses, a wrong
      result, a hang past the time limit, a crashed worker or a lost device
      each give a result with its :class:`~laytune.runners.ErrorKind`, and
      the rest of the batch is still measured. ``run`` raises only for
      misuse (an invalid ``abandon_above_s``: ``ConfigError``), an
      interrupt (``KeyboardInterrupt``) or a fault of the runner itself,
      never because of a candidate.
    - ``abandon_above_s`` is the early-stop threshold of every input that
      does not set its own (``RunInput.abandon_above_s``); a candidate past
      it may come back ``abandoned`` after its first repeats.
    - Measurement is serial per device: candidates are timed one at a time,
      never beside each other. ``submit(batch)`` returns a future of
      ``run(batch)``; batches run in submission order.
    - Thread safety: none promised beyond ``submit``; call ``run`` from one
      thread at a time.
    - ``close()`` (or leaving a ``with`` block) stops the workers and may be
      called more than once. A batch submitted and not finished either
      finishes first or its future raises ``CancelledError`` (the base waits).
    """

    _thread_name = "laytune-run"

    @property
    @abc.abstractmethod
    def device(self) -> Device:
        """The device candidates are measured on; builds for another are refused."""

    @abc.abstractmethod
    def run(
        self, batch: Sequence[RunInput], *, abandon_above_s: float | None = None
    ) -> list[RunResult]:
        """One result per input of ``batch``, in order (see the class contract)."""

    def submit(
        self, batch: Sequence[RunInput], *, abandon_above_s: float | None = None
    ) -> Future[list[RunResult]]:
        """A future of ``run(batch, abandon_above_s=...)``."""
        return self._stage_thread().submit(self.run, list(batch), abandon_above_s=abandon_above_s)
