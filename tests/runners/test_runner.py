from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from laytune.exceptions import ConfigError
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
    again = len(result.contended_event_times_s)  # step 6: timed again under load
    assert counts.compute == 2 + (config.warmup + timed) * 2 + (again and config.warmup + again) * 2
    assert counts.kernels == config.launch_count(1, 2, 1, timed, contended_repeats=again)
    assert counts.flush == config.flush_count(1, 1, timed, contended_repeats=again)
    if config.measure_conversions:
        assert all(len(t.event_times_s) == config.repeats for t in result.pack_times)
    else:
        assert result.pack_times == () and result.unpack_times == ()


@pytest.mark.slow
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
    # a wild store kills a CPU device's measuring process; on a GPU it
    # faults inside the device, whose queue is lost (NVIDIA's OpenCL:
    # INVALID_COMMAND_QUEUE), and the worker is replaced all the same
    faulted = ErrorKind.CRASH if device.info.is_cpu else ErrorKind.DEVICE_LOST
    assert kinds == [
        ErrorKind.NONE,
        ErrorKind.BUILD,
        ErrorKind.NONE,
        ErrorKind.TIMEOUT,
        ErrorKind.NONE,
        faulted,
        ErrorKind.NONE,
        ErrorKind.WRONG_RESULT,
        ErrorKind.NONE,
        ErrorKind.CRASH,
        ErrorKind.NONE,
    ], [(r.program_name, r.error_kind, r.error_message) for r in results]
    for result in results[::2]:
        assert result.max_error == 0.0 and result.value_s is not None
    assert "this_does_not_exist" not in results[1].error_message  # the log stays in the build
    if faulted is ErrorKind.CRASH:
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


def test_a_candidate_too_large_for_the_device_is_refused_before_anything_is_allocated(
    device: Device, builder: Builder, kit: SimpleNamespace
) -> None:
    build = _build_one(builder, kit.scale_program("huge"))
    limit = device.info.max_mem_alloc_size
    physical = (limit // 4 + 1,)  # one float more than the device allocates at once
    huge = replace(
        build.program,
        buffers=tuple(replace(b, physical_shape=physical) for b in build.program.buffers),
    )
    good = _build_one(builder, kit.scale_program("fits"))
    with Runner(device, kit.FAST) as fresh:
        (result,) = fresh.run([RunInput(replace(build, program=huge), kit.ScaleWorkload())])
        assert fresh.worker_starts == 0  # nothing was sent to a worker, nothing allocated
        (fits,) = fresh.run([RunInput(good, kit.ScaleWorkload())])
    assert result.error_kind is ErrorKind.RUN
    assert result.error_message.startswith("not allocated: x (physical) ")
    assert f"({limit} bytes) that {device.info.name} allocates at most" in result.error_message
    assert fits.ok


def test_memory_refusal_names_each_size_and_the_limit() -> None:
    from laytune.device_info import DeviceInfo
    from laytune.runners import memory_refusal

    info = DeviceInfo("P", "D", global_mem_size=10 << 20, max_mem_alloc_size=4 << 20)
    assert memory_refusal(info, {"A": 4 << 20, "B": 4 << 20}) is None
    assert memory_refusal(info, {"A": (4 << 20) + 1, "B": 1}) == (
        "A 4 MiB: more than the 4 MiB (4194304 bytes) that D (P) allocates at most in one buffer"
    )
    assert memory_refusal(info, {"A": 4 << 20, "B": 4 << 20, "C": 3 << 20}) == (
        "the buffers take 11 MiB (11534336 bytes) together (A 4 MiB, B 4 MiB, C 3 MiB), "
        "more than the 10 MiB (10485760 bytes) of global memory of D (P)"
    )


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


def test_the_measuring_worker_keeps_numpys_blas_to_one_thread(
    builder: Builder, runner: Runner, kit: SimpleNamespace
) -> None:
    """Idle OpenBLAS threads spin on the cores a CPU device's kernel runs on
    right after the reference is computed; the worker allows BLAS one thread."""
    from threadpoolctl import threadpool_info

    here = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
    assert here  # numpy's BLAS is found, so the reference below sees it too
    build = _build_one(builder, kit.scale_program("blas_threads"))
    (result,) = runner.run([RunInput(build, kit.BlasThreadsWorkload(tag="blas"))])
    assert result.ok, result.error_message


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


def test_results_within_tolerance_pass_and_nan_is_an_infinite_error(
    builder: Builder, runner: Runner, kit: SimpleNamespace
) -> None:
    near, nan = builder.build(
        [
            kit.scale_program("near", "y[i] = 2.0f * x[i] * 1.000001f;"),
            kit.scale_program("nan_at_5", "y[i] = (i == 5) ? NAN : 2.0f * x[i];"),
        ]
    )
    close, wrong = runner.run(
        [RunInput(near, kit.ScaleWorkload()), RunInput(nan, kit.ScaleWorkload())]
    )
    assert close.ok, close.error_message
    assert 0.0 < close.max_error < 1e-4
    assert wrong.error_kind is ErrorKind.WRONG_RESULT
    assert wrong.max_error == float("inf")


def test_memory_left_by_a_previous_candidate_never_passes_for_a_result(
    builder: Builder, runner: Runner, kit: SimpleNamespace
) -> None:
    # The same buffer sizes, so the second candidate gets the first one's
    # memory back, holding a correctly packed x; its pack writes nothing.
    good, lazy = builder.build([kit.two_launch_program(), kit.lazy_pack_program()])
    first, second = runner.run(
        [RunInput(good, kit.ScaleWorkload()), RunInput(lazy, kit.ScaleWorkload())]
    )
    assert first.ok, first.error_message
    assert second.error_kind is ErrorKind.WRONG_RESULT
    assert second.max_error == float("inf")


@pytest.mark.parametrize(
    ("config", "threshold", "timed", "abandoned"),
    [
        # Slower than the threshold after 2 of 6 repeats: stops at 2.
        (MeasureConfig(warmup=1, repeats=6, early_stop_after=2, clock="wall"), 1e-12, 2, True),
        # Faster than the threshold: every repeat.
        (MeasureConfig(warmup=1, repeats=6, early_stop_after=2, clock="wall"), 1e9, 6, False),
        # With cache flushes and min_total_time_s: stops before the extension.
        (
            MeasureConfig(
                warmup=2,
                repeats=4,
                early_stop_after=3,
                min_total_time_s=1e6,
                max_repeats=9,
                flush_cache=True,
                flush_bytes=1 << 20,
                clock="wall",
            ),
            1e-12,
            3,
            True,
        ),
        # The decision point is the last planned repeat: nothing left to skip.
        (MeasureConfig(warmup=1, repeats=3, early_stop_after=3, clock="wall"), 1e-12, 3, False),
    ],
)
def test_early_stop_counts_launches_exactly(
    device: Device,
    builder: Builder,
    kit: SimpleNamespace,
    config: MeasureConfig,
    threshold: float,
    timed: int,
    abandoned: bool,
) -> None:
    program = kit.two_launch_program()  # P=1, C=2, U=1
    build = _build_one(builder, program)
    with Runner(device, config) as runner:
        result, unlimited = runner.run(
            [
                RunInput(build, kit.ScaleWorkload(), abandon_above_s=threshold),
                RunInput(build, kit.ScaleWorkload()),
            ]
        )
    assert result.ok, result.error_message
    assert result.abandoned is abandoned
    assert result.max_error == 0.0 and all(check.passed for check in result.outputs)
    assert len(result.event_times_s) == len(result.wall_times_s) == timed
    assert result.value_s == pytest.approx(float(np.median(result.wall_times_s)))
    again = len(result.contended_event_times_s)  # step 6: timed again under load
    assert result.launches.kernels == config.launch_count(1, 2, 1, timed, contended_repeats=again)
    assert (
        result.launches.compute
        == 2 + (config.warmup + timed) * 2 + (again and config.warmup + again) * 2
    )
    assert result.launches.flush == config.flush_count(1, 1, timed, contended_repeats=again)
    assert all(len(t.event_times_s) == config.repeats for t in result.pack_times)
    assert result.to_json()["abandoned"] is abandoned
    full = config.max_repeats if config.min_total_time_s else config.repeats
    assert not unlimited.abandoned and len(unlimited.event_times_s) == full
    again = len(unlimited.contended_event_times_s)
    assert unlimited.launches.kernels == config.launch_count(1, 2, 1, full, contended_repeats=again)


def test_a_wrong_result_is_never_abandoned(
    builder: Builder, runner: Runner, kit: SimpleNamespace
) -> None:
    build = _build_one(builder, kit.wrong_program())
    (result,) = runner.run([RunInput(build, kit.ScaleWorkload(), abandon_above_s=1e-12)])
    assert result.error_kind is ErrorKind.WRONG_RESULT
    assert not result.abandoned and result.value_s is None


@pytest.mark.parametrize("threshold", [0.0, -1.0, float("nan")])
def test_abandon_threshold_must_be_positive(
    builder: Builder, kit: SimpleNamespace, threshold: float
) -> None:
    build = _build_one(builder, kit.scale_program("threshold"))
    with pytest.raises(ConfigError, match="abandon_above_s"):
        RunInput(build, kit.ScaleWorkload(), abandon_above_s=threshold)


def test_lost_device_replaces_the_worker_and_the_batch_goes_on(
    device: Device, builder: Builder, kit: SimpleNamespace
) -> None:
    good, lost = builder.build([kit.scale_program("before_lost"), kit.scale_program("lost")])
    scale = kit.ScaleWorkload()
    out_of_resources = -5  # CL_OUT_OF_RESOURCES, as a completion status
    with Runner(device, MeasureConfig(warmup=1, repeats=2)) as runner:
        # The test-only hook: the worker reports this status for every
        # launch of the program named "lost", as a failing device would.
        runner._injected_statuses["lost"] = out_of_resources
        results = runner.run(
            [
                RunInput(good, scale),
                RunInput(lost, scale),
                RunInput(good, scale),
                RunInput(good, scale),
            ]
        )
        starts = runner.worker_starts
    assert [r.error_kind for r in results] == [
        ErrorKind.NONE,
        ErrorKind.DEVICE_LOST,
        ErrorKind.NONE,
        ErrorKind.NONE,
    ], [(r.program_name, r.error_kind, r.error_message) for r in results]
    assert results[1].cl_error_code == out_of_resources
    assert "OUT_OF_RESOURCES" in results[1].error_message
    assert results[1].value_s is None
    assert starts == 2  # the first worker, then its replacement
    for result in (results[0], *results[2:]):
        assert result.max_error == 0.0 and result.value_s is not None


def test_a_workload_that_does_not_pickle_fails_only_its_candidates(
    builder: Builder, runner: Runner, kit: SimpleNamespace
) -> None:
    build = _build_one(builder, kit.scale_program("unpicklable"))
    stuck = kit.UnpicklableWorkload(tag="unpicklable")
    results = runner.run(
        [
            RunInput(build, kit.ScaleWorkload()),
            RunInput(build, stuck),
            RunInput(build, kit.ScaleWorkload()),
        ]
    )
    assert [r.error_kind for r in results] == [ErrorKind.NONE, ErrorKind.RUN, ErrorKind.NONE]
    assert "could not be sent" in results[1].error_message


def test_batch_threshold_applies_to_inputs_without_their_own(
    device: Device, builder: Builder, kit: SimpleNamespace
) -> None:
    build = _build_one(builder, kit.scale_program("batch_threshold"))
    config = MeasureConfig(warmup=0, repeats=4, early_stop_after=1, clock="wall")
    with Runner(device, config) as runner:
        with pytest.raises(ConfigError, match="abandon_above_s"):
            runner.run([RunInput(build, kit.ScaleWorkload())], abandon_above_s=-1.0)
        stopped, own = runner.run(
            [
                RunInput(build, kit.ScaleWorkload()),
                RunInput(build, kit.ScaleWorkload(), abandon_above_s=1e9),
            ],
            abandon_above_s=1e-12,
        )
    assert stopped.ok and stopped.abandoned and len(stopped.wall_times_s) == 1
    assert own.ok and not own.abandoned and len(own.wall_times_s) == 4
