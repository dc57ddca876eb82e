"""Tuning jobs as separate processes, for the tests that signal, kill or starve them.

A job is the ``laytune`` program (``laytune tune ...``) started in a session
of its own, so that its process group can be signalled the way a terminal
does and every process it starts (builder and runner workers, the resource
trackers) can be found by its session id, also after the job has died.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]

#: A small job: a copy of 32 x 32 floats, a few milliseconds a candidate.
SMALL_JOB = ("tune", "copy", "--shape", "shape=32x32", "--batch", "4", "--no-warm-start")


def laytune_command() -> list[str]:
    """The installed ``laytune`` program beside this interpreter, else ``-m laytune``."""
    script = Path(sys.executable).with_name("laytune")
    return [str(script)] if script.exists() else [sys.executable, "-m", "laytune"]


def compiling_env() -> dict[str, str]:
    """This process's environment with laytune's binary cache turned off: a
    job started with it compiles every program, so its build workers start."""
    return {**os.environ, "LAYTUNE_BUILD_CACHE": "0"}


def start_job(
    db: Path,
    *args: str,
    trials: int = 500,
    preexec_fn: Callable[[], Any] | None = None,
    compile_all: bool = False,
) -> subprocess.Popen[str]:
    """``laytune tune`` on :data:`SMALL_JOB` (or ``args``) into the SQLite file
    ``db``, quiet, in a new session (its process group id is its pid);
    ``compile_all``: without the binary cache, so its builder's workers start."""
    command = [
        *laytune_command(),
        *(args or SMALL_JOB),
        "--trials",
        str(trials),
        "--quiet",
        "--db",
        f"sqlite:///{db}",
    ]
    return subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=preexec_fn,
        env=compiling_env() if compile_all else None,
    )


def session_processes(session: int) -> list[psutil.Process]:
    """The live processes of a session (zombies are dead and left out)."""
    found = []
    for process in psutil.process_iter():
        try:
            if os.getsid(process.pid) == session and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (OSError, psutil.Error):
            continue
    return found


def wait_for_session_end(session: int, timeout_s: float) -> list[str]:
    """Wait until no process of ``session`` lives; the command lines of those
    still alive after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while (alive := session_processes(session)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [describe(process) for process in alive]


#: Python's and loky's resource trackers: they read a pipe that this process
#: holds, so they end with it, and nothing else can end them earlier.
TRACKERS = ("multiprocessing.resource_tracker", "loky.backend.resource_tracker")


def live_children() -> dict[int, str]:
    """This process's live descendants but the resource trackers: pid -> command line."""
    found = {}
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            command = " ".join(child.cmdline())
        except psutil.NoSuchProcess:
            continue
        if not any(tracker in command for tracker in TRACKERS):
            found[child.pid] = command
    return found


def describe(process: psutil.Process) -> str:
    try:
        return f"{process.pid}: {' '.join(process.cmdline())[:160]}"
    except psutil.Error:
        return f"{process.pid}: (gone)"


def handlers_installed(pid: int) -> bool:
    """Whether the process catches SIGTERM, which the ``laytune`` program does
    from its first line on (Python itself leaves SIGTERM alone)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    except OSError:
        pass
    return False


def wait_until(
    condition: Callable[[], bool],
    job: subprocess.Popen[str],
    timeout_s: float,
    poll_s: float = 0.05,
) -> None:
    """Poll ``condition`` every ``poll_s`` (not faster: the job shares the
    cores with this loop) until it holds; raise if the job ends first."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if job.poll() is not None:
            raise AssertionError(f"the job ended ({job.returncode}): {job.stderr.read()}")  # type: ignore[union-attr]
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting after {timeout_s} s")
        time.sleep(poll_s)


def record_count(db: Path) -> int:
    """Records committed to ``db`` so far (0 before the tables exist)."""
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as conn:
            return int(conn.execute("SELECT count(*) FROM laytune_records").fetchone()[0])
    except sqlite3.OperationalError:  # no file or no table yet
        return 0


def integrity(db: Path) -> str:
    with sqlite3.connect(db, timeout=30) as conn:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


def bodies(db: Path) -> dict[int, str]:
    """Record id -> the stored JSON body, read without laytune."""
    with sqlite3.connect(db, timeout=30) as conn:
        return dict(conn.execute("SELECT id, body FROM laytune_records").fetchall())


def stop_group(
    job: subprocess.Popen[str], signum: int, patience_s: float = 30.0
) -> tuple[str, str]:
    """Send ``signum`` to the job's process group; its (stdout, stderr).

    Past ``patience_s`` (longer than the program's own grace, past which it
    writes where its threads wait and exits), what the test saw is added to
    stderr: a job still running is killed; a job that exited while something
    of its session kept its pipes open names those processes.
    """
    os.killpg(job.pid, signum)
    try:
        return job.communicate(timeout=patience_s)
    except subprocess.TimeoutExpired:
        pass
    if job.poll() is None:
        note = f"[test] the job still ran {patience_s:g} s after the signal"
    else:
        note = f"[test] the job exited ({job.returncode}), but its pipes stayed open, held by:"
        note += "".join(f"\n  {describe(p)}" for p in session_processes(job.pid))
    kill_all([job])
    out, err = job.communicate(timeout=30)
    return out, f"{err}\n{note}"


def kill_all(jobs: Sequence[subprocess.Popen[str]]) -> None:
    """Clean-up for a test that failed half-way: SIGKILL every process of the
    jobs' sessions that still lives."""
    for job in jobs:
        for process in session_processes(job.pid):
            try:
                process.kill()
            except psutil.Error:
                continue
        if job.poll() is None:
            job.wait()


def ended_pid() -> int:
    """The process id of a process that has ended (an owner known to be dead)."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout)
