"""The SQL records database beyond the RecordStore contract (test_store.py):
the DataFrame, JSON Lines, claim rows, and clear errors for corrupt input,
bad URLs and newer databases."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest
import sqlalchemy as sa

from laytune.exceptions import DatabaseError, RecordError, RecordWarning
from laytune.layout import identity, pad_rows, permute
from laytune.records import FRAME_COLUMNS, Record, open_database
from laytune.records._database import _records
from laytune.space import Candidate
from tests.records.samples import BASE_KNOBS, DEVICE, WORKLOAD, candidate, record


@pytest.fixture
def db(tmp_path: Path):
    with open_database(f"sqlite:///{tmp_path / 'r.db'}") as database:
        yield database


def test_dataframe_has_a_column_per_layout_and_knob_and_speedups(db) -> None:
    db.add(record(candidate("identity"), 4e-6))
    db.add(record(candidate("pad"), 2e-6))
    db.add(record(candidate("permute"), None, status="timeout"))
    frame = db.to_dataframe()
    assert list(frame.columns[: len(FRAME_COLUMNS)]) == list(FRAME_COLUMNS)
    for column in ("layout.X", "layout.Y", "family.X", "pad.X", "knob.block.j", "knob.order"):
        assert column in frame.columns
    assert frame["is_identity"].tolist() == [True, False, False]
    assert frame["speedup"].iloc[1] == pytest.approx(2.0)
    assert pd.isna(frame["time_s"].iloc[2]) and pd.isna(frame["speedup"].iloc[2])
    assert frame["family.X"].tolist() == ["identity", "pad_rows", "permute"]
    # X pads 4 after every row but the last (the least padding that holds every element)
    assert frame["physical_bytes"].iloc[1] == (7 * 12 + 8 + 8 * 8) * 4
    assert frame["padding_overhead"].iloc[1] == pytest.approx((92 + 64) / 128 - 1)


def test_jsonl_export_and_import(db, tmp_path: Path) -> None:
    db.add(record(candidate("identity"), 4e-6))
    db.add(record(candidate("pad"), 2e-6))
    path = tmp_path / "out.jsonl"
    assert db.export_jsonl(path) == 2
    with open_database(tmp_path / "other.db") as other:
        assert other.import_jsonl(path) == (2, 0)
        assert other.import_jsonl(path) == (0, 2)  # already there: nothing duplicated
        assert [r.candidate for r in other.records()] == [r.candidate for r in db.records()]


def test_a_corrupt_jsonl_line_is_named_and_nothing_is_imported(db, tmp_path: Path) -> None:
    good = record(candidate("identity"), 4e-6).dumps()
    bad = json.loads(good)
    bad["candidate_key"] = "0" * 20
    stream = io.StringIO(good + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(RecordError, match=r"line 2: .*candidate_key.*corrupt"):
        db.import_jsonl(stream)
    assert len(db) == 0


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda d: d.update(schema_version=99), "schema version 99 is not supported"),
        (lambda d: d.pop("workload_key"), "malformed record"),
        (lambda d: d.update(status="fast"), "status 'fast' is not one of"),
        (lambda d: d.update(value_s=None), "a time is given exactly when the status is 'ok'"),
        (
            lambda d: d["candidate"]["layouts"]["X"].update(index_map="lambda i, j: [0]"),
            "bad candidate",
        ),
    ],
)
def test_malformed_records_raise_record_error(mangle, message: str) -> None:
    data = json.loads(record(candidate("pad"), 2e-6).dumps())
    mangle(data)
    with pytest.raises(RecordError, match=message):
        Record.from_json(data)


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_nested(100_000), "more than 64 levels deep"),  # json.loads itself would recurse
        (lambda good: good.replace('"result":{}', '"result":{"x":' + _nested(70) + "}"), "64 lev"),
        (lambda good: good + " " * (16 << 20), "more than the 16777216"),
    ],
)
def test_record_json_past_the_bounds_is_a_record_error(text, message: str) -> None:
    good = record(candidate("pad"), 2e-6).dumps()
    with pytest.raises(RecordError, match=message):
        Record.from_json(text(good) if callable(text) else text)


def test_jsonl_lines_past_the_bounds_are_named_and_nothing_is_imported(db, tmp_path: Path) -> None:
    good = record(candidate("identity"), 4e-6).dumps()
    deep = tmp_path / "deep.jsonl"
    deep.write_text(good + "\n" + _nested(5000) + "\n")
    with pytest.raises(RecordError, match=r"line 2: .*64 levels deep"):
        db.import_jsonl(deep)
    long = tmp_path / "long.jsonl"
    long.write_text(good + "\n\n" + "x" * ((16 << 20) + 10))  # no newline: read in bounds
    with pytest.raises(RecordError, match="line 3: longer than 16777216 bytes"):
        db.import_jsonl(long)
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(good.encode() + b"\n\xff\xfe\n")
    with pytest.raises(RecordError, match="line 2: not UTF-8"):
        db.import_jsonl(binary)
    assert len(db) == 0
    stream = io.StringIO(good + "\n" + "y" * ((16 << 20) + 1))
    with pytest.raises(RecordError, match="line 2: longer than 16777216 characters"):
        db.import_jsonl(stream)
    assert len(db) == 0


def test_a_corrupt_row_in_the_database_names_its_id(db) -> None:
    """Listing skips it with a warning (the other rows still read); asking
    for it by id raises; either way the message names its id."""
    db.add(record(candidate("identity"), 4e-6))
    db.add(record(candidate("pad"), 2e-6))
    with db._engine.begin() as conn:
        conn.execute(sa.update(_records).where(_records.c.id == 1).values(body="{truncated"))
    with pytest.warns(RecordWarning, match="record 1 is corrupt") as caught:
        assert [r.id for r in db.records()] == [2]
        assert [r.id for r in db.records(status="ok")] == [2]  # warned once per database
    assert len(caught) == 1
    with pytest.raises(RecordError, match="record 1 is corrupt"):
        db.get(1)


def test_a_record_read_again_is_decoded_once_and_a_changed_row_again(db) -> None:
    """Records are values: reading the same row twice gives the record decoded
    the first time (a plan queries the same records many times); a row whose
    body changed is decoded from its new body."""
    db.add(record(candidate("pad"), 2e-6))
    first, again = db.get(1), db.records()[0]
    assert again is first
    assert dict(first.candidate.layouts)["X"] is dict(again.candidate.layouts)["X"]
    changed = json.loads(db._engine.connect().execute(sa.select(_records.c.body)).scalar())
    changed["value_s"] = 3e-6
    with db._engine.begin() as conn:
        conn.execute(sa.update(_records).where(_records.c.id == 1).values(body=json.dumps(changed)))
    assert db.get(1).value_s == 3e-6


def test_a_record_drops_its_claim_row_in_its_transaction(db) -> None:
    """The claims a Database holds are rows; the contract itself is tested
    over every store in test_store.py."""
    key = candidate("pad").key
    assert db.claim(WORKLOAD.key, DEVICE, key, "hostA:1")
    assert [(c["candidate_key"], c["owner"]) for c in db.claims()] == [(key, "hostA:1")]
    db.add(record(candidate("pad"), 1e-6))
    assert db.claims() == []


def test_bad_urls_and_newer_databases_give_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(DatabaseError, match=r"folder .* does not exist"):
        open_database(f"sqlite:///{tmp_path / 'missing' / 'x.db'}")
    with pytest.raises(DatabaseError, match="cannot open"):
        open_database("nosuchdriver://user:secret@host/db")
    path = tmp_path / "new.db"
    open_database(path).close()
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE laytune_meta SET value = '7' WHERE name = 'schema_version'"))
    engine.dispose()
    with pytest.raises(DatabaseError, match="schema version 7; this laytune reads version 1"):
        open_database(path)


def test_a_password_is_never_shown() -> None:
    with pytest.raises(DatabaseError) as info:
        open_database("postgresql+psycopg://user:hunter2@127.0.0.1:1/none")
    assert "hunter2" not in str(info.value)
    assert "***" in str(info.value)


def test_layout_speedup_compares_with_identity_layouts_of_the_same_knobs(db) -> None:
    from laytune.records import identity_twin, records_dataframe

    db.add(record(candidate("identity"), 8e-6))  # the baseline: block.j=1
    db.add(record(candidate("identity", block=2), 4e-6))  # the knobs alone: 2x
    db.add(record(candidate("pad", block=2), 1e-6))  # the layouts on top: 4x
    db.add(record(candidate("permute", block=4), 2e-6))  # no identity twin measured
    frame = db.to_dataframe()
    assert frame["shape"].tolist() == ["8x8 perm=1x0"] * 4
    assert frame["identity_layouts"].tolist() == [True, True, False, False]
    assert frame["speedup"].tolist() == pytest.approx([1.0, 2.0, 8.0, 4.0])
    assert frame["layout_speedup"].iloc[:3].tolist() == pytest.approx([1.0, 1.0, 4.0])
    assert pd.isna(frame["layout_speedup"].iloc[3])
    twin = identity_twin(candidate("pad", block=2))
    assert twin == candidate("identity", block=2)
    # a selection that leaves the references out keeps its speed-ups
    ours = db.records(status="ok")[2:]
    alone = records_dataframe(ours)
    assert alone["speedup"].isna().all()
    assert db.to_dataframe(status="ok", limit=None).iloc[2:]["speedup"].tolist() == [8.0, 4.0]
    study = db.to_dataframe(study="s")
    assert study["layout_speedup"].iloc[2] == pytest.approx(4.0)


def test_identity_twin_reads_order_and_pad_mode_as_on_identity_layouts() -> None:
    from laytune.records import identity_twin

    chosen = Candidate.make(
        {"X": pad_rows((8, 8), 4), "Y": identity((8, 8))},
        {**BASE_KNOBS, "order": "X", "pad_mode": "overcompute"},
        {"X": 0.0},
    )
    assert identity_twin(chosen) == candidate("identity")


def test_dataframe_numbers_are_nan_never_none_and_runs_leave_out_the_pauses(db) -> None:
    t0 = 1_700_000_000.0
    db.add(record(candidate("identity"), 4e-6, run="a", started_at=t0, created_at=t0 + 1))
    db.add(record(candidate("pad"), None, status="rejected", run="a", created_at=t0 + 2))
    # the study resumed an hour later
    db.add(record(candidate("permute"), 3e-6, run="b", started_at=t0 + 3600, created_at=t0 + 3603))
    frame = db.to_dataframe()
    assert not frame.map(lambda value: value is None).any().any()
    assert frame["elapsed_s"].tolist() == [1.0, 2.0, 5.0]  # 2 s in run a, then 3 s in run b
    assert pd.isna(frame["datetime_start"].iloc[1]) and pd.isna(frame["duration"].iloc[1])
    assert frame["duration"].iloc[2] == pd.Timedelta(seconds=3)
    assert (frame["datetime_complete"] == frame["created_at"]).all()
    assert frame["time_min_s"].iloc[0] == 4e-6 and frame["time_iqr_s"].iloc[0] == 0.0
    assert pd.isna(frame["time_min_s"].iloc[1]) and pd.isna(frame["max_error"].iloc[0])


def test_reading_a_database_that_does_not_exist_creates_nothing(tmp_path: Path) -> None:
    import sqlite3

    from laytune.exceptions import DatabaseNotFoundError, NotFoundError, RecordNotFoundError

    path = tmp_path / "typo.db"
    with pytest.raises(DatabaseNotFoundError, match="no records database at sqlite:///"):
        open_database(f"sqlite:///{path}", create=False)
    assert not path.exists()
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    before = other.read_bytes()
    with pytest.raises(DatabaseNotFoundError, match="holds no laytune records"):
        open_database(other, create=False)
    assert other.read_bytes() == before
    open_database(path).close()
    existing = open_database(path, create=False)
    with pytest.raises(RecordNotFoundError, match="no record 99999") as info:
        existing.get(99999)
    existing.close()
    assert isinstance(info.value, NotFoundError) and isinstance(info.value, LookupError)


@pytest.mark.xdist_group("postgres")  # one server per test run
def test_reading_a_postgresql_database_without_records_creates_nothing(postgres_url: str) -> None:
    from laytune.exceptions import DatabaseNotFoundError

    server = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with server.connect() as conn:
        conn.execute(sa.text("CREATE DATABASE empty_for_reading"))
    server.dispose()
    url = postgres_url.rsplit("/", 1)[0] + "/empty_for_reading"
    with pytest.raises(DatabaseNotFoundError, match="holds no laytune records"):
        open_database(url, create=False)
    probe = sa.create_engine(url)
    with probe.connect() as conn:
        assert sa.inspect(conn).get_table_names() == []
    probe.dispose()
    open_database(url).close()  # created to write, then readable
    open_database(url, create=False).close()


@pytest.mark.xdist_group("postgres")  # one server per test run
def test_a_newer_postgresql_database_is_refused_before_any_table_is_made(
    postgres_url: str,
) -> None:
    """On a server, opening checks the schema version before creating
    tables (it created the missing ones first), and reading runs no DDL."""
    server = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with server.connect() as conn:
        conn.execute(sa.text("CREATE DATABASE newer_for_reading"))
    server.dispose()
    url = postgres_url.rsplit("/", 1)[0] + "/newer_for_reading"
    with open_database(url) as database:
        database.add(record(candidate("identity"), 4e-6))
    probe = sa.create_engine(url)
    with probe.begin() as conn:
        conn.execute(sa.text("UPDATE laytune_meta SET value = '2' WHERE name = 'schema_version'"))
        conn.execute(sa.text("DROP TABLE laytune_claims"))
    for opening in (dict(read_only=True), dict(create=False), dict()):
        with pytest.raises(DatabaseError, match="holds records of schema version 2"):
            open_database(url, **opening)
        with probe.connect() as conn:
            assert "laytune_claims" not in sa.inspect(conn).get_table_names(), opening
    with probe.begin() as conn:
        conn.execute(sa.text("UPDATE laytune_meta SET value = 'two' WHERE name = 'schema_version'"))
    with pytest.raises(DatabaseError, match="schema version 'two', which is not a number"):
        open_database(url, read_only=True)
    probe.dispose()


def test_identity_twins_of_a_vector_transpose_include_the_direct_read(db) -> None:
    """The transpose's input permuted and read along i, then transposed in
    registers to store along j: identity layouts read along j directly, so
    the layout reference has no transpose, and the records match it."""
    from laytune.records import identity_twins, reference_times

    vector = {"vector_axis": "j", "vector": 4}
    chosen = Candidate.make(
        {"X": permute((8, 8), (1, 0)), "Y": identity((8, 8))},
        {**BASE_KNOBS, **vector, "vector_transpose": "i"},
    )
    direct = Candidate.make(
        {"X": identity((8, 8)), "Y": identity((8, 8))},
        {**BASE_KNOBS, **vector, "vector_transpose": ""},
    )
    twins = identity_twins(chosen)
    assert [t.knob_map["vector_transpose"] for t in twins] == ["i", ""]
    assert twins[1] == direct
    assert identity_twins(direct) == [direct]
    db.add(record(candidate("identity"), 8e-6))
    db.add(record(direct, 2e-6))
    db.add(record(chosen, 1e-6))
    baseline, twin = reference_times(db.records(), chosen)
    assert baseline is not None and baseline.value_s == 8e-6
    assert twin is not None and twin.candidate == direct
    assert db.to_dataframe()["layout_speedup"].iloc[2] == pytest.approx(2.0)


def test_optuna_commits_on_sqlite_as_the_records_do(db) -> None:
    """The study's connections are in WAL mode with synchronous=NORMAL, as the
    records' are: a commit of a trial's param is not an fsync."""
    engine = db.optuna_storage().engine
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
