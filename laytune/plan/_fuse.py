"""Epilogue fusion: element-wise operators folded into the reduction they read.

A layout-critical operator reduces (a convolution, a matmul); an operator
that reads its result element for element (a bias add, a ReLU, a Clip, a
residual add, a scale) can be applied to each finished accumulator before
the store, in the same kernel, instead of writing the result and reading it
back. Everything is read off the statements' index expressions, no operator
has its own rule:

* the producer's statement has a reduction, and its result has exactly one
  reader (at one port or several), and is not a graph output;
* that reader has no reduction, the same dtype, and reads the result at
  exactly the indices it writes its own target with (element-wise over it);
  its other inputs are read at any index expressions of its axes (a
  broadcast such as ``B[c]``, a same-shape tensor such as a residual);
* a row-major view in between (the reshapes around a stacked MatMul's
  GEMM) is moved below its element-wise reader first (:func:`sink_view`),
  which then reads the result itself;
* a result read by several element-wise operators that feed one another (a
  GELU written out, ``x * (erf(x / c) + 1)``, reads ``x`` in the Div and in
  the Mul) has them merged first (:func:`merge_workloads`: each one whose
  result has a single element-wise reader is substituted into it) until one
  reader is left, which is then fused as any other; merges that do not end
  in a fusion are undone;
* the reader's value, with the result's load replaced by the producer's
  :class:`~laytune.ops.Accumulator` (or by the producer's epilogue so far)
  and its axes renamed to the producer's through the target indices, is the
  fused statement's epilogue (:class:`~laytune.ops.Statement`).

The fused operator keeps the producer's name, reads the producer's inputs
and the reader's others (renamed where a name is taken) and writes the
reader's result; the producer's result is no longer a tensor. Its workload's
key is the producer's with the epilogue (``+epilogue[...]``; a key of buffer
shapes lists the epilogue's operands too), so records tuned for the fused
kernel are found by it, and :func:`laytune.ops.from_key` gives it back (while
the fused graph is held, and from the key's text alone where the producer's
operator is registered).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any

from laytune.exceptions import LaytuneError, PlanError
from laytune.layout import Expr, Var, substitute, to_text
from laytune.ops import (
    Accumulator,
    Load,
    Statement,
    Value,
    Workload,
    parse_key,
    replace_loads,
    statement_text,
    value_text,
)
from laytune.plan._graph import Graph, Op
from laytune.plan._sink import row_major_view, sink_view
from laytune.space import Candidate, local_buffer_name

__all__ = [
    "Fusion",
    "bare_candidate",
    "fuse_epilogues",
    "fuse_into",
    "fuse_workloads",
    "merge_workloads",
]


@dataclass(frozen=True)
class Fusion:
    """Operator ``op`` runs the epilogue of the element-wise operators
    ``absorbed`` (in the order they were folded in; ``kinds`` their workload
    names); ``removed`` are the tensors no longer stored; ``epilogue`` is the
    value applied to the accumulator ``acc``."""

    op: str
    absorbed: tuple[str, ...]
    kinds: tuple[str, ...]
    removed: tuple[str, ...]
    epilogue: str
    key: str

    def describe(self) -> str:
        folded = ", ".join(f"{a} ({k})" for a, k in zip(self.absorbed, self.kinds, strict=True))
        return f"{self.op} runs {folded} in its epilogue: store {self.epilogue}"


def bare_candidate(workload: Workload, candidate: Candidate) -> Candidate:
    """``candidate`` of a fused workload restricted to the bare operator
    ``workload``: the layouts of its own buffers and of their local tiles,
    its knobs, and the padding values of its own buffers; the epilogue's
    operands left out."""
    own = {b.name for b in workload.buffers}
    laid_out = own | {local_buffer_name(b) for b in own}
    return Candidate.make(
        {k: v for k, v in candidate.layout_map.items() if k in laid_out},
        candidate.knob_map,
        {k: v for k, v in candidate.pad_values if k in own},
    )


def _base_key(workload: Workload) -> str:
    """The key of ``workload`` without its epilogue."""
    key = workload.key
    after = workload.statement.epilogue
    if after is not None:
        key = key[: key.rindex("+epilogue[")]
    return key


def _redefine(
    like: Workload,
    stmt: Statement,
    inputs: dict[str, tuple[int, ...]],
    weights: tuple[str, ...],
    what: str,
    **options: Any,
) -> Workload:
    """The workload of ``stmt`` over ``like``'s axes, with its name and
    dtype; :class:`PlanError` (``what`` is refused, and why) if it is not
    one."""
    try:
        return Workload.define(
            like.name,
            statement_text(stmt, like.axis_names),
            {a.name: a.extent for a in like.axes},
            inputs,
            like.dtype,
            weights=weights,
            **options,
        )
    except LaytuneError as err:
        raise PlanError(f"{what} is refused: {err}") from None


def _fresh(base: str, taken: set[str]) -> str:
    """``base``, or ``base`` with the first counter not in ``taken``; taken now."""
    name, count = base, 1
    while name in taken:
        name, count = f"{base}{count}", count + 1
    taken.add(name)
    return name


def _check_element_wise(reader: Workload, ports: Collection[str], what: str) -> None:
    """:class:`PlanError` unless ``reader`` reads each of ``ports`` at the
    indices it writes its result at."""
    out = reader.output
    names = reader.axis_names
    for read in (reader.buffer(p) for p in sorted(ports)):
        if read.indices != out.indices:
            raise PlanError(
                f"{what}: it reads {read.name}[{', '.join(to_text(i, names) for i in read.indices)}]"
                f" where it writes {out.name}[{', '.join(to_text(i, names) for i in out.indices)}],"
                " not element for element"
            )


def _axes_through(own: Workload, indices: Sequence[Expr], names: Sequence[str]) -> list[Expr]:
    """The axes of the element-wise ``own`` as another workload's: the
    dimension ``d`` of ``own``'s result is indexed there by ``indices[d]``,
    an axis of ``names``. The statement language makes each result index an
    axis of its own, and an element-wise statement's every axis one of them."""
    axes: list[Expr] = [Var(0)] * len(own.axes)
    for mine, theirs in zip(own.output.indices, indices, strict=True):
        assert isinstance(mine, Var) and isinstance(theirs, Var)
        axes[mine.index] = Var(theirs.index, names[theirs.index])
    return axes


def fuse_workloads(
    producer: Workload, reader: Workload, port: str | Collection[str]
) -> tuple[Workload, dict[str, str], dict[str, str]]:
    """The workload that computes ``reader`` applied to ``producer``'s result,
    read at ``reader``'s input ``port`` (or at each of several ports that
    read it, as a GELU's two reads of its argument), and the names its other
    inputs have in it (reader's input -> fused input), and the inputs that
    repeat one of the producer's (fused input -> the producer's input it
    reads again: the result used twice repeats the epilogue's operands).
    Raises :class:`PlanError` saying why the reader is not an epilogue of
    the producer."""
    ports = {port} if isinstance(port, str) else set(port)
    what = f"{reader.name} cannot be fused into {producer.name}"
    if producer.reduction is None:
        raise PlanError(
            f"{what}: {producer.name} has no reduction whose accumulators it could take"
        )
    if reader.reduction is not None:
        raise PlanError(f"{what}: it reduces ({reader.reduction}), it is not element-wise")
    if reader.dtype != producer.dtype:
        raise PlanError(
            f"{what}: it computes in {reader.dtype}, {producer.name} in {producer.dtype}"
        )
    _check_element_wise(reader, ports, what)
    # the reader's axis k is the producer's axis indexing the same target dimension
    names = producer.axis_names
    axes = _axes_through(reader, producer.output.indices, names)
    taken = {b.name for b in producer.buffers}
    renamed = {d.name: _fresh(d.name, taken) for d in reader.inputs if d.name not in ports}
    before: Value = producer.statement.epilogue or Accumulator()
    shapes = {d.name: d.shape for d in producer.inputs}
    # a buffer is read once per statement: the epilogue so far, used again (a
    # GELU's two reads of its argument), reads its operands as new inputs
    # bound to the same tensors (fused input -> the input it repeats)
    again: dict[str, str] = {}

    def repeated(load: Load) -> Load:
        name = _fresh(load.buffer, taken)
        again[name] = load.buffer
        return Load(name, load.indices)

    uses = 0

    def moved(load: Load) -> Value:
        nonlocal uses
        if load.buffer in ports:
            uses += 1
            return before if uses == 1 else replace_loads(before, repeated)
        return Load(renamed[load.buffer], tuple(substitute(i, axes) for i in load.indices))

    stmt = producer.statement
    epilogue = replace_loads(reader.statement.value, moved)
    fused = Statement(stmt.target, stmt.target_indices, stmt.value, stmt.reduction, "", epilogue)
    inputs = dict(shapes)
    inputs.update({renamed[d.name]: d.shape for d in reader.inputs if d.name not in ports})
    inputs.update({name: shapes[first] for name, first in again.items()})
    weights = (
        *producer.weights,
        *(renamed[w] for w in reader.weights if w in renamed),
        *(name for name, first in again.items() if first in producer.weights),
    )
    base = _base_key(producer)
    try:
        _, params, _ = parse_key(base)
    except LaytuneError:
        params = None
    own = producer.table_arrays
    tables = {
        **own,
        **{renamed[t]: v for t, v in reader.table_arrays.items() if t in renamed},
        **{name: own[first] for name, first in again.items() if first in own},
    }
    workload = _redefine(
        producer,
        fused,
        inputs,
        weights,
        f"{what}: the fused statement",
        params=params,
        local_tiles=dict(producer.local_tiles),
        tables=tables,
    )
    return workload, renamed, again


def merge_workloads(
    first: Workload, reader: Workload, ports: Collection[str]
) -> tuple[Workload, dict[str, str], list[tuple[str, str]]]:
    """The element-wise workload that computes ``reader`` with ``first``'s
    value in place of its reads of ``first``'s result at ``ports``; the
    names the reader's other inputs have in it (reader's input -> merged
    input), and the merged inputs that read ``first``'s inputs (merged
    input -> ``first``'s input; once per port, since a buffer is read once
    per statement). Raises :class:`PlanError` saying why they do not merge."""
    what = f"{first.name} cannot be merged into {reader.name}"
    if first.reduction is not None or reader.reduction is not None:
        raise PlanError(f"{what}: only element-wise operators merge")
    if reader.dtype != first.dtype:
        raise PlanError(f"{what}: it computes in {first.dtype}, {reader.name} in {reader.dtype}")
    _check_element_wise(reader, ports, what)
    out = reader.output
    # first's axis k is the reader's axis that indexes the same result dimension
    axes = _axes_through(first, out.indices, reader.axis_names)
    taken = {d.name for d in reader.inputs if d.name not in ports} | {out.name}
    renamed = {d.name: d.name for d in reader.inputs if d.name not in ports}
    bound: list[tuple[str, str]] = []

    def first_value(load: Load) -> Value:
        if load.buffer not in ports:
            return load

        def moved(inner: Load) -> Load:
            name = _fresh(inner.buffer, taken)
            bound.append((name, inner.buffer))
            return Load(name, tuple(substitute(i, axes) for i in inner.indices))

        return replace_loads(first.statement.value, moved)

    stmt = reader.statement
    value = replace_loads(stmt.value, first_value)
    merged = Statement(stmt.target, stmt.target_indices, value, None, "")
    shapes = {d.name: d.shape for d in first.inputs}
    inputs = {d.name: d.shape for d in reader.inputs if d.name not in ports}
    inputs.update({name: shapes[theirs] for name, theirs in bound})
    weights = (
        *(w for w in reader.weights if w not in ports),
        *(name for name, theirs in bound if theirs in first.weights),
    )
    theirs_tables = first.table_arrays
    tables = {
        **{t: v for t, v in reader.table_arrays.items() if t not in ports},
        **{name: theirs_tables[t] for name, t in bound if t in theirs_tables},
    }
    workload = _redefine(
        reader, merged, inputs, weights, f"{what}: the merged statement", tables=tables
    )
    return workload, renamed, bound


def _merge_readers(g: Graph, tensor: str, keep: Collection[str]) -> tuple[Graph, list[str]] | None:
    """``g`` with element-wise readers of ``tensor`` merged into their own
    single element-wise reader until ``tensor`` has one reader (a GELU
    written out: ``x * (erf(x / c) + 1)`` reads ``x`` from two operators,
    one of them through a chain), and the names merged away; None when
    ``tensor`` has one reader already or the merges cannot bring it to one."""
    if len({r for r, _ in g.uses(tensor)}) < 2:
        return None
    merged: list[str] = []
    while len({r for r, _ in g.uses(tensor)}) > 1:
        for first_name in dict.fromkeys(r for r, _ in g.uses(tensor)):
            first = g.op(first_name)
            uses = g.uses(first.output)
            readers = {r for r, _ in uses}
            if first.output in g.outputs or len(readers) != 1 or readers & set(keep):
                continue
            (reader_name,) = readers
            reader = g.op(reader_name)
            ports = [port for _, port in uses]
            try:
                workload, renamed, bound = merge_workloads(first.workload, reader.workload, ports)
            except PlanError:
                continue
            wiring = dict(first.inputs)
            wired = tuple((renamed[p], t) for p, t in reader.inputs if p not in ports)
            wired += tuple((name, wiring[theirs]) for name, theirs in bound)
            op = Op(reader_name, workload, wired, reader.output)
            ops = [op if o.name == reader_name else o for o in g.ops if o.name != first_name]
            tensors = {k: t for k, t in g.tensors.items() if k != first.output}
            g = Graph(g.name, tensors, ops, list(g.outputs), dict(g.constants))
            merged.append(first_name)
            break
        else:
            return None
    return g, merged


def fuse_into(
    graph: Graph, name: str, keep: Collection[str] = ()
) -> tuple[Graph, Fusion | None, str]:
    """``graph`` with every element-wise operator that can be folded into
    operator ``name`` folded in, one after the other (a bias, then a ReLU),
    never one named in ``keep``; the fusion (None when nothing was folded)
    and why the folding stopped."""
    g = graph.snapshot()
    absorbed: list[str] = []
    kinds: list[str] = []
    removed: list[str] = []
    pending: list[str] = []  # readers merged into the next reader, fused with it
    unmerged = g
    why = ""
    while True:
        op = g.op(name)
        uses = g.uses(op.output)
        if op.output in g.outputs:
            why = f"{op.output} is a graph output"
            break
        readers = {reader for reader, _ in uses}
        # element-wise readers that merge into one (at most once a fusion)
        found = None if pending else _merge_readers(g, op.output, keep)
        if found is not None:
            unmerged, (g, pending) = g, found
            continue
        if len(readers) != 1:
            why = f"{op.output} has {len(readers)} readers"
            break
        (reader_name,) = readers
        ports = [port for _, port in uses]
        if reader_name in keep:
            why = f"{reader_name} is layout-critical itself"
            break
        reader = g.op(reader_name)
        if row_major_view(reader.workload) and g.uses(reader.output):
            found = None if pending else _merge_readers(g, reader.output, keep)
            if found is not None:  # the view's readers merge into one first
                unmerged, (g, pending) = g, found
                continue
            try:  # a reshape in between: its element-wise reader runs before it
                g = sink_view(g, reader_name)
            except PlanError as err:
                why = str(err)
                break
            continue
        try:
            workload, renamed, again = fuse_workloads(op.workload, reader.workload, ports)
        except PlanError as err:
            why = str(err)
            break
        wired = op.inputs + tuple((renamed[p], t) for p, t in reader.inputs if p not in ports)
        wired += tuple((name, dict(op.inputs)[first]) for name, first in again.items())
        fused = Op(name, workload, wired, reader.output)
        ops = [fused if o.name == reader_name else o for o in g.ops if o.name != name]
        tensors = {k: t for k, t in g.tensors.items() if k != op.output}
        tensors[reader.output] = replace(tensors[reader.output], producer=name)
        g = Graph(g.name, tensors, ops, list(g.outputs), dict(g.constants))
        for first in pending:  # the merged readers are fused too
            absorbed.append(first)
            kinds.append(graph.op(first).workload.name)
            removed.append(graph.op(first).output)
        pending = []
        absorbed.append(reader_name)
        kinds.append(reader.workload.name)
        removed.append(op.output)
    if pending:  # merged, but the merged reader did not fuse: as it was
        g = unmerged
    if not absorbed:
        return graph, None, why
    workload = g.op(name).workload
    assert workload.statement.epilogue is not None
    epilogue = value_text(workload.statement.epilogue, workload.axis_names)
    fusion = Fusion(name, tuple(absorbed), tuple(kinds), tuple(removed), epilogue, workload.key)
    return g, fusion, why


def fuse_epilogues(graph: Graph, producers: Collection[str]) -> tuple[Graph, tuple[Fusion, ...]]:
    """``graph`` with the element-wise readers of each of ``producers`` (in
    graph order) folded into it (see :func:`fuse_into`), and the fusions."""
    fusions = []
    for op in list(graph.ops):
        if op.name in producers:
            graph, fusion, _ = fuse_into(graph, op.name, producers)
            if fusion is not None:
                fusions.append(fusion)
    return graph, tuple(fusions)
