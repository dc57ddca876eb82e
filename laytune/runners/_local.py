"""The builder and runner a job on this machine uses when it is given none.

Starting them costs about a second of CPU per process (the imports, the
device's context, the compiler's first load): a build worker per core and
the measuring worker, for every job. A job that ends normally therefore
leaves them warm for :func:`keep_seconds`, and the next job of this process
on the same device, under the same measurement settings, takes them as they
are: a notebook or a script tuning several workloads in turn pays the start
once. Kept workers are closed when that time passes unused, when a job
wants other ones, by :func:`release_workers`, and at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from laytune.exceptions import ConfigError
from laytune.runners._cache import build_cache_dir
from laytune.runners._config import MeasureConfig
from laytune.runners._devices import Device

TYPE_CHECKING = False
if TYPE_CHECKING:  # the pools (loky among them) load with the first job, not
    # with the laytune program, which sets how long workers are kept before any command
    from laytune.runners._builder import Builder
    from laytune.runners._runner import Runner

__all__ = ["keep_seconds", "keep_workers", "local_workers", "release_workers"]

#: The environment variable that sets :func:`keep_seconds` (0: close at once).
KEEP_ENV = "LAYTUNE_KEEP_WORKERS_S"
DEFAULT_KEEP_S = 30.0
#: Variables a worker reads when it starts (the OpenCL loader and runtimes,
#: laytune's own, Python's): workers started under other values are not reused.
_WORKER_ENV_PREFIXES = ("LAYTUNE_", "OCL_", "POCL_", "PYOPENCL_", "CL_", "PYTHON")

_set_keep_s: float | None = None


def keep_seconds() -> float:
    """How long a finished job's workers wait for the next job of this
    process: :func:`keep_workers`'s value, else ``LAYTUNE_KEEP_WORKERS_S``,
    else 30 s. 0 closes them at the end of each job."""
    if _set_keep_s is not None:
        return _set_keep_s
    text = os.environ.get(KEEP_ENV, "").strip()
    if not text:
        return DEFAULT_KEEP_S
    try:
        seconds = float(text)
    except ValueError:
        raise ConfigError(f"{KEEP_ENV} must be a number of seconds, got {text!r}") from None
    if not seconds >= 0:
        raise ConfigError(f"{KEEP_ENV} must be 0 or more seconds, got {text!r}")
    return seconds


def keep_workers(seconds: float | None) -> None:
    """Keep a finished job's workers ``seconds`` for the next job of this
    process (0: close them at the end of each job; None: back to
    ``LAYTUNE_KEEP_WORKERS_S`` or the default). Workers kept now are closed
    when the new time is 0."""
    global _set_keep_s
    if seconds is not None and not seconds >= 0:
        raise ConfigError(f"keep_workers takes 0 or more seconds or None, got {seconds!r}")
    _set_keep_s = None if seconds is None else float(seconds)
    if keep_seconds() == 0:
        release_workers()


@dataclass
class _Kept:
    key: tuple[object, ...]
    builder: Builder
    runner: Runner
    timer: threading.Timer
    pid: int  # a child forked since holds the parent's workers, not its own

    def close(self) -> None:
        self.timer.cancel()
        _close(self.builder, self.runner)


_lock = threading.Lock()
_kept: _Kept | None = None


def _key(device: Device, measure: MeasureConfig | None) -> tuple[object, ...]:
    """What a kept pair must share with a job that takes it: the device, the
    measurement settings, the binary cache, and what the workers were started
    under (the module path, for the workloads they unpickle, and the
    environment they read)."""
    environment = tuple(
        sorted((k, v) for k, v in os.environ.items() if k.startswith(_WORKER_ENV_PREFIXES))
    )
    return (device.key, measure or MeasureConfig(), build_cache_dir(), tuple(sys.path), environment)


def _close(builder: Builder, runner: Runner) -> None:
    try:
        runner.close()
    finally:
        builder.close()


def _swap(kept: _Kept | None) -> _Kept | None:
    """Keep ``kept`` instead of what was kept; the latter, if this process
    kept it (a forked child's are its parent's: not its to use or close)."""
    global _kept
    with _lock:
        previous, _kept = _kept, kept
    return previous if previous is not None and previous.pid == os.getpid() else None


def _take(key: tuple[object, ...]) -> tuple[Builder, Runner] | None:
    kept = _swap(None)
    if kept is not None and kept.key == key:
        kept.timer.cancel()
        return kept.builder, kept.runner
    if kept is not None:  # a job wants other ones
        kept.close()
    return None


def _expire(kept: _Kept) -> None:
    global _kept
    with _lock:
        if _kept is not kept:  # taken or released meanwhile
            return
        _kept = None
    kept.close()


def _keep(key: tuple[object, ...], builder: Builder, runner: Runner, seconds: float) -> None:
    timer = threading.Timer(seconds, lambda: _expire(kept))
    timer.daemon = True  # an idle pool never holds up the interpreter's exit
    timer.name = "laytune-keep-workers"
    kept = _Kept(key, builder, runner, timer, os.getpid())
    previous = _swap(kept)
    if previous is not None:
        previous.close()
    # registered here, once the pools exist, so that it runs at exit before
    # multiprocessing's own handler, which joins every child process: atexit
    # runs the last registered first, and registered when this module was
    # imported (before the pools imported multiprocessing), a script ending
    # with workers kept waited for the timer (30 s) in that join
    atexit.unregister(release_workers)
    atexit.register(release_workers)
    timer.start()


def release_workers() -> None:
    """Close the workers that finished jobs left warm, now (also at exit:
    :func:`_keep` registers it)."""
    kept = _swap(None)
    if kept is not None:
        kept.close()


@contextlib.contextmanager
def local_workers(
    device: Device, measure: MeasureConfig | None = None
) -> Iterator[tuple[Builder, Runner]]:
    """A :class:`Builder` keeping its binaries in :func:`build_cache_dir` and
    a :class:`Runner` measuring under ``measure``, both for ``device``: jobs
    given them in turn start their workers once (each starts its processes
    at its first use). Warm ones that an earlier job of this process left
    are taken when they match. Left normally, the block keeps them warm for
    :func:`keep_seconds`; left by an exception (Ctrl-C included), it closes
    them."""
    seconds = keep_seconds()  # a bad setting says so before anything starts
    key = _key(device, measure)
    pair = _take(key)
    if pair is None:
        from laytune.runners._builder import Builder
        from laytune.runners._runner import Runner

        pair = Builder(device, cache_dir=build_cache_dir()), Runner(device, measure)
    builder, runner = pair
    try:
        yield builder, runner
    except BaseException:
        _close(builder, runner)
        raise
    if seconds > 0:
        _keep(key, builder, runner, seconds)
    else:
        _close(builder, runner)
