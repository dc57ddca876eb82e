"""The runner's measuring process and the parent's handle on it.

The worker is started with the ``spawn`` start method (a fresh interpreter,
never a fork of a process that may have initialised OpenCL). Messages in both
directions are cloudpickle bytes over a pipe; the parent waits for a reply by
blocking on the pipe and the process sentinel together, with a deadline, so a
hang ends in a kill and a crash is seen as soon as the process dies.
"""

from __future__ import annotations

import multiprocessing
import pickle
import signal
import time
import traceback
from collections import OrderedDict
from multiprocessing.connection import Connection, wait
from typing import Any

import cloudpickle

from laytune.runners._devices import Device

__all__ = ["WorkerDied", "WorkerProcess", "WorkerTimeout"]

# Workloads whose inputs and references a worker keeps (least recently used goes first).
_WORKLOAD_CACHE_SIZE = 8


class WorkerTimeout(Exception):
    """The worker did not answer within its deadline (it has been killed)."""


class WorkerDied(Exception):
    """The worker process ended without answering."""

    def __init__(self, exitcode: int | None) -> None:
        self.exitcode = exitcode
        super().__init__(describe_exit(exitcode))


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
    """One spawned measuring process bound to one device."""

    def __init__(self, device: Device) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child_conn = context.Pipe(duplex=True)
        self.process = context.Process(
            target=worker_main, args=(child_conn, device), name="laytune-runner", daemon=True
        )
        self.process.start()
        child_conn.close()
        self.ready = False
        self.prepared: set[str] = set()

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def wait_ready(self, time_limit_s: float) -> None:
        """Block until the worker has opened its device; raises on failure."""
        if self.ready:
            return
        reply = self._receive(time.monotonic() + time_limit_s)
        if reply[0] != "ready":
            self.kill()
            raise RuntimeError(str(reply[1]))
        self.ready = True

    def call(self, message: tuple[Any, ...], time_limit_s: float) -> tuple[Any, ...]:
        """Send one request and return its reply, or raise WorkerTimeout / WorkerDied."""
        try:
            self._conn.send_bytes(cloudpickle.dumps(message))
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.process.join(timeout=5)
            raise WorkerDied(self.process.exitcode) from None
        return self._receive(time.monotonic() + time_limit_s)

    def _receive(self, deadline: float) -> tuple[Any, ...]:
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
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=10)
        self._conn.close()

    def close(self, time_limit_s: float = 5.0) -> None:
        """Ask the worker to stop; kill it if it does not within the limit."""
        if self.process.is_alive():
            try:
                self._conn.send_bytes(cloudpickle.dumps(("close",)))
                self.process.join(timeout=time_limit_s)
            except (BrokenPipeError, ConnectionResetError, OSError):
                pass
        self.kill()


def worker_main(conn: Connection, device: Device) -> None:
    """Entry point of the measuring process: serve requests until told to stop."""
    from laytune.runners._measure import DeviceSession, PreparedWorkload, measure_candidate
    from laytune.runners._workload import input_seed

    def reply(*message: Any) -> None:
        conn.send_bytes(cloudpickle.dumps(message))

    try:
        session = DeviceSession(device)
    except Exception as exc:  # any failure to open the device ends this worker
        reply("error", f"opening {device} failed: {type(exc).__name__}: {exc}")
        return
    reply("ready", device.key)

    workloads: OrderedDict[str, PreparedWorkload] = OrderedDict()
    while True:
        try:
            message = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        op = message[0]
        if op == "close":
            return
        if op == "prepare":
            _, key, workload, base_seed = message
            try:
                inputs = dict(workload.make_inputs(input_seed(base_seed, key)))
                references = dict(workload.reference(inputs))
                reduction_length = int(getattr(workload, "reduction_length", 1))
            except Exception:
                reply("failed", f"preparing workload {key!r} raised:\n{traceback.format_exc()}")
                continue
            workloads[key] = PreparedWorkload(key, inputs, references, reduction_length)
            workloads.move_to_end(key)
            while len(workloads) > _WORKLOAD_CACHE_SIZE:
                workloads.popitem(last=False)
            reply("prepared", key)
        elif op == "measure":
            _, program, binary, key, config = message
            if key not in workloads:
                reply("unprepared", key)
                continue
            workloads.move_to_end(key)
            try:
                result = measure_candidate(session, program, binary, workloads[key], config)
            except Exception:
                reply("failed", f"measuring {program.name!r} raised:\n{traceback.format_exc()}")
                continue
            reply("result", result)
        else:
            reply("failed", f"unknown request {op!r}")
