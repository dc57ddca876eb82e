"""The cost model: a gradient-boosted regressor from candidate features to time.

:class:`CostModel` learns ``log2(time / work)`` (``work``: the workload's
operations plus its compulsory bytes, so that shapes and operators of
different sizes share one scale) from :class:`Observation` values: measured
candidates of this workload (weight 1), of other shapes of the same operator
(0.5) and of other operators (0.2) on the same device. A failed or rejected
candidate is learned as twice the slowest measured one of its workload, so
the model steers away from what does not run.

The regressor is scikit-learn's ``HistGradientBoostingRegressor``: it takes
missing features natively (a feature another operator's buffers do not
have), trains in well under a second on thousands of rows, and comes as
wheels without a native library to install beside it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from laytune.exceptions import TuningError

__all__ = ["CostModel", "Observation", "spearman"]

#: learning weights of records by how they relate to the job's workload
SAME_WORKLOAD, OTHER_SHAPE, OTHER_OPERATOR = 1.0, 0.5, 0.2
_MIN_ROWS = 4  # fewer measured rows than this teach nothing: the model is not ready


@dataclass(frozen=True)
class Observation:
    """One candidate's features and what it took (``seconds`` None: failed or
    rejected), of a workload of ``work`` operations + bytes (``group``: which
    workload, so failures are priced against that workload's slowest)."""

    features: Mapping[str, float]
    seconds: float | None
    work: float
    group: str
    weight: float = SAME_WORKLOAD


def _targets(observations: Sequence[Observation]) -> np.ndarray:
    """log2(seconds / work); a failure: one more than its group's slowest
    (twice its time), or than the slowest of all when its group has none."""
    values = [
        math.log2(o.seconds / max(o.work, 1.0)) if o.seconds else math.nan for o in observations
    ]
    slowest: dict[str, float] = {}
    for o, v in zip(observations, values, strict=True):
        if not math.isnan(v):
            slowest[o.group] = max(slowest.get(o.group, -math.inf), v)
    overall = max(slowest.values())
    return np.array(
        [
            v if not math.isnan(v) else slowest.get(o.group, overall) + 1.0
            for o, v in zip(observations, values, strict=True)
        ]
    )


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation of two equally long sequences (ties get
    their average rank); nan when either is constant or shorter than 2."""
    if len(a) != len(b):
        raise TuningError(f"spearman of {len(a)} and {len(b)} values")
    if len(a) < 2:
        return math.nan

    def ranks(values: Sequence[float]) -> np.ndarray:
        array = np.asarray(values, dtype=float)
        order = np.argsort(array, kind="stable")
        ranked = np.empty(len(array))
        ranked[order] = np.arange(len(array), dtype=float)
        for value in np.unique(array):  # ties: the mean of their ranks
            tied = array == value
            ranked[tied] = ranked[tied].mean()
        return ranked

    ra, rb = ranks(a), ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return math.nan
    return float(np.corrcoef(ra, rb)[0, 1])


def _one_thread() -> Any:
    """A context in which OpenMP runs one thread. Models this small gain
    nothing from threads, and on a busy host (the measured kernels, the
    build workers) OpenMP's spinning threads made a fit 15x slower."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(1, user_api="openmp")


class CostModel:
    """Predicts a candidate's ``log2(time / work)`` from its features; lower
    is faster. :meth:`fit` replaces what was learned; :meth:`predict` before
    a successful fit raises :class:`~laytune.exceptions.TuningError`. Not
    thread-safe."""

    def __init__(self, seed: int = 0, iterations: int = 150) -> None:
        self.seed = seed
        self.iterations = iterations
        self.columns: tuple[str, ...] = ()
        self._regressor: object | None = None

    @property
    def ready(self) -> bool:
        return self._regressor is not None

    def _matrix(self, rows: Sequence[Mapping[str, float]]) -> np.ndarray:
        matrix = np.full((len(rows), len(self.columns)), np.nan)
        index = {name: k for k, name in enumerate(self.columns)}
        for r, row in enumerate(rows):
            for name, value in row.items():
                k = index.get(name)
                if k is not None:
                    matrix[r, k] = value
        return matrix

    def fit(self, observations: Sequence[Observation]) -> bool:
        """Learn from ``observations``; False (and not ready) when fewer than
        four of them were measured, or all took the same time."""
        measured = [o for o in observations if o.seconds]
        if len(measured) < _MIN_ROWS:
            self._regressor = None
            return False
        from sklearn.ensemble import HistGradientBoostingRegressor

        self.columns = tuple(sorted({name for o in observations for name in o.features}))
        targets = _targets(observations)
        if np.ptp(targets) == 0:
            self._regressor = None
            return False
        regressor = HistGradientBoostingRegressor(
            max_iter=self.iterations,
            learning_rate=0.1,
            max_leaf_nodes=15,
            min_samples_leaf=max(2, min(20, len(observations) // 10)),
            l2_regularization=1.0,
            early_stopping=False,
            random_state=self.seed,
        )
        weights = np.array([o.weight for o in observations])
        with _one_thread():
            regressor.fit(
                self._matrix([o.features for o in observations]), targets, sample_weight=weights
            )
        self._regressor = regressor
        return True

    def predict(self, rows: Sequence[Mapping[str, float]]) -> np.ndarray:
        """Predicted ``log2(time / work)`` per feature row, in order."""
        if self._regressor is None:
            raise TuningError("the cost model is not trained")
        if not rows:
            return np.empty(0)
        with _one_thread():
            return np.asarray(self._regressor.predict(self._matrix(rows)))  # type: ignore[attr-defined]
