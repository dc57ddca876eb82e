"""A finished job's workers stay warm for the next job of the process.

Each job used to start a build worker per core and a measuring worker, about
a second of CPU each, and close them at its end. Now a job that ends normally
leaves them to the next job on the same device and settings, for
``keep_seconds()``; anything else closes them, and none outlives the process.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

import laytune
from laytune import ops
from laytune.exceptions import ConfigError
from laytune.runners import (
    Device,
    MeasureConfig,
    keep_seconds,
    keep_workers,
    local_workers,
    release_workers,
)
from tests import jobs

WORKLOAD = ops.copy((32, 32))


#: Workers of other owners (a session's builder, say), there before the test.
_OTHERS: set[int] = set()


def _workers() -> set[int]:
    """The live worker processes of this process (loky's and the measuring
    one) but those that were there before the test."""
    workers = {
        pid
        for pid, command in jobs.live_children().items()
        if "loky" in command or "spawn_main" in command
    }
    return workers - _OTHERS


def _until_gone(pids: set[int], timeout_s: float = 15.0) -> set[int]:
    deadline = time.monotonic() + timeout_s
    while (alive := pids & _workers()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive


@pytest.fixture(autouse=True)
def no_workers_kept(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Start and end with no kept workers; every job here compiles (its
    build workers start)."""
    monkeypatch.setenv("LAYTUNE_BUILD_CACHE", "0")
    release_workers()  # closes what it kept before it returns
    _OTHERS.clear()
    _OTHERS.update(_workers())
    yield
    _OTHERS.clear()
    keep_workers(None)
    release_workers()


def _tune(device: Device, db: str, **options: object) -> laytune.TuneResult:
    opts = laytune.TuneOptions(trials=2, batch=2, strategy="random", warm_start=0, **options)
    return laytune.tune(WORKLOAD, device, options=opts, database=db, progress=False)


def test_the_next_job_takes_the_warm_workers_and_release_closes_them(
    laytune_device: Device, tmp_path: object
) -> None:
    db = f"sqlite:///{tmp_path}/kept.db"
    _tune(laytune_device, db)
    first = _workers()
    assert first, "the job started no worker"
    _tune(laytune_device, db, seed=1)
    assert _workers() == first, "the second job started its own workers"
    release_workers()
    assert _until_gone(first) == set()


def test_other_measurement_settings_get_fresh_workers_and_the_old_ones_close(
    laytune_device: Device, tmp_path: object
) -> None:
    db = f"sqlite:///{tmp_path}/other.db"
    _tune(laytune_device, db)
    first = _workers()
    _tune(laytune_device, db, measure=MeasureConfig(repeats=3))
    assert _until_gone(first) == set()
    assert _workers(), "the second job's workers are kept"


def test_workers_close_when_kept_too_long_or_not_at_all(
    laytune_device: Device, tmp_path: object
) -> None:
    db = f"sqlite:///{tmp_path}/short.db"
    keep_workers(0.5)
    assert keep_seconds() == 0.5
    _tune(laytune_device, db)
    assert _until_gone(_workers()) == set()  # no job came within half a second
    keep_workers(0)
    _tune(laytune_device, db, seed=1)
    assert _workers() == set()  # closed with the job


def test_a_block_left_by_an_exception_closes_its_workers(laytune_device: Device) -> None:
    with pytest.raises(KeyboardInterrupt), local_workers(laytune_device) as (builder, _):
        builder.warm_up()
        started = _workers()
        assert started
        raise KeyboardInterrupt
    assert _until_gone(started) == set()
    with local_workers(laytune_device) as (again, _):
        assert again is not builder  # nothing was kept


def test_a_bad_setting_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAYTUNE_KEEP_WORKERS_S", "soon")
    with pytest.raises(ConfigError, match="LAYTUNE_KEEP_WORKERS_S"):
        keep_seconds()
    monkeypatch.setenv("LAYTUNE_KEEP_WORKERS_S", "-1")
    with pytest.raises(ConfigError, match="0 or more"):
        keep_seconds()
    with pytest.raises(ConfigError, match="keep_workers"):
        keep_workers(-2)
    monkeypatch.setenv("LAYTUNE_KEEP_WORKERS_S", "0")
    assert keep_seconds() == 0


def test_a_forked_child_leaves_the_parents_kept_workers_alone(
    laytune_device: Device, tmp_path: object
) -> None:
    db = f"sqlite:///{tmp_path}/fork.db"
    _tune(laytune_device, db)
    kept = _workers()
    assert kept
    child = os.fork()
    if child == 0:  # the child: its release must not close what its parent keeps
        try:
            release_workers()
        finally:
            os._exit(0)
    _, status = os.waitpid(child, 0)
    assert status == 0
    assert _workers() == kept
    _tune(laytune_device, db, seed=1)
    assert _workers() == kept  # still the parent's, warm
