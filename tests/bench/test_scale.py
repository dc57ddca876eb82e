"""bench.scale's figures from fabricated measurements: host time per trial,
ratios within a series, memory growth per byte of buffers, the verdicts."""

from __future__ import annotations

import math

import pytest

from bench import scale

MIB = 2**20


def _row(
    case: scale.Case,
    space_s: float,
    job_s: float,
    measure: list[float],
    peak_mib: float,
    buffers_mib: float,
    device_mib: float = 0.0,
) -> scale.Row:
    measured = scale.Measured(
        space_s, job_s, tuple(measure), int(buffers_mib * MIB), device_bytes=int(device_mib * MIB)
    )
    return scale.Row(case, measured, int(peak_mib * MIB))


SMALL, LARGE = scale._transpose(512), scale._transpose(8192)
MATMUL = scale._matmul(512, 512, 512)


def test_host_time_is_the_job_less_its_measurements_per_record() -> None:
    assert scale.host_per_trial(10.0, [1.0, 2.0, 3.0, 0.0]) == pytest.approx(1.0)
    assert scale.host_per_trial(1.0, [2.0]) == 0.0  # never negative
    assert math.isnan(scale.host_per_trial(5.0, []))


def test_ratios_are_against_the_first_case_of_each_series() -> None:
    rows = scale.with_ratios(
        [
            _row(SMALL, 0.2, 20.0, [1.0] * 10, 1400, 2),  # host 1.0 s per trial
            _row(MATMUL, 0.3, 12.0, [0.5] * 4, 1500, 3),  # host 2.5 s per trial
            _row(LARGE, 0.4, 290.0, [27.0] * 10, 1912, 514),  # host 2.0 s per trial
        ]
    )
    small, matmul, large = rows
    assert small.host_ratio == pytest.approx(1.0)
    assert matmul.host_ratio == pytest.approx(1.0)  # its own series
    assert large.host_ratio == pytest.approx(2.0)
    assert small.memory_growth is None and matmul.memory_growth is None
    assert large.memory_growth == pytest.approx(512 / 512)
    assert large.measure_per_trial_s == pytest.approx(27.0)


def test_verdicts_name_what_decides_each_target() -> None:
    met = scale.with_ratios(
        [
            _row(SMALL, 0.2, 20.0, [1.0] * 10, 1400, 2, 4),
            _row(LARGE, 0.9, 283.0, [27.0] * 10, 2000, 514, 1028),  # both views of X and Y
        ]
    )
    lines = scale.verdicts(met)
    assert lines[0].startswith("- space construction under 1 s for every shape: met")
    assert "transpose 8192^2" in lines[0] and "0.90 s" in lines[0]
    assert "within 1.5x of transpose 512^2: met (1.30x)" in lines[1]
    assert (
        "at most 2 bytes per byte of the buffers measured (device memory), each series' "
        "largest case: met" in lines[2]
    )
    assert (
        "(worst transpose 8192^2, 0.59; per byte of the workload's logical buffers 1.17)"
        in (lines[2])
    )

    missed = scale.with_ratios(
        [
            _row(SMALL, 0.2, 20.0, [1.0] * 10, 1400, 2, 2),
            _row(LARGE, 4.0, 300.0, [27.0] * 10, 3000, 514, 514),  # identity layouts: one view
        ]
    )
    lines = scale.verdicts(missed)
    assert ": missed (slowest transpose 8192^2, 4.00 s)" in lines[0]
    assert ": missed (3.00x)" in lines[1]
    assert ": missed (worst transpose 8192^2, 3.12;" in lines[2]


def test_the_report_runs_every_case_it_is_given(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = []

    def fake(case: scale.Case, trials: int) -> scale.Row:
        seen.append((case.label, trials))
        return _row(case, 0.1, 10.0, [0.5] * trials, 1000, 1)

    monkeypatch.setattr(scale, "environment", lambda: ["- device: fake"])
    assert scale.main(["--quick"], run=fake) == 0
    assert seen == [(c.label, 6) for c in scale.CASES if c.quick]
    text = capsys.readouterr().out
    assert "| transpose 2048^2 | 0.10 | 6 | 0.500 | 1.167 | 1.167 | 1.00x |" in text


def test_every_case_builds_its_workload() -> None:
    for case in scale.CASES:
        workload = case.workload()
        assert workload.name == case.op


def test_failures_are_listed_once_per_reason_with_their_count() -> None:
    measured = scale.Measured(
        0.5, 60.0, (0.0, 0.0, 1.0), 8 * MIB, 2, ("timeout: took longer than 10 s",) * 2
    )
    lines = scale.failures([scale.Row(LARGE, measured, 100 * MIB)])
    assert lines == [
        "",
        "Failures:",
        "- transpose 8192^2, 2 failed: timeout: took longer than 10 s",
    ]
    assert scale.failures([_row(SMALL, 0.2, 20.0, [1.0] * 10, 1400, 2)]) == []


def test_the_steady_host_time_leaves_the_first_batch_out() -> None:
    # A first batch of one record (the baseline) that took 30 s with 1 s measured:
    # the worker's start and the reference. Then 8 records in 40 s, 2 s measured each.
    measured = scale.Measured(0.5, 70.0, (1.0, *([2.0] * 8)), 8 * MIB, first_batch=1, first_s=30.0)
    row = scale.Row(LARGE, measured, 100 * MIB)
    assert row.host_per_trial_s == pytest.approx((70.0 - 17.0) / 9)
    assert row.steady_host_per_trial_s == pytest.approx((40.0 - 16.0) / 8)
    base = scale.Row(
        SMALL, scale.Measured(0.5, 13.0, (0.1, *([0.5] * 8)), MIB, first_batch=1, first_s=5.0), 0
    )
    assert scale.with_ratios([base, row])[1].host_ratio == pytest.approx(3.0 / 0.5)


def test_no_ratio_without_a_batch_after_the_first() -> None:
    whole = scale.Measured(0.5, 20.0, (1.0,) * 8, MIB, first_batch=8, first_s=20.0)
    rows = scale.with_ratios(
        [_row(SMALL, 0.2, 20.0, [1.0] * 10, 1400, 2), scale.Row(LARGE, whole, 0)]
    )
    assert math.isnan(rows[1].steady_host_per_trial_s)
    assert rows[1].host_ratio is None
    assert not any("within 1.5x" in line for line in scale.verdicts(rows))


def test_the_memory_verdict_is_taken_on_each_series_largest_case() -> None:
    """A few MiB between two processes' start-up outweigh a small case's
    growth: the verdict reads the growth over the most bytes."""
    rows = scale.with_ratios(
        [
            _row(SMALL, 0.2, 20.0, [1.0] * 10, 1400, 2, 4),
            _row(scale._transpose(1024), 0.2, 20.0, [1.0] * 10, 1440, 8, 16),  # 40 MiB / 12
            _row(LARGE, 0.9, 283.0, [27.0] * 10, 3000, 514, 1028),  # 1600 MiB / 1024
        ]
    )
    assert rows[1].device_growth == pytest.approx(40 / 12)
    (line,) = [v for v in scale.verdicts(rows) if "peak memory" in v]
    assert ": met (worst transpose 8192^2, 1.56;" in line
