"""The command line: every command end to end, user mistakes end with one line
on stderr and exit code 2, "nothing found" exits with 1."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from laytune.cli import main
from laytune.records import open_database

#: One xdist worker runs the module, so the tuned database of its navigation
#: tests (``navigable``, 12 s) is made once, not once per worker.
pytestmark = pytest.mark.xdist_group("cli")


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
        (["tune", "copy", "--shape", "shape=1048576x1048576"], "does not fit the device"),
        (
            ["tune", "copy", "--shape", "shape=4x4", "--device", "no-such-gpu"],
            "no OpenCL device matches 'no-such-gpu'",
        ),
        (
            ["tune", "copy", "--shape", "shape=4x4", "--db", "sqlite:///no/such/dir/x.db"],
            "folder",
        ),
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
    open_database(db[1]).close()  # a records database without records
    assert main(["records", *db]) == 1
    assert main(["workloads", *db]) == 1
    assert main(["freeze", *db, "--out", str(tmp_path / "f.json")]) == 1
    assert "no verified record" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["records"], "no records database at sqlite:///typo.db"),
        (["workloads"], "no records database at sqlite:///typo.db"),
        (["show", "1"], "no records database at sqlite:///typo.db"),
        (["freeze", "--out", "f.json"], "no records database at sqlite:///typo.db"),
        (["plot", "convergence", "--out", "c.png"], "no records database at sqlite:///typo.db"),
        (["export", "absent.json", "--out", "out"], "no frozen file at absent.json"),
    ],
)
def test_read_only_commands_refuse_a_database_that_does_not_exist(
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LAYTUNE_DB", "sqlite:///typo.db")
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # nothing created


def test_a_file_that_is_not_a_records_database_is_refused_and_left_alone(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "other.db"
    path.write_bytes(b"")
    assert main(["records", "--db", f"sqlite:///{path}"]) == 1
    assert "holds no laytune records" in capsys.readouterr().err
    assert path.read_bytes() == b""


@pytest.mark.slow
def test_tune_records_show_freeze_export_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # no layouts folded onto a second line
    db = ["--db", f"sqlite:///{tmp_path / 'cli.db'}"]
    argv = ["tune", "copy", "--shape", "shape=32x32", "--trials", "4", "--batch", "2"]
    assert main([*argv, *db]) == 0
    captured = capsys.readouterr()
    assert "4/4 measured" in captured.err  # progress
    assert "copy(shape=32x32;float32)" in captured.out
    assert "over the baseline" in captured.out and "from the layouts" in captured.out
    assert "X: lambda i, j:" in captured.out

    assert main(["records", *db, "--format", "json"]) == 0
    records = json.loads(capsys.readouterr().out)  # one JSON array
    stored = open_database(db[1]).records()
    assert len(records) == len(stored) >= 4
    assert {r["status"] for r in records} <= {"ok", "rejected"}
    assert main(["records", *db, "--format", "jsonl"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines == records
    assert main(["records", *db, "--best"]) == 0
    table = capsys.readouterr().out
    assert table.split()[:2] == ["id", "workload"] and len(table.splitlines()) == 2
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
    assert sorted(Path(p).suffix for p in written) == [".cl", ".h", ".json", ".json"]
    assert Path(written[-1]).name == "manifest.json"

    image = tmp_path / "convergence.png"
    assert main(["plot", "convergence", *db, "--out", str(image)]) == 0
    assert image.read_bytes().startswith(b"\x89PNG")
    image = tmp_path / "map.png"
    assert (
        main(["plot", "address-map", *db, "--record", "1", "--buffer", "X", "--out", str(image)])
        == 0
    )
    assert image.stat().st_size > 0


# -- navigating a database of several workloads -------------------------------------


@pytest.fixture(scope="module")
def navigable(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Three workloads, two of them copies of different shapes."""
    import laytune
    from laytune import ops
    from tests.search.worker import OPTIONS

    url = f"sqlite:///{tmp_path_factory.mktemp('nav') / 'nav.db'}"
    for workload, trials in (
        (ops.copy((32, 32)), 4),
        (ops.copy((16, 32)), 3),
        (ops.transpose((32, 32), (1, 0)), 3),
    ):
        options = laytune.TuneOptions(trials=trials, batch=4, space=OPTIONS)
        laytune.tune(workload, options=options, database=url, progress=False)
    return url


def _lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().out.splitlines()


def test_workloads_lists_keys_with_counts_best_times_and_speedups(
    navigable: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = open_database(navigable)
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["workloads", "--db", navigable]) == 0
    table = _lines(capsys)
    assert table[0].split()[:3] == ["workload", "shape", "device"]
    assert len(table) == 4
    assert [line.split()[:2] for line in table[1:]] == [
        ["copy", "16x32"],
        ["copy", "32x32"],
        ["transpose", "32x32"],
    ]
    device_name = db.records()[0].device_name
    assert all(device_name in line for line in table[1:])
    assert main(["workloads", "--db", navigable, "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [item["workload_key"] for item in listed] == sorted(k for k, _ in db.workloads())
    for item in listed:
        measured = db.measured(item["workload_key"], item["device_key"])
        best = db.best(item["workload_key"], item["device_key"])
        assert item["records"] == len(measured)
        assert item["ok"] == sum(v is not None for v in measured.values())
        assert item["best_record_id"] == best.id and item["best_time_s"] == best.value_s
        assert item["speedup"] >= 1.0  # the baseline is one of the candidates
    assert (
        main(["workloads", "--db", navigable, "--workload", "transpose", "--format", "jsonl"]) == 0
    )
    assert [json.loads(line)["op"] for line in _lines(capsys)] == ["transpose"]


@pytest.mark.parametrize(
    ("selection", "keys"),
    [
        (["--workload", "copy"], {"copy(shape=32x32;float32)", "copy(shape=16x32;float32)"}),
        (["--workload", "copy(shape=32x"], {"copy(shape=32x32;float32)"}),
        (["--workload", "copy 16x32"], {"copy(shape=16x32;float32)"}),
        (["--workload", "copy", "--shape", "16x32"], {"copy(shape=16x32;float32)"}),
        (
            ["--shape", "32x32"],
            {"copy(shape=32x32;float32)", "transpose(shape=32x32,perm=1x0;float32)"},
        ),
        (["--shape", "32x32 perm=1x0"], {"transpose(shape=32x32,perm=1x0;float32)"}),
    ],
)
def test_records_are_selected_by_operator_key_prefix_and_shape(
    navigable: str, selection: list[str], keys: set[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["records", "--db", navigable, *selection, "--format", "json"]) == 0
    records = json.loads(capsys.readouterr().out)
    expected = [r.id for r in open_database(navigable).records() if r.workload_key in keys]
    assert [r["id"] for r in records] == expected
    assert main(["records", "--db", navigable, *selection, "--best", "--format", "json"]) == 0
    assert {r["workload_key"] for r in json.loads(capsys.readouterr().out)} == keys


def test_a_selection_that_matches_nothing_exits_1_naming_what_there_is(
    navigable: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["records", "--db", navigable, "--workload", "matmul"]) == 1
    err = capsys.readouterr().err
    assert "no workload in" in err and "matches workload 'matmul'" in err
    assert "copy 16x32; copy 32x32; transpose 32x32 perm=1x0" in err
    assert main(["plot", "pareto", "--db", navigable, "--shape", "7x7", "--out", "p.png"]) == 1
    assert "matches shape '7x7'" in capsys.readouterr().err


@pytest.mark.parametrize("columns", [60, 80, 120])
def test_tables_fit_the_terminal_width(
    navigable: str,
    columns: int,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    for argv in (["records"], ["records", "--best"], ["workloads"]):
        assert main([*argv, "--db", navigable]) == 0
        lines = _lines(capsys)
        assert lines and max(len(line) for line in lines) <= columns, "\n".join(lines)
        assert lines[0].split()[:2] in (["id", "workload"], ["workload", "shape"])


def test_the_last_records_keep_their_speedups(
    navigable: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    records = open_database(navigable).records(status="ok")
    assert main(["records", "--db", navigable, "--limit", "3"]) == 0
    table = _lines(capsys)
    assert len(table) == 4 and "NaN" not in "\n".join(table)
    assert [int(line.split()[0]) for line in table[1:]] == [r.id for r in records[-3:]]
    base = table[0].index("base") + len("base")  # right-aligned under its header
    assert all(re.fullmatch(r"\d+\.\d\dx", line[base - 5 : base]) for line in table[1:])
    assert main(["records", "--db", navigable, "--limit", "3", "--format", "csv"]) == 0
    import io

    import pandas as pd

    frame = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert frame["speedup"].notna().all()


def test_show_and_freeze_state_both_speedups(
    navigable: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = open_database(navigable)
    best = db.best("copy(shape=32x32;float32)", db.records()[0].device_key)
    assert main(["show", str(best.id), "--db", navigable, "--no-source"]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith(f"record {best.id}: copy 32x32 on ")
    assert "x over the baseline (identity layouts, baseline knobs:" in shown
    assert " from the layouts (identity layouts, the same knobs:" in shown
    assert "min " in shown and "IQR " in shown
    contention = best.result["contention"]  # None where Linux reports no CPU pressure
    assert (f"host CPU contention {contention:.0%} of the series' time" in shown) is (
        contention is not None
    )
    assert main(["show", "99999", "--db", navigable]) == 1
    assert "no record 99999" in capsys.readouterr().err
    out = tmp_path / "frozen.json"
    assert main(["freeze", "--db", navigable, "--workload", "copy", "--out", str(out)]) == 0
    lines = _lines(capsys)
    assert lines[0] == f"froze 2 workload(s) into {out}"
    assert all(" over the baseline, " in line and "from the layouts" in line for line in lines[1:])
    assert {line.split(" on ")[0].strip() for line in lines[1:]} == {"copy 16x32", "copy 32x32"}


def test_show_tells_the_median_of_a_series_timed_again_under_load() -> None:
    from laytune.cli import _contended_words

    assert _contended_words([]) == ""
    assert _contended_words([0.002, 0.001, 0.003]) == (
        "; timed again, the series not kept had a median of 2.0000 ms"
    )


def test_records_show_and_freeze_state_kernel_and_end_to_end_times(
    navigable: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    db = open_database(navigable)
    best = db.best("transpose(shape=32x32,perm=1x0;float32)", db.records()[0].device_key)
    assert main(["records", "--db", navigable, "--best"]) == 0
    header = capsys.readouterr().out.splitlines()[0].split()
    assert header.index("kernel") < header.index("ms")
    assert main(["show", str(best.id), "--db", navigable, "--no-source"]) == 0
    shown = capsys.readouterr().out
    assert f"end to end {best.value_s * 1e3:.4g} ms = compute " in shown
    assert "boundary: X fixed, Y fixed" in shown
    assert f"kernel median {best.compute_s * 1e3:.4f} ms" in shown
    out = tmp_path / "frozen.json"
    assert main(["freeze", "--db", navigable, "--workload", "transpose", "--out", str(out)]) == 0
    line = _lines(capsys)[1]
    assert f"{best.value_s * 1e3:.4f} ms end to end (kernel {best.compute_s * 1e3:.4f} ms)" in line


def test_tune_free_names_buffers_whose_conversions_are_not_charged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = ["--db", f"sqlite:///{tmp_path / 'free.db'}"]
    argv = ["tune", "copy", "--shape", "shape=16x16", "--trials", "2", "--quiet", *db]
    assert main([*argv, "--free", "X,Z"]) == 2
    assert "has no buffer Z" in capsys.readouterr().err
    assert main([*argv, "--free", "X", "--free", "Y"]) == 0
    out = capsys.readouterr().out
    assert "(boundary: X free, Y free; nothing to convert)" in out
    study = {r.study for r in open_database(db[1]).records()}
    assert all(name.endswith("/model/free=X,Y") for name in study)


def test_export_no_fuse_without_a_model_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["export", str(tmp_path / "layouts.json"), "--out", str(tmp_path), "--no-fuse"]) == 2
    )
    assert "export --no-fuse plans a model: give --model ONNX as well" in capsys.readouterr().err
