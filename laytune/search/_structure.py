"""The structure of a statement, read off its index expressions.

A workload's standard starts (:mod:`laytune.search._starts`) follow from what
its statement *does*, not from its name: which axes each buffer reads, which
reads slide over a window, which axes are summed. :func:`classify` sorts a
workload into one of three forms and names the roles of its axes and buffers:

* a **contraction**: two inputs multiplied and summed over the reduce axes
  they share, every index a bare axis (``C[i, j] += A[i, k] * B[k, j]``, a
  batched matmul, a 1 x 1 convolution once its windows of one are dropped).
  ``rows`` is the output axis only the ``left`` input reads, ``columns`` the
  output's innermost axis, read only by ``right``;
* a **window**: one input read at ``spatial * stride + reduce`` offsets (the
  activations), the other at bare axes (the filters): a convolution of any
  stride, dilation and kernel, depthwise or grouped. ``filters`` is the output
  axis only the filters read (None when depthwise), ``channels`` the reduce
  axis both read (None when depthwise), ``depth`` the axis both read that the
  output keeps (a depthwise convolution's channels), ``columns`` the output's
  innermost axis, ``windows`` the reduce axes of the sliding offsets;
* **elementwise**: anything else (element-wise, broadcast, reductions, max),
  started from plain layouts along the contiguous axis.

Only the buffers' index expressions, the axes' kinds and extents and the
reduction are read (:class:`~laytune.space.WorkloadLike`), plus the
statement's product form where the workload carries one.
"""

from __future__ import annotations

from dataclasses import dataclass

from laytune.layout import BinOp, Expr, Var, variables
from laytune.ops import BinaryOp, Load
from laytune.space import WorkloadLike

__all__ = ["Contraction", "Structure", "Window", "classify", "layout_critical"]


@dataclass(frozen=True)
class Contraction:
    """``out[..., rows, ..., columns] += left[.. rows .. k ..] * right[.. k .. columns ..]``.

    Axis fields are indices into ``workload.axes``; buffer fields are names."""

    left: str
    right: str
    rows: int
    columns: int
    reduce: tuple[int, ...]


@dataclass(frozen=True)
class Window:
    """A sliding-window accumulation of ``activations`` by ``filters_buffer``
    (see the module docstring for the axis roles)."""

    activations: str
    filters_buffer: str
    output: str
    filters: int | None
    channels: int | None
    depth: int | None
    columns: int
    windows: tuple[int, ...]


Structure = Contraction | Window | None
"""What :func:`classify` returns: None for the element-wise form."""


def _bare(index: Expr, trivial: frozenset[int]) -> int | None:
    """The axis ``index`` is, when it is one bare axis, possibly plus axes of
    extent one (a window of one point); else None."""
    if isinstance(index, Var):
        return index.index
    if isinstance(index, BinOp) and index.op == "+":
        lhs, rhs = _bare(index.lhs, trivial), _bare(index.rhs, trivial)
        if lhs is not None and rhs in trivial:
            return lhs
        if rhs is not None and lhs in trivial:
            return rhs
    return None


def _is_product(workload: WorkloadLike) -> bool:
    """Whether the value is one product of two loads (assumed where the
    workload does not carry its statement)."""
    statement = getattr(workload, "statement", None)
    if statement is None:
        return True
    value = statement.value
    return (
        isinstance(value, BinaryOp)
        and value.op == "*"
        and isinstance(value.lhs, Load)
        and isinstance(value.rhs, Load)
    )


def _body_reads(workload: WorkloadLike) -> set[str]:
    """The buffers the reduction's value reads (an epilogue's operands, a
    fused bias or residual, are read after it and left out); every input
    where the workload does not carry its statement."""
    statement = getattr(workload, "statement", None)
    if statement is None:
        return {b.name for b in workload.buffers}
    return {statement.value.lhs.buffer, statement.value.rhs.buffer}


def layout_critical(workload: WorkloadLike) -> bool:
    """Whether ``workload`` is one whose layouts a graph's plan takes from its
    tuned records (``tune_model`` tunes it, element-wise epilogues fold into
    it): a sum of one product of two loads, whether :func:`classify` names
    its form (a contraction, a window) or not (Winograd's transforms, whose
    indices ``2 th + a`` and ``oh // 2`` are neither). Other statements
    (element-wise, pooling, plain reductions) adopt the layouts planned
    around them."""
    return workload.reduction == "sum" and _is_product(workload)


def classify(workload: WorkloadLike, windows_of_one: bool = False) -> Structure:
    """The form of ``workload``'s statement (see the module docstring).

    Reduce axes of extent one (a 1 x 1 convolution's window) are dropped from
    the indices, so such a statement is a contraction, unless
    ``windows_of_one`` keeps them as windows."""
    if not _is_product(workload):
        return None
    inputs = [b for b in workload.buffers if b.role == "input" and b.name in _body_reads(workload)]
    outputs = [b for b in workload.buffers if b.role == "output"]
    if workload.reduction != "sum" or len(inputs) != 2 or len(outputs) != 1:
        return None
    axes = workload.axes
    reduce = tuple(k for k, a in enumerate(axes) if a.kind == "reduce")
    out = outputs[0]
    out_axes = [_bare(i, frozenset()) for i in out.indices]
    if not out_axes or None in out_axes or len(set(out_axes)) != len(out_axes):
        return None
    trivial = frozenset(k for k in reduce if axes[k].extent == 1 and not windows_of_one)
    bare = {b.name: [_bare(i, trivial) for i in b.indices] for b in inputs}
    if all(None not in dims for dims in bare.values()):
        return _contraction(workload, inputs, out_axes, bare, trivial)  # type: ignore[arg-type]
    return _window(workload, inputs, out, out_axes, bare)  # type: ignore[arg-type]


def _contraction(
    workload: WorkloadLike,
    inputs: list,
    out_axes: list[int],
    bare: dict[str, list[int]],
    trivial: frozenset[int],
) -> Contraction | None:
    reduce = tuple(
        k for k, a in enumerate(workload.axes) if a.kind == "reduce" and k not in trivial
    )
    reads = {name: set(dims) for name, dims in bare.items()}
    columns = out_axes[-1]
    readers = [b.name for b in inputs if columns in reads[b.name]]
    if len(readers) != 1 or not reduce:
        return None
    right = readers[0]
    left = next(b.name for b in inputs if b.name != right)
    if any(k not in reads[left] or k not in reads[right] for k in reduce):
        return None
    rows = [k for k in out_axes[:-1] if k in reads[left] and k not in reads[right]]
    if not rows:
        return None
    return Contraction(left, right, rows[-1], columns, reduce)


def _window(
    workload: WorkloadLike, inputs: list, out, out_axes: list[int], bare: dict
) -> Window | None:
    kinds = [a.kind for a in workload.axes]
    slid = [b for b in inputs if None in bare[b.name]]
    if len(slid) != 1:
        return None
    act = slid[0]
    filt = next(b for b in inputs if b is not act)
    if None in bare[filt.name]:
        return None
    windows: list[int] = []
    for index, axis in zip(act.indices, bare[act.name], strict=True):
        if axis is not None:
            continue
        used = variables(index)
        spatial = [k for k in used if kinds[k] == "spatial"]
        if len(spatial) != 1 or not any(kinds[k] == "reduce" for k in used):
            return None
        windows += sorted(k for k in used if kinds[k] == "reduce")
    act_axes = {k for k in bare[act.name] if k is not None}
    filt_axes = set(bare[filt.name])
    columns = out_axes[-1]
    if columns in act_axes or columns in filt_axes:
        return None  # the innermost output axis must slide over the input
    filters = [k for k in out_axes if k in filt_axes and k not in act_axes]
    channels = [k for k in filt_axes & act_axes if kinds[k] == "reduce"]
    depth = [k for k in out_axes if k in filt_axes and k in act_axes]
    if len(filters) > 1 or len(channels) > 1 or len(depth) > 1:
        return None
    if not filters and not depth:
        return None
    return Window(
        act.name,
        filt.name,
        out.name,
        filters[0] if filters else None,
        channels[0] if channels else None,
        depth[0] if depth else None,
        columns,
        tuple(windows),
    )
