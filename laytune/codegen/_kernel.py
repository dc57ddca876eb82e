"""Emitting the compute kernel: a walk over the planned :class:`~._nest.Nest`.

The kernel, top to bottom::

    prologue        work-item ids -> first point of the register block (._grid)
    accumulators    one per point of the block (a floatN per vector)
    reduce loops    ._nest.ReduceLoop, outermost first (staged: ._stage);
                    a window's edge shared by the whole block bounds its loop
                    (_window_bounds), a short loop still tested is unrolled
      body          every operand element the block reads, loaded once
                    (vloadN along the vector axis, a scalar broadcast
                    otherwise), then one fma/combine per point, then the
                    next work-group's block prefetched (._prefetch)
    stores          one per point, tested where a block overshoots; an
                    output that holds the vector's lanes apart but runs
                    along another axis of the block is stored in rows of
                    that axis, transposed in registers (_row_chunks)

Loads, stores and their index tests are in ._loads.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence

from laytune.codegen._emit import BufferAccess, Scope, c_float, ctype_of
from laytune.codegen._grid import axis_value, emit_grid, may_overlap
from laytune.codegen._loads import (
    ACCUMULATOR,
    IndexTest,
    Writer,
    buffer_accesses,
    guarded_load,
    lanes_apart,
    load_text,
    output_index,
    point_values,
    store_tests,
    store_text,
    table_entry,
    value_text,
    widen,
)
from laytune.codegen._nest import Nest, ReduceLoop, Tile
from laytune.codegen._prefetch import prefetch_every, prefetch_lines
from laytune.codegen._program import ArgRef, Launch
from laytune.codegen._shuffle import chunk_lane, transpose_lines
from laytune.codegen._source import indent
from laytune.codegen._stage import local_accesses, staged_loops
from laytune.layout import Const, Expr, Var, variables
from laytune.ops import BinaryOp, Load, Value, loads, reduction
from laytune.space import TRANSPOSE_WIDTHS, affine_terms

__all__ = ["compute_kernel"]


def _body(
    w: Writer,
    reduce_values: Mapping[int, Expr],
    guarded: bool = True,
    found: list[IndexTest] | None = None,
    part: int = 0,
) -> list[str]:
    """The statement at one step of the reduce loops, for the whole block:
    each distinct operand element loaded once, then every point's update.
    Unless ``guarded``, loads are not tested (the caller proved them inside);
    every test is appended to ``found``. ``part``: which of a point's
    accumulators the updates go to (``reduce_vector``'s unrolled copies).

    An element-wise statement that transposes chunks in registers stores
    each chunk's points right after its loads and shuffles, chunk by chunk
    (:func:`_chunk_order`)."""
    nest = w.nest
    workload = nest.workload
    stmt = workload.statement
    combine = reduction(workload.reduction)
    acc_width = nest.tile.acc_width
    suffix = f"_{part}" if part else ""
    lines: list[str] = []
    loaded: dict[tuple[str, str], tuple[str, int]] = {}
    chunks: dict[tuple[str, tuple[int, ...]], list[str]] = {}
    updates: list[str] = []
    chunked = combine is None and bool(nest.tile.transposed) and not nest.tile.panel
    body: list[str] = []
    points = list(enumerate(nest.tile.offsets()))
    for p, offsets in _chunk_order(nest.tile, points) if chunked else points:
        values = point_values(w, offsets, reduce_values)
        names: dict[str, tuple[str, int]] = {}
        known: dict[str, float] = {}
        for load in loads(stmt.value):
            entry = table_entry(w, load.buffer, values)
            if entry is not None:
                known[load.buffer] = entry
                names[load.buffer] = (c_float(entry, workload.dtype), 1)
                continue
            if load.buffer in nest.tile.transposed and nest.tile.panel:
                names[load.buffer] = _panel_read(w, load.buffer, offsets, reduce_values)
                continue
            if load.buffer in nest.tile.transposed:
                names[load.buffer] = _transposed(
                    w, load.buffer, offsets, reduce_values, (chunks, lines), guarded, found
                )
                continue
            text, tests, width = load_text(w, load.buffer, values, offsets)
            if found is not None:
                found += tests
            if guarded:
                text = guarded_load(w, text, tests, width, workload.buffer(load.buffer).dtype)
            key = (load.buffer, text)
            if key not in loaded:
                count = sum(1 for k in loaded if k[0] == load.buffer)
                var = f"v{load.buffer.replace('.', '_')}{count}{suffix}"
                lines.append(f"const {w.vtype(width)} {var} = {text};")
                loaded[key] = (var, width)
            names[load.buffer] = loaded[key]
        if combine is None:
            text, width = value_text(w, stmt.value, names)
            updates.append(store_text(w, values, widen(w, text, width, acc_width), acc_width))
            if chunked:
                body += lines + updates
                lines.clear()  # the same list _transposed appends a new chunk's lines to
                updates.clear()
            continue
        acc = f"acc{p}{suffix}"
        value = stmt.value
        scaled = _scaled(value, known) if combine.name == "sum" else None
        if scaled is not None:  # a table's entry times a value: add it, subtract it, or not
            factor, other = scaled
            if factor != 0.0:
                b, bw = value_text(w, other, names)
                b = widen(w, b, bw, acc_width)
                k = c_float(factor, workload.dtype)
                op = {1.0: f"{acc} + {b}", -1.0: f"{acc} - {b}"}.get(factor)
                updates.append(f"{acc} = {op or f'fma({widen(w, k, 1, acc_width)}, {b}, {acc})'};")
        elif combine.name == "sum" and isinstance(value, BinaryOp) and value.op == "*":
            a, aw = value_text(w, value.lhs, names)
            b, bw = value_text(w, value.rhs, names)
            a, b = widen(w, a, aw, acc_width), widen(w, b, bw, acc_width)
            updates.append(f"{acc} = fma({a}, {b}, {acc});")
        else:
            text, _ = value_text(w, value, names)
            updates.append(combine.combine_c(acc, text))
    return body + lines + updates


def _scaled(value: Value, known: Mapping[str, float]) -> tuple[float, Value] | None:
    """``value`` as (a table's known entry, the other factor) where it is
    the product of a table's read at a constant index and something else."""
    if not (isinstance(value, BinaryOp) and value.op == "*"):
        return None
    for mine, other in ((value.lhs, value.rhs), (value.rhs, value.lhs)):
        if isinstance(mine, Load) and mine.buffer in known:
            return known[mine.buffer], other
    return None


def _chunk_order(
    tile: Tile, points: list[tuple[int, tuple[int, ...]]]
) -> list[tuple[int, tuple[int, ...]]]:
    """``points`` (numbered block points) with those of one transposed chunk
    together, chunks in the order their first point comes. Stored as they
    come, each chunk's vectors die before the next chunk's loads: a 16 x 64
    block of a 4096^2 transpose (four 16 x 16 chunks) held 64 vectors of 16
    floats at once when every store waited for every load, and spilled: it
    ran 2.66 ms where a hand kernel storing chunk by chunk ran 1.33 (2 Zen 5
    cores)."""
    first: dict[tuple[int, ...], int] = {}
    for k, (_, offsets) in enumerate(points):
        first.setdefault(_chunk_start(tile, offsets), k)
    return sorted(points, key=lambda item: first[_chunk_start(tile, item[1])])


def _chunk_start(tile: Tile, offsets: Sequence[int]) -> tuple[int, ...]:
    """The first point of the transposed ``n x n`` chunk that holds the
    block point ``offsets``: its offset along the transpose axis rounded
    down to a multiple of ``n`` (along the vector axis a point is already
    one vector)."""
    u, n = tile.transpose_axis, tile.vector
    return tuple(x - x % n if k == u else x for k, x in enumerate(offsets))


def _transposed(
    w: Writer,
    name: str,
    offsets: Sequence[int],
    reduce_values: Mapping[int, Expr],
    emitted: tuple[dict[tuple[str, tuple[int, ...]], list[str]], list[str]],
    guarded: bool,
    found: list[IndexTest] | None,
) -> tuple[str, int]:
    """The vector along the vector axis ``v`` of the input ``name`` at the
    block's point ``offsets``, and its width. It comes from the ``n x n``
    chunk of the block holding the point: ``n`` vectors read along the
    transpose axis ``u`` at ``n`` consecutive values of ``v``, transposed in
    registers; ``emitted`` holds the chunks already emitted and the lines
    they go to."""
    chunks, lines = emitted
    tile = w.nest.tile
    u, v, n = tile.transpose_axis, tile.vector_axis, tile.vector
    assert u is not None and v is not None
    first = list(_chunk_start(tile, offsets))
    key = (name, tuple(first))
    if key not in chunks:
        prefix = f"x{name.replace('.', '_')}{len(chunks)}"
        rows = []
        for b in range(n):
            at = list(first)
            at[v] += b
            values = point_values(w, at, reduce_values)
            text, tests, _ = load_text(w, name, values, at, n)
            if found is not None:
                found += tests
            if guarded:
                text = guarded_load(w, text, tests, n, w.nest.workload.buffer(name).dtype)
            lines.append(f"const {w.vtype(n)} {prefix}_{b} = {text};")
            rows.append(f"{prefix}_{b}")
        shuffles, columns = transpose_lines(rows, w.ctype, f"{prefix}t")
        lines.extend(shuffles)
        chunks[key] = columns
    return chunks[key][offsets[u] % n], n


def _panel_points(w: Writer) -> tuple[list[int], list[tuple[int, ...]], int, int]:
    """The panel's shape: the spatial axes it holds besides the vector axis,
    their block's points (outer dimension of the panel), the extent of the
    reduce axis it runs over, and the vectors per row of the vector axis's
    block (innermost)."""
    tile = w.nest.tile
    u, v = tile.transpose_axis, tile.vector_axis
    assert u is not None and v is not None
    others = [k for k in tile.panel_axes if k != v]
    points: list[tuple[int, ...]] = [()]
    for k in others:
        points = [(*p, x) for p in points for x in range(tile.blocks[k])]
    return others, points, w.nest.workload.axes[u].extent, tile.blocks[v] // tile.vector


def _panel_name(buffer: str) -> str:
    return f"P{buffer.replace('.', '_')}"


def _panel_read(
    w: Writer, name: str, offsets: Sequence[int], reduce_values: Mapping[int, Expr]
) -> tuple[str, int]:
    """The vector along the vector axis of the transposed input ``name`` at
    the block's point ``offsets``, from the work-item's private panel."""
    tile = w.nest.tile
    u, v = tile.transpose_axis, tile.vector_axis
    assert u is not None and v is not None
    others, points, extent, rows = _panel_points(w)
    at = points.index(tuple(offsets[k] for k in others))
    value = reduce_values.get(u, Var(u))
    index = w.scope.simplify((value + at * extent) * rows + offsets[v] // tile.vector)
    return f"{_panel_name(name)}[{w.scope.c(index)}]", tile.vector


def _panel_fill(w: Writer) -> list[str]:
    """Declare each transposed input's private panel and fill it: at every
    ``n`` values of the reduce axis, ``n`` vectors read along it at ``n``
    consecutive values of the vector axis, transposed in registers (a read
    past the input's end, a tail block's, is zero and never used)."""
    nest, scope = w.nest, w.scope
    tile = nest.tile
    u, v, n = tile.transpose_axis, tile.vector_axis, tile.vector
    assert u is not None and v is not None
    others, points, extent, rows = _panel_points(w)
    step = scope.var(f"{nest.workload.axes[u].name}_p", 0, extent - n)
    at_u = {u: Var(step.index)}
    lines: list[str] = []
    inner: list[str] = []
    for name in sorted(tile.transposed):
        panel = _panel_name(name)
        lines.append(f"{w.vtype(n)} {panel}[{len(points) * extent * rows}];")
        dtype = nest.workload.buffer(name).dtype
        for o, point in enumerate(points):
            for h in range(rows):
                prefix = f"f{name.replace('.', '_')}{o}_{h}"
                names = []
                for r in range(n):
                    offsets = [0] * len(nest.workload.axes)
                    for k, x in zip(others, point, strict=True):
                        offsets[k] = x
                    offsets[v] = h * n + r
                    values = point_values(w, offsets, at_u)
                    text, tests, _ = load_text(w, name, values, offsets, n)
                    text = guarded_load(w, text, tests, n, dtype)
                    inner.append(f"const {w.vtype(n)} {prefix}_{r} = {text};")
                    names.append(f"{prefix}_{r}")
                shuffles, columns = transpose_lines(names, w.ctype, f"{prefix}t")
                inner += shuffles
                for a, column in enumerate(columns):  # [point][step + a][h]
                    at = scope.simplify((Var(step.index) + (o * extent + a)) * rows + h)
                    inner.append(f"{panel}[{scope.c(at)}] = {column};")
    counter = scope.name(step)
    lines.append(f"for (int {counter} = 0; {counter} < {extent}; {counter} += {n}) {{")
    return [*lines, *indent(inner), "}"]


def _walk(w: Writer, overlap: frozenset[int], section: Callable[[], list[str]]) -> list[str]:
    """``section`` (the accumulators, reduce loops and stores of one register
    block) inside a loop over every block of each axis the work-item walks,
    outermost first; the section is written once the loops' variables are
    the walked axes' first points."""
    nest, scope = w.nest, w.scope
    heads: list[list[str]] = []
    for k in nest.tile.walk:
        axis = nest.workload.axes[k]
        count = -(-axis.extent // nest.tile.blocks[k])
        index = scope.var(f"{axis.name}_w", 0, count - 1)
        counter = scope.name(index)
        head = [f"for (int {counter} = 0; {counter} < {count}; {counter}++) {{"]
        declared: list[str] = []
        w.grid.base[k] = axis_value(scope, nest, k, Var(index.index), declared, overlap)
        heads.append(head + indent(declared))
    body = section()
    for head in reversed(heads):
        body = [*head, *indent(body), "}"]
    return body


def _interior(w: Writer, tests: Sequence[IndexTest], loop_vars: Sequence[Var]) -> str | None:
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
        text = IndexTest(scope.simplify(worst), test.lower, test.bound).c(scope)
        if text not in out:
            out.append(text)
    return " && ".join(out) if out else None


def _factors(value: Value) -> list[Load]:
    """The loads a product's value is a multiple of: its direct factors."""
    if isinstance(value, Load):
        return [value]
    if isinstance(value, BinaryOp) and value.op == "*":
        return _factors(value.lhs) + _factors(value.rhs)
    return []


#: The most steps of a reduce loop unrolled whole because its loads test its
#: variable (a window's columns): unrolled, every copy's tests are constants.
_UNROLL_TESTED = 8

#: Bounds of one reduce loop: C texts its variable is at least, and below.
LoopBounds = dict[int, tuple[list[str], list[str]]]


def _window_bounds(
    w: Writer, loops: Sequence[ReduceLoop], loop_vars: Sequence[Var], values: Mapping[int, Expr]
) -> tuple[LoopBounds, frozenset[IndexTest]]:
    """Bounds of the reduce loops that a window's edge cuts short, and the
    tests they make hold.

    In a sum of products, a step at which one factor of every point of the
    block reads zero (outside the buffer) adds nothing. A test that guards a
    factor at every point, affine in one reduce variable with coefficient
    +-1 and otherwise in the work-item's own variables (a convolution's
    ``oh + kh - 1 >= 0`` under a block one row high), is then the bound of
    that variable's loop: those steps are not run, and the loads inside
    need not test it. A guarded load would select and broadcast in
    registers, where an untested one broadcasts from memory."""
    nest = w.nest
    combine = reduction(nest.workload.reduction)
    if (
        combine is None
        or combine.name != "sum"
        or nest.tile.reduce_axis is not None
        or nest.staging is not None
    ):
        return {}, frozenset()
    factors = [
        f for f in _factors(nest.workload.statement.value) if f.buffer not in nest.tile.transposed
    ]
    shared: set[IndexTest] | None = None
    for offsets in nest.tile.offsets():
        at = point_values(w, offsets, values)
        tests: set[IndexTest] = set()
        for factor in factors:
            tests.update(load_text(w, factor.buffer, at, offsets)[1])
        shared = tests if shared is None else shared & tests
    loop_of = {
        var.index: lp
        for lp, var in zip(loops, loop_vars, strict=True)
        if lp.unroll == 1 and not lp.guard and not lp.overcompute
    }
    reduce_ids = {var.index for var in loop_vars}
    scope = w.scope
    bounds: LoopBounds = {}
    proven: set[IndexTest] = set()
    for test in sorted(shared or (), key=lambda t: t.c(scope)):
        terms = affine_terms(test.expr)
        if terms is None:
            continue
        coeffs, const = terms
        moving = [k for k in coeffs if k in reduce_ids]
        if len(moving) != 1 or moving[0] not in loop_of or abs(coeffs[moving[0]]) != 1:
            continue
        r, c = moving[0], coeffs[moving[0]]
        rest: Expr = Const(const)
        for k, ck in coeffs.items():
            if k != r:
                rest = rest + ck * Var(k)
        # c * r + rest >= 0, or < bound, solved for r
        if test.lower:
            lower, below = (Const(0) - rest, None) if c > 0 else (None, rest + 1)
        else:
            lower, below = (None, test.bound - rest) if c > 0 else (rest - test.bound + 1, None)
        lows, highs = bounds.setdefault(r, ([], []))
        if lower is not None:
            lows.append(scope.c(scope.simplify(lower)))
        if below is not None:
            highs.append(scope.c(scope.simplify(below)))
        proven.add(test)
    return bounds, frozenset(proven)


def _parts(
    w: Writer,
    values: Mapping[int, Expr],
    guarded: bool = True,
    found: list[IndexTest] | None = None,
) -> list[str]:
    """The body of one step for every accumulator part: ``reduce_vector``'s
    ``parts`` consecutive vectors along the reduce axis, each into its own
    accumulators (independent chains), else the body itself."""
    tile = w.nest.tile
    if tile.reduce_axis is None:
        return _body(w, values, guarded, found)
    axis = tile.reduce_axis
    lines: list[str] = []
    for part in range(tile.parts):
        at = dict(values)
        at[axis] = w.scope.simplify(values[axis] + part * tile.reduce_vector)
        lines += _body(w, at, guarded, found, part)
    return lines


#: The most reduce steps the innermost loops over a table's axes are spelled
#: out to (:func:`_spelled`), and the most updates of the block that makes.
_SPELLED_STEPS = 64
_SPELLED_UPDATES = 4096


def _spelled(w: Writer) -> tuple[ReduceLoop, ...]:
    """The innermost reduce loops the kernel writes out step by step, each
    step a copy of the body with the loop's variable a constant: those over
    axes a table is read along (``Workload.tables``), so that every read of
    it is a literal (:func:`_body`), up to ``_SPELLED_STEPS`` steps. Whole
    loops over an axis of their own only, unstaged."""
    nest = w.nest
    axes = {
        k
        for load in loads(nest.workload.statement.value)
        if load.buffer in w.tables
        for e in load.indices
        for k in variables(e)
    }
    if not axes or nest.staging is not None or nest.tile.panel or nest.tile.reduce_axis is not None:
        return ()
    points = len(nest.tile.offsets())
    out: list[ReduceLoop] = []
    for lp in reversed(nest.loops):
        steps = lp.trips * math.prod(s.trips for s in out)
        alone = sum(1 for other in nest.loops if other.axis == lp.axis) == 1
        plain = lp.scale == 1 and not lp.guard and not lp.overcompute
        small = steps <= _SPELLED_STEPS and steps * points <= _SPELLED_UPDATES
        if lp.axis not in axes or not (alone and plain and small):
            break
        out.insert(0, lp)
    return tuple(out)


def _spelled_out(
    w: Writer,
    spelled: Sequence[ReduceLoop],
    values: Mapping[int, Expr],
    guarded: bool = True,
    found: list[IndexTest] | None = None,
) -> list[str]:
    """The body at every step of the ``spelled`` loops, each step's copy in
    its own braces (its loads are named as every copy's), or the body once
    when there are none."""
    if not spelled:
        return _parts(w, values, guarded, found)
    lines: list[str] = []
    for step in itertools.product(*(range(lp.trips) for lp in spelled)):
        at = dict(values)
        at.update({lp.axis: Const(v) for lp, v in zip(spelled, step, strict=True)})
        note = ", ".join(
            f"{w.nest.workload.axes[lp.axis].name} = {v}"
            for lp, v in zip(spelled, step, strict=True)
        )
        lines += [f"{{  /* {note} */", *indent(_parts(w, at, guarded, found)), "}"]
    return lines


def _lanes_combined(w: Writer, p: int) -> tuple[list[str], str]:
    """Lines folding point ``p``'s accumulator parts into one vector, then
    its lanes pairwise (halves) into one value, and that value."""
    tile = w.nest.tile
    combine = reduction(w.nest.workload.reduction)
    assert combine is not None

    def both(a: str, b: str) -> str:
        return combine.c_combine.format(acc=a, value=b)

    total = f"acc{p}"
    for part in range(1, tile.parts):
        total = both(total, f"acc{p}_{part}")
    width = tile.reduce_vector
    lines = [f"const {w.vtype(width)} red{p}_{width} = {total};"]
    while width > 1:
        half = width // 2
        lines.append(
            f"const {w.vtype(half)} red{p}_{half} = "
            f"{both(f'red{p}_{width}.lo', f'red{p}_{width}.hi')};"
        )
        width = half
    return lines, f"red{p}_1"


def _epilogue(
    w: Writer, offsets: Sequence[int], values: list[Expr], acc: str, width: int
) -> list[str]:
    """The store of one point's finished reduction ``acc`` (``width`` wide),
    through the statement's epilogue when it has one: its operands loaded
    at the point (vectors along the vector axis, else broadcast), tested
    where the block overshoots."""
    if w.nest.workload.statement.epilogue is None:
        return [store_text(w, values, acc, width)]
    lines, text = _finished(w, offsets, values, acc, width)
    store = store_text(w, values, text, width)
    return ["{  /* epilogue */", *indent([*lines, store]), "}"]


def _finished(
    w: Writer, offsets: Sequence[int], values: list[Expr], acc: str, width: int
) -> tuple[list[str], str]:
    """The lines computing one point's stored value from its finished
    reduction ``acc`` through the statement's epilogue (``acc`` itself
    where there is none), and that value's text, ``width`` wide."""
    after = w.nest.workload.statement.epilogue
    if after is None:
        return [], acc
    lines: list[str] = []
    names: dict[str, tuple[str, int]] = {ACCUMULATOR: (acc, width)}
    for load in loads(after):
        if load.buffer in w.nest.tile.transposed:
            chunks: dict[tuple[str, tuple[int, ...]], list[str]] = {}
            names[load.buffer] = _transposed(
                w, load.buffer, offsets, {}, (chunks, lines), True, None
            )
            continue
        text, tests, got = load_text(w, load.buffer, values, offsets)
        text = guarded_load(w, text, tests, got, w.nest.workload.buffer(load.buffer).dtype)
        var = f"e{load.buffer.replace('.', '_')}_{len(lines)}"
        lines.append(f"const {w.vtype(got)} {var} = {text};")
        names[load.buffer] = (var, got)
    text, got = value_text(w, after, names)
    return lines, widen(w, text, got, width)


def _row_chunks(w: Writer, points: Sequence[tuple[int, ...]]) -> tuple[int, list[list[int]]]:
    """Where the output stores its vectors lane by lane (its logical layout
    holds the vector axis ``v``'s lanes apart: :func:`lanes_apart`) but its
    rows run along another axis ``u`` of the block (``u`` its innermost
    index): the row width ``n`` (a power of two dividing the vector width
    and ``u``'s block) and the points in chunks of ``n`` consecutive along
    ``u``. Each chunk's vectors are transposed in registers and stored as
    one row of ``n`` per lane, so ``n`` lanes go out in one store. ``(0,
    [])`` where the output stores as it is: whole vectors, a block that
    overshoots its extent (tested stores), nontemporal stores, sub-group
    kernels or a reduction across lanes."""
    nest = w.nest
    tile, out = nest.tile, nest.workload.output
    width = tile.vector
    none: tuple[int, list[list[int]]] = (0, [])
    if tile.reduce_axis is not None or width not in TRANSPOSE_WIDTHS:
        return none
    if nest.knobs.get("store") == "nontemporal" or nest.block_reads:
        return none
    last = out.indices[-1]
    if lanes_apart(w, width) is None or not isinstance(last, Var) or last.index == tile.vector_axis:
        return none
    u = last.index
    rows = min(width, tile.blocks[u] & -tile.blocks[u])  # the largest power of two dividing it
    if rows < 2 or out.shape[-1] % rows:
        return none
    if any(store_tests(w, output_index(w, point_values(w, p, {}))) for p in points):
        return none
    position = {p: k for k, p in enumerate(points)}
    chunks = []
    for offsets in points:
        if offsets[u] % rows == 0:
            chunks.append(
                [position[(*offsets[:u], offsets[u] + r, *offsets[u + 1 :])] for r in range(rows)]
            )
    return rows, chunks


def _row_stores(
    w: Writer, points: Sequence[tuple[int, ...]], rows: int, chunks: Sequence[Sequence[int]]
) -> list[str]:
    """The stores of every point's finished value as rows of ``rows``
    along the output's innermost axis, one chunk of points at a time
    (:func:`_row_chunks`)."""
    scope, width = w.scope, w.nest.tile.vector
    access = w.accesses[w.nest.workload.output.name]
    dim = lanes_apart(w, width)
    assert dim is not None
    lines: list[str] = []
    for c, chunk in enumerate(chunks):
        named = []
        for p in chunk:
            values = point_values(w, points[p], {})
            body, text = _finished(w, points[p], values, f"acc{p}", width)
            if body:  # the epilogue's operands, in a scope of their own
                lines.append(f"{w.vtype(width)} out{p};")
                lines += ["{  /* epilogue */", *indent([*body, f"out{p} = {text};"]), "}"]
            else:
                lines.append(f"const {w.vtype(width)} out{p} = {text};")
            named.append(f"out{p}")
        shuffles, outputs = transpose_lines(named, w.ctype, f"row{c}_", width)
        lines += shuffles
        idx = output_index(w, point_values(w, points[chunk[0]], {}))
        for a, name in enumerate(outputs):
            for h in range(width // rows):
                lane = chunk_lane(a, h, rows, width)
                at = [scope.simplify(e + lane) if d == dim else e for d, e in enumerate(idx)]
                part = "".join(f"{k:x}" for k in range(h * rows, (h + 1) * rows))
                text = name if rows == width else f"{name}.s{part}"
                lines.append(access.store(at, text, scope, rows))
    return lines


def _loop(
    name: str,
    trips: int,
    body: list[str],
    note: str,
    unroll: int,
    bounds: tuple[list[str], list[str]] = ([], []),
    whole: bool = False,
) -> list[str]:
    if unroll == 1:
        start, stop = "0", str(trips)
        for low in bounds[0]:
            start = f"max({start}, {low})"
        for high in bounds[1]:
            stop = f"min({stop}, {high})"
        if bounds[0] or bounds[1]:
            note = "  /* only the steps inside the window's edges */"
        head = f"for (int {name} = {start}; {name} < {stop}; ++{name}) {{{note}"
        # unrolled whole, each copy's index tests are constants
        return ["#pragma unroll", head, *indent(body), "}"] if whole else [head, *indent(body), "}"]
    outer = f"{name}{unroll}"
    whole_steps = trips - trips % unroll
    out = [f"for (int {outer} = 0; {outer} < {whole_steps}; {outer} += {unroll}) {{{note}"]
    for u in range(unroll):
        out.append(f"    {{ const int {name} = {outer}{f' + {u}' if u else ''};")
        out += indent(body, 2)
        out.append("    }")
    out.append("}")
    if whole_steps < trips:  # the steps the unrolled loop leaves, one by one
        head = f"for (int {name} = {whole_steps}; {name} < {trips}; ++{name}) {{"
        out += [f"{head}  /* the last {trips - whole_steps} of {trips} */", *indent(body), "}"]
    return out


def _loop_vars(w: Writer, loops: Sequence[ReduceLoop]) -> tuple[list[Var], dict[int, Expr]]:
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
    w: Writer,
    loops: Sequence[ReduceLoop],
    loop_vars: Sequence[Var],
    body: list[str],
    bounds: LoopBounds | None = None,
    tested: frozenset[int] = frozenset(),
    tail: Callable[[int], list[str]] | None = None,
    every: int = 1,
    steps: int = 1,
) -> list[str]:
    """``body`` in the reduce loops, with ``bounds``; a short loop whose
    variable the body's loads still test (``tested``) is unrolled whole.

    ``tail(n)``, the lines to write after a pass of ``n`` reduce steps (the
    prefetch's, :func:`~laytune.codegen._prefetch.prefetch_lines`), goes
    after as many of the innermost loops as make a constant count of steps
    that divides ``every`` (or after a short innermost loop alone, where
    ``every`` divides its steps, a power of two); in each copy of an
    unrolled loop's body. Once
    after the copies instead, the BERT FFN's 128 x 3072 x 768 (6 x 2L,
    unrolled 4 times) took 6.2-6.5 ms where it took 3.3-3.5 on a Zen 3 host:
    the copies' own tests fold away where the counter's step is known.
    ``body`` is ``steps`` reduce steps (the loops :func:`_spelled` spelled out)."""
    lines = body
    steps = 0 if tail is None else steps  # reduce steps of a pass through ``lines``; 0: tail in
    for lp, var in zip(reversed(loops), reversed(loop_vars), strict=True):
        name = w.scope.name(var)
        edges = (bounds or {}).get(var.index, ([], []))
        constant = not (lp.guard or edges[0] or edges[1])
        if steps and tail is not None:
            # the whole loop passes before the tail: steps that divide every,
            # or (a short innermost loop inside others) a power of two that
            # every divides, at most 4 prefetches a pass
            innermost = (
                steps == 1
                and len(loops) > 1
                and lp.trips % every == 0
                and lp.trips // every <= 4
                and lp.trips & (lp.trips - 1) == 0
            )
            if constant and lp.unroll == 1 and (every % (steps * lp.trips) == 0 or innermost):
                steps *= lp.trips
            else:
                lines, steps = [*lines, *tail(steps)], 0
        note = ""
        if lp.overcompute:
            note = f"  /* padded extent {lp.trips}: padding holds the neutral element */"
        elif lp.guard:
            note = f"  /* padded extent {lp.trips}, guarded */"
            lines = [f"if ({name} < {lp.guard}) {{", *indent(lines), "}"]
        whole = lp.trips <= _UNROLL_TESTED and var.index in tested
        lines = _loop(name, lp.trips, lines, note, lp.unroll, edges, whole)
    if steps and tail is not None:
        lines = [*lines, *tail(steps)]
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
    if nest.subgroup:
        attrs.append(f"intel_reqd_sub_group_size({nest.subgroup})")
    local = nest.local_size
    if local is not None:
        sizes = [*local, 1, 1][:3]
        attrs.append(f"reqd_work_group_size({', '.join(str(s) for s in sizes)})")
    return "".join(f"__attribute__(({a})) " for a in attrs)


def compute_kernel(nest: Nest, name: str) -> tuple[str, Launch]:
    """The compute kernel's source and its launch.

    Written once with overshooting last blocks; where that tested a load
    (a row-major operand's rows past the end of a block of 8), written again
    with those axes' last blocks overlapping the ones before them
    (:func:`~laytune.codegen._grid.may_overlap`)."""
    source, launch, overshot = _compute_kernel(nest, name, frozenset())
    overlap = frozenset(k for k in overshot if may_overlap(nest, k))
    if overlap:
        source, launch, _ = _compute_kernel(nest, name, overlap)
    return source, launch


def _compute_kernel(nest: Nest, name: str, overlap: frozenset[int]) -> tuple[str, Launch, set[int]]:
    workload = nest.workload
    scope = Scope()
    for axis in workload.axes:  # the workload's axis variables first: Var(k) is axis k
        scope.var(axis.name, 0, axis.extent - 1)
    staged = nest.staging is not None
    grid = emit_grid(scope, nest, overlap)
    w = Writer(nest, scope, buffer_accesses(nest), local_accesses(nest) if staged else {}, grid)
    w.tables = dict(getattr(workload, "table_arrays", {}))
    if nest.block_reads:
        w.lane = scope.var("lane", 0, nest.subgroup - 1)
        grid.lines.append(f"const int {scope.name(w.lane)} = get_sub_group_local_id();")
    combine = reduction(workload.reduction)
    points = nest.tile.offsets()
    acc_width = nest.tile.acc_width

    def loops() -> list[str]:
        spelled = _spelled(w)
        kept = nest.loops[: len(nest.loops) - len(spelled)]
        loop_vars, values = _loop_vars(w, kept)
        tests: list[IndexTest] = []
        bounds, w.proven = _window_bounds(w, kept, loop_vars, values)
        counter, tail = prefetch_lines(w)
        every = prefetch_every(w)
        body = _spelled_out(w, spelled, values, True, tests)
        steps = math.prod(lp.trips for lp in spelled)
        tested = frozenset(k for t in tests if t not in w.proven for k in variables(t.expr))
        guarded = _wrap_loops(w, kept, loop_vars, body, bounds, tested, tail, every, steps)
        w.proven = frozenset()
        interior = _interior(w, tests, loop_vars) if nest.knobs.get("peel") else None
        if interior is None:
            return counter + guarded
        fast = _wrap_loops(
            w,
            kept,
            loop_vars,
            _spelled_out(w, spelled, values, False),
            tail=tail,
            every=every,
            steps=steps,
        )
        return [
            *counter,
            f"if ({interior}) {{  /* inside every buffer: no tests */",
            *indent(fast),
            "} else {",
            *indent(guarded),
            "}",
        ]

    def section() -> list[str]:
        """One register block: accumulators, reduce loops, stores."""
        init = c_float(combine.neutral, workload.dtype)
        parts = [f"_{u}" if u else "" for u in range(nest.tile.parts)]
        block = [
            f"{w.vtype(acc_width)} acc{p}{part} = {init};"
            for p in range(len(points))
            for part in parts
        ]
        if staged:
            block += staged_loops(scope, nest, grid, w.tiles, w.accesses, loops)
        else:
            block += loops()
        stored = points
        rows, chunks = _row_chunks(w, stored)
        if rows:
            block += _row_stores(w, stored, rows, chunks)
            stored = []
        for p, offsets in enumerate(stored):
            values = point_values(w, offsets, {})
            if nest.tile.reduce_axis is None:
                block += _epilogue(w, offsets, values, f"acc{p}", acc_width)
                continue
            combined, value = _lanes_combined(w, p)
            block += combined
            block += _epilogue(w, offsets, values, value, 1)
        return block

    if combine is None:
        body = grid.lines + _body(w, {})
    elif nest.tile.panel:
        body = grid.lines + _panel_fill(w) + _walk(w, overlap, section)
    else:
        body = grid.lines + section()
    params = _params(nest, ctype_of(workload.dtype))
    lines = _comments(nest, w.tiles)
    lines.append(f"__kernel {_attributes(nest, w.ctype)}void {name}({params}) {{")
    lines += indent(body)
    lines.append("}")
    args = tuple(ArgRef(d.name, "physical") for d in workload.buffers)
    return "\n".join(lines), Launch(name, args, nest.global_size, nest.local_size), w.overshot
