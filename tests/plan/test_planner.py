"""Planning without a device: the seed's conv -> add -> conv example, the
padding rules, rewrites that must stay, and where frozen layouts come from."""

from __future__ import annotations

import math

import numpy as np
import pytest

from laytune import layout as L
from laytune import ops
from laytune.codegen import GENERIC_DEVICE
from laytune.exceptions import ArgumentTypeError
from laytune.ops import Workload
from laytune.plan import Graph, LayoutSource, PlanError, plan_layouts
from laytune.space import Candidate
from tests.plan.graphs import (
    IDENTITY4,
    NCHW4C,
    conv_candidate,
    padded_graph,
    reshape_graph,
    seed_graph,
    weights,
)
from tests.search.devices import written_cpu


def _edges(plan) -> list[tuple[str, tuple[str, ...], str, str]]:
    return [
        (r.tensor, r.consumers, str(r.src.index_map), str(r.dst.index_map)) for r in plan.rewrites
    ]


def test_the_seed_example_keeps_one_rewrite_at_the_input_and_one_at_the_output() -> None:
    graph, source = seed_graph()
    plan = plan_layouts(graph, source)
    assert _edges(plan) == [
        ("x", ("conv1.X",), IDENTITY4, NCHW4C),
        ("conv2", ("output",), NCHW4C, IDENTITY4),
    ]
    # the add computes in NCHW4c; the rewrite that flowed onto its bias folded into the constant
    assert str(plan.candidate("add").layout("X").index_map) == NCHW4C
    assert [(v.tensor, str(v.layout.index_map), v.consumers) for v in plan.folded] == [
        ("f1", "lambda i, j, k, l: [i // 4, j // 4, k, l, j % 4, i % 4]", ("conv1.W",)),
        ("f2", "lambda i, j, k, l: [i // 4, j // 4, k, l, j % 4, i % 4]", ("conv2.W",)),
        ("bias", "lambda i: [i // 4, i % 4]", ("add.B",)),
    ]
    # the pair between the convolutions cancelled: add reads conv1's own copy
    assert plan.read("add", "X").origin == "operator"
    assert plan.read("conv2", "X").origin == "operator"
    log = "\n".join(plan.log)
    assert f"flowed {NCHW4C} back from conv2.X through add" in log
    assert f"add.X <- conv1: cancelled: {NCHW4C} -> {IDENTITY4} -> {NCHW4C}" in log
    assert "add.B: folded into constant bias as lambda i: [i // 4, i % 4]" in log
    assert plan.placement("add").note == "planned: flowed back from conv2.X; 4-wide vectors along j"
    assert plan.placement("conv1").frozen and not plan.placement("add").frozen


def test_without_planning_each_frozen_operator_has_rewrites_around_it() -> None:
    graph, source = seed_graph()
    plan = plan_layouts(graph, source, minimize=False)
    assert _edges(plan) == [
        ("x", ("conv1.X",), IDENTITY4, NCHW4C),
        ("conv1", ("add.X",), NCHW4C, IDENTITY4),
        ("add", ("conv2.X",), IDENTITY4, NCHW4C),
        ("conv2", ("output",), NCHW4C, IDENTITY4),
    ]
    planned = plan_layouts(graph, source)
    conversion = 2 * (1 * 8 * 6 * 6) * 4  # read and write one float32 (1, 8, 6, 6) tensor
    assert plan.rewrite_bytes - planned.rewrite_bytes == 2 * conversion


def test_a_plan_prints_every_layout_and_every_rewrite() -> None:
    graph, source = seed_graph()
    text = str(plan_layouts(graph, source))
    assert text.startswith(
        "plan 'seed' for generic OpenCL device (generic): 3 operators, 2 rewrites"
    )
    for line in [
        f"x      input     float32[1, 8, 6, 6]     {IDENTITY4}",
        f"add    value     float32[1, 8, 6, 6]     {NCHW4C}",
        "bias   constant  float32[8]              lambda i: [i // 4, i % 4]  for add.B",
        f"x: {IDENTITY4} -> {NCHW4C}",
        "for conv1.X; physical map lambda p0, p1, p2, p3: [p0, p1 // 4, p2, p3, p1 % 4]",
        f"conv2: {NCHW4C} -> {IDENTITY4}",
        "for output; physical map lambda p0, p1, p2, p3, p4: [p0, p1 * 4 + p4, p2, p3]",
    ]:
        assert line in text, line


def test_weights_that_are_graph_inputs_keep_their_rewrites() -> None:
    graph, source = seed_graph(weights_as_inputs=True)
    plan = plan_layouts(graph, source)
    assert [(r.tensor, r.consumers) for r in plan.rewrites] == [
        ("x", ("conv1.X",)),
        ("f1", ("conv1.W",)),
        ("f2", ("conv2.W",)),
        ("conv2", ("output",)),
    ]


def test_a_reshape_the_planner_cannot_see_through_keeps_its_rewrites() -> None:
    graph, source = reshape_graph()
    plan = plan_layouts(graph, source)
    assert _edges(plan) == [
        ("x", ("conv1.X",), IDENTITY4, NCHW4C),
        ("conv1", ("reshape.X",), NCHW4C, IDENTITY4),
        ("reshape", ("conv2.X",), IDENTITY4, NCHW4C),
        ("conv2", ("output",), NCHW4C, IDENTITY4),
    ]
    assert plan.placement("reshape").note == (
        "planned: identity layouts; the statement's derived start, scalar"
    )
    log = "\n".join(plan.log)
    assert f"kept a rewrite: {NCHW4C} cannot flow back through reshape (conv2.X)" in log
    assert "physical index j // 4 of Y's layout" in log


def test_a_rewrite_is_not_copied_onto_two_graph_inputs() -> None:
    conv = ops.conv2d(1, 8, 4, 4, 4, 3, stride=1, padding=1)
    g = Graph("sum")
    a, b = g.input("a", (1, 8, 4, 4)), g.input("b", (1, 8, 4, 4))
    add = ops.Workload.define(
        "add",
        "Y[n, c, h, w] = X[n, c, h, w] + Z[n, c, h, w]",
        {"n": 1, "c": 8, "h": 4, "w": 4},
        {"X": (1, 8, 4, 4), "Z": (1, 8, 4, 4)},
    )
    y = g.apply(add, "add", X=a, Z=b)
    g.output(g.apply(conv, "conv", X=y, W=g.constant("f", weights((4, 8, 3, 3), 0))))
    plan = plan_layouts(g, {conv.key: conv_candidate(conv)})
    assert [(r.tensor, r.consumers) for r in plan.rewrites] == [
        ("add", ("conv.X",)),
        ("conv", ("output",)),
    ]


def test_a_rewrite_moves_forward_past_a_pooling_where_the_tensor_is_smaller() -> None:
    conv = ops.conv2d(1, 8, 8, 8, 8, 3, stride=1, padding=1)
    g = Graph("pool")
    x = g.input("x", (1, 8, 8, 8))
    y = g.apply(conv, "conv", X=x, W=g.constant("f", weights((8, 8, 3, 3), 0)))
    y = g.apply(ops.relu((1, 8, 8, 8)), "relu", X=y)
    g.output(g.apply(ops.max_pool2d(1, 8, 8, 8, kernel=2, stride=2), "pool", X=y))
    plan = plan_layouts(g, {conv.key: conv_candidate(conv)})
    assert [(r.tensor, r.consumers) for r in plan.rewrites] == [
        ("x", ("conv.X",)),
        ("pool", ("output",)),
    ]
    assert plan.placement("pool").note == (
        "planned: flowed forward from relu (X); 4-wide vectors along c"
    )
    assert str(plan.layout_of("pool").index_map) == NCHW4C


@pytest.mark.parametrize("with_relu", [False, True], ids=["direct", "relu between"])
def test_a_producer_that_promises_nothing_is_made_to_write_the_zeros_its_reader_needs(
    with_relu: bool,
) -> None:
    graph, source = padded_graph(producer_pad=None, with_relu=with_relu)
    plan = plan_layouts(graph, source)
    assert [r.tensor for r in plan.rewrites] == ["x", "conv2"]
    producer = "relu" if with_relu else "conv1"
    assert plan.candidate(producer).pad_value("Y") == 0.0
    assert (
        f"{producer} writes 0.0 into the padding of its result (was None) for conv2.X" in plan.log
    )


def test_a_producer_that_writes_other_padding_keeps_a_pad_rewrite() -> None:
    graph, source = padded_graph(producer_pad=math.inf, with_relu=False)
    plan = plan_layouts(graph, source)
    kept = [r for r in plan.rewrites if r.tensor == "conv1"]
    assert len(kept) == 1
    assert (kept[0].src, kept[0].dst) == (source_layout := plan.layout_of("conv1"), source_layout)
    assert (kept[0].src_pad, kept[0].dst_pad) == (math.inf, 0.0)
    assert plan.candidate("conv1").pad_value("Y") == math.inf


class _Records:
    """A stand-in for the records database: only best_candidate."""

    def __init__(self, candidates: dict[str, Candidate]) -> None:
        self.candidates = candidates
        self.asked: list[tuple[str, str]] = []

    def best_candidate(self, workload_key: str, device_key: str) -> Candidate | None:
        self.asked.append((workload_key, device_key))
        return self.candidates.get(workload_key)


def test_a_records_database_and_a_mapping_give_the_same_plan() -> None:
    graph, source = seed_graph()
    records = _Records(source)
    assert isinstance(records, LayoutSource)
    from_records = plan_layouts(graph, records, GENERIC_DEVICE)
    from_mapping = plan_layouts(graph, source)
    assert from_records.versions == from_mapping.versions
    assert {device for _, device in records.asked} == {GENERIC_DEVICE.key}
    assert {key for key, _ in records.asked} == {
        graph.op("conv1").workload.key,
        graph.op("add").workload.key,
        graph.op("conv2").workload.key,
    }
    with pytest.raises(PlanError, match="a LayoutSource answers per device: pass device="):
        plan_layouts(graph, records)
    with pytest.raises(ArgumentTypeError, match="not a Candidate"):
        plan_layouts(graph, {graph.op("conv1").workload.key: "NCHW4c"})


def test_critical_names_choose_what_is_frozen() -> None:
    graph, source = seed_graph()
    only_first = plan_layouts(graph, source, critical=("conv1",))
    assert [p.frozen for p in only_first.placements] == [True, False, False]
    assert plan_layouts(graph, source, critical=("conv2d",)).placement("conv2").frozen
    with pytest.raises(PlanError, match=r"critical names \['conv3'\] match no operator"):
        plan_layouts(graph, source, critical=("conv3",))
    with pytest.raises(
        PlanError, match="add is layout-critical but the layout source has no candidate"
    ):
        plan_layouts(graph, source, critical=("add",))


def test_a_frozen_candidate_codegen_refuses_is_named() -> None:
    graph, source = seed_graph()
    conv1 = graph.op("conv1").workload
    bad = Candidate.make({**source[conv1.key].layout_map, "Y": L.texture((1, 8, 6, 6), 1)})
    with pytest.raises(PlanError, match=r"frozen candidate of conv1 cannot be lowered: .*'Y'"):
        plan_layouts(graph, {**source, conv1.key: bad})


def test_a_plan_does_not_change_when_the_graph_grows_later() -> None:
    graph, source = seed_graph()
    plan = plan_layouts(graph, source)
    graph.apply(ops.relu((1, 4, 6, 6)), "late", X="conv2")
    assert "late" not in plan.graph.tensors
    assert np.isfinite(plan.rewrite_bytes)


# -- the kernels of planned operators ---------------------------------------------


def _bias_relu() -> Graph:
    g = Graph("bias relu")
    x = g.input("x", (1, 8, 12, 16))
    b = g.constant("b", np.linspace(-1, 1, 8).astype(np.float32))
    t = g.apply(ops.bias_add((1, 8, 12, 16), axis=1), "bias", X=x, B=b)
    g.output(g.apply(ops.relu((1, 8, 12, 16)), "relu", X=t))
    return g


def test_a_planned_operator_runs_vectors_along_its_contiguous_axis() -> None:
    """Not the one-scalar-per-work-item baseline: the start derived from the
    element-wise statement, vectors as wide as the device's lanes along l,
    the axis every buffer keeps contiguous (B broadcasts along it), rows of
    them per work-item."""
    for device in (GENERIC_DEVICE, written_cpu(16), written_cpu(8)):
        plan = plan_layouts(_bias_relu(), device=device)
        lanes = device.float_lanes()
        for name in ("bias", "relu"):
            candidate = plan.candidate(name)
            assert candidate.knob("vector_axis") == "l" and candidate.knob("vector") == lanes
            assert candidate.knob("block.l") % lanes == 0
            assert all(layout.is_identity for layout in candidate.layout_map.values())
            assert plan.placement(name).note == (
                "planned: identity layouts; the statement's derived start"
            )


def test_a_planned_row_reduction_reads_vectors_along_its_reduce_axis() -> None:
    """A softmax's row max (BERT's 12 x 128 x 128 scores) is no element-wise
    statement: its derived start reads each row in vectors with several
    accumulators, where the vector rule of a spatial axis found none (the
    rows are 128 apart) and left the plain kernel."""
    g = Graph("row max")
    x = g.input("x", (12, 128, 128))
    row_max = Workload.define(
        "row_max", "M[b, i] = max(X[b, i, j])", {"b": 12, "i": 128, "j": 128}, {"X": (12, 128, 128)}
    )
    g.output(g.apply(row_max, "max", X=x))
    plan = plan_layouts(g, device=written_cpu(16))
    knobs = plan.candidate("max").knob_map
    assert knobs["reduce_vector"] == 16 and knobs.get("vector", 1) == 1
    assert plan.placement("max").note == "planned: identity layouts; the statement's derived start"


def test_a_planned_transpose_takes_the_register_tile() -> None:
    """A transpose's derived start: square tiles of full vectors read along
    the input's rows and transposed in registers (``vector_transpose``)."""
    g = Graph("transpose")
    x = g.input("x", (12, 128, 64))
    g.output(g.apply(ops.transpose((12, 128, 64), perm=(0, 2, 1)), "t", X=x))
    plan = plan_layouts(g, device=written_cpu(16))
    knobs = plan.candidate("t").knob_map
    assert knobs["vector"] == 16 and knobs["vector_transpose"]


def test_the_vector_follows_a_blocked_layout() -> None:
    """In the seed graph the add computes in NCHW4c: its contiguous axis is
    the channels' (j % 4), so the vector runs along j, 4 wide."""
    graph, source = seed_graph()
    plan = plan_layouts(graph, source)
    add = plan.candidate("add")
    assert str(add.layout("X").index_map) == NCHW4C
    assert (add.knob("vector_axis"), add.knob("vector")) == ("j", 4)
    assert plan.placement("add").note == "planned: flowed back from conv2.X; 4-wide vectors along j"


def test_a_record_with_the_planned_layouts_gives_its_knobs(tmp_path) -> None:
    from laytune.records import Record, open_database

    graph = _bias_relu()
    relu = graph.op("relu").workload
    layouts = {b.name: L.identity(b.shape) for b in relu.buffers}
    db = open_database(f"sqlite:///{tmp_path / 'r.db'}")
    tuned = Candidate.make(layouts, {"block.k": 2, "block.l": 8, "vector_axis": "l", "vector": 8})
    slower = Candidate.make(layouts, {"block.l": 4})
    other = Candidate.make({**layouts, "Y": L.block(relu.buffer("Y").shape, 1, 4)}, {})
    for candidate, seconds in ((tuned, 2e-6), (slower, 3e-6), (other, 1e-6)):
        db.add(Record(relu.key, GENERIC_DEVICE.key, candidate, "ok", value_s=seconds))
    plan = plan_layouts(graph, {}, GENERIC_DEVICE, records=db)
    assert plan.candidate("relu").knob_map == {
        **plan.candidate("relu").knob_map,
        "block.k": 2,
        "block.l": 8,
        "vector": 8,
    }
    record = db.lookup(relu.key, GENERIC_DEVICE.key, tuned.key)
    assert plan.placement("relu").note == f"planned: identity layouts; knobs of record {record.id}"
    # no record: the derived start, as wide as the device's lanes
    assert plan.candidate("bias").knob("vector") == GENERIC_DEVICE.float_lanes()
    db.close()


def test_the_minimizers_memoised_cost_is_the_whole_graphs_resolution() -> None:
    """The minimizer prices a state tensor by tensor, each share memoised on
    the candidates around it; over states that change one operator at a
    time, as its moves do, the sum equals resolving the whole graph."""
    from laytune.plan._planner import _cost, _identity_candidate, _Minimizer, _resolve

    graph, source = seed_graph()
    state = {op.name: _identity_candidate(op.workload) for op in graph.ops}
    minimizer = _Minimizer(graph, dict(state), frozenset(), GENERIC_DEVICE, [])
    tuned = {op.name: source[op.workload.key] for op in graph.ops if op.workload.key in source}
    costs = set()
    for name in ["conv1", "add", "conv2", "conv1", "add"]:
        if name in tuned:
            state[name] = tuned[name]
        else:  # the add flowed the layout its producer writes
            state[name] = minimizer.derive(name, state["conv1"].layout("Y"))
        whole = _cost(graph, _resolve(graph, state, via_identity=False))
        assert minimizer.cost(state) == whole, name
        costs.add(whole)
    assert len(costs) > 1  # the states differ in what they cost


def test_derive_leaves_a_statement_the_device_cannot_run_to_the_planner() -> None:
    """float16 on a device without cl_khr_fp16: no space, so no derived
    start; the conv is planned in logical layouts, not an error."""
    device = written_cpu(16)
    assert "cl_khr_fp16" not in device.extensions
    conv = ops.conv2d(1, 8, 6, 6, 8, 3, stride=1, padding=1, dtype="float16")
    g = Graph("half")
    x = g.input("x", (1, 8, 6, 6), dtype="float16")
    w = g.constant("w", np.ones((8, 8, 3, 3), np.float16))
    g.output(g.apply(conv, "conv", X=x, W=w))
    plan = plan_layouts(g, {}, device, derive=True)
    assert not plan.placement("conv").frozen
    assert plan.placement("conv").note.startswith("planned: identity layouts")


def test_a_derived_start_the_code_generator_refuses_is_planned_and_logged(monkeypatch) -> None:
    """A start that does not lower is not the source's word: the conv is
    planned instead, and the log says why (a source's candidate that does
    not lower stays an error)."""
    from laytune.exceptions import LayoutRejectedError
    from laytune.plan import _planner

    def refuse(*args, **kwargs):
        raise LayoutRejectedError("refused here")

    graph, _ = seed_graph()
    monkeypatch.setattr(_planner, "lower", refuse)
    plan = plan_layouts(graph, {}, written_cpu(16), derive=True, minimize=False)
    assert not any(p.frozen for p in plan.placements)
    assert "did not freeze conv1: its derived start does not lower: refused here" in plan.log
