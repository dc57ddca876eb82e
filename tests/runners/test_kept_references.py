"""A workload's reference is computed once per runner: a worker started after
a hang maps the one its predecessor kept instead of computing it again."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from laytune.runners import Builder, Device, MeasureConfig, RunInput, Runner
from laytune.runners._results import ErrorKind
from laytune.runners._worker import keep_references, kept_references


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
