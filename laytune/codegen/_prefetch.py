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

from laytune.codegen._emit import paren, pointer
from laytune.codegen._loads import Writer
from laytune.codegen._nest import Prefetch
from laytune.layout import Expr, Var, substitute

__all__ = ["prefetch_every", "prefetch_lines"]


def _rank(w: Writer, plan: Prefetch) -> str:
    """The work-item's linear local id over the dimensions that share the block."""
    terms, stride = [], 1
    for d in plan.shared:
        lid = f"(int)get_local_id({d})"
        terms.append(lid if stride == 1 else f"{lid} * {stride}")
        stride *= w.nest.grid[d].local
    return " + ".join(terms) if len(terms) == 1 else f"({' + '.join(terms)})"


def _one(w: Writer, plan: Prefetch, counter: str, n: int) -> list[str]:
    """The prefetches of ``plan`` after a pass of ``n`` reduce steps: one
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
            lines = _lines(w, plan, f"{taken} + {r}" if r else taken)
            out += ["{", *(f"    {line}" for line in lines), "}"]
        return out
    assert plan.every % n == 0, (plan.every, n)
    lines = _lines(w, plan, taken)
    return [f"if (({counter} & {plan.every - 1}) == 0) {{", *(f"    {line}" for line in lines), "}"]


def _lines(w: Writer, plan: Prefetch, taken: str) -> list[str]:
    """The prefetch of the ``taken``-th share of the work-item's part of the block."""
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
    lines.append(
        f"const int {scope.name(along)} = min({first} + {plan.ahead}, {extent - plan.block})"
        f" + {scope.name(at)} % {plan.block};"
    )
    values: list[Expr] = [
        w.grid.base[k] if a.kind == "spatial" else Var(k) for k, a in enumerate(workload.axes)
    ]
    values[plan.along] = Var(along.index)
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

    def after(n: int) -> list[str]:
        step = [line for plan in plans for line in _one(w, plan, counter, n)]
        return [*step, f"++{counter};" if n == 1 else f"{counter} += {n};"]

    return [f"int {counter} = 0;  /* reduce steps so far: when to prefetch */"], after
