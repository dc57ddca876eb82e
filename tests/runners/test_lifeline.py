"""Worker processes ignore stop signals from their start and die with their owner.

The owner in these tests is a small Python process of its own, so that it can
be killed with SIGKILL without taking the test with it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from laytune.runners._lifeline import STOP_SIGNALS, spawning

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc for signal masks")


def _mask(pid: int, field: str) -> set[int]:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                bits = int(line.split()[1], 16)
                return {n for n in range(1, 65) if bits & (1 << (n - 1))}
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def test_a_process_started_while_spawning_starts_with_stop_signals_blocked() -> None:
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    with spawning():
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before  # restored here
        assert _mask(child.pid, "SigBlk") >= STOP_SIGNALS
        child.send_signal(signal.SIGINT)
        time.sleep(0.3)
        assert child.poll() is None  # held, not delivered: no KeyboardInterrupt
    finally:
        child.kill()
        child.wait()


# An owner that starts one worker, which follows it (optionally without the
# kernel's help), says the worker's pid once the worker is ready, then waits.
OWNER = textwrap.dedent(
    """
    import os, subprocess, sys, time
    from laytune.runners._lifeline import spawning
    worker = '''
    import os, sys, time
    import laytune.runners._lifeline as lifeline
    if sys.argv[1] == "portable":
        lifeline._ask_kernel_for_death_signal = lambda: None
    lifeline.follow_owner(int(sys.argv[2]))
    print("ready", flush=True)
    time.sleep(120)
    '''
    with spawning():
        child = subprocess.Popen(
            [sys.executable, "-c", worker, sys.argv[1], str(os.getpid())],
            stdout=subprocess.PIPE, text=True,
        )
    assert child.stdout.readline() == "ready\\n"
    print(child.pid, flush=True)
    time.sleep(120)
    """
)


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE  # a zombie waits for its reaper
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("how", ["linux", "portable"])
def test_a_worker_ignores_stop_signals_and_dies_with_its_owner(how: str) -> None:
    owner = subprocess.Popen([sys.executable, "-c", OWNER, how], stdout=subprocess.PIPE, text=True)
    worker = None
    try:
        worker = psutil.Process(int(owner.stdout.readline()))  # type: ignore[union-attr]
        assert _mask(worker.pid, "SigIgn") >= STOP_SIGNALS
        assert not STOP_SIGNALS & _mask(worker.pid, "SigBlk")
        for signum in STOP_SIGNALS:
            os.kill(worker.pid, signum)
        time.sleep(0.3)
        assert worker.is_running()
        owner.kill()
        owner.wait()
        start = time.monotonic()
        while _alive(worker) and time.monotonic() - start < 10:
            time.sleep(0.02)
        print(f"\n{how}: the worker ended {time.monotonic() - start:.2f} s after its owner")
        assert not _alive(worker), "the worker outlived its owner by 10 s"
    finally:
        owner.kill()
        owner.wait()
        if worker is not None and _alive(worker):
            worker.kill()
