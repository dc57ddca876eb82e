"""The RecordStore contract, run over every implementation: Database on a
SQLite file, on in-memory SQLite and on PostgreSQL.

A new store joins by adding a parameter to the ``store`` fixture.
"""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from laytune.exceptions import RecordError
from laytune.layout import pad_rows
from laytune.records import Record, RecordStore, open_database
from tests import jobs
from tests.records.samples import DEVICE, OTHER, WORKLOAD, candidate, record


@pytest.fixture
def fresh_postgres(postgres_url: str) -> Iterator[str]:
    """A database of its own on the session's PostgreSQL server."""
    name = f"store_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield postgres_url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(
    params=[
        "sqlite-file",
        "sqlite-memory",
        pytest.param("postgresql", marks=[pytest.mark.slow, pytest.mark.xdist_group("postgres")]),
    ]
)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RecordStore]:
    if request.param == "sqlite-file":
        url = f"sqlite:///{tmp_path / 'r.db'}"
    elif request.param == "sqlite-memory":
        url = "sqlite://"
    else:
        url = request.getfixturevalue("fresh_postgres")
    with open_database(url) as opened:
        assert isinstance(opened, RecordStore)
        yield opened


def test_a_record_round_trips_with_growing_ids(store: RecordStore) -> None:
    first = store.add(record(candidate("pad"), 2e-6, trial=3))
    second = store.add(record(candidate("permute"), 1e-6))
    assert first.id is not None and second.id is not None and second.id > first.id
    back = store.get(first.id)
    assert back == first
    assert back.candidate.layout("X") == pad_rows((8, 8), 4)
    assert back.trial == 3 and back.event_times_s == (2e-6,) * 3
    with pytest.raises(RecordError, match="no record 999"):
        store.get(999)


def test_the_same_candidate_is_never_recorded_twice(store: RecordStore) -> None:
    first = store.add(record(candidate("permute"), 1e-6))
    again = store.add(record(candidate("permute"), 5e-6))
    assert again.id == first.id and again.value_s == 1e-6
    assert len(store) == 1
    elsewhere = store.add(record(candidate("permute"), 5e-6, device="dev1"))
    assert elsewhere.id != first.id and len(store) == 2


def test_records_are_filtered_and_in_write_order(store: RecordStore) -> None:
    written = [
        store.add(record(candidate("identity"), 4e-6)),
        store.add(record(candidate("permute"), None, status="wrong_result", max_error=3.0)),
        store.add(record(candidate("identity"), 2e-6, workload=OTHER.key, study="t")),
        store.add(record(candidate("pad"), None, status="build", device="dev1")),
    ]
    assert store.records() == written
    assert store.records(workload=WORKLOAD) == [written[0], written[1], written[3]]
    assert store.records(workload=OTHER.key) == [written[2]]
    assert store.records(device="dev1") == [written[3]]
    assert store.records(status="ok") == [written[0], written[2]]
    assert store.records(status=["build", "wrong_result"]) == [written[1], written[3]]
    assert store.records(study="t") == [written[2]]
    assert store.records(op="transpose", limit=2) == written[:2]
    assert store.records(op="matmul") == []
    assert store.lookup(WORKLOAD.key, DEVICE, candidate("permute").key) == written[1]
    assert store.lookup(WORKLOAD.key, "dev1", candidate("permute").key) is None
    assert OTHER.key < WORKLOAD.key  # sorted by key: 8x16 before 8x8
    assert store.workloads() == [
        (OTHER.key, DEVICE),
        (WORKLOAD.key, DEVICE),
        (WORKLOAD.key, "dev1"),
    ]


def test_best_is_the_fastest_verified_record(store: RecordStore) -> None:
    store.add(record(candidate("identity"), 4e-6))
    store.add(record(candidate("permute"), None, status="wrong_result", max_error=3.0))
    store.add(record(candidate("pad"), 2e-6))
    store.add(record(candidate("pad", block=2), None, status="build"))
    best = store.best(WORKLOAD, DEVICE)
    assert best is not None and best.candidate == candidate("pad")
    assert store.best_candidate(WORKLOAD.key, DEVICE) == candidate("pad")
    assert store.best(WORKLOAD, "other-device") is None
    assert store.measured(WORKLOAD, DEVICE) == {
        candidate("identity").key: 4e-6,
        candidate("permute").key: None,
        candidate("pad").key: 2e-6,
        candidate("pad", block=2).key: None,
    }


def test_best_records_gives_one_per_workload_and_device(store: RecordStore) -> None:
    store.add(record(candidate("identity"), 4e-6))
    store.add(record(candidate("pad"), 3e-6))
    store.add(record(candidate("identity"), 1e-6, device="dev1"))
    store.add(record(candidate("pad"), 9e-6, device="dev1"))
    tie = store.add(record(candidate("identity"), 5e-6, workload=OTHER.key))
    store.add(record(candidate("pad"), 5e-6, workload=OTHER.key))  # as fast, written later
    best = [(r.workload_key, r.device_key, r.value_s) for r in store.best_records()]
    assert best == [  # by workload key, then device key
        (OTHER.key, DEVICE, 5e-6),
        (WORKLOAD.key, DEVICE, 3e-6),
        (WORKLOAD.key, "dev1", 1e-6),
    ]
    assert store.best(OTHER, DEVICE) == tie
    assert [r.device_key for r in store.best_records(device="dev1")] == ["dev1"]


def test_the_queries_agree_with_the_ones_built_on_records(store: RecordStore) -> None:
    """A backend may answer the queries itself (Database: in SQL); the answers
    are those of RecordStore's own, built on ``records``."""
    for k, (x, value) in enumerate([("identity", 4e-6), ("pad", 2e-6), ("permute", None)]):
        status = "ok" if value else "timeout"
        store.add(record(candidate(x), value, status=status, device=f"dev{k % 2}"))
        store.add(record(candidate(x, block=2), value and value * 2, status=status))
    base = RecordStore
    for workload, device in [(WORKLOAD, "dev0"), (WORKLOAD.key, "dev1"), (OTHER, "dev0")]:
        assert store.best(workload, device) == base.best(store, workload, device)
        assert store.measured(workload, device) == base.measured(store, workload, device)
    assert store.best_records() == base.best_records(store)
    assert store.best_records(op="transpose") == base.best_records(store, op="transpose")
    assert store.workloads() == base.workloads(store)
    assert len(store) == base.__len__(store)
    key = candidate("pad").key
    assert store.lookup(WORKLOAD.key, "dev1", key) == base.lookup(store, WORKLOAD.key, "dev1", key)


def test_claims_keep_two_workers_off_one_candidate(store: RecordStore) -> None:
    key = candidate("pad").key
    assert store.claim(WORKLOAD.key, DEVICE, key, "hostA:1")
    assert store.claim(WORKLOAD.key, DEVICE, key, "hostA:1")  # its own claim
    assert not store.claim(WORKLOAD.key, DEVICE, key, "other-host:2")
    store.release(WORKLOAD.key, DEVICE, key, "other-host:2")  # not its claim: nothing happens
    assert not store.claim(WORKLOAD.key, DEVICE, key, "other-host:2")
    store.release(WORKLOAD.key, DEVICE, key, "hostA:1")
    assert store.claim(WORKLOAD.key, DEVICE, key, "other-host:2")
    store.add(record(candidate("pad"), 1e-6))  # the record's transaction drops the claim
    assert not store.claim(WORKLOAD.key, DEVICE, key, "hostA:1")  # recorded already


def test_a_dead_process_claim_is_taken_over(store: RecordStore) -> None:
    owner = f"{socket.gethostname()}:{jobs.ended_pid()}"
    key = candidate("permute").key
    assert store.claim(WORKLOAD.key, DEVICE, key, owner)
    assert store.claim(WORKLOAD.key, DEVICE, key, "me:1")
    assert not store.claim(WORKLOAD.key, DEVICE, key, "far-host:3")  # me:1 holds it now


def test_threads_racing_for_a_candidate_claim_it_once(store: RecordStore) -> None:
    key = candidate("identity").key
    start = threading.Barrier(6)
    won: list[str] = []

    def race(owner: str) -> None:
        start.wait()
        if store.claim(WORKLOAD.key, DEVICE, key, owner):
            won.append(owner)

    threads = [threading.Thread(target=race, args=(f"far-host:{k}",)) for k in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1
    adds = [record(candidate("identity"), 1e-6 * (k + 1)) for k in range(6)]
    stored: list[Record] = []
    threads = [threading.Thread(target=lambda r=r: stored.append(store.add(r))) for r in adds]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(store) == 1 and len({r.id for r in stored}) == 1


def test_a_study_lives_beside_the_records(store: RecordStore) -> None:
    import optuna

    storage = store.optuna_storage()
    assert store.optuna_storage() is storage
    study = optuna.create_study(study_name="beside", storage=storage)
    study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=2)
    again = optuna.load_study(study_name="beside", storage=store.optuna_storage())
    assert len(again.trials) == 2


def test_a_bounded_release_gives_up_on_a_locked_database_and_waits_again_after(
    tmp_path: Path,
) -> None:
    """A clean-up after Ctrl-C releases its claims with a short wait: while
    another writer holds the file's lock, the release fails within about
    that wait (not the connection's minute) with a DatabaseError, and the
    connection waits its full time again afterwards."""
    import sqlite3
    import time

    from laytune.exceptions import DatabaseError

    path = tmp_path / "locked.db"
    key = candidate("pad").key
    with open_database(f"sqlite:///{path}") as database:
        assert database.claim(WORKLOAD.key, DEVICE, key, "hostA:1")
        other = sqlite3.connect(path, timeout=0.1)
        try:
            other.execute("BEGIN IMMEDIATE")  # another writer's lock
            started = time.monotonic()
            with pytest.raises(DatabaseError, match="releasing a claim"):
                database.release(WORKLOAD.key, DEVICE, key, "hostA:1", wait_s=0.2)
            assert time.monotonic() - started < 5
        finally:
            other.rollback()
            other.close()
        database.release(WORKLOAD.key, DEVICE, key, "hostA:1", wait_s=0.2)  # unlocked: done
        assert database.claim(WORKLOAD.key, DEVICE, key, "other-host:2")
        with database._engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 60_000


def test_ending_optunas_session_lets_go_of_a_write_it_left_open(tmp_path: Path) -> None:
    """A write of the study cut short inside optuna's session holds the
    file's lock; ending the session (what a stop's clean-up does first)
    rolls it back, so the clean-up's own writes go through."""
    from laytune.exceptions import DatabaseError

    key = candidate("pad").key
    with open_database(f"sqlite:///{tmp_path / 'open.db'}") as database:
        storage = database.optuna_storage()
        storage.create_new_study([], "held")
        assert database.claim(WORKLOAD.key, DEVICE, key, "hostA:1")
        session = storage.scoped_session()
        session.execute(sa.text("UPDATE studies SET study_name = 'held' WHERE study_name = 'held'"))
        with pytest.raises(DatabaseError):  # the open write holds the lock
            database.release(WORKLOAD.key, DEVICE, key, "hostA:1", wait_s=0.1)
        database.end_optuna_session()
        database.release(WORKLOAD.key, DEVICE, key, "hostA:1", wait_s=0.1)
        assert database.claim(WORKLOAD.key, DEVICE, key, "other-host:2")
