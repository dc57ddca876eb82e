"""Flowing a layout through an operator, read off the statement's accesses.

An operator's statement reads and writes each buffer at index expressions of
the loop axes (:attr:`laytune.ops.BufferDecl.indices`). Two dimensions of two
buffers that are indexed by the same expression hold the same coordinate, so
a layout of one buffer says how to lay out the other: this is how a layout
rewrite on an operator's result flows to its operands (and, read the other
way, how an operand's layout proposes one for the result). No operator has a
hand-written rule; everything below is derived from the index expressions.

Given ``layout`` on buffer ``src`` and a target buffer ``dst``:

1. *Partners.* Dimension ``s`` of ``src`` and ``d`` of ``dst`` are exact
   partners when both are indexed by the same non-constant expression
   (``Y[n, c, h, w]`` and ``X[n, c, h, w]``; the ``c`` of a bias ``B[c]``).
   A dimension without an exact partner is loosely partnered with every
   ``dst`` dimension (not already an exact partner) whose index shares a loop
   axis with it (``oh`` of a pooling result and ``oh * 2 + kh`` of its input).
2. *Entries.* Each physical index of ``layout`` (an expression of ``src``'s
   dimensions) is, in order:

   * rewritten onto ``dst`` when every dimension it uses has an exact partner
     (``c // 4`` of the result becomes ``c // 4`` of the bias);
   * replaced by its loose partners, when it is one bare dimension (``oh``
     of a pooling result becomes ``h`` of its input);
   * dropped when none of its dimensions has a partner (``n``, ``h``, ``w``
     of a result for a bias read at ``B[c]``: a broadcast);
   * otherwise the layout cannot flow (:class:`FlowError`): it splits or
     mixes a coordinate that ``dst`` only sees through other arithmetic,
     as a reshape does.
3. *Remaining dimensions* of ``dst`` (reduce axes, constant indices) are
   placed as bare indices next to their neighbours: a run of them goes just
   before the first physical index that uses the next placed dimension, or,
   at the end of ``dst``, just after the first one that uses the previous.
   A sum over H of a result laid out ``[n, c // 4, w, c % 4]`` thus reads
   its input as ``[n, c // 4, h, w, c % 4]``; the seed's sum over H and W to
   ``[N, C // 4, C % 4]`` reads ``[n, c // 4, h, w, c % 4]``.
4. Axis separators are kept only when the layout carries over unchanged
   (every entry rewritten, nothing dropped or placed); the result must be a
   valid (injective) layout of ``dst``.
"""

from __future__ import annotations

from laytune.exceptions import FlowError, LayoutError
from laytune.layout import (
    Const,
    Expr,
    IndexMap,
    Layout,
    Var,
    custom,
    default_names,
    identity,
    substitute,
    to_text,
    variables,
)
from laytune.ops import Workload

__all__ = ["FlowError", "flow_layout"]


def _partners(
    workload: Workload, src: str, dst: str
) -> tuple[dict[int, int], dict[int, list[int]]]:
    src_idx = workload.buffer(src).indices
    dst_idx = workload.buffer(dst).indices
    exact: dict[int, int] = {}
    for s, e in enumerate(src_idx):
        if not variables(e):
            continue
        same = [d for d, f in enumerate(dst_idx) if f == e]
        if len(same) > 1:
            raise FlowError(
                f"{workload.name}: {dst} reads {to_text(e, workload.axis_names)} in dimensions "
                f"{same}; which one dimension {s} of {src} is, is ambiguous"
            )
        if same:
            exact[s] = same[0]
    taken = set(exact.values())
    loose: dict[int, list[int]] = {}
    for s, e in enumerate(src_idx):
        if s not in exact:
            axes = variables(e)
            loose[s] = [d for d, f in enumerate(dst_idx) if d not in taken and axes & variables(f)]
    return exact, loose


def _place(outs: list[Expr], unplaced: list[int], ndim: int) -> None:
    """Insert the unplaced dimensions of ``dst`` next to their placed neighbours."""
    runs: list[list[int]] = []
    for d in unplaced:
        if runs and runs[-1][-1] == d - 1:
            runs[-1].append(d)
        else:
            runs.append([d])
    for run in runs:
        after, before = run[-1] + 1, run[0] - 1
        if after < ndim:
            at = next(k for k, e in enumerate(outs) if after in variables(e))
        elif before >= 0:
            at = next(k for k, e in enumerate(outs) if before in variables(e)) + 1
        else:
            at = len(outs)
        outs[at:at] = [Var(d) for d in run]


def flow_layout(workload: Workload, layout: Layout, src: str, dst: str) -> Layout:
    """The layout of buffer ``dst`` that ``layout`` of buffer ``src`` implies
    through ``workload``'s accesses (see the module docstring for the rules).

    Laws: flowing a layout between two buffers read at the same indices gives
    it back unchanged; the result is a valid layout of ``dst``'s shape.
    Raises :class:`FlowError` naming the physical index that cannot flow.
    """
    src_decl, dst_decl = workload.buffer(src), workload.buffer(dst)
    if layout.shape != src_decl.shape:
        raise FlowError(
            f"{workload.name}: a layout of shape {layout.shape} given for buffer {src} of "
            f"shape {src_decl.shape}"
        )
    exact, loose = _partners(workload, src, dst)
    m = layout.index_map
    outs: list[Expr] = []
    placed: set[int] = set()
    carried = True  # every entry rewritten one to one
    for entry in m.outputs:
        dims = variables(entry)
        if dims and dims <= exact.keys():
            values: list[Expr] = [
                Var(exact[t]) if t in exact else Const(0) for t in range(m.ndim_in)
            ]
            outs.append(substitute(entry, values))
            placed |= {exact[t] for t in dims}
        elif isinstance(entry, Var) and loose.get(entry.index):
            carried = False
            for d in loose[entry.index]:
                if d not in placed:
                    outs.append(Var(d))
                    placed.add(d)
        elif not any(t in exact or loose.get(t) for t in dims):
            carried = False  # a broadcast: dst does not vary along these dimensions
        else:
            raise FlowError(
                f"{workload.name}: physical index {to_text(entry, m.params)} of {src}'s layout "
                f"{m} cannot flow to {dst}, which reads those coordinates only through "
                f"{', '.join(to_text(e, workload.axis_names) for e in dst_decl.indices)}"
            )
    unplaced = [d for d in range(len(dst_decl.shape)) if d not in placed]
    _place(outs, unplaced, len(dst_decl.shape))
    carried = carried and not unplaced and len(outs) == m.ndim_out
    if carried and dst_decl.shape == layout.shape and tuple(outs) == m.outputs:
        return layout  # the same layout on the same shape: keep its family
    separators = m.separators if carried else ()
    try:
        index_map = IndexMap(default_names(len(dst_decl.shape)), tuple(outs), separators)
        if index_map.is_identity():
            return identity(dst_decl.shape)
        return custom(dst_decl.shape, index_map)
    except LayoutError as err:
        raise FlowError(
            f"{workload.name}: {m} on {src} flows to an invalid layout of {dst}: {err}"
        ) from None
