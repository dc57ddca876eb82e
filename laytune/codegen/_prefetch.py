"""Emitting the ``prefetch`` knob: each work-item prefetches its share of the
block of a shared input that the next work-group reads (see
:class:`~laytune.codegen._nest.Prefetch` for the plan).

Written after a pass of ``n`` reduce steps::

    if ((ahead & (every - 1)) == 0) {
        const int B_at = min(rank * share + (ahead >> log2(every)), touches - 1) * step;
        const int B_j = min(j_first + ahead_elements, extent - block) + B_at % block;
        const int B_k = B_at / block;
        __builtin_prefetch(B + offset(B_k, B_j));
    }
    ahead += n;

where ``rank`` is the work-item's place among the items that share the
block; the offset goes through the buffer's layout like any load, so a
packed panel's prefetches walk it line by line. The last work-group along
the axis prefetches its own block again (``min``): no prefetch leaves the
buffer.

``n`` is 1 (the innermost reduce step, in each copy of an unrolled one), or
the steps of the innermost loops that the emitter puts it after, a power of
two that divides ``every``: ``ahead`` then meets every multiple of
``every`` that it met step by step, and the same prefetches are issued,
without a test in each step of a short loop (a convolution's 8 channels of
a block, which the test kept from being unrolled: ResNet-18's conv2d (1,
256, 14, 14) x 256 in blocks of 8 filters by the 14-wide row took 4.87 ms
so on a Zen 3 host, 2.71 with the test after the channel loop and 2.63
without prefetches). Or the steps of a short innermost loop alone, a power
of two that ``every`` divides (AVX-512's blocks of 16 channels, a prefetch
every 4): the pass's ``n / every`` prefetches (``per`` times that) go after
it, untested, the same ones as step by step.
"""

from __future__ import annotations

from collections.abc import Callable

from laytune.codegen._emit import BufferAccess, Scope, paren, pointer
from laytune.codegen._loads import Writer
from laytune.codegen._nest import Prefetch
from laytune.layout import Const, Expr, Var, substitute
from laytune.ops import Workload

__all__ = ["block_is_one_run", "prefetch_every", "prefetch_lines"]


def _rank(w: Writer, plan: Prefetch) -> str:
    """The work-item's linear local id over the dimensions that share the block."""
    terms, stride = [], 1
    for d in plan.shared:
        lid = f"(int)get_local_id({d})"
        terms.append(lid if stride == 1 else f"{lid} * {stride}")
        stride *= w.nest.grid[d].local
    return " + ".join(terms) if len(terms) == 1 else f"({' + '.join(terms)})"


def _one(w: Writer, plan: Prefetch, run: bool, counter: str, n: int) -> list[str]:
    """The prefetches of ``plan`` (``run``: its blocks are runs of memory,
    :func:`block_is_one_run`) after a pass of ``n`` reduce steps: one
    under the counter's test where ``n`` divides ``every``; ``n / every``
    times ``per`` of them, untested, where ``every`` divides ``n`` (the
    counter then meets a multiple of ``every`` at every pass)."""
    shift = plan.every.bit_length() - 1
    taken = f"({counter} >> {shift})" if shift else counter
    if plan.per > 1:
        taken = f"{taken} * {plan.per}"
    if n % plan.every == 0:
        out = []
        for r in range(n // plan.every * plan.per):
            lines = _lines(w, plan, run, f"{taken} + {r}" if r else taken)
            out += ["{", *(f"    {line}" for line in lines), "}"]
        return out
    assert plan.every % n == 0, (plan.every, n)
    lines = _lines(w, plan, run, taken)
    return [f"if (({counter} & {plan.every - 1}) == 0) {{", *(f"    {line}" for line in lines), "}"]


def block_is_one_run(workload: Workload, access: BufferAccess, plan: Prefetch) -> bool:
    """Whether every block of ``plan``'s input (``block`` elements along
    ``along`` from a multiple of ``block``, every value of the reduce axes)
    is one run of consecutive physical elements, as a blocked operand's
    outermost block is: then the prefetches walk it by address, with no
    division to find each line's logical indices (on a convolution's
    filters, a prefetch every few channels took four of them per line and
    a fifth of the kernel's time). Decided on the layout's offset
    expressions over symbolic ranges: the offsets from the block's first
    element span exactly its element count, and the map is injective.
    ``access`` is how the kernel reaches ``plan``'s input."""
    buf = workload.buffer(plan.buffer)
    extent = workload.axes[plan.along].extent
    if extent % plan.block or not all(isinstance(e, Var) for e in buf.indices):
        return False
    spatial = {e.index for e in buf.indices if workload.axes[e.index].kind == "spatial"}  # type: ignore[attr-defined]
    if spatial != {plan.along}:
        return False
    scope = Scope()
    block = scope.var("block", 0, extent // plan.block - 1)
    inside = scope.var("inside", 0, plan.block - 1)
    values: list[Expr] = [Var(k) for k in range(len(workload.axes))]
    starts: list[Expr] = list(values)
    values[plan.along] = block * plan.block + inside
    starts[plan.along] = block * plan.block
    count = plan.block
    for k in plan.reduce:
        extent_k = workload.axes[k].extent
        values[k] = scope.var(f"r{k}", 0, extent_k - 1)
        starts[k] = Const(0)
        count *= extent_k
    offset = access.flat_offset([substitute(e, values) for e in buf.indices])
    start = access.flat_offset([substitute(e, starts) for e in buf.indices])
    return scope.bounds(scope.simplify(offset - start)) == (0, count - 1)


def _lines(w: Writer, plan: Prefetch, run: bool, taken: str) -> list[str]:
    """The prefetch of the ``taken``-th share of the work-item's part of the
    block; with ``run``, the line ``taken`` shares into the block's run."""
    scope, workload = w.scope, w.nest.workload
    buf = workload.buffer(plan.buffer)
    extent = workload.axes[plan.along].extent
    at = scope.var(f"{plan.buffer}_at", 0, (plan.touches - 1) * plan.step)
    lines = [
        f"const int {scope.name(at)} = min({_rank(w, plan)} * {plan.share} + {taken}, "
        f"{plan.touches - 1}) * {plan.step};"
    ]
    along = scope.var(f"{plan.buffer}_{workload.axes[plan.along].name}", 0, extent - 1)
    first = paren(scope.c(w.grid.base[plan.along]))
    next_block = f"min({first} + {plan.ahead}, {extent - plan.block})"
    values: list[Expr] = [
        w.grid.base[k] if a.kind == "spatial" else Var(k) for k, a in enumerate(workload.axes)
    ]
    values[plan.along] = Var(along.index)
    if run:
        lines.append(f"const int {scope.name(along)} = {next_block};")
        for k in plan.reduce:
            values[k] = Const(0)
        indices = [substitute(e, values) for e in buf.indices]
        offset = w.accesses[plan.buffer].flat_offset(indices) + Var(at.index)
        lines.append(f"__builtin_prefetch({pointer(plan.buffer, scope.c(offset))});")
        return lines
    lines.append(f"const int {scope.name(along)} = {next_block} + {scope.name(at)} % {plan.block};")
    inner = 1
    for k in reversed(plan.reduce):
        ext = workload.axes[k].extent
        var = scope.var(f"{plan.buffer}_{workload.axes[k].name}", 0, ext - 1)
        text = f"{scope.name(at)} / {plan.block * inner}"
        outermost = k == plan.reduce[0]
        lines.append(f"const int {scope.name(var)} = {text if outermost else f'({text}) % {ext}'};")
        values[k] = Var(var.index)
        inner *= ext
    indices = [substitute(e, values) for e in buf.indices]
    offset = w.accesses[plan.buffer].flat_offset(indices)
    lines.append(f"__builtin_prefetch({pointer(plan.buffer, scope.c(offset))});")
    return lines


def prefetch_every(w: Writer) -> int:
    """Reduce steps between two prefetches of the input prefetched most
    often (a power of two); 0 without ``prefetch``."""
    return min((plan.every for plan in w.nest.prefetch), default=0)


def prefetch_lines(w: Writer) -> tuple[list[str], Callable[[int], list[str]] | None]:
    """(the counter's declaration before the reduce loops, the lines written
    after a pass of ``n`` reduce steps, as a function of ``n``); ([], None)
    without ``prefetch``."""
    plans = w.nest.prefetch
    if not plans:
        return [], None
    counter = w.scope.name(w.scope.var("ahead", 0, 0))
    # decided once per input: every pass writes its prefetches again
    runs = [(p, block_is_one_run(w.nest.workload, w.accesses[p.buffer], p)) for p in plans]

    def after(n: int) -> list[str]:
        step = [line for plan, run in runs for line in _one(w, plan, run, counter, n)]
        return [*step, f"++{counter};" if n == 1 else f"{counter} += {n};"]

    return [f"int {counter} = 0;  /* reduce steps so far: when to prefetch */"], after
