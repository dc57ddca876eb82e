"""The operand side of the compute kernel: loads, stores and the index tests
that guard them.

Every load and store goes through its buffer's layout
(:class:`~laytune.codegen._emit.BufferAccess`); an index that can leave the
buffer's logical shape reads zero there (convolution padding, the tail of an
overshooting block) and a store there is skipped, unless the loop runs over
padding on purpose. An element the register block reads is loaded once per
reduce step: ``vloadN`` along the vector axis, a scalar broadcast otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from laytune.codegen._copy import block_read
from laytune.codegen._emit import BufferAccess, Scope, c_float, compute_ctype, paren
from laytune.codegen._grid import GridCode
from laytune.codegen._nest import Nest, access_width
from laytune.codegen._stage import tile_index
from laytune.layout import Expr, Var, bounds, substitute, variables
from laytune.ops import VALUE_OPS, Accumulator, BinaryOp, Function, Literal, Load, Negate, Value
from laytune.space import VectorAccess, stores_lane_by_lane, vector_dim

__all__ = [
    "ACCUMULATOR",
    "IndexTest",
    "Writer",
    "buffer_accesses",
    "guarded_load",
    "index_tests",
    "inside",
    "lanes_apart",
    "load_text",
    "output_index",
    "point_values",
    "store_tests",
    "store_text",
    "table_entry",
    "value_text",
    "widen",
]


@dataclass
class Writer:
    """What the walk shares: the nest, the kernel's variables, the buffer
    accesses, the prologue's values. Only ``scope`` grows during the walk;
    ``proven`` is set while the guarded reduce loops are written."""

    nest: Nest
    scope: Scope
    accesses: dict[str, BufferAccess]
    tiles: dict[str, BufferAccess]
    grid: GridCode
    lane: Var | None = None  # the sub-group lane of block reads (``subgroup``)
    # tests the reduce loops' bounds already hold (see _kernel._window_bounds)
    proven: frozenset[IndexTest] = frozenset()
    # spatial axes whose overshooting last block made a load tested
    overshot: set[int] = field(default_factory=set)
    # the workload's tables (Workload.tables): their reads at known indices are literals
    tables: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def ctype(self) -> str:
        """The type the kernel's values and accumulators are declared in."""
        return compute_ctype(self.nest.workload.dtype)

    def vtype(self, width: int) -> str:
        return f"{self.ctype}{width}" if width > 1 else self.ctype


def buffer_accesses(nest: Nest) -> dict[str, BufferAccess]:
    out = {}
    for d in nest.workload.buffers:
        layout = nest.layouts[d.name]
        shape = None
        if d.name in nest.grown:
            grown = list(layout.shape)
            for dim, extent in nest.grown[d.name].items():
                grown[dim] = extent
            shape = tuple(grown)
        out[d.name] = BufferAccess(d.name, d.name, layout, d.dtype, nest.memory[d.name], shape)
    return out


# -- values at one point of the register block ----------------------------------


def table_entry(w: Writer, name: str, values: list[Expr]) -> float | None:
    """The element of the table ``name`` a scalar read at the point of
    ``values`` reads, where every index is a constant there (a spelled-out
    reduce step, a block's offset along an axis read modulo the block);
    None otherwise, or when ``name`` is no table."""
    table = w.tables.get(name)
    if table is None or access_width(w.nest, name) != 1 or name in w.nest.block_reads:
        return None
    at = []
    for e in w.nest.workload.buffer(name).indices:
        lo, hi = w.scope.bounds(w.scope.simplify(substitute(e, values)))
        if lo != hi:
            return None
        at.append(lo)
    if any(not 0 <= i < n for i, n in zip(at, table.shape, strict=True)):
        return 0.0  # outside the table the statement reads zero
    return float(table[tuple(at)])


def point_values(
    w: Writer, offsets: Sequence[int], reduce_values: Mapping[int, Expr]
) -> list[Expr]:
    """The value of every workload axis at the block's point ``offsets``."""
    out: list[Expr] = []
    for k, axis in enumerate(w.nest.workload.axes):
        if axis.kind == "spatial":
            out.append(w.grid.base[k] + offsets[k])
        else:
            out.append(reduce_values.get(k, Var(k)))
    return out


@dataclass(frozen=True)
class IndexTest:
    """``expr >= 0`` (``lower``) or ``expr < bound``: an index inside its extent."""

    expr: Expr
    lower: bool
    bound: int = 0

    def c(self, scope: Scope) -> str:
        text = paren(scope.c(self.expr))
        return f"{text} >= 0" if self.lower else f"{text} < {self.bound}"


def index_tests(scope: Scope, e: Expr, extent: int) -> list[IndexTest]:
    lo, hi = scope.bounds(e)
    tests = []
    if lo < 0:
        tests.append(IndexTest(e, True))
    if hi > extent - 1:
        tests.append(IndexTest(e, False, extent))
    return tests


def load_text(
    w: Writer, name: str, values: list[Expr], offsets: Sequence[int], width: int | None = None
) -> tuple[str, list[IndexTest], int]:
    """The load of ``name`` at one point of the block (unguarded), the tests
    under which it reads inside the buffer (outside, the statement reads
    zero), and its vector width: the tile's along the vector axis, or
    ``width`` elements along the buffer's physical order (a transposed
    input's read along the transpose axis)."""
    nest, scope = w.nest, w.scope
    decl = nest.workload.buffer(name)
    across = width is not None
    width = access_width(nest, name) if width is None else width
    if name in w.tiles and not across:
        plan = nest.staging
        assert plan is not None
        staged = next(s for s in plan.inputs if s.buffer == name)
        index = tile_index(nest, w.grid, staged, offsets)
        return w.tiles[name].load(index, scope, width), [], width
    idx = [scope.simplify(substitute(e, values)) for e in decl.indices]
    access = w.accesses[name]
    text = access.load(idx, scope, width)
    grown = nest.grown.get(name, {})
    ranges = nest.workload.ranges
    tests: list[IndexTest] = []
    overshoot: list[IndexTest] = []
    overshooting: set[int] = set()
    for d, (e, logical, extent) in enumerate(zip(idx, decl.indices, decl.shape, strict=True)):
        if d in grown:
            continue  # runs into padding on purpose
        logical_lo, logical_hi = bounds(logical, ranges)
        if logical_lo < 0 or logical_hi > extent - 1:
            tests += index_tests(scope, e, extent)  # the statement reads zero there
        elif found := index_tests(scope, e, extent):  # an overshooting block's points
            overshoot += found
            overshooting |= variables(logical)
    if overshoot and not inside(access, idx, scope):
        tests += overshoot  # their reads would leave the buffer's memory
        w.overshot |= overshooting
    if name in nest.block_reads and not across:
        # one block read per sub-group from lane 0's element; the tests (an
        # overshooting block of another axis) are the same for every lane
        assert w.lane is not None
        inner = nest.grid[0].axes[0]
        first = [*values[:inner], values[inner] - w.lane, *values[inner + 1 :]]
        lane0 = [scope.simplify(substitute(e, first)) for e in decl.indices]
        return block_read(access, lane0, scope), tests, 1
    return text, tests, width


def guarded_load(w: Writer, text: str, tests: Sequence[IndexTest], width: int, dtype: str) -> str:
    tests = [t for t in tests if t not in w.proven]
    if not tests:
        return text
    zero = c_float(0.0, dtype)
    if width > 1:
        zero = f"({w.vtype(width)})({zero})"
    return f"({' && '.join(t.c(w.scope) for t in tests)}) ? {text} : {zero}"


def inside(access: BufferAccess, idx: Sequence[Expr], scope: Scope) -> bool:
    """Whether every element read at ``idx`` lies in the buffer's physical
    memory (padding included), whatever values the indices take."""
    if access.memory != "global":
        return False
    lo, hi = scope.bounds(access.flat_offset(idx))
    return lo >= 0 and hi <= access.layout.physical_size - 1


#: The key of ``value_text``'s names under which an epilogue's accumulator is.
ACCUMULATOR = ""


def value_text(w: Writer, v: Value, names: Mapping[str, tuple[str, int]]) -> tuple[str, int]:
    """C text of ``v`` and its vector width (an epilogue's
    :class:`~laytune.ops.Accumulator` is ``names[ACCUMULATOR]``)."""
    if isinstance(v, Accumulator):
        return names[ACCUMULATOR]
    if isinstance(v, Load):
        return names[v.buffer]
    if isinstance(v, Literal):
        return c_float(v.value, w.nest.workload.dtype), 1
    if isinstance(v, Negate):
        text, width = value_text(w, v.operand, names)
        return f"-({text})", width
    if isinstance(v, Function):  # exp, sqrt, rsqrt, tanh, erf: OpenCL C built-ins of any width
        text, width = value_text(w, v.operand, names)
        return f"{v.name}({text})", width
    assert isinstance(v, BinaryOp)
    a, aw = value_text(w, v.lhs, names)
    b, bw = value_text(w, v.rhs, names)
    op = VALUE_OPS[v.op]
    if op.function is None:
        return op.text(a, b), max(aw, bw)
    if bw > aw:  # max(gentype, scalar) exists, max(scalar, gentype) does not
        a, b = b, a
    return f"{op.function}({a}, {b})", max(aw, bw)  # not fmax: see ops.Reduction


def widen(w: Writer, text: str, width: int, to: int) -> str:
    return text if width == to else f"({w.vtype(to)})({text})"


def output_index(w: Writer, values: list[Expr]) -> list[Expr]:
    """The output's logical indices at the point whose axis values are ``values``."""
    return [w.scope.simplify(substitute(e, values)) for e in w.nest.workload.output.indices]


def lanes_apart(w: Writer, width: int) -> int | None:
    """The output's dimension along which a vector of ``width`` is stored
    lane by lane, its layout not holding the lanes side by side
    (``stores_lane_by_lane``); None where vectors are stored whole."""
    out = w.nest.workload.output
    axis = w.nest.tile.vector_axis
    dim = None if axis is None or width == 1 else vector_dim(out, axis)
    if isinstance(dim, int) and stores_lane_by_lane(
        out,
        w.accesses[out.name].layout,
        VectorAccess(dim, width),
        w.nest.workload.axes[axis].extent,
    ):
        return dim
    return None


def store_tests(w: Writer, idx: Sequence[Expr]) -> list[str]:
    """The tests of a store at the output's indices ``idx``: one per index a
    block that overshoots its extent can take past the end."""
    scope = w.scope
    out = w.nest.workload.output
    return [
        f"{paren(scope.c(e))} < {extent}"
        for e, extent in zip(idx, out.shape, strict=True)
        if scope.bounds(e)[1] > extent - 1
    ]


def store_text(w: Writer, values: list[Expr], value: str, width: int) -> str:
    """The store of one point's value, tested where the block overshoots; a
    vector whose lanes the output's layout does not hold side by side is
    stored lane by lane (``LayoutFacts.lanes``)."""
    scope = w.scope
    idx = output_index(w, values)
    nontemporal = w.nest.knobs.get("store") == "nontemporal"
    access = w.accesses[w.nest.workload.output.name]
    dim = lanes_apart(w, width)
    if dim is not None:
        lanes = [
            access.store(
                [scope.simplify(e + lane) if d == dim else e for d, e in enumerate(idx)],
                f"lanes.s{lane:x}",
                scope,
            )
            for lane in range(width)
        ]
        store = "{ " + " ".join([f"const {w.vtype(width)} lanes = {value};", *lanes]) + " }"
    else:
        store = access.store(idx, value, scope, width, nontemporal)
    tests = store_tests(w, idx)
    if tests:
        return f"if ({' && '.join(tests)}) {store}"
    return store


# -- reduce loops -------------------------------------------------------------
