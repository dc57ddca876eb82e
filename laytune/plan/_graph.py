"""Graph: operators (workloads) connected by tensors.

A graph is built in order, so the order operators are added in is a
topological order: an operator can only read tensors that already exist.
Tensors are graph inputs (host data given at run time), constants (host data
known when planning, such as weights and biases) or values that an operator
produces. Each operator is one :class:`~laytune.ops.Workload`; its input
buffers are its ports, and its output buffer is the value it produces.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from laytune.exceptions import GraphError, UnknownNameError
from laytune.ops import Workload

__all__ = ["Graph", "GraphError", "Op", "Tensor"]

TensorKind = Literal["input", "constant", "value"]


def _mismatch(wanted: Iterable[str], given: Iterable[str]) -> tuple[list[str], list[str]]:
    """The names ``given`` lacks and the names it has that are not ``wanted``, sorted."""
    want, have = set(wanted), set(given)
    return sorted(want - have), sorted(have - want)


@dataclass(frozen=True)
class Tensor:
    """One tensor of a graph; ``producer`` is the operator that computes a value."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    kind: TensorKind
    producer: str | None = None


@dataclass(frozen=True)
class Op:
    """One operator: ``workload`` reads ``inputs`` (port -> tensor) and writes ``output``."""

    name: str
    workload: Workload
    inputs: tuple[tuple[str, str], ...]
    output: str

    def tensor_of(self, port: str) -> str:
        for name, tensor in self.inputs:
            if name == port:
                return tensor
        raise UnknownNameError(f"operator {self.name!r} has no port {port!r}")

    @property
    def output_port(self) -> str:
        return self.workload.output.name


@dataclass
class Graph:
    """A dataflow graph of workloads, built in topological order.

    >>> g = Graph("block")
    >>> x = g.input("x", (1, 8, 6, 6))
    >>> y = g.apply(ops.relu((1, 8, 6, 6)), X=x)
    >>> g.output(y)
    """

    name: str = "graph"
    tensors: dict[str, Tensor] = field(default_factory=dict)
    ops: list[Op] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    constants: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    def _add(self, tensor: Tensor) -> Tensor:
        if not tensor.name or tensor.name in self.tensors:
            raise GraphError(f"graph {self.name!r} already has a tensor named {tensor.name!r}")
        self.tensors[tensor.name] = tensor
        return tensor

    def _tensor(self, ref: Tensor | str) -> Tensor:
        name = ref.name if isinstance(ref, Tensor) else ref
        if name not in self.tensors:
            raise GraphError(
                f"graph {self.name!r} has no tensor {name!r} (tensors: {sorted(self.tensors)})"
            )
        return self.tensors[name]

    def input(self, name: str, shape: tuple[int, ...], dtype: str = "float32") -> Tensor:
        """A graph input: logical host data, given at run time."""
        return self._add(Tensor(name, tuple(int(s) for s in shape), str(np.dtype(dtype)), "input"))

    def constant(self, name: str, value: np.ndarray) -> Tensor:
        """A constant known when planning; layout rewrites on it are folded into it."""
        value = np.asarray(value)
        tensor = self._add(Tensor(name, value.shape, str(value.dtype), "constant"))
        self.constants[name] = value
        return tensor

    def apply(self, workload: Workload, name: str | None = None, **inputs: Tensor | str) -> Tensor:
        """Add an operator reading ``inputs`` (one per input buffer of ``workload``,
        by buffer name); returns the value it produces, named ``name`` (default:
        the workload's name and a counter)."""
        if name is None:
            name = self.fresh_name(workload.name)
        ports = {decl.name: decl for decl in workload.inputs}
        missing, unknown = _mismatch(ports, inputs)
        if unknown or missing:
            raise GraphError(
                f"operator {name!r} ({workload.name}) reads ports {sorted(ports)}; "
                f"unknown: {unknown}, missing: {missing}"
            )
        wired = []
        for port, decl in ports.items():
            tensor = self._tensor(inputs[port])
            if tensor.shape != decl.shape or tensor.dtype != decl.dtype:
                raise GraphError(
                    f"operator {name!r} port {port!r} takes {decl.dtype}{list(decl.shape)} but "
                    f"tensor {tensor.name!r} is {tensor.dtype}{list(tensor.shape)}"
                )
            wired.append((port, tensor.name))
        out = workload.output
        value = self._add(Tensor(name, out.shape, out.dtype, "value", producer=name))
        self.ops.append(Op(name, workload, tuple(wired), value.name))
        return value

    def output(self, *tensors: Tensor | str) -> None:
        """Mark values (or inputs) as graph outputs, returned to the host in logical layout."""
        for ref in tensors:
            tensor = self._tensor(ref)
            if tensor.kind == "constant":
                raise GraphError(f"constant {tensor.name!r} cannot be a graph output")
            if tensor.name not in self.outputs:
                self.outputs.append(tensor.name)

    def snapshot(self) -> Graph:
        """A copy that later additions to this graph do not change."""
        return Graph(
            self.name, dict(self.tensors), list(self.ops), list(self.outputs), dict(self.constants)
        )

    def fresh_name(self, base: str) -> str:
        """``base``, or ``base`` with the first counter that names no tensor yet."""
        name, count = base, 1
        while name in self.tensors:
            name, count = f"{base}{count}", count + 1
        return name

    # -- queries ----------------------------------------------------------------
    def _index(self) -> tuple[dict[str, Op], dict[str, list[tuple[str, str]]]]:
        """The operators by name and the (operator, port) readers of each
        tensor: planning asks for them millions of times. Made again when the
        list of operators is not the one they were made from (a graph grows
        by appending; rewrites make new graphs)."""
        ops = self.ops
        key = (id(ops), len(ops))
        index = self.__dict__.get("_op_index")
        if index is None or index[0] != key:
            readers: dict[str, list[tuple[str, str]]] = {}
            for op in ops:
                for port, tensor in op.inputs:
                    readers.setdefault(tensor, []).append((op.name, port))
            by_name = {op.name: op for op in reversed(ops)}  # the first of a name
            index = (key, by_name, readers)
            self.__dict__["_op_index"] = index
        return index[1], index[2]

    def op(self, name: str) -> Op:
        found = self._index()[0].get(name)
        if found is None:
            raise GraphError(f"graph {self.name!r} has no operator {name!r}")
        return found

    def uses(self, tensor: str) -> list[tuple[str, str]]:
        """(operator, port) pairs that read ``tensor``, in graph order."""
        return list(self._index()[1].get(tensor, ()))

    def check_inputs(self, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The graph inputs of ``arrays`` as contiguous arrays of the declared shape and dtype."""
        wanted = {n: t for n, t in self.tensors.items() if t.kind == "input"}
        missing, unknown = _mismatch(wanted, arrays)
        if missing or unknown:
            raise GraphError(
                f"graph {self.name!r} takes inputs {sorted(wanted)}; missing: {missing}, "
                f"unknown: {unknown}"
            )
        out = {}
        for name, tensor in wanted.items():
            array = np.ascontiguousarray(arrays[name], dtype=tensor.dtype)
            if array.shape != tensor.shape:
                raise GraphError(
                    f"input {name!r} has shape {array.shape}, the graph declares {tensor.shape}"
                )
            out[name] = array
        return out

    def reference(self, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """numpy result of every graph output: each workload's reference, in order."""
        values: dict[str, np.ndarray] = {**self.check_inputs(arrays), **self.constants}
        for op in self.ops:
            inputs = {port: values[tensor] for port, tensor in op.inputs}
            values[op.output] = op.workload.reference(inputs)[op.output_port]
        return {name: values[name] for name in self.outputs}
