"""A stop at any step of proposing a batch gives back everything the job holds.

A job proposes a batch candidate by candidate: it creates the candidate's
optuna trial (RUNNING, naming its owner), lets the space suggest on it,
claims the candidate in the records database, and lowers it. A stop
(Ctrl-C, or the program's SIGTERM, which raises the same KeyboardInterrupt)
may land in any of those steps, or in the build of the batch just proposed,
with earlier candidates of the batch already claimed. Here a stop is raised
at each of those points in turn, on the first candidate and on the third;
afterwards the database must hold no claim and no RUNNING trial, or other
jobs would skip those candidates (another host, for the claim's lease of an
hour) and the study would carry trials that never end.

The builder and runner are stand-ins that must never be reached: every stop
lands before a kernel is built or measured, so no worker process starts.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
import sqlalchemy as sa

import laytune
from laytune.records import open_database
from laytune.runners import BaseBuilder, BaseRunner, Device
from laytune.search import TuneOptions
from tests.search import worker


class _Stop:
    """Raises KeyboardInterrupt on the ``at``-th call of a wrapped step."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.calls = 0
        self.fired = False

    def due(self) -> bool:
        self.calls += 1
        return self.calls == self.at

    def __call__(self) -> None:
        self.fired = True
        raise KeyboardInterrupt


class _Unreached(BaseBuilder, BaseRunner):
    """Builder and runner of a job stopped while it proposes its first batch."""

    def __init__(self, device: Device, stop: _Stop | None = None) -> None:
        self._device = device
        self.stop = stop

    @property
    def device(self) -> Device:
        return self._device

    def submit(self, batch: Any, **_: Any) -> Any:
        if self.stop is not None and self.stop.due():
            self.stop()  # the batch was proposed whole: every item is held
        return super().submit(batch)

    def build(self, batch: Any) -> Any:
        raise AssertionError("no stop came: the job went on to build")

    def run(self, batch: Any, *, abandon_above_s: float | None = None) -> Any:
        raise AssertionError("no stop came: the job went on to measure")


def _after(call: Callable[..., Any], stop: _Stop) -> Callable[..., Any]:
    """``call``, then the stop on its ``at``-th call (its write has committed)."""

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        done = call(*args, **kwargs)
        if stop.due():
            stop()
        return done

    return wrapped


def _before(call: Callable[..., Any], stop: _Stop) -> Callable[..., Any]:
    """The stop on ``call``'s ``at``-th call, before it runs."""

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if stop.due():
            stop()
        return call(*args, **kwargs)

    return wrapped


#: where the stop lands -> how to put it there
STEPS = {
    "the trial's write committed": lambda mp, db, stop: mp.setattr(
        optuna.study.Study, "add_trial", _after(optuna.study.Study.add_trial, stop)
    ),
    "between the trial and its claim": lambda mp, db, stop: mp.setattr(
        db, "claim", _before(db.claim, stop)
    ),
    "the claim's write committed": lambda mp, db, stop: mp.setattr(
        db, "claim", _after(db.claim, stop)
    ),
    "right after the claim, lowering": lambda mp, db, stop: mp.setattr(
        laytune.search._tune, "lower", _before(laytune.search._tune.lower, stop)
    ),
}


def _stopped_job(url: str, device: Device, place: Callable[..., Any] | None, at: int, mp):
    db = open_database(url)
    stop = _Stop(at)
    stand_in = _Unreached(device, None if place is not None else stop)
    if place is not None:
        place(mp, db, stop)
    result = laytune.tune(
        worker.WORKLOAD,
        device,
        database=db,
        options=TuneOptions(
            trials=8, batch=4, strategy="random", space=worker.OPTIONS, warm_start=0
        ),
        progress=False,
        builder=stand_in,
        runner=stand_in,
    )
    mp.undo()
    assert stop.fired, f"the job made only {stop.calls} such calls"
    assert result.stop_reason.startswith("interrupted"), result.stop_reason
    return db, result


@pytest.mark.parametrize("at", [1, 3], ids=["first candidate", "third candidate"])
@pytest.mark.parametrize("step", list(STEPS))
def test_a_stop_while_proposing_leaves_no_claim_and_no_running_trial(
    step: str, at: int, tmp_path: Path, device: Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'stopped.db'}"
    _nothing_held(*_stopped_job(url, device, STEPS[step], at, monkeypatch), at)


@pytest.fixture
def own_postgres(postgres_url: str) -> Iterator[str]:
    """A database of its own on the session's PostgreSQL server."""
    name = f"stopped_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield postgres_url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.mark.slow
def test_a_stop_while_proposing_leaves_other_hosts_nothing_to_skip_on_postgresql(
    own_postgres: str, device: Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a shared server another host skips a claimed candidate for the
    claim's lease (an hour): the stopped job must leave no claim there."""
    step = STEPS["the claim's write committed"]
    _nothing_held(*_stopped_job(own_postgres, device, step, 3, monkeypatch), 3)


def _nothing_held(db: Any, result: Any, at: int) -> None:
    study = optuna.load_study(study_name=result.study_name, storage=db.optuna_storage())
    states = [t.state for t in study.trials]
    assert len(states) >= at  # the job had created trials to give back
    assert db.claims() == []
    assert optuna.trial.TrialState.RUNNING not in states, states
    assert len(db) == 0  # nothing was measured, so nothing is recorded


def test_a_stop_while_the_proposed_batch_builds_gives_the_whole_batch_back(
    tmp_path: Path, device: Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, result = _stopped_job(f"sqlite:///{tmp_path / 'built.db'}", device, None, 1, monkeypatch)
    study = optuna.load_study(study_name=result.study_name, storage=db.optuna_storage())
    states = [t.state for t in study.trials]
    assert states.count(optuna.trial.TrialState.FAIL) == 4, states  # the batch of 4
    assert db.claims() == []
    assert optuna.trial.TrialState.RUNNING not in states, states
