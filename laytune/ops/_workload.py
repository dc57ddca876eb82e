"""Workload: buffers, axes and one statement in index notation.

A workload is a loop nest over its axes: the *spatial* axes are those the
target buffer is indexed by (each output element is written by exactly one
spatial point), the *reduce* axes are the others, combined by the statement's
reduction (``+=`` or ``sum(...)``: sum; one-argument ``max(...)``: max).
Every buffer is accessed once, at index expressions of the axis variables
(``Var(k)`` is ``axes[k]``); an input index that can leave the buffer's shape
reads zero there. Only identity (logical, row-major) layouts are known here;
other layouts are the search space's business.

A workload satisfies ``laytune.space.WorkloadLike`` and the runners'
``VerifiableWorkload`` structurally.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import math
import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from laytune.dtypes import KERNEL_DTYPES
from laytune.exceptions import StatementError, UnknownNameError
from laytune.layout import Expr, Var, bounds, evaluate, to_text, variables
from laytune.ops._reductions import REDUCTIONS, reduction
from laytune.ops._registry import format_value, remember_defined
from laytune.ops._statement import (
    FUNCTIONS,
    VALUE_OPS,
    Accumulator,
    BinaryOp,
    Function,
    Literal,
    Load,
    Negate,
    Statement,
    Value,
    loads,
    parse_statement,
    statement_text,
    value_text,
)

__all__ = ["DTYPES", "Axis", "BufferDecl", "Workload"]

#: The element types a workload may have: those an emitter writes.
DTYPES = KERNEL_DTYPES

#: Elements made at a time by ``make_inputs`` and ``reference``: their
#: temporaries are a few such blocks, never a few copies of a tensor.
_REFERENCE_BLOCK = 1 << 21


@dataclass(frozen=True)
class Axis:
    """One loop of the nest: ``kind`` is "spatial" or "reduce"."""

    name: str
    extent: int
    kind: str


@dataclass(frozen=True)
class BufferDecl:
    """One global buffer: logical ``shape``, numpy ``dtype`` name, ``role``
    ("input" or "output") and the index expression of its access per dimension."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    role: str
    indices: tuple[Expr, ...]

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize

    def in_bounds(self, ranges: Sequence[tuple[int, int]]) -> bool:
        """Whether the access stays inside ``shape`` over the axis ``ranges``."""
        for index, extent in zip(self.indices, self.shape, strict=True):
            lo, hi = bounds(index, ranges)
            if lo < 0 or hi > extent - 1:
                return False
        return True


@dataclass(frozen=True)
class Workload:
    """A compute definition; build one with :meth:`define` or the constructors
    of :mod:`laytune.ops` (``matmul``, ``conv2d``, ...).

    ``key`` identifies operator, shapes and dtype, and is stable across
    processes. ``local_tiles`` names the 2-D inputs the lowering may stage
    in ``__local`` memory, with their tile shapes. ``weights`` names the
    inputs that are parameters of a model rather than data (a convolution's
    filters, a bias): they are converted into a layout once and reused by
    every call, so a tuning job prices them ``constant`` by default (see
    :class:`laytune.records.Boundary`). The key does not depend on them.

    ``tables`` are inputs whose values the statement itself fixes (a
    transform's matrix, a stencil's coefficients), as ``(name, shape,
    values)``: small weights the generator reads at indices it knows while
    writing a kernel, each read then a literal (a zero term dropped, a
    unit one an addition: :meth:`table`). ``make_inputs`` and ``reference``
    use their values, whatever array a caller passes.
    """

    name: str
    axes: tuple[Axis, ...]
    buffers: tuple[BufferDecl, ...]
    statement: Statement
    dtype: str
    key: str
    local_tiles: tuple[tuple[str, tuple[int, ...]], ...] = field(default=())
    weights: tuple[str, ...] = field(default=(), compare=False)
    tables: tuple[tuple[str, tuple[int, ...], tuple[float, ...]], ...] = ()

    # -- construction ---------------------------------------------------------
    @classmethod
    def define(
        cls,
        name: str,
        statement: str,
        axes: Mapping[str, int],
        inputs: Mapping[str, Sequence[int]],
        dtype: str = "float32",
        params: Mapping[str, Any] | None = None,
        local_tiles: Mapping[str, Sequence[int]] | None = None,
        weights: Sequence[str] = (),
        tables: Mapping[str, Any] | None = None,
    ) -> Workload:
        """``Workload.define("matmul", "C[i, j] += A[i, k] * B[k, j]",
        axes={"i": M, "j": N, "k": K}, inputs={"A": (M, K), "B": (K, N)})``.

        ``axes`` in loop-nest order (the last spatial axis is the innermost);
        the output's shape follows from the extents of its index axes.
        ``params`` (with ``dtype``) make the key; without them the key lists
        the buffer shapes, then ``#`` and a digest of the rest of the
        definition (the statement as parsed, the axes' extents, the weights
        and local tiles), so two statements over the same shapes never share
        records: ``rows(X[16, 48],Y[16];float32)#1c0e5a7f``. A statement with
        an epilogue (``Y[i, j] = max(sum(...) + B[j], 0.0)``) has it in its key too:
        ``+epilogue[max((acc + B[j]), 0.0)]``. ``weights`` names the inputs
        that are model parameters (see the class docstring). ``tables``
        maps inputs to the arrays of values the statement fixes (at most
        ``TABLE_ELEMENTS`` each; their shapes need not be in ``inputs``; they
        are weights): ``tables={"K": np.array([[0, 1, 0], [1, -4, 1], [0, 1,
        0]])}`` for a Laplacian stencil ``Y[i, j] += K[a, b] * X[i + a, j + b]``.
        """
        if dtype not in DTYPES:
            raise StatementError(f"dtype {dtype!r} is not supported (one of {DTYPES})")
        names = tuple(axes)
        if not names:
            raise StatementError(f"workload {name!r} has no axes")
        for axis_name, extent in axes.items():
            if isinstance(extent, bool) or not isinstance(extent, int) or extent <= 0:
                raise StatementError(
                    f"axis {axis_name!r} needs a positive int extent, got {extent!r}"
                )
        stmt = parse_statement(statement, names)
        fixed = _tables(tables or {}, inputs)
        inputs = {**inputs, **{t: shape for t, shape, _ in fixed}}
        weights = tuple(dict.fromkeys([*weights, *(t for t, _, _ in fixed)]))
        spatial: list[int] = []
        for index in stmt.target_indices:
            if not isinstance(index, Var) or index.index in spatial:
                raise StatementError(
                    f"the target {stmt.target}[...] must be indexed by distinct axis names, "
                    f"got {to_text(index, names)} in {statement!r}"
                )
            spatial.append(index.index)
        kinds = ["spatial" if k in spatial else "reduce" for k in range(len(names))]
        has_reduce = "reduce" in kinds
        if has_reduce and stmt.reduction is None:
            unused = [names[k] for k in range(len(names)) if kinds[k] == "reduce"]
            raise StatementError(
                f"axes {unused} do not index the target {stmt.target}: write '+=' or "
                f"{', '.join(f'{r}(...)' for r in REDUCTIONS)} to reduce over them "
                f"({statement!r})"
            )
        if stmt.reduction is not None and not has_reduce:
            raise StatementError(f"{statement!r} reduces but every axis indexes the target")
        axis_list = tuple(Axis(n, int(axes[n]), kind) for n, kind in zip(names, kinds, strict=True))
        buffers: list[BufferDecl] = []
        seen: dict[str, tuple[Expr, ...]] = {}
        after = [] if stmt.epilogue is None else loads(stmt.epilogue)
        for load in after:
            for index in load.indices:
                outside = sorted(names[k] for k in variables(index) if kinds[k] == "reduce")
                if outside:
                    raise StatementError(
                        f"{load.buffer}[...] is read after the reduction but indexed by the "
                        f"reduce axes {outside} in {statement!r}"
                    )
        for load in loads(stmt.value) + after:
            if load.buffer in seen:  # a second read of the same element is the same value
                if seen[load.buffer] == load.indices:
                    continue
                first, second = (
                    ", ".join(to_text(i, names) for i in indices)
                    for indices in (seen[load.buffer], load.indices)
                )
                raise StatementError(
                    f"buffer {load.buffer!r} is read at two different indices, [{first}] and "
                    f"[{second}], in {statement!r}: pass it as two inputs, one per read"
                )
            if load.buffer == stmt.target:
                raise StatementError(f"{stmt.target!r} is both read and written in {statement!r}")
            seen[load.buffer] = load.indices
            if load.buffer not in inputs:
                raise StatementError(
                    f"no shape given for input {load.buffer!r} (inputs: {sorted(inputs)})"
                )
            shape = tuple(int(s) for s in inputs[load.buffer])
            if len(shape) != len(load.indices):
                raise StatementError(
                    f"{load.buffer} has shape {shape} but is read with {len(load.indices)} indices"
                )
            buffers.append(BufferDecl(load.buffer, shape, dtype, "input", load.indices))
        extra = set(inputs) - set(seen)
        if extra:
            raise StatementError(f"inputs {sorted(extra)} are not read by {statement!r}")
        out_shape = tuple(axis_list[k].extent for k in spatial)
        buffers.append(BufferDecl(stmt.target, out_shape, dtype, "output", stmt.target_indices))
        if params is None:
            shapes = ",".join(f"{b.name}{list(b.shape)}" for b in buffers)
            key = f"{name}({shapes};{dtype})#{_digest(stmt, axes, weights, local_tiles, fixed)}"
        else:
            args = ",".join(f"{k}={format_value(v)}" for k, v in params.items())
            key = f"{name}({args};{dtype})"
        if stmt.epilogue is not None:
            key += epilogue_key(stmt.epilogue, names)
        tiles = tuple(
            sorted((str(b), tuple(int(t) for t in s)) for b, s in (local_tiles or {}).items())
        )
        for tile_buffer, _ in tiles:
            if tile_buffer not in seen:
                raise StatementError(f"local tile for {tile_buffer!r}, which is not an input")
        strange = sorted(set(weights) - set(seen))
        if strange:
            raise StatementError(f"weights {strange} are not inputs of {statement!r}")
        workload = cls(
            name, axis_list, tuple(buffers), stmt, dtype, key, tiles, tuple(sorted(weights)), fixed
        )
        remember_defined(workload)
        return workload

    # -- queries --------------------------------------------------------------
    @property
    def table_arrays(self) -> dict[str, np.ndarray]:
        """Every table's values by name (float64), as ``define`` takes them."""
        return {name: self.table(name) for name, _, _ in self.tables}  # type: ignore[misc]

    def table(self, name: str) -> np.ndarray | None:
        """The values of the table ``name`` (float64, its shape), None when
        ``name`` is no table of this workload."""
        for table, shape, values in self.tables:
            if table == name:
                return np.array(values, dtype=np.float64).reshape(shape)
        return None

    @property
    def reduction(self) -> str | None:
        return self.statement.reduction

    @property
    def axis_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.axes)

    @property
    def spatial_axes(self) -> tuple[int, ...]:
        return tuple(k for k, a in enumerate(self.axes) if a.kind == "spatial")

    @property
    def reduce_axes(self) -> tuple[int, ...]:
        return tuple(k for k, a in enumerate(self.axes) if a.kind == "reduce")

    @property
    def inputs(self) -> tuple[BufferDecl, ...]:
        return tuple(b for b in self.buffers if b.role == "input")

    @property
    def output(self) -> BufferDecl:
        return next(b for b in self.buffers if b.role == "output")

    def buffer(self, name: str) -> BufferDecl:
        for b in self.buffers:
            if b.name == name:
                return b
        raise UnknownNameError(f"workload {self.name!r} has no buffer {name!r}")

    @property
    def ranges(self) -> list[tuple[int, int]]:
        return [(0, a.extent - 1) for a in self.axes]

    @property
    def reduction_length(self) -> int:
        """Terms combined into each output element (1 when element-wise)."""
        return math.prod(self.axes[k].extent for k in self.reduce_axes)

    @property
    def points(self) -> int:
        return math.prod(a.extent for a in self.axes)

    @property
    def flops(self) -> int:
        """Arithmetic operations: those of the value per point of the nest,
        plus one per combined term for a reduction (a multiply-add is two)."""
        per_point = _count_ops(self.statement.value) + (1 if self.reduction else 0)
        after = self.statement.epilogue
        per_output = 0 if after is None else _count_ops(after)
        return per_point * self.points + per_output * self.output.size

    @property
    def bytes(self) -> int:
        """Compulsory traffic: every buffer read or written once."""
        return sum(b.nbytes for b in self.buffers)

    def describe(self) -> str:
        axes = ", ".join(
            f"{a.name}:{a.extent}{'r' if a.kind == 'reduce' else ''}" for a in self.axes
        )
        return f"{self.statement.text}  over {axes}  ({self.dtype})"

    # -- data ------------------------------------------------------------------
    def make_inputs(self, seed: int) -> dict[str, np.ndarray]:
        """Logical arrays of every input, uniform in [-1, 1); the same for the same seed.

        The float64 draws are made a block at a time (one stream, so the values
        are those of one draw of the whole shape), never a float64 copy of a
        whole input."""
        rng = np.random.default_rng(seed)
        made = {}
        for b in self.inputs:
            array = np.empty(b.shape, dtype=b.dtype)
            flat = array.reshape(-1)
            for start in range(0, flat.size, _REFERENCE_BLOCK):
                stop = min(start + _REFERENCE_BLOCK, flat.size)
                flat[start:stop] = rng.uniform(-1.0, 1.0, size=stop - start)
            made[b.name] = array
        for name, shape, values in self.tables:
            made[name] = np.array(values, dtype=self.buffer(name).dtype).reshape(shape)
        return made

    def _contraction(self) -> tuple[str, tuple[str, ...]] | None:
        """The statement as ``np.einsum(spec, *buffers)`` when it is a sum of a
        product of loads, each index one axis variable over the buffer's whole
        extent, no axis twice in one load, and every reduce axis read by some
        load (matmul, a sum over axes); None otherwise (windows, offsets,
        literals, max, an output axis no load reads). einsum hands such
        products to BLAS, where the general path below makes one pass over
        the output per reduce point."""
        if self.reduction != "sum" or len(self.axes) > len(string.ascii_letters):
            return None
        factors: list[Load] = []
        pending: list[Value] = [self.statement.value]
        while pending:
            value = pending.pop()
            if isinstance(value, BinaryOp) and value.op == "*":
                pending += [value.rhs, value.lhs]
            elif isinstance(value, Load):
                factors.append(value)
            else:
                return None

        def letters(indices: Sequence[Expr], shape: Sequence[int]) -> str | None:
            if not all(isinstance(i, Var) for i in indices):
                return None
            axes = [i.index for i in indices]  # type: ignore[union-attr]
            if len(set(axes)) != len(axes):
                return None
            if any(self.axes[k].extent != e for k, e in zip(axes, shape, strict=True)):
                return None
            return "".join(string.ascii_letters[k] for k in axes)

        operands = [letters(f.indices, self.buffer(f.buffer).shape) for f in factors]
        target = letters(self.output.indices, self.output.shape)
        if target is None or any(o is None for o in operands):
            return None
        read = set("".join(operands))  # type: ignore[arg-type]
        if any(string.ascii_letters[k] not in read for k in self.reduce_axes):
            return None
        if not set(target) <= read:  # an output axis no input reads: broadcast, not einsum's
            return None
        return f"{','.join(operands)}->{target}", tuple(f.buffer for f in factors)  # type: ignore[arg-type]

    def reference(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """numpy result of the statement (accumulated in float64); a sum of
        products of whole axes is ``np.einsum`` (BLAS), anything else is
        evaluated point by point of the reduce axes.

        The output is made a block of ``_REFERENCE_BLOCK`` elements at a time
        (:func:`_blocks`), and each block reads only the parts of the inputs
        it needs in float64: the float64 temporaries are a few blocks, never a
        float64 copy of an input or of the output."""
        out = self.output
        arrays = {name: np.asarray(a) for name, a in inputs.items()}
        for name, shape, values in self.tables:
            arrays[name] = np.array(values, dtype=np.float64).reshape(shape)
        for b in self.inputs:
            if arrays[b.name].shape != b.shape:
                raise StatementError(
                    f"input {b.name} has shape {arrays[b.name].shape}, expected {b.shape}"
                )
        result = np.empty(out.shape, dtype=out.dtype)
        contraction = self._contraction()
        for block in _blocks(out.shape, _REFERENCE_BLOCK):
            # spatial axis k as a broadcast grid over the block's dimensions
            grid: dict[int, np.ndarray] = {}
            for d, index in enumerate(out.indices):
                shape = [1] * len(out.shape)
                shape[d] = block[d].stop - block[d].start
                grid[index.index] = np.arange(  # type: ignore[union-attr]
                    block[d].start, block[d].stop, dtype=np.int64
                ).reshape(shape)
            if contraction is not None:
                acc = self._contract(*contraction, block, arrays)
            else:
                acc = self._reduce(grid, arrays, tuple(s.stop - s.start for s in block))
            result[block] = self._epilogue(acc, grid, arrays)
        return {out.name: result}

    def _contract(
        self,
        spec: str,
        names: Sequence[str],
        block: tuple[slice, ...],
        arrays: Mapping[str, np.ndarray],
    ) -> np.ndarray:
        """The contraction ``spec`` over the output ``block``, in float64, its
        first reduce axis taken a run at a time so that every operand's
        float64 part stays near ``_REFERENCE_BLOCK`` elements."""
        operands, target = spec.split("->")
        letters = operands.split(",")
        place = {letter: block[d] for d, letter in enumerate(target)}
        summed = [
            letter for letter in dict.fromkeys(operands.replace(",", "")) if letter not in target
        ]
        extent = {
            letter: size
            for subscripts, name in zip(letters, names, strict=True)
            for letter, size in zip(subscripts, arrays[name].shape, strict=True)
        }
        run_axis = summed[0] if summed else None
        step = 1
        if run_axis is not None:
            widest = max(
                math.prod(
                    (place[x].stop - place[x].start) if x in place else extent[x]
                    for x in subscripts
                    if x != run_axis
                )
                for subscripts in letters
            )
            step = max(1, _REFERENCE_BLOCK // max(1, widest))
        acc = np.zeros(tuple(s.stop - s.start for s in block), dtype=np.float64)
        runs = range(0, extent[run_axis], step) if run_axis is not None else (0,)
        for start in runs:
            if run_axis is not None:
                place[run_axis] = slice(start, min(start + step, extent[run_axis]))
            parts = [
                np.asarray(
                    arrays[name][tuple(place.get(x, slice(None)) for x in subscripts)],
                    dtype=np.float64,
                )
                for subscripts, name in zip(letters, names, strict=True)
            ]
            acc += np.einsum(spec, *parts, optimize=True)
        return acc

    def _reduce(
        self,
        grid: Mapping[int, np.ndarray],
        arrays: Mapping[str, np.ndarray],
        shape: tuple[int, ...],
    ) -> np.ndarray:
        """The reduction over one output block (``grid`` its spatial indices,
        ``shape`` its shape), one reduce point at a time, in float64."""
        combine = reduction(self.reduction)
        acc: np.ndarray | None = None
        for combo in itertools.product(*(range(self.axes[k].extent) for k in self.reduce_axes)):
            args: list[Any] = [0] * len(self.axes)
            for k in self.spatial_axes:
                args[k] = grid[k]
            for k, v in zip(self.reduce_axes, combo, strict=True):
                args[k] = v
            term = np.broadcast_to(_eval_value(self.statement.value, args, arrays, self), shape)
            if acc is None or combine is None:
                acc = np.array(term, dtype=np.float64)
            else:
                combine.numpy(acc, term, out=acc)
        assert acc is not None
        return acc

    def _epilogue(
        self, acc: np.ndarray, grid: Mapping[int, np.ndarray], arrays: Mapping[str, np.ndarray]
    ) -> np.ndarray:
        """The statement's epilogue applied to every finished reduction ``acc``."""
        after = self.statement.epilogue
        if after is None:
            return acc
        args: list[Any] = [grid.get(k, 0) for k in range(len(self.axes))]
        value = _eval_value(after, args, arrays, self, acc)
        return np.array(np.broadcast_to(value, acc.shape), dtype=np.float64)


def _blocks(shape: Sequence[int], size: int) -> Iterable[tuple[slice, ...]]:
    """Blocks that tile an array of ``shape`` in row-major order, one slice per
    dimension, each of at most ``size`` elements (or one row of the innermost
    dimension where a row alone is more): whole trailing dimensions, a run of
    the next one, and single indices of the leading ones."""
    split, inner = len(shape), 1
    while split > 0 and inner * shape[split - 1] <= size:
        split -= 1
        inner *= shape[split]
    if split == 0:
        yield tuple(slice(0, n) for n in shape)
        return
    split -= 1  # the dimension taken a run at a time
    step = max(1, size // inner)
    rest = tuple(slice(0, n) for n in shape[split + 1 :])
    for prefix in itertools.product(*(range(n) for n in shape[:split])):
        lead = tuple(slice(i, i + 1) for i in prefix)
        for start in range(0, shape[split], step):
            yield (*lead, slice(start, min(start + step, shape[split])), *rest)


def _count_ops(value: Value) -> int:
    if isinstance(value, BinaryOp):
        return 1 + _count_ops(value.lhs) + _count_ops(value.rhs)
    if isinstance(value, (Negate, Function)):
        return 1 + _count_ops(value.operand)
    return 0


def epilogue_key(epilogue: Value, names: Sequence[str]) -> str:
    """The part of a workload key that names its epilogue."""
    return f"+epilogue[{value_text(epilogue, names)}]"


def _eval_value(
    value: Value,
    args: list[Any],
    arrays: Mapping[str, np.ndarray],
    workload: Workload,
    acc: Any = None,
) -> Any:
    if isinstance(value, Accumulator):
        return acc
    if isinstance(value, Literal):
        return value.value
    if isinstance(value, Negate):
        return -_eval_value(value.operand, args, arrays, workload, acc)
    if isinstance(value, Function):
        return FUNCTIONS[value.name].compute(
            _eval_value(value.operand, args, arrays, workload, acc)
        )
    if isinstance(value, Load):
        decl = workload.buffer(value.buffer)
        data = arrays[value.buffer]
        idx = [np.asarray(evaluate(i, args), dtype=np.int64) for i in decl.indices]
        idx = list(np.broadcast_arrays(*idx))
        inside = np.ones(idx[0].shape, dtype=bool)
        for d, extent in enumerate(decl.shape):
            inside &= (idx[d] >= 0) & (idx[d] < extent)
        # float64 from here on, whatever the input's dtype: the reference's precision
        if inside.all():
            return np.asarray(data[tuple(idx)], dtype=np.float64)
        clipped = tuple(np.clip(i, 0, e - 1) for i, e in zip(idx, decl.shape, strict=True))
        return np.where(inside, np.asarray(data[clipped], dtype=np.float64), 0.0)
    lhs = _eval_value(value.lhs, args, arrays, workload, acc)
    rhs = _eval_value(value.rhs, args, arrays, workload, acc)
    return VALUE_OPS[value.op].compute(lhs, rhs)


def _digest(
    stmt: Statement,
    axes: Mapping[str, int],
    weights: Sequence[str],
    local_tiles: Mapping[str, Sequence[int]] | None,
    tables: Sequence[tuple[str, tuple[int, ...], tuple[float, ...]]] = (),
) -> str:
    """Eight hex digits of what a key of buffer shapes leaves out: the
    statement without its epilogue (a key spells that out after the digest,
    ``+epilogue[...]``), written as the parser reads it back (spacing and
    parentheses the user chose do not count), the axes in order with their
    extents, the weights, the local tiles and the tables' values."""
    unfused = dataclasses.replace(stmt, epilogue=None)
    names = tuple(axes)
    text = "|".join(
        (
            statement_text(unfused, names),
            ",".join(f"{n}={int(e)}" for n, e in axes.items()),
            ",".join(sorted(weights)),
            ",".join(f"{b}={list(t)}" for b, t in sorted((local_tiles or {}).items())),
            *(f"{t}{list(shape)}={list(values)}" for t, shape, values in tables),
        )
    )
    return hashlib.sha256(text.encode()).hexdigest()[:8]


#: The most elements a table may have: its values are written into kernels.
TABLE_ELEMENTS = 4096


def _tables(
    tables: Mapping[str, Any], inputs: Mapping[str, Sequence[int]]
) -> tuple[tuple[str, tuple[int, ...], tuple[float, ...]], ...]:
    """``tables`` as the workload keeps them, sorted by name: finite values
    of at most :data:`TABLE_ELEMENTS`, shaped as ``inputs`` says where it names them."""
    out = []
    for name, given in sorted(tables.items()):
        try:
            array = np.asarray(given, dtype=np.float64)
        except (TypeError, ValueError) as err:
            raise StatementError(f"table {name!r} is not an array of numbers: {err}") from None
        if array.ndim == 0 or array.size > TABLE_ELEMENTS:
            raise StatementError(
                f"table {name!r} of shape {array.shape}: a table has 1 to "
                f"{TABLE_ELEMENTS} elements and at least one axis"
            )
        if not np.isfinite(array).all():
            raise StatementError(f"table {name!r} holds values that are not finite")
        if name in inputs and tuple(int(s) for s in inputs[name]) != array.shape:
            raise StatementError(
                f"table {name!r} has shape {array.shape} but inputs gives {tuple(inputs[name])}"
            )
        out.append(
            (str(name), tuple(int(s) for s in array.shape), tuple(array.reshape(-1).tolist()))
        )
    return tuple(out)
