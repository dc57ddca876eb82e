"""Worker processes that never outlive their owner and leave signals to it.

The builders' and the runner's worker processes belong to the process that
started them (the owner). Two rules hold for them, whatever happens to the
owner:

- **Signals are the owner's.** Ctrl-C in a terminal, or ``kill`` on a
  process group, reaches every process of the group; a worker interrupted
  while it imports or unpickles a task breaks the pool or prints its own
  traceback. So :func:`spawning` blocks SIGINT and SIGTERM in the owner's
  calling thread while a worker is started: the blocked mask survives
  ``fork`` and ``exec``, so the worker's interpreter starts with both held
  (the way CPython starts its resource tracker, bpo-33613). Threads started
  inside the block keep the mask, so the workers that loky's executor
  manager thread starts later are covered as well. The worker's first act
  is :func:`follow_owner`, which ignores both signals, then unblocks them:
  what was sent to the group meanwhile is dropped, and the owner, which got
  it too, stops its workers itself.
- **Workers die with their owner.** :func:`follow_owner` asks Linux to
  SIGKILL the worker when its parent dies (``prctl(PR_SET_PDEATHSIG)``),
  and on every system starts a daemon thread that exits the process within
  :data:`POLL_S` seconds once ``getppid()`` no longer names the owner (the
  worker was re-parented). A worker whose owner died before it got this far
  exits at once. Note that Linux's "parent" is the thread that started the
  worker: a worker started from a thread that ends is killed with it, so
  callers start workers from threads that live as long as their pool (the
  Builder's own thread, the thread that calls ``Runner.run``), and both
  start a fresh worker when one died while idle.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from multiprocessing import resource_tracker

from laytune._stop import deferred_stops

__all__ = ["POLL_S", "STOP_SIGNALS", "follow_owner", "spawning"]

#: The signals that stop a job: its owner handles them, workers ignore them.
STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})

#: How often the portable watcher looks at the worker's parent (seconds).
POLL_S = 0.5

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


@contextlib.contextmanager
def spawning() -> Iterator[None]:
    """Block SIGINT and SIGTERM in this thread while worker processes start.

    A signal that arrives meanwhile waits until the block ends (or goes to
    another thread), so the owner loses nothing; the program's handler,
    which Python runs in the main thread whichever thread took the signal,
    raises its KeyboardInterrupt when the block ends
    (:func:`laytune._stop.deferred_stops`), not halfway through a start.
    """
    if not hasattr(signal, "pthread_sigmask"):  # Windows: no masks, no groups to signal
        yield
        return
    # Python's resource tracker, which both pools need, unblocks SIGINT and
    # SIGTERM in the calling thread when it starts (its ensure_running ends
    # with SIG_UNBLOCK): start it, or check that it runs, before blocking.
    resource_tracker.ensure_running()
    # the mask keeps the signals from this thread, not the program's Python
    # handler: another thread takes them and the handler runs here all the same
    with deferred_stops():
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def follow_owner(owner_pid: int) -> None:
    """Make this worker process ignore SIGINT and SIGTERM and die with its
    owner (process id ``owner_pid``); call it first thing in the worker."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    if sys.platform.startswith("linux"):
        _ask_kernel_for_death_signal()
    if os.getppid() != owner_pid:  # the owner died before we got here
        os._exit(1)
    watcher = threading.Thread(
        target=_watch_owner, args=(owner_pid,), name="laytune-owner-watch", daemon=True
    )
    watcher.start()


def _ask_kernel_for_death_signal() -> None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # no libc or no prctl: the watcher still runs
        pass


def _watch_owner(owner_pid: int) -> None:
    while os.getppid() == owner_pid:
        time.sleep(POLL_S)
    os._exit(1)
