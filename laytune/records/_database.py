"""The records database: every measurement, addressed by an SQLAlchemy URL.

The embedded default is a SQLite file; any SQLAlchemy URL (PostgreSQL with
``postgresql+psycopg://...``) lets several hosts tune one study together.
Optuna's own RDB storage lives in the same database
(:meth:`Database.optuna_storage`), so a study and its records resume
together.

Tables (prefixed ``laytune_``, beside optuna's):

- ``laytune_records``: one row per record, the whole record as JSON in
  ``body`` plus indexed columns to query by. A unique key on (workload,
  device, candidate) makes "never measure a candidate twice" a property of
  the database, not of one process.
- ``laytune_claims``: a candidate being measured right now, and by whom
  (``host:pid``). A worker claims before it measures and the claim goes
  away in the transaction that writes the record, so two workers never
  measure one candidate. Claims of dead processes are taken over.
- ``laytune_meta``: the schema version of the database.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import shutil
import socket
import sqlite3
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import IO, Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from laytune.exceptions import (
    DatabaseError,
    DatabaseNotFoundError,
    RecordError,
    RecordNotFoundError,
    RecordWarning,
)
from laytune.layout import MAX_JSON_LENGTH
from laytune.records._record import SCHEMA_VERSION, Record
from laytune.records._store import RecordStore, key_of

__all__ = [
    "DEFAULT_URL",
    "Database",
    "error_reason",
    "open_database",
    "owner_alive",
    "process_owner",
]

DEFAULT_URL = "sqlite:///laytune.db"

#: PostgreSQL advisory lock held while tables are created ("laytune" in ASCII).
_SCHEMA_LOCK_KEY = 0x6C61797475

#: A claim older than this (seconds) is taken over even when its owner's
#: liveness cannot be checked (another host).
CLAIM_LEASE_S = 3600.0

#: The largest record id (SQL's 64-bit integers).
_MAX_ID = 2**63 - 1

T = TypeVar("T")

_metadata = sa.MetaData()
_records = sa.Table(
    "laytune_records",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("schema_version", sa.Integer, nullable=False),
    sa.Column("workload_key", sa.String(512), nullable=False, index=True),
    sa.Column("op", sa.String(64), nullable=False, index=True),
    sa.Column("device_key", sa.String(128), nullable=False, index=True),
    sa.Column("candidate_key", sa.String(64), nullable=False),
    sa.Column("status", sa.String(32), nullable=False, index=True),
    sa.Column("value_s", sa.Float, nullable=True),
    sa.Column("study", sa.String(512), nullable=False, index=True),
    sa.Column("trial", sa.Integer, nullable=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("body", sa.Text, nullable=False),
    sa.UniqueConstraint("workload_key", "device_key", "candidate_key", name="uq_laytune_record"),
)
_claims = sa.Table(
    "laytune_claims",
    _metadata,
    sa.Column("workload_key", sa.String(512), primary_key=True),
    sa.Column("device_key", sa.String(128), primary_key=True),
    sa.Column("candidate_key", sa.String(64), primary_key=True),
    sa.Column("owner", sa.String(256), nullable=False),
    sa.Column("claimed_at", sa.Float, nullable=False),
)
_meta = sa.Table(
    "laytune_meta",
    _metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("value", sa.String(256), nullable=False),
)


def process_owner() -> str:
    """``host:pid`` of this process, the owner name of its claims."""
    return f"{socket.gethostname()}:{os.getpid()}"


def owner_alive(owner: str) -> bool | None:
    """Whether a claim's owner process lives (None: on another host, unknown)."""
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _normalise_url(url: str | os.PathLike[str]) -> str:
    text = os.fspath(url)
    if "://" in text:
        return text
    return f"sqlite:///{text}"  # a plain path is a SQLite file


class Database(RecordStore):
    """A records database on SQLAlchemy: the :class:`RecordStore` of laytune.
    Use :func:`open_database` to get one.

    Every write is one transaction; reads return :class:`Record` objects (or
    a pandas DataFrame). The URL's password is never shown:
    ``str(db)`` and every error print :attr:`safe_url`. The queries of
    :class:`RecordStore` are answered in SQL.

    With ``create=False`` the database must exist already and hold laytune's
    tables, else :class:`~laytune.exceptions.DatabaseNotFoundError` is raised
    and nothing is created (no SQLite file appears), so that a mistyped URL
    is an error, not a new empty database. ``read_only=True`` also writes
    nothing at all (see :func:`open_database`): what read-only tools use.

    :meth:`records` leaves out a stored record that cannot be read back,
    with a :class:`~laytune.exceptions.RecordWarning` naming its id, so that
    one damaged row does not hide the others; :meth:`get` and :meth:`lookup`
    of it raise :class:`RecordError`.
    """

    def __init__(
        self, url: str | os.PathLike[str], *, create: bool = True, read_only: bool = False
    ) -> None:
        self.url = _normalise_url(url)
        try:
            parsed = sa.engine.make_url(self.url)
        except sa.exc.ArgumentError as err:
            raise DatabaseError(f"not a database URL: {os.fspath(url)!r} ({err})") from None
        self.safe_url = parsed.render_as_string(hide_password=True)
        self.is_sqlite = parsed.get_backend_name() == "sqlite"
        self.in_memory = self.is_sqlite and parsed.database in (None, "", ":memory:")
        self.read_only = read_only
        create = create and not read_only
        self._corrupt_seen: set[int] = set()
        # The schema version is checked before anything is created or the
        # journal is switched: a newer database is refused as it was found.
        if self.is_sqlite:
            self._check_sqlite_file(parsed.database, must_exist=not create)
        self._engine = self._create_engine(parsed)
        self._optuna_storage: Any = None
        if not self.is_sqlite:
            try:
                self._check_server_database(must_exist=not create)
            except DatabaseError:
                self._engine.dispose()
                raise
        if not read_only:
            self._setup()

    # -- lifecycle ----------------------------------------------------------------
    def _create_engine(self, parsed: sa.engine.URL) -> Engine:
        kwargs: dict[str, Any] = {"future": True}
        if self.in_memory:
            # One connection (a second one would open another, empty
            # database) that threads take turns with.
            kwargs["poolclass"] = _TakeTurns
            kwargs["connect_args"] = {"check_same_thread": False}
        elif self.is_sqlite:
            parent = Path(parsed.database or "").expanduser().resolve().parent
            if not parent.is_dir():
                raise DatabaseError(f"cannot open {self.safe_url}: folder {parent} does not exist")
            kwargs["connect_args"] = {"timeout": _SQLITE_WAIT_S}
            if self.read_only:  # SQLite itself refuses every write, the journal's included
                uri = _read_only_uri(parsed.database)
                kwargs["creator"] = lambda: sqlite3.connect(
                    uri, uri=True, timeout=_SQLITE_WAIT_S, check_same_thread=False
                )
        else:
            kwargs["pool_pre_ping"] = True
        try:
            engine = sa.create_engine(parsed, **kwargs)
        except (SQLAlchemyError, ImportError) as err:
            raise DatabaseError(f"cannot open {self.safe_url}: {error_reason(err)}") from None
        if self.is_sqlite and not self.read_only:
            sa.event.listen(engine, "connect", _sqlite_pragmas)
        return engine

    @contextlib.contextmanager
    def _schema_lock(self) -> Iterator[None]:
        """Serialise creating tables across processes: PostgreSQL races on
        concurrent ``CREATE TABLE`` (SQLite's file lock already serialises)."""
        if self._engine.dialect.name != "postgresql":
            yield  # SQLite: a racing CREATE fails and _retry runs it again
            return
        with self._engine.connect() as conn:
            conn.execute(sa.text("SELECT pg_advisory_lock(:key)"), {"key": _SCHEMA_LOCK_KEY})
            try:
                yield
            finally:
                conn.execute(sa.text("SELECT pg_advisory_unlock(:key)"), {"key": _SCHEMA_LOCK_KEY})
                conn.commit()

    def _check_sqlite_file(self, path: str | None, *, must_exist: bool) -> None:
        """Look at a SQLite file read-only before opening it the usual way
        (which would create it, or switch its journal to WAL): a folder is
        an error, and so is a schema version this laytune cannot read; with
        ``must_exist``, a missing file or one without laytune's records
        table is a :class:`DatabaseNotFoundError`."""
        if not path or path == ":memory:":
            if must_exist:
                raise DatabaseNotFoundError(
                    f"no records database at {self.safe_url} (laytune tune creates one)"
                )
            return
        file = Path(path).expanduser()
        if file.is_dir():
            raise DatabaseError(
                f"cannot open {self.safe_url}: {file} is a folder, not a database file"
            )
        if not file.is_file():
            if must_exist:
                raise DatabaseNotFoundError(
                    f"no records database at {self.safe_url} (laytune tune creates one)"
                )
            return  # created when the engine first connects
        try:
            with contextlib.closing(sqlite3.connect(_read_only_uri(path), uri=True)) as conn:
                tables = {
                    name
                    for (name,) in conn.execute(
                        "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (?, ?)",
                        (_records.name, _meta.name),
                    )
                }
                version = None
                if _meta.name in tables:
                    row = conn.execute(
                        f"SELECT value FROM {_meta.name} WHERE name = 'schema_version'"
                    ).fetchone()
                    version = None if row is None else row[0]
        except sqlite3.Error as err:
            raise DatabaseError(f"cannot open {self.safe_url}: {err}") from None
        if must_exist and _records.name not in tables:
            raise DatabaseNotFoundError(f"{self.safe_url} holds no laytune records")
        self._check_schema_version(version)

    def _check_server_database(self, *, must_exist: bool) -> None:
        """The same checks on a database server, with queries only (no DDL)."""
        try:
            with self._engine.connect() as conn:
                inspector = sa.inspect(conn)
                if must_exist and not inspector.has_table(_records.name):
                    raise DatabaseNotFoundError(f"{self.safe_url} holds no laytune records")
                if inspector.has_table(_meta.name):
                    self._check_schema_version(_stored_version(conn))
        except SQLAlchemyError as err:
            raise DatabaseError(f"cannot open {self.safe_url}: {error_reason(err)}") from None

    def _check_schema_version(self, value: Any) -> None:
        """Refuse a schema version that is newer than this laytune's, or not a number."""
        if value is None:
            return
        try:
            version = int(value)
        except (TypeError, ValueError):
            shown = repr(value) if len(str(value)) <= 40 else f"{str(value)[:40]!r}..."
            raise DatabaseError(
                f"{self.safe_url} holds schema version {shown}, which is not a number: "
                "laytune did not write it, or the database is damaged"
            ) from None
        if version > SCHEMA_VERSION:
            raise DatabaseError(
                f"{self.safe_url} holds records of schema version {version}; "
                f"this laytune reads version {SCHEMA_VERSION} (upgrade laytune)"
            )

    def _setup(self) -> None:
        try:
            with self._schema_lock():
                _retry(self._create_tables)
        except DatabaseError:
            raise
        except SQLAlchemyError as err:
            raise DatabaseError(f"cannot open {self.safe_url}: {error_reason(err)}") from None

    def _create_tables(self) -> None:
        _metadata.create_all(self._engine)
        with self._engine.begin() as conn:
            version = _stored_version(conn)
            if version is None:
                with contextlib.suppress(IntegrityError), conn.begin_nested():
                    conn.execute(
                        _meta.insert().values(name="schema_version", value=str(SCHEMA_VERSION))
                    )
            else:  # another process may have written it since the check before
                self._check_schema_version(version)

    def close(self) -> None:
        self._engine.dispose()

    def __repr__(self) -> str:
        return f"Database({self.safe_url!r})"

    __str__ = __repr__

    def _require_writable(self, to_do: str) -> None:
        if self.read_only:
            raise DatabaseError(f"cannot {to_do} {self.safe_url}: it is open read-only")

    @contextlib.contextmanager
    def _failing(self, doing: str) -> Iterator[None]:
        """A failure of the database itself (unreadable, corrupt, full disk,
        server gone) as a DatabaseError that names it and what was being done."""
        try:
            yield
        except SQLAlchemyError as err:
            reason = error_reason(err, self.safe_url)
            raise DatabaseError(f"{doing} {self.safe_url}: {reason}") from None

    # -- optuna ---------------------------------------------------------------------
    def end_optuna_session(self) -> None:
        """End this thread's session of optuna's storage, rolling back what
        it holds: a write of the study that an interrupt cut short may have
        left a transaction open there, whose lock every other writer of a
        SQLite file would wait on. Nothing where the storage is not open."""
        remove = getattr(self._optuna_storage, "remove_session", None)
        if remove is not None:
            with contextlib.suppress(Exception):
                remove()

    def optuna_storage(self) -> Any:
        """Optuna's RDB storage on this same database (created once, shared);
        for an in-memory database, optuna's in-memory storage."""
        if self._optuna_storage is None:
            import optuna

            self._require_writable("open optuna's storage on")

            if self.in_memory:
                self._optuna_storage = optuna.storages.InMemoryStorage()
                return self._optuna_storage
            engine_kwargs: dict[str, Any] = {}
            if self.is_sqlite:
                engine_kwargs["connect_args"] = {"timeout": _SQLITE_WAIT_S}
            else:
                engine_kwargs["pool_pre_ping"] = True
            try:
                with self._schema_lock():
                    self._optuna_storage = _retry(
                        lambda: optuna.storages.RDBStorage(self.url, engine_kwargs=engine_kwargs)
                    )
                if self.is_sqlite:
                    # optuna's own connections commit as the records' do: in WAL
                    # mode with synchronous=NORMAL, a commit is not an fsync
                    engine = self._optuna_storage.engine
                    sa.event.listen(engine, "connect", _sqlite_pragmas)
                    engine.dispose()  # the connection made for the schema predates the pragma
            except Exception as err:
                raise DatabaseError(
                    f"cannot open optuna storage on {self.safe_url}: "
                    f"{error_reason(err, self.safe_url)}"
                ) from None
        return self._optuna_storage

    # -- writing --------------------------------------------------------------------
    def add(self, record: Record) -> Record:
        """Store ``record`` whole in one transaction and drop its claim; returns it
        with its id. If the candidate is already recorded for this workload and
        device (another worker was first), the stored record is returned and
        nothing is written."""
        return self._insert(record)[0]

    def _insert(self, record: Record) -> tuple[Record, bool]:
        """(stored record, whether this call wrote it)."""
        if record.id is not None:
            raise RecordError(f"record {record.id} is already stored")
        self._require_writable("write a record to")
        try:
            with self._engine.begin() as conn:
                row = conn.execute(
                    _records.insert().values(
                        schema_version=record.schema_version,
                        workload_key=record.workload_key,
                        op=record.op,
                        device_key=record.device_key,
                        candidate_key=record.candidate.key,
                        status=record.status,
                        value_s=record.value_s,
                        study=record.study,
                        trial=record.trial,
                        created_at=record.created_at,
                        body=record.dumps(),
                    )
                )
                record_id = int(row.inserted_primary_key[0])
                conn.execute(_claims.delete().where(*_claim_where(record)))
        except IntegrityError:
            existing = self.lookup(record.workload_key, record.device_key, record.candidate.key)
            if existing is None:
                raise
            self.release(record.workload_key, record.device_key, record.candidate.key)
            return existing, False
        except SQLAlchemyError as err:
            raise DatabaseError(
                f"writing a record to {self.safe_url}: {error_reason(err, self.safe_url)}"
            ) from None
        return record.with_id(record_id), True

    def claim(
        self, workload_key: str, device_key: str, candidate_key: str, owner: str | None = None
    ) -> bool:
        """Reserve a candidate for measuring. False when it is recorded already
        or a live worker holds it; a claim whose owner died (or whose lease
        ran out) is taken over.

        The claim is written first and the records are read after it commits:
        a record and the removal of its claim commit together, so a claim that
        got in means any record of the candidate is already visible.
        """
        owner = owner or process_owner()
        with self._failing("claiming a candidate in"):
            return self._claim(workload_key, device_key, candidate_key, owner)

    def _claim(self, workload_key: str, device_key: str, candidate_key: str, owner: str) -> bool:
        where = (
            _claims.c.workload_key == workload_key,
            _claims.c.device_key == device_key,
            _claims.c.candidate_key == candidate_key,
        )
        now = time.time()
        try:
            with self._engine.begin() as conn:
                conn.execute(
                    _claims.insert().values(
                        workload_key=workload_key,
                        device_key=device_key,
                        candidate_key=candidate_key,
                        owner=owner,
                        claimed_at=now,
                    )
                )
        except IntegrityError:
            with self._engine.begin() as conn:
                held = conn.execute(sa.select(_claims.c.owner, _claims.c.claimed_at).where(*where))
                held = held.first()
                if held is None:  # released meanwhile: try again from the start (below)
                    pass
                elif held.owner != owner:
                    alive = owner_alive(held.owner)
                    if alive is not False and now - held.claimed_at <= CLAIM_LEASE_S:
                        return False
                    taken = conn.execute(
                        _claims.update()
                        .where(*where, _claims.c.owner == held.owner)
                        .values(owner=owner, claimed_at=now)
                    )
                    if taken.rowcount != 1:
                        return False
            if held is None:  # outside the transaction: it holds a connection
                return self._claim(workload_key, device_key, candidate_key, owner)
        if self.lookup(workload_key, device_key, candidate_key) is not None:
            self.release(workload_key, device_key, candidate_key, owner)
            return False
        return True

    def release(
        self,
        workload_key: str,
        device_key: str,
        candidate_key: str,
        owner: str | None = None,
        *,
        wait_s: float | None = None,
    ) -> None:
        """Drop a claim without a record (the candidate was not measured).

        ``wait_s`` bounds how long a SQLite database locked by another writer
        is waited for (the connection's 60 s otherwise); past it the release
        fails with a DatabaseError. A clean-up after Ctrl-C passes a short
        one: a claim it cannot drop dies with its process, and the next job
        takes it over."""
        owner = owner or process_owner()
        bounded = wait_s is not None and self.is_sqlite and not self.in_memory
        with self._failing("releasing a claim in"), self._engine.begin() as conn:
            if bounded:
                conn.exec_driver_sql(f"PRAGMA busy_timeout = {max(0, int(wait_s * 1000))}")
            try:
                conn.execute(
                    _claims.delete().where(
                        _claims.c.workload_key == workload_key,
                        _claims.c.device_key == device_key,
                        _claims.c.candidate_key == candidate_key,
                        _claims.c.owner == owner,
                    )
                )
            finally:
                if bounded:
                    conn.exec_driver_sql(f"PRAGMA busy_timeout = {_SQLITE_WAIT_S * 1000}")

    def claims(self) -> list[dict[str, Any]]:
        with self._failing("reading"), self._engine.connect() as conn:
            return [dict(row._mapping) for row in conn.execute(sa.select(_claims))]

    # -- reading --------------------------------------------------------------------
    def _select(
        self,
        *,
        workload: Any = None,
        device: Any = None,
        status: str | Iterable[str] | None = None,
        study: str | None = None,
        op: str | None = None,
    ) -> sa.Select:
        query = sa.select(_records.c.id, _records.c.body)
        if workload is not None:
            query = query.where(_records.c.workload_key == key_of(workload))
        if device is not None:
            query = query.where(_records.c.device_key == key_of(device))
        if status is not None:
            statuses = [status] if isinstance(status, str) else list(status)
            query = query.where(_records.c.status.in_(statuses))
        if study is not None:
            query = query.where(_records.c.study == study)
        if op is not None:
            query = query.where(_records.c.op == op)
        return query

    def _read(self, query: sa.Select, *, skip_corrupt: bool = False) -> Iterator[Record]:
        """The records ``query`` selects; with ``skip_corrupt``, a record that
        cannot be read back is left out with a :class:`RecordWarning` naming
        its id (once per database object), else it raises :class:`RecordError`."""
        with self._failing("reading"), self._engine.connect() as conn:
            rows = conn.execute(query).all()
        for row in rows:
            try:
                yield _decode(row.id, row.body)
            except RecordError as err:
                if not skip_corrupt:
                    raise
                if row.id not in self._corrupt_seen:
                    self._corrupt_seen.add(row.id)
                    warnings.warn(f"{err}; skipped", RecordWarning, stacklevel=2)

    def records(
        self,
        *,
        workload: Any = None,
        device: Any = None,
        status: str | Iterable[str] | None = None,
        study: str | None = None,
        op: str | None = None,
        limit: int | None = None,
    ) -> list[Record]:
        """Records in the order they were written, filtered by workload (a
        Workload or its key), device (a Device, DeviceInfo or key), status,
        study or operator name."""
        query = self._select(workload=workload, device=device, status=status, study=study, op=op)
        query = query.order_by(_records.c.id)
        if limit is not None:
            query = query.limit(limit)
        return list(self._read(query, skip_corrupt=True))

    def __len__(self) -> int:
        with self._failing("reading"), self._engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(_records)).scalar())

    def get(self, record_id: int) -> Record:
        if not 0 < record_id <= _MAX_ID:  # an id past SQL's integers is no id
            raise RecordError(
                f"{record_id} is not a record id: ids are whole numbers from 1 to {_MAX_ID}"
            )
        query = sa.select(_records.c.id, _records.c.body).where(_records.c.id == record_id)
        found = list(self._read(query))
        if not found:
            raise RecordNotFoundError(f"no record {record_id} in {self.safe_url}")
        return found[0]

    def lookup(self, workload_key: str, device_key: str, candidate_key: str) -> Record | None:
        """The record of one candidate, if measured."""
        query = sa.select(_records.c.id, _records.c.body).where(
            _records.c.workload_key == workload_key,
            _records.c.device_key == device_key,
            _records.c.candidate_key == candidate_key,
        )
        found = list(self._read(query))
        return found[0] if found else None

    def measured(self, workload: Any, device: Any) -> dict[str, float | None]:
        """candidate key -> time (None for failures) of every recorded candidate."""
        query = sa.select(_records.c.candidate_key, _records.c.value_s).where(
            _records.c.workload_key == key_of(workload), _records.c.device_key == key_of(device)
        )
        with self._failing("reading"), self._engine.connect() as conn:
            return {row.candidate_key: row.value_s for row in conn.execute(query)}

    def workloads(self) -> list[tuple[str, str]]:
        """Every (workload key, device key) pair with records."""
        query = sa.select(_records.c.workload_key, _records.c.device_key).distinct()
        with self._failing("reading"), self._engine.connect() as conn:
            return sorted((r.workload_key, r.device_key) for r in conn.execute(query))

    # -- JSON Lines ---------------------------------------------------------------------
    def import_jsonl(self, source: str | os.PathLike[str] | IO[str]) -> tuple[int, int]:
        """Add the records of a JSON Lines file; returns (added, already present).
        Every line is checked before anything is written, so a corrupt file
        (its line number is named) adds nothing. A line is read only up to the
        bound of a record's JSON (:data:`laytune.layout.MAX_JSON_LENGTH`
        characters, 64 levels of nesting); a longer or deeper one is a
        :class:`RecordError`, like any other bad line."""
        lines = []
        with _lines_in(source) as stream:
            for number in itertools.count(1):
                line = stream.readline(MAX_JSON_LENGTH + 1)
                if not line:
                    break
                if len(line) > MAX_JSON_LENGTH:
                    unit = "bytes" if isinstance(line, bytes) else "characters"
                    raise RecordError(
                        f"line {number}: longer than {MAX_JSON_LENGTH} {unit}, more than any record"
                    )
                if isinstance(line, bytes):
                    try:
                        line = line.decode("utf-8")
                    except UnicodeDecodeError as err:
                        raise RecordError(f"line {number}: not UTF-8 text ({err})") from None
                if line.strip():
                    lines.append((number, line))
        records = []
        for number, line in lines:
            try:
                record = Record.from_json(line)
            except RecordError as err:
                raise RecordError(f"line {number}: {err}") from None
            records.append(replace(record, id=None))
        added = sum(self._insert(record)[1] for record in records)
        return added, len(records) - added


def _retry(create: Callable[[], T], attempts: int = 5) -> T:
    """Run ``create`` (tables, optuna's storage) again when it fails: another
    process may have created the same tables or version rows between our
    check and our write (SQLite has no lock to take first). A real error
    fails every attempt and is raised."""
    for attempt in range(attempts):
        try:
            return create()
        except (SQLAlchemyError, RuntimeError):
            if attempt == attempts - 1:
                raise
            time.sleep(0.1 * (attempt + 1))
    raise AssertionError("unreachable")


def _claim_where(record: Record) -> tuple[Any, ...]:
    return (
        _claims.c.workload_key == record.workload_key,
        _claims.c.device_key == record.device_key,
        _claims.c.candidate_key == record.candidate.key,
    )


def _read_only_uri(path: str) -> str:
    """The URI that opens the SQLite file at ``path`` read-only: SQLite then
    refuses every write, and never creates the file or switches its journal."""
    return Path(path).expanduser().resolve().as_uri() + "?mode=ro"


def _stored_version(conn: sa.Connection) -> str | None:
    """The schema version a database's meta table holds (None: no row)."""
    row = conn.execute(sa.select(_meta.c.value).where(_meta.c.name == "schema_version")).first()
    return None if row is None else row.value


@functools.lru_cache(maxsize=4096)
def _decode(record_id: int, body: str) -> Record:
    """The record stored as ``body`` under ``record_id``; records are values,
    so one read again (a plan queries the same workloads' records many
    times) is the one decoded before, from a bounded cache."""
    try:
        record = Record.from_json(body)
    except RecordError as err:
        raise RecordError(f"record {record_id} is corrupt: {err}") from None
    return record.with_id(record_id)


def error_reason(err: BaseException, url: str | None = None) -> str:
    """The first line of what the database driver said about ``err``: the
    reason a DatabaseError gives. A wrapper's own words are passed over for
    the error it wraps: optuna's StorageInternalError ("invalid data in the
    commit") over SQLAlchemy's, over the driver's ("database or disk is full").
    Given the database's ``url``, a SQLite file's full disk also says how
    much room is left where (``... (0 bytes free on the disk holding /data)``)."""
    cause: BaseException | None = err
    seen = set()
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if getattr(cause, "orig", None) is not None:  # SQLAlchemy's, around the driver's
            cause = cause.orig  # type: ignore[attr-defined]
            break
        if isinstance(cause, sqlite3.Error | OSError) or cause.__cause__ is None:
            break
        cause = cause.__cause__
    text = str(cause or err).strip().splitlines()
    reason = text[0] if text else type(cause or err).__name__
    code = getattr(cause, "sqlite_errorcode", None)
    if url is not None and code is not None and code & 0xFF == sqlite3.SQLITE_FULL:
        reason += _room_left(url)
    return reason


def _room_left(url: str) -> str:
    """`` (N bytes free on the disk holding FOLDER)`` for a SQLite file's URL."""
    try:
        path = sa.engine.make_url(url).database
    except sa.exc.ArgumentError:
        return ""
    if not path or path == ":memory:":
        return ""
    folder = Path(path).expanduser().resolve().parent
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return ""
    room = f"{free} bytes" if free < 1 << 20 else f"{free / (1 << 20):.1f} MiB"
    return f" ({room} free on the disk holding {folder})"


class _TakeTurns(sa.pool.StaticPool):
    """The one connection of an in-memory SQLite database, checked out by one
    thread at a time: a thread's transaction never interleaves with another's
    on the shared connection (where one's rollback would undo the other's
    writes). A thread that asks again before giving it back would wait for
    itself: that raises instead."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._turn = threading.Lock()
        self._holder: int | None = None

    def _do_get(self) -> Any:
        if self._holder == threading.get_ident():
            raise DatabaseError("an in-memory database used twice at once by one thread")
        self._turn.acquire()
        self._holder = threading.get_ident()
        try:
            return super()._do_get()
        except BaseException:
            self._do_return_conn(None)
            raise

    def _do_return_conn(self, record: Any) -> None:
        self._holder = None
        self._turn.release()


#: Seconds a SQLite connection waits for another writer's lock.
_SQLITE_WAIT_S = 60


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


@contextlib.contextmanager
def _lines_in(source: str | os.PathLike[str] | IO[str]) -> Iterator[IO[Any]]:
    """A text stream as given, or a file opened as bytes (decoded line by line,
    so that a bad byte is blamed on its line)."""
    if hasattr(source, "read"):
        yield source  # type: ignore[misc]
        return
    try:
        stream = open(source, "rb")  # noqa: SIM115 (closed below, after the FileNotFoundError)
    except FileNotFoundError:
        raise RecordError(f"no such file: {os.fspath(source)}") from None  # type: ignore[arg-type]
    with stream:
        yield stream


def open_database(
    url: str | os.PathLike[str] | RecordStore = DEFAULT_URL,
    *,
    create: bool = True,
    read_only: bool = False,
) -> RecordStore:
    """Open (creating when needed) a records database.

    ``url`` is an SQLAlchemy URL (``sqlite:///laytune.db``, ``sqlite://`` in
    memory, ``postgresql+psycopg://user:pass@host/db``) or a plain file path
    (a SQLite file). An open :class:`RecordStore` (a :class:`Database`, or a
    store of your own) is returned as is. With ``create=False`` a database
    that does not exist (or holds no laytune tables) raises
    :class:`~laytune.exceptions.DatabaseNotFoundError` and nothing is created.

    ``read_only=True`` (implies ``create=False``) is how the commands that
    only read open a database: nothing is written to it, not even its
    journal mode (a SQLite file is opened with ``mode=ro``, so SQLite
    itself refuses writes; on a server no table is created), and a schema
    version this laytune cannot read is refused first.
    """
    if isinstance(url, RecordStore):
        return url
    return Database(url, create=create, read_only=read_only)
