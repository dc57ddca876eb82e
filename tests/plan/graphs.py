"""Small graphs and frozen candidates shared by the planning tests."""

from __future__ import annotations

import numpy as np

from laytune import layout as L
from laytune import ops
from laytune.codegen import lower
from laytune.device_info import DeviceInfo
from laytune.layout import Layout
from laytune.ops import Workload
from laytune.plan import Graph
from laytune.records import Record
from laytune.space import Candidate

NCHW4C = "lambda i, j, k, l: [i, j // 4, k, l, j % 4]"
IDENTITY4 = "lambda i, j, k, l: [i, j, k, l]"


def oihw4i4o(shape: tuple[int, ...]) -> Layout:
    inner = L.block(shape, 1, 4)
    return L.compose(L.block(inner.physical_shape, 0, 4), inner)


def conv_candidate(
    workload: Workload,
    x: Layout | None = None,
    pads: dict[str, object] | None = None,
    knobs: dict[str, object] | None = None,
) -> Candidate:
    """NCHW4c input and output, OIHW4i4o weights (or the given input layout)."""
    return Candidate.make(
        {
            "X": x or L.block(workload.buffer("X").shape, 1, 4),
            "W": oihw4i4o(workload.buffer("W").shape),
            "Y": L.block(workload.buffer("Y").shape, 1, 4),
        },
        knobs or {},
        pads or {},
    )


def record_of(
    workload: Workload, device: DeviceInfo, candidate: Candidate, seconds: float
) -> Record:
    """A verified record of ``candidate`` with its lowered program, timed ``seconds``
    (a time written by the test, not measured)."""
    program = lower(workload, candidate, device)
    return Record(
        workload.key,
        device.key,
        candidate,
        "ok",
        value_s=seconds,
        compute_s=seconds,
        program=program.to_json(),
        device_name=device.name,
    )


def weights(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def seed_graph(weights_as_inputs: bool = False) -> tuple[Graph, dict[str, Candidate]]:
    """The seed's running example: conv -> add (bias, a constant) -> conv."""
    conv1 = ops.conv2d(1, 8, 6, 6, 8, 3, stride=1, padding=1)
    conv2 = ops.conv2d(1, 8, 6, 6, 4, 3, stride=1, padding=1)
    g = Graph("seed")
    x = g.input("x", (1, 8, 6, 6))
    if weights_as_inputs:
        f1, f2 = g.input("f1", (8, 8, 3, 3)), g.input("f2", (4, 8, 3, 3))
    else:
        f1 = g.constant("f1", weights((8, 8, 3, 3), 1))
        f2 = g.constant("f2", weights((4, 8, 3, 3), 2))
    bias = g.constant("bias", weights((8,), 3))
    y = g.apply(conv1, "conv1", X=x, W=f1)
    y = g.apply(ops.bias_add((1, 8, 6, 6), axis=1), "add", X=y, B=bias)
    y = g.apply(conv2, "conv2", X=y, W=f2)
    g.output(y)
    return g, {conv1.key: conv_candidate(conv1), conv2.key: conv_candidate(conv2)}


def reshape(src: tuple[int, ...], dst: tuple[int, ...]) -> Workload:
    """A row-major reshape written in index notation: ``Y[d...] = X[unflatten(flatten(d))]``."""
    names = [f"d{k}" for k in range(len(dst))]
    flat = names[0]
    for name, extent in zip(names[1:], dst[1:], strict=True):
        flat = f"({flat}) * {extent} + {name}"
    index = []
    for k in range(len(src)):
        inner = int(np.prod(src[k + 1 :]))
        text = f"({flat}) // {inner}" if inner > 1 else f"({flat})"
        index.append(f"({text}) % {src[k]}" if k else text)
    return Workload.define(
        "reshape",
        f"Y[{', '.join(names)}] = X[{', '.join(index)}]",
        dict(zip(names, dst, strict=True)),
        {"X": src},
    )


def reshape_graph() -> tuple[Graph, dict[str, Candidate]]:
    """conv (NCHW4c) -> reshape (1, 8, 4, 4) -> (1, 16, 2, 4) -> conv (NCHW4c)."""
    conv1 = ops.conv2d(1, 8, 4, 4, 8, 3, stride=1, padding=1)
    conv2 = ops.conv2d(1, 16, 2, 4, 8, 1, stride=1, padding=0)
    g = Graph("reshape")
    x = g.input("x", (1, 8, 4, 4))
    y = g.apply(conv1, "conv1", X=x, W=g.constant("f1", weights((8, 8, 3, 3), 4)))
    y = g.apply(reshape((1, 8, 4, 4), (1, 16, 2, 4)), "reshape", X=y)
    y = g.apply(conv2, "conv2", X=y, W=g.constant("f2", weights((8, 16, 1, 1), 5)))
    g.output(y)
    return g, {conv1.key: conv_candidate(conv1), conv2.key: conv_candidate(conv2)}


def padded_graph(producer_pad: object, with_relu: bool) -> tuple[Graph, dict[str, Candidate]]:
    """Six channels in NCHW4c (two of eight padding): conv1 -> [relu] -> conv2, where
    conv2 overcomputes over the padded channels and so needs zeros in its input's
    padding (NaN or infinity there would show: times zero it is NaN)."""
    conv1 = ops.conv2d(1, 6, 5, 5, 6, 3, stride=1, padding=1)
    conv2 = ops.conv2d(1, 6, 5, 5, 6, 2, stride=1, padding=0)
    g = Graph("padded")
    x = g.input("x", (1, 6, 5, 5))
    y = g.apply(conv1, "conv1", X=x, W=g.constant("f1", weights((6, 6, 3, 3), 6)))
    if with_relu:
        y = g.apply(ops.relu((1, 6, 5, 5)), "relu", X=y)
    y = g.apply(conv2, "conv2", X=y, W=g.constant("f2", weights((6, 6, 2, 2), 7)))
    g.output(y)
    pads = {} if producer_pad is None else {"Y": producer_pad}
    return g, {
        conv1.key: conv_candidate(conv1, pads=pads),
        conv2.key: conv_candidate(
            conv2, pads={"X": 0.0, "W": 0.0}, knobs={"pad_mode": "overcompute"}
        ),
    }


def residual_graph() -> Graph:
    """A ResNet block with a downsampling branch: conv (3 x 3) -> bias, and
    conv (1 x 1) -> bias, added, then relu. The 3 x 3 conv comes first, so its
    epilogue takes the add and the relu, and the 1 x 1 conv's stops at it."""
    shape = (1, 8, 6, 6)
    conv = ops.conv2d(1, 8, 6, 6, 8, 3, stride=1, padding=1)
    down = ops.conv2d(1, 8, 6, 6, 8, 1, stride=1, padding=0)
    add = Workload.define(
        "add",
        "Y[n, c, h, w] = A[n, c, h, w] + B[n, c, h, w]",
        dict(zip("nchw", shape, strict=True)),
        {"A": shape, "B": shape},
    )
    g = Graph("residual")
    x = g.input("x", shape)
    a = g.apply(conv, "conv", X=x, W=g.constant("f", weights((8, 8, 3, 3), 8)))
    a = g.apply(ops.bias_add(shape, axis=1), "bias", X=a, B=g.constant("b", weights((8,), 9)))
    d = g.apply(down, "down", X=x, W=g.constant("fd", weights((8, 8, 1, 1), 10)))
    d = g.apply(
        ops.bias_add(shape, axis=1), "down.bias", X=d, B=g.constant("bd", weights((8,), 11))
    )
    y = g.apply(add, "add", A=a, B=d)
    g.output(g.apply(ops.relu(shape), "relu", X=y))
    return g
