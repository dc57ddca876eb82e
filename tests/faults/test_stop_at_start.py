"""SIGINT and SIGTERM in the program's first milliseconds: 130 or 143, one
line, no traceback.

A signal sent after a fixed delay lands wherever the start-up happens to be
on a loaded machine, so here the program signals itself at exact moments of
its start-up instead: a ``sitecustomize`` module (which the interpreter runs
before the program) adds an audit hook that sends the signal when a given
module starts to load. ``laytune.cli`` and ``argparse`` load in the program's
first 50 ms (the command line and its imports, before the command line
installs its handlers); ``laytune.ops`` loads once the command line has taken
over, as the command begins.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests import jobs

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

_SITECUSTOMIZE = textwrap.dedent(
    """
    import os
    import sys

    _module = os.environ["STOP_WHEN_LOADING"]
    _signum = int(os.environ["STOP_WITH"])
    _sent = []


    def _stop(event, args):
        if event == "import" and args[0] == _module and not _sent:
            _sent.append(_signum)
            os.kill(os.getpid(), _signum)


    sys.addaudithook(_stop)
    """
)

SIGNALS = {
    "SIGINT": (signal.SIGINT, 130, "interrupted"),
    "SIGTERM": (signal.SIGTERM, 143, "terminated"),
}


def _small_job(
    tmp_path: Path, sitecustomize: str, db: Path, trials: int, **env: str
) -> subprocess.CompletedProcess[str]:
    """The program on :data:`jobs.SMALL_JOB` with ``sitecustomize`` loaded
    first and ``env`` added to its environment."""
    (tmp_path / "sitecustomize.py").write_text(sitecustomize)
    path = os.pathsep.join([str(tmp_path), str(jobs.ROOT)])
    options = ("--trials", str(trials), "--quiet", "--db", f"sqlite:///{db}")
    return subprocess.run(
        [*jobs.laytune_command(), *jobs.SMALL_JOB, *options],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": path, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("module", ["laytune.cli", "argparse", "laytune.ops"])
@pytest.mark.parametrize("name", list(SIGNALS))
def test_a_stop_while_the_program_starts_exits_with_its_status_and_one_line(
    name: str, module: str, tmp_path: Path
) -> None:
    signum, status, said = SIGNALS[name]
    db = tmp_path / "start.db"
    done = _small_job(
        tmp_path, _SITECUSTOMIZE, db, 1, STOP_WHEN_LOADING=module, STOP_WITH=str(int(signum))
    )
    where = f"{name} when {module} loads: exit {done.returncode}\n{done.stderr}"
    assert done.returncode == status, where
    assert done.stderr.strip().splitlines() == [f"laytune: {said}"], where
    assert "Traceback" not in done.stdout, where
    if module != "laytune.ops":  # stopped before the command began: it ran nothing
        assert not db.exists(), where


_SWALLOWING_SITECUSTOMIZE = textwrap.dedent(
    """
    import os
    import sys

    _module = os.environ["STOP_WHEN_LOADING"]
    _sent = []


    def _stop(event, args):
        if event == "import" and args[0] == _module and not _sent:
            _sent.append(1)
            try:  # a library that swallows every exception, KeyboardInterrupt too
                os.kill(os.getpid(), 2)
                for _ in range(100000):  # the handler runs between these bytecodes
                    pass
            except BaseException:
                _sent.append("swallowed")
            sys.stderr.write(f"stop sent: {_sent}\\n")


    sys.addaudithook(_stop)
    """
)


def test_a_stop_that_a_library_swallows_still_ends_the_job(tmp_path: Path) -> None:
    """The first Ctrl-C raises KeyboardInterrupt in the main thread, and code
    not ours may swallow it; the search's loops then honour the stop at the
    next step instead of tuning on until the watchdog's grace runs out."""
    db = tmp_path / "swallowed.db"
    # optuna loads as the tuning job starts
    done = _small_job(tmp_path, _SWALLOWING_SITECUSTOMIZE, db, 500, STOP_WHEN_LOADING="optuna")
    where = f"exit {done.returncode}\n{done.stderr}"
    assert "stop sent: [1, 'swallowed']" in done.stderr, where  # the library did swallow it
    assert done.returncode == 130, where
    assert "still stopping" not in done.stderr, where
    assert "Traceback" not in done.stderr, where
    # no batch after the stop: at most the one in flight when it came
    assert jobs.record_count(db) <= 4, where
