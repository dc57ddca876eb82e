"""The commands that only read a records database, and the files commands write.

``records``, ``workloads``, ``show``, ``freeze`` and ``plot`` open the
database read-only: whatever they find (a newer schema, a schema version
that is not a number, a corrupt record, a DELETE-journal file), the database
file and its WAL keep every byte. A newer or unreadable schema is refused in
one line (exit 2); a corrupt record is left out with a warning naming its
id, and the rest is still listed, frozen and plotted.

What they write (a frozen file, a figure) is whole or not at all: a bad
image suffix, a folder that does not exist or a full disk gives one line
naming the problem and exit 2, and leaves nothing behind (no ``.tmp``).
A full disk is simulated with /dev/full (every write to it fails with
ENOSPC, as on a full disk) or, in a separate process, with a file size
limit (RLIMIT_FSIZE, as test_disk_full.py does); a full disk under the
database, with SQLite's own page limit (max_page_count), which fails a
write the way a full disk does (SQLITE_FULL).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import re
import resource
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from laytune.cli import _db_option, main
from laytune.exceptions import DatabaseError, RecordError, RecordWarning
from laytune.records import error_reason, load_frozen, open_database
from tests import jobs

#: Every read-only command, with the files it writes under the current folder.
READERS = (
    ["records"],
    ["workloads"],
    ["show", "1"],
    ["freeze", "--out", "frozen.json"],
    ["plot", "convergence", "--out", "convergence.png"],
)


#: one worker runs the module's tests, so its module fixture is built once
#: (tests of one module spread over both workers built it once each, or more)
pytestmark = pytest.mark.xdist_group("read_only_commands")


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A database of a few records written by ``laytune tune --db URL``
    (checkpointed into its one file), and what that command printed."""
    db = tmp_path_factory.mktemp("tuned") / "good.db"
    out = io.StringIO()
    command = ["tune", "copy", "--shape", "shape=16x16", "--trials", "3", "--batch", "3"]
    with contextlib.redirect_stdout(out):
        status = main([*command, "--no-warm-start", "--quiet", "--db", f"sqlite:///{db}"])
    assert status == 0, out.getvalue()
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return db, out.getvalue()


def _copy(tuned: tuple[Path, str], folder: Path, name: str, journal: str = "wal") -> Path:
    db = folder / name
    shutil.copy(tuned[0], db)
    if journal != "wal":
        with contextlib.closing(sqlite3.connect(db)) as conn:
            conn.execute(f"PRAGMA journal_mode={journal}")
    return db


def _digests(db: Path) -> dict[str, str]:
    """sha256 of the database and of each file beside it (-wal, -shm, -journal)."""
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(db.parent.glob(db.name + "*"))
        if not path.name.endswith("-shm")  # readers map it; SQLite rebuilds it from the WAL
    }


def _tables(db: Path) -> set[str]:
    uri = db.resolve().as_uri() + "?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _journal_mode(db: Path) -> str:
    with contextlib.closing(sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)) as c:
        return str(c.execute("PRAGMA journal_mode").fetchone()[0])


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@contextlib.contextmanager
def _held_open_with(db: Path, *statements: str) -> Iterator[None]:
    """``statements`` committed into the WAL of ``db`` by a connection that
    stays open meanwhile, so that they stay in the -wal file (closing the
    last connection would checkpoint them into the database file)."""
    conn = sqlite3.connect(db)
    try:
        for statement in statements:
            conn.execute(statement)
        conn.commit()
        assert (db.parent / (db.name + "-wal")).stat().st_size > 0
        yield
    finally:
        conn.close()


NEWER = (
    "UPDATE laytune_meta SET value = '2' WHERE name = 'schema_version'",
    "DROP TABLE laytune_claims",  # a table this laytune would create
)


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_read_only_commands_refuse_a_newer_schema_and_write_nothing(
    tuned, tmp_path: Path, capsys, monkeypatch, journal: str
) -> None:
    monkeypatch.chdir(tmp_path)
    db = _copy(tuned, tmp_path, "newer.db", journal)
    held = _held_open_with(db, *NEWER) if journal == "wal" else contextlib.nullcontext()
    if journal == "delete":
        with contextlib.closing(sqlite3.connect(db)) as conn:
            for statement in NEWER:
                conn.execute(statement)
            conn.commit()
    with held:
        before = _digests(db)
        assert (db.name + "-wal" in before) == (journal == "wal")
        for command in READERS:
            assert main([*command, "--db", f"sqlite:///{db}"]) == 2, command
            line = _error_line(capsys)
            assert line == (
                f"laytune: error: sqlite:///{db} holds records of schema version 2; "
                "this laytune reads version 1 (upgrade laytune)"
            ), command
            assert _digests(db) == before, command
        assert "laytune_claims" not in _tables(db)
    assert _journal_mode(db) == journal
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("newer.db")) == []


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_read_only_commands_leave_a_database_as_it_was(
    tuned, tmp_path: Path, capsys, monkeypatch, journal: str
) -> None:
    """A DELETE-journal file stays one, and no -wal appears; a WAL database's
    -wal (holding a commit not yet checkpointed) keeps its bytes."""
    monkeypatch.chdir(tmp_path)
    db = _copy(tuned, tmp_path, "plain.db", journal)
    mark = "UPDATE laytune_records SET study = study || '-renamed' WHERE id = 3"
    held = _held_open_with(db, mark) if journal == "wal" else contextlib.nullcontext()
    with held:
        before = _digests(db)
        for command in READERS:
            assert main([*command, "--db", f"sqlite:///{db}"]) == 0, command
            assert "Traceback" not in capsys.readouterr().err
            assert _digests(db) == before, command
    assert _journal_mode(db) == journal
    if journal == "delete":
        assert sorted(p.name for p in tmp_path.glob("plain.db*")) == ["plain.db"]
    assert len(load_frozen(tmp_path / "frozen.json")) == 1
    assert (tmp_path / "convergence.png").stat().st_size > 0


def test_a_schema_version_that_is_not_a_number_is_named(
    tuned, tmp_path: Path, capsys, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    db = _copy(tuned, tmp_path, "odd.db", "delete")
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("UPDATE laytune_meta SET value = 'two' WHERE name = 'schema_version'")
        conn.commit()
    before = _digests(db)
    tune = ["tune", "copy", "--shape", "shape=16x16", "--trials", "1", "--quiet"]
    for command in (*READERS, tune):
        assert main([*command, "--db", f"sqlite:///{db}"]) == 2, command
        line = _error_line(capsys)
        assert line == (
            f"laytune: error: sqlite:///{db} holds schema version 'two', which is not a "
            "number: laytune did not write it, or the database is damaged"
        ), command
        assert _digests(db) == before, command
    with pytest.raises(DatabaseError, match="schema version 'two', which is not a number"):
        open_database(db)


def test_a_corrupt_record_is_skipped_with_a_warning_naming_it(
    tuned, tmp_path: Path, capsys, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    db = _copy(tuned, tmp_path, "corrupt.db", "delete")
    with contextlib.closing(sqlite3.connect(db)) as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM laytune_records ORDER BY id")]
        conn.execute("UPDATE laytune_records SET body = '{\"schema_version\": 1, ' WHERE id = 1")
        conn.commit()
    assert ids == [1, 2, 3]
    url = f"sqlite:///{db}"
    warning = "laytune: warning: record 1 is corrupt: record JSON is not valid JSON"
    for command in (["records"], ["workloads"], ["show", "2"], ["freeze", "--out", "f.json"]):
        assert main([*command, "--db", url]) == 0, command
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err
        assert [line.startswith(warning) for line in captured.err.splitlines()] == [True]
        assert "record 1 " in captured.err and captured.err.rstrip().endswith("; skipped")
        if command == ["records"]:
            listed = [line.split()[0] for line in captured.out.splitlines()[1:]]
            assert [n for n in listed if n.isdigit()] == ["2", "3"]
        if command == ["show", "2"]:
            assert captured.out.startswith("record 2: copy 16x16")
    assert len(load_frozen(tmp_path / "f.json")) == 1
    assert main(["plot", "convergence", "--out", "c.png", "--db", url]) == 0
    assert (tmp_path / "c.png").stat().st_size > 0
    capsys.readouterr()
    # The corrupt record itself, asked for by id: one line naming it.
    assert main(["show", "1", "--db", url]) == 2
    assert _error_line(capsys).startswith("laytune: error: record 1 is corrupt: ")
    with open_database(url, read_only=True) as database:
        with pytest.warns(RecordWarning, match=r"^record 1 is corrupt: .*; skipped$"):
            assert [r.id for r in database.records()] == [2, 3]
        with pytest.raises(RecordError, match="record 1 is corrupt"):
            database.get(1)


def test_a_folder_named_as_the_database_is_called_a_folder(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "records"
    folder.mkdir()
    for command in (["records"], ["tune", "copy", "--shape", "shape=16x16", "--trials", "1"]):
        assert main([*command, "--db", str(folder)]) == 2, command
        assert _error_line(capsys) == (
            f"laytune: error: cannot open sqlite:///{folder}: {folder} is a folder, "
            "not a database file"
        )
    assert list(folder.iterdir()) == []


def test_the_hint_after_tune_names_the_database_it_used(tuned, monkeypatch) -> None:
    db, printed = tuned
    url = f"sqlite:///{db}"
    assert printed.splitlines()[-1] == f"records in {url}; see `laytune records --best --db {url}`"
    # the command in the hint works as printed
    assert main(["records", "--best", "--db", url]) == 0
    monkeypatch.setenv("LAYTUNE_DB", url)  # the default database needs no --db
    assert _db_option(url, url) == ""
    spaced = "sqlite:////tmp/my records.db"
    assert _db_option(spaced, spaced) == " --db 'sqlite:////tmp/my records.db'"
    hidden = "postgresql+psycopg://me:***@host/db"
    assert _db_option("postgresql+psycopg://me:secret@host/db", hidden) == f" --db '{hidden}'"


# -- what commands write ----------------------------------------------------------------


def test_bad_output_paths_and_record_ids_are_one_line_and_exit_2(
    tuned, tmp_path: Path, capsys, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tuned[0]}"
    missing = tmp_path / "missing"
    cases = [
        (
            ["plot", "convergence", "--out", "x.jpgx"],
            "cannot write a figure to x.jpgx: .jpgx is not",
        ),
        (
            ["plot", "convergence", "--out", "x"],
            "cannot write a figure to x: it has no image suffix",
        ),
        (
            ["plot", "convergence", "--out", str(missing / "c.png")],
            f"cannot write {missing / 'c.png'}: folder {missing} does not exist",
        ),
        (
            ["freeze", "--out", str(missing / "f.json")],
            f"cannot write {missing / 'f.json'}: folder {missing} does not exist",
        ),
        (["freeze", "--out", str(tmp_path)], f"cannot write {tmp_path}: it is a folder"),
        (
            ["show", "99999999999999999999999"],
            "99999999999999999999999 is not a record id: ids are whole numbers from 1 to "
            "9223372036854775807",
        ),
        (
            ["plot", "address-map", "--record", str(2**64), "--buffer", "X", "--out", "a.png"],
            f"{2**64} is not a record id",
        ),
    ]
    for command, message in cases:
        assert main([*command, "--db", url]) == 2, command
        line = _error_line(capsys)
        assert line.startswith(f"laytune: error: {message}"), (command, line)
    assert list(tmp_path.iterdir()) == []


def _to_dev_full(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the next file laytune creates for writing answer every write with
    ENOSPC, as on a full disk: the file is created where asked, but its
    descriptor is /dev/full's."""
    import laytune._files

    real_open = os.open

    def open_full(path: str | os.PathLike[str], flags: int, mode: int = 0o777) -> int:
        fd = real_open(path, flags, mode)
        if flags & os.O_WRONLY:
            os.close(fd)
            fd = real_open("/dev/full", os.O_WRONLY)
        return fd

    monkeypatch.setattr(laytune._files.os, "open", open_full)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize(
    ("command", "out"),
    [
        (["freeze", "--out", "frozen.json"], "frozen.json"),
        (["plot", "speedup", "--out", "speedup.svg"], "speedup.svg"),
    ],
    ids=["freeze", "plot"],
)
def test_a_full_disk_is_named_and_the_old_file_stays_whole(
    tuned, tmp_path: Path, capsys, monkeypatch, command: list[str], out: str
) -> None:
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tuned[0]}"
    assert main([*command, "--db", url]) == 0
    capsys.readouterr()
    kept = (tmp_path / out).read_bytes()
    _to_dev_full(monkeypatch)
    assert main([*command, "--db", url]) == 2
    assert _error_line(capsys) == (
        f"laytune: error: cannot write {out}: the disk is full "
        f"(no space left on the device holding {tmp_path.resolve()})"
    )
    assert (tmp_path / out).read_bytes() == kept
    assert sorted(p.name for p in tmp_path.iterdir()) == [out]


@pytest.mark.skipif(not hasattr(resource, "prlimit"), reason="needs RLIMIT_FSIZE (Linux)")
def test_freeze_past_the_file_size_limit_leaves_nothing_behind(tuned, tmp_path: Path) -> None:
    """The write itself fails in a ``laytune freeze`` process (its file size
    limit lies below the frozen file's size, as test_disk_full.py fills the
    disk): one line, exit 2, the old frozen file whole, no ``.tmp``."""
    db = _copy(tuned, tmp_path, "plain.db", "delete")  # reading maps no -shm file
    out = tmp_path / "frozen.json"
    out.write_text("the frozen file before\n")
    limit = 2048

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    done = subprocess.run(
        [*jobs.laytune_command(), "freeze", "--db", f"sqlite:///{db}", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limited,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        cwd=jobs.ROOT,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"laytune: error: cannot write {out}: {os.strerror(errno.EFBIG)}"
    ]
    assert out.read_text() == "the frozen file before\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["frozen.json", "plain.db"]


def _fill_up(engine: Any) -> None:
    """Every new connection of ``engine`` may not grow the database by a page:
    SQLite then fails a write that needs one with SQLITE_FULL ("database or
    disk is full"), as on a full disk."""
    import sqlalchemy as sa

    with engine.connect() as conn:
        pages = conn.execute(sa.text("PRAGMA page_count")).scalar()

    def no_page_more(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        dbapi_connection.execute(f"PRAGMA max_page_count = {pages}")

    sa.event.listen(engine, "connect", no_page_more)
    engine.dispose()


def test_a_full_disk_under_optuna_is_named_by_sqlite_not_by_optuna(tmp_path: Path) -> None:
    """optuna wraps a failed commit in StorageInternalError ("typically ...
    invalid data in the commit"); the reason laytune gives is SQLite's, with
    the room left on the database's disk."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    url = f"sqlite:///{tmp_path / 'full.db'}"
    storage = optuna.storages.RDBStorage(url)
    study = optuna.create_study(storage=storage, study_name="full")
    _fill_up(storage.engine)
    with pytest.raises(optuna.exceptions.StorageInternalError) as info:
        study.set_user_attr("filler", "y" * 100_000)
    storage.engine.dispose()
    assert "invalid data in the commit" in str(info.value)
    assert error_reason(info.value) == "database or disk is full"
    assert re.fullmatch(
        rf"database or disk is full \([0-9.]+ (bytes|MiB) free on the disk holding {tmp_path}\)",
        error_reason(info.value, url),
    )


def test_a_full_disk_during_a_job_is_named_and_keeps_the_records(tuned, tmp_path: Path) -> None:
    import laytune
    from tests.search import worker

    db = _copy(tuned, tmp_path, "full.db")
    with open_database(db) as database:
        before = {r.id: r.dumps() for r in database.records()}
        _fill_up(database._engine)
        _fill_up(database.optuna_storage().engine)
        options = laytune.TuneOptions(
            trials=40, batch=2, space=worker.OPTIONS, warm_start=0, study_name="filling"
        )
        with pytest.raises(DatabaseError) as info:
            laytune.tune(worker.WORKLOAD, options=options, database=database, progress=False)
    assert re.fullmatch(
        rf"writing (a record|the optuna study) to sqlite:///{db}: database or disk is full "
        rf"\([0-9.]+ (bytes|MiB) free on the disk holding {tmp_path}\)",
        str(info.value),
    ), info.value
    with open_database(db, read_only=True) as database:
        after = {r.id: r.dumps() for r in database.records()}
    assert all(after[i] == body for i, body in before.items())


def test_a_python_api_freeze_into_a_missing_folder_raises_a_named_error(
    tuned, tmp_path: Path
) -> None:
    from laytune.exceptions import FrozenFileError
    from laytune.records import freeze

    with (
        open_database(tuned[0], read_only=True) as database,
        pytest.raises(FrozenFileError, match=r"folder \S+ does not exist"),
    ):
        freeze(database, tmp_path / "no" / "f.json")
    assert list(tmp_path.iterdir()) == []
