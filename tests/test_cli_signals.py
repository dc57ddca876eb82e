"""The ``laytune`` program under signals: Ctrl-C and SIGTERM at any moment stop a
tuning job with 130 / 143 and no traceback, keep every finished record and
leave no process; SIGKILL leaves no process either.

Each job is a real ``laytune tune`` process in a session of its own; signals
go to its process group, as a terminal sends Ctrl-C. The moments are random
and printed with any failure. A moment counts from when the program has
installed its handlers (its first line): before that, the interpreter is
still starting and the signal ends it the way it ends any Python program.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from laytune.records import Record
from tests import jobs

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform != "linux", reason="reads /proc to see the handlers"),
]

#: Random moments are drawn up to this many seconds after the handlers are in
#: place: start-up (imports, opening the device and the database, starting
#: the workers) takes about 3.7 s here, then a batch of 4 about 0.5 s.
WINDOW_S = 6.0


def _stop_at_random_moments(tmp_path: Path, signum: int, times: int) -> None:
    db = tmp_path / "signals.db"
    rng = random.Random()
    kept: dict[int, str] = {}
    for attempt in range(times):
        moment = rng.uniform(0.0, WINDOW_S)
        job = jobs.start_job(db)
        try:
            jobs.wait_until(lambda job=job: jobs.handlers_installed(job.pid), job, 60, 0.002)
            time.sleep(moment)
            started = time.monotonic()
            out, err = jobs.stop_group(job, signum)
            stopped_s = time.monotonic() - started
        finally:
            jobs.kill_all([job])
        where = f"attempt {attempt}, {signal.Signals(signum).name} at {moment:.2f} s"
        assert job.returncode == 128 + signum, f"{where}: exit {job.returncode}\n{err}"
        assert "Traceback" not in err and "Traceback" not in out, f"{where}:\n{err}"
        # The clean-up itself ends in time: the program's watchdog, which
        # exits anyway past cli.STOP_GRACE_S, must not be what ended it.
        assert "still stopping" not in err, f"{where}: the clean-up hung:\n{err}"
        assert stopped_s < 30, f"{where}: stopping took {stopped_s:.1f} s\n{err}"
        assert jobs.wait_for_session_end(job.pid, 10) == [], f"{where}: processes left"
        if not db.exists():  # stopped before it opened the database
            continue
        assert jobs.integrity(db) == "ok", where
        now = jobs.bodies(db)
        assert all(now.get(i) == body for i, body in kept.items()), f"{where}: records lost"
        for body in now.values():
            Record.from_json(body)  # every record reads back
        kept = now


def test_ctrl_c_on_the_process_group_at_random_moments_exits_130(tmp_path: Path) -> None:
    _stop_at_random_moments(tmp_path, signal.SIGINT, 6)


def test_sigterm_on_the_process_group_at_random_moments_exits_143(tmp_path: Path) -> None:
    _stop_at_random_moments(tmp_path, signal.SIGTERM, 4)


def test_a_job_killed_with_sigkill_leaves_no_process(tmp_path: Path) -> None:
    db = tmp_path / "killed.db"
    job = jobs.start_job(db, compile_all=True)  # its builder's workers run
    try:
        jobs.wait_until(lambda: jobs.record_count(db) >= 1, job, 180)
        workers = [jobs.describe(p) for p in jobs.session_processes(job.pid) if p.pid != job.pid]
        # the builder's loky workers, the measuring worker, the resource trackers
        assert any("loky.backend.popen_loky_posix" in w for w in workers), workers
        assert any("multiprocessing.spawn" in w for w in workers), workers
        job.send_signal(signal.SIGKILL)
        job.wait()
        left = jobs.wait_for_session_end(job.pid, 10)
    finally:
        jobs.kill_all([job])
    assert left == [], "processes of the killed job are still alive 10 s later:\n" + "\n".join(left)
    assert jobs.integrity(db) == "ok"
    for body in jobs.bodies(db).values():
        Record.from_json(body)


def test_an_interrupt_that_a_finalizer_swallows_is_delivered_again() -> None:
    """Python runs a signal handler wherever the main thread is; in a
    ``__del__`` (or a weak reference's callback) the KeyboardInterrupt it
    raises is ignored. The program's handlers deliver it again."""
    from laytune import cli

    signals = cli._StopSignals()
    previous = signals.install()
    previous_hook = sys.unraisablehook
    sys.unraisablehook = lambda u: signals.unraisable(u, previous_hook)
    dropped: list[str] = []

    class Finalized:
        def __del__(self) -> None:
            os.kill(os.getpid(), signal.SIGINT)  # the handler runs in here...
            dropped.append("ran")  # ...or at the latest on this line

    try:
        with pytest.raises(KeyboardInterrupt):
            Finalized()  # collected at once: the handler's exception is lost in __del__
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:  # where the interrupt arrives again
                pass
        assert signals.first == signal.SIGINT and not signals.lost
    finally:
        signals.cancel()  # installed, it would stop every later search in this process
        signals.restore_database_logs()
        sys.unraisablehook = previous_hook
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def test_an_interrupt_in_a_query_leaves_no_sqlalchemy_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Interrupted while fetching rows, SQLAlchemy drops the connection and
    logs, with a traceback, that closing the cursor failed. The interrupt
    silences its loggers; a command run in-process gives them back."""
    import logging

    from laytune import cli
    from laytune.records import open_database

    database = open_database(f"sqlite:///{tmp_path / 'quiet.db'}")
    pool = database._engine.pool.logger
    signals = cli._StopSignals()
    with pytest.raises(KeyboardInterrupt):
        signals.handle(signal.SIGINT, None)
    try:
        pool.error("Error closing cursor")
        assert caplog.records == []
        assert pool in signals.silenced and logging.getLogger("sqlalchemy") in signals.silenced
    finally:
        signals.restore_database_logs()
        database.close()
    pool.error("Error closing cursor")
    assert [r.getMessage() for r in caplog.records] == ["Error closing cursor"]


def test_a_clean_up_that_hangs_ends_past_the_grace_with_the_signals_status(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """Past its grace after the first signal, the program says where each
    thread waits and exits with that signal's status, whatever still runs."""
    from laytune import _stop

    exits: list[int] = []
    monkeypatch.setattr(_stop, "exit_now", exits.append)
    signals = _stop.StopSignals(grace_s=0.2)
    with pytest.raises(KeyboardInterrupt):
        signals.handle(signal.SIGTERM, None)
    try:
        hung = threading.Event()
        hung.wait(2)  # the clean-up that never ends; the watchdog fires meanwhile
        assert exits == [_stop.EXIT_TERMINATED]
        err = capfd.readouterr().err
        assert "still stopping 0.2 s after SIGTERM; exiting now" in err
        assert "test_a_clean_up_that_hangs" in err  # the main thread's stack, at hung.wait
        if sys.platform == "linux":  # and every thread as the kernel sees it, C threads too
            assert f"Threads of process {os.getpid()} (id, name, state" in err
            assert f"\n  {threading.get_native_id()} (main) " in err
    finally:
        signals.cancel()
        signals.restore_database_logs()


def test_a_command_run_in_process_has_no_watchdog(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Only the program exits on its own past the grace: a command run
    in-process (tests, embedding) is never ended by a timer."""
    from laytune import cli

    # A database that does not exist, whatever the working directory holds.
    monkeypatch.setenv("LAYTUNE_DB", f"sqlite:///{tmp_path / 'none.db'}")

    made: list[cli._StopSignals] = []

    class Recorded(cli._StopSignals):
        def __init__(self, grace_s: float | None = None) -> None:
            super().__init__(grace_s)
            made.append(self)

    monkeypatch.setattr(cli, "_StopSignals", Recorded)
    assert cli.main(["workloads"]) == cli.EXIT_NO_RESULT
    assert [m.grace_s for m in made] == [None]


def test_a_stop_that_an_import_turns_into_another_error_still_ends_quietly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C while numpy loads raises KeyboardInterrupt inside its C import,
    which numpy re-raises as an ImportError: a stop, not a crash (seen once
    in 20 random stops, with a traceback on stderr)."""
    import laytune.cli as cli

    def stopped_inside_an_import(argv: object, signals: object) -> int:
        signals.first = signal.SIGINT  # type: ignore[attr-defined]
        raise ImportError('PyCapsule_Import could not import module "datetime"')

    monkeypatch.setattr(cli, "_run", stopped_inside_an_import)
    assert cli.main(["records"]) == 130
    err = capsys.readouterr().err
    assert err.strip() == "laytune: interrupted"


def test_an_error_without_a_stop_still_escapes(monkeypatch: pytest.MonkeyPatch) -> None:
    import laytune.cli as cli

    def broken(argv: object, signals: object) -> int:
        raise ImportError("a real import error")

    monkeypatch.setattr(cli, "_run", broken)
    with pytest.raises(ImportError, match="a real import error"):
        cli.main(["records"])


def test_a_stop_during_a_worker_start_is_raised_when_the_start_ends() -> None:
    """Python runs the program's handler in the main thread even where the
    signal is blocked there: another thread takes it, and the handler runs
    at the main thread's next bytecode, as called here. Halfway through a
    worker's start that left the child reading an empty pipe (an EOFError
    traceback); the handler now holds its KeyboardInterrupt until the start
    is over."""
    from laytune import cli
    from laytune.runners._lifeline import spawning

    signals = cli._StopSignals()
    previous = signals.install()
    reached: list[str] = []
    try:
        with pytest.raises(KeyboardInterrupt), spawning():
            signals.handle(signal.SIGTERM, None)
            reached.append("the start went on")
        assert reached == ["the start went on"]
        assert signals.first == signal.SIGTERM and not signals.deferred
        with pytest.raises(KeyboardInterrupt):  # outside a start it raises at once
            signals.lost = True  # (as for a first signal that a finalizer swallowed)
            signals.handle(signal.SIGTERM, None)
    finally:
        signals.cancel()
        signals.restore_database_logs()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
