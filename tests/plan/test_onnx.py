"""ONNX models become graphs (laytune.plan.from_onnx): small models built with
onnx.helper and random weights are imported, planned in identity layouts,
compiled and run on the test device, and their outputs equal ONNX Runtime's
on random inputs."""

from __future__ import annotations

import math
import pickle
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pyopencl as cl
import pytest
from onnx import TensorProto, helper, numpy_helper

from laytune import layout as L
from laytune.device_info import DeviceInfo
from laytune.exceptions import ModelImportError, UnsupportedNodeError
from laytune.ops import from_key
from laytune.plan import ONNX_OPS, Graph, from_onnx, plan_layouts
from laytune.space import Candidate

OPSET = 20  # Gelu is in opset 20


class Model:
    """A model under construction: nodes, initializers of random weights."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def weight(self, shape: Sequence[int], low: float = -1.0, high: float = 1.0) -> str:
        self.count += 1
        name = f"w{self.count}"
        value = self.rng.uniform(low, high, shape).astype(np.float32)
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def const(self, value: np.ndarray) -> str:
        """An initializer holding ``value``."""
        self.count += 1
        name = f"c{self.count}"
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def ints(self, values: Sequence[int]) -> str:
        self.count += 1
        name = f"i{self.count}"
        self.inits.append(numpy_helper.from_array(np.array(values, dtype=np.int64), name))
        return name

    def node(self, op: str, inputs: Sequence[str], output: str | None = None, **attrs) -> str:
        self.count += 1
        output = output or f"t{self.count}"
        self.nodes.append(
            helper.make_node(op, list(inputs), [output], f"{op}_{self.count}", **attrs)
        )
        return output

    def build(
        self, inputs: dict[str, Sequence[int]], outputs: Sequence[str], opset: int = OPSET
    ) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes,
            "test",
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
            self.inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 9
        return model


def _check(model: onnx.ModelProto, context: cl.Context, seed: int = 1) -> Graph:
    """Import, plan in identity layouts (nothing tuned), run on the device and
    compare every output with ONNX Runtime's (relative 1e-3). The graph's
    ``views`` attribute names the operators that ran as views."""
    graph = from_onnx(model)
    rng = np.random.default_rng(seed)
    feeds = {
        i.name: rng.uniform(-1, 1, [d.dim_value for d in i.type.tensor_type.shape.dim]).astype(
            np.float32
        )
        for i in model.graph.input
    }
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    want = session.run(None, feeds)
    with plan_layouts(graph).compile(context) as compiled:
        got = compiled.run(feeds)
        graph.views = list(compiled.views)  # type: ignore[attr-defined]
    assert graph.outputs == [o.name for o in model.graph.output]
    for name, expected in zip(graph.outputs, want, strict=True):
        assert got[name].shape == expected.shape, name
        scale = float(np.abs(expected).max()) or 1.0
        np.testing.assert_allclose(got[name], expected, rtol=1e-3, atol=1e-3 * scale, err_msg=name)
    for op in graph.ops:  # every key names one statement: from_key gives the workload back
        assert from_key(op.workload.key) == op.workload, op.workload.key
    return graph


def test_conv_batchnorm_relu_pool(cl_context: cl.Context) -> None:
    m = Model(0)
    y = m.node("Conv", ["x", m.weight((8, 3, 3, 3)), m.weight((8,))], pads=[1, 1, 1, 1])
    bn = [m.weight((8,), 0.5, 1.5), m.weight((8,)), m.weight((8,)), m.weight((8,), 0.5, 2.0)]
    y = m.node("BatchNormalization", [y, *bn], epsilon=0.1)
    y = m.node("Relu", [y])
    y = m.node("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    y = m.node("Conv", [y, m.weight((4, 8, 3, 3))], strides=[2, 2], pads=[1, 0, 0, 1])
    y = m.node(
        "AveragePool",
        [y],
        "avg",
        kernel_shape=[2, 2],
        strides=[2, 2],
        ceil_mode=1,  # 3 x 3 -> 2 x 2, the last windows half outside
    )
    model = m.build({"x": (1, 3, 12, 12)}, [y])
    graph = _check(model, cl_context)
    assert graph.tensors["avg"].shape == (1, 4, 2, 2)
    names = [op.workload.name for op in graph.ops]
    # the batch norm is folded into the first convolution's filters and bias
    assert names == ["conv2d", "bias_add", "relu", "max_pool2d", "conv", "average_pool"]
    assert "BatchNormalization" not in str(graph.ops)


def test_grouped_dilated_conv_and_padded_max_pool(cl_context: cl.Context) -> None:
    m = Model(1)
    y = m.node(
        "Conv",
        ["x", m.weight((6, 2, 3, 3)), m.weight((6,))],
        group=2,
        dilations=[2, 1],
        pads=[2, 1, 2, 1],
    )
    y = m.node("Conv", [y, m.weight((6, 1, 3, 3))], group=6, auto_pad="SAME_UPPER")
    y = m.node("Clip", [y, m.weight(()), m.weight((), 1.0, 2.0)])
    y = m.node("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)
    y = m.node(
        "AveragePool", [y], "out", kernel_shape=[2, 3], pads=[1, 0, 0, 2], count_include_pad=1
    )
    model = m.build({"x": (2, 4, 9, 10)}, [y])
    graph = _check(model, cl_context)
    assert [op.workload.name for op in graph.ops] == [
        "conv",
        "bias_add",
        "depthwise_conv",
        "clip",
        "max_pool",
        "average_pool",
    ]


def test_a_depthwise_conv_reads_its_own_channel_and_derives_channel_vectors(
    cl_context: cl.Context,
) -> None:
    """MobileNet's depthwise Conv (group = channels, one filter each), with
    and without a folded BatchNormalization, strided or not: its statement
    reads the output's own channel and its weights as [f, kh, kw], so its
    form is a depthwise window and its first derived start runs vectors
    along the channels in blocked layouts (as written with a reduce axis of
    one channel it got scalar starts, and MobileNet-v2 untuned took 8.5 ms
    where this takes 5.7)."""
    from laytune.search import classify, standard_candidates
    from laytune.space import SearchSpace

    m = Model(5)
    y = m.node("Conv", ["x", m.weight((32, 1, 3, 3))], group=32, pads=[1, 1, 1, 1])
    y = m.node(
        "BatchNormalization",
        [y, m.weight((32,), 0.5, 1.0), m.weight((32,)), m.weight((32,)), m.weight((32,), 0.5, 1.5)],
    )
    y = m.node(
        "Conv",
        [y, m.weight((32, 1, 3, 3)), m.weight((32,))],
        "out",
        group=32,
        strides=[2, 2],
        pads=[1, 1, 1, 1],
    )
    model = m.build({"x": (1, 32, 12, 12)}, [y])
    graph = _check(model, cl_context)
    convs = [op.workload for op in graph.ops if op.workload.name == "depthwise_conv"]
    assert len(convs) == 2
    device = DeviceInfo.from_cl_device(cl_context.devices[0])
    for workload in convs:
        assert workload.buffer("W").shape == (32, 3, 3)
        assert "X[n, f, " in workload.statement.text
        form = classify(workload)
        assert form is not None and form.depth == 1 and form.channels is None
        first = standard_candidates(SearchSpace(workload, device), 1)[0]
        assert first.knob("vector_axis") == "f" and first.knob("vector") > 1
        assert first.layout("X").index_map != L.identity((1, 32, 12, 12)).index_map


def test_a_residual_add_and_global_pool_gemm_head(cl_context: cl.Context) -> None:
    m = Model(2)
    y = m.node("Conv", ["x", m.weight((4, 4, 3, 3))], pads=[1, 1, 1, 1])
    y = m.node("Relu", [y])
    y = m.node("Conv", [y, m.weight((4, 4, 1, 1)), m.weight((4,))])
    y = m.node("Add", [y, "x"])
    y = m.node("Relu", [y])
    y = m.node("GlobalAveragePool", [y])
    y = m.node("Flatten", [y])
    y = m.node("Gemm", [y, m.weight((10, 4)), m.weight((10,))], "logits", transB=1, alpha=0.5)
    model = m.build({"x": (1, 4, 6, 6)}, [y])
    graph = _check(model, cl_context)
    names = [op.workload.name for op in graph.ops]
    assert "global_average_pool" in names and "reshape" in names
    assert graph.views == [graph.ops[names.index("reshape")].name]  # the flatten is a view


def test_a_small_mlp(cl_context: cl.Context) -> None:
    m = Model(3)
    y = m.node("Gemm", ["x", m.weight((16, 32)), m.weight((32,))])
    y = m.node("Tanh", [y])
    y = m.node("Gemm", [y, m.weight((8, 32)), m.weight((1, 8))], transB=1, beta=2.0)
    y = m.node("Sqrt", [m.node("Add", [m.node("Mul", [y, y]), m.weight((1,), 1.0, 2.0)])])
    y = m.node("Div", [m.node("Exp", [y]), m.weight((5, 1), 1.0, 2.0)])
    y = m.node("Sub", [y, m.weight((8,))], "out")
    model = m.build({"x": (5, 16)}, [y])
    _check(model, cl_context)


def test_a_tiny_attention_block(cl_context: cl.Context) -> None:
    """Two-head self-attention with a residual, as in BERT's encoder layer."""
    s, h = 8, 16
    m = Model(4)
    q = m.node("Add", [m.node("MatMul", ["x", m.weight((h, h))]), m.weight((h,))])
    k = m.node("MatMul", ["x", m.weight((h, h))])
    v = m.node("MatMul", ["x", m.weight((h, h))])
    heads = m.ints([1, s, 2, h // 2])
    q = m.node("Transpose", [m.node("Reshape", [q, heads])], perm=[0, 2, 1, 3])
    k = m.node("Transpose", [m.node("Reshape", [k, heads])], perm=[0, 2, 3, 1])
    v = m.node("Transpose", [m.node("Reshape", [v, heads])], perm=[0, 2, 1, 3])
    scores = m.node("Div", [m.node("MatMul", [q, k]), m.weight((), 2.0, 3.0)])
    probs = m.node("Softmax", [scores], axis=-1)
    ctx = m.node("Transpose", [m.node("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    ctx = m.node("Reshape", [ctx, m.ints([1, s, h])])
    y = m.node("Add", [ctx, "x"], "out")
    model = m.build({"x": (1, s, h)}, [y, probs])
    graph = _check(model, cl_context)
    names = {op.name: op.workload.name for op in graph.ops}
    # the projections (1, 8, 16) @ (16, 16) are the library's matmul of (8, 16)
    # between two reshapes; the per-head products are batched
    kinds = list(names.values())
    assert (kinds.count("matmul"), kinds.count("batch_matmul")) == (3, 2)
    # every reshape is a view (2 per projection, 4 for the heads); the transposes copy
    assert sorted(graph.views) == sorted(n for n, w in names.items() if w == "reshape")
    assert len(graph.views) == 10
    assert [names[f"{probs}.max"], names[f"{probs}.sum"], names[probs]] == [
        "softmax_max",
        "softmax_sum",
        "softmax_div",
    ]


def test_a_layer_norm_gelu_feed_forward(cl_context: cl.Context) -> None:
    """BERT's feed-forward half: layer norms (with and without a bias), exact
    and tanh GELU, Erf."""
    s, h = 8, 16
    m = Model(10)
    y = m.node("LayerNormalization", ["x", m.weight((h,)), m.weight((h,))], axis=-1)
    f = m.node("Gelu", [m.node("MatMul", [y, m.weight((h, 2 * h))])])
    half = m.node("Mul", [m.node("Erf", [f]), m.weight((2 * h,))])
    f = m.node("Gelu", [half], approximate="tanh")
    y = m.node("Add", [m.node("MatMul", [f, m.weight((2 * h, h))]), y])
    y = m.node("LayerNormalization", [y, m.weight((h,))], "out", epsilon=1e-3)
    model = m.build({"x": (1, s, h)}, [y])
    graph = _check(model, cl_context)
    names = {op.name: op.workload.name for op in graph.ops}
    assert [names["out.mean"], names["out.var"], names["out"]] == [
        "layer_norm_mean",
        "layer_norm_var",
        "layer_norm",
    ]


def test_an_opset_10_model_clips_by_attributes_and_softmaxes_the_trailing_axes(
    cl_context: cl.Context,
) -> None:
    """Before opset 11 Clip's bounds are attributes; before opset 13 Softmax
    normalises over every axis from ``axis`` on, as one."""
    m = Model(12)
    y = m.node("Clip", ["x"], min=-0.5, max=0.25)
    y = m.node("Softmax", [m.node("Mul", [y, m.weight((4, 5), 2.0, 4.0)])], "out", axis=1)
    graph = _check(m.build({"x": (2, 4, 5)}, [y], opset=10), cl_context)
    assert [op.workload.key for op in graph.ops[-3:]] == [
        f"{name}(shape=2x4x5,axes=1x2;float32)"
        for name in ("softmax_max", "softmax_sum", "softmax_div")
    ]


def test_reductions_over_given_axes_keep_or_drop_them(cl_context: cl.Context) -> None:
    """ReduceMax, ReduceMin, ReduceSum and ReduceMean with their axes an
    input (opset 18 on), kept as extents of 1 or dropped; a negative axis
    counts from the end."""
    m = Model(13)
    x = m.node("Mul", ["x", m.weight((3, 4, 5), 1.0, 2.0)])
    top = m.node("ReduceMax", [x, m.ints([1])], "top", keepdims=1)
    low = m.node("ReduceMin", [x, m.ints([-1])], "low", keepdims=0)
    total = m.node("ReduceSum", [x, m.ints([0, 2])], "total")
    mean = m.node("ReduceMean", [x, m.ints([2, 1])], "mean", keepdims=0)
    graph = _check(m.build({"x": (3, 4, 5)}, [top, low, total, mean]), cl_context)
    reductions = [op.workload for op in graph.ops if op.workload.name.startswith("reduce_")]
    assert [w.reduction for w in reductions] == ["max", "min", "sum", "sum"]
    assert {"top", "total"} <= set(graph.views)  # keepdims: a reshape, run as a view


def test_an_opset_13_mean_takes_its_axes_as_an_attribute_and_all_axes_are_refused(
    cl_context: cl.Context,
) -> None:
    m = Model(14)
    y = m.node("ReduceMean", [m.node("Relu", ["x"])], "out", axes=[0])
    _check(m.build({"x": (6, 7)}, [y], opset=13), cl_context)
    m = Model(15)
    y = m.node("ReduceMax", ["x"], "out", keepdims=0)
    with pytest.raises(UnsupportedNodeError, match="reduces every axis"):
        from_onnx(m.build({"x": (6, 7)}, [y], opset=13))


@pytest.mark.parametrize(
    ("x", "w", "group"),
    [((1, 3, 8, 8), (4, 1, 3, 3), 2), ((1, 4, 8, 8), (4, 3, 3, 3), 1)],
)
def test_a_conv_whose_groups_do_not_divide_its_channels_is_named(
    x: tuple[int, ...], w: tuple[int, ...], group: int
) -> None:
    """3 channels in 2 groups, or filters of 3 channels over 4 without groups:
    refused, with the shapes, before any form is chosen (the ungrouped one
    went to the library's conv2d with weights of the wrong shape)."""
    m = Model(17)
    y = m.node("Conv", ["x", m.weight(w)], "out", group=group)
    message = f"'Conv_2' (Conv): group {group} with input {x} and filters {w}"
    with pytest.raises(UnsupportedNodeError, match=re.escape(message)):
        from_onnx(m.build({"x": x}, [y]))


@pytest.mark.parametrize(
    ("axes", "attrs", "message"),
    [
        ([], {}, "it reduces every axis of \\(6, 7\\)"),
        ([], {"noop_with_empty_axes": 1}, "noop_with_empty_axes=1"),
    ],
)
def test_a_reduction_the_import_cannot_take_is_named(
    axes: list[int], attrs: dict[str, int], message: str
) -> None:
    """An empty axes input reduces every axis, as ONNX says (refused: a
    workload keeps one); the no-op option is named."""
    m = Model(16)
    y = m.node("ReduceSum", ["x", m.ints(axes)], "out", **attrs)
    with pytest.raises(UnsupportedNodeError, match="'ReduceSum_2' \\(ReduceSum\\): " + message):
        from_onnx(m.build({"x": (6, 7)}, [y]))


@pytest.mark.parametrize("axis", [2, -3])
def test_a_reduction_axis_outside_the_input_is_named_by_shape_inference(axis: int) -> None:
    m = Model(17)
    y = m.node("ReduceMax", ["x", m.ints([axis])], "out")
    with pytest.raises(ModelImportError, match=r"ReduceMax_2.*axis must be in \[-rank, rank-1\]"):
        from_onnx(m.build({"x": (6, 7)}, [y]))


def test_a_model_file_and_a_model_output_that_is_an_input_alias(
    cl_context: cl.Context, tmp_path: Path
) -> None:
    m = Model(5)
    y = m.node("Identity", [m.node("Reshape", ["x", m.ints([2, -1])])], "out")
    model = m.build({"x": (2, 3, 4)}, [y])
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    graph = from_onnx(path)
    assert graph.outputs == ["out"] and graph.tensors["out"].shape == (2, 12)
    _check(model, cl_context)


def test_an_unsupported_node_is_named_with_the_supported_set() -> None:
    m = Model(6)
    y = m.node("Relu", ["x"])
    y = m.node("Sigmoid", [y], "out")
    model = m.build({"x": (2, 3)}, [y])
    with pytest.raises(UnsupportedNodeError) as info:
        from_onnx(model)
    err = info.value
    assert (err.node, err.op_type) == ("Sigmoid_2", "Sigmoid")
    assert "'Sigmoid_2' (Sigmoid)" in str(err)
    assert "op type 'Sigmoid' is not imported" in str(err)
    assert all(op in str(err) for op in ONNX_OPS) and "Gemm" in err.supported


def test_a_node_of_another_domain_is_named_before_shape_inference() -> None:
    m = Model(11)
    m.nodes.append(helper.make_node("FusedConv", ["x"], ["out"], "fused", domain="com.microsoft"))
    model = m.build({"x": (1, 2, 3, 3)}, ["out"])
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    with pytest.raises(UnsupportedNodeError, match=r"'FusedConv' of domain 'com\.microsoft'"):
        from_onnx(model)
    err = pickle.loads(pickle.dumps(UnsupportedNodeError("n", "Op", "why", ONNX_OPS)))
    assert (err.node, err.op_type, str(err)) == ("n", "Op", "node 'n' (Op): why")


def test_an_attribute_the_import_does_not_take_is_named() -> None:
    m = Model(7)
    y = m.node("Gelu", ["x"], "out", approximate="fast")
    with pytest.raises(UnsupportedNodeError, match="'Gelu_1' \\(Gelu\\): approximate='fast'"):
        from_onnx(m.build({"x": (2, 3)}, [y]))


def test_a_dynamic_input_shape_and_a_missing_file_are_named(tmp_path: Path) -> None:
    m = Model(8)
    y = m.node("Relu", ["x"], "out")
    model = m.build({"x": ("batch", 3)}, [y])
    with pytest.raises(ModelImportError, match="model input 'x' needs a static shape"):
        from_onnx(model)
    with pytest.raises(ModelImportError, match="is not a file"):
        from_onnx(tmp_path / "missing.onnx")


def test_gelu_workload_matches_the_formula() -> None:
    """The exact and tanh GELU statements against their formulas in numpy."""
    m = Model(9)
    a = m.node("Gelu", ["x"], "a")
    b = m.node("Gelu", ["x"], "b", approximate="tanh")
    graph = from_onnx(m.build({"x": (4, 5)}, [a, b]))
    x = np.random.default_rng(0).uniform(-3, 3, (4, 5)).astype(np.float32)
    got = graph.reference({"x": x})
    erf = np.vectorize(math.erf)
    np.testing.assert_allclose(got["a"], 0.5 * x * (1 + erf(x / math.sqrt(2))), rtol=1e-6)
    inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
    np.testing.assert_allclose(got["b"], 0.5 * x * (1 + np.tanh(inner)), rtol=1e-5, atol=1e-7)


def test_a_gemm_of_two_inputs_transposed_and_scaled_equals_onnx_runtime() -> None:
    """Gemm with transA and transB of operands given at run time (nothing to fold:
    a transposed product, then alpha and beta as scale operators), by the graph's
    numpy reference."""
    m = Model(13)
    y = m.node("Gemm", ["a", "b", "c"], "out", transA=1, transB=1, alpha=0.5, beta=-2.0)
    model = m.build({"a": (6, 4), "b": (5, 6), "c": (4, 1)}, [y])
    graph = from_onnx(model)
    assert [op.workload.name for op in graph.ops] == ["gemm", "scale", "scale", "add"]
    rng = np.random.default_rng(0)
    feeds = {
        n: rng.uniform(-1, 1, s).astype(np.float32)
        for n, s in (("a", (6, 4)), ("b", (5, 6)), ("c", (4, 1)))
    }
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, feeds)
    np.testing.assert_allclose(graph.reference(feeds)["out"], want, rtol=1e-5, atol=1e-6)


def test_a_swizzled_gemm_operand_that_cannot_flow_back_keeps_its_rewrite(
    cl_context: cl.Context,
) -> None:
    """A stacked MatMul's GEMM frozen with A swizzled (``Sw<2,3,4>`` on the flat
    offset): flowed back through the reshape in front of it, the swizzle
    becomes a 3-D layout whose inverse cannot be derived, so the reshape
    cannot write it (its pack kernel needs the inverse). The planner keeps the
    rewrite and says why, where it raised the LayoutError (a BERT layer's
    projections, tuned, hit it), and the plan runs equal to ONNX Runtime."""
    m = Model(14)
    y = m.node("MatMul", ["x", m.weight((128, 64))], "y")
    model = m.build({"x": (1, 32, 128)}, [y])
    graph = from_onnx(model)
    (gemm,) = [op for op in graph.ops if op.workload.name == "matmul"]
    swizzled = L.swizzle((32, 128), 2, 3, 4)
    candidate = Candidate.make(
        {"A": swizzled, "B": L.identity((128, 64)), "C": L.identity((32, 64))}
    )
    plan = plan_layouts(graph, {gemm.workload.key: candidate})
    assert [(r.tensor, r.dst.index_map) for r in plan.rewrites] == [("y.rows", swizzled.index_map)]
    assert "symbolically: the term j & 3 is not a digit of one index" in "\n".join(plan.log)
    x = np.random.default_rng(1).uniform(-1, 1, (1, 32, 128)).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"x": x})
    with plan.compile(cl_context) as compiled:
        got = compiled.run({"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * float(np.abs(want).max()))
