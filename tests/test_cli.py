"""The command line: every command end to end, user mistakes end with one line
on stderr and exit code 2, "nothing found" exits with 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from laytune.cli import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["tune", "spiral"], "unknown operator 'spiral'; known: copy, transpose"),
        (["tune", "matmul", "--shape", "M=3"], "missing: ['N', 'K']"),
        (["tune", "matmul", "--shape", "M=3,N=4,K=5,Q=1"], "unknown: ['Q']"),
        (
            ["tune", "matmul", "--shape", "M=three,N=4,K=5"],
            "parameter M: 'three' is not an integer",
        ),
        (["tune", "matmul", "--shape", "M"], "--shape: expected NAME=VALUE, got 'M'"),
        (["tune", "sum", "--shape", "shape=4x4,axes=0x1"], "keep at least one axis"),
        (["tune", "matmul(M=4;float32)"], "missing: ['N', 'K']"),
        (["tune", "copy(shape=4;float32)", "--shape", "shape=8"], "takes no --shape"),
        (["tune"], "tune needs an operator"),
        (
            ["tune", "copy", "--shape", "shape=4x4", "--device", "no-such-gpu"],
            "no OpenCL device matches 'no-such-gpu'",
        ),
        (["records", "--db", "sqlite:///no/such/folder/x.db"], "folder"),
        (["show", "99"], "no record 99"),
        (["export", "absent.json", "--out", "out"], "no frozen file at absent.json"),
        (["plot", "address-map", "--out", "x.png"], "needs --record ID and --buffer NAME"),
    ],
)
def test_user_mistakes_exit_2_with_a_message(
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("laytune: error: ")
    assert message in err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv", [["tune", "copy", "--trials", "0"], ["tune", "--strategy", "x"]])
def test_bad_option_values_are_rejected_by_the_parser(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


def test_devices_lists_the_device_that_builds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["devices"]) == 0
    assert "builds kernels" in capsys.readouterr().out


def test_empty_database_means_nothing_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = ["--db", f"sqlite:///{tmp_path / 'empty.db'}"]
    assert main(["records", *db]) == 1
    assert main(["freeze", *db, "--out", str(tmp_path / "f.json")]) == 1
    assert "no verified record" in capsys.readouterr().err


def test_tune_records_show_freeze_export_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = ["--db", f"sqlite:///{tmp_path / 'cli.db'}"]
    argv = ["tune", "copy", "--shape", "shape=32x32", "--trials", "4", "--batch", "2"]
    assert main([*argv, *db]) == 0
    captured = capsys.readouterr()
    assert "4/4 measured" in captured.err  # progress
    assert "copy(shape=32x32;float32)" in captured.out
    assert "over identity" in captured.out and "X: lambda i, j:" in captured.out

    assert main(["records", *db, "--format", "json"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(records) == 4 and {r["status"] for r in records} <= {"ok", "rejected"}
    assert main(["records", *db, "--best"]) == 0
    table = capsys.readouterr().out
    assert "record_id" in table and len(table.splitlines()) == 2
    assert main(["records", *db, "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("record_id,study,strategy")

    assert main(["show", "1", *db]) == 0
    shown = capsys.readouterr().out
    assert "layouts:" in shown and "__kernel void" in shown and "knobs:" in shown

    frozen = tmp_path / "frozen.json"
    assert main(["freeze", *db, "--out", str(frozen)]) == 0
    assert "froze 1 workload(s)" in capsys.readouterr().out
    assert main(["export", str(frozen), "--out", str(tmp_path / "export")]) == 0
    written = capsys.readouterr().out.split()
    assert sorted(Path(p).suffix for p in written) == [".cl", ".json"]

    image = tmp_path / "convergence.png"
    assert main(["plot", "convergence", *db, "--out", str(image)]) == 0
    assert image.read_bytes().startswith(b"\x89PNG")
    image = tmp_path / "map.png"
    assert (
        main(["plot", "address-map", *db, "--record", "1", "--buffer", "X", "--out", str(image)])
        == 0
    )
    assert image.stat().st_size > 0
