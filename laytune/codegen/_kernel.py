"""Emitting the compute kernel: a walk over the planned :class:`~._nest.Nest`.

The kernel, top to bottom::

    prologue        work-item ids -> first point of the register block (._grid)
    accumulators    one per point of the block (a floatN per vector)
    reduce loops    ._nest.ReduceLoop, outermost first (staged: ._stage)
      body          every operand element the block reads, loaded once
                    (vloadN along the vector axis, a scalar broadcast
                    otherwise), then one fma/combine per point
    stores          one per point, tested where a block overshoots

Each load and store goes through its buffer's layout
(:class:`~laytune.codegen._emit.BufferAccess`); an index that can leave the
buffer's logical shape reads zero there (convolution padding, the tail of an
overshooting block), unless the loop runs over padding on purpose.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from laytune.codegen._emit import BufferAccess, Scope, c_float, ctype_of, paren
from laytune.codegen._grid import GridCode, emit_grid
from laytune.codegen._nest import Nest, ReduceLoop, access_width
from laytune.codegen._program import ArgRef, Launch
from laytune.codegen._source import indent
from laytune.codegen._stage import local_accesses, staged_loops, tile_index
from laytune.layout import Const, Expr, Var
from laytune.layout._expr import bounds, substitute
from laytune.ops._reductions import reduction
from laytune.ops._statement import BinaryOp, Literal, Load, Negate, Value, loads
from laytune.space import IMAGE_DTYPES, affine_terms

__all__ = ["compute_kernel"]


@dataclass
class _Writer:
    """What the walk shares: the nest, the kernel's variables, the buffer
    accesses, the prologue's values. Only ``scope`` grows during the walk."""

    nest: Nest
    scope: Scope
    accesses: dict[str, BufferAccess]
    tiles: dict[str, BufferAccess]
    grid: GridCode

    @property
    def ctype(self) -> str:
        return ctype_of(self.nest.workload.dtype)

    def vtype(self, width: int) -> str:
        return f"{self.ctype}{width}" if width > 1 else self.ctype


def _accesses(nest: Nest) -> dict[str, BufferAccess]:
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


def _point_values(
    w: _Writer, offsets: Sequence[int], reduce_values: Mapping[int, Expr]
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
class _Test:
    """``expr >= 0`` (``lower``) or ``expr < bound``: an index inside its extent."""

    expr: Expr
    lower: bool
    bound: int = 0

    def c(self, scope: Scope) -> str:
        text = paren(scope.c(self.expr))
        return f"{text} >= 0" if self.lower else f"{text} < {self.bound}"


def _index_tests(scope: Scope, e: Expr, extent: int) -> list[_Test]:
    lo, hi = scope.bounds(e)
    tests = []
    if lo < 0:
        tests.append(_Test(e, True))
    if hi > extent - 1:
        tests.append(_Test(e, False, extent))
    return tests


def _load_text(
    w: _Writer, name: str, values: list[Expr], offsets: Sequence[int]
) -> tuple[str, list[_Test], int]:
    """The load of ``name`` at one point of the block (unguarded), the tests
    under which it reads inside the buffer (outside, the statement reads
    zero), and its vector width."""
    nest, scope = w.nest, w.scope
    decl = nest.workload.buffer(name)
    width = access_width(nest, name)
    if name in w.tiles:
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
    tests: list[_Test] = []
    overshoot: list[_Test] = []
    for d, (e, logical, extent) in enumerate(zip(idx, decl.indices, decl.shape, strict=True)):
        if d in grown:
            continue  # runs into padding on purpose
        logical_lo, logical_hi = bounds(logical, ranges)
        if logical_lo < 0 or logical_hi > extent - 1:
            tests += _index_tests(scope, e, extent)  # the statement reads zero there
        else:
            overshoot += _index_tests(scope, e, extent)  # an overshooting block's points
    if overshoot and not _inside(access, idx, scope):
        tests += overshoot  # their reads would leave the buffer's memory
    return text, tests, width


def _guarded(w: _Writer, text: str, tests: Sequence[_Test], width: int, dtype: str) -> str:
    if not tests:
        return text
    zero = c_float(0.0, dtype)
    if width > 1:
        zero = f"({w.vtype(width)})({zero})"
    return f"({' && '.join(t.c(w.scope) for t in tests)}) ? {text} : {zero}"


def _inside(access: BufferAccess, idx: Sequence[Expr], scope: Scope) -> bool:
    """Whether every element read at ``idx`` lies in the buffer's physical
    memory (padding included), whatever values the indices take."""
    if access.memory != "global":
        return False
    lo, hi = scope.bounds(access.flat_offset(idx))
    return lo >= 0 and hi <= access.layout.physical_size - 1


def _value(w: _Writer, v: Value, names: Mapping[str, tuple[str, int]]) -> tuple[str, int]:
    """C text of ``v`` and its vector width."""
    if isinstance(v, Load):
        return names[v.buffer]
    if isinstance(v, Literal):
        return c_float(v.value, w.nest.workload.dtype), 1
    if isinstance(v, Negate):
        text, width = _value(w, v.operand, names)
        return f"-({text})", width
    assert isinstance(v, BinaryOp)
    a, aw = _value(w, v.lhs, names)
    b, bw = _value(w, v.rhs, names)
    if v.op in ("max", "min"):
        fn = "fmax" if v.op == "max" else "fmin"
        if bw > aw:  # fmax(gentype, scalar) exists, fmax(scalar, gentype) does not
            a, b = b, a
        return f"{fn}({a}, {b})", max(aw, bw)
    return f"({a} {v.op} {b})", max(aw, bw)


def _widen(w: _Writer, text: str, width: int, to: int) -> str:
    return text if width == to else f"({w.vtype(to)})({text})"


def _body(
    w: _Writer,
    reduce_values: Mapping[int, Expr],
    guarded: bool = True,
    found: list[_Test] | None = None,
) -> list[str]:
    """The statement at one step of the reduce loops, for the whole block:
    each distinct operand element loaded once, then every point's update.
    Unless ``guarded``, loads are not tested (the caller proved them inside);
    every test is appended to ``found``."""
    nest = w.nest
    workload = nest.workload
    stmt = workload.statement
    combine = reduction(workload.reduction)
    acc_width = nest.tile.vector if nest.tile.vector_axis is not None else 1
    lines: list[str] = []
    loaded: dict[tuple[str, str], tuple[str, int]] = {}
    updates: list[str] = []
    for p, offsets in enumerate(nest.tile.offsets()):
        values = _point_values(w, offsets, reduce_values)
        names: dict[str, tuple[str, int]] = {}
        for load in loads(stmt.value):
            text, tests, width = _load_text(w, load.buffer, values, offsets)
            if found is not None:
                found += tests
            if guarded:
                text = _guarded(w, text, tests, width, workload.buffer(load.buffer).dtype)
            key = (load.buffer, text)
            if key not in loaded:
                count = sum(1 for k in loaded if k[0] == load.buffer)
                var = f"v{load.buffer.replace('.', '_')}{count}"
                lines.append(f"const {w.vtype(width)} {var} = {text};")
                loaded[key] = (var, width)
            names[load.buffer] = loaded[key]
        if combine is None:
            text, width = _value(w, stmt.value, names)
            updates.append(_store(w, values, _widen(w, text, width, acc_width), acc_width))
            continue
        acc = f"acc{p}"
        value = stmt.value
        if combine.name == "sum" and isinstance(value, BinaryOp) and value.op == "*":
            a, aw = _value(w, value.lhs, names)
            b, bw = _value(w, value.rhs, names)
            a, b = _widen(w, a, aw, acc_width), _widen(w, b, bw, acc_width)
            updates.append(f"{acc} = fma({a}, {b}, {acc});")
        else:
            text, _ = _value(w, value, names)
            updates.append(combine.combine_c(acc, text))
    return lines + updates


def _interior(w: _Writer, tests: Sequence[_Test], loop_vars: Sequence[Var]) -> str | None:
    """A test, on the work-item's variables alone, under which every one of
    ``tests`` holds at every step of the reduce loops: each reduce variable
    at its worst end. None when some test is not affine."""
    scope = w.scope
    reduce_ids = {v.index for v in loop_vars}
    out: list[str] = []
    for test in dict.fromkeys(tests):
        terms = affine_terms(test.expr)
        if terms is None:
            return None
        coeffs, const = terms
        worst: Expr = Const(const)
        for k, c in coeffs.items():
            if k in reduce_ids:
                lo, hi = scope.ranges[k]
                low_end = (c > 0) == test.lower
                worst = worst + c * (lo if low_end else hi)
            else:
                worst = worst + c * Var(k)
        text = _Test(scope.simplify(worst), test.lower, test.bound).c(scope)
        if text not in out:
            out.append(text)
    return " && ".join(out) if out else None


def _store(w: _Writer, values: list[Expr], value: str, width: int) -> str:
    """The store of one point's value, tested where the block overshoots."""
    scope = w.scope
    out = w.nest.workload.output
    idx = [scope.simplify(substitute(e, values)) for e in out.indices]
    store = w.accesses[out.name].store(idx, value, scope, width)
    tests = []
    for e, extent in zip(idx, out.shape, strict=True):
        if scope.bounds(e)[1] > extent - 1:
            tests.append(f"{paren(scope.c(e))} < {extent}")
    if tests:
        return f"if ({' && '.join(tests)}) {store}"
    return store


# -- reduce loops -------------------------------------------------------------


def _loop(name: str, trips: int, body: list[str], note: str, unroll: int) -> list[str]:
    if unroll == 1:
        return [f"for (int {name} = 0; {name} < {trips}; ++{name}) {{{note}", *indent(body), "}"]
    outer = f"{name}{unroll}"
    out = [f"for (int {outer} = 0; {outer} < {trips}; {outer} += {unroll}) {{{note}"]
    for u in range(unroll):
        out.append(f"    {{ const int {name} = {outer}{f' + {u}' if u else ''};")
        out += indent(body, 2)
        out.append("    }")
    out.append("}")
    return out


def _loop_vars(w: _Writer, loops: Sequence[ReduceLoop]) -> tuple[list[Var], dict[int, Expr]]:
    """One variable per loop (an unsplit loop walks its axis's own variable)
    and each reduce axis's value in them."""
    scope = w.scope
    split = {lp.axis for lp in loops if lp.scale > 1}
    out: list[Var] = []
    values: dict[int, Expr] = {}
    for lp in loops:
        if lp.axis in split:
            var = scope.var(lp.name, 0, lp.trips - 1)
            values[lp.axis] = values.get(lp.axis, 0) + Var(var.index) * lp.scale  # type: ignore[operator]
        else:
            var = Var(lp.axis)
            scope.set_range(var, 0, lp.trips - 1)
        out.append(var)
    return out, values


def _wrap_loops(
    w: _Writer, loops: Sequence[ReduceLoop], loop_vars: Sequence[Var], body: list[str]
) -> list[str]:
    lines = body
    for lp, var in zip(reversed(loops), reversed(loop_vars), strict=True):
        name = w.scope.name(var)
        note = ""
        if lp.overcompute:
            note = f"  /* padded extent {lp.trips}: padding holds the neutral element */"
        elif lp.guard:
            note = f"  /* padded extent {lp.trips}, guarded */"
            lines = [f"if ({name} < {lp.guard}) {{", *indent(lines), "}"]
        lines = _loop(name, lp.trips, lines, note, lp.unroll)
    return lines


# -- the kernel -----------------------------------------------------------------


def _params(nest: Nest, ctype: str) -> str:
    params = []
    for decl in nest.workload.buffers:
        if nest.memory[decl.name] == "image2d":
            params.append(f"__read_only image2d_t {decl.name}")
        elif decl.role == "input":
            params.append(f"__global const {ctype}* restrict {decl.name}")
        else:
            params.append(f"__global {ctype}* restrict {decl.name}")
    return ", ".join(params)


def _comments(nest: Nest, tiles: Mapping[str, BufferAccess]) -> list[str]:
    w = nest.workload
    lines = [f"/* {w.statement.text}"]
    for decl in w.buffers:
        layout = nest.layouts[decl.name]
        extra = ""
        if layout.has_padding:
            extra = f", padding holds {nest.pad_values.get(decl.name)!r}"
        memory = " (image2d)" if nest.memory[decl.name] == "image2d" else ""
        lines.append(f"   {decl.name}{list(decl.shape)}: {layout.index_map}{memory}{extra}")
    for acc in tiles.values():
        lines.append(f"   {acc.name}{list(acc.shape)} (__local): {acc.layout.index_map}")
    knobs = ", ".join(f"{k}={v}" for k, v in sorted(nest.knobs.items()))
    lines.append(f"   {knobs} */")
    return lines


def _attributes(nest: Nest, ctype: str) -> str:
    attrs = []
    if nest.tile.vector_axis is not None:
        attrs.append(f"vec_type_hint({ctype}{nest.tile.vector})")
    local = nest.local_size
    if local is not None:
        sizes = [*local, 1, 1][:3]
        attrs.append(f"reqd_work_group_size({', '.join(str(s) for s in sizes)})")
    return "".join(f"__attribute__(({a})) " for a in attrs)


def compute_kernel(nest: Nest, name: str) -> tuple[str, Launch]:
    """The compute kernel's source and its launch."""
    workload = nest.workload
    scope = Scope()
    for axis in workload.axes:  # the workload's axis variables first: Var(k) is axis k
        scope.var(axis.name, 0, axis.extent - 1)
    staged = nest.staging is not None
    grid = emit_grid(scope, nest)
    w = _Writer(nest, scope, _accesses(nest), local_accesses(nest) if staged else {}, grid)
    combine = reduction(workload.reduction)
    points = nest.tile.offsets()
    acc_width = nest.tile.vector if nest.tile.vector_axis is not None else 1

    def loops() -> list[str]:
        loop_vars, values = _loop_vars(w, nest.loops)
        tests: list[_Test] = []
        guarded = _wrap_loops(w, nest.loops, loop_vars, _body(w, values, True, tests))
        interior = _interior(w, tests, loop_vars) if nest.knobs.get("peel") else None
        if interior is None:
            return guarded
        fast = _wrap_loops(w, nest.loops, loop_vars, _body(w, values, False))
        return [
            f"if ({interior}) {{  /* inside every buffer: no tests */",
            *indent(fast),
            "} else {",
            *indent(guarded),
            "}",
        ]

    if combine is None:
        body = grid.lines + _body(w, {})
    else:
        init = c_float(combine.neutral, workload.dtype)
        body = grid.lines + [f"{w.vtype(acc_width)} acc{p} = {init};" for p in range(len(points))]
        if staged:
            body += staged_loops(scope, nest, grid, w.tiles, w.accesses, loops)
        else:
            body += loops()
        for p, offsets in enumerate(points):
            values = _point_values(w, offsets, {})
            body.append(_store(w, values, f"acc{p}", acc_width))
    ctype = ctype_of(workload.dtype)
    lines = _comments(nest, w.tiles)
    lines.append(f"__kernel {_attributes(nest, ctype)}void {name}({_params(nest, ctype)}) {{")
    lines += indent(body)
    lines.append("}")
    args = tuple(ArgRef(d.name, "physical") for d in workload.buffers)
    return "\n".join(lines), Launch(name, args, nest.global_size, nest.local_size)


def image_read(dtype: str) -> str:
    """The built-in that reads a texel of ``dtype``."""
    return IMAGE_DTYPES[dtype].read
