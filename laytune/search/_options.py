"""What a tuning job may do: its budget, strategy and measurement settings."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from laytune.exceptions import ArgumentTypeError, TuningError
from laytune.records import Boundary
from laytune.runners import MeasureConfig
from laytune.search._strategies import STRATEGIES
from laytune.space import SpaceOptions

__all__ = ["DEFAULT_MEASURE", "TuneOptions"]

#: Measurement defaults of a tuning job: enough repeats for a stable median,
#: few enough that a job of a hundred candidates takes a minute or two.
DEFAULT_MEASURE = MeasureConfig(warmup=2, repeats=7)


@dataclass(frozen=True)
class TuneOptions:
    """The settings of one :func:`laytune.tune` job; every field has a default.

    - ``trials``: candidates to measure in this job (records already in the
      database are reused, not measured again, and do not count).
    - ``timeout``: seconds after which no new batch is proposed;
      ``patience``: stop after this many measured candidates without a new
      best (None: never).
    - ``strategy``: ``"model"`` (the default: the best predicted of a
      gradient-boosted cost model trained on the records, 1 in 8 explored
      at random; ``bench.search_efficiency`` measures it against the
      others), ``"tpe"``, ``"tpe-mv"`` (multivariate TPE grouped by
      conditional sub-space), ``"random"``, ``"nsga2"`` or ``"exhaustive"``
      (every valid candidate in order, for small spaces). A
      :class:`~laytune.space.ConversionWorkload` has no cost model (its
      space is a few hundred copies): ``"model"`` searches it with ``"tpe"``.
    - ``seed``: the sampler's seed; give strategies you compare different
      seeds, or their first random trials coincide (and come from records).
    - ``batch``: candidates proposed, built and measured together.
    - ``warm_start``: how many of the best records of the same workload on
      other devices and of the nearest shapes to try first (0: none).
    - ``starts``: how many standard candidates to try before the sampler:
      the register-blocked classics (an 8 x 16 block over packed panels for
      matmul, NCHW16c with OIHW16i16o weights for conv2d), then the plain
      standard layouts (transposed operands, NHWC, NCHW4c);
      None: a quarter of ``trials``.
    - ``early_stop``: a candidate slower than this factor times the best
      after its first repeats is not measured to the end (None: never).
    - ``overlap``: build the next batch while this one is measured; None:
      yes, except on a CPU device, where the compiler would take the cores
      the measured kernel runs on and bias its times.
    - ``measure``: how each candidate is timed (:data:`DEFAULT_MEASURE`).
    - ``space``: :class:`laytune.space.SpaceOptions` narrowing the space
      (None: the full space).
    - ``study_name``: the optuna study (None: ``<workload>@<device>/<strategy>``,
      and ``/<what differs>`` for a boundary other than the default); the
      same name resumes the same study.
    - ``boundary``: who pays for each buffer's layout, by buffer name:
      ``"fixed"`` (the caller holds the logical layout, or the layout given
      as a :class:`~laytune.layout.Layout` or its text; every call pays the
      conversion), ``"free"`` (a producer or consumer adopts the layout) or
      ``"constant"`` (converted once); see :class:`laytune.records.Boundary`.
      None: inputs and outputs fixed to their logical layouts and the
      workload's weights constant, so candidates are ranked by pack +
      compute + unpack. Checked against the workload by ``tune``
      (:class:`~laytune.exceptions.BoundaryError`). A
      :class:`~laytune.space.ConversionWorkload` (a conversion kernel tuned
      as a workload) takes none: it is the conversion.

    Invalid values raise :class:`~laytune.exceptions.TuningError` naming them.
    """

    trials: int = 64
    timeout: float | None = None
    strategy: str = "model"
    seed: int = 0
    batch: int = 8
    patience: int | None = None
    warm_start: int = 4
    starts: int | None = None
    early_stop: float | None = 2.0
    overlap: bool | None = None
    measure: MeasureConfig = DEFAULT_MEASURE
    space: SpaceOptions | None = None
    study_name: str | None = None
    boundary: Mapping[str, Any] | Boundary | None = None

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise TuningError(
                f"unknown strategy {self.strategy!r} (known: {', '.join(STRATEGIES)})"
            )
        if self.trials < 1 or self.batch < 1:
            raise TuningError(f"trials ({self.trials}) and batch ({self.batch}) must be positive")
        if self.timeout is not None and not self.timeout > 0:
            raise TuningError(f"timeout must be positive seconds, got {self.timeout}")
        if self.patience is not None and self.patience < 1:
            raise TuningError(f"patience must be positive or None, got {self.patience}")
        if self.warm_start < 0 or (self.starts is not None and self.starts < 0):
            raise TuningError(
                f"warm_start ({self.warm_start}) and starts ({self.starts}) must be >= 0"
            )
        if self.early_stop is not None and not self.early_stop >= 1:
            raise TuningError(f"early_stop must be a factor >= 1 or None, got {self.early_stop}")
        if not isinstance(self.measure, MeasureConfig):
            raise TuningError(f"measure must be a MeasureConfig, got {self.measure!r}")

    def replace(self, **changes: Any) -> TuneOptions:
        """A copy with ``changes`` (checked like a new one)."""
        return dataclasses.replace(self, **changes)


#: The keywords ``tune`` took before TuneOptions, by TuneOptions field.
_LEGACY = {field.name: field.name for field in dataclasses.fields(TuneOptions)} | {
    "options": "space"
}


def options_from_keywords(options: Any, keywords: Mapping[str, Any]) -> TuneOptions:
    """``options`` updated by the keywords ``tune`` took before
    :class:`TuneOptions` (warns: they go in the next release). A
    :class:`SpaceOptions` given as ``options`` is the old ``options=``."""
    unknown = sorted(set(keywords) - set(_LEGACY))
    if unknown:
        raise ArgumentTypeError(f"tune() got unexpected keyword arguments {unknown}")
    changes = {_LEGACY[name]: value for name, value in keywords.items()}
    if isinstance(options, SpaceOptions):
        changes.setdefault("space", options)
        options = None
        keywords = {**keywords, "options": "SpaceOptions(...)"}
    if options is not None and not isinstance(options, TuneOptions):
        raise TuningError(f"options must be a TuneOptions, got {options!r}")
    if keywords:
        names = ", ".join(f"{n}=" for n in keywords)
        warnings.warn(
            f"tune({names}) is deprecated: pass options=TuneOptions(...) "
            f"(space options as TuneOptions(space=...)); the keywords go in the next release",
            DeprecationWarning,
            stacklevel=3,
        )
    base = options if options is not None else TuneOptions()
    if changes.get("measure", base.measure) is None:  # the old default
        changes["measure"] = DEFAULT_MEASURE
    return dataclasses.replace(base, **changes) if changes else base
