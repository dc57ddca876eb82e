"""The command line: user mistakes end with one line on stderr and exit code 2."""

from __future__ import annotations

import pytest

from laytune.cli import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["tune", "spiral"], "unknown operator 'spiral'; known: transpose"),
        (["tune", "matmul", "--shape", "M=3"], "missing: ['N', 'K']"),
        (["tune", "matmul", "--shape", "M=3,N=4,K=5,Q=1"], "unknown: ['Q']"),
        (["tune", "matmul", "--shape", "M=three"], "--shape expects NAME=INTEGER, got 'M=three'"),
        (["tune"], "tune needs an operator"),
        (
            ["tune", "copy", "--shape", "rows=4,cols=4", "--device", "no-such-gpu"],
            "no OpenCL device matches 'no-such-gpu'",
        ),
    ],
)
def test_user_mistakes_exit_2_with_a_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("laytune: error: ")
    assert message in err
    assert "Traceback" not in err


def test_devices_lists_the_device_that_builds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["devices"]) == 0
    assert "builds kernels" in capsys.readouterr().out


def test_tune_runs_a_small_job(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["tune", "copy", "--shape", "rows=32,cols=32", "--trials", "4", "--batch", "2"]) == 0
    )
    out = capsys.readouterr().out
    assert "4/4 measured" in out
    assert "best layouts:" in out
