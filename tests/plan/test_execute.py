"""Plans run on the OpenCL test device: tensors stay on the device in their
planned layouts, and every graph output equals numpy."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pyopencl as cl
import pytest

from laytune import layout as L
from laytune import ops
from laytune.codegen import GENERIC_DEVICE
from laytune.exceptions import ConfigError
from laytune.ops import Workload
from laytune.plan import Graph, Plan, plan_layouts
from laytune.plan._execute import (
    PlanBuffer,
    PlanLaunch,
    row_major_view,
    same_order,
    share_storage,
)
from laytune.space import Candidate
from tests.plan.graphs import (
    conv_candidate,
    padded_graph,
    reshape,
    reshape_graph,
    seed_graph,
    weights,
)
from tests.search.devices import written_cpu


def _check(plan: Plan, context: cl.Context, **extra: np.ndarray) -> list[tuple[str, str]]:
    """Run ``plan`` and compare every output with the graph's numpy reference;
    returns the (label, kind) of each launch."""
    graph = plan.graph
    inputs = {
        name: weights(t.shape, 10 + k)
        for k, (name, t) in enumerate(graph.tensors.items())
        if t.kind == "input"
    }
    inputs.update(extra)
    with plan.compile(context) as compiled:
        got = compiled.run(inputs)
        steps = [(s.label, s.kind) for s in compiled.steps]
    want = graph.reference(inputs)
    for name in graph.outputs:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4)
    return steps


@pytest.mark.parametrize("minimize", [True, False], ids=["planned", "rewrites around each"])
def test_the_seed_example_equals_numpy(cl_context: cl.Context, minimize: bool) -> None:
    graph, source = seed_graph()
    steps = _check(plan_layouts(graph, source, minimize=minimize), cl_context)
    if minimize:
        assert steps == [
            ("x -> conv1.X", "rewrite"),
            ("conv1", "compute"),
            ("add", "compute"),
            ("conv2", "compute"),
            ("conv2 -> output", "rewrite"),
        ]
    else:
        assert [kind for _, kind in steps].count("rewrite") == 4


def test_weights_given_at_run_time_are_rewritten_on_the_device(cl_context: cl.Context) -> None:
    graph, source = seed_graph(weights_as_inputs=True)
    steps = _check(plan_layouts(graph, source), cl_context)
    assert ("f1 -> conv1.W", "rewrite") in steps


def test_a_reshape_with_its_kept_rewrites_equals_numpy(cl_context: cl.Context) -> None:
    graph, source = reshape_graph()
    steps = _check(plan_layouts(graph, source), cl_context)
    assert ("conv1 -> reshape.X", "rewrite") in steps
    assert ("reshape -> conv2.X", "rewrite") in steps


@pytest.mark.parametrize(
    ("producer_pad", "with_relu"),
    [(None, False), (None, True), (math.inf, False)],
    ids=["refined producer", "refined relu", "pad rewrite kept"],
)
def test_padding_a_reader_overcomputes_over_holds_its_zeros(
    cl_context: cl.Context, producer_pad: object, with_relu: bool
) -> None:
    graph, source = padded_graph(producer_pad, with_relu)
    _check(plan_layouts(graph, source), cl_context)


def test_without_the_refined_pad_value_the_padding_would_poison_the_result(
    cl_context: cl.Context,
) -> None:
    # the control for the test above: the same plan with conv1 not writing its
    # padding leaves NaN there, which the overcomputing conv2 turns into NaN
    graph, source = padded_graph(None, with_relu=False)
    plan = plan_layouts(graph, source)
    unrefined = tuple(
        dataclasses.replace(p, candidate=dataclasses.replace(p.candidate, pad_values=()))
        if p.op == "conv1"
        else p
        for p in plan.placements
    )
    broken = dataclasses.replace(plan, placements=unrefined)
    with broken.compile(cl_context) as compiled:
        out = compiled.run({"x": weights((1, 6, 5, 5), 0)})["conv2"]
    assert np.isnan(out).any()


def test_two_adjacent_rewrites_run_as_one_kernel(cl_context: cl.Context) -> None:
    conv1 = ops.conv2d(1, 8, 4, 4, 8, 3, stride=1, padding=1)
    conv2 = ops.conv2d(1, 8, 4, 4, 4, 3, stride=1, padding=1)
    g = Graph("fold")
    x = g.input("x", (1, 8, 4, 4))
    y = g.apply(conv1, "conv1", X=x, W=g.constant("f1", weights((8, 8, 3, 3), 1)))
    y = g.apply(ops.relu((1, 8, 4, 4)), "relu", X=y)
    g.output(g.apply(conv2, "conv2", X=y, W=g.constant("f2", weights((4, 8, 3, 3), 2))))
    nhwc = L.permute((1, 8, 4, 4), (0, 2, 3, 1))
    source = {conv1.key: conv_candidate(conv1), conv2.key: conv_candidate(conv2, x=nhwc)}
    plan = plan_layouts(g, source)
    (fused,) = [r for r in plan.rewrites if r.tensor == "conv1"]
    assert str(fused.index_map) == "lambda p0, p1, p2, p3, p4: [p0, p2, p3, p1 * 4 + p4]"
    steps = _check(plan, cl_context)
    assert steps.count(("conv1 -> relu.X", "rewrite")) == 1


def test_an_image_input_keeps_its_rewrite_and_runs(cl_context: cl.Context) -> None:
    conv = ops.conv2d(1, 8, 4, 4, 8, 3, stride=1, padding=1)
    g = Graph("texture")
    y = g.apply(ops.relu((1, 8, 4, 4)), "relu", X=g.input("x", (1, 8, 4, 4)))
    g.output(g.apply(conv, "conv", X=y, W=g.constant("f", weights((8, 8, 3, 3), 3))))
    source = {conv.key: conv_candidate(conv, x=L.texture((1, 8, 4, 4), 1))}
    plan = plan_layouts(g, source)
    assert any("Image2DRead(role='output')" in line for line in plan.log)
    assert _check(plan, cl_context)[:2] == [("relu", "compute"), ("relu -> conv.X", "rewrite")]


def test_profiling_times_every_launch(cl_context: cl.Context) -> None:
    graph, source = seed_graph()
    with plan_layouts(graph, source).compile(cl_context) as compiled:
        timing = compiled.profile({"x": weights((1, 8, 6, 6), 0)}, repeats=3, warmup=1)
        assert [label for label, _ in timing.per_step] == [s.label for s in compiled.steps]
        with pytest.raises(ConfigError, match="repeats must be >= 1"):
            compiled.profile({"x": weights((1, 8, 6, 6), 0)}, repeats=0)
    assert len(timing.device_seconds) == len(timing.wall_seconds) == 3
    assert timing.device_median > 0 and timing.wall_median > 0


def test_planned_operators_with_vectors_equal_numpy(cl_context: cl.Context) -> None:
    """bias and relu run vectors as wide as the device's lanes (see
    test_planner); the result is exact."""
    g = Graph("bias relu")
    x = g.input("x", (1, 8, 12, 16))
    b = g.constant("b", np.linspace(-1, 1, 8).astype(np.float32))
    t = g.apply(ops.bias_add((1, 8, 12, 16), axis=1), "bias", X=x, B=b)
    g.output(g.apply(ops.relu((1, 8, 12, 16)), "relu", X=t))
    plan = plan_layouts(g)
    assert plan.candidate("relu").knob("vector") == GENERIC_DEVICE.float_lanes()
    assert _check(plan, cl_context) == [("bias", "compute"), ("relu", "compute")]


def test_planned_reductions_and_transposes_equal_numpy(cl_context: cl.Context) -> None:
    """A softmax's row max and sum and a transpose, each planned with its
    derived start (vectors along the reduce axis; register tiles), on the
    device: the results match numpy."""
    shape = (4, 32, 64)
    g = Graph("softmax rows")
    x = g.input("x", shape)
    loops = {"b": 4, "i": 32, "j": 64}
    row_max = Workload.define("row_max", "M[b, i] = max(X[b, i, j])", loops, {"X": shape})
    row_sum = Workload.define("row_sum", "S[b, i] += X[b, i, j]", loops, {"X": shape})
    g.output(g.apply(row_max, "max", X=x))
    g.output(g.apply(row_sum, "sum", X=x))
    g.output(g.apply(ops.transpose(shape, perm=(0, 2, 1)), "t", X=x))
    plan = plan_layouts(g, device=written_cpu(16))
    assert plan.candidate("max").knob("reduce_vector") == 16
    assert plan.candidate("sum").knob("reduce_vector") == 16
    assert plan.candidate("t").knob("vector_transpose")
    assert sorted(_check(plan, cl_context)) == [
        ("max", "compute"),
        ("sum", "compute"),
        ("t", "compute"),
    ]


def test_a_row_major_copy_is_a_view_and_a_transpose_is_not() -> None:
    """A reshape or flatten reads the element of its output's row-major offset;
    a transpose and a shifted copy do not."""
    assert row_major_view(reshape((1, 8, 4, 4), (1, 16, 2, 4)))
    assert row_major_view(reshape((2, 3, 4), (6, 4)))
    assert row_major_view(ops.copy((3, 5)))
    assert not row_major_view(ops.transpose((3, 5)))
    assert not row_major_view(ops.relu((3, 5)))
    shifted = Workload.define("shift", "Y[i] = X[i + 1]", {"i": 6}, {"X": (6,)})
    assert not row_major_view(shifted)


def test_whether_a_copy_is_a_view_is_decided_without_a_pass_over_the_tensor() -> None:
    """The decision reads the load's expressions (periods), so a reshape of
    a 4096 x 4096 tensor allocates nothing near its 16M indices (a pass
    over them took 256 MiB), and it agrees with the element-by-element
    check on every form that check decides."""
    import tracemalloc

    from laytune.plan._sink import _read_in_row_major_order, _reads_in_row_major_order

    big = reshape((4096, 4096), (64, 64, 4096))
    tracemalloc.start()
    try:
        assert row_major_view(big)
        assert not row_major_view(ops.transpose((4096, 4096)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20  # bytes
    shifted = Workload.define("shift", "Y[i] = X[i + 1]", {"i": 6}, {"X": (6,)})
    wrapped = Workload.define("wrap", "Y[i, j] = X[j, i]", {"i": 4, "j": 4}, {"X": (4, 4)})
    for workload in (
        reshape((1, 8, 4, 4), (1, 16, 2, 4)),
        reshape((2, 3, 4), (6, 4)),
        reshape((6, 4), (2, 3, 4)),
        ops.copy((3, 5)),
        ops.transpose((3, 5)),
        wrapped,
    ):
        assert _read_in_row_major_order(workload) == _reads_in_row_major_order(workload)
    # a read outside the input: left to the element-by-element check
    assert _read_in_row_major_order(shifted) is None
    assert not _reads_in_row_major_order(shifted)


def test_a_reshape_between_layouts_that_agree_is_a_view() -> None:
    """A [1, 16, 12] tensor blocked as [i, j // 8, k, j % 8] holds the rows of
    [16, 12] blocked as [j // 8, k, j % 8] element for element; other pairs
    do not, nor padded ones."""
    rows = L.block((16, 12), 0, 8)
    assert same_order(L.block((1, 16, 12), 1, 8), rows)
    assert same_order(L.identity((2, 3, 4)), L.identity((6, 4)))
    assert not same_order(L.identity((1, 16, 12)), rows)
    assert not same_order(L.block((1, 16, 12), 1, 4), rows)
    assert not same_order(L.block((1, 12, 16), 1, 8), L.block((12, 16), 0, 8))  # 12 rows pad to 16


def test_a_matmul_reads_its_blocked_rows_through_a_reshape_view(cl_context: cl.Context) -> None:
    """x [1, 16, 12] -> reshape [16, 12] -> matmul with its A blocked by 8
    rows: the block flows back to x, and the reshape between launches
    nothing."""
    matmul = ops.matmul(16, 32, 12)
    candidate = Candidate.make(
        {"A": L.block((16, 12), 0, 8), "B": L.panel((12, 32), 1, 16), "C": L.identity((16, 32))},
        {"vector_axis": "j", "vector": 16, "block.i": 8, "block.j": 16},
    )
    g = Graph("rows")
    x = g.input("x", (1, 16, 12))
    rows = Workload.define(
        "rows", "Y[d0, d1] = X[0, d0, d1]", {"d0": 16, "d1": 12}, {"X": (1, 16, 12)}
    )
    y = g.apply(rows, "rows", X=x)  # as the ONNX import writes a stacked MatMul's rows
    y = g.apply(matmul, "matmul", A=y, B=g.constant("w", weights((12, 32), 3)))
    g.output(y)
    plan = plan_layouts(g, {matmul.key: candidate})
    assert str(plan.versions[plan.read_index("rows", "X")].layout.index_map) == str(
        L.block((1, 16, 12), 1, 8).index_map
    )
    steps = _check(plan, cl_context)
    assert [kind for _, kind in steps] == ["rewrite", "compute"]  # x blocked, the matmul
    assert ("matmul", "compute") in steps


def test_derived_starts_freeze_the_convolutions_nobody_tuned(cl_context: cl.Context) -> None:
    """With no source, ``derive`` freezes each conv of the seed graph with
    its statement's first standard start (the bias add, element-wise, is
    planned around them); the plan computes what numpy does. Without it
    nothing is frozen."""
    graph, _ = seed_graph()
    device = written_cpu(16)
    plan = plan_layouts(graph, {}, device, derive=True)
    frozen = {p.op for p in plan.placements if p.frozen}
    assert frozen == {"conv1", "conv2"}
    assert sum("(the statement's derived start)" in line for line in plan.log) == 2
    _check(plan, cl_context)
    assert not any(p.frozen for p in plan_layouts(graph, {}, device).placements)


def _buffer(role: str, elements: int, memory: str = "global") -> PlanBuffer:
    return PlanBuffer("b", "t", "float32", elements, memory, None, role, "lambda i: [i]")


def _launches(*args: tuple[int, ...]) -> list[PlanLaunch]:
    return [PlanLaunch(f"l{i}", "compute", 0, "k", (1,), None, a) for i, a in enumerate(args)]


def test_memory_planning_lends_an_ended_buffers_memory_to_the_next() -> None:
    """An intermediate lives from the first launch naming it to the last; one
    starting after another's end takes its memory, the latest freed first,
    grown where too small; inputs, outputs, constants, images and padded
    buffers keep their own."""
    buffers = [
        _buffer("input", 16),  # 0
        _buffer("intermediate", 16),  # 1: launches 0-1
        _buffer("intermediate", 16),  # 2: launches 1-2
        _buffer("intermediate", 8),  # 3: launches 2-3, after 1 ended: takes 1's
        _buffer("intermediate", 32),  # 4: launches 3-4, after 2 ended: takes 2's, grown
        _buffer("constant", 4),  # 5
        _buffer("intermediate", 16, "image2d"),  # 6: never shares
        _buffer("intermediate", 16),  # 7: padded, never shares
        _buffer("output", 16),  # 8
        _buffer("scratch", 4),  # 9: launch 5, after 3 and 4 ended: the latest freed, 4's
    ]
    launches = _launches((0, 1), (1, 2, 5), (2, 3, 6), (3, 4, 7), (4, 8), (9, 8))
    padded = [k == 7 for k in range(len(buffers))]
    storage = share_storage(buffers, launches, keep=[0, 5, 8], padded=padded)
    assert storage == (0, 1, 2, 1, 2, 5, 6, 7, 8, 2)
    # no launch names two buffers of one memory (restrict pointers stay honest)
    for launch in launches:
        owners = [storage[a] for a in launch.args]
        assert len(owners) == len(set(owners))


def test_a_compiled_plan_shares_memory_and_runs_as_its_reference(cl_context: cl.Context) -> None:
    """A chain of ReLUs and transposes: the four intermediates take the
    memory of two, and the output still equals numpy's."""
    g = Graph("chain")
    y = g.input("x", (64, 48))
    shape = (64, 48)
    for k in range(5):
        if k % 2:
            y = g.apply(ops.transpose(shape), f"op{k}", X=y)
            shape = shape[::-1]
        else:
            y = g.apply(ops.relu(shape), f"op{k}", X=y)
    g.output(y)
    x = np.random.default_rng(0).standard_normal((64, 48)).astype(np.float32)
    with plan_layouts(g).compile(cl_context) as compiled:
        low = compiled.lowered
        intermediates = [k for k, b in enumerate(low.buffers) if b.role == "intermediate"]
        assert len(intermediates) == 4
        assert len({low.owner(k) for k in intermediates}) == 2
        got = compiled.run({"x": x})
    np.testing.assert_array_equal(got["op4"], np.maximum(x, 0.0))
