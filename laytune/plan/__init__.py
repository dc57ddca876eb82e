"""Graph-level layout planning: freeze the layouts of layout-critical
operators, flow layout rewrites backwards through the rest of the graph, and
fold or cancel them.

Pipeline stage after :mod:`laytune.runners` (and the records that keep the
best candidates): a :class:`Graph` of workloads, a *layout source* of frozen
candidates (a ``Mapping`` by workload key, or any :class:`LayoutSource` such
as the records database) and :func:`plan_layouts` give a :class:`Plan`: the
layouts of every tensor and operator and the few rewrites left, printable
with ``str(plan)``. ``plan.compile()`` builds it for an OpenCL device
(:class:`CompiledPlan`); tensors stay on the device in their planned layouts
between operators, and only graph inputs and outputs cross to the host.

:func:`from_onnx` turns an ONNX model into a :class:`Graph` (the ``onnx``
extra), each node a workload written as a statement. :func:`tune_model`
tunes a model's distinct layout-critical workloads and the conversions its
plan runs, :func:`plan_model` plans and times it, :func:`load_model`
builds it as a callable :class:`Model`, and :func:`freeze_model` keeps its
plan's kernels in a frozen file that :func:`load_model` plans from alone.

With ``fuse=True`` the planner folds the element-wise readers of each
layout-critical operator into its kernel (:func:`fuse_epilogues`, a bias,
a ReLU, a residual add run on the accumulators before the store).

How a layout flows through an operator is read off its statement's index
expressions (:func:`flow_layout`), never written per operator; rewrites fold
and cancel with the index-map algebra (:class:`Rewrite`).
"""

from __future__ import annotations

from laytune._lazy import lazy_exports

TYPE_CHECKING = False  # not typing's: importing typing would slow every worker's start
if TYPE_CHECKING:
    from laytune.plan._execute import (
        CompiledPlan,
        LoweredPlan,
        PlanBuffer,
        PlanLaunch,
        PlanTiming,
        Step,
        lower_plan,
    )
    from laytune.plan._export import MODEL_RTOL, export_model, model_stem
    from laytune.plan._flow import FlowError, flow_layout
    from laytune.plan._forms import faster_in_records
    from laytune.plan._fuse import Fusion, fuse_epilogues
    from laytune.plan._graph import Graph, GraphError, Op, Tensor
    from laytune.plan._measured import MeasuredChoice, measure_choices, measure_forms
    from laytune.plan._model import (
        CriticalWorkload,
        Model,
        ModelTuning,
        TunedWorkload,
        critical_workloads,
        freeze_model,
        load_model,
        plan_conversions,
        plan_model,
        random_inputs,
        tune_model,
        tuned_workloads,
    )
    from laytune.plan._onnx import ONNX_OPS, from_onnx
    from laytune.plan._planner import Placement, Plan, PlanError, Version, plan_layouts
    from laytune.plan._rewrite import Rewrite, same_layout
    from laytune.plan._source import LayoutSource, SourceLike, lookup_candidate
    from laytune.plan._winograd import WinogradConv, winograd_conv


__all__ = [
    "MODEL_RTOL",
    "ONNX_OPS",
    "CompiledPlan",
    "CriticalWorkload",
    "FlowError",
    "Fusion",
    "Graph",
    "GraphError",
    "LayoutSource",
    "LoweredPlan",
    "MeasuredChoice",
    "Model",
    "ModelTuning",
    "Op",
    "Placement",
    "Plan",
    "PlanBuffer",
    "PlanError",
    "PlanLaunch",
    "PlanTiming",
    "Rewrite",
    "SourceLike",
    "Step",
    "Tensor",
    "TunedWorkload",
    "Version",
    "WinogradConv",
    "critical_workloads",
    "export_model",
    "faster_in_records",
    "flow_layout",
    "freeze_model",
    "from_onnx",
    "fuse_epilogues",
    "load_model",
    "lookup_candidate",
    "lower_plan",
    "measure_choices",
    "measure_forms",
    "model_stem",
    "plan_conversions",
    "plan_layouts",
    "plan_model",
    "random_inputs",
    "same_layout",
    "tune_model",
    "tuned_workloads",
    "winograd_conv",
]

# each name is imported on first use: a worker process that unpickles one
# class of this package imports that class's module, not the whole package
__getattr__, __dir__ = lazy_exports(
    globals(),
    {
        "laytune.plan._execute": (
            "CompiledPlan",
            "LoweredPlan",
            "PlanBuffer",
            "PlanLaunch",
            "PlanTiming",
            "Step",
            "lower_plan",
        ),
        "laytune.plan._export": ("MODEL_RTOL", "export_model", "model_stem"),
        "laytune.plan._flow": ("FlowError", "flow_layout"),
        "laytune.plan._fuse": ("Fusion", "fuse_epilogues"),
        "laytune.plan._graph": ("Graph", "GraphError", "Op", "Tensor"),
        "laytune.plan._measured": ("MeasuredChoice", "measure_choices", "measure_forms"),
        "laytune.plan._model": (
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
        ),
        "laytune.plan._onnx": ("ONNX_OPS", "from_onnx"),
        "laytune.plan._planner": ("Placement", "Plan", "PlanError", "Version", "plan_layouts"),
        "laytune.plan._rewrite": ("Rewrite", "same_layout"),
        "laytune.plan._source": ("LayoutSource", "SourceLike", "lookup_candidate"),
        "laytune.plan._forms": ("faster_in_records",),
        "laytune.plan._winograd": ("WinogradConv", "winograd_conv"),
    },
)
