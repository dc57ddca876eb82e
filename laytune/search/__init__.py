"""Tuning jobs: the loop, strategies, stopping, warm starts.

:func:`tune` searches one workload's layouts on one device, measuring in
batches (the next batch builds while the current one is measured), writing
every trial to a records database beside its optuna study, and returns a
:class:`TuneResult`.
"""

from __future__ import annotations

from laytune.search._job import Job, LogBatches, Persist, Progress, TuneCallback, TuneResult
from laytune.search._strategies import STRATEGIES, make_sampler, params_of
from laytune.search._tune import (
    DEFAULT_MEASURE,
    standard_candidates,
    study_name_for,
    tune,
    warm_start_candidates,
)

__all__ = [
    "DEFAULT_MEASURE",
    "STRATEGIES",
    "Job",
    "LogBatches",
    "Persist",
    "Progress",
    "TuneCallback",
    "TuneResult",
    "make_sampler",
    "params_of",
    "standard_candidates",
    "study_name_for",
    "tune",
    "warm_start_candidates",
]
