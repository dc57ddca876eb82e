"""Rewrites are priced at the cache state the plan leaves them: conversion
records carry a cold and a warm time, and the plan's footprint against the
device's last-level cache says which one holds."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from laytune.codegen import GENERIC_DEVICE
from laytune.layout import block, identity
from laytune.plan import plan_layouts
from laytune.plan._rewrite import Rewrite
from laytune.records import Record, conversion_seconds, measured_cold, open_database
from laytune.space import Candidate, conversion_key
from tests.plan.graphs import seed_graph
from tests.plan.test_weigh import _records

COLD_S, WARM_S = 4e-4, 1e-4


def _conversion(rewrite, cold_s: float, warm_s: float | None) -> Record:
    """A verified conversion record of ``rewrite``'s layouts, timed cold
    (a flush before each timed run) with ``warm_s`` its warm time."""
    nbytes = [rewrite.src.physical_size, rewrite.dst.physical_size]
    result = {"launches": {"pack": 0, "compute": 9, "unpack": 0, "flush": 7}}
    if warm_s is not None:
        result["warm_value_s"] = warm_s
    return Record(
        conversion_key(rewrite.src, rewrite.dst, rewrite.dtype, rewrite.dst_pad),
        GENERIC_DEVICE.key,
        Candidate.make({}, {"kernel": "gather", "vector": 4}),
        "ok",
        value_s=cold_s,
        program={
            "buffers": [
                {"name": n, "role": r, "shape": [size], "dtype": rewrite.dtype}
                for n, r, size in zip(("src", "dst"), ("input", "output"), nbytes, strict=True)
            ]
        },
        result=result,
    )


def test_a_conversion_record_has_a_cold_and_a_warm_time() -> None:
    shape = (1, 8, 4, 4)
    rewrite = Rewrite("x", "float32", identity(shape), block(shape, 1, 4))
    record = _conversion(rewrite, COLD_S, WARM_S)
    assert measured_cold(record)
    assert conversion_seconds(record) == COLD_S
    assert conversion_seconds(record, warm=True) == WARM_S
    # a record timed cold before warm times were kept: the cold time either way
    assert conversion_seconds(_conversion(rewrite, COLD_S, None), warm=True) == COLD_S


@pytest.mark.parametrize(("cache", "state"), [(1 << 40, "warm"), (1024, "cold")])
def test_rewrites_are_priced_warm_only_when_the_graph_fits_the_last_level_cache(
    tmp_path: Path, cache: int, state: str
) -> None:
    graph, _ = seed_graph()
    device = replace(GENERIC_DEVICE, last_level_cache_size=cache)
    with open_database(tmp_path / "p.db") as db:
        _records(db, graph, 3e-3)
        first = plan_layouts(graph, db, GENERIC_DEVICE)  # the cache unknown: no word on it
        assert not any("last-level cache" in line for line in first.log)
        assert len(first.rewrites) == 2
        for rewrite in first.rewrites:
            db.add(_conversion(rewrite, COLD_S, WARM_S))
        plan = plan_layouts(graph, db, device)
    assert any(f"conversions priced {state}" in line for line in plan.log)
    rewrites = [p for p in plan.predictions if p.kind == "rewrite"]
    assert len(rewrites) == 2
    for prediction in rewrites:
        assert prediction.seconds == (WARM_S if state == "warm" else COLD_S)
        assert prediction.source.startswith("conversion record ")
        assert prediction.source.endswith(state)
    # the bias add (no record) is estimated at the tuned conversions' rate, same state
    add = {p.label: p for p in plan.predictions}["add"]
    assert f"the best of 2 tuned conversions ({state})" in add.source
