"""Bad files given to laytune: a corrupt database, a database of a newer
schema, truncated and newer frozen files, JSON Lines with bad lines.

Each gives a named error (one line and exit 2 from the command line), and
nothing is written: the bad file keeps every byte, and no output appears.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

import laytune
from laytune.cli import main
from laytune.exceptions import DatabaseError, FrozenFileError, RecordError
from laytune.records import freeze, load_frozen, open_database
from tests.search import worker

#: one worker runs the module's tests, so its module fixture is built once
#: (tests of one module spread over both workers built it once each, or more)
pytestmark = pytest.mark.xdist_group("bad_files")


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database with a few records, checkpointed into its one file."""
    folder = tmp_path_factory.mktemp("tuned")
    db = folder / "good.db"
    options = laytune.TuneOptions(trials=3, batch=3, space=worker.OPTIONS, warm_start=0)
    result = laytune.tune(
        worker.WORKLOAD, options=options, database=f"sqlite:///{db}", progress=False
    )
    assert result.measured == 3, result.stop_reason  # the tests below need its records
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return db


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


COMMANDS = (
    ["records"],
    ["freeze", "--out", "frozen.json"],
    ["tune", "copy", "--shape", "shape=16x16", "--trials", "1", "--quiet"],
)


@pytest.mark.parametrize(
    ("spoil", "message"),
    [
        (lambda p: p.write_bytes(b"this is not a database\n" * 300), "file is not a database"),
        (lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]), "malformed"),
    ],
    ids=["not-a-database", "truncated"],
)
def test_a_corrupt_database_is_named_and_left_as_it_is(
    tuned: Path, tmp_path: Path, capsys, monkeypatch, spoil, message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "bad.db"
    shutil.copy(tuned, db)
    spoil(db)
    before = _digest(db)
    for command in COMMANDS:
        assert main([*command, "--db", f"sqlite:///{db}"]) == 2, command
        line = _one_error_line(capsys)
        assert line.startswith("laytune: error: ") and message in line, (command, line)
        assert str(db) in line, line
        assert _digest(db) == before, command
    assert not (tmp_path / "frozen.json").exists()
    with pytest.raises(DatabaseError, match=message):
        open_database(db).records()


def test_a_database_of_a_newer_schema_is_refused_and_left_as_it_is(
    tuned: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "newer.db"
    shutil.copy(tuned, db)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE laytune_meta SET value = '2' WHERE name = 'schema_version'")
        conn.commit()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = _digest(db)
    for command in COMMANDS:
        assert main([*command, "--db", f"sqlite:///{db}"]) == 2, command
        line = _one_error_line(capsys)
        assert "holds records of schema version 2; this laytune reads version 1" in line
        assert _digest(db) == before, command
    assert not (tmp_path / "frozen.json").exists()


def test_truncated_and_newer_frozen_files_are_named_and_nothing_is_written(
    tuned: Path, tmp_path: Path, capsys
) -> None:
    good = freeze(f"sqlite:///{tuned}", tmp_path / "good.json")
    text = good.read_text()
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) * 2 // 3])
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({**json.loads(text), "version": 2, "laytune_version": "9.0"}))
    for bad, message in ((cut, "is truncated or not JSON"), (newer, "frozen-layouts format 2")):
        before = _digest(bad)
        out = tmp_path / f"export-{bad.stem}"
        assert main(["export", str(bad), "--out", str(out)]) == 2
        assert message in _one_error_line(capsys)
        with pytest.raises(FrozenFileError, match=message):
            load_frozen(bad)
        assert not out.exists()
        assert _digest(bad) == before
    # A freeze that finds nothing leaves the frozen file that is there alone.
    kept = _digest(good)
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    assert main(["freeze", "--db", empty, "--out", str(good)]) == 1
    with pytest.raises(FrozenFileError, match="has no verified record"):
        freeze(empty, good)
    assert _digest(good) == kept


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ('{"schema_version": 1, "workload_key": ', "line 2: record JSON is not valid JSON"),
        (None, "line 2: record JSON schema version 7 is not supported"),
        ("[" * 10_000 + "]" * 10_000, "line 2: record JSON nests"),
        ("\x00garbage", "line 2: record JSON is not valid JSON"),
    ],
    ids=["truncated", "newer", "deep", "garbage"],
)
def test_json_lines_with_a_bad_line_add_nothing(
    tuned: Path, tmp_path: Path, bad_line: str | None, message: str
) -> None:
    with open_database(tuned) as source:
        good = [record.dumps() for record in source.records()]
    if bad_line is None:
        bad_line = json.dumps({**json.loads(good[0]), "schema_version": 7})
    path = tmp_path / "records.jsonl"
    path.write_text("\n".join([good[0], bad_line, *good[1:]]) + "\n")
    db = tmp_path / "target.db"
    with open_database(db) as target:
        with pytest.raises(RecordError, match=message):
            target.import_jsonl(path)
        assert len(target) == 0  # not even the good line before the bad one
        path.write_text("\n".join(good) + "\n")
        assert target.import_jsonl(path) == (len(good), 0)  # the same file, mended
