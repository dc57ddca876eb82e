"""Step 6 of MeasureConfig: on a CPU device, a compute series timed while
other work kept runnable tasks waiting for the host's cores (Linux's CPU
pressure) is timed again, and the calmer series is kept."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from laytune import layout as L
from laytune import ops
from laytune.codegen import KernelProgram, lower
from laytune.exceptions import ConfigError
from laytune.runners import Builder, MeasureConfig, _measure
from laytune.runners._measure import (
    DeviceSession,
    PreparedWorkload,
    cpu_stall_us,
    measure_candidate,
)
from laytune.runners._results import RunResult
from laytune.space import Candidate

pytestmark = pytest.mark.xdist_group("runners")

SECOND = 1_000_000  # microseconds


def _measured(
    session: DeviceSession, builder: Builder, config: MeasureConfig, size: int = 24
) -> tuple[RunResult, KernelProgram]:
    workload = ops.matmul(size, size, size)
    identity = {b.name: L.identity(b.shape) for b in workload.buffers}
    program = lower(workload, Candidate.make(identity), session.device.info)
    (build,) = builder.build([program])
    assert build.ok and build.binary is not None, build.error_message
    inputs = workload.make_inputs(3)
    prepared = PreparedWorkload(workload.key, inputs, dict(workload.reference(inputs)))
    result = measure_candidate(session, program, build.binary, prepared, config)
    assert result.ok, result.error_message
    return result, program


def test_cpu_stall_us_reads_the_some_total_of_linux_pressure(tmp_path) -> None:
    pressure = tmp_path / "cpu"
    pressure.write_text(
        "some avg10=8.29 avg60=4.77 avg300=3.85 total=168238588\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    )
    assert cpu_stall_us(str(pressure)) == 168238588
    assert cpu_stall_us(str(tmp_path / "absent")) is None  # not Linux, or no PSI
    (tmp_path / "odd").write_text("some avg10=1.00\n")
    assert cpu_stall_us(str(tmp_path / "odd")) is None


@pytest.mark.parametrize("limit", [0.0, 1.5, -0.1])
def test_a_contention_limit_is_a_share_of_the_wall_time(limit: float) -> None:
    with pytest.raises(ConfigError, match="contention_limit"):
        MeasureConfig(contention_limit=limit)
    assert MeasureConfig(contention_limit=None).contention_limit is None
    assert MeasureConfig().contention_limit == 0.15


@pytest.mark.parametrize(
    ("stalls", "limit", "kept", "again"),
    [
        # the first series waited its whole window, the second none: the second is kept
        ((0, SECOND, SECOND, SECOND), 0.15, 0.0, True),
        # both waited: the first is kept, the second's times are the contended ones
        ((0, SECOND, SECOND, 2 * SECOND), 0.15, 1.0, True),
        # a calm series is timed once
        ((5, 5), 0.15, 0.0, False),
        # no limit: the share is told, nothing is timed again
        ((0, SECOND), None, 1.0, False),
    ],
)
def test_a_contended_series_is_timed_again_and_the_calmer_kept(
    monkeypatch: pytest.MonkeyPatch,
    session: DeviceSession,
    builder: Builder,
    stalls: tuple[int, ...],
    limit: float | None,
    kept: float,
    again: bool,
) -> None:
    readings = iter(stalls)
    monkeypatch.setattr(_measure, "cpu_stall_us", lambda: next(readings))
    config = MeasureConfig(warmup=1, repeats=4, measure_conversions=False, contention_limit=limit)
    result, program = _measured(session, builder, config)
    if not session.device.info.is_cpu:  # a GPU's kernels do not share the host's cores
        assert result.contention is None and result.contended_event_times_s == ()
        return
    assert next(readings, None) is None  # every reading taken, none more
    assert result.contention == kept
    assert len(result.event_times_s) == config.repeats
    contended = len(result.contended_event_times_s)
    assert contended == (config.repeats if again else 0)
    compute = len(program.compute)
    assert result.launches.compute == compute + (config.warmup + config.repeats) * compute + (
        (config.warmup + contended) * compute if again else 0
    )
    assert result.launches.kernels == config.launch_count(
        len(program.pack), compute, len(program.unpack), config.repeats, contended_repeats=contended
    )
    assert result.to_json()["contention"] == kept
    assert result.to_json()["contended_event_times_s"] == list(result.contended_event_times_s)


def test_a_series_timed_beside_busy_processes_says_so_and_is_timed_again(
    session: DeviceSession, builder: Builder
) -> None:
    if not session.device.info.is_cpu:
        pytest.skip("the device's kernels do not run on the host's cores")
    if cpu_stall_us() is None:
        pytest.skip("this host's kernel reports no CPU pressure (/proc/pressure/cpu)")
    busy = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(session.device.info.compute_units)
    ]
    try:
        time.sleep(0.3)  # both busy: every core is wanted by two
        config = MeasureConfig(warmup=1, repeats=20, measure_conversions=False)
        result, _ = _measured(session, builder, config, size=192)
    finally:
        for process in busy:
            process.kill()
            process.wait()
    assert result.contention is not None and result.contention > config.contention_limit
    assert len(result.contended_event_times_s) == config.repeats  # timed again, still busy
