"""A records database is a layout source: the best verified record per
workload and device freezes the critical operators."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from laytune.layout import identity
from laytune.plan import plan_layouts
from laytune.records import Record, open_database
from laytune.space import Candidate
from tests.plan.graphs import seed_graph


def test_plan_takes_the_best_verified_records_of_the_device(tmp_path: Path, laytune_device) -> None:
    graph, best = seed_graph()
    device = laytune_device.info
    with open_database(tmp_path / "r.db") as db:
        for workload_key, candidate in best.items():
            plain = Candidate.make(
                {name: identity(layout.shape) for name, layout in candidate.layouts},
                dict(candidate.knobs),
            )
            db.add(Record(workload_key, device.key, plain, "ok", value_s=2e-3))  # slower
            db.add(Record(workload_key, device.key, candidate, "ok", value_s=1e-3))
        planned = plan_layouts(graph, db, device)
        given = plan_layouts(graph, best, device)
        assert planned.placements == given.placements
        assert planned.versions == given.versions and planned.reads == given.reads
        assert len(planned.rewrites) == 2
        # the records say what the convolutions take; the given candidates say nothing
        kernels = {p.label: p for p in planned.predictions if p.kind == "operator"}
        assert kernels["conv1"].seconds == kernels["conv2"].seconds == 1e-3
        assert kernels["conv1"].source.startswith("record ")
        assert "estimated" in {p.label: p for p in given.predictions}["conv1"].source
        elsewhere = dataclasses.replace(device, device_name="another device")
        assert plan_layouts(graph, db, elsewhere).rewrites == ()  # nothing recorded there
        inputs = {"x": np.random.default_rng(0).standard_normal((1, 8, 6, 6)).astype(np.float32)}
        out = planned.compile().run(inputs)
        for name, value in graph.reference(inputs).items():
            np.testing.assert_allclose(out[name], value, rtol=1e-4, atol=1e-4)
