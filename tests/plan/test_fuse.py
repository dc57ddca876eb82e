"""Epilogue fusion as a plan step (plan_layouts(..., fuse=True)): the
element-wise readers of a layout-critical operator's result (a bias, a ReLU,
a residual add) run in its kernel, read off the statements' index
expressions; fused and unfused plans equal the reference (and ONNX
Runtime's outputs for an ONNX model) on the test device, the fused one with
fewer kernels, and str(plan) names what was fused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pyopencl as cl
import pytest

from laytune import layout as L
from laytune import ops
from laytune.codegen import GENERIC_DEVICE
from laytune.exceptions import PlanError
from laytune.ops import Workload, from_key
from laytune.plan import Graph, Plan, from_onnx, fuse_epilogues, plan_layouts
from laytune.plan._sink import sink_view
from laytune.records import open_database
from laytune.space import Candidate
from tests.plan.graphs import NCHW4C, conv_candidate, seed_graph, weights
from tests.plan.test_onnx import Model
from tests.plan.test_weigh import _record, _records

SHAPE = (1, 8, 6, 6)


def conv_bias_relu() -> tuple[Graph, dict[str, Candidate]]:
    """conv -> bias -> relu -> conv, the first conv's candidate NCHW4c."""
    conv = ops.conv2d(1, 8, 6, 6, 8, 3, stride=1, padding=1)
    g = Graph("block")
    x = g.input("x", SHAPE)
    y = g.apply(conv, "conv1", X=x, W=g.constant("f1", weights((8, 8, 3, 3), 1)))
    y = g.apply(ops.bias_add(SHAPE, axis=1), "bias1", X=y, B=g.constant("b1", weights((8,), 2)))
    y = g.apply(ops.relu(SHAPE), "relu1", X=y)
    g.output(y)
    return g, {conv.key: conv_candidate(conv)}


def _run(plan: Plan, context: cl.Context, inputs: dict[str, np.ndarray]) -> tuple[dict, int]:
    """The plan's outputs and how many kernels it launches per run."""
    with plan.compile(context) as compiled:
        got = compiled.run(inputs)
        return got, len(compiled.steps)


def test_the_readers_fold_into_the_reduction_with_the_same_reference() -> None:
    graph, _ = conv_bias_relu()
    fused, fusions = fuse_epilogues(graph, ["conv1"])
    assert [op.name for op in fused.ops] == ["conv1"]
    (fusion,) = fusions
    assert fusion.absorbed == ("bias1", "relu1") and fusion.removed == ("conv1", "bias1")
    op = fused.op("conv1")
    assert op.output == "relu1" and dict(op.inputs) == {"X": "x", "W": "f1", "B": "b1"}
    assert op.workload.key == ops.conv2d(1, 8, 6, 6, 8, 3, stride=1, padding=1).key + (
        "+epilogue[max((acc + B[f]), 0.0)]"
    )
    assert "conv1" not in fused.tensors and fused.tensors["relu1"].producer == "conv1"
    assert from_key(op.workload.key) == op.workload  # records name it by key
    x = {"x": weights(SHAPE, 5)}
    np.testing.assert_allclose(fused.reference(x)["relu1"], graph.reference(x)["relu1"], rtol=1e-5)


def test_a_scaled_residual_fuses_into_a_workload_keyed_by_its_shapes() -> None:
    """A workload defined without parameters (its key lists its buffers):
    the reader's input named like one of the producer's is renamed."""
    mm = Workload.define(
        "mm", "C[i, j] += A[i, k] * B[k, j]", {"i": 4, "j": 6, "k": 5}, {"A": (4, 5), "B": (5, 6)}
    )
    scaled = Workload.define(
        "scaled_add",
        "Y[p, q] = X[p, q] * 0.5 + B[p, q]",
        {"p": 4, "q": 6},
        {"X": (4, 6), "B": (4, 6)},
    )
    g = Graph("mm")
    a, r = g.input("a", (4, 5)), g.input("r", (4, 6))
    c = g.apply(mm, "mm", A=a, B=g.constant("b", weights((5, 6), 1)))
    g.output(g.apply(scaled, "out", X=c, B=r))
    fused, (fusion,) = fuse_epilogues(g, ["mm"])
    op = fused.op("mm")
    assert dict(op.inputs) == {"A": "a", "B": "b", "B1": "r"}
    assert fusion.epilogue == "((acc * 0.5) + B1[i, j])"
    shapes, _, rest = op.workload.key.partition(")#")  # a digest of the rest, then the epilogue
    assert shapes == "mm(A[4, 5],B[5, 6],B1[4, 6],C[4, 6];float32"
    assert rest[8:] == "+epilogue[((acc * 0.5) + B1[i, j])]"
    assert from_key(op.workload.key) == op.workload
    x = {"a": weights((4, 5), 2), "r": weights((4, 6), 3)}
    np.testing.assert_allclose(fused.reference(x)["out"], g.reference(x)["out"], rtol=1e-5)


def test_only_element_wise_sole_readers_are_fused() -> None:
    conv = ops.conv2d(1, 8, 6, 6, 8, 3, stride=1, padding=1)
    g = Graph("no")
    x = g.input("x", SHAPE)
    y = g.apply(conv, "conv1", X=x, W=g.constant("f1", weights((8, 8, 3, 3), 1)))
    t = g.apply(ops.transpose(SHAPE, (0, 2, 3, 1)), "t", X=y)  # not element for element
    z = g.apply(conv, "conv2", X=x, W=g.constant("f2", weights((8, 8, 3, 3), 2)))
    r1 = g.apply(ops.relu(SHAPE), "r1", X=z)  # conv2 has two readers
    r2 = g.apply(ops.relu(SHAPE), "r2", X=z)
    w = g.apply(conv, "conv3", X=x, W=g.constant("f3", weights((8, 8, 3, 3), 3)))
    g.output(t, r1, r2, w)  # conv3's result is a graph output
    fused, fusions = fuse_epilogues(g, ["conv1", "conv2", "conv3"])
    assert fusions == () and [op.name for op in fused.ops] == [op.name for op in g.ops]


def test_a_planned_conv_bias_relu_runs_fused_in_one_kernel(cl_context: cl.Context) -> None:
    graph, source = conv_bias_relu()
    inputs = {"x": weights(SHAPE, 7)}
    want = graph.reference(inputs)["relu1"]
    assert (want == 0.0).any()
    unfused = plan_layouts(graph, source)
    fused = plan_layouts(graph, source, fuse=True)
    got_unfused, kernels_unfused = _run(unfused, cl_context, inputs)
    got_fused, kernels_fused = _run(fused, cl_context, inputs)
    np.testing.assert_allclose(got_unfused["relu1"], want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got_fused["relu1"], want, rtol=1e-4, atol=1e-4)
    assert len(fused.graph.ops) == 1 and len(unfused.graph.ops) == 3
    assert kernels_fused < kernels_unfused
    # the epilogue runs in the conv's NCHW4c layout: the bias is read in it, the
    # result leaves it once, for the graph output
    assert str(fused.candidate("conv1").layout("Y").index_map) == (
        "lambda i, j, k, l: [i, j // 4, k, l, j % 4]"
    )
    text = str(fused)
    assert "3 operators" not in text and "(2 fused into epilogues)" in text
    assert "fused: conv1 runs bias1 (bias_add), relu1 (relu) in its epilogue" in text
    assert "store max((acc + B[f]), 0.0)" in text
    assert "fused" not in str(unfused).split("how:")[0]


def _onnx_run(
    model: onnx.ModelProto, context: cl.Context, layout: str
) -> tuple[Plan, Plan, list[np.ndarray], dict, dict, int, int]:
    graph = from_onnx(model)
    source = {}
    for conv in [op for op in graph.ops if op.workload.reduction == "sum"]:
        w = conv.workload
        layouts = {b.name: L.identity(b.shape) for b in w.buffers}
        if layout == "nchw4c":
            layouts = {b.name: L.block(b.shape, 1, 4) for b in w.buffers if b.name != "W"}
            layouts["W"] = L.identity(w.buffer("W").shape)
        source[w.key] = Candidate.make(layouts)
    rng = np.random.default_rng(3)
    feeds = {
        i.name: rng.uniform(-1, 1, [d.dim_value for d in i.type.tensor_type.shape.dim]).astype(
            np.float32
        )
        for i in model.graph.input
    }
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)
    unfused, fused = plan_layouts(graph, source), plan_layouts(graph, source, fuse=True)
    got_unfused, n_unfused = _run(unfused, context, feeds)
    got_fused, n_fused = _run(fused, context, feeds)
    return unfused, fused, want, got_unfused, got_fused, n_unfused, n_fused


def _conv_relu() -> onnx.ModelProto:
    m = Model(4)
    y = m.node("Conv", ["x", m.weight((8, 8, 3, 3)), m.weight((8,))], pads=[1, 1, 1, 1])
    y = m.node("Relu", [y], "relu")
    return m.build({"x": (1, 8, 6, 6)}, [y])


def _conv_residual() -> onnx.ModelProto:
    m = Model(5)
    z = m.node("Conv", ["x", m.weight((8, 8, 3, 3))], pads=[1, 1, 1, 1])
    z = m.node("Add", [z, "x"], "residual")
    return m.build({"x": (1, 8, 6, 6)}, [z])


def _basic_block() -> onnx.ModelProto:
    """A ResNet basic block that halves the image: conv, relu, conv, plus a
    1 x 1 downsampling conv of the input, relu."""
    m = Model(7)
    a = m.node("Conv", ["x", m.weight((8, 4, 3, 3)), m.weight((8,))], pads=[1] * 4, strides=[2, 2])
    a = m.node("Relu", [a])
    a = m.node("Conv", [a, m.weight((8, 8, 3, 3)), m.weight((8,))], pads=[1] * 4)
    s = m.node("Conv", ["x", m.weight((8, 4, 1, 1)), m.weight((8,))], strides=[2, 2])
    y = m.node("Relu", [m.node("Add", [a, s])], "out")
    return m.build({"x": (1, 4, 8, 8)}, [y])


@pytest.mark.parametrize(
    ("build", "absorbed", "layout"),
    [
        (_conv_relu, 2, "nchw4c"),
        (_conv_residual, 1, "nchw4c"),
        (_conv_residual, 1, "identity"),
        (_basic_block, 6, "nchw4c"),
    ],
    ids=["conv-bias-relu", "conv-residual", "conv-residual-logical", "basic-block"],
)
def test_onnx_conv_epilogues_fused_equal_onnx_runtime(
    cl_context: cl.Context, build, absorbed: int, layout: str
) -> None:
    """Conv (with its bias) -> Relu, Conv -> Add of the conv's own input (a
    residual), and a basic block whose second conv takes its bias, the add
    of the downsampling conv's result and the relu: each conv takes its
    readers into its epilogue."""
    model = build()
    unfused, fused, want, got_unfused, got_fused, n_unfused, n_fused = _onnx_run(
        model, cl_context, layout
    )
    name = model.graph.output[0].name
    for got in (got_unfused, got_fused):
        np.testing.assert_allclose(got[name], want[0], rtol=1e-3, atol=1e-3)
    assert sum(len(f.absorbed) for f in fused.fusions) == absorbed
    assert len(fused.graph.ops) == len(unfused.graph.ops) - absorbed
    assert n_fused < n_unfused
    assert "fused: " in str(fused)


def test_two_padded_blocks_fuse_and_stop_at_the_next_conv(cl_context: cl.Context) -> None:
    """Six channels in NCHW4c (padding): each conv takes its bias and ReLU,
    the first stops at the second conv, which is layout-critical itself; the
    fused result stays in the padded layout the second conv reads."""
    shape = (1, 6, 5, 5)
    conv = ops.conv2d(1, 6, 5, 5, 6, 3, stride=1, padding=1)
    g = Graph("padded")
    y = g.input("x", shape)
    for k in (1, 2):
        y = g.apply(conv, f"conv{k}", X=y, W=g.constant(f"f{k}", weights((6, 6, 3, 3), k)))
        y = g.apply(
            ops.bias_add(shape, 1), f"bias{k}", X=y, B=g.constant(f"b{k}", weights((6,), k))
        )
        y = g.apply(ops.relu(shape), f"relu{k}", X=y)
    g.output(y)
    source = {conv.key: conv_candidate(conv)}
    inputs = {"x": weights(shape, 9)}
    want = g.reference(inputs)["relu2"]
    unfused, fused = plan_layouts(g, source), plan_layouts(g, source, fuse=True)
    got, kernels = _run(fused, cl_context, inputs)
    np.testing.assert_allclose(got["relu2"], want, rtol=1e-4, atol=1e-4)
    got_unfused, kernels_unfused = _run(unfused, cl_context, inputs)
    np.testing.assert_allclose(got_unfused["relu2"], want, rtol=1e-4, atol=1e-4)
    assert [op.name for op in fused.graph.ops] == ["conv1", "conv2"]
    assert kernels == 4 < kernels_unfused  # x in, two convs, relu2 out
    assert fused.read("conv2", "X").origin == "operator"  # no rewrite between
    assert "stopped: conv2 is layout-critical itself" in str(fused)


def test_records_of_the_fused_workload_come_before_the_operators_own(tmp_path: Path) -> None:
    """From a records database: the fused key's own record is what the
    fused conv runs (and is predicted by); without one, the conv's recorded
    candidates, weighed, take the epilogue."""
    graph, _ = seed_graph()  # conv1 -> add (a bias) -> conv2
    fused_graph, _ = fuse_epilogues(graph, ["conv1", "conv2"])
    fused = fused_graph.op("conv1").workload
    own = Candidate.make({b.name: L.identity(b.shape) for b in fused.buffers})
    with open_database(tmp_path / "fused.db") as db:
        _records(db, graph, 1e-4)
        weighed = plan_layouts(graph, db, GENERIC_DEVICE, fuse=True)
        db.add(_record(fused, own, 0.5e-3, 0.0))
        recorded = plan_layouts(graph, db, GENERIC_DEVICE, fuse=True)
    for plan in (weighed, recorded):
        assert [op.name for op in plan.graph.ops] == ["conv1", "conv2"]
        assert plan.graph.op("conv1").workload.key == fused.key
    assert "B" in dict(weighed.candidate("conv1").layouts)
    conv1 = {p.label: p for p in weighed.predictions}["conv1"]
    assert conv1.source.endswith(", with the epilogue") and conv1.seconds == 1e-3
    assert any(line.startswith("weighed the candidates of conv1, conv2") for line in weighed.log)
    assert recorded.candidate("conv1") == own
    conv1 = {p.label: p for p in recorded.predictions}["conv1"]
    assert conv1.seconds == 0.5e-3 and conv1.source.startswith("record ")


def _fused_only_source(knobs: dict[str, object] | None = None) -> tuple[Graph, dict]:
    """conv_bias_relu with a source that holds a candidate of the fused
    workload alone (what tune_model records), not of the bare conv."""
    graph, source = conv_bias_relu()
    (conv,) = [op for op in graph.ops if op.name == "conv1"]
    fused = fuse_epilogues(graph, ["conv1"])[0].op("conv1").workload
    bare = source[conv.workload.key]
    layouts = dict(bare.layout_map)
    for decl in fused.inputs:
        layouts.setdefault(decl.name, L.identity(decl.shape))
    return graph, {fused.key: Candidate.make(layouts, knobs or dict(bare.knob_map))}


def test_an_operator_tuned_only_fused_is_frozen_and_fused_from_those_records() -> None:
    graph, source = _fused_only_source()
    plan = plan_layouts(graph, source, fuse=True)
    assert {f.op for f in plan.fusions} == {"conv1"}
    assert str(plan.candidate("conv1").layout("Y").index_map) == NCHW4C
    # without fusing, the bare conv has no candidate of its own
    assert not plan_layouts(graph, source).fusions


def test_a_fused_record_the_bare_operator_cannot_lower_leaves_it_unfrozen_not_failed() -> None:
    graph, source = _fused_only_source({"vector_axis": "no_such_axis", "vector": 4})
    plan = plan_layouts(graph, source, fuse=True)  # no PlanError: nothing to freeze from
    assert not plan.fusions


# -- through a row-major view ------------------------------------------------------


def test_a_view_moves_below_its_element_wise_reader_with_the_same_reference() -> None:
    """reshape (2, 3, 4) -> (6, 4), then a bias and a residual of the view's
    shape: the add runs on (2, 3, 4) first, reading the residual at the
    view's coordinates, then the view; the graph computes the same."""
    g = Graph("view")
    x = g.input("x", (2, 3, 4))
    r = g.input("r", (6, 4))
    y = g.apply(
        Workload.define("flat", "Y[a, b] = X[(a * 4 + b) // 12, ((a * 4 + b) // 4) % 3, b]",
                        {"a": 6, "b": 4}, {"X": (2, 3, 4)}),
        "view", X=x,
    )  # fmt: skip
    y = g.apply(
        Workload.define("add_bias", "Y[a, b] = X[a, b] + R[a, b] + B[b]", {"a": 6, "b": 4},
                        {"X": (6, 4), "R": (6, 4), "B": (4,)}),
        "add", X=y, R=r, B=g.constant("bias", weights((4,), 3)),
    )  # fmt: skip
    g.output(y)
    sunk = sink_view(g, "view")
    assert [op.name for op in sunk.ops] == ["add", "view"]
    assert sunk.tensors["add.view"].shape == (2, 3, 4)
    assert sunk.op("view").output == "add" and sunk.tensors["add"].shape == (6, 4)
    rng = np.random.default_rng(0)
    inputs = {"x": rng.standard_normal((2, 3, 4)), "r": rng.standard_normal((6, 4))}
    inputs = {k: v.astype(np.float32) for k, v in inputs.items()}
    np.testing.assert_array_equal(sunk.reference(inputs)["add"], g.reference(inputs)["add"])
    with pytest.raises(PlanError, match="add is a graph output"):
        sink_view(sunk, "view")  # the view now writes the graph's output
    with pytest.raises(PlanError, match="not a row-major view"):
        sink_view(g, "add")


def test_a_stacked_matmul_takes_its_bias_gelu_and_residual_through_its_reshapes(
    cl_context: cl.Context,
) -> None:
    """ONNX's (1, s, h) @ (h, n) imports as the library's matmul between two
    reshapes; BERT's feed-forward bias, GELU (which reads its argument twice)
    and residual add read the reshape. Fused, each GEMM takes them, and the
    plan equals ONNX Runtime."""
    s, h = 8, 16
    m = Model(10)
    x = m.node("Relu", ["x"])
    f = m.node("Add", [m.node("MatMul", [x, m.weight((h, 2 * h))]), m.weight((2 * h,))])
    f = m.node("Gelu", [f])
    y = m.node("Add", [m.node("MatMul", [f, m.weight((2 * h, h))]), m.weight((h,))])
    y = m.node("Add", [y, x], "out")
    model = m.build({"x": (1, s, h)}, [y])
    graph = from_onnx(model)
    gemms = [op for op in graph.ops if op.workload.name == "matmul"]
    source = {
        op.workload.key: Candidate.make({b.name: L.identity(b.shape) for b in op.workload.buffers})
        for op in gemms
    }
    plan = plan_layouts(graph, source, fuse=True)
    assert [f.kinds for f in plan.fusions] == [("bias_add", "gelu"), ("bias_add", "add")]
    assert not {op.workload.name for op in plan.graph.ops} & {"bias_add", "gelu", "add"}
    feeds = {"x": np.random.default_rng(2).uniform(-1, 1, (1, s, h)).astype(np.float32)}
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, feeds)
    got, _ = _run(plan, cl_context, feeds)
    np.testing.assert_allclose(got["out"], want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def test_a_gelu_written_out_as_five_nodes_merges_and_fuses_into_its_matmul(
    cl_context: cl.Context,
) -> None:
    """PyTorch exports erf-GELU as Div, Erf, Add, Mul, Mul: the matmul's
    result is read by the Div and by the first Mul. The element-wise chain
    merges into one reader of it, which then fuses into the matmul: one
    kernel for the whole feed-forward half, equal to ONNX Runtime."""
    s, h = 8, 16
    m = Model(10)
    x = m.node("Relu", ["x"])
    t = m.node("Add", [m.node("MatMul", [x, m.weight((h, 2 * h))]), m.weight((2 * h,))])
    root2 = m.const(np.array([np.sqrt(2.0)], dtype=np.float32))
    one = m.const(np.array([1.0], dtype=np.float32))
    half = m.const(np.array([0.5], dtype=np.float32))
    erf = m.node("Add", [m.node("Erf", [m.node("Div", [t, root2])]), one])
    y = m.node("Mul", [m.node("Mul", [t, erf]), half], "out")
    model = m.build({"x": (1, s, h)}, [y])
    graph = from_onnx(model)
    (gemm,) = [op for op in graph.ops if op.workload.name == "matmul"]
    source = {
        gemm.workload.key: Candidate.make(
            {b.name: L.identity(b.shape) for b in gemm.workload.buffers}
        )
    }
    plan = plan_layouts(graph, source, fuse=True)
    (fusion,) = plan.fusions
    assert sorted(fusion.kinds) == sorted(("bias_add", "div", "erf", "add", "mul", "mul"))
    left = {op.workload.name for op in plan.graph.ops}
    assert left == {"relu", "reshape", "matmul"}, [op.name for op in plan.graph.ops]
    feeds = {"x": np.random.default_rng(3).uniform(-2, 2, (1, s, h)).astype(np.float32)}
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, feeds)
    got, _ = _run(plan, cl_context, feeds)
    np.testing.assert_allclose(got["out"], want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def test_a_merged_workload_computes_its_reader_of_its_first_and_refuses_a_reduction() -> None:
    """merge_workloads substitutes the first operator's value, its axes
    renamed through the result's indices (here a transposing one), into its
    reader; the merged reference equals the two run one after the other. A
    reduction is not merged."""
    from laytune.plan._fuse import merge_workloads

    first = Workload.define(
        "scaled_t", "Y[j, i] = X[i, j] * S[0]", {"i": 4, "j": 6}, {"X": (4, 6), "S": (1,)}
    )
    reader = Workload.define(
        "shift", "Y[a, b] = A[a, b] + B[b]", {"a": 6, "b": 4}, {"A": (6, 4), "B": (4,)}
    )
    merged, renamed, bound = merge_workloads(first, reader, ["A"])
    assert renamed == {"B": "B"} and sorted(theirs for _, theirs in bound) == ["S", "X"]
    rng = np.random.default_rng(5)
    x, scale, b = rng.standard_normal((4, 6)), np.array([1.5]), rng.standard_normal(4)
    step = first.reference({"X": x, "S": scale})["Y"]
    want = reader.reference({"A": step, "B": b})["Y"]
    inputs = {"B": b, **{name: {"X": x, "S": scale}[theirs] for name, theirs in bound}}
    np.testing.assert_allclose(merged.reference(inputs)["Y"], want, rtol=1e-5, atol=1e-6)
    summed = Workload.define("rows", "Y[j, i] += X[i, j, k]", {"i": 4, "j": 6, "k": 2},
                             {"X": (4, 6, 2)})  # fmt: skip
    with pytest.raises(PlanError, match="only element-wise operators merge"):
        merge_workloads(summed, reader, ["A"])


def test_readers_merged_into_one_that_cannot_fuse_are_left_as_they_were() -> None:
    """A matmul's biased result read by its own transpose and by an add of
    the two: the bias fuses; the transpose merges into the add, which then
    reads the result at ``[j, i]`` as well as ``[i, j]``, not element for
    element, so it cannot fuse. That merge is undone: the fused graph keeps
    both readers as they were."""
    from laytune.plan._fuse import fuse_into

    g = Graph("transposed_sum")
    a = g.input("a", (8, 8))
    t = g.apply(ops.matmul(8, 8, 8), "mm", A=a, B=g.constant("b", weights((8, 8), 4)))
    t = g.apply(ops.bias_add((8, 8), axis=1), "bias", X=t, B=g.constant("c", weights((8,), 5)))
    flipped = g.apply(
        Workload.define("flip", "Y[j, i] = X[i, j]", {"i": 8, "j": 8}, {"X": (8, 8)}), "flip", X=t
    )
    both = Workload.define(
        "sum2", "Y[i, j] = A[i, j] + B[i, j]", {"i": 8, "j": 8}, {"A": (8, 8), "B": (8, 8)}
    )
    g.output(g.apply(both, "sum", A=t, B=flipped))
    fused, fusion, why = fuse_into(g, "mm", {"mm"})
    assert fusion is not None and fusion.absorbed == ("bias",)
    assert "not element for element" in why, why
    assert [op.name for op in fused.ops] == ["mm", "flip", "sum"]
    assert fused.op("sum").workload is g.op("sum").workload
