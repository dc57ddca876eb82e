"""Workloads timed cold: by their own say, or because their weights outgrow
the device's cache (``laytune.runners.timed_cold``), whatever the runner's
``MeasureConfig.flush_cache`` says."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

import laytune
from laytune.layout import identity, permute
from laytune.ops import Workload
from laytune.records import measured_cold, open_database
from laytune.runners import Builder, Device, MeasureConfig, RunInput, Runner, timed_cold
from laytune.search import TuneOptions
from laytune.space import ConversionWorkload

pytestmark = pytest.mark.xdist_group("runners")


def weighted_matmul(m: int, n: int, k: int) -> Workload:
    """A model's matmul: ``B`` (k x n) its weights."""
    return Workload.define(
        "dense",
        "C[i, j] += A[i, l] * B[l, j]",
        axes={"i": m, "j": n, "l": k},
        inputs={"A": (m, k), "B": (k, n)},
        weights=("B",),
    )


def test_the_rule_weighs_the_weights_against_the_cache() -> None:
    w = weighted_matmul(4, 256, 64)  # B, 64 x 256 floats (64 KiB), is its weights
    assert w.weights == ("B",)
    assert timed_cold(w, 64 * 1024 - 1)
    assert not timed_cold(w, 64 * 1024)  # held by the cache
    assert not timed_cold(w, 0)  # a cache of unknown size: warm
    free = Workload.define(
        "scaled", "Y[i, j] = X[i, j] * 2.0", axes={"i": 256, "j": 256}, inputs={"X": (256, 256)}
    )
    assert free.weights == () and not timed_cold(free, 1)  # data, not weights
    conversion = ConversionWorkload(identity((8, 8)), permute((8, 8), (1, 0)))
    assert timed_cold(conversion, 1 << 30)  # by its own say, whatever the cache


def test_a_cold_item_of_a_workload_prepared_warm_is_timed_cold(
    builder: Builder, runner: Runner, kit: SimpleNamespace
) -> None:
    """The measuring worker keeps each workload it prepared; whether it is
    timed cold is the item's say, not the kept one's."""
    cold_scale = dataclass(frozen=True)(
        type("ColdScale", (kit.ScaleWorkload,), {"timed_cold": True})
    )
    (build,) = builder.build([kit.scale_program()])
    assert build.ok, build.error_message
    repeats = runner.config.repeats
    warm, cold, again = (
        runner.run([RunInput(build, workload)])[0]
        for workload in (kit.ScaleWorkload(), cold_scale(), kit.ScaleWorkload())
    )
    assert kit.ScaleWorkload().key == cold_scale().key
    for result in (warm, cold, again):
        assert result.ok, result.error_message
    assert warm.launches.flush == again.launches.flush == 0
    assert warm.warm_value_s is None and again.warm_value_s is None
    # one fill before each timed repeat (and each repeat of a series timed again under load)
    assert cold.launches.flush == repeats + len(cold.contended_event_times_s)
    assert cold.warm_value_s is not None and len(cold.warm_event_times_s) == repeats


def test_a_tune_times_a_workload_cold_where_its_weights_outgrow_the_cache(
    device: Device, tmp_path: Path
) -> None:
    cache = device.info.cache_size
    assert cache > 0  # the device says
    big = weighted_matmul(2, 2 * cache // (64 * 4), 64)  # B: twice the cache
    small = weighted_matmul(2, 16, 64)  # B: 4 KiB
    assert timed_cold(big, cache) and not timed_cold(small, cache)
    url = f"sqlite:///{tmp_path / 'cold.db'}"
    config = MeasureConfig(warmup=1, repeats=3)
    assert not config.flush_cache
    options = TuneOptions(trials=2, batch=2, measure=config, warm_start=0)
    for workload in (big, small):
        laytune.tune(workload, device, options=options, database=url, progress=False)
    db = open_database(tmp_path / "cold.db", create=False)
    for workload, cold in ((big, True), (small, False)):
        records = [r for r in db.records(workload=workload.key) if r.ok]
        assert records
        for record in records:
            assert measured_cold(record) is cold
            assert (record.result["warm_value_s"] is not None) is cold
