"""Row-major views moved below the element-wise operators that read them.

A reshape, a flatten or a copy that reads its one input in row-major order
(:func:`row_major_view`) changes a tensor's shape, not its elements' order.
An element-wise operator that reads such a view element for element computes
the same values on the view's input, before the view: ``E(view(T))`` is
``view(E'(T))``, where ``E'`` runs over ``T``'s shape and reads its other
operands through the view's index map (a bias ``B[j]`` stays ``B[j]``, a
residual of the view's shape is read at the view's coordinates of each
element). :func:`sink_view` makes that rewrite, read off the statements'
index expressions; epilogue fusion (:mod:`laytune.plan._fuse`) uses it to
reach the bias and residual adds that an ONNX MatMul of a stacked operand
reads through the reshape around its GEMM.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from laytune.exceptions import LaytuneError, PlanError
from laytune.layout import (
    Const,
    Expr,
    IndexMap,
    Var,
    evaluate,
    row_major_offsets,
    simplify,
    substitute,
)
from laytune.ops import Load, Statement, Workload, replace_loads, statement_text
from laytune.plan._graph import Graph, Op, Tensor

__all__ = ["row_major_view", "sink_view"]


def row_major_view(workload: Workload) -> bool:
    """Whether ``workload`` copies its one input to its output element for
    element in row-major order (``Y[d] = X[unflatten(flatten(d))]``: a
    reshape, a flatten, a copy): for every output index ``d``, the input
    element read has the row-major offset of ``d``. In logical layouts its
    output is then its input's memory.

    Decided on the load's index expressions (the input's row-major offset of
    what ``d`` reads, against ``d``'s own rank), by periods, without a pass
    over the tensor; a load those expressions do not describe (a read
    outside the input, an output index that is not an axis) is checked
    element by element."""
    stmt = workload.statement
    if stmt.reduction is not None or not isinstance(stmt.value, Load):
        return False
    (source,) = workload.inputs
    out = workload.output
    if source.size != out.size or source.dtype != out.dtype:
        return False
    closed = _read_in_row_major_order(workload)
    return _reads_in_row_major_order(workload) if closed is None else closed


def _read_in_row_major_order(workload: Workload) -> bool | None:
    """:func:`row_major_view`'s answer from the load's expressions, or None
    where they do not give one."""
    (source,) = workload.inputs
    out = workload.output
    at: list[Expr | None] = [None] * len(workload.axes)
    for d, index in enumerate(out.indices):
        if not isinstance(index, Var) or at[index.index] is not None:
            return None
        at[index.index] = Var(d)
    if any(a is None for a in at):
        return None
    try:
        read = IndexMap(
            tuple(f"d{d}" for d in range(len(out.shape))),
            tuple(substitute(e, at) for e in source.indices),  # type: ignore[arg-type]
        )
        if read.physical_shape(out.shape) != tuple(source.shape):
            return None  # some index read outside the input, or not all of it
        return row_major_offsets(read, out.shape)
    except LaytuneError:
        return None


def _reads_in_row_major_order(workload: Workload) -> bool:
    """:func:`row_major_view`'s answer element by element."""
    (source,) = workload.inputs
    out = workload.output
    grid = np.indices(out.shape, dtype=np.int64).reshape(len(out.shape), -1)
    args: list[Any] = [0] * len(workload.axes)
    for d, index in enumerate(out.indices):
        args[index.index] = grid[d]  # type: ignore[union-attr]
    read = [np.broadcast_to(np.asarray(evaluate(e, args)), grid.shape[1:]) for e in source.indices]
    if any((r < 0).any() or (r >= n).any() for r, n in zip(read, source.shape, strict=True)):
        return False
    offsets = np.ravel_multi_index(tuple(read), source.shape)
    return bool((offsets == np.arange(out.size)).all())


def _coordinates(src: tuple[int, ...], dst: tuple[int, ...], axes: list[Var]) -> list[Expr]:
    """The coordinates in ``dst`` of the element at ``axes`` of ``src``, both
    row-major views of one buffer: ``unflatten_dst(flatten_src(axes))``."""
    ranges = [(0, extent - 1) for extent in src]
    flat: Expr = Const(0)
    for var, extent in zip(axes, src, strict=True):
        flat = flat * extent + var
    out: list[Expr] = []
    inner = int(np.prod(dst))
    for k, extent in enumerate(dst):
        inner //= extent
        if extent == 1:
            out.append(Const(0))
            continue
        index = flat // inner if inner > 1 else flat
        out.append(simplify(index % extent if k else index, ranges))
    return out


def sink_view(graph: Graph, view: str) -> Graph:
    """``graph`` with the one element-wise reader ``E`` (at one port or
    several) of the row-major view
    ``view`` run before it: ``E'`` (named as ``E``) over the view's input,
    then the view (named as before) of its result into ``E``'s output
    tensor. Raises :class:`PlanError` saying why it cannot."""
    op = graph.op(view)
    what = f"cannot move {view} below its reader"
    if not row_major_view(op.workload):
        raise PlanError(f"{what}: it is not a row-major view")
    if op.output in graph.outputs:
        raise PlanError(f"{what}: {op.output} is a graph output")
    uses = graph.uses(op.output)
    readers = {reader for reader, _ in uses}
    if len(readers) != 1:
        raise PlanError(f"{what}: {op.output} has {len(readers)} readers")
    (reader_name,) = readers
    ports = {port for _, port in uses}
    reader = graph.op(reader_name)
    w = reader.workload
    out = w.output
    if (
        w.reduction is not None
        or any(w.buffer(port).indices != out.indices for port in ports)
        or w.dtype != op.workload.dtype
    ):
        raise PlanError(f"{what}: {reader_name} ({w.name}) is not element-wise over it")
    ((_, source),) = op.inputs
    src, dst = graph.tensors[source].shape, graph.tensors[op.output].shape
    names = [f"d{k}" for k in range(len(src))]
    axes = [Var(k, n) for k, n in enumerate(names)]
    at = _coordinates(src, dst, axes)  # the view's coordinates of each element
    ranges = [(0, extent - 1) for extent in src]
    values: list[Expr] = [Const(0)] * len(w.axes)
    for index, coordinate in zip(out.indices, at, strict=True):
        assert isinstance(index, Var)
        values[index.index] = coordinate

    def moved(load: Load) -> Load:
        if load.buffer in ports:
            return Load(load.buffer, tuple(axes))
        return Load(
            load.buffer, tuple(simplify(substitute(i, values), ranges) for i in load.indices)
        )

    stmt = Statement(out.name, tuple(axes), replace_loads(w.statement.value, moved), None, "")
    inputs = {d.name: (src if d.name in ports else d.shape) for d in w.inputs}
    try:
        before = Workload.define(
            w.name,
            statement_text(stmt, names),
            dict(zip(names, src, strict=True)),
            inputs,
            w.dtype,
            weights=w.weights,
        )
    except LaytuneError as err:
        raise PlanError(f"{what}: {reader_name} over {src} is refused: {err}") from None
    middle = graph.fresh_name(f"{reader.output}.{view}")
    wired = tuple((p, source if p in ports else t) for p, t in reader.inputs)
    first = Op(reader.name, before, wired, middle)
    then = Op(op.name, op.workload, ((op.inputs[0][0], middle),), reader.output)
    ops = []
    for o in graph.ops:
        if o.name == view:
            continue
        ops.extend((first, then) if o.name == reader_name else (o,))
    tensors = {k: t for k, t in graph.tensors.items() if k != op.output}
    tensors[middle] = Tensor(middle, src, w.dtype, "value", reader.name)
    tensors[reader.output] = Tensor(reader.output, dst, w.dtype, "value", op.name)
    return Graph(graph.name, tensors, ops, list(graph.outputs), dict(graph.constants))
