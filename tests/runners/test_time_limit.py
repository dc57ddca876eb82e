"""The time limit bounds each step of a candidate, not the whole of it: the
worker says between steps that it is still making progress, outside every
timed interval, so a large tensor's many long launches are not a hang."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from laytune.runners import Builder, Device, MeasureConfig, RunInput, Runner
from laytune.runners._measure import _timed_repeats
from laytune.runners._results import ErrorKind


class _Event:
    def get_profiling_info(self, which: int) -> int:
        return 0


class _Recorder:
    """An enqueuer that writes down what it is asked, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def launch(self, stage: str, kernel: object, launch: object) -> _Event:
        self.calls.append("launch")
        return _Event()

    def finish(self) -> None:
        self.calls.append("finish")

    def flush(self, buffer: object, nbytes: int) -> None:
        self.calls.append("flush")

    def check(self, events: object) -> None:
        pass

    def beat(self) -> None:
        self.calls.append("beat")


def test_a_beat_comes_between_steps_never_inside_a_timed_one() -> None:
    recorder = _Recorder()
    config = MeasureConfig(warmup=2, repeats=3)
    _timed_repeats(recorder, "compute", [(None, None)], config, (None, 8), extend=False)  # type: ignore[arg-type]
    assert recorder.calls == [
        "beat", "launch", "launch", "finish",  # the warm-ups: one step
        *["beat", "flush", "launch", "finish"] * 3,  # each timed repeat, flushed first
    ]  # fmt: skip


@pytest.mark.slow
def test_a_candidate_longer_than_the_limit_in_short_steps_is_measured(
    device: Device, builder: Builder, kit: SimpleNamespace, tmp_path: Path
) -> None:
    (build,) = builder.build([kit.scale_program("many_steps")])
    # About 2.5 s of repeats of a short kernel, under a limit of 1 s per step.
    config = MeasureConfig(
        warmup=1, repeats=3, clock="wall", min_total_time_s=2.5, max_repeats=10**7, time_limit_s=1.0
    )
    with Runner(device, config) as runner:
        (result,) = runner.run([RunInput(build, kit.ScaleWorkload(tag="steps"))])
    assert result.error_kind is ErrorKind.NONE, result.error_message
    assert result.measure_seconds > config.time_limit_s
    assert sum(result.wall_times_s) >= 2.5
