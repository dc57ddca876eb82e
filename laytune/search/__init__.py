"""Tuning jobs: the loop, strategies, stopping, warm starts.

:func:`tune` searches one workload's layouts on one device under
:class:`TuneOptions`, measuring in batches (the next batch builds while the current one is measured), writing
every trial to a records database beside its optuna study, and returns a
:class:`TuneResult`. :func:`tune_conversions` tunes the conversion kernels
the best records pay for, each a workload of its own.
"""

from __future__ import annotations

from laytune._lazy import lazy_exports

TYPE_CHECKING = False  # not typing's: importing typing would slow every worker's start
if TYPE_CHECKING:
    from laytune.search._conversions import conversions_of, tune_conversions
    from laytune.search._demo import Demo, demos
    from laytune.search._explain import explain_layouts
    from laytune.search._features import candidate_features
    from laytune.search._held import held_layouts, with_held_layouts
    from laytune.search._job import (
        Job,
        LogBatches,
        Persist,
        Progress,
        TuneCallback,
        TuneResult,
        speedup_text,
    )
    from laytune.search._model import CostModel, Observation, spearman
    from laytune.search._model_search import ModelSearch, pool_for, transfer_observations
    from laytune.search._options import DEFAULT_MEASURE, TuneOptions
    from laytune.search._strategies import STRATEGIES, make_sampler, params_of
    from laytune.search._structure import Contraction, Window, classify, layout_critical
    from laytune.search._tune import (
        conversion_starts,
        layout_reference,
        missing_reference,
        standard_candidates,
        study_name_for,
        tune,
        warm_start_candidates,
    )


__all__ = [
    "DEFAULT_MEASURE",
    "STRATEGIES",
    "Contraction",
    "CostModel",
    "Demo",
    "Job",
    "LogBatches",
    "ModelSearch",
    "Observation",
    "Persist",
    "Progress",
    "TuneCallback",
    "TuneOptions",
    "TuneResult",
    "Window",
    "candidate_features",
    "classify",
    "conversion_starts",
    "conversions_of",
    "demos",
    "explain_layouts",
    "held_layouts",
    "layout_critical",
    "layout_reference",
    "make_sampler",
    "missing_reference",
    "params_of",
    "pool_for",
    "spearman",
    "speedup_text",
    "standard_candidates",
    "study_name_for",
    "transfer_observations",
    "tune",
    "tune_conversions",
    "warm_start_candidates",
    "with_held_layouts",
]

# each name is imported on first use: a worker process that unpickles one
# class of this package imports that class's module, not the whole package
__getattr__, __dir__ = lazy_exports(
    globals(),
    {
        "laytune.search._conversions": ("conversions_of", "tune_conversions"),
        "laytune.search._demo": ("Demo", "demos"),
        "laytune.search._explain": ("explain_layouts",),
        "laytune.search._features": ("candidate_features",),
        "laytune.search._held": ("held_layouts", "with_held_layouts"),
        "laytune.search._job": (
            "Job",
            "LogBatches",
            "Persist",
            "Progress",
            "TuneCallback",
            "TuneResult",
            "speedup_text",
        ),
        "laytune.search._model": ("CostModel", "Observation", "spearman"),
        "laytune.search._model_search": ("ModelSearch", "pool_for", "transfer_observations"),
        "laytune.search._options": ("DEFAULT_MEASURE", "TuneOptions"),
        "laytune.search._strategies": ("STRATEGIES", "make_sampler", "params_of"),
        "laytune.search._structure": ("Contraction", "Window", "classify", "layout_critical"),
        "laytune.search._tune": (
            "conversion_starts",
            "layout_reference",
            "missing_reference",
            "standard_candidates",
            "study_name_for",
            "tune",
            "warm_start_candidates",
        ),
    },
)
