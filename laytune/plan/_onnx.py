"""ONNX models as graphs: :func:`from_onnx`.

Each node of the model becomes one or a few operators of a
:class:`~laytune.plan.Graph`, each a workload written as a statement
(:meth:`~laytune.ops.Workload.define`) from the node's attributes and its
tensors' shapes, which come from ONNX's shape inference; where a node is an
operator of the library with the same statement (``conv2d``, ``matmul``,
``relu``, ``bias_add``, ``transpose``, ``max_pool2d``) the library's
workload is used, so that records tuned for it apply. Initializers and
``Constant`` nodes are host constants: a node that reads one gets it as a
graph constant (a weight of its workload), or folds it at import
(BatchNormalization into the preceding Conv's filters and bias, Gemm's
``alpha``, ``beta`` and ``transB`` into a constant B and C, Reshape's
target shape).

A workload's key names its operator and every shape and integer attribute
its statement depends on; a value that is a float attribute (Clip's bounds,
LayerNormalization's epsilon, Gemm's alpha where it cannot be folded) is
read from a one-element constant rather than written into the statement, so
two nodes with one key always have one statement.

Where a node needs more than one statement it becomes a chain of operators
named after its output: Softmax is ``<out>.max`` (the maximum over the
axis), ``<out>.sum`` (the sum of exponentials) and ``<out>`` (the divide);
LayerNormalization is ``<out>.mean``, ``<out>.var`` and ``<out>``; a Conv
with a bias is ``<out>.conv`` and the bias add ``<out>``; a Reduce that
keeps its reduced axes is ``<out>.reduced`` and the reshape ``<out>``. The graph's
outputs are named as the model's, in the model's order.

Reshape and Flatten are copies in index notation (a tensor has one shape in
a graph), which a compiled plan runs as views of their input where both sides
are in logical layouts (:class:`~laytune.plan.CompiledPlan`); a Reshape that
keeps the shape, and Identity, are the same tensor. A MatMul of a stacked
left operand by a 2-D right one, ``(..., M, K) @ (K, N)``, is the library's
``matmul`` of ``(prod(...) * M, K)`` between two such reshapes, so that it is
tuned and planned as the one GEMM it is.
Nothing is guessed: a node, attribute or input the import does not take is
an :class:`~laytune.exceptions.UnsupportedNodeError` naming the node.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np

from laytune import ops
from laytune.exceptions import GraphError, ModelImportError, UnsupportedNodeError
from laytune.ops import Workload
from laytune.plan._graph import Graph
from laytune.plan._winograd import winograd_conv, winograd_fits, winograd_steps

__all__ = ["ONNX_OPS", "from_onnx"]

_FLOAT = 1  # onnx.TensorProto.FLOAT

#: The ONNX op types :func:`from_onnx` imports (default domain).
ONNX_OPS: tuple[str, ...] = (
    "Add",
    "AveragePool",
    "BatchNormalization",
    "Clip",
    "Constant",
    "Conv",
    "Div",
    "Erf",
    "Exp",
    "Flatten",
    "Gelu",
    "Gemm",
    "GlobalAveragePool",
    "Identity",
    "LayerNormalization",
    "MatMul",
    "MaxPool",
    "Mul",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceSum",
    "Relu",
    "Reshape",
    "Softmax",
    "Sqrt",
    "Sub",
    "Tanh",
    "Transpose",
)

_BINARY = {"Add": ("add", "+"), "Sub": ("sub", "-"), "Mul": ("mul", "*"), "Div": ("div", "/")}


def from_onnx(
    model: Any, name: str | None = None, *, winograd: bool | Collection[str] = False
) -> Graph:
    """The graph of an ONNX model: ``model`` is a path to a ``.onnx`` file or
    an ``onnx.ModelProto``. Graph inputs are the model's inputs that no
    initializer gives (float32, static shapes); outputs are the model's, by
    name and in order. ``name`` names the graph (default: the model's graph
    name). ``winograd``: each 3 x 3 stride-1 Conv whose filters are known
    becomes Winograd's F(2 x 2, 3 x 3), three statements
    (:func:`~laytune.plan.winograd_conv`); a collection: those of them whose
    operator it names (the graph's name of the convolution's output, as the
    direct import names its operator). Needs the ``onnx`` package (``pip
    install 'laytune[onnx]'``)."""
    try:
        import onnx
        import onnx.numpy_helper
        import onnx.shape_inference
    except ImportError:
        raise ModelImportError(
            "importing an ONNX model needs the onnx package: pip install 'laytune[onnx]'"
        ) from None
    if isinstance(model, onnx.ModelProto):
        proto = model
    elif isinstance(model, (str, os.PathLike)):
        if not os.path.isfile(model):
            raise ModelImportError(f"ONNX model {os.fspath(model)!r} is not a file")
        try:
            proto = onnx.load(os.fspath(model))
        except Exception as err:  # onnx raises protobuf's DecodeError and others
            raise ModelImportError(
                f"ONNX model {os.fspath(model)!r} does not load: {err}"
            ) from None
    else:
        raise ModelImportError(
            f"from_onnx takes a path or an onnx.ModelProto, not {type(model).__name__}"
        )
    for node in proto.graph.node:  # before shape inference, which may not know the node
        _check_op_type(node)
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=True, data_prop=True)
    except Exception as err:  # onnx.shape_inference.InferenceError and checker errors
        raise ModelImportError(f"ONNX shape inference failed on the model: {err}") from None
    return _Importer(inferred, onnx, name, winograd).run()


class _Importer:
    def __init__(
        self, model: Any, onnx: Any, name: str | None, winograd: bool | Collection[str] = False
    ) -> None:
        self.onnx = onnx
        self.winograd = winograd
        self.model = model
        g = model.graph
        self.graph = Graph(name or g.name or "model")
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
        self.host: dict[str, np.ndarray] = {}  # constants known at import, by ONNX name
        for init in g.initializer:
            self.host[init.name] = onnx.numpy_helper.to_array(init)
        self.shapes: dict[str, tuple[int, ...] | None] = {}
        self.types: dict[str, int] = {}
        for info in (*g.input, *g.value_info, *g.output):
            self._note_type(info)
        self.tensors: dict[str, str] = {}  # ONNX name -> graph tensor name
        self.uses: dict[str, list[Any]] = {}
        for node in g.node:
            for i in node.input:
                if i:
                    self.uses.setdefault(i, []).append(node)
        self.outputs = [o.name for o in g.output]
        self.skip: set[int] = set()
        self.folded_bn: dict[int, Any] = {}
        self.winograd_tables: dict[str, str] = {}
        self.winograd_done: set[str] = set()  # the convolutions imported in that form

    # -- tensors -------------------------------------------------------------------
    def _note_type(self, info: Any) -> None:
        t = info.type.tensor_type
        self.types[info.name] = t.elem_type
        if not t.HasField("shape"):
            self.shapes[info.name] = None
            return
        dims = []
        for d in t.shape.dim:
            dims.append(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None)
        self.shapes[info.name] = None if None in dims else tuple(dims)

    def shape(self, node: Any, name: str) -> tuple[int, ...]:
        if name in self.host:
            return tuple(self.host[name].shape)
        if name in self.tensors:
            return self.graph.tensors[self.tensors[name]].shape
        shape = self.shapes.get(name)
        if shape is None:
            raise ModelImportError(
                f"tensor {name!r} (read by {_node_name(node)}) has no static shape after "
                "shape inference"
            )
        return shape

    def tensor(self, node: Any, name: str) -> str:
        """The graph tensor of the ONNX tensor ``name`` (a constant is added on first use)."""
        if name in self.tensors:
            return self.tensors[name]
        if name in self.host:
            return self.constant(name, self.float_constant(node, name))
        raise ModelImportError(f"{_node_name(node)} reads {name!r}, which no earlier node makes")

    def float_constant(self, node: Any, name: str) -> np.ndarray:
        value = self.host[name]
        if value.dtype != np.float32:
            raise UnsupportedNodeError(
                _node_name(node),
                node.op_type,
                f"constant {name!r} is {value.dtype}; laytune computes in float32",
                ONNX_OPS,
            )
        return value

    def constant(self, name: str, value: np.ndarray) -> str:
        """A graph constant of ``value`` named ``name`` (a scalar becomes one
        element); the model's constant of that name, if there is one, is it."""
        value = np.ascontiguousarray(value, dtype=np.float32).reshape(value.shape or (1,))
        tensor, count = name, 1
        while tensor in self.graph.tensors:
            tensor, count = f"{name}.{count}", count + 1
        self.graph.constant(tensor, value)
        if name in self.host and name not in self.tensors:
            self.tensors[name] = tensor
        return tensor

    def apply(self, node: Any, workload: Workload, out: str, **ports: str) -> str:
        try:
            return self.graph.apply(workload, out, **ports).name
        except GraphError as err:  # a tensor name taken, a port whose shape disagrees
            raise ModelImportError(f"{_node_name(node)}: {err}") from None

    def done(self, node: Any, onnx_name: str, tensor: str) -> None:
        """``tensor`` is the node's output ``onnx_name``; its shape must be the inferred one."""
        got = self.graph.tensors[tensor].shape
        want = self.shapes.get(onnx_name)
        if want is not None and tuple(want) != tuple(got):
            raise ModelImportError(
                f"{_node_name(node)} makes {onnx_name!r} of shape {got}, shape inference "
                f"says {want}"
            )
        self.tensors[onnx_name] = tensor

    def refuse(self, node: Any, reason: str) -> UnsupportedNodeError:
        return UnsupportedNodeError(_node_name(node), node.op_type, reason, ONNX_OPS)

    def host_value(self, node: Any, name: str, what: str) -> np.ndarray:
        if name not in self.host:
            raise self.refuse(node, f"its {what} ({name!r}) must be a constant of the model")
        return self.host[name]

    # -- the walk ------------------------------------------------------------------------
    def run(self) -> Graph:
        g = self.model.graph
        for info in g.input:
            if info.name in self.host:
                continue
            if self.types.get(info.name) != _FLOAT:
                raise ModelImportError(
                    f"model input {info.name!r} has element type "
                    f"{_type_name(self.onnx, self.types.get(info.name))}; laytune takes float32"
                )
            shape = self.shapes.get(info.name)
            if not shape:
                raise ModelImportError(
                    f"model input {info.name!r} needs a static shape of rank 1 or more "
                    "(set every dimension, e.g. the batch, to a number)"
                )
            self.graph.input(info.name, shape)
            self.tensors[info.name] = info.name
        self._find_folds()
        for k, node in enumerate(g.node):
            if k in self.skip:
                continue
            getattr(self, f"_{node.op_type}")(node, k)
        for name in self.outputs:
            if name not in self.tensors:
                raise ModelImportError(f"model output {name!r} is made by no node")
            tensor = self.tensors[name]
            if tensor != name:  # an alias (Identity, a Reshape that keeps the shape)
                shape = self.graph.tensors[tensor].shape
                tensor = self.graph.apply(ops.copy(shape), name, X=tensor).name
            self.graph.output(tensor)
        if not isinstance(self.winograd, bool):
            missing = sorted(set(self.winograd) - self.winograd_done)
            if missing:
                raise ModelImportError(
                    f"winograd names {', '.join(map(repr, missing))}, which "
                    f"{'is' if len(missing) == 1 else 'are'} not a 3 x 3 stride-1 convolution "
                    "with known filters in this model (name a convolution by its operator, "
                    "as the direct import names it)"
                )
        return self.graph

    def _find_folds(self) -> None:
        """BatchNormalization nodes whose input is a Conv's only use, with constants."""
        nodes = list(self.model.graph.node)
        producer = {out: k for k, n in enumerate(nodes) for out in n.output}
        for k, bn in enumerate(nodes):
            if bn.op_type != "BatchNormalization" or bn.domain not in ("", "ai.onnx"):
                continue
            src = producer.get(bn.input[0])
            if src is None or nodes[src].op_type != "Conv":
                continue
            conv = nodes[src]
            if len(self.uses.get(conv.output[0], [])) != 1 or conv.output[0] in self.outputs:
                continue
            constant = [conv.input[1], *conv.input[2:3], *bn.input[1:5]]
            if all(n in self.host for n in constant if n) and _attr(bn, "training_mode", 0) == 0:
                self.folded_bn[src] = bn
                self.skip.add(k)

    # -- operators -------------------------------------------------------------------------
    def _Identity(self, node: Any, _: int) -> None:
        self.done(node, node.output[0], self.tensor(node, node.input[0]))

    def _Constant(self, node: Any, _: int) -> None:
        value = None
        for a in node.attribute:
            if a.name == "value":
                value = self.onnx.numpy_helper.to_array(a.t)
            elif a.name == "value_float":
                value = np.array(a.f, dtype=np.float32)
            elif a.name == "value_floats":
                value = np.array(list(a.floats), dtype=np.float32)
            elif a.name == "value_int":
                value = np.array(a.i, dtype=np.int64)
            elif a.name == "value_ints":
                value = np.array(list(a.ints), dtype=np.int64)
        if value is None:
            raise self.refuse(node, "a Constant needs value, value_float(s) or value_int(s)")
        self.host[node.output[0]] = value

    def _Relu(self, node: Any, _: int) -> None:
        x = self.tensor(node, node.input[0])
        shape = self.graph.tensors[x].shape
        self.done(node, node.output[0], self.apply(node, ops.relu(shape), node.output[0], X=x))

    def _unary(self, node: Any, function: str) -> None:
        x = self.tensor(node, node.input[0])
        shape = self.graph.tensors[x].shape
        names = _names(len(shape))
        workload = _define(
            function,
            f"Y[{_join(names)}] = {function}(X[{_join(names)}])",
            names,
            shape,
            {"X": shape},
            {"shape": shape},
        )
        self.done(node, node.output[0], self.apply(node, workload, node.output[0], X=x))

    def _Exp(self, node: Any, _: int) -> None:
        self._unary(node, "exp")

    def _Sqrt(self, node: Any, _: int) -> None:
        self._unary(node, "sqrt")

    def _Tanh(self, node: Any, _: int) -> None:
        self._unary(node, "tanh")

    def _Erf(self, node: Any, _: int) -> None:
        self._unary(node, "erf")

    def _Gelu(self, node: Any, _: int) -> None:
        x = self.tensor(node, node.input[0])
        shape = self.graph.tensors[x].shape
        names = _names(len(shape))
        i = _join(names)
        approximate = _attr(node, "approximate", b"none")
        approximate = approximate.decode() if isinstance(approximate, bytes) else approximate
        if approximate == "none":
            statement = f"Y[{i}] = X[{i}] * (0.5 + 0.5 * erf(X2[{i}] * {math.sqrt(0.5)!r}))"
            ports = {"X": x, "X2": x}
            name = "gelu"
        elif approximate == "tanh":
            inner = (
                f"{math.sqrt(2 / math.pi)!r} * (X2[{i}] + 0.044715 * X3[{i}] * X4[{i}] * X5[{i}])"
            )
            statement = f"Y[{i}] = X[{i}] * (0.5 + 0.5 * tanh({inner}))"
            ports = {"X": x, "X2": x, "X3": x, "X4": x, "X5": x}
            name = "gelu_tanh"
        else:
            raise self.refuse(node, f"approximate={approximate!r} (laytune takes 'none', 'tanh')")
        workload = _define(
            name, statement, names, shape, {p: shape for p in ports}, {"shape": shape}
        )
        self.done(node, node.output[0], self.apply(node, workload, node.output[0], **ports))

    def _Clip(self, node: Any, _: int) -> None:
        x = self.tensor(node, node.input[0])
        shape = self.graph.tensors[x].shape
        bounds: dict[str, str] = {}
        if self.opset < 11:
            for attr, port in (("min", "LO"), ("max", "HI")):
                value = _attr(node, attr, None)
                if value is not None:
                    bounds[port] = self.constant(f"{node.output[0]}.{attr}", np.array([value]))
        else:
            for k, port in ((1, "LO"), (2, "HI")):
                if len(node.input) > k and node.input[k]:
                    value = self.host_value(node, node.input[k], "bound")
                    if value.size != 1:
                        raise self.refuse(node, f"bound {node.input[k]!r} is not one value")
                    bounds[port] = self.tensor(node, node.input[k])
        if not bounds:
            self._Identity(node, 0)
            return
        names = _names(len(shape))
        i = _join(names)
        value = f"X[{i}]"
        if "LO" in bounds:
            value = f"max({value}, LO[0])"
        if "HI" in bounds:
            value = f"min({value}, HI[0])"
        inputs = {"X": shape, **{port: (1,) for port in bounds}}
        workload = _define(
            "clip",
            f"Y[{i}] = {value}",
            names,
            shape,
            inputs,
            {"shape": shape, "low": int("LO" in bounds), "high": int("HI" in bounds)},
            weights=tuple(bounds),
        )
        out = self.apply(node, workload, node.output[0], X=x, **bounds)
        self.done(node, node.output[0], out)

    def _binary(self, node: Any, _: int) -> None:
        a, b = (self.tensor(node, n) for n in node.input[:2])
        out = self._elementwise(node, node.op_type, a, b, node.output[0])
        self.done(node, node.output[0], out)

    _Add = _Sub = _Mul = _Div = _binary

    def _elementwise(self, node: Any, op_type: str, a: str, b: str, out: str) -> str:
        """``a op b`` with numpy's broadcasting, into the tensor ``out``."""
        name, symbol = _BINARY[op_type]
        sa, sb = self.graph.tensors[a].shape, self.graph.tensors[b].shape
        try:
            out_shape = tuple(int(s) for s in np.broadcast_shapes(sa, sb))
        except ValueError:
            raise self.refuse(node, f"shapes {sa} and {sb} do not broadcast") from None
        kinds = self.graph.tensors
        if op_type == "Add":
            for x, bias in ((a, b), (b, a)):
                axis = _bias_axis(kinds[x].shape, kinds[bias].shape, out_shape)
                if kinds[bias].kind == "constant" and axis is not None:
                    vector = self.graph.constants[bias].reshape(-1)
                    if vector.shape != kinds[bias].shape:
                        bias = self.constant(f"{out}.B", vector)
                    return self.apply(node, ops.bias_add(out_shape, axis), out, X=x, B=bias)
        names = _names(len(out_shape))
        statement = (
            f"Y[{_join(names)}] = A[{_broadcast(sa, names, out_shape)}] {symbol} "
            f"B[{_broadcast(sb, names, out_shape)}]"
        )
        weights = tuple(p for p, t in (("A", a), ("B", b)) if kinds[t].kind == "constant")
        workload = _define(
            name, statement, names, out_shape, {"A": sa, "B": sb}, {"a": sa, "b": sb}, weights
        )
        return self.apply(node, workload, out, A=a, B=b)

    def _Transpose(self, node: Any, _: int) -> None:
        x = self.tensor(node, node.input[0])
        shape = self.graph.tensors[x].shape
        perm = _attr(node, "perm", None)
        workload = ops.transpose(shape, None if perm is None else tuple(perm))
        self.done(node, node.output[0], self.apply(node, workload, node.output[0], X=x))

    def _reshape_to(self, node: Any, dst: tuple[int, ...]) -> None:
        x = self.tensor(node, node.input[0])
        src = self.graph.tensors[x].shape
        if math.prod(src) != math.prod(dst):
            raise self.refuse(node, f"cannot reshape {src} to {dst}")
        if src == dst:
            self.done(node, node.output[0], x)
            return
        workload = _reshape(src, dst)
        self.done(node, node.output[0], self.apply(node, workload, node.output[0], X=x))

    def _Reshape(self, node: Any, _: int) -> None:
        self.host_value(node, node.input[1], "target shape")
        dst = self.shapes.get(node.output[0])
        if dst is None:
            raise self.refuse(node, "its output shape is not static after shape inference")
        self._reshape_to(node, tuple(dst))

    def _Flatten(self, node: Any, _: int) -> None:
        shape = self.shape(node, node.input[0])
        axis = _attr(node, "axis", 1)
        axis = axis + len(shape) if axis < 0 else axis
        self._reshape_to(node, (math.prod(shape[:axis]), math.prod(shape[axis:])))

    # convolutions and pools --------------------------------------------------------
    def _window(
        self, node: Any, spatial: tuple[int, ...], kernel: tuple[int, ...]
    ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """strides, dilations and pads (begin..., end...) of a 2-D window."""
        rank = len(spatial)
        strides = tuple(_attr(node, "strides", [1] * rank))
        dilations = tuple(_attr(node, "dilations", [1] * rank))
        auto_pad = _attr(node, "auto_pad", b"NOTSET")
        auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
        if auto_pad in ("NOTSET", ""):
            pads = tuple(_attr(node, "pads", [0] * 2 * rank))
        elif auto_pad == "VALID":
            pads = (0,) * 2 * rank
        elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            begin, end = [], []
            for size, k, s, d in zip(spatial, kernel, strides, dilations, strict=True):
                total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
                small, large = total // 2, total - total // 2
                begin.append(small if auto_pad == "SAME_UPPER" else large)
                end.append(large if auto_pad == "SAME_UPPER" else small)
            pads = (*begin, *end)
        else:
            raise self.refuse(node, f"auto_pad {auto_pad!r}")
        return strides, dilations, pads

    def _Conv(self, node: Any, k: int) -> None:
        xs = self.shape(node, node.input[0])
        ws = self.shape(node, node.input[1])
        if len(xs) != 4:
            raise self.refuse(node, f"input of shape {xs}: laytune imports 2-D convolutions")
        n, c, h, w = xs
        f, cg, kh, kw = ws
        group = _attr(node, "group", 1)
        (sh, sw), (dh, dw), (pt, pl, pb, pr) = self._window(node, (h, w), (kh, kw))
        oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
        ow = (w + pl + pr - (kw - 1) * dw - 1) // sw + 1
        bias_name = node.input[2] if len(node.input) > 2 and node.input[2] else None
        out = node.output[0]
        bn = self.folded_bn.get(k)
        if bn is not None:  # fold: W' = W * scale[f], b' = (b - mean) * scale + beta
            gamma, beta, mean, var = (self.host[i].astype(np.float64) for i in bn.input[1:5])
            scale = gamma / np.sqrt(var + _attr(bn, "epsilon", 1e-5))
            weights = self.host[node.input[1]].astype(np.float64) * scale[:, None, None, None]
            bias = self.host[bias_name].astype(np.float64) if bias_name else np.zeros(f)
            bias = (bias - mean) * scale + beta
            out = bn.output[0]
            b_tensor: str | None = self.constant(f"{out}.B", bias.astype(np.float32))
        else:
            weights = self.host.get(node.input[1])  # None where the model computes them
            b_tensor = self.tensor(node, bias_name) if bias_name else None
        if c % group or f % group or cg != c // group:
            raise self.refuse(node, f"group {group} with input {xs} and filters {ws}")
        # A depthwise Conv (one channel per group, one filter each) whose
        # weights are known reads them as [f, kh, kw]: its statement then has
        # no reduce axis of one channel, and its windows read the output's
        # own channel, the form whose starts vectorise along the channels.
        depthwise = group > 1 and cg == 1 and f == group and weights is not None
        conv_out = f"{out}.conv" if b_tensor else out
        x = self.tensor(node, node.input[0])
        wanted = self.winograd if isinstance(self.winograd, bool) else conv_out in self.winograd
        if wanted and weights is not None and winograd_fits((kh, kw), (sh, sw), (dh, dw), group):
            y = self._winograd(node, x, xs, weights, (pt, pl, pb, pr), conv_out)
            self.winograd_done.add(conv_out)
            self._bias(node, bn, out, y, b_tensor)
            return
        if weights is not None and (bn is not None or depthwise):
            shape = (f, kh, kw) if depthwise else ws
            w_tensor = self.constant(f"{out}.W", weights.astype(np.float32).reshape(shape))
        else:
            w_tensor = self.tensor(node, node.input[1])
        library = group == 1 and kh == kw and sh == sw and dh == dw == 1 and pt == pl == pb == pr
        xh = _tap("oh", sh, "kh", dh, pt)
        xw = _tap("ow", sw, "kw", dw, pl)
        params = {
            "x": xs,
            "w": ws,
            "strides": (sh, sw),
            "pads": (pt, pl, pb, pr),
            "dilations": (dh, dw),
            "group": group,
        }
        if library:
            workload = ops.conv2d(n, c, h, w, f, kh, stride=sh, padding=pt)
        elif depthwise:
            workload = Workload.define(
                "depthwise_conv",
                f"Y[n, f, oh, ow] += X[n, f, {xh}, {xw}] * W[f, kh, kw]",
                {"n": n, "f": f, "oh": oh, "ow": ow, "kh": kh, "kw": kw},
                {"X": xs, "W": (f, kh, kw)},
                params=params,
                weights=("W",),
            )
        else:
            channel = _group_channel(f // group, cg) if group > 1 else "c"
            workload = Workload.define(
                "conv",
                f"Y[n, f, oh, ow] += X[n, {channel}, {xh}, {xw}] * W[f, c, kh, kw]",
                {"n": n, "f": f, "oh": oh, "ow": ow, "c": cg, "kh": kh, "kw": kw},
                {"X": xs, "W": ws},
                params=params,
                weights=("W",),
            )
        y = self.apply(node, workload, conv_out, X=x, W=w_tensor)
        self._bias(node, bn, out, y, b_tensor)

    def _bias(self, node: Any, bn: Any, out: str, y: str, b_tensor: str | None) -> None:
        """The Conv's output ``out``: ``y`` with the bias added where it has one."""
        if b_tensor:
            shape = self.graph.tensors[y].shape
            y = self.apply(node, ops.bias_add(shape, 1), out, X=y, B=b_tensor)
        self.done(node if bn is None else bn, out, y)

    def _winograd(
        self,
        node: Any,
        x: str,
        x_shape: tuple[int, ...],
        weights: np.ndarray,
        pads: tuple[int, int, int, int],
        out: str,
    ) -> str:
        """The convolution of ``x`` by ``weights`` as Winograd's three
        statements (:func:`~laytune.plan.winograd_conv`); returns
        the output tensor, named ``out``."""
        n, c, h, w = x_shape
        form = winograd_conv((n, c, h, w), np.asarray(weights, dtype=np.float64), pads)
        table_in = self.winograd_tables.get("in")
        if table_in is None:  # one of each table for the whole graph
            table_in = self.winograd_tables["in"] = self.constant("winograd.T", form.input_table)
            self.winograd_tables["out"] = self.constant("winograd.A", form.output_table)
        v_name, m_name, y_name = winograd_steps(out)
        u = self.constant(f"{out}.U", form.filters)
        v = self.apply(node, form.transform_in, v_name, T=table_in, X=x)
        m = self.apply(node, form.matmuls, m_name, V=v, U=u)
        return self.apply(node, form.transform_out, y_name, A=self.winograd_tables["out"], M=m)

    def _BatchNormalization(self, node: Any, _: int) -> None:
        """One not folded into a Conv: ``Y = X * S[c] + T[c]`` with S, T from its constants."""
        if _attr(node, "training_mode", 0):
            raise self.refuse(node, "training_mode=1 (laytune imports inference models)")
        gamma, beta, mean, var = (
            self.host_value(node, i, "parameter").astype(np.float64) for i in node.input[1:5]
        )
        scale = gamma / np.sqrt(var + _attr(node, "epsilon", 1e-5))
        x = self.tensor(node, node.input[0])
        shape = self.graph.tensors[x].shape
        if len(shape) < 2:
            raise self.refuse(node, f"input of shape {shape} has no channel axis")
        s = self.constant(f"{node.output[0]}.scale", scale.astype(np.float32))
        t = self.constant(f"{node.output[0]}.shift", (beta - mean * scale).astype(np.float32))
        names = _names(len(shape))
        i = _join(names)
        workload = _define(
            "batch_norm",
            f"Y[{i}] = X[{i}] * S[{names[1]}] + T[{names[1]}]",
            names,
            shape,
            {"X": shape, "S": (shape[1],), "T": (shape[1],)},
            {"shape": shape},
            ("S", "T"),
        )
        out = self.apply(node, workload, node.output[0], X=x, S=s, T=t)
        self.done(node, node.output[0], out)

    def _pool(self, node: Any, kind: str) -> None:
        if len(node.output) > 1 and node.output[1]:
            raise self.refuse(node, "its Indices output")
        xs = self.shape(node, node.input[0])
        if len(xs) != 4:
            raise self.refuse(node, f"input of shape {xs}: laytune imports 2-D pools")
        n, c, h, w = xs
        kh, kw = _attr(node, "kernel_shape", None) or (0, 0)
        (sh, sw), (dh, dw), (pt, pl, pb, pr) = self._window(node, (h, w), (kh, kw))
        out = self.shapes.get(node.output[0])
        if out is None:
            raise self.refuse(node, "its output shape is not static after shape inference")
        oh, ow = out[2:]
        x = self.tensor(node, node.input[0])
        xh, xw = _tap("oh", sh, "kh", dh, pt), _tap("ow", sw, "kw", dw, pl)
        axes = {"n": n, "c": c, "oh": oh, "ow": ow, "kh": kh, "kw": kw}
        params = {
            "x": xs,
            "kernel": (kh, kw),
            "strides": (sh, sw),
            "pads": (pt, pl, pb, pr),
            "dilations": (dh, dw),
            "y": (oh, ow),
        }
        if kind == "max":
            plain = kh == kw and sh == sw and dh == dw == 1 and not any((pt, pl, pb, pr))
            if plain and (oh, ow) == ((h - kh) // sh + 1, (w - kw) // sw + 1):
                y = self.apply(node, ops.max_pool2d(n, c, h, w, kh, sh), node.output[0], X=x)
                self.done(node, node.output[0], y)
                return
            # a load outside X reads zero; the mask makes it the lowest float instead
            mh, mw = (oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1
            mask = np.full((mh, mw), np.finfo(np.float32).min, dtype=np.float32)
            mask[pt : pt + h, pl : pl + w] = 0.0
            m = self.constant(f"{node.output[0]}.mask", mask)
            statement = (
                f"Y[n, c, oh, ow] = max(X[n, c, {xh}, {xw}] + "
                f"M[{_tap('oh', sh, 'kh', dh, 0)}, {_tap('ow', sw, 'kw', dw, 0)}])"
            )
            workload = Workload.define(
                "max_pool",
                statement,
                axes,
                {"X": xs, "M": (mh, mw)},
                params=params,
                weights=("M",),
            )
            y = self.apply(node, workload, node.output[0], X=x, M=m)
        else:
            include = bool(_attr(node, "count_include_pad", 0))
            counts = [
                _window_counts(o, size, k, s, d, begin, end, include)
                for o, size, k, s, d, begin, end in (
                    (oh, h, kh, sh, dh, pt, pb),
                    (ow, w, kw, sw, dw, pl, pr),
                )
            ]
            reciprocal = 1.0 / np.outer(counts[0], counts[1])
            r = self.constant(f"{node.output[0]}.reciprocal", reciprocal.astype(np.float32))
            workload = Workload.define(
                "average_pool",
                f"Y[n, c, oh, ow] += X[n, c, {xh}, {xw}] * R[oh, ow]",
                axes,
                {"X": xs, "R": (oh, ow)},
                params={**params, "count_include_pad": int(include)},
                weights=("R",),
            )
            y = self.apply(node, workload, node.output[0], X=x, R=r)
        self.done(node, node.output[0], y)

    def _MaxPool(self, node: Any, _: int) -> None:
        if _attr(node, "storage_order", 0):
            raise self.refuse(node, "storage_order=1")
        self._pool(node, "max")

    def _AveragePool(self, node: Any, _: int) -> None:
        self._pool(node, "average")

    def _GlobalAveragePool(self, node: Any, _: int) -> None:
        xs = self.shape(node, node.input[0])
        if len(xs) != 4:
            raise self.refuse(node, f"input of shape {xs}: laytune imports 2-D pools")
        n, c, h, w = xs
        x = self.tensor(node, node.input[0])
        workload = Workload.define(
            "global_average_pool",
            f"Y[n, c, u, v] += X[n, c, h + u, w + v] * {1.0 / (h * w)!r}",
            {"n": n, "c": c, "u": 1, "v": 1, "h": h, "w": w},
            {"X": xs},
            params={"x": xs},
        )
        self.done(node, node.output[0], self.apply(node, workload, node.output[0], X=x))

    # matrix products -----------------------------------------------------------------
    def _MatMul(self, node: Any, _: int) -> None:
        a, b = (self.tensor(node, i) for i in node.input[:2])
        self.done(node, node.output[0], self._matmul(node, a, b, False, False, node.output[0]))

    def _matmul(self, node: Any, a: str, b: str, ta: bool, tb: bool, out: str) -> str:
        sa, sb = self.graph.tensors[a].shape, self.graph.tensors[b].shape
        if len(sa) < 2 or len(sb) < 2:
            raise self.refuse(node, f"operands of shapes {sa} and {sb} (each needs 2 axes or more)")
        m, ka = (sa[-1], sa[-2]) if ta else (sa[-2], sa[-1])
        kb, nn = (sb[-1], sb[-2]) if tb else (sb[-2], sb[-1])
        if ka != kb:
            raise self.refuse(node, f"operands of shapes {sa} and {sb} do not multiply")
        try:
            batch = tuple(int(s) for s in np.broadcast_shapes(sa[:-2], sb[:-2]))
        except ValueError:
            raise self.refuse(node, f"batch axes of {sa} and {sb} do not broadcast") from None
        weights = tuple(
            p for p, t in (("A", a), ("B", b)) if self.graph.tensors[t].kind == "constant"
        )
        if not batch and not ta and not tb:
            workload = dataclasses.replace(ops.matmul(m, nn, ka), weights=weights)
            return self.apply(node, workload, out, A=a, B=b)
        if len(sb) == 2 and not ta and not tb:
            # (..., M, K) @ (K, N) is the library's matmul of (prod(...) * M, K): the
            # reshapes on either side are row-major views, which launch nothing
            rows = math.prod(sa[:-1])
            a2 = self.apply(node, _reshape(sa, (rows, ka)), f"{out}.rows", X=a)
            workload = dataclasses.replace(ops.matmul(rows, nn, ka), weights=weights)
            y = self.apply(node, workload, f"{out}.matmul", A=a2, B=b)
            return self.apply(node, _reshape((rows, nn), (*sa[:-1], nn)), out, X=y)
        names = [f"b{i}" for i in range(len(batch))]
        ia = ["k", "i"] if ta else ["i", "k"]
        ib = ["j", "k"] if tb else ["k", "j"]
        a_index = _broadcast(sa[:-2], names, batch, tail=ia)
        b_index = _broadcast(sb[:-2], names, batch, tail=ib)
        workload = Workload.define(
            "batch_matmul" if batch else "gemm",
            f"C[{_join([*names, 'i', 'j'])}] += A[{a_index}] * B[{b_index}]",
            {**dict(zip(names, batch, strict=True)), "i": m, "j": nn, "k": ka},
            {"A": sa, "B": sb},
            params={"a": sa, "b": sb, "trans_a": int(ta), "trans_b": int(tb)},
            weights=weights,
        )
        return self.apply(node, workload, out, A=a, B=b)

    def _Gemm(self, node: Any, _: int) -> None:
        alpha, beta = _attr(node, "alpha", 1.0), _attr(node, "beta", 1.0)
        ta, tb = bool(_attr(node, "transA", 0)), bool(_attr(node, "transB", 0))
        out = node.output[0]
        a = self.tensor(node, node.input[0])
        if node.input[1] in self.host:  # fold transB and alpha into the constant
            value = self.float_constant(node, node.input[1])
            value = (value.T if tb else value) * np.float32(alpha)
            changed = tb or alpha != 1.0
            b = self.constant(f"{node.input[1]}.gemm" if changed else node.input[1], value)
            tb, alpha = False, 1.0
        else:
            b = self.tensor(node, node.input[1])
        c_name = node.input[2] if len(node.input) > 2 and node.input[2] else None
        has_c = c_name is not None and beta != 0.0
        y = self._matmul(node, a, b, ta, tb, f"{out}.matmul" if has_c or alpha != 1.0 else out)
        if alpha != 1.0:
            y = self._scale(node, y, alpha, f"{out}.alpha" if has_c else out)
        if not has_c:
            self.done(node, out, y)
            return
        assert c_name is not None
        if c_name in self.host:
            c = self.constant(
                f"{c_name}.beta" if beta != 1.0 else c_name,
                self.float_constant(node, c_name) * np.float32(beta),
            )
        else:
            c = self.tensor(node, c_name)
            if beta != 1.0:
                c = self._scale(node, c, beta, f"{out}.beta")
        self.done(node, out, self._elementwise(node, "Add", y, c, out))

    def _scale(self, node: Any, x: str, factor: float, out: str) -> str:
        shape = self.graph.tensors[x].shape
        s = self.constant(f"{out}.factor", np.array([factor], dtype=np.float32))
        names = _names(len(shape))
        workload = _define(
            "scale",
            f"Y[{_join(names)}] = X[{_join(names)}] * S[0]",
            names,
            shape,
            {"X": shape, "S": (1,)},
            {"shape": shape},
            ("S",),
        )
        return self.apply(node, workload, out, X=x, S=s)

    # normalisations ----------------------------------------------------------------
    def _Softmax(self, node: Any, _: int) -> None:
        x = self.tensor(node, node.input[0])
        shape = self.graph.tensors[x].shape
        axis = _attr(node, "axis", -1 if self.opset >= 13 else 1)
        axis = axis + len(shape) if axis < 0 else axis
        reduced = [axis] if self.opset >= 13 else list(range(axis, len(shape)))
        out = node.output[0]
        kept, names, loop = self._reduction_axes(node, shape, reduced)
        k, i = _join(kept), _join(names)
        key = {"shape": shape, "axes": tuple(reduced)}
        inputs = {"X": shape}
        mx = Workload.define("softmax_max", f"M[{k}] = max(X[{i}])", loop, inputs, params=key)
        m = self.apply(node, mx, f"{out}.max", X=x)
        both = {"X": shape, "M": mx.output.shape}
        sm = Workload.define(
            "softmax_sum", f"S[{k}] += exp(X[{i}] - M[{k}])", loop, both, params=key
        )
        s = self.apply(node, sm, f"{out}.sum", X=x, M=m)
        div = _define(
            "softmax_div",
            f"Y[{i}] = exp(X[{i}] - M[{k}]) / S[{k}]",
            names,
            shape,
            {**both, "S": mx.output.shape},
            key,
        )
        self.done(node, out, self.apply(node, div, out, X=x, M=m, S=s))

    def _ReduceMax(self, node: Any, _: int) -> None:
        self._reduce(node, "max")

    def _ReduceMin(self, node: Any, _: int) -> None:
        self._reduce(node, "min")

    def _ReduceSum(self, node: Any, _: int) -> None:
        self._reduce(node, "sum")

    def _ReduceMean(self, node: Any, _: int) -> None:
        self._reduce(node, "mean")

    def _reduce(self, node: Any, kind: str) -> None:
        """``Y = X.<kind>(axes)``: the axes an attribute before opset 18 (13
        for ReduceSum), an input since; none given reduces every axis (ONNX's
        default) and is refused, as a workload keeps one. With ``keepdims``
        the reduced axes stay as extents of 1, a reshape of the result."""
        x = self.tensor(node, node.input[0])
        shape = self.graph.tensors[x].shape
        if _attr(node, "noop_with_empty_axes", 0):
            raise self.refuse(node, "noop_with_empty_axes=1")
        if len(node.input) > 1 and node.input[1]:
            axes = [int(a) for a in self.host_value(node, node.input[1], "axes").reshape(-1)]
        else:
            axes = list(_attr(node, "axes", []))
        axes = axes or list(range(len(shape)))  # none, or an empty list: every axis
        # ONNX's shape inference, run before the walk, refuses an axis outside the rank
        reduced = sorted({a + len(shape) if a < 0 else a for a in axes})
        out = node.output[0]
        kept, names, loop = self._reduction_axes(node, shape, reduced)
        k, i = _join(kept), _join(names)
        if kind == "mean":
            count = math.prod(shape[d] for d in reduced)
            statement = f"Y[{k}] += X[{i}] * {1.0 / count!r}"
        elif kind == "sum":
            statement = f"Y[{k}] += X[{i}]"
        else:
            statement = f"Y[{k}] = {kind}(X[{i}])"
        workload = Workload.define(
            f"reduce_{kind}",
            statement,
            loop,
            {"X": shape},
            params={"x": shape, "axes": tuple(reduced)},
        )
        if not _attr(node, "keepdims", 1):
            self.done(node, out, self.apply(node, workload, out, X=x))
            return
        y = self.apply(node, workload, f"{out}.reduced", X=x)
        kept_dims = tuple(1 if d in reduced else shape[d] for d in range(len(shape)))
        self.done(node, out, self.apply(node, _reshape(workload.output.shape, kept_dims), out, X=y))

    def _reduction_axes(
        self, node: Any, shape: tuple[int, ...], reduced: Sequence[int]
    ) -> tuple[list[str], list[str], dict[str, int]]:
        """Names of the kept axes, of every axis, and the loop nest (kept first)."""
        names = _names(len(shape))
        kept = [names[d] for d in range(len(shape)) if d not in reduced]
        if not kept:
            raise self.refuse(node, f"it reduces every axis of {shape}; keep at least one")
        order = kept + [names[d] for d in reduced]
        return kept, names, {n: shape[names.index(n)] for n in order}

    def _LayerNormalization(self, node: Any, _: int) -> None:
        if any(self.uses.get(o) or o in self.outputs for o in node.output[1:] if o):
            raise self.refuse(node, "its Mean and InvStdDev outputs (laytune makes Y only)")
        x = self.tensor(node, node.input[0])
        shape = self.graph.tensors[x].shape
        axis = _attr(node, "axis", -1)
        axis = axis + len(shape) if axis < 0 else axis
        reduced = list(range(axis, len(shape)))
        out = node.output[0]
        kept, names, loop = self._reduction_axes(node, shape, reduced)
        k, i = _join(kept), _join(names)
        inv = repr(1.0 / math.prod(shape[axis:]))
        key = {"shape": shape, "axis": axis}
        kept_shape = tuple(shape[d] for d in range(axis))
        mean = Workload.define(
            "layer_norm_mean", f"M[{k}] += X[{i}] * {inv}", loop, {"X": shape}, params=key
        )
        m = self.apply(node, mean, f"{out}.mean", X=x)
        var = Workload.define(
            "layer_norm_var",
            f"V[{k}] += (X[{i}] - M[{k}]) * (X2[{i}] - M2[{k}]) * {inv}",
            loop,
            {"X": shape, "X2": shape, "M": kept_shape, "M2": kept_shape},
            params=key,
        )
        v = self.apply(node, var, f"{out}.var", X=x, X2=x, M=m, M2=m)
        norm_shape = shape[axis:]
        tail = names[axis:]
        g = self.tensor(node, node.input[1])
        ports = {"X": x, "M": m, "V": v, "G": g}
        value = f"(X[{i}] - M[{k}]) * rsqrt(V[{k}] + E[0]) * G[{_broadcast(self.graph.tensors[g].shape, tail, norm_shape)}]"
        if len(node.input) > 2 and node.input[2]:
            ports["B"] = self.tensor(node, node.input[2])
            value += f" + B[{_broadcast(self.graph.tensors[ports['B']].shape, tail, norm_shape)}]"
        ports["E"] = self.constant(
            f"{out}.epsilon", np.array([_attr(node, "epsilon", 1e-5)], dtype=np.float32)
        )
        inputs = {p: self.graph.tensors[t].shape for p, t in ports.items()}
        key = {**key, "scale": inputs["G"], "bias": inputs.get("B", (0,))}
        weights = tuple(p for p, t in ports.items() if self.graph.tensors[t].kind == "constant")
        norm = _define("layer_norm", f"Y[{i}] = {value}", names, shape, inputs, key, weights)
        self.done(node, out, self.apply(node, norm, out, **ports))


# -- statement helpers ----------------------------------------------------------------
def _names(rank: int) -> list[str]:
    return [f"d{k}" for k in range(rank)]


def _join(names: Sequence[str]) -> str:
    return ", ".join(names)


def _define(
    name: str,
    statement: str,
    names: Sequence[str],
    shape: Sequence[int],
    inputs: dict[str, Sequence[int]],
    params: dict[str, Any],
    weights: Sequence[str] = (),
) -> Workload:
    """An element-wise workload over the axes ``names`` of extents ``shape``."""
    return Workload.define(
        name,
        statement,
        dict(zip(names, shape, strict=True)),
        inputs,
        params=params,
        weights=weights,
    )


def _broadcast(
    shape: Sequence[int], names: Sequence[str], out: Sequence[int], tail: Sequence[str] = ()
) -> str:
    """The index of an operand of ``shape`` broadcast to ``out`` (numpy's rule:
    aligned on the right, an extent of 1 reads its one element), then ``tail``."""
    offset = len(out) - len(shape)
    parts = [
        names[offset + d] if extent == out[offset + d] else "0" for d, extent in enumerate(shape)
    ]
    return _join([*parts, *tail])


def _bias_axis(x: Sequence[int], bias: Sequence[int], out: Sequence[int]) -> int | None:
    """The axis of ``out`` that ``bias`` runs along, when ``x`` is the whole
    output and ``bias`` has one extent other than 1 (a bias_add)."""
    if tuple(x) != tuple(out) or len(bias) > len(out):
        return None
    offset = len(out) - len(bias)
    axes = [offset + d for d, extent in enumerate(bias) if extent != 1]
    if len(axes) != 1 or bias[axes[0] - offset] != out[axes[0]]:
        return None
    return axes[0]


def _group_channel(per_group: int, channels: int) -> str:
    """The input channel filter ``f`` of a grouped Conv reads at reduce step
    ``c``: ``(f // per_group) * channels + c``, written without its factors
    of one, so that a depthwise Conv (one channel per group, ``c`` of extent
    one) reads ``X[n, f + c, ...]``, which :func:`~laytune.search.classify`
    sees as the depthwise window it is."""
    group = "f" if per_group == 1 else f"(f // {per_group})"
    return f"{group} + c" if channels == 1 else f"{group} * {channels} + c"


def _tap(out: str, stride: int, window: str, dilation: int, pad: int) -> str:
    """``out * stride + window * dilation - pad`` as index text."""
    text = f"{out} * {stride}" if stride != 1 else out
    text += f" + {window} * {dilation}" if dilation != 1 else f" + {window}"
    return f"{text} - {pad}" if pad else text


def _window_counts(
    out: int,
    size: int,
    kernel: int,
    stride: int,
    dilation: int,
    begin: int,
    end: int,
    include_pad: bool,
) -> np.ndarray:
    """Per output position, the window's elements that an average divides by."""
    lo, hi = (-begin, size + end) if include_pad else (0, size)
    taps = np.arange(out)[:, None] * stride + np.arange(kernel)[None, :] * dilation - begin
    return ((taps >= lo) & (taps < hi)).sum(axis=1).astype(np.float64)


def _reshape(src: tuple[int, ...], dst: tuple[int, ...]) -> Workload:
    """A row-major reshape: ``Y[d...] = X[unflatten(flatten(d))]``; where only
    axes of extent 1 come and go, each axis reads its own."""
    names = _names(len(dst))
    if [s for s in src if s != 1] == [d for d in dst if d != 1]:
        moving = iter(n for n, d in zip(names, dst, strict=True) if d != 1)
        index = [next(moving) if s != 1 else "0" for s in src]
    else:
        flat = names[0]
        for name, extent in zip(names[1:], dst[1:], strict=True):
            flat = f"({flat}) * {extent} + {name}"
        index = []
        for k in range(len(src)):
            inner = math.prod(src[k + 1 :])
            text = f"({flat}) // {inner}" if inner > 1 else f"({flat})"
            index.append(f"({text}) % {src[k]}" if k else text)
    return _define(
        "reshape",
        f"Y[{_join(names)}] = X[{_join(index)}]",
        names,
        dst,
        {"X": src},
        {"x": src, "y": dst},
    )


def _attr(node: Any, name: str, default: Any) -> Any:
    for a in node.attribute:
        if a.name == name:
            if a.type == 1:  # FLOAT
                return a.f
            if a.type == 2:  # INT
                return a.i
            if a.type == 3:  # STRING
                return a.s
            if a.type == 6:  # FLOATS
                return list(a.floats)
            if a.type == 7:  # INTS
                return list(a.ints)
    return default


def _check_op_type(node: Any) -> None:
    if node.domain not in ("", "ai.onnx") or node.op_type not in ONNX_OPS:
        domain = f" of domain {node.domain!r}" if node.domain not in ("", "ai.onnx") else ""
        raise UnsupportedNodeError(
            _node_name(node),
            node.op_type,
            f"op type {node.op_type!r}{domain} is not imported; laytune imports "
            f"{', '.join(ONNX_OPS)}",
            ONNX_OPS,
        )


def _node_name(node: Any) -> str:
    if node.name:
        return node.name
    return f"(unnamed, making {node.output[0]!r})" if node.output else "(unnamed)"


def _type_name(onnx: Any, elem_type: int | None) -> str:
    if elem_type is None:
        return "unknown"
    try:
        return str(onnx.TensorProto.DataType.Name(elem_type)).lower()
    except ValueError:
        return str(elem_type)
