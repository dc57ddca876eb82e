"""SIGKILL at random moments of building and measuring, four times, then resume.

A tuning job (``python -m tests.search.worker``: every candidate of a space of
140, two per batch) is killed with SIGKILL, as the OOM killer would, at a
random moment once its build workers exist, so the kill lands while it
starts its workers, builds, measures or writes. After each kill no process
of the job may live 10 s later and every record committed before is still
there, unchanged. Then the same study resumes in this process and finishes:
every candidate of the space is recorded exactly once (nothing a killed job
claimed is lost to the others, nothing is measured twice), and the optuna
study goes on from where it was, with no trial left running.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from laytune.records import open_database
from laytune.runners import default_device
from laytune.space import SearchSpace
from tests import jobs
from tests.search import worker

pytestmark = pytest.mark.slow

KILLS = 4  # two while the build workers start and build, two while measuring
#: Kills land up to this long after their anchor: the start of the first
#: build worker (its start-up, the first builds) for even kills, that of the
#: measuring worker (its start-up, measuring, writing records, building the
#: next batches) for odd ones.
WINDOW_S = 3.0


def _start(url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.search.worker", url, "exhaustive", "1000", "2", "killed"],
        cwd=jobs.ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=jobs.compiling_env(),  # it compiles: its build workers start
    )


def _started(job: subprocess.Popen[str], what: str) -> bool:
    return any(what in jobs.describe(p) for p in jobs.session_processes(job.pid))


def test_killed_four_times_at_random_then_resumed_nothing_lost_or_doubled(tmp_path: Path) -> None:
    db = tmp_path / "killed.db"
    url = f"sqlite:///{db}"
    rng = random.Random()
    kept: dict[int, str] = {}
    killed_at = []
    for kill in range(KILLS):
        job = _start(url)
        try:
            if kill % 2 == 0:
                anchor, process = "the build workers started", "loky.backend.popen_loky_posix"
            else:
                anchor, process = "the measuring worker started", "multiprocessing.spawn"
            jobs.wait_until(lambda job=job, process=process: _started(job, process), job, 120)
            moment = rng.uniform(0.0, WINDOW_S)
            time.sleep(moment)
            if job.poll() is not None:  # the space ran out first: nothing to kill
                break
            job.send_signal(signal.SIGKILL)
            job.wait()
            killed_at.append(f"{moment:.2f} s after {anchor}")
            left = jobs.wait_for_session_end(job.pid, 10)
        finally:
            jobs.kill_all([job])
        where = f"kill {kill} at {moment:.2f} s after {anchor}"
        assert left == [], f"{where}: processes alive 10 s later: {left}"
        if db.exists():
            assert jobs.integrity(db) == "ok", where
            now = jobs.bodies(db)
            assert all(now.get(i) == body for i, body in kept.items()), f"{where}: records lost"
            kept = now
    assert len(killed_at) == KILLS, f"the space ran out after {killed_at}"
    storage = open_database(url).optuna_storage()
    trials_before = len(optuna.load_study(study_name=worker.STUDY, storage=storage).trials)

    worker.main(url, "exhaustive", 1000, 2, "killed")

    with open_database(url) as database:
        records = database.records()
        claims = database.claims()
    space = SearchSpace(worker.WORKLOAD, default_device().info, worker.KILLED)
    keys = [r.candidate.key for r in records]
    assert len(keys) == len(set(keys)), "a candidate was recorded twice"
    assert set(keys) == {c.key for c in space.enumerate()}, "a candidate was lost"
    assert all(jobs.bodies(db).get(i) == body for i, body in kept.items())
    assert claims == []
    study = optuna.load_study(study_name=worker.STUDY, storage=storage)
    assert len(study.trials) > trials_before
    assert not study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    print(f"\n{len(kept)} records kept through kills at", *killed_at, sep="\n  ")
