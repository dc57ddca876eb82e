"""Measurement settings (:class:`MeasureConfig`) and result tolerances (:class:`Tolerance`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from laytune.dtypes import DTYPES
from laytune.exceptions import ConfigError

__all__ = ["Clock", "MeasureConfig", "Statistic", "Tolerance"]

Clock = Literal["event", "wall"]
Statistic = Literal["median", "mean", "min"]

_CLOCKS = ("event", "wall")
_STATISTICS = ("median", "mean", "min")


MIN_FLUSH_BYTES = 64 << 20
"""The least a cache flush writes, whatever cache the device reports."""


def default_flush_bytes(cache_bytes: int, largest_allocation: int) -> int:
    """What a flush writes when ``MeasureConfig.flush_bytes`` is None: twice
    the device's global memory cache (``cache_bytes``), at least
    :data:`MIN_FLUSH_BYTES`, at most the device's ``largest_allocation``. A
    peer timed cold beside a kernel (``bench``) evicts as much."""
    return min(max(2 * int(cache_bytes), MIN_FLUSH_BYTES), int(largest_allocation))


@dataclass(frozen=True)
class MeasureConfig:
    """How one candidate is measured; every launch it causes is listed here.

    Let a program have ``P`` pack, ``C`` compute and ``U`` unpack launches,
    ``W = warmup`` and ``R = repeats``. Measuring one candidate enqueues, in
    this order and on one in-order profiling queue:

    1. Verification: the inputs are copied into the views that take them,
       every other view of every buffer is filled with a sentinel (NaN for
       floats; copies and fills are not launches), then the ``P`` pack
       launches, the ``C`` compute launches and the ``U`` unpack launches
       run once each (``P + C + U`` launches), and the outputs are read back
       and compared with the reference. A wrong result stops here: nothing
       of it is timed.
    2. Conversions, when ``measure_conversions``: for each pack launch, then
       each unpack launch, on its own: ``W`` untimed then ``R`` timed
       launches, ``(W + R) * (P + U)`` launches. An aliased buffer
       (``BufferSpec.aliased``) has no such launch: its conversion is
       reported as 0 s, with no times.
    3. Compute: ``W`` untimed repeats then ``n`` timed repeats, where a repeat
       is the ``C`` compute launches in order: ``(W + n) * C`` launches.
       ``n = R`` when ``min_total_time_s`` is 0; otherwise ``n`` is the
       smallest count from ``R`` to ``max_repeats`` whose repeat times (of
       ``clock``) add up to at least ``min_total_time_s``, or ``max_repeats``.
    4. With ``flush_cache`` (or a workload timed cold whatever the config
       says, :func:`laytune.runners.timed_cold`: conversion workloads, and
       those whose weights outgrow the device's cache), one buffer fill of
       ``flush_bytes`` (default:
       twice the device's global memory cache, at least 64 MiB, at most the
       largest allocation) before every timed repeat of steps 2 and 3:
       ``n + R * (P + U)`` fills (``n`` without conversions). Fills are not
       kernel launches and are never timed.

    5. For a workload timed cold by that rule while
       ``flush_cache`` is off: step 3 once more, ``R`` timed repeats without
       fills (the warm times, ``RunResult.warm_value_s``), unless abandoned:
       ``(W + R) * C`` more launches.

    6. On a CPU device, whose kernels share the host's cores, where Linux
       reports CPU pressure (``/proc/pressure/cpu``): when, during step 3,
       some runnable task waited for a CPU for more than ``contention_limit``
       of its wall time (another process took cores from the kernel: a
       measurement twice too slow, which once steered a search away from
       the best start), step 3 runs once more, and the series with less
       contention is kept (``RunResult.contention``); the other's ``m``
       event times are ``RunResult.contended_event_times_s``: ``(W + m) * C``
       more launches (and ``m`` more fills where step 4 flushes). ``None``:
       never timed again.

    So a successful candidate costs ``P + C + U + (W + R) * (P + U) + (W + n) * C``
    kernel launches, or ``P + C + U + (W + n) * C`` without conversions (plus
    steps 5 and 6's).

    Early stop: when the candidate's :class:`~laytune.runners.RunInput` sets
    ``abandon_above_s``, step 3 looks once at the first
    ``K = early_stop_after`` timed repeats, when the K-th has finished and
    more are due. If ``statistic`` of their ``clock`` times exceeds
    ``abandon_above_s``, timing stops there: ``n = K`` in every count above
    (steps 1, 2 and 4 are unchanged), and the result is ``abandoned`` with
    the K times it has. A candidate with ``n <= K`` planned repeats is never
    abandoned.

    A timed repeat is timed twice: by profiling events (the sum of
    ``end - start`` of the repeat's launches) and by a blocking wall clock
    around enqueueing the repeat and ``queue.finish()``. ``clock`` picks the
    one that ranks; ``statistic`` (median by default) reduces the repeats to
    the ranking value. A candidate whose median wall time differs from its
    median event time by more than ``clock_rtol * event + clock_atol_s`` is
    flagged (``RunResult.clock_disagreement``).

    ``time_limit_s`` bounds each of steps 1 to 4 of one candidate in the
    worker process (the verification, and each warm-up or timed launch
    group with its flush), not their sum: a 8192^2 tensor's candidate runs
    for longer than a small one's, but no step of it hangs. Past it the
    worker is killed and the candidate's result is a timeout. Preparing a
    workload the worker has not seen yet (its inputs and numpy reference)
    has its own bound, ``prepare_time_limit_s``.
    Inputs come from ``workload.make_inputs(seed)`` with a seed derived from
    ``seed`` and the workload key only, so every candidate of a workload
    (and every run) sees the same data.
    """

    warmup: int = 2
    repeats: int = 10
    min_total_time_s: float = 0.0
    max_repeats: int = 100
    flush_cache: bool = False
    flush_bytes: int | None = None
    clock: Clock = "event"
    statistic: Statistic = "median"
    measure_conversions: bool = True
    time_limit_s: float = 10.0
    prepare_time_limit_s: float = 120.0
    clock_rtol: float = 0.25
    clock_atol_s: float = 100e-6
    seed: int = 0
    early_stop_after: int = 3
    contention_limit: float | None = 0.15

    def __post_init__(self) -> None:
        if self.warmup < 0:
            raise ConfigError(f"warmup must be >= 0, got {self.warmup}")
        if self.repeats < 1:
            raise ConfigError(f"repeats must be >= 1, got {self.repeats}")
        if self.max_repeats < self.repeats:
            raise ConfigError(
                f"max_repeats ({self.max_repeats}) must be >= repeats ({self.repeats})"
            )
        if self.early_stop_after < 1:
            raise ConfigError(f"early_stop_after must be >= 1, got {self.early_stop_after}")
        if self.min_total_time_s < 0:
            raise ConfigError(f"min_total_time_s must be >= 0, got {self.min_total_time_s}")
        if self.flush_bytes is not None and self.flush_bytes <= 0:
            raise ConfigError(f"flush_bytes must be positive, got {self.flush_bytes}")
        if self.clock not in _CLOCKS:
            raise ConfigError(f"clock must be one of {_CLOCKS}, got {self.clock!r}")
        if self.statistic not in _STATISTICS:
            raise ConfigError(f"statistic must be one of {_STATISTICS}, got {self.statistic!r}")
        for name in ("time_limit_s", "prepare_time_limit_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if self.contention_limit is not None and not 0 < self.contention_limit <= 1:
            raise ConfigError(
                f"contention_limit must be in (0, 1] or None, got {self.contention_limit}"
            )
        if self.clock_rtol < 0 or self.clock_atol_s < 0:
            raise ConfigError(
                f"clock tolerances must be >= 0, got {self.clock_rtol}, {self.clock_atol_s}"
            )

    def launch_count(
        self,
        pack: int,
        compute: int,
        unpack: int,
        timed_repeats: int,
        timed_cold: bool = False,
        abandoned: bool = False,
        contended_repeats: int = 0,
    ) -> int:
        """Kernel launches of one successful candidate with ``timed_repeats`` = n
        (``early_stop_after`` for an abandoned one); ``timed_cold``: the
        workload's (step 5); ``contended_repeats``: the repeats of the series
        step 6 timed again and did not keep (0: none)."""
        count = pack + compute + unpack + (self.warmup + timed_repeats) * compute
        if contended_repeats:
            count += (self.warmup + contended_repeats) * compute
        if timed_cold and not self.flush_cache and not abandoned:
            count += (self.warmup + self.repeats) * compute
        if self.measure_conversions:
            count += (self.warmup + self.repeats) * (pack + unpack)
        return count

    def flush_count(
        self,
        pack: int,
        unpack: int,
        timed_repeats: int,
        timed_cold: bool = False,
        contended_repeats: int = 0,
    ) -> int:
        """Cache-flush fills of one successful candidate with ``timed_repeats`` = n
        (``timed_cold``: the workload's, see step 4; ``contended_repeats``: step 6's)."""
        if not (self.flush_cache or timed_cold):
            return 0
        conversions = self.repeats * (pack + unpack) if self.measure_conversions else 0
        return timed_repeats + contended_repeats + conversions


@dataclass(frozen=True)
class Tolerance:
    """When an output element counts as correct.

    An element passes when ``|out - ref| <= atol * scale + rtol * |ref|``
    with ``scale = max(1, max |ref|)`` over the whole output (so cancellation
    near zero in a large-valued output is not a failure). NaN or inf where
    the reference is finite fails. Integer and bool outputs must match
    exactly.
    """

    rtol: float
    atol: float

    @classmethod
    def for_dtype(cls, dtype: str | np.dtype, reduction_length: int = 1) -> Tolerance:
        """The tolerance for ``dtype``, widened by ``sqrt(reduction_length)``.

        Base values: the dtype's ``tolerance`` in :data:`laytune.dtypes.DTYPES`
        (float64 rtol 1e-9 / atol 1e-12, float32 rtol 1e-4 / atol 1e-5,
        float16 rtol 1e-2 / atol 1e-3), anything else exact. A sum
        of K float terms accumulates rounding error roughly like sqrt(K)
        units, so both bounds grow by ``sqrt(K)``.
        """
        known = DTYPES.get(np.dtype(dtype).name)
        if known is None or known.tolerance is None:
            return cls(0.0, 0.0)
        rtol, atol = known.tolerance
        factor = math.sqrt(max(1, reduction_length))
        return cls(rtol * factor, atol * factor)
