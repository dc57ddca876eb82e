"""A study of another boundary (tune --free X) ranks by another objective:
the tables give it rows of its own, named by its boundary, instead of
merging its best into the default boundary's row."""

from __future__ import annotations

import pytest

from laytune.cli import main
from laytune.records import Boundary, Record, open_database, price_record, workloads_dataframe
from tests.records.samples import DEVICE, WORKLOAD, candidate

BUFFERS = {
    "buffers": [
        {"name": "X", "role": "input", "shape": [8, 8], "dtype": "float32"},
        {"name": "Y", "role": "output", "shape": [8, 8], "dtype": "float32"},
    ]
}


def _measured(c, compute_s: float, study: str, boundary: Boundary) -> Record:
    record = Record(
        WORKLOAD.key,
        DEVICE,
        c,
        "ok",
        value_s=compute_s,
        event_times_s=(compute_s,) * 3,
        program=BUFFERS,
        result={"pack_times": [{"buffer": "X", "value_s": 5e-4}], "unpack_times": []},
        study=study,
        strategy="model",
        device_name="Test device",
    )
    return record.priced(price_record(record, boundary))


@pytest.fixture
def url(tmp_path) -> str:
    db = open_database(tmp_path / "b.db")
    fixed, free = Boundary.default(WORKLOAD), Boundary.of(WORKLOAD, {"X": "free"})
    name = f"{WORKLOAD.key}@{DEVICE}/model"
    db.add(_measured(candidate("identity"), 3e-4, name, fixed))
    db.add(_measured(candidate("permute"), 1e-4, name, fixed))  # pays 0.5 ms to pack X
    db.add(_measured(candidate("pad"), 2e-4, f"{name}/free=X", free))
    return db.url


def test_each_boundary_has_its_row_and_its_best(url: str) -> None:
    frame = workloads_dataframe(open_database(url)).set_index("boundary")
    assert list(frame.index) == ["default", "X free"]
    assert frame.loc["default", "best_time_s"] == pytest.approx(3e-4)  # identity: no pack
    assert frame.loc["X free", "best_time_s"] == pytest.approx(1e-4)  # free: no pack to pay
    assert frame.loc["default", "best_record_id"] == 1
    assert frame.loc["X free", "best_record_id"] == 2
    assert list(frame["records"]) == [2, 1]


def test_the_tables_show_the_boundary(url: str, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    assert main(["workloads", "--db", url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "boundary" in lines[0]
    rows = [line for line in lines[1:] if line.startswith("transpose")]
    assert len(rows) == 2
    assert " default " in rows[0] and " 0.3 " in rows[0]
    assert " X free " in rows[1] and " 0.1 " in rows[1]
    assert main(["records", "--best", "--db", url]) == 0
    best = [line for line in capsys.readouterr().out.splitlines() if "transpose" in line]
    assert len(best) == 2
    assert "default" in best[0] and "X free" in best[1]
    assert main(["records", "--db", url]) == 0
    every = [line for line in capsys.readouterr().out.splitlines() if "transpose" in line]
    assert ["X free" in line for line in every] == [False, False, True]
