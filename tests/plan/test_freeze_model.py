"""A model's plan frozen into a file plans again from that file alone: the
same candidates, layouts, rewrites and fusions, with no records database."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import laytune
from laytune.cli import main
from laytune.exceptions import ArgumentTypeError, FrozenFileError, PlanError
from laytune.layout import identity
from laytune.plan import freeze_model, plan_layouts
from laytune.records import freeze, load_frozen, open_database
from laytune.space import Candidate
from tests.plan.graphs import record_of, residual_graph, seed_graph


def _database(tmp_path: Path, device) -> tuple[str, object]:
    """The seed graph (conv -> bias -> conv) with records: each conv's NCHW4c
    candidate fastest, identity layouts slower."""
    graph, best = seed_graph()
    url = f"sqlite:///{tmp_path / 'r.db'}"
    workloads = {op.workload.key: op.workload for op in graph.ops}
    with open_database(url) as db:
        for key, candidate in best.items():
            plain = Candidate.make(
                {name: identity(layout.shape) for name, layout in candidate.layouts},
                dict(candidate.knobs),
            )
            db.add(record_of(workloads[key], device, plain, 2e-3))
            db.add(record_of(workloads[key], device, candidate, 1e-3))
    return url, graph


def _add_fused_records(url: str, graph, device) -> set[str]:
    """Records of the fused workloads the plan runs (what ``tune_model`` tunes),
    faster than the bare ones; their keys."""
    with open_database(url) as db:
        plan = plan_layouts(graph, db, device, fuse=True)
        keys = set()
        for placement in plan.placements:
            workload = plan.graph.op(placement.op).workload
            if placement.frozen and "+epilogue[" in workload.key:
                db.add(record_of(workload, device, placement.candidate, 0.5e-3))
                keys.add(workload.key)
    return keys


@pytest.mark.parametrize(("fuse", "fused_records"), [(False, False), (True, False), (True, True)])
def test_a_frozen_model_plans_as_its_records_do(
    tmp_path: Path, laytune_device, fuse: bool, fused_records: bool
) -> None:
    device = laytune_device.info
    url, graph = _database(tmp_path, device)
    fused_keys = _add_fused_records(url, graph, device) if fused_records else set()
    path = freeze_model(graph, url, tmp_path / "model.json", laytune_device, fuse=fuse)
    frozen = load_frozen(path)
    with open_database(url, read_only=True) as db:
        from_records = plan_layouts(graph, db, device, fuse=fuse)
    from_file = plan_layouts(graph, frozen, device, fuse=fuse)
    assert from_file.placements == from_records.placements
    assert from_file.versions == from_records.versions and from_file.reads == from_records.reads
    assert from_file.rewrites == from_records.rewrites and len(from_file.rewrites) >= 1
    assert [f.describe() for f in from_file.fusions] == [f.describe() for f in from_records.fusions]
    assert len(from_file.fusions) == (1 if fuse else 0)
    # the file holds the records of the kernels the plan runs: the fused
    # workloads' where they were tuned, else the bare operators'
    bare = {op.workload.key for op in graph.ops if op.name in ("conv1", "conv2")}
    fused_by = {key.split("+epilogue[")[0] for key in fused_keys}
    assert {e.workload_key for e in frozen} == fused_keys | (bare - fused_by)
    assert {e.time_s for e in frozen} == ({0.5e-3, 1e-3} if fused_keys else {1e-3})
    assert all(e.record_id is not None for e in frozen)

    # the operators' predicted times come with the file: the records' kernel times
    def kernels(plan):
        return {p.label: p.seconds for p in plan.predictions if p.kind == "operator"}

    assert kernels(from_file) == kernels(from_records)
    assert any(p.source.startswith("frozen record") for p in from_file.predictions)
    # and the model runs from the file alone, as its graph's numpy reference says
    inputs = {"x": np.random.default_rng(0).standard_normal((1, 8, 6, 6)).astype(np.float32)}
    with laytune.load_model(graph, database=str(path), device=laytune_device, fuse=fuse) as model:
        assert model.plan.placements == from_records.placements
        (got,) = model(**inputs)
    (want,) = graph.reference(inputs).values()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_model_tuned_fused_only_plans_every_conv_from_its_records_and_its_file(
    tmp_path: Path, laytune_device
) -> None:
    """Records of the fused workloads only (what ``tune_model`` writes): each
    conv is planned from the record of its fusion, the one tune_model tuned.
    The 1 x 1 conv's epilogue stops at the 3 x 3 conv, which took the add: a
    lookup that fused on past it (bias, add, relu) found no record, so the
    conv ran an untuned kernel with its bias unfused."""
    from laytune.plan import tuned_workloads

    graph = residual_graph()
    device = laytune_device.info
    url = f"sqlite:///{tmp_path / 'r.db'}"
    tuned = tuned_workloads(graph, fuse=True)
    assert len(tuned) == 2 and all("+epilogue[" in t.workload.key for t in tuned)
    with open_database(url) as db:
        for t in tuned:
            w = t.workload
            plain = Candidate.make({b.name: identity(b.shape) for b in w.buffers}, {})
            db.add(record_of(w, device, plain, 1e-3))
    path = freeze_model(graph, url, tmp_path / "model.json", laytune_device)
    with open_database(url, read_only=True) as db:
        from_records = plan_layouts(graph, db, device, fuse=True)
    from_file = plan_layouts(graph, load_frozen(path), device, fuse=True)
    for plan in (from_records, from_file):
        frozen = {p.op for p in plan.placements if p.frozen}
        assert frozen == {"conv", "down"}, plan.log
        assert sorted(f.key for f in plan.fusions) == sorted(t.workload.key for t in tuned)
    assert from_file.placements == from_records.placements


def test_freezing_a_model_with_nothing_recorded_says_so(tmp_path: Path, laytune_device) -> None:
    graph, _ = seed_graph()
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    open_database(url).close()
    with pytest.raises(PlanError, match="no verified record of any layout-critical operator"):
        freeze_model(graph, url, tmp_path / "model.json", laytune_device)
    assert not (tmp_path / "model.json").exists()


def test_a_frozen_file_for_another_device_is_refused_not_planned_around(
    tmp_path: Path, laytune_device
) -> None:
    device = laytune_device.info
    url, graph = _database(tmp_path, device)
    path = freeze_model(graph, url, tmp_path / "model.json", laytune_device)
    data = json.loads(path.read_text())
    for entry in data["entries"]:
        entry["device_key"] = "another-device"
    path.write_text(json.dumps(data))
    with pytest.raises(FrozenFileError, match="for another device"):
        plan_layouts(graph, load_frozen(path), device)


def test_freezing_a_model_from_a_frozen_file_or_a_missing_record_says_why(
    tmp_path: Path, laytune_device
) -> None:
    url, graph = _database(tmp_path, laytune_device.info)
    path = freeze_model(graph, url, tmp_path / "model.json", laytune_device)
    with pytest.raises(ArgumentTypeError, match="plans from a records database, not FrozenLayouts"):
        freeze_model(graph, str(path), tmp_path / "again.json", laytune_device)
    conv = next(op.workload for op in graph.ops if op.name == "conv1")
    stranger = Candidate.make({b.name: identity(b.shape) for b in conv.buffers}, {"block.ow": 3})
    with pytest.raises(
        FrozenFileError, match="no verified record of the candidate chosen for conv2d"
    ):
        freeze(url, tmp_path / "x.json", device=laytune_device.info.key,
               candidates={conv.key: stranger})  # fmt: skip
    assert not (tmp_path / "x.json").exists() and not (tmp_path / "again.json").exists()


def test_freeze_model_on_the_command_line_takes_no_workload_or_device(
    tmp_path: Path, laytune_device, capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = _database(tmp_path, laytune_device.info)
    for extra in (["--workload", "conv2d"], ["--device", laytune_device.info.key]):
        assert main(["freeze", "--model", "m.onnx", "--db", url, *extra]) == 2
        err = capsys.readouterr().err
        assert "freeze --model freezes what the model's plan runs on the default device" in err
        assert "drop --workload and --device" in err
