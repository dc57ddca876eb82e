"""Graph-level layout planning: freeze, flow, fold.

1. **Freeze.** Every layout-critical operator (one the layout source has a
   candidate for, or one named in ``critical``) keeps the source's
   candidate: its operand and result layouts are frozen. Every other
   operator starts in identity layouts. Wherever a tensor's producer writes
   one layout and a reader needs another there is a layout rewrite; graph
   inputs arrive and graph outputs leave in the logical (identity) layout.
2. **Flow backwards** (results to operands, as the seed prefers). For each
   planned operator, last to first, each layout its readers need is flowed
   through it (:func:`~laytune.plan.flow_layout`): its result takes that
   layout and each operand the layout the statement's accesses imply. The
   rewrite on the result is gone; on each operand edge the flowed rewrite
   folds into the rewrite already there (:meth:`Rewrite.then`) and cancels
   when the fold is the identity, or folds into a constant. A flow is kept
   when it does not increase the bytes all rewrites move, so a rewrite is not
   duplicated onto two graph inputs, and it is refused (with the reason in the
   plan's log) when the layout cannot flow or codegen refuses the result.
3. **Flow forwards** where that lowers the cost: a planned operator may take
   the layout its operand already has (a rewrite moves past element-wise
   operators to where the tensor is smaller, after a pooling). A forward
   sweep is kept only when it lowers the total; sweeps repeat until one does
   not.
4. **Fold.** Each tensor is kept on the device in its producer's layout; each
   distinct layout a reader needs is one rewrite from it (two adjacent
   rewrites fold into one, from the producer's layout straight to the
   reader's), and a rewrite on a constant is done once on the host when the
   plan is compiled. A producer whose padding promises nothing (pad value
   None or UNDEF) is made to write the constant its reader needs, which is
   what lets a crop and a pad cancel; a producer that writes another
   constant keeps a rewrite.

5. **Knobs.** A planned operator runs the fastest record of its workload
   with the layouts it got, else a vector along an axis all its layouts keep
   contiguous, else the plain kernel (:mod:`laytune.plan._knobs`); its
   layouts and pad values stay as planned.

**Fusing** (``fuse=True``), after step 1: each layout-critical operator
takes in the element-wise operators that read its result alone (a bias, a
ReLU, a residual add; :mod:`laytune.plan._fuse`), which then run in its
kernel on the accumulators before the store, in its planned layout. The
fused workload's key names its epilogue; a source's candidate for that key
is used, else the operator's own candidate with the epilogue's operands laid
out as its result flows to them. Steps 2 to 5 then plan the fused graph.

With ``minimize=False`` the plan stops after step 1 and routes every rewrite
through the logical layout: each frozen operator in its own best layouts with
conversions around it (constants still packed on the host).

**Weighing.** A layout source that keeps records offers each layout-critical
operator several candidates (:func:`~laytune.plan._price.lookup_options`),
not only its fastest kernel. Before step 2 the planner picks one per
operator, one operator at a time while the prediction improves: the set
whose compute time plus the time of the rewrites left after steps 2 to 4 is
least (:class:`~laytune.plan._price.PlanPricer`: recorded conversion
kernels, the operators' own pack and unpack times, else an estimate from the
bytes moved). So a slower kernel that needs fewer conversions wins where the
conversions cost more than it loses. Every plan carries the predicted time
of each operator and rewrite; :meth:`Plan.with_timing` adds measured ones.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from laytune.codegen import GENERIC_DEVICE, lower
from laytune.device_info import DeviceInfo
from laytune.exceptions import (
    LayoutError,
    LayoutRejectedError,
    LaytuneError,
    PlanError,
    UnknownNameError,
)
from laytune.layout import Layout, identity
from laytune.ops import Workload
from laytune.plan._execute import CompiledPlan, PlanTiming, runs_as_view, same_order
from laytune.plan._flow import FlowError, flow_layout
from laytune.plan._fuse import Fusion, bare_candidate, fuse_into
from laytune.plan._graph import Graph
from laytune.plan._knobs import planned_kernel
from laytune.plan._price import (
    Option,
    PlanPricer,
    Prediction,
    is_store,
    lookup_options,
    measured_option,
)
from laytune.plan._rewrite import (
    Rewrite,
    is_identity_layout,
    pad_text,
    pads_agree,
    refinable,
    same_layout,
)
from laytune.plan._source import SourceLike
from laytune.plan._weigh import weigh
from laytune.space import Candidate, PadValue

if TYPE_CHECKING:
    import pyopencl as cl

__all__ = ["Placement", "Plan", "PlanError", "Version", "plan_layouts"]

Origin = Literal["input", "constant", "operator", "rewrite"]
_MAX_SWEEPS = 8


@dataclass(frozen=True)
class Version:
    """One physical copy of a tensor on the device: ``layout``, what its padding
    holds, and how it is made: uploaded (``input``), packed on the host
    (``constant``), written by the producer (``operator``) or converted from
    version ``source`` (``rewrite``)."""

    tensor: str
    layout: Layout
    pad: PadValue
    origin: Origin
    source: int | None = None
    consumers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Placement:
    """The candidate an operator runs with; ``frozen`` when it came from the source."""

    op: str
    candidate: Candidate
    frozen: bool
    note: str


@dataclass
class _Resolution:
    versions: list[Version]
    reads: dict[tuple[str, str], int]
    outputs: dict[str, int]
    refined: dict[str, PadValue]

    def storage(self, tensor: str) -> int:
        return next(
            i
            for i, v in enumerate(self.versions)
            if v.tensor == tensor and v.origin in ("input", "operator")
        )

    def rewrite(self, i: int, dtype: str) -> Rewrite:
        return _rewrite_of(self.versions, i, dtype)


def _rewrite_of(versions: Sequence[Version], i: int, dtype: str) -> Rewrite:
    """The rewrite that makes version ``i`` from its source version."""
    v = versions[i]
    assert v.source is not None
    src = versions[v.source]
    return Rewrite(v.tensor, dtype, src.layout, v.layout, src.pad, v.pad, v.consumers)


def _resolve(
    graph: Graph,
    state: Mapping[str, Candidate],
    via_identity: bool,
    tensors: Sequence[str] | None = None,
) -> _Resolution:
    """The versions every tensor needs when each operator runs with ``state``
    (only those of ``tensors``, when given: each tensor's versions depend
    only on its producer's and its readers' candidates)."""
    versions: list[Version] = []
    users: list[list[str]] = []
    reads: dict[tuple[str, str], int] = {}
    outputs: dict[str, int] = {}
    refined: dict[str, PadValue] = {}

    def add(version: Version, mine: list[int]) -> int:
        versions.append(version)
        users.append([])
        mine.append(len(versions) - 1)
        return len(versions) - 1

    def serving(mine: list[int], layout: Layout, pad: PadValue) -> int | None:
        for i in mine:
            v = versions[i]
            if same_layout(v.layout, layout) and (not layout.has_padding or pads_agree(v.pad, pad)):
                return i
        return None

    chosen = graph.tensors.values() if tensors is None else (graph.tensors[t] for t in tensors)
    for tensor in chosen:
        uses: list[tuple[str, tuple[str, str] | None, Layout, PadValue]] = []
        for op_name, port in graph.uses(tensor.name):
            cand = state[op_name]
            uses.append(
                (f"{op_name}.{port}", (op_name, port), cand.layout(port), cand.pad_value(port))
            )
        if tensor.name in graph.outputs:
            uses.append(("output", None, identity(tensor.shape), None))
        # readers that need a constant in the padding first: their copy serves the others too
        uses.sort(key=lambda use: refinable(use[3]))
        mine: list[int] = []
        if tensor.kind != "constant":
            if tensor.kind == "input":
                layout, pad = identity(tensor.shape), None
            else:
                assert tensor.producer is not None
                cand = state[tensor.producer]
                port = graph.op(tensor.producer).output_port
                layout, pad = cand.layout(port), cand.pad_value(port)
                if layout.has_padding and refinable(pad):
                    wanted = [
                        p for _, _, lay, p in uses if not refinable(p) and same_layout(lay, layout)
                    ]
                    if wanted:
                        pad = refined[tensor.producer] = wanted[0]
            add(
                Version(
                    tensor.name, layout, pad, tensor.kind if tensor.kind == "input" else "operator"
                ),
                mine,
            )
        for label, key, layout, pad in uses:
            i = serving(mine, layout, pad)
            if i is None and tensor.kind == "constant":
                i = add(Version(tensor.name, layout, pad, "constant"), mine)
            elif i is None:
                src = mine[0]
                if via_identity and not (
                    is_identity_layout(versions[src].layout) or is_identity_layout(layout)
                ):
                    logical = identity(tensor.shape)
                    found = serving(mine, logical, None)
                    src = (
                        found
                        if found is not None
                        else add(Version(tensor.name, logical, None, "rewrite", src), mine)
                    )
                i = add(Version(tensor.name, layout, pad, "rewrite", src), mine)
            users[i].append(label)
            if key is None:
                outputs[tensor.name] = i
            else:
                reads[key] = i
    final = [
        Version(v.tensor, v.layout, v.pad, v.origin, v.source, tuple(u))
        for v, u in zip(versions, users, strict=True)
    ]
    return _Resolution(final, reads, outputs, refined)


def _cost(graph: Graph, res: _Resolution) -> int:
    return sum(
        res.rewrite(i, graph.tensors[v.tensor].dtype).nbytes
        for i, v in enumerate(res.versions)
        if v.origin == "rewrite"
    )


def _identity_candidate(workload: Workload) -> Candidate:
    return Candidate.make({b.name: identity(b.shape) for b in workload.buffers})


class _Minimizer:
    """Steps 2 to 4 of the module docstring, on a mutable ``state``."""

    def __init__(
        self,
        graph: Graph,
        state: dict[str, Candidate],
        frozen: Collection[str],
        device: DeviceInfo,
        log: list[str],
        derived: dict[tuple[str, Any], Candidate | LaytuneError] | None = None,
    ) -> None:
        self.graph = graph
        self.state = state
        self.frozen = frozen
        self.device = device
        self.log = log
        self.notes: dict[str, str] = {}
        self.refusals: dict[tuple[str, str, str], str] = {}
        self._derived = {} if derived is None else derived
        self._around: dict[str, tuple[str, ...]] = {}
        self._tensor_costs: dict[tuple[Any, ...], tuple[int, tuple[Candidate, ...]]] = {}

    def cost(self, state: Mapping[str, Candidate]) -> int:
        """Bytes the rewrites of ``state`` move: a sum over tensors, each
        tensor's share memoised on the candidates of its producer and readers
        (a move changes one operator, so most shares are found again)."""
        return sum(self._tensor_cost(tensor, state) for tensor in self.graph.tensors)

    def _tensor_cost(self, tensor: str, state: Mapping[str, Candidate]) -> int:
        ops = self._around.get(tensor)
        if ops is None:
            producer = self.graph.tensors[tensor].producer
            readers = dict.fromkeys(op for op, _ in self.graph.uses(tensor))
            ops = self._around[tensor] = (*([producer] if producer else []), *readers)
        cands = tuple(state[op] for op in ops)
        key = (tensor, *map(id, cands))
        found = self._tensor_costs.get(key)
        if found is None:
            res = _resolve(self.graph, state, via_identity=False, tensors=(tensor,))
            # the candidates stay referenced by the memo, so their ids stay theirs
            found = self._tensor_costs[key] = (_cost(self.graph, res), cands)
        return found[0]

    def derive(self, op_name: str, out_layout: Layout) -> Candidate:
        """The planned operator's candidate whose result is laid out ``out_layout``."""
        key = (op_name, (out_layout.index_map, out_layout.shape))
        if key not in self._derived:
            op = self.graph.op(op_name)
            w = op.workload
            layouts = {op.output_port: out_layout}
            try:
                for decl in w.inputs:
                    layouts[decl.name] = flow_layout(w, out_layout, op.output_port, decl.name)
                cand = Candidate.make(layouts)
                lower(w, cand, self.device)
                self._derived[key] = cand
            # LayoutError: lowering needs an inverse of each flowed layout
            # (its pack kernel), which a flowed swizzle may not have.
            except (FlowError, LayoutRejectedError, LayoutError) as err:
                self._derived[key] = err
        found = self._derived[key]
        if isinstance(found, LaytuneError):
            raise found
        return found

    def _try(
        self, op_name: str, proposals: list[tuple[Layout, str]], direction: str
    ) -> tuple[int, Candidate, str] | None:
        """The cheapest proposal no costlier than the current state, if any."""
        current = self.state[op_name]
        out = self.graph.op(op_name).output_port
        best: tuple[int, Candidate, str] | None = None
        base = self.cost(self.state)
        for layout, origin in proposals:
            if same_layout(layout, current.layout(out)):
                continue
            try:
                cand = self.derive(op_name, layout)
            except (FlowError, LayoutRejectedError, LayoutError) as err:
                self._refuse(
                    op_name,
                    direction,
                    layout,
                    f"{layout.index_map} cannot flow {direction} through {op_name} ({origin}): {err}",
                )
                continue
            cost = self.cost({**self.state, op_name: cand})
            if cost <= base and (best is None or cost < best[0]):
                best = (cost, cand, origin)
        return best

    def _refuse(self, op_name: str, direction: str, layout: Layout, why: str) -> None:
        self.refusals.setdefault((op_name, direction, str(layout.index_map)), why)

    def _refusals_that_kept_a_rewrite(self) -> list[str]:
        """The refusals whose rewrite is still in the final plan, for the log."""
        res = _resolve(self.graph, self.state, via_identity=False)
        kept = []
        for (op_name, direction, _), why in self.refusals.items():
            op = self.graph.op(op_name)
            if direction == "forward":
                stays = any(
                    res.versions[res.reads[(op_name, p)]].origin == "rewrite" for p, _ in op.inputs
                )
            else:
                stays = any(v.tensor == op.output and v.origin == "rewrite" for v in res.versions)
            if stays:
                kept.append(f"kept a rewrite: {why}")
        return kept

    def _accept(self, op_name: str, cand: Candidate, what: str) -> None:
        graph = self.graph
        old = self.state[op_name]
        self.state[op_name] = cand
        res = _resolve(graph, self.state, via_identity=False)
        op = graph.op(op_name)
        lines = [f"flowed {cand.layout(op.output_port).index_map} {what} through {op_name}"]
        for port, tensor_name in op.inputs:
            before, after = old.layout(port), cand.layout(port)
            if same_layout(before, after):
                continue
            tensor = graph.tensors[tensor_name]
            if tensor.kind == "constant":
                lines.append(
                    f"  {op_name}.{port}: folded into constant {tensor_name} as {after.index_map}"
                )
                continue
            stored = res.versions[res.storage(tensor_name)]
            existing = Rewrite(tensor_name, tensor.dtype, stored.layout, before, stored.pad)
            flowed = Rewrite(tensor_name, tensor.dtype, before, after, None, cand.pad_value(port))
            folded = existing.then(flowed)
            chain = f"{stored.layout.index_map} -> {before.index_map} -> {after.index_map}"
            if res.versions[res.reads[(op_name, port)]].origin != "rewrite":
                how = "cancelled" if folded.is_identity else "cancelled (padding refined)"
                lines.append(f"  {op_name}.{port} <- {tensor_name}: {how}: {chain}")
            elif same_layout(stored.layout, before):
                lines.append(
                    f"  {op_name}.{port} <- {tensor_name}: rewrite {before.index_map} -> "
                    f"{after.index_map} moved onto this edge"
                )
            else:
                lines.append(
                    f"  {op_name}.{port} <- {tensor_name}: folded into one rewrite: {chain}"
                )
        self.notes[op_name] = what
        self.log.extend(lines)

    def backward(self) -> None:
        for op in reversed(self.graph.ops):
            if op.name in self.frozen:
                continue
            res = _resolve(self.graph, self.state, via_identity=False, tensors=(op.output,))
            proposals = [
                (v.layout, ", ".join(v.consumers))
                for v in res.versions
                if v.tensor == op.output and v.origin == "rewrite"
            ]
            best = self._try(op.name, proposals, "back")
            if best is not None:
                self._accept(op.name, best[1], f"back from {best[2]}")

    def forward(self) -> None:
        for op in self.graph.ops:
            if op.name in self.frozen:
                continue
            ins = tuple(dict.fromkeys(t for _, t in op.inputs))
            res = _resolve(self.graph, self.state, via_identity=False, tensors=ins)
            proposals = []
            for port, tensor in op.inputs:
                if self.graph.tensors[tensor].kind == "constant":
                    continue
                stored = res.versions[res.storage(tensor)].layout
                try:
                    layout = flow_layout(op.workload, stored, port, op.output_port)
                except FlowError as err:
                    self._refuse(
                        op.name,
                        "forward",
                        stored,
                        f"{stored.index_map} of {tensor} cannot flow forward through {op.name}: {err}",
                    )
                    continue
                proposals.append((layout, f"{tensor} ({port})"))
            best = self._try(op.name, proposals, "forward")
            if best is not None:
                self._accept(op.name, best[1], f"forward from {best[2]}")

    def run(self) -> dict[str, Candidate]:
        for _ in range(_MAX_SWEEPS):
            self.backward()
            before, saved, logged = self.cost(self.state), dict(self.state), len(self.log)
            saved_notes = dict(self.notes)
            self.forward()
            if self.cost(self.state) < before:
                continue
            self.state, self.notes = saved, saved_notes
            del self.log[logged:]
            break
        self.log.extend(self._refusals_that_kept_a_rewrite())
        return self.state


@dataclass(frozen=True)
class Plan:
    """Layouts of every operator and tensor of a graph, and the rewrites left.

    ``versions`` are the physical copies of tensors that live on the device;
    ``reads`` says which copy each operator port reads and ``outputs`` which
    copy each graph output is read back from. ``log`` tells how the plan was
    reached. ``str(plan)`` is :meth:`describe`.
    """

    graph: Graph = field(repr=False, compare=False)
    device: DeviceInfo
    placements: tuple[Placement, ...]
    versions: tuple[Version, ...]
    reads: tuple[tuple[str, str, int], ...]
    outputs: tuple[tuple[str, int], ...]
    log: tuple[str, ...]
    minimized: bool
    predictions: tuple[Prediction, ...] = ()
    measured: tuple[tuple[str, float], ...] = ()
    conversions: Any = field(default=None, repr=False, compare=False)
    fusions: tuple[Fusion, ...] = ()

    def with_timing(self, timing: PlanTiming) -> Plan:
        """This plan with the measured time of each step of ``timing`` (from
        :meth:`CompiledPlan.profile`), which :meth:`describe` shows beside
        the predicted one."""
        from dataclasses import replace

        totals: dict[str, float] = {}
        for label, seconds in timing.per_step:
            totals[label] = totals.get(label, 0.0) + seconds
        return replace(self, measured=tuple(totals.items()))

    @property
    def predicted_s(self) -> float | None:
        """The predicted time of one run: every operator and rewrite (None
        when a step has no prediction)."""
        times = [p.seconds for p in self.predictions]
        if not times or any(t is None for t in times):
            return None
        return sum(times)  # type: ignore[arg-type]

    def _times(self, label: str) -> str:
        predicted = next((p for p in self.predictions if p.label == label), None)
        measured = dict(self.measured).get(label)
        parts = []
        if predicted is not None and predicted.seconds is not None:
            parts.append(f"predicted {predicted.seconds * 1e3:.4g} ms ({predicted.source})")
        if self.measured:
            parts.append("measured " + ("-" if measured is None else f"{measured * 1e3:.4g} ms"))
        return "; ".join(parts)

    def placement(self, op: str) -> Placement:
        for p in self.placements:
            if p.op == op:
                return p
        raise UnknownNameError(f"plan has no operator {op!r}")

    def candidate(self, op: str) -> Candidate:
        return self.placement(op).candidate

    def read_index(self, op: str, port: str) -> int:
        """Index in ``versions`` of the copy operator ``op`` reads at ``port``."""
        for name, p, i in self.reads:
            if (name, p) == (op, port):
                return i
        raise UnknownNameError(f"plan has no port {op}.{port}")

    def read(self, op: str, port: str) -> Version:
        """The copy operator ``op`` reads at ``port``."""
        return self.versions[self.read_index(op, port)]

    def layout_of(self, tensor: str) -> Layout:
        """The layout ``tensor`` is stored in: its producer's (identity for an input)."""
        for v in self.versions:
            if v.tensor == tensor and v.origin in ("input", "operator"):
                return v.layout
        raise UnknownNameError(f"{tensor!r} is a constant (see plan.folded) or not in the plan")

    @property
    def rewrites(self) -> tuple[Rewrite, ...]:
        """The rewrites that run on the device, in the order the plan makes them."""
        return tuple(
            _rewrite_of(self.versions, i, self.graph.tensors[v.tensor].dtype)
            for i, v in enumerate(self.versions)
            if v.origin == "rewrite"
        )

    @property
    def folded(self) -> tuple[Version, ...]:
        """Constant copies, packed on the host into the layout their readers need."""
        return tuple(v for v in self.versions if v.origin == "constant")

    @property
    def rewrite_bytes(self) -> int:
        """Bytes all rewrites move per run (each reads its source and writes its copy)."""
        return sum(r.nbytes for r in self.rewrites)

    def describe(self) -> str:
        g = self.graph
        rewrites = self.rewrites
        fused = sum(len(f.absorbed) for f in self.fusions)
        head = (
            f"plan {g.name!r} for {self.device.name}: {len(g.ops)} operators"
            + (f" ({fused} fused into epilogues)" if fused else "")
            + ", "
            f"{len(rewrites)} rewrites moving {_size(self.rewrite_bytes)} per run, "
            f"{len(self.folded)} constant copies packed on the host"
        )
        lines = [head]
        if self.predictions:
            total = self.predicted_s
            line = "predicted " + ("-" if total is None else f"{total * 1e3:.4g} ms") + " per run"
            if self.measured:
                line += f", measured {sum(t for _, t in self.measured) * 1e3:.4g} ms"
            lines.append(line)
        lines.append("tensors:")
        width = max(len(t) for t in g.tensors)
        for t in g.tensors.values():
            shape = f"{t.dtype}{list(t.shape)}"
            for v in self.versions:
                if v.tensor != t.name or v.origin == "rewrite":
                    continue
                kind = {"input": "input", "operator": "value", "constant": "constant"}[v.origin]
                pad = f"  padding {pad_text(v.pad)}" if v.layout.has_padding else ""
                extra = f"  for {', '.join(v.consumers)}" if v.origin == "constant" else ""
                lines.append(
                    f"  {t.name:{width}}  {kind:8}  {shape:22}  {v.layout.index_map}{pad}{extra}"
                )
        lines.append("operators:")
        for p in self.placements:
            knobs = ", ".join(f"{k}={v}" for k, v in p.candidate.knobs)
            lines.append(
                f"  {p.op}: {g.op(p.op).workload.name}, {p.note}{f' ({knobs})' if knobs else ''}"
            )
            times = self._times(p.op)
            if times:
                lines.append(f"    {times}")
            for fusion in self.fusions:
                if fusion.op == p.op:
                    lines.append(f"    fused: {fusion.describe()}")
            for port, layout in p.candidate.layouts:
                lines.append(f"    {port}: {layout.index_map}")
        lines.append(f"rewrites ({len(rewrites)}):" if rewrites else "rewrites: none")
        for r in rewrites:
            lines.append(f"  {r.describe()}")
            lines.append(
                f"    for {', '.join(r.consumers) or 'a later rewrite'}; physical map {_map_text(r)}"
            )
            times = self._times(rewrite_label(r))
            if times:
                lines.append(f"    {times}")
        lines.append("how:")
        lines += [f"  {line}" for line in self.log]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.describe()

    def compile(
        self,
        context: cl.Context | None = None,
        conversions: Any = None,
        programs: dict[str, cl.Program] | None = None,
    ) -> CompiledPlan:
        """Build every kernel of the plan for one OpenCL device (``context``'s
        first; default: :func:`laytune.runners.default_device`). Rewrites
        run the best conversion kernels ``conversions`` (a
        :class:`laytune.records.RecordedConversions`) records; default: those
        of the records database the plan was made from, on the plan's device.
        ``programs``: programs built in ``context`` before, by their
        :attr:`~laytune.codegen.KernelProgram.source_hash`, taken from and added to (plans that share kernels
        build each once)."""
        return CompiledPlan(self, context, conversions, programs)


def rewrite_label(rewrite: Rewrite) -> str:
    """The label of a rewrite's launches in a compiled plan (and its timing)."""
    return f"{rewrite.tensor} -> {', '.join(rewrite.consumers) or 'rewrite'}"


def _map_text(rewrite: Rewrite) -> str:
    try:
        return str(rewrite.index_map)
    except LaytuneError:
        return "(no symbolic inverse of the source layout)"


def _size(nbytes: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if nbytes < 1024 or unit == "MiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024  # type: ignore[assignment]
    raise AssertionError


def plan_layouts(
    graph: Graph,
    source: SourceLike | None = None,
    device: DeviceInfo | None = None,
    *,
    critical: Collection[str] | None = None,
    minimize: bool = True,
    alternatives: int = 4,
    records: Any = None,
    fuse: bool = False,
    derive: bool = False,
) -> Plan:
    """Plan the layouts of ``graph`` (see the module docstring).

    ``source`` gives the frozen candidates (a mapping by workload key or a
    :class:`~laytune.plan.LayoutSource`); ``device`` is what candidates are
    checked against and what a source is asked about (default: codegen's
    ``GENERIC_DEVICE``). ``critical`` names the layout-critical operators
    (operator names or workload names such as ``"conv2d"``); by default every
    operator the source has a candidate for is. ``alternatives`` bounds the
    fastest kernels per layout-critical operator that weighing considers
    besides the best end-to-end one and the fastest in logical layouts
    (a records source; see the module docstring; 0 or ``minimize=False``:
    freeze the source's best candidate as it is). ``records`` (a records
    store; default: ``source`` when it is one) is what the predicted times
    come from, also for candidates a mapping gives. ``fuse``: fold the
    element-wise readers of each layout-critical operator into its kernel
    (see the module docstring); ``plan.fusions`` and ``str(plan)`` say what
    was fused. ``derive``: an operator the source has no candidate for whose
    statement is a contraction or a window (:func:`laytune.search.classify`)
    is layout-critical all the same, frozen with the first standard start
    derived from its statement (:func:`laytune.search.standard_candidates`):
    a model nobody tuned runs the kernels the search would start from.
    """
    if device is None and source is not None and not isinstance(source, Mapping):
        raise PlanError(
            "a LayoutSource answers per device: pass device= (a DeviceInfo, e.g. "
            "laytune.runners.default_device().info) to plan_layouts"
        )
    device = device or GENERIC_DEVICE
    source = {} if source is None else source
    graph = graph.snapshot()
    if critical is not None:
        names = {op.name for op in graph.ops} | {op.workload.name for op in graph.ops}
        unknown = sorted(set(critical) - names)
        if unknown:
            raise PlanError(f"critical names {unknown} match no operator of {graph.name!r}")
    log: list[str] = []
    options: dict[str, list[Option]] = {}
    wanted = None if critical is None else set(critical)
    fused_keys: dict[str, str] | None = None  # what tune_model tuned, made when first needed
    starts: dict[str, list[Option]] = {}  # derive: each workload's derived start
    for op in graph.ops:
        if wanted is not None and not {op.name, op.workload.name} & wanted:
            continue
        found = lookup_options(source, op.workload.key, device.key, max(alternatives, 0))
        if records is not None:
            found = [measured_option(records, op.workload.key, device.key, o) for o in found]
        if not found and fuse:
            if fused_keys is None:
                fused_keys = _tuned_fusions(graph)
            found = _fused_options(graph, op.name, fused_keys, source, device, alternatives)
        if not found and derive:
            if op.workload.key not in starts:
                starts[op.workload.key] = _derived_option(op.workload, device)
            found = starts[op.workload.key]
        if not found:
            if wanted is not None:
                raise PlanError(
                    f"{op.name} is layout-critical but the layout source has no candidate for "
                    f"{op.workload.key} on {device.name}"
                )
            continue
        try:
            lower(op.workload, found[0].candidate, device)
        except (LaytuneError, KeyError) as err:
            if found[0].origin == DERIVED_ORIGIN:  # not the source's word: planned instead
                log.append(f"did not freeze {op.name}: its derived start does not lower: {err}")
                continue
            raise PlanError(f"the frozen candidate of {op.name} cannot be lowered: {err}") from None
        options[op.name] = [found[0], *_lowerable(op.workload, found[1:], device)]
        log.append(
            f"froze {op.name}: the source's candidate for {op.workload.key}"
            + (f" ({found[0].origin})" if found[0].origin != "the layout source" else "")
        )
    fusions: list[Fusion] = []
    if fuse:
        graph = _fuse(graph, options, source, device, records, alternatives, fusions, log)
    chosen = {name: found[0] for name, found in options.items()}
    footprint = sum(
        int(np.prod(t.shape)) * np.dtype(t.dtype).itemsize for t in graph.tensors.values()
    )
    cache = device.last_level_cache_size
    warm = device.holds(footprint)
    pricer = PlanPricer(source if records is None else records, device.key, chosen, warm=warm)
    if cache:
        fits = "fit in half" if warm else "exceed half"
        log.append(
            f"the graph's tensors ({_size(footprint)}) {fits} of the device's "
            f"{_size(cache)} last-level cache: conversions priced {'warm' if warm else 'cold'}"
        )
    if minimize and alternatives > 0 and any(len(found) > 1 for found in options.values()):
        derived: dict[tuple[str, Any], Candidate | LaytuneError] = {}
        cache: dict[tuple[str, ...], float] = {}

        def predict(choice: Mapping[str, Option]) -> float:
            key = tuple(choice[name].candidate.key for name in sorted(choice))
            if key not in cache:
                cache[key] = _plan_time(graph, choice, device, pricer, derived)
            return cache[key]

        chosen = weigh(options, predict, log)
        pricer = pricer.choosing(chosen)
    frozen = {name: option.candidate for name, option in chosen.items()}
    state = {op.name: frozen.get(op.name) or _identity_candidate(op.workload) for op in graph.ops}
    initial = _resolve(graph, state, via_identity=True)
    count = sum(v.origin == "rewrite" for v in initial.versions)
    log.append(
        f"{count} rewrites around the frozen operators, moving "
        f"{_size(_cost(graph, initial))} per run (constants are packed on the host)"
    )
    notes = {name: "frozen from the layout source" for name in frozen}
    if minimize:
        minimizer = _Minimizer(graph, state, frozen, device, log)
        state = minimizer.run()
        notes.update({k: f"planned: flowed {v}" for k, v in minimizer.notes.items()})
    final = _resolve(graph, state, via_identity=not minimize)
    store = records if records is not None else (source if is_store(source) else None)
    placements = []
    for op in graph.ops:
        cand = state[op.name]
        if op.name in final.refined:
            pad = final.refined[op.name]
            was = cand.pad_value(op.output_port)
            cand = Candidate.make(
                cand.layout_map, cand.knob_map, {**dict(cand.pad_values), op.output_port: pad}
            )
            log.append(
                f"{op.name} writes {pad_text(pad)} into the padding of its result (was "
                f"{pad_text(was)}) for {', '.join(_readers(final, op.output))}"
            )
        note = notes.get(op.name, "planned: identity layouts")
        if op.name not in frozen:
            cand, kernel = planned_kernel(op.workload, cand, device, store)
            note += f"; {kernel}" if kernel else ""
        placements.append(Placement(op.name, cand, op.name in frozen, note))
    predictions = [
        _view_prediction(p.op, "operator")
        if _operator_is_view(graph, final, p.op)
        else pricer.operator(p.op, graph.op(p.op).workload, p.candidate)
        for p in placements
    ]
    for i, v in enumerate(final.versions):
        if v.origin == "rewrite":
            rewrite = final.rewrite(i, graph.tensors[v.tensor].dtype)
            predictions.append(_rewrite_prediction(graph, pricer, rewrite_label(rewrite), rewrite))
    return Plan(
        graph=graph,
        device=device,
        placements=tuple(placements),
        versions=tuple(final.versions),
        reads=tuple((op, port, i) for (op, port), i in final.reads.items()),
        outputs=tuple(final.outputs.items()),
        log=tuple(log),
        minimized=minimize,
        predictions=tuple(predictions),
        conversions=pricer.conversions,
        fusions=tuple(fusions),
    )


def _fuse(
    graph: Graph,
    options: dict[str, list[Option]],
    source: SourceLike,
    device: DeviceInfo,
    records: Any,
    alternatives: int,
    fusions: list[Fusion],
    log: list[str],
) -> Graph:
    """``graph`` with each layout-critical operator's epilogue fused (the
    fusing step of the module docstring); ``options`` become the fused
    workloads' and ``fusions`` and ``log`` say what was done."""
    for name in [op.name for op in graph.ops if op.name in options]:
        fused_graph, fusion, why = fuse_into(graph, name, options)
        if fusion is None:
            continue
        w = fused_graph.op(name).workload
        found = lookup_options(source, w.key, device.key, max(alternatives, 0))
        if records is not None:
            found = [measured_option(records, w.key, device.key, o) for o in found]
        kept = _lowerable(w, found, device)
        if not kept:
            kept = _lowerable(w, _with_epilogue(w, options[name]), device)
        if not kept:
            log.append(
                f"did not fuse {', '.join(fusion.absorbed)} into {name}: none of its candidates "
                "lowers with the epilogue"
            )
            continue
        graph, options[name] = fused_graph, kept
        fusions.append(fusion)
        origin = "" if found else " (its candidate, the epilogue's operands flowed from its result)"
        log.append(
            f"epilogue fusion: {fusion.describe()}{origin}" + (f"; stopped: {why}" if why else "")
        )
    return graph


#: Where a frozen candidate came from when no source had one (``derive``).
DERIVED_ORIGIN = "the statement's derived start"


def _derived_option(workload: Any, device: DeviceInfo) -> list[Option]:
    """The first standard start of a layout-critical statement
    (:func:`~laytune.search.layout_critical`) on ``device`` (none for other
    statements: their layouts are planned)."""
    from laytune.search import layout_critical, standard_candidates
    from laytune.space import SearchSpace

    if not layout_critical(workload):
        return []
    try:
        starts = standard_candidates(SearchSpace(workload, device), 1)
    except LaytuneError:  # a dtype the device lacks: planned
        return []
    return [Option(starts[0], origin=DERIVED_ORIGIN)] if starts else []


def _tuned_fusions(graph: Graph) -> dict[str, str]:
    """Operator -> the key of its fused workload, as :func:`tune_model` fuses
    and tunes them: every layout-critical operator's element-wise readers
    folded in, in graph order, none folding in another layout-critical one
    (:func:`laytune.plan.tuned_workloads`). A chain read past where that
    stopped (a downsampling conv's bias, add and relu, where the block's
    other conv took the add) names a workload nobody tuned."""
    from laytune.plan._fuse import fuse_epilogues
    from laytune.search import layout_critical

    critical = {op.name for op in graph.ops if layout_critical(op.workload)}
    _, fusions = fuse_epilogues(graph, critical)
    return {fusion.op: fusion.key for fusion in fusions}


def _fused_options(
    graph: Graph,
    name: str,
    fused_keys: Mapping[str, str],
    source: SourceLike,
    device: DeviceInfo,
    alternatives: int,
) -> list[Option]:
    """The options the source offers operator ``name`` with its element-wise
    readers folded in as :func:`tune_model` folded them (``fused_keys``, of
    :func:`_tuned_fusions`; an operator not there: all it can fold), each
    restricted to the operator's own buffers, those that lower: a model
    tuned fused has records of the fused workloads only, and the bare
    operator runs the same knobs and layouts without the epilogue."""
    key = fused_keys.get(name)
    if key is None:
        _, fusion, _ = fuse_into(graph, name)
        if fusion is None:
            return []
        key = fusion.key
    workload = graph.op(name).workload
    own = {b.name for b in workload.buffers}
    found = lookup_options(source, key, device.key, max(alternatives, 0))
    bare = [
        Option(
            bare_candidate(workload, o.candidate),
            o.compute_s,
            {k: v for k, v in o.conversions.items() if k[0] in own},
            f"{o.origin}, of the fused {key}",
        )
        for o in found
    ]
    # a knob the epilogue's operand made valid (a sub-group read of a residual
    # along the innermost axis) may not lower without it
    return _lowerable(workload, bare, device)


def _with_epilogue(workload: Workload, options: Sequence[Option]) -> list[Option]:
    """The ``options`` of the unfused operator for the fused ``workload``:
    the epilogue's operands laid out as the result's layout flows to them
    (those it cannot flow to are left out)."""
    out = workload.output.name
    kept = []
    for option in options:
        cand = option.candidate
        layouts = dict(cand.layout_map)
        try:
            for decl in workload.inputs:
                if decl.name not in layouts:
                    layouts[decl.name] = flow_layout(workload, layouts[out], out, decl.name)
        except FlowError:
            continue
        kept.append(
            Option(
                Candidate.make(layouts, cand.knob_map, dict(cand.pad_values)),
                option.compute_s,
                option.conversions,
                f"{option.origin}, with the epilogue",
            )
        )
    return kept


def _lowerable(workload: Workload, found: Sequence[Option], device: DeviceInfo) -> list[Option]:
    kept = []
    for option in found:
        try:
            lower(workload, option.candidate, device)
        except (LaytuneError, KeyError):
            continue
        kept.append(option)
    return kept


def _ports(graph: Graph, rewrite: Rewrite) -> list[tuple[str, str]]:
    """The ports a rewrite feeds, then its tensor's producer's output port."""
    ports = [tuple(c.split(".", 1)) for c in rewrite.consumers if "." in c]
    producer = graph.tensors[rewrite.tensor].producer
    if producer is not None:
        ports.append((producer, graph.op(producer).output_port))
    return ports  # type: ignore[return-value]


def _plan_time(
    graph: Graph,
    choice: Mapping[str, Option],
    device: DeviceInfo,
    pricer: PlanPricer,
    derived: dict[tuple[str, Any], Candidate | LaytuneError],
) -> float:
    """The predicted time of the plan in which the critical operators run
    ``choice``: their kernels plus every rewrite left after steps 2 to 4 (the
    other operators' kernels are left out: they follow the layouts)."""
    state = {
        op.name: choice[op.name].candidate
        if op.name in choice
        else _identity_candidate(op.workload)
        for op in graph.ops
    }
    state = _Minimizer(graph, state, set(choice), device, [], derived).run()
    res = _resolve(graph, state, via_identity=False)
    local = pricer.choosing(choice)
    seconds = 0.0
    for name, option in choice.items():
        seconds += local.operator(name, graph.op(name).workload, option.candidate).seconds or 0.0
    for i, v in enumerate(res.versions):
        if v.origin == "rewrite":
            rewrite = res.rewrite(i, graph.tensors[v.tensor].dtype)
            seconds += _rewrite_prediction(graph, local, "", rewrite).seconds or 0.0
    return seconds


def _view_prediction(label: str, kind: str) -> Prediction:
    return Prediction(label, kind, 0.0, "a view: its result is its input's memory")


def _rewrite_prediction(
    graph: Graph, pricer: PlanPricer, label: str, rewrite: Rewrite
) -> Prediction:
    """A rewrite's predicted time: nothing where lowering reads its source as
    it is (:func:`~laytune.plan._execute.same_order`), else ``pricer``'s."""
    if same_order(rewrite.src, rewrite.dst):
        return _view_prediction(label, "rewrite")
    return pricer.rewrite(label, rewrite, _ports(graph, rewrite))


def _operator_is_view(graph: Graph, res: _Resolution, name: str) -> bool:
    """Whether lowering runs operator ``name`` as a view
    (:func:`~laytune.plan._execute.runs_as_view`)."""
    op = graph.op(name)
    if len(op.inputs) != 1:
        return False
    src = res.versions[res.reads[(name, op.inputs[0][0])]].layout
    return runs_as_view(op.workload, src, res.versions[res.storage(op.output)].layout)


def _readers(res: _Resolution, tensor: str) -> list[str]:
    i = res.storage(tensor)
    return list(res.versions[i].consumers) or ["its rewrites"]
