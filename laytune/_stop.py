"""How the ``laytune`` program stops: its answer to SIGINT and SIGTERM
(:class:`StopSignals`), the watchdog that ends a clean-up stuck past its
grace, and the reader of every thread as the kernel sees it
(:func:`native_threads`), which that watchdog prints."""

from __future__ import annotations

import _thread
import contextlib
import faulthandler
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_TERMINATED",
    "STOP_GRACE_S",
    "StopSignals",
    "checkpoint",
    "deferred_stops",
    "exit_now",
    "native_threads",
]

EXIT_INTERRUPTED, EXIT_TERMINATED = 128 + signal.SIGINT, 128 + signal.SIGTERM
EXIT_FOR_SIGNAL = {signal.SIGINT: EXIT_INTERRUPTED, signal.SIGTERM: EXIT_TERMINATED}
#: Seconds the clean-up after a stop signal may take before the program
#: exits anyway (see :class:`StopSignals`).
STOP_GRACE_S = 15.0


class StopSignals:
    """How a command answers SIGINT and SIGTERM.

    While the command runs, the first of them raises KeyboardInterrupt in the
    main thread (for SIGTERM too, so that every clean-up written for Ctrl-C
    runs: tuning gives back its candidates in flight and stops its workers,
    which ignore both signals). A second one during that clean-up exits at
    once: the workers die with this process, and the database holds what was
    committed. Once the command is done, a signal only sets the exit status.
    Whichever signal came first decides the status: 130 or 143.

    Python runs a handler wherever the main thread is, a finalizer or a weak
    reference's callback included, and ignores what those raise: a
    KeyboardInterrupt lost there reaches ``sys.unraisablehook``
    (:meth:`unraisable`), which delivers it again.

    With ``grace_s``, a program that is still running that long after the
    first signal (a clean-up stuck in a driver or a lock, or an exit that
    waits on a thread) writes where each of its threads is to stderr and
    exits with the signal's status: the database holds what was committed,
    and the workers die with the process.
    """

    def __init__(self, grace_s: float | None = None) -> None:
        self.first: int | None = None
        self.finishing = False
        self.lost = False  # the first signal's KeyboardInterrupt was swallowed
        self.silenced: list[logging.Logger] = []
        self.grace_s = grace_s
        # The watchdog thread starts now, not in the handler: a handler runs
        # between any two bytecodes of the main thread, maybe inside
        # threading's own locks, where starting a thread would deadlock.
        self.signalled = threading.Event()
        self.cancelled = False
        self.deferred = False  # a first signal held by deferred_stops
        if grace_s is not None:
            threading.Thread(target=self._watch, name="laytune-stop-watch", daemon=True).start()

    def install(self) -> dict[int, Any]:
        """Install the handlers and make these the signals that
        :func:`checkpoint` answers to; returns the previous handlers."""
        global _INSTALLED
        _INSTALLED = self
        return {signum: signal.signal(signum, self.handle) for signum in EXIT_FOR_SIGNAL}

    def pending(self) -> bool:
        """A stop signal came and the command is not yet finishing."""
        return self.first is not None and not self.finishing and not self.cancelled

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self.first is None or self.lost:
            first = self.first is None
            self.first = self.first or signum
            self.lost = False
            if first:  # a signal during set() is a second one: it exits below
                self.signalled.set()
            if not self.finishing:
                self.quiet_database_logs()
                if _DEFERRING:  # raised when the block ends (deferred_stops)
                    self.deferred = True
                    return
                raise KeyboardInterrupt
        elif not self.finishing:
            exit_now(self.status(EXIT_INTERRUPTED))

    def _watch(self) -> None:
        self.signalled.wait()
        if self.cancelled or self.grace_s is None or self.first is None:
            return
        time.sleep(self.grace_s)
        if not self.cancelled:
            self.overdue(self.first)

    def overdue(self, signum: int) -> None:
        """The clean-up outlived ``grace_s``: say where it waits, and exit."""
        name = signal.Signals(signum).name
        with contextlib.suppress(Exception):  # a closed or replaced stderr
            sys.stderr.write(
                f"laytune: still stopping {self.grace_s:g} s after {name}; exiting now "
                "(every committed record is kept). Where each thread was:\n"
            )
            sys.stderr.flush()
            faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
            sys.stderr.write(native_threads())
            sys.stderr.flush()
        exit_now(self.status(EXIT_INTERRUPTED))

    def cancel(self) -> None:
        """Stop the watchdog (a command run in-process is over)."""
        global _INSTALLED
        self.cancelled = True
        self.signalled.set()
        if _INSTALLED is self:
            _INSTALLED = None

    def unraisable(self, unraisable: Any, previous: Any) -> None:
        """Deliver again a KeyboardInterrupt of ours that a finalizer or a
        callback swallowed; hand anything else to ``previous``."""
        lost = unraisable.exc_type is not None and issubclass(
            unraisable.exc_type, KeyboardInterrupt
        )
        if lost and self.first is not None and not self.finishing:
            self.lost = True
            # Later, not from here: the main thread would run handle() before
            # this hook returns, and its exception would be lost again.
            later = threading.Timer(0.05, _thread.interrupt_main, (signal.SIGINT,))
            later.daemon = True
            later.start()
            return
        previous(unraisable)

    def status(self, code: int) -> int:
        return code if self.first is None else EXIT_FOR_SIGNAL[self.first]

    def quiet_database_logs(self) -> None:
        """Silence SQLAlchemy's loggers: an interrupt in the middle of a query
        makes it drop the connection and log, with a traceback, that closing
        the cursor then failed. That is the interrupt's doing, which the
        command reports itself; nothing committed is lost."""
        for name in list(logging.root.manager.loggerDict):
            if name.split(".")[0] != "sqlalchemy":
                continue
            logger = logging.getLogger(name)
            if not logger.disabled:
                logger.disabled = True
                self.silenced.append(logger)

    def restore_database_logs(self) -> None:
        """Undo :meth:`quiet_database_logs` (a command run in-process)."""
        for logger in self.silenced:
            logger.disabled = False
        self.silenced.clear()


#: The program's signals, once installed (see :func:`checkpoint`).
_INSTALLED: StopSignals | None = None


#: How deep the main thread is in :func:`deferred_stops` blocks.
_DEFERRING = 0


@contextlib.contextmanager
def deferred_stops() -> Iterator[None]:
    """Hold the KeyboardInterrupt of the program's first stop signal while
    the block runs in the main thread, and raise it when the block ends.

    Blocking SIGINT and SIGTERM in a thread (``pthread_sigmask``) does not
    keep Python's handler out of it: another thread takes the signal, and
    the handler runs in the main thread at its next bytecode. Inside
    ``multiprocessing``'s start of a worker that is between the child's
    spawn and the write of what the child reads first; the owner then
    exited, and the child, which ignores both signals, printed an EOFError
    traceback. Elsewhere, and without the program's handlers, it does
    nothing."""
    global _DEFERRING
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _DEFERRING += 1
    try:
        yield
    finally:
        _DEFERRING -= 1
    signals = _INSTALLED
    if not _DEFERRING and signals is not None and signals.deferred:
        signals.deferred = False
        if signals.pending():
            raise KeyboardInterrupt


def checkpoint() -> None:
    """Raise KeyboardInterrupt if a stop signal came and the work goes on.

    The first signal raises KeyboardInterrupt wherever the main thread is,
    and code that is not ours may swallow it (a library's bare ``except``,
    a C extension that clears the error): the search would then run on
    until the watchdog's grace ends it. The search's loops call this
    between steps, so a lost stop is honoured at the next one. Without the
    program's handlers (the Python API) it does nothing."""
    signals = _INSTALLED
    if signals is not None and signals.pending():
        raise KeyboardInterrupt


def native_threads(task_dir: str = "/proc/self/task") -> str:
    """Every thread of the process as the kernel sees it (Linux): id, name,
    state, the kernel function it sleeps in and its system call. Python's
    stacks leave out the driver's threads, and a thread that waits in C code
    before its Python frames exist or after they are gone."""
    try:
        tids = sorted(os.listdir(task_dir), key=int)
    except (OSError, ValueError):
        return ""
    lines = [f"\nThreads of process {os.getpid()} (id, name, state, kernel wait, system call):\n"]
    for tid in tids:
        fields = []
        for name in ("comm", "stat", "wchan", "syscall"):
            try:
                with open(f"{task_dir}/{tid}/{name}") as file:
                    text = file.read().strip()
            except OSError:
                text = "?"
            if name == "stat":  # "pid (comm) S ...": the state follows the name
                text = text.rpartition(")")[2].split()[0] if ")" in text else "?"
            elif name == "syscall":
                text = text.split()[0] if text else "?"
            fields.append(text or "-")
        main = " (main)" if tid == str(os.getpid()) else ""
        lines.append(f"  {tid}{main} {' '.join(fields)}\n")
    return "".join(lines)


def exit_now(status: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe, or a flush this signal cut
            stream.flush()
    os._exit(status)
