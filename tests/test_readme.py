"""The README runs as written: every Python block as a script in a fresh
folder, every ``laytune`` command of its shell blocks in order, so the
documentation cannot drift from the code.

The tuning examples are made quick, never rewritten: the Python block takes
its size and trial budget from ``SIZE`` and ``TRIALS`` (as the README says),
and ``laytune tune`` commands get ``--trials 2 --batch 2 --quiet`` appended
(argparse keeps the last value)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from laytune.records import open_database

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"^```(\w+)\n(.*?)^```", README, flags=re.MULTILINE | re.DOTALL)
PYTHON = [code for lang, code in BLOCKS if lang == "python"]
QUICK_TUNE = ["--trials", "2", "--batch", "2", "--quiet"]
FAILED_TO_RUN = ("device_lost", "crash")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "LAYTUNE_DB"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return {**env, "COLUMNS": "100", **extra}


def _commands() -> list[list[str]]:
    """The ``laytune`` command lines of the shell blocks, continuation lines
    joined and comments dropped, in the order the README gives them."""
    commands = []
    for lang, code in BLOCKS:
        if lang != "sh":
            continue
        for line in code.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == ["laytune"]:
                commands.append(words[1:])
    return commands


def test_the_readme_has_the_blocks_this_test_runs() -> None:
    assert len(PYTHON) >= 4
    assert any(c[0] == "tune" for c in _commands())
    assert {c[0] for c in _commands()} >= {"tune", "workloads", "records", "show", "freeze"}


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(PYTHON)), ids=lambda k: f"python-block-{k + 1}")
def test_a_python_block_runs_as_a_script(index: int, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(PYTHON[index])
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=_env(SIZE="32", TRIALS="4"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "Traceback" not in done.stderr, done.stderr[-4000:]
    # a worker that cannot start (a script without the __main__ guard) is
    # recorded as a failure, not raised: no record may say so
    if (tmp_path / "laytune.db").exists():
        records = open_database(tmp_path / "laytune.db", create=False).records()
        assert records and not [r.status for r in records if r.status in FAILED_TO_RUN]


@pytest.mark.slow
def test_the_laytune_commands_run_in_order(tmp_path: Path) -> None:
    for words in _commands():
        argv = [*words, *QUICK_TUNE] if words[0] == "tune" else words
        done = subprocess.run(
            [sys.executable, "-m", "laytune.cli", *argv],
            cwd=tmp_path,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, f"laytune {shlex.join(argv)}:\n{done.stdout}{done.stderr}"
    records = open_database(tmp_path / "laytune.db", create=False).records()
    assert not [r.status for r in records if r.status in FAILED_TO_RUN]
