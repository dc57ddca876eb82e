"""ONNX models written with ``onnx.helper`` and seeded random weights, so
that nothing is downloaded: a ResNet-18 (:func:`resnet18`), a MobileNet-v2
(:func:`mobilenet_v2`) and one encoder layer of BERT-base
(:func:`bert_layer`), each in its real topology, at any
size (the benchmark's ``--quick`` runs small ones; a test may too).

Weights are drawn with a scale that keeps activations of order one through
the whole network (He-like for convolutions, ``1 / sqrt(fan_in)`` for
projections), and BatchNormalization's statistics are drawn positive, so that
the outputs are comparable by a relative tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["MOBILENET_V2_STAGES", "RESNET18_STAGES", "bert_layer", "mobilenet_v2", "resnet18"]

OPSET = 17  # LayerNormalization is in opset 17
IR_VERSION = 8

#: ResNet-18's stages: (channels, first block's stride), two basic blocks each.
RESNET18_STAGES: tuple[tuple[int, int], ...] = ((64, 1), (128, 2), (256, 2), (512, 2))


class _Builder:
    """Nodes and initializers of a model under construction, named in order."""

    def __init__(self, seed: int) -> None:
        import onnx
        from onnx import helper, numpy_helper

        self.onnx = onnx
        self.helper = helper
        self.numpy_helper = numpy_helper
        self.rng = np.random.default_rng(seed)
        self.nodes: list[Any] = []
        self.inits: list[Any] = []

    def constant(self, name: str, value: np.ndarray) -> str:
        self.inits.append(self.numpy_helper.from_array(value, name))
        return name

    def uniform(self, name: str, shape: Sequence[int], scale: float) -> str:
        value = self.rng.uniform(-scale, scale, shape).astype(np.float32)
        return self.constant(name, value)

    def node(self, op: str, inputs: Sequence[str], output: str, **attrs: Any) -> str:
        self.nodes.append(self.helper.make_node(op, list(inputs), [output], output, **attrs))
        return output

    def model(
        self, name: str, inputs: dict[str, Sequence[int]], outputs: dict[str, Sequence[int]]
    ) -> Any:
        from onnx import TensorProto

        make = self.helper.make_tensor_value_info
        graph = self.helper.make_graph(
            self.nodes,
            name,
            [make(n, TensorProto.FLOAT, list(s)) for n, s in inputs.items()],
            [make(n, TensorProto.FLOAT, list(s)) for n, s in outputs.items()],
            self.inits,
        )
        model = self.helper.make_model(graph, opset_imports=[self.helper.make_opsetid("", OPSET)])
        model.ir_version = IR_VERSION
        self.onnx.checker.check_model(model, full_check=True)
        return model


#: MobileNet-v2's inverted residual stages: (expansion, channels, blocks,
#: first block's stride), as torchvision's ``mobilenet_v2`` has them.
MOBILENET_V2_STAGES: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def _conv_bn(
    b: _Builder,
    x: str,
    name: str,
    channels: int,
    filters: int,
    kernel: int,
    stride: int,
    relu: bool,
    group: int = 1,
) -> str:
    """Conv (no bias, as torchvision's) + BatchNormalization (+ ReLU)."""
    fan_in = channels // group * kernel * kernel
    shape = (filters, channels // group, kernel, kernel)
    w = b.uniform(f"{name}.weight", shape, math.sqrt(6 / fan_in))
    pad = kernel // 2
    y = b.node(
        "Conv",
        [x, w],
        f"{name}.conv",
        kernel_shape=[kernel, kernel],
        strides=[stride, stride],
        pads=[pad] * 4,
        group=group,
    )
    scale = b.constant(f"{name}.bn.scale", b.rng.uniform(0.5, 1.0, filters).astype(np.float32))
    bias = b.constant(f"{name}.bn.bias", b.rng.uniform(-0.1, 0.1, filters).astype(np.float32))
    mean = b.constant(f"{name}.bn.mean", b.rng.uniform(-0.1, 0.1, filters).astype(np.float32))
    var = b.constant(f"{name}.bn.var", b.rng.uniform(0.5, 1.5, filters).astype(np.float32))
    y = b.node("BatchNormalization", [y, scale, bias, mean, var], f"{name}.bn", epsilon=1e-5)
    return b.node("Relu", [y], f"{name}.relu") if relu else y


def _basic_block(b: _Builder, x: str, name: str, channels: int, filters: int, stride: int) -> str:
    y = _conv_bn(b, x, f"{name}.conv1", channels, filters, 3, stride, relu=True)
    y = _conv_bn(b, y, f"{name}.conv2", filters, filters, 3, 1, relu=False)
    if stride != 1 or channels != filters:
        x = _conv_bn(b, x, f"{name}.downsample", channels, filters, 1, stride, relu=False)
    y = b.node("Add", [y, x], f"{name}.add")
    return b.node("Relu", [y], f"{name}.relu")


def _classified(
    b: _Builder, name: str, y: str, channels: int, classes: int, batch: int, size: int
) -> Any:
    """The image classifier whose features ``y`` (``channels`` of them) end
    in global average pooling, Flatten and a Gemm to ``logits``: the model,
    input ``x`` (batch, 3, size, size)."""
    y = b.node("GlobalAveragePool", [y], "pool")
    y = b.node("Flatten", [y], "flatten", axis=1)
    w = b.uniform("fc.weight", (classes, channels), 1 / math.sqrt(channels))
    bias = b.uniform("fc.bias", (classes,), 1 / math.sqrt(channels))
    b.node("Gemm", [y, w, bias], "logits", transB=1)
    return b.model(name, {"x": (batch, 3, size, size)}, {"logits": (batch, classes)})


def resnet18(
    size: int = 224,
    width: int = 64,
    classes: int = 1000,
    batch: int = 1,
    seed: int = 0,
) -> Any:
    """ResNet-18 (``onnx.ModelProto``), input ``x`` (batch, 3, size, size),
    output ``logits`` (batch, classes): a 7 x 7 stride-2 stem conv + BN +
    ReLU, a 3 x 3 stride-2 max pool, four stages of two basic blocks with
    ``width`` x 1, 2, 4, 8 channels (the first block of stages 2-4 strides by
    2 and downsamples its shortcut by a 1 x 1 stride-2 conv + BN), global
    average pooling, Flatten and a Gemm to ``classes``. ``width=64`` and
    ``size=224`` are torchvision's ``resnet18``."""
    b = _Builder(seed)
    y = _conv_bn(b, "x", "stem", 3, width, 7, 2, relu=True)
    y = b.node("MaxPool", [y], "stem.pool", kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    channels = width
    for s, (factor, stride) in enumerate(RESNET18_STAGES, 1):
        filters = width * factor // 64
        y = _basic_block(b, y, f"layer{s}.0", channels, filters, stride)
        y = _basic_block(b, y, f"layer{s}.1", filters, filters, 1)
        channels = filters
    return _classified(b, "resnet18", y, channels, classes, batch, size)


def _relu6(b: _Builder, x: str, name: str) -> str:
    low = b.constant(f"{name}.min", np.array(0.0, dtype=np.float32))
    high = b.constant(f"{name}.max", np.array(6.0, dtype=np.float32))
    return b.node("Clip", [x, low, high], f"{name}.relu6")


def mobilenet_v2(
    size: int = 224,
    width: float = 1.0,
    classes: int = 1000,
    batch: int = 1,
    seed: int = 0,
) -> Any:
    """MobileNet-v2 (``onnx.ModelProto``), input ``x`` (batch, 3, size, size),
    output ``logits`` (batch, classes): a 3 x 3 stride-2 stem conv + BN +
    ReLU6, the inverted residual blocks of :data:`MOBILENET_V2_STAGES` (a 1 x 1
    expansion + BN + ReLU6, a 3 x 3 depthwise conv + BN + ReLU6, a 1 x 1
    projection + BN, and a residual Add where the shape is kept), a 1 x 1
    conv to 1280 channels + BN + ReLU6, global average pooling, Flatten and a
    Gemm; ``width`` scales every channel count (rounded to multiples of 8, as
    torchvision's ``mobilenet_v2`` does). ``width=1`` and ``size=224`` are
    torchvision's: a network nobody fitted laytune's starts to (depthwise
    convolutions, 24-channel tensors, a 3-channel stem of stride 2)."""

    def channels(c: int) -> int:
        return max(8, int(c * width + 4) // 8 * 8)

    b = _Builder(seed)
    stem = channels(32)
    y = _relu6(b, _conv_bn(b, "x", "stem", 3, stem, 3, 2, relu=False), "stem")
    cin = stem
    k = 0
    for expansion, c, blocks, stride in MOBILENET_V2_STAGES:
        cout = channels(c)
        for j in range(blocks):
            name, hidden, x = f"block{k}", cin * expansion, y
            if expansion != 1:
                y = _conv_bn(b, y, f"{name}.expand", cin, hidden, 1, 1, relu=False)
                y = _relu6(b, y, f"{name}.expand")
            y = _conv_bn(
                b, y, f"{name}.dw", hidden, hidden, 3, stride if j == 0 else 1, False, hidden
            )
            y = _relu6(b, y, f"{name}.dw")
            y = _conv_bn(b, y, f"{name}.project", hidden, cout, 1, 1, relu=False)
            if j > 0 or (stride == 1 and cin == cout):
                y = b.node("Add", [y, x], f"{name}.add")
            cin, k = cout, k + 1
    head = max(1280, channels(1280))
    y = _relu6(b, _conv_bn(b, y, "head", cin, head, 1, 1, relu=False), "head")
    return _classified(b, "mobilenet_v2", y, head, classes, batch, size)


def _linear(b: _Builder, x: str, name: str, fan_in: int, fan_out: int) -> str:
    """MatMul by a (fan_in, fan_out) weight + Add of a bias, as exporters write it."""
    w = b.uniform(f"{name}.weight", (fan_in, fan_out), 1 / math.sqrt(fan_in))
    bias = b.uniform(f"{name}.bias", (fan_out,), 1 / math.sqrt(fan_in))
    y = b.node("MatMul", [x, w], f"{name}.matmul")
    return b.node("Add", [y, bias], f"{name}.add")


def _layer_norm(b: _Builder, x: str, name: str, hidden: int) -> str:
    gamma = b.constant(f"{name}.gamma", b.rng.uniform(0.5, 1.5, hidden).astype(np.float32))
    beta = b.constant(f"{name}.beta", b.rng.uniform(-0.1, 0.1, hidden).astype(np.float32))
    return b.node("LayerNormalization", [x, gamma, beta], name, axis=-1, epsilon=1e-12)


def bert_layer(
    sequence: int = 128,
    hidden: int = 768,
    heads: int = 12,
    ffn: int = 3072,
    batch: int = 1,
    seed: int = 0,
) -> Any:
    """One BERT encoder layer (``onnx.ModelProto``), input ``x`` (batch,
    sequence, hidden), output ``y`` of the same shape, as BERT's exporters
    write it: Q, K and V by MatMul + Add, each reshaped to (batch, sequence,
    heads, hidden / heads) and transposed to heads first (K to (.., head
    size, sequence)), the scores Q K^T divided by sqrt(head size), Softmax,
    times V, transposed and reshaped back, the output projection, a residual
    Add and LayerNormalization, then the feed-forward MatMul + Add, GELU in
    its Erf form ``x * 0.5 * (1 + erf(x / sqrt 2))``, MatMul + Add, a
    residual Add and LayerNormalization. The defaults are BERT-base's at
    sequence length 128."""
    if hidden % heads:
        raise ValueError(f"hidden {hidden} is not a multiple of heads {heads}")
    size = hidden // heads
    b = _Builder(seed)
    split = b.constant("heads.shape", np.array([batch, sequence, heads, size], np.int64))
    merged = b.constant("hidden.shape", np.array([batch, sequence, hidden], np.int64))

    def heads_first(t: str, perm: Sequence[int]) -> str:
        t = b.node("Reshape", [t, split], f"{t}.split")
        return b.node("Transpose", [t], f"{t}.heads", perm=list(perm))

    q = heads_first(_linear(b, "x", "query", hidden, hidden), (0, 2, 1, 3))
    k = heads_first(_linear(b, "x", "key", hidden, hidden), (0, 2, 3, 1))
    v = heads_first(_linear(b, "x", "value", hidden, hidden), (0, 2, 1, 3))
    scores = b.node("MatMul", [q, k], "scores")
    root = b.constant("scale", np.array(math.sqrt(size), np.float32))
    scores = b.node("Div", [scores, root], "scores.scaled")
    probs = b.node("Softmax", [scores], "probs", axis=-1)
    context = b.node("MatMul", [probs, v], "context")
    context = b.node("Transpose", [context], "context.seq", perm=[0, 2, 1, 3])
    context = b.node("Reshape", [context, merged], "context.merged")
    attention = _linear(b, context, "attention.output", hidden, hidden)
    attention = b.node("Add", [attention, "x"], "attention.residual")
    attention = _layer_norm(b, attention, "attention.norm", hidden)
    inner = _linear(b, attention, "ffn.inner", hidden, ffn)
    root2 = b.constant("sqrt2", np.array(math.sqrt(2.0), np.float32))
    one = b.constant("one", np.array(1.0, np.float32))
    half = b.constant("half", np.array(0.5, np.float32))
    g = b.node("Div", [inner, root2], "gelu.div")
    g = b.node("Erf", [g], "gelu.erf")
    g = b.node("Add", [g, one], "gelu.add")
    g = b.node("Mul", [inner, g], "gelu.mul")
    g = b.node("Mul", [g, half], "gelu")
    out = _linear(b, g, "ffn.output", ffn, hidden)
    out = b.node("Add", [out, attention], "ffn.residual")
    _layer_norm(b, out, "y", hidden)
    shape = (batch, sequence, hidden)
    return b.model("bert_layer", {"x": shape}, {"y": shape})
