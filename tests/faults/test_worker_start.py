"""A script that tunes without ``if __name__ == "__main__":`` (or is read
from stdin) kills every measuring worker while Python starts it: multiprocessing's
``spawn`` runs the main script again in the child. The job stops at once with
an error that says so, instead of recording every candidate as a lost device."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = """
import laytune
from laytune import ops

result = laytune.tune(
    ops.matmul(16, 16, 16),
    options=laytune.TuneOptions(trials=2, batch=2, warm_start=0),
    database="sqlite:///{db}",
)
print("tuned", result.measured)
"""


def _run(args: list[str], cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        input=stdin,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_a_script_without_the_main_guard_stops_with_the_reason(tmp_path: Path) -> None:
    script = tmp_path / "unguarded.py"
    script.write_text(SCRIPT.format(db=tmp_path / "u.db"))
    done = _run([str(script)], tmp_path)
    assert done.returncode != 0
    assert "tuned" not in done.stdout
    assert "WorkerStartError: the measuring worker did not start" in done.stderr
    assert 'call laytune under `if __name__ == "__main__":`' in done.stderr
    assert str(script) in done.stderr
    # the worker stopped at the call, before it built a space or started workers
    assert "laytune.tune was called while this worker process starts" in done.stderr


@pytest.mark.parametrize("entry", ["tune", "tune_model", "tune_conversions"])
def test_a_job_entered_while_a_worker_starts_stops_before_any_work(
    entry: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import multiprocessing

    import laytune
    from laytune import ops
    from laytune.exceptions import WorkerStartError
    from laytune.plan import tune_model
    from laytune.search import tune_conversions

    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    db = tmp_path / "never.db"
    calls = {
        "tune": lambda: laytune.tune(ops.copy((4, 4)), database=f"sqlite:///{db}"),
        "tune_model": lambda: tune_model("no-such-model.onnx", database=f"sqlite:///{db}"),
        "tune_conversions": lambda: tune_conversions(f"sqlite:///{db}"),
    }
    with pytest.raises(WorkerStartError, match=f"laytune.{entry} was called while this worker"):
        calls[entry]()
    assert not db.exists()  # nothing was opened


def test_a_script_read_from_stdin_stops_with_the_reason(tmp_path: Path) -> None:
    done = _run(["-"], tmp_path, stdin=SCRIPT.format(db=tmp_path / "s.db"))
    assert done.returncode != 0
    assert "WorkerStartError" in done.stderr
    assert "'<stdin>' is not a file: run laytune from a script file" in done.stderr


def test_the_same_script_with_the_guard_tunes(tmp_path: Path) -> None:
    body = SCRIPT.format(db=tmp_path / "g.db").strip().splitlines()
    imports, call = body[:2], body[2:]
    guarded = "\n".join([*imports, 'if __name__ == "__main__":', *("    " + c for c in call)])
    script = tmp_path / "guarded.py"
    script.write_text(guarded + "\n")
    done = _run([str(script)], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "tuned 2" in done.stdout
