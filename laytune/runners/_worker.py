"""The runner's measuring process and the parent's handle on it.

The worker is started with the ``spawn`` start method (a fresh interpreter,
never a fork of a process that may have initialised OpenCL). Messages in both
directions are pickle bytes over a pipe; user objects (workloads, programs),
which may be defined in ``__main__`` or a notebook, are cloudpickled on their
own first. The parent waits for a reply by blocking on the pipe and the
process sentinel together, with a deadline, so a hang ends in a kill and a
crash is seen as soon as the process dies.

Protocol. The parent sends a whole batch in one message::

    ("batch", config, {workload key: cloudpickled workload}, [(index, cloudpickled item)])

where an item is ``(program, binary, workload key, abandon_above_s)``. The
worker measures the items in order and answers each one as soon as it is
done, without waiting for the parent: ``("result", index, RunResult)`` or
``("failed", index, message)``. Before making a workload's inputs and
reference it sends ``("preparing", index)`` and after it ``("prepared",
index)``, so the parent knows which time limit runs. Between the steps of
a candidate (its verification, each launch group it times) it sends
``("alive", index)``, at most four times per ``time_limit_s``: the limit
bounds each step, not the whole candidate, so a large tensor's many long
launches are not a hang. After a result whose device was lost the worker
stops: its context is no longer trusted.

A workload's reference is computed once per runner, not once per worker: the
first worker to make it writes it to the runner's folder of kept references
(``kept``, one ``.npy`` per output), and a worker started after a hang or a
crash maps it from there instead of computing it again (a 4096^3 matmul's
reference takes seconds on one BLAS thread). Inputs are made again from
their seed, which costs a fraction of that.

The worker ignores SIGINT and SIGTERM from its start and dies with the process
that started it (:mod:`laytune.runners._lifeline`).
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import pickle
import re
import shutil
import signal
import sys
import tempfile
import time
import traceback
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import replace
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

import numpy as np

from laytune.exceptions import WorkerError, WorkerStartError
from laytune.runners._devices import Device
from laytune.runners._lifeline import follow_owner, spawning

__all__ = [
    "KEPT_PREFIX",
    "WorkerDied",
    "WorkerProcess",
    "WorkerTimeout",
    "keep_references",
    "kept_references",
    "new_kept_folder",
    "sweep_orphan_kept_folders",
]

# Workloads whose inputs and references a worker keeps (least recently used goes first).
_WORKLOAD_CACHE_SIZE = 8


class WorkerTimeout(Exception):
    """The worker did not answer within its deadline (it has been killed)."""


class WorkerDied(Exception):
    """The worker process ended without answering."""

    def __init__(self, exitcode: int | None) -> None:
        self.exitcode = exitcode
        super().__init__(describe_exit(exitcode))


def main_module_hint() -> str:
    """Why a worker may die while it starts, from the parent's main module:
    multiprocessing's ``spawn`` runs the main script again in the child."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path:  # an interactive session or ``python -c``: nothing is run again
        return ""
    spawn = "workers start with multiprocessing's 'spawn', which runs the main script again"
    if not os.path.isfile(path):
        return f"{spawn}, and {path!r} is not a file: run laytune from a script file"
    return (
        f"{spawn} ({path}): a script must call laytune under "
        f'`if __name__ == "__main__":` (the worker\'s traceback is above)'
    )


def refuse_while_a_worker_starts(what: str) -> None:
    """Raise :class:`WorkerStartError` when this process is a worker that
    multiprocessing's ``spawn`` is still starting: it is running the parent's
    main script again, which calls ``what`` outside ``if __name__ ==
    "__main__":``. Stopping here, before the job builds its space and starts
    workers of its own, ends the child in a second; the parent then says why
    (:func:`main_module_hint`). An unguarded script took 20 s to fail so."""
    import multiprocessing

    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise WorkerStartError(
            f"{what} was called while this worker process starts: "
            "multiprocessing's 'spawn' runs the main script again in each worker, "
            'so a script must call laytune under `if __name__ == "__main__":`'
        )


def describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "the worker process stopped answering"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"the worker process was killed by {name}"
    return f"the worker process exited with code {exitcode}"


class WorkerProcess:
    """One spawned measuring process bound to one device.

    ``injected_statuses`` is handed to the worker's
    :class:`~laytune.runners._measure.DeviceSession` (tests only).
    """

    def __init__(
        self,
        device: Device,
        injected_statuses: Mapping[str, int] | None = None,
        kept: str | None = None,
    ) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child_conn = context.Pipe(duplex=True)
        self.process = context.Process(
            target=worker_main,
            args=(child_conn, device, dict(injected_statuses or {}), os.getpid(), kept),
            name="laytune-runner",
            daemon=True,
        )
        with spawning():
            self.process.start()
        child_conn.close()
        self.ready = False
        # A handle dropped without kill or close (its runner was never
        # closed) takes its process along, not at the owner's exit only.
        self._reaper = weakref.finalize(self, _end_process, self.process)
        self._reaper.atexit = False  # at exit the process dies with its owner

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def wait_ready(self, time_limit_s: float) -> None:
        """Block until the worker has opened its device; raises on failure."""
        if self.ready:
            return
        reply = self.receive(time.monotonic() + time_limit_s)
        if reply[0] != "ready":
            self.kill()
            raise WorkerError(str(reply[1]))
        self.ready = True

    def send(self, message: tuple[Any, ...]) -> None:
        """Send one message (plain pickle: its user objects are already bytes)."""
        try:
            self._conn.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.process.join(timeout=5)
            raise WorkerDied(self.process.exitcode) from None

    def receive(self, deadline: float) -> tuple[Any, ...]:
        """The next reply, or WorkerTimeout (after killing the worker) past
        ``deadline`` (``time.monotonic()``), or WorkerDied."""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise WorkerTimeout()
            ready = wait([self._conn, self.process.sentinel], timeout=remaining)
            if self._conn in ready:
                try:
                    return pickle.loads(self._conn.recv_bytes())
                except (EOFError, OSError):
                    self.process.join(timeout=5)
                    raise WorkerDied(self.process.exitcode) from None
            if self.process.sentinel in ready:
                self.process.join(timeout=5)
                raise WorkerDied(self.process.exitcode)

    def kill(self) -> None:
        self._reaper.detach()
        _end_process(self.process)
        self._conn.close()

    def close(self, time_limit_s: float = 5.0) -> None:
        """Ask the worker to stop; kill it if it does not within the limit."""
        if self.process.is_alive():
            try:
                self._conn.send_bytes(pickle.dumps(("close",)))
                self.process.join(timeout=time_limit_s)
            except (BrokenPipeError, ConnectionResetError, OSError):
                pass
        self.kill()


def _end_process(process: multiprocessing.process.BaseProcess) -> None:
    if process.is_alive():
        process.kill()
    process.join(timeout=10)


def one_blas_thread() -> None:
    """Limit numpy's BLAS in this process to one thread, for good.

    The measuring worker computes each workload's reference with numpy (a
    matmul's is a BLAS call) right before it times candidates. OpenBLAS's
    threads spin on their cores for a while after each call, and on a CPU
    device those are the cores the timed kernel runs on: a 512^3 matmul that
    ran 0.67 ms in a tune measured 1.27 ms when timed right after its
    reference, and 0.83 with one BLAS thread. A reference on one thread takes
    longer, once per workload."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")


#: The temporary folders of kept references are named for the process that owns them.
KEPT_PREFIX = "laytune-references-"


def new_kept_folder() -> str:
    """A fresh folder for one runner's kept references, named for this
    process (``laytune-references-<pid>-...``). Its runner removes it on
    ``close`` or when collected; a process killed outright cannot, so the
    folders of processes that no longer run are removed here first."""
    sweep_orphan_kept_folders()
    return tempfile.mkdtemp(prefix=f"{KEPT_PREFIX}{os.getpid()}-")


def sweep_orphan_kept_folders(parent: str | None = None) -> list[str]:
    """Remove the kept-reference folders under ``parent`` (the temporary
    directory by default) whose owning process has ended; returns their paths.
    A folder of a live process, of another user, or not named by a pid is left."""
    removed = []
    pattern = re.compile(re.escape(KEPT_PREFIX) + r"(\d+)-")
    folder = Path(parent if parent is not None else tempfile.gettempdir())
    try:
        entries = list(folder.glob(KEPT_PREFIX + "*"))
    except OSError:
        return removed
    for entry in entries:
        match = pattern.match(entry.name)
        if match is None or _process_runs(int(match.group(1))):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        if not entry.exists():
            removed.append(str(entry))
    return removed


def _process_runs(pid: int) -> bool:
    if pid <= 0 or os.name == "nt":  # Windows' os.kill would end the process
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's process (PermissionError), or we cannot tell
    return True


def _kept_folder(kept: str, key: str, seed: int) -> Path:
    digest = hashlib.sha1(f"{key}\0{seed}".encode()).hexdigest()[:20]
    return Path(kept) / digest


def kept_references(kept: str | None, key: str, seed: int) -> dict[str, np.ndarray] | None:
    """The references of workload ``key`` (inputs from ``seed``) that a worker
    of the same runner kept, mapped read-only from their files; None when
    none did (or ``kept`` is None)."""
    if kept is None:
        return None
    folder = _kept_folder(kept, key, seed)
    if not folder.is_dir():
        return None
    names = (folder / "names").read_text().splitlines()
    return {
        name: np.load(folder / f"{k}.npy", mmap_mode="r", allow_pickle=False)
        for k, name in enumerate(names)
    }


def keep_references(kept: str | None, key: str, seed: int, references: Mapping[str, Any]) -> None:
    """Write ``references`` for the runner's later workers (whole: a folder
    written aside, then renamed into place). Nothing is kept where the disk
    refuses; a later worker then computes them again."""
    if kept is None:
        return
    folder = _kept_folder(kept, key, seed)
    if folder.exists():
        return
    scratch = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=kept))
    try:
        for k, array in enumerate(references.values()):
            np.save(scratch / f"{k}.npy", np.asarray(array), allow_pickle=False)
        (scratch / "names").write_text("\n".join(references))
        os.replace(scratch, folder)
    except OSError:
        shutil.rmtree(scratch, ignore_errors=True)


def worker_main(
    conn: Connection,
    device: Device,
    injected_statuses: dict[str, int],
    owner_pid: int,
    kept: str | None = None,
) -> None:
    """Entry point of the measuring process: serve batches until told to stop."""
    follow_owner(owner_pid)
    one_blas_thread()
    from laytune.runners._measure import DeviceSession, PreparedWorkload, measure_candidate
    from laytune.runners._results import ErrorKind
    from laytune.runners._workload import aligned, input_seed

    def reply(*message: Any) -> None:
        conn.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))

    def heartbeat(index: int, time_limit_s: float) -> Callable[[], None]:
        """Tell the parent, at most four times per time limit, that candidate
        ``index`` is still making progress."""
        every = time_limit_s / 4
        last = time.monotonic()

        def beat() -> None:
            nonlocal last
            now = time.monotonic()
            if now - last >= every:
                last = now
                reply("alive", index)

        return beat

    try:
        session = DeviceSession(device, injected_statuses=injected_statuses)
    except Exception as exc:  # any failure to open the device ends this worker
        reply("error", f"opening {device} failed: {type(exc).__name__}: {exc}")
        return
    reply("ready", device.key)

    workloads: OrderedDict[str, PreparedWorkload] = OrderedDict()

    def prepare(key: str, blob: bytes, base_seed: int) -> str | None:
        """Make the inputs and reference of a workload; None, or why not."""
        try:
            workload = pickle.loads(blob)
            seed = input_seed(base_seed, key)
            # Aligned, so that a device buffer over an input is the array itself.
            inputs = {
                name: aligned(array) if isinstance(array, np.ndarray) else array
                for name, array in workload.make_inputs(seed).items()
            }
            references = kept_references(kept, key, seed)
            if references is None:
                references = dict(workload.reference(inputs))
                keep_references(kept, key, seed, references)
            reduction_length = int(getattr(workload, "reduction_length", 1))
        except Exception:
            return f"preparing workload {key!r} raised:\n{traceback.format_exc()}"
        workloads[key] = PreparedWorkload(key, inputs, references, reduction_length)
        while len(workloads) > _WORKLOAD_CACHE_SIZE:
            dropped, _ = workloads.popitem(last=False)
            session.drop_workload(dropped)
        return None

    while True:
        try:
            message = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        if message[0] == "close":
            return
        if message[0] != "batch":
            continue
        _, config, workload_blobs, items = message
        for index, blob in items:
            try:
                program, binary, key, abandon_above_s, timed_cold = pickle.loads(blob)
            except Exception:
                reply(
                    "failed", index, f"unpickling the candidate raised:\n{traceback.format_exc()}"
                )
                continue
            if key not in workloads:
                reply("preparing", index)
                why = prepare(key, workload_blobs[key], config.seed)
                if why is not None:
                    reply("failed", index, why)
                    continue
                reply("prepared", index)
            workloads.move_to_end(key)
            if workloads[key].timed_cold != timed_cold:  # the item's say, not the cached one's
                workloads[key] = replace(workloads[key], timed_cold=timed_cold)
            try:
                result = measure_candidate(
                    session,
                    program,
                    binary,
                    workloads[key],
                    config,
                    abandon_above_s,
                    beat=heartbeat(index, config.time_limit_s),
                )
            except Exception:
                reply(
                    "failed", index, f"measuring {program.name!r} raised:\n{traceback.format_exc()}"
                )
                continue
            reply("result", index, result)
            if result.error_kind is ErrorKind.DEVICE_LOST:
                return
