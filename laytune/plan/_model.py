"""A whole model, tuned, planned and run: :func:`tune_model`,
:func:`plan_model` and :func:`load_model`; :func:`freeze_model` keeps a
model's plan in a frozen file, which production builds plan from without
the records database.

A model is an ONNX file or ``onnx.ModelProto`` (imported by
:func:`~laytune.plan.from_onnx`) or a :class:`~laytune.plan.Graph`.

Its *layout-critical* workloads are those whose statement is a contraction
or a sliding window (:func:`laytune.search.classify`): the operators whose
kernels the layouts of their operands decide, which the planner freezes from
the records. They are read off the statements, never off operator names.
:func:`tune_model` tunes each distinct one once (one job per workload key,
however many operators run it), the largest first by flops, with the weights
``constant`` as the operators mark them; then it plans the model from the
records and tunes the conversions that plan still runs (its rewrites between
flat buffers), so that the plan's prices and kernels are tuned ones. Tuned
conversions change the plan's prices, so the model is planned again until
its plan runs no conversion left untuned (a few rounds at most).

Tuning resumes: a workload whose study already holds as many records as the
trial budget is not tuned again, and one stopped early (Ctrl-C) is tuned for
the trials it has left. Ctrl-C stops as :func:`laytune.tune` does (every
finished record kept) and ends the model's tuning there.
"""

from __future__ import annotations

import contextlib
import os
import sys
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from laytune.exceptions import ArgumentTypeError, PlanError
from laytune.plan._critical import (
    CriticalWorkload,
    critical_workloads,
    merged_workloads,
    random_inputs,
    tuned_workloads,
)
from laytune.plan._execute import same_order
from laytune.plan._fuse import bare_candidate
from laytune.plan._graph import Graph
from laytune.plan._onnx import from_onnx
from laytune.plan._planner import Plan, plan_layouts

if TYPE_CHECKING:
    from laytune.plan._execute import CompiledPlan, PlanTiming

__all__ = [
    "CriticalWorkload",
    "Model",
    "ModelTuning",
    "TunedWorkload",
    "critical_workloads",
    "freeze_model",
    "load_model",
    "plan_conversions",
    "plan_model",
    "random_inputs",
    "tune_model",
    "tuned_workloads",
]


#: Plans made while tuning a model's conversions, at most (see :func:`tune_model`).
_PLAN_ROUNDS = 4


def plan_conversions(plan: Plan) -> list[Any]:
    """The conversion workloads (:class:`laytune.space.ConversionWorkload`)
    of ``plan``'s rewrites that can run a tuned kernel (between flat global
    buffers), one per distinct key, in the plan's order; not those between
    layouts that store the tensor alike, which launch nothing (a view)."""
    from laytune.space import ConversionWorkload

    found: dict[str, Any] = {}
    for rewrite in plan.rewrites:
        if rewrite.src.image_rank != 1 or rewrite.dst.image_rank != 1:
            continue
        if same_order(rewrite.src, rewrite.dst):
            continue
        workload = ConversionWorkload(rewrite.src, rewrite.dst, rewrite.dtype, rewrite.dst_pad)
        found.setdefault(workload.key, workload)
    return list(found.values())


@dataclass(frozen=True)
class TunedWorkload:
    """What :func:`tune_model` did for one workload: ``kind`` ``"operator"``
    (``ops`` run it) or ``"conversion"``; ``before`` the records its study
    held already; ``result`` the job's :class:`~laytune.search.TuneResult`,
    None when the study held the whole budget (nothing measured)."""

    workload_key: str
    kind: str
    ops: tuple[str, ...]
    before: int
    result: Any = None

    @property
    def measured(self) -> int:
        return 0 if self.result is None else self.result.measured


@dataclass(frozen=True)
class ModelTuning:
    """The outcome of :func:`tune_model`: every job in the order run, and
    whether Ctrl-C ended it (the jobs after the interrupted one are absent)."""

    graph: str
    device_name: str
    database: str
    jobs: tuple[TunedWorkload, ...]
    interrupted: bool

    @property
    def measured(self) -> int:
        """Candidates measured by this call, operators and conversions."""
        return sum(job.measured for job in self.jobs)

    def summary(self) -> str:
        operators = [j for j in self.jobs if j.kind == "operator"]
        conversions = [j for j in self.jobs if j.kind == "conversion"]
        head = (
            f"model {self.graph!r} on {self.device_name}: {len(operators)} layout-critical "
            f"workloads, {len(conversions)} conversions, {self.measured} candidates measured"
            + (" (interrupted; every finished record is kept)" if self.interrupted else "")
        )
        lines = [head]
        for job in self.jobs:
            who = f" ({', '.join(job.ops)})" if job.ops else ""
            if job.result is None:
                lines.append(
                    f"  {job.workload_key}{who}: already tuned ({job.before} records), skipped"
                )
                continue
            best = job.result.best
            time = "no verified candidate" if best is None else f"best {best.value_s * 1e3:.4g} ms"
            lines.append(
                f"  {job.workload_key}{who}: {job.result.measured} measured "
                f"({job.before} before), {time}, stopped: {job.result.stop_reason}"
            )
        return "\n".join(lines)


def _graph_of(
    model: Any,
    winograd: bool | None = False,
    source: Any = None,
    device: Any = None,
    fuse: bool = True,
) -> Graph:
    """The graph of ``model``. Unless ``winograd`` is False, an ONNX model's
    3 x 3 stride-1 convolutions are imported in Winograd's form where
    ``source`` times that form faster on ``device``, comparing the
    workloads a plan made with ``fuse`` runs
    (:func:`~laytune.plan.faster_in_records`); a :class:`Graph` is taken as
    it is (refused where ``winograd`` is True)."""
    if isinstance(model, Graph):
        if winograd:
            _refuse_graph(model)
        return model
    if winograd is False or source is None:
        return from_onnx(model)
    from laytune.plan._forms import faster_in_records

    return from_onnx(model, winograd=faster_in_records(model, source, device.info.key, fuse))


def _refuse_graph(model: Any) -> None:
    if isinstance(model, Graph):
        raise ArgumentTypeError(
            "winograd chooses each convolution's form while importing an ONNX model: pass the "
            "model, not a Graph (or import it with from_onnx(model, winograd=True))"
        )


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def tune_model(
    model: Any,
    device: Any = None,
    *,
    options: Any = None,
    database: Any = None,
    progress: bool = True,
    say: Callable[[str], None] | None = None,
    fuse: bool = True,
    winograd: bool = False,
) -> ModelTuning:
    """Tune ``model`` (an ONNX path or ``ModelProto``, or a :class:`Graph`) on
    ``device`` (default: :func:`laytune.runners.default_device`) into
    ``database`` (a store or URL; default ``sqlite:///laytune.db``), as the
    module docstring says. ``options`` (a :class:`~laytune.search.TuneOptions`;
    default 24 trials) applies to every job, ``options.trials`` being each
    workload's budget; its ``boundary`` and ``study_name`` must be unset
    (each workload has its own). ``progress``: the jobs' progress, and one
    line per workload through ``say`` (default: stderr). ``fuse``: tune the
    workloads as :func:`load_model` runs them with ``fuse=True``, each
    layout-critical operator with the element-wise epilogue folded into it
    (:func:`tuned_workloads`); False: the operators alone. ``winograd``: tune
    each 3 x 3 stride-1 convolution both directly and in Winograd's form
    (:func:`~laytune.plan.winograd_conv`), so that :func:`load_model` runs
    whichever the records time faster."""
    from laytune.records import DEFAULT_URL, RecordStore, open_database
    from laytune.runners import default_device, refuse_while_a_worker_starts, select_device
    from laytune.search import TuneOptions

    refuse_while_a_worker_starts("laytune.tune_model")
    opts = options if options is not None else TuneOptions(trials=24)
    if opts.boundary or opts.study_name:
        raise ArgumentTypeError(
            "tune_model gives each workload its default boundary and study: leave "
            "options.boundary and options.study_name unset"
        )
    graphs = [_graph_of(model)]
    if winograd:
        _refuse_graph(model)
        graphs.append(from_onnx(model, winograd=True))
    device = default_device() if device is None else select_device(device)
    opened = not isinstance(database, RecordStore)
    db = open_database(DEFAULT_URL if database is None else database)

    def planned() -> Graph:
        """The graph whose plan's conversions are tuned, once its operators
        are: the one :func:`load_model` plans from these records."""
        return _graph_of(model, True if winograd else None, db, device, fuse)

    try:
        return _tune_jobs(graphs, planned, device, db, opts, progress, say, fuse)
    finally:
        if opened:
            db.close()


def _tune_jobs(
    graphs: Sequence[Graph],
    planned: Callable[[], Graph],
    device: Any,
    db: Any,
    opts: Any,
    progress: bool,
    say: Callable[[str], None] | None,
    fuse: bool,
) -> ModelTuning:
    from laytune.records import Boundary
    from laytune.runners import local_workers
    from laytune.search import study_name_for, tune

    tell = (say or _stderr) if progress else (lambda line: None)
    jobs: list[TunedWorkload] = []
    owned = contextlib.ExitStack()
    pools: list[Any] = []

    def shared() -> tuple[Any, Any]:
        """One builder and one runner for every job (their workers start once,
        and only when something is left to measure)."""
        if not pools:
            pools.extend(owned.enter_context(local_workers(device, opts.measure)))
        return pools[0], pools[1]

    def run(workload: Any, kind: str, ops: tuple[str, ...], number: str) -> bool:
        """Tune one workload for what its study lacks; False when interrupted."""
        converting = kind == "conversion"
        strategy = "tpe" if converting and opts.strategy == "model" else opts.strategy
        boundary = Boundary(()) if converting else Boundary.of(workload)
        study = study_name_for(workload, device, strategy, boundary)
        before = len(db.records(workload=workload.key, device=device.key, study=study))
        who = f" ({', '.join(ops)})" if ops else ""
        left = opts.trials - before
        if left <= 0:
            tell(f"{number} {workload.key}{who}: already tuned ({before} records), skipped")
            jobs.append(TunedWorkload(workload.key, kind, ops, before))
            return True
        flops = "" if converting else f", {workload.flops:,} flops"
        tell(f"{number} {workload.key}{who}{flops}: tuning {left} of {opts.trials} trials")
        builder, runner = shared()
        result = tune(
            workload,
            device,
            options=opts.replace(trials=left, strategy=strategy),
            database=db,
            progress=progress,
            builder=builder,
            runner=runner,
        )
        jobs.append(TunedWorkload(workload.key, kind, ops, before, result))
        return not result.stop_reason.startswith("interrupted")

    def tune_all() -> bool:
        """Every job; False when one was interrupted."""
        critical = merged_workloads(c for g in graphs for c in tuned_workloads(g, fuse))
        for k, item in enumerate(critical, 1):
            if not run(item.workload, "operator", item.ops, f"[{k}/{len(critical)}]"):
                return False
        # Tuned conversions change the plan's prices, so the plan made with
        # them may run other rewrites: plan again until every one it runs is tuned.
        seen: set[str] = set()
        graph = planned()
        for _ in range(_PLAN_ROUNDS):
            plan = plan_layouts(graph, db, device.info, fuse=fuse)
            fresh = [w for w in plan_conversions(plan) if w.key not in seen]
            if not fresh:
                break
            for workload in fresh:
                seen.add(workload.key)
                if not run(workload, "conversion", (), f"[conversion {len(seen)}]"):
                    return False
        return True

    with owned:
        try:
            finished = tune_all()
        except KeyboardInterrupt:  # a stop outside a job's own handling: between two
            finished = False  # jobs, while one opens, or while the plan is made
    return ModelTuning(graphs[0].name, device.name, db.safe_url, tuple(jobs), not finished)


def _open_records(database: Any) -> tuple[Any, bool]:
    """The layout source ``database`` names (None: none), and whether a store
    was opened here: a records store or URL, a mapping of workload keys to
    candidates (a :data:`~laytune.plan.SourceLike`), or a frozen file
    (:class:`~laytune.records.FrozenLayouts`, or the path of one, which
    :func:`freeze_model` writes: a ``.json`` file)."""
    from laytune.records import FrozenLayouts, RecordStore, load_frozen, open_database

    if database is None or isinstance(database, RecordStore | FrozenLayouts | Mapping):
        return database, False
    if isinstance(database, str | os.PathLike) and os.fspath(database).endswith(".json"):
        return load_frozen(database), False
    return open_database(database, read_only=True), True


def _plan(graph: Graph, records: Any, device: Any, fuse: bool, derive: bool = True) -> Plan:
    source = {} if records is None else records
    return plan_layouts(graph, source, device.info, fuse=fuse, derive=derive)


def plan_model(
    model: Any,
    database: Any = None,
    device: Any = None,
    *,
    repeats: int = 10,
    fuse: bool = True,
    winograd: bool | None = None,
) -> Plan:
    """The plan of ``model`` from the records of ``database`` (a store or URL,
    opened read-only; a frozen file, as :func:`load_model` takes; None: no
    records, identity layouts) on ``device``
    (default: :func:`laytune.runners.default_device`), compiled and profiled
    on random inputs (``repeats`` timed runs): the plan carries its predicted
    and measured times (``str(plan)`` shows both). ``fuse``: fold element-wise
    epilogues into the operators they read (``plan_layouts(fuse=True)``).
    ``winograd``: as :func:`load_model`."""
    import pyopencl as cl

    from laytune.runners import default_device, select_device

    if repeats < 1:
        raise ArgumentTypeError(f"repeats must be at least 1, got {repeats}")
    device = default_device() if device is None else select_device(device)
    records, opened = _open_records(database)
    try:
        graph = _graph_of(model, winograd, records, device, fuse)
        plan = _plan(graph, records, device, fuse)
        with plan.compile(cl.Context([device.open()])) as compiled:
            timing = compiled.profile(random_inputs(graph), repeats=repeats)
    finally:
        if opened:
            records.close()
    return plan.with_timing(timing)


class Model:
    """A planned model built on one device: call it with the model's inputs by
    name (numpy arrays) for its outputs, a list in the model's output order
    (as ONNX Runtime's ``InferenceSession.run(None, inputs)``).

    It holds device buffers: :meth:`close` (or a ``with`` block) frees them,
    and so does garbage collection. Not thread-safe: calls share the buffers.
    """

    def __init__(self, plan: Plan, compiled: CompiledPlan) -> None:
        self.plan = plan
        self.compiled = compiled
        graph = plan.graph
        #: the model's input names, in the order it declares them
        self.inputs: tuple[str, ...] = tuple(
            n for n, t in graph.tensors.items() if t.kind == "input"
        )
        #: the model's output names, in its order
        self.outputs: tuple[str, ...] = tuple(graph.outputs)
        self._finalizer = weakref.finalize(self, compiled.release)

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def __call__(self, **inputs: np.ndarray) -> list[np.ndarray]:
        if self.closed:
            raise PlanError(f"model {self.plan.graph.name!r} is closed: its buffers are freed")
        got = self.compiled.run(inputs)
        return [got[name] for name in self.outputs]

    def profile(self, inputs: Mapping[str, np.ndarray], repeats: int = 10) -> PlanTiming:
        """Timed runs on ``inputs`` (see :meth:`CompiledPlan.profile`)."""
        return self.compiled.profile(inputs, repeats=repeats)

    def close(self) -> None:
        """Free the device buffers (once; later calls do nothing)."""
        self._finalizer()

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"on {self.plan.device.name}"
        return (
            f"<Model {self.plan.graph.name!r}: inputs {list(self.inputs)}, "
            f"outputs {list(self.outputs)}, {state}>"
        )


def load_model(
    model: Any,
    database: Any = None,
    device: Any = None,
    *,
    fuse: bool = True,
    derive: bool = True,
    winograd: bool | None = None,
) -> Model:
    """``model`` (an ONNX path or ``ModelProto``, or a :class:`Graph`) planned
    from the records of ``database`` (a store or URL, opened read-only; a
    frozen file that :func:`freeze_model` wrote, a ``.json`` path or
    :class:`~laytune.records.FrozenLayouts`; None: no records) and built on
    ``device`` (default: :func:`laytune.runners.default_device`), as a
    callable :class:`Model`; ``fuse``: fold element-wise epilogues (a bias, a
    ReLU, a residual add) into the operators they read, as
    ``plan_layouts(fuse=True)`` does. ``derive``: a convolution or matmul
    the records do not cover runs the start derived from its statement
    (``plan_layouts(derive=True)``), so that a model nobody tuned runs the
    search's first kernels (ResNet-18 on 2 Xeon cores: 14 ms where logical
    layouts took 151); False: logical layouts and the planned kernel.
    ``winograd``: each 3 x 3 stride-1 convolution of an ONNX model runs in
    Winograd's form where the records (or the frozen file) time it faster
    than directly (:func:`~laytune.plan.faster_in_records`; records of both
    come from ``tune_model(winograd=True)``; without records of Winograd's
    form, every convolution runs directly); False: directly; a
    :class:`Graph` runs as it is."""
    import pyopencl as cl

    from laytune.runners import default_device, select_device

    device = default_device() if device is None else select_device(device)
    records, opened = _open_records(database)
    try:
        graph = _graph_of(model, winograd, records, device, fuse)
        plan = _plan(graph, records, device, fuse, derive)
        compiled = plan.compile(cl.Context([device.open()]))
    finally:
        if opened:
            records.close()
    return Model(plan, compiled)


def _recorded_choices(
    plan: Plan, graph: Graph, records: Any, device_key: str
) -> Iterator[tuple[str, Any]]:
    """(workload key, candidate) of each operator ``plan`` froze, as recorded:
    the fused workload's where a record of it exists, else the bare
    operator's own buffers under its own key, from which the fusing step
    derives the fused kernel again (records of the bare operators only)."""
    from laytune.records import candidate_record

    for placement in plan.placements:
        if not placement.frozen:
            continue
        workload = plan.graph.op(placement.op).workload
        if candidate_record(records, workload.key, device_key, placement.candidate) is not None:
            yield workload.key, placement.candidate
            continue
        bare = graph.op(placement.op).workload
        yield bare.key, bare_candidate(bare, placement.candidate)


def freeze_model(
    model: Any,
    database: Any,
    path: str | os.PathLike[str] = "laytune-model.json",
    device: Any = None,
    *,
    fuse: bool = True,
    measure: bool = False,
    say: Callable[[str], None] | None = None,
    winograd: bool | None = None,
) -> Path:
    """Freeze the kernels ``model``'s plan runs: plan it from the records of
    ``database`` on ``device`` (default: :func:`laytune.runners.default_device`)
    as :func:`load_model` does, and write each layout-critical operator's
    candidate (the fused workload's, where the plan fused an epilogue) with its
    record to the frozen file ``path``. ``load_model(model, database=path)``
    and ``laytune plan MODEL --db path`` then plan the same model from that
    file alone: the same candidates, so the same layouts, fusions and kernels,
    with no records database. Returns the path.

    ``measure``: choose each workload's candidate by timing the plan on the
    device instead (:func:`laytune.plan.measure_choices`: a few recorded
    candidates per workload, each in the whole plan, in interleaved rounds;
    ResNet-18 on 2 cores: about 5 minutes), since records timed one launch
    at a time in a job's own moments need not rank kernels as the plan runs
    them; ``say`` gets a line per workload (default: stderr). The file then
    holds the measured choice, and plans from it run that. ``winograd``: as
    :func:`load_model` (the file holds the kernels of the form chosen for
    each convolution, and plans from it run that form); with ``measure``,
    where the records chose Winograd's form for any convolution (or
    ``winograd`` is True), each convolution's form is timed in the plan as
    well (:func:`~laytune.plan.measure_forms`)."""
    from laytune.records import freeze
    from laytune.runners import default_device, select_device

    device = default_device() if device is None else select_device(device)
    records, opened = _open_records(database)
    try:
        if records is None or not hasattr(records, "lookup"):
            raise ArgumentTypeError(
                f"freeze_model plans from a records database, not {type(records).__name__}"
            )
        if measure and not isinstance(model, Graph) and winograd is not False:
            from laytune.plan._forms import faster_in_records
            from laytune.plan._measured import measure_forms

            forms = faster_in_records(model, records, device.info.key, fuse)
            if winograd or forms:
                forms = measure_forms(model, records, device, forms, fuse=fuse, say=say or _stderr)
            graph = from_onnx(model, winograd=forms)
        else:
            graph = _graph_of(model, winograd, records, device, fuse)
        # the recorded candidates alone: a plan loaded from the file derives
        # the starts of what they leave out again, as one from the records does
        plan = _plan(graph, records, device, fuse, derive=False)
        chosen = dict(_recorded_choices(plan, graph, records, device.info.key))
        if not chosen:
            raise PlanError(
                f"{records.safe_url} has no verified record of any layout-critical operator of "
                f"{graph.name!r} on {device.info.name}: tune it first (laytune tune-model)"
            )
        if measure:
            from laytune.plan._measured import measure_choices

            tell = say or _stderr
            tell(f"timing the candidates of {graph.name!r} in its plan on {device.info.name}")
            chosen, _ = measure_choices(graph, records, device, chosen, fuse=fuse, say=tell)
        return freeze(records, path, device=device.info.key, candidates=chosen)
    finally:
        if opened:
            records.close()
