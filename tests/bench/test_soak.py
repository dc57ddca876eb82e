"""bench.soak's figure: the growth per 100 candidates while the job measures."""

from __future__ import annotations

import pytest

from bench import soak

MIB = 2**20


def _sample(seconds: float, records: int, total_mib: float, *, worker: bool = True) -> soak.Sample:
    rss = {
        "main": int((total_mib - 100) * MIB),
        "build workers": 60 * MIB,
        "measuring worker": 40 * MIB if worker else 0,
        "resource trackers": 0,
    }
    if not worker:
        rss["build workers"] = 0
        rss["main"] = int(total_mib * MIB)
    return soak.Sample(seconds, records, rss)


def _job(per_100_mib: float) -> list[soak.Sample]:
    """A job of 400 candidates: start-up to 100, then ``per_100_mib`` more per
    100, then its pools close (the workers' memory gone) at the final count."""
    samples = [_sample(1.0, 8, 150.0), _sample(2.0, 56, 280.0)]
    for records in range(100, 400, 20):
        samples.append(_sample(records / 10, records, 300.0 + per_100_mib * (records - 100) / 100))
    samples.append(_sample(41.0, 401, 320.0, worker=False))  # the pools closed
    samples.append(_sample(42.0, 401, 200.0, worker=False))
    return samples


def test_the_growth_is_the_slope_while_the_job_measures() -> None:
    grown = soak.growth(_job(11.7))
    assert grown.per_step_bytes / MIB == pytest.approx(11.7, rel=1e-6)
    assert grown.base.records == 100
    assert grown.last.records == 380  # the last sample before the final count
    assert grown.per_step_percent == pytest.approx(100 * 11.7 / 300.0, rel=1e-6)
    assert grown.overall_percent == pytest.approx(100 * 11.7 * 2.8 / 300.0, rel=1e-6)


def test_a_flat_job_is_flat_whatever_happens_after_its_pools_close() -> None:
    grown = soak.growth(_job(0.0))
    assert grown.per_step_bytes == pytest.approx(0.0, abs=1.0)
    assert grown.overall_percent == pytest.approx(0.0, abs=1e-6)


def test_samples_without_the_measuring_worker_do_not_count() -> None:
    samples = _job(5.0)
    samples.insert(5, _sample(13.0, 130, 10.0, worker=False))  # a worker being replaced
    assert all(s.rss["measuring worker"] > 0 for s in soak.measuring(samples))
    assert soak.growth(samples).per_step_bytes / MIB == pytest.approx(5.0, rel=1e-6)


def test_too_few_samples_while_measuring_say_so() -> None:
    with pytest.raises(SystemExit, match="too few samples"):
        soak.growth([_sample(1.0, 50, 150.0), _sample(2.0, 120, 300.0, worker=False)])
