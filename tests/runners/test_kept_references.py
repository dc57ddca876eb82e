"""A workload's reference is computed once per runner: a worker started after
a hang maps the one its predecessor kept instead of computing it again."""

from __future__ import annotations

import gc
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import psutil
import pytest

from laytune.runners import Builder, Device, MeasureConfig, RunInput, Runner
from laytune.runners._results import ErrorKind
from laytune.runners._worker import (
    KEPT_PREFIX,
    keep_references,
    kept_references,
    sweep_orphan_kept_folders,
)
from tests import jobs


def test_kept_references_come_back_read_only_and_equal(tmp_path: Path) -> None:
    references = {"Y": np.arange(12, dtype=np.float32).reshape(3, 4), "Z": np.ones(5)}
    assert kept_references(str(tmp_path), "w", 7) is None
    keep_references(str(tmp_path), "w", 7, references)
    back = kept_references(str(tmp_path), "w", 7)
    assert back is not None and list(back) == ["Y", "Z"]
    for name, array in references.items():
        np.testing.assert_array_equal(back[name], array)
        assert back[name].dtype == array.dtype and not back[name].flags.writeable
    assert kept_references(str(tmp_path), "w", 8) is None  # another seed: other inputs
    assert kept_references(str(tmp_path), "v", 7) is None
    assert kept_references(None, "w", 7) is None
    keep_references(None, "w", 7, references)  # a runner without a folder keeps nothing


def test_a_kept_reference_is_never_written_twice(tmp_path: Path) -> None:
    keep_references(str(tmp_path), "w", 1, {"Y": np.zeros(3)})
    keep_references(str(tmp_path), "w", 1, {"Y": np.ones(3)})
    back = kept_references(str(tmp_path), "w", 1)
    assert back is not None
    np.testing.assert_array_equal(back["Y"], np.zeros(3))
    assert len(list(tmp_path.iterdir())) == 1  # no scratch folder left behind


def test_the_folders_of_ended_processes_are_swept_and_no_other(tmp_path: Path) -> None:
    # A process killed outright (SIGKILL) cannot remove its runner's folder:
    # the next runner of any process does.
    dead_pid = jobs.ended_pid()
    orphan = tmp_path / f"{KEPT_PREFIX}{dead_pid}-abc"
    (orphan / "digest").mkdir(parents=True)
    (orphan / "digest" / "0.npy").write_bytes(b"x" * 10)
    live = tmp_path / f"{KEPT_PREFIX}{os.getpid()}-def"
    live.mkdir()
    unnamed = tmp_path / f"{KEPT_PREFIX}xyz"  # the old naming, without a pid: not ours to judge
    unnamed.mkdir()
    other = tmp_path / "someone-else"
    other.mkdir()
    assert sweep_orphan_kept_folders(str(tmp_path)) == [str(orphan)]
    assert not orphan.exists()
    assert live.is_dir() and unnamed.is_dir() and other.is_dir()
    assert sweep_orphan_kept_folders(str(tmp_path / "missing")) == []


def test_a_runner_dropped_without_close_removes_its_folder_and_worker(
    device: Device, builder: Builder, kit: SimpleNamespace
) -> None:
    (good,) = builder.build([kit.scale_program("kept_dropped")])
    runner = Runner(device, MeasureConfig(warmup=1, repeats=1))
    (result,) = runner.run([RunInput(good, kit.ScaleWorkload())])
    assert result.error_kind is ErrorKind.NONE
    kept, worker_pid = runner._kept, runner.worker_pid
    assert kept is not None and Path(kept).is_dir()
    assert Path(kept).name.startswith(f"{KEPT_PREFIX}{os.getpid()}-")
    assert worker_pid is not None and psutil.pid_exists(worker_pid)
    del runner
    gc.collect()
    assert not Path(kept).exists()
    assert not psutil.pid_exists(worker_pid)  # its measuring process went with it


@pytest.mark.slow
def test_the_worker_after_a_hang_reuses_the_reference(
    device: Device, builder: Builder, kit: SimpleNamespace, tmp_path: Path
) -> None:
    log = tmp_path / "reference.log"
    workload = kit.ReferenceCountingWorkload(tag=f"ref{tmp_path.name}", log_path=str(log))
    good, hang = builder.build([kit.scale_program("kept_good"), kit.hang_program()])
    config = MeasureConfig(warmup=1, repeats=2, time_limit_s=2.0)
    with Runner(device, config) as runner:
        results = runner.run([RunInput(b, workload) for b in (good, hang, good)])
        starts = runner.worker_starts
        kept = runner._kept
    assert [r.error_kind for r in results] == [ErrorKind.NONE, ErrorKind.TIMEOUT, ErrorKind.NONE]
    assert results[2].max_error == 0.0  # checked against the kept reference
    assert starts == 2
    assert len(log.read_text().splitlines()) == 1
    assert kept is not None and not Path(kept).exists()  # close removed the folder
