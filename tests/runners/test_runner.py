from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from laytune.runners import (
    Builder,
    BuildResult,
    Device,
    ErrorKind,
    MeasureConfig,
    RunInput,
    Runner,
)

pytestmark = pytest.mark.xdist_group("runners")


def _build_one(builder: Builder, program: object) -> BuildResult:
    (result,) = builder.build([program])  # type: ignore[list-item]
    assert result.ok, result.error_message + result.build_log
    return result


def test_good_candidate_is_verified_and_timed(
    builder: Builder, runner: Runner, kit: SimpleNamespace
) -> None:
    build = _build_one(builder, kit.transpose_program())
    (result,) = runner.run([RunInput(build, kit.TransposeWorkload())])
    assert result.ok, result.error_message
    assert result.statistic == "median" and result.clock == "event"
    assert len(result.event_times_s) == len(result.wall_times_s) == runner.config.repeats
    assert result.value_s == pytest.approx(float(np.median(result.event_times_s)))
    assert result.max_error == 0.0
    assert [c.buffer for c in result.outputs] == ["b"] and result.outputs[0].passed
    assert [t.buffer for t in result.pack_times] == ["a"]
    assert [t.buffer for t in result.unpack_times] == ["b"]
    for timing in (*result.pack_times, *result.unpack_times):
        assert len(timing.event_times_s) == runner.config.repeats
        assert timing.value_s > 0
    json.dumps(result.to_json())


def test_image2d_physical_storage(builder: Builder, runner: Runner, kit: SimpleNamespace) -> None:
    build = _build_one(builder, kit.image_program())
    (result,) = runner.run([RunInput(build, kit.ScaleWorkload())])
    assert result.ok, result.error_message
    assert result.max_error == 0.0


@pytest.mark.parametrize(
    ("config", "timed"),
    [
        (MeasureConfig(warmup=2, repeats=5), 5),
        (MeasureConfig(warmup=0, repeats=1, measure_conversions=False), 1),
        (MeasureConfig(warmup=1, repeats=3, min_total_time_s=1e6, max_repeats=7), 7),
        (MeasureConfig(warmup=1, repeats=2, flush_cache=True, flush_bytes=1 << 20), 2),
    ],
)
def test_launches_are_counted_exactly_as_the_config_says(
    device: Device, builder: Builder, kit: SimpleNamespace, config: MeasureConfig, timed: int
) -> None:
    program = kit.two_launch_program()  # P=1, C=2, U=1
    build = _build_one(builder, program)
    with Runner(device, config) as runner:
        (result,) = runner.run([RunInput(build, kit.ScaleWorkload())])
    assert result.ok, result.error_message
    assert len(result.event_times_s) == len(result.wall_times_s) == timed
    counts = result.launches
    conversions = config.warmup + config.repeats if config.measure_conversions else 0
    assert counts.pack == 1 + conversions
    assert counts.unpack == 1 + conversions
    assert counts.compute == 2 + (config.warmup + timed) * 2
    assert counts.kernels == config.launch_count(1, 2, 1, timed)
    assert counts.flush == config.flush_count(1, 1, timed)
    if config.measure_conversions:
        assert all(len(t.event_times_s) == config.repeats for t in result.pack_times)
    else:
        assert result.pack_times == () and result.unpack_times == ()


def test_bad_candidates_get_their_kind_and_the_batch_goes_on(
    device: Device, builder: Builder, kit: SimpleNamespace
) -> None:
    scale = kit.ScaleWorkload()
    programs = {
        "broken": kit.broken_program(),
        "hang": kit.hang_program(),
        "crash": kit.crash_program(),
        "wrong": kit.wrong_program(),
        "good": kit.scale_program("good"),
    }
    builds = dict(zip(programs, builder.build(list(programs.values())), strict=True))
    batch = [
        RunInput(builds["good"], scale),
        RunInput(builds["broken"], scale),
        RunInput(builds["good"], scale),
        RunInput(builds["hang"], scale),
        RunInput(builds["good"], scale),
        RunInput(builds["crash"], scale),
        RunInput(builds["good"], scale),
        RunInput(builds["wrong"], scale),
        RunInput(builds["good"], scale),
        RunInput(builds["good"], kit.AbortingWorkload(tag="abort")),
        RunInput(builds["good"], scale),
    ]
    config = MeasureConfig(warmup=1, repeats=2, time_limit_s=3.0)
    with Runner(device, config) as runner:
        results = runner.run(batch)
        starts = runner.worker_starts
    kinds = [r.error_kind for r in results]
    assert kinds == [
        ErrorKind.NONE,
        ErrorKind.BUILD,
        ErrorKind.NONE,
        ErrorKind.TIMEOUT,
        ErrorKind.NONE,
        ErrorKind.CRASH,
        ErrorKind.NONE,
        ErrorKind.WRONG_RESULT,
        ErrorKind.NONE,
        ErrorKind.CRASH,
        ErrorKind.NONE,
    ], [(r.program_name, r.error_kind, r.error_message) for r in results]
    for result in results[::2]:
        assert result.max_error == 0.0 and result.value_s is not None
    assert "this_does_not_exist" not in results[1].error_message  # the log stays in the build
    assert "SIGSEGV" in results[5].error_message or "SIGBUS" in results[5].error_message
    assert "SIGABRT" in results[9].error_message
    assert results[7].max_error == pytest.approx(1.0)
    assert results[7].value_s is None
    assert starts == 4  # the first worker, then one after the hang and each crash


def test_refused_launch_is_a_run_error(
    device: Device, builder: Builder, runner: Runner, kit: SimpleNamespace
) -> None:
    program = kit.scale_program("too_big_group")
    too_big = device.info.max_work_group_size * 2
    program = replace(
        program,
        compute=(replace(program.compute[0], global_size=(too_big,), local_size=(too_big,)),),
    )
    build = _build_one(builder, program)
    good = _build_one(builder, kit.scale_program("after_refused"))
    refused, after = runner.run(
        [RunInput(build, kit.ScaleWorkload(n=kit.N)), RunInput(good, kit.ScaleWorkload())]
    )
    assert refused.error_kind is ErrorKind.RUN
    assert refused.cl_error_code is not None and refused.cl_error_code < 0
    assert after.ok


def test_program_that_does_not_fit_the_workload_is_a_run_error(
    builder: Builder, runner: Runner, kit: SimpleNamespace
) -> None:
    build = _build_one(builder, kit.scale_program("mismatch"))
    (result,) = runner.run([RunInput(build, kit.ScaleWorkload(n=kit.N * 2, tag="big"))])
    assert result.error_kind is ErrorKind.RUN
    assert "shape" in result.error_message


def test_failed_build_is_passed_through(
    builder: Builder, runner: Runner, kit: SimpleNamespace
) -> None:
    (failed,) = builder.build([kit.broken_program()])
    (result,) = runner.run([RunInput(failed, kit.ScaleWorkload())])
    assert result.error_kind is ErrorKind.BUILD
    assert result.cl_error_code == failed.cl_error_code


def test_build_for_another_device_is_refused(
    builder: Builder, runner: Runner, kit: SimpleNamespace
) -> None:
    build = replace(_build_one(builder, kit.scale_program("elsewhere")), device_key="0" * 16)
    (result,) = runner.run([RunInput(build, kit.ScaleWorkload())])
    assert result.error_kind is ErrorKind.RUN


def test_inputs_and_reference_are_made_once_per_workload(
    builder: Builder, runner: Runner, kit: SimpleNamespace, tmp_path: Path
) -> None:
    log = tmp_path / "make_inputs.log"
    workload = kit.CountingWorkload(tag=f"count{tmp_path.name}", log_path=str(log))
    builds = builder.build(
        [kit.scale_program(f"c{k}", f"y[i] = x[i] * {2 + k}.0f / {1 + k / 2}f;") for k in range(3)]
    )
    results = runner.run([RunInput(build, workload) for build in builds])
    assert all(r.ok for r in results), [r.error_message for r in results]
    lines = log.read_text().splitlines()
    assert len(lines) == 1
    assert len({line.split()[1] for line in lines}) == 1


def test_clock_disagreement_is_flagged_over_the_tolerance(
    device: Device, builder: Builder, kit: SimpleNamespace
) -> None:
    build = _build_one(builder, kit.scale_program("clocks"))
    # Wall time includes enqueue and wait, so it always exceeds the event
    # time: with no tolerance at all, the flag must be raised.
    strict = MeasureConfig(warmup=1, repeats=3, clock_rtol=0.0, clock_atol_s=0.0)
    with Runner(device, strict) as runner:
        (result,) = runner.run([RunInput(build, kit.ScaleWorkload())])
    assert result.ok and result.clock_disagreement
    assert all(
        w > 0 and e > 0 for w, e in zip(result.wall_times_s, result.event_times_s, strict=True)
    )


def test_wall_clock_ranking(device: Device, builder: Builder, kit: SimpleNamespace) -> None:
    build = _build_one(builder, kit.scale_program("wall"))
    config = MeasureConfig(warmup=1, repeats=4, clock="wall", statistic="min")
    with Runner(device, config) as runner:
        (result,) = runner.run([RunInput(build, kit.ScaleWorkload())])
    assert result.ok
    assert (result.clock, result.statistic) == ("wall", "min")
    assert result.value_s == min(result.wall_times_s)
