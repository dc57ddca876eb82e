"""Choosing a model's kernels by timing them in its plan: where the records
rank a slow kernel first, the plan's own times pick the fast one, and the
frozen file keeps it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import laytune
from laytune import ops
from laytune.plan import Graph, freeze_model, measure_choices, plan_layouts
from laytune.plan._model import _recorded_choices
from laytune.records import Record, load_frozen, open_database
from laytune.search import standard_candidates
from laytune.space import Candidate, SearchSpace
from tests.plan.graphs import record_of, weights

SIZE = 256


def _graph() -> tuple[Graph, ops.Workload]:
    matmul = ops.matmul(SIZE, SIZE, SIZE)
    g = Graph("one matmul")
    a = g.input("a", (SIZE, SIZE))
    g.output(g.apply(matmul, "mm", A=a, B=g.constant("b", weights((SIZE, SIZE), 1))))
    return g, matmul


def test_the_plan_times_pick_the_kernel_the_records_misrank(tmp_path: Path, laytune_device):
    """Records say the scalar kernel (one output per work-item, logical
    layouts) runs in a tenth of the register-blocked start's time; on the
    device it runs several times slower. The planner freezes the scalar one;
    timed in the plan, the start wins, and the frozen file holds it."""
    device = laytune_device.info
    graph, matmul = _graph()
    space = SearchSpace(matmul, device)
    scalar = space.identity()
    (start,) = standard_candidates(space, 1)
    url = f"sqlite:///{tmp_path / 'r.db'}"
    with open_database(url) as db:
        db.add(record_of(matmul, device, scalar, 1e-4))
        db.add(record_of(matmul, device, start, 1e-3))
        planned = plan_layouts(graph, db, device, fuse=False)
        chosen = dict(_recorded_choices(planned, graph, db, device.key))
        assert chosen == {matmul.key: scalar}  # the records' word
        lines: list[str] = []
        measured, found = measure_choices(
            graph, db, laytune_device, chosen, fuse=False, say=lines.append
        )
    assert measured == {matmul.key: start}
    (choice,) = found
    assert choice.changed and choice.candidate == start
    relative = dict(choice.relative)
    assert relative[scalar.key] == 1.0 and relative[start.key] < 0.5
    assert len(lines) == 1 and "took candidate" in lines[0]

    path = freeze_model(
        graph, url, tmp_path / "model.json", laytune_device, fuse=False, measure=True, say=print
    )
    (entry,) = load_frozen(path)
    assert entry.candidate == start and entry.time_s == 1e-3
    inputs = {"a": np.random.default_rng(0).standard_normal((SIZE, SIZE)).astype(np.float32)}
    with laytune.load_model(graph, database=str(path), device=laytune_device, fuse=False) as model:
        assert [p.candidate for p in model.plan.placements if p.frozen] == [start]
        (got,) = model(**inputs)
    (want,) = graph.reference(inputs).values()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_a_workload_with_one_recorded_candidate_is_not_timed(tmp_path: Path, laytune_device):
    device = laytune_device.info
    graph, matmul = _graph()
    only = SearchSpace(matmul, device).identity()
    url = f"sqlite:///{tmp_path / 'r.db'}"
    with open_database(url) as db:
        db.add(record_of(matmul, device, only, 1e-3))
        measured, found = measure_choices(graph, db, laytune_device, {matmul.key: only}, fuse=False)
    assert measured == {matmul.key: only} and found == []


def test_a_candidate_whose_plan_does_not_build_is_left_out_and_said(tmp_path: Path, laytune_device):
    """A recorded candidate the plan cannot lower (a vector of 3: no OpenCL
    type) is left out with the reason; the others are still timed."""
    device = laytune_device.info
    graph, matmul = _graph()
    space = SearchSpace(matmul, device)
    scalar = space.identity()
    (start,) = standard_candidates(space, 1)
    broken = Candidate.make(start.layout_map, {**start.knob_map, "vector": 3, "vector_axis": "j"})
    url = f"sqlite:///{tmp_path / 'r.db'}"
    with open_database(url) as db:
        db.add(record_of(matmul, device, scalar, 1e-4))
        db.add(Record(matmul.key, device.key, broken, "ok", value_s=2e-4, compute_s=2e-4))
        db.add(record_of(matmul, device, start, 1e-3))
        lines: list[str] = []
        measured, (choice,) = measure_choices(
            graph, db, laytune_device, {matmul.key: scalar}, fuse=False, say=lines.append
        )
    assert measured == {matmul.key: start}
    assert [k for k, _ in choice.relative] == [scalar.key, start.key]
    assert any(f"candidate {broken.key} left out, its plan does not build" in x for x in lines)


def test_plans_are_compared_on_the_launches_they_do_not_share_and_the_launch_after_each():
    """Two plans of one model differ in one convolution's kernel and in the
    rewrite it needs: those, and the launches right after them (they read
    what those wrote), are timed against each other; the rest run alike."""
    from laytune.plan import Step
    from laytune.plan._measured import compared_launches

    def step(label: str, source: str, size: tuple[int, ...] = (8,)) -> Step:
        return Step(label, "compute", None, size, None, source)

    a = [step("stem", "s"), step("conv1", "c1"), step("conv2", "c2"), step("pool", "p")]
    b = [step("stem", "s"), step("conv1", "c1b"), step("conv1.Y", "r"), step("conv2", "c2")]
    b.append(step("pool", "p"))
    assert compared_launches(a, a) == set()
    assert compared_launches(a, b) == {"conv1", "conv1.Y", "conv2"}
    # the same kernel over another range is another launch
    c = [*a[:3], step("pool", "p", (16,))]
    assert compared_launches(a, c) == {"pool"}
