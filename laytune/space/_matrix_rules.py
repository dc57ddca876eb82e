"""The ``matrix`` knob's rule step (see :mod:`laytune.space._matrix`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from laytune.intrinsics import MATRIX_TILE
from laytune.space._knobs import block_knob, grid_dims, group_knob, spatial_axes
from laytune.space._matrix import (
    half_storage_only,
    matrix_capability,
    matrix_fact,
    matrix_operands,
)
from laytune.space._step import Broken, Setting, State, Step, strict_in
from laytune.space._workload import WorkloadLike

__all__ = ["OFF_SCHEDULE", "MatrixStep", "ScheduleWatch", "matrix_schedule", "watch_schedule"]

#: State key: whether the assignment so far sets some knob off the matrix
#: kernels' schedule.
OFF_SCHEDULE = "#off_schedule"


def matrix_schedule(workload: WorkloadLike) -> dict[str, Any]:
    """The knobs a matrix kernel needs besides ``matrix`` (the staging
    plan's work-group of 16 x 16 one-point register blocks)."""
    knobs: dict[str, Any] = {
        "order": "logical",
        "local_stage": True,
        "vector_axis": "",
        "vector": 1,
        "vector_transpose": "",
        "copy": "elementwise",
        "subgroup": 0,
        "reduce_order": "",
        "split": 1,
        "unroll": 1,
        "peel": False,
        "pad_mode": "guard",
        "store": "plain",
    }
    for k in spatial_axes(workload):
        knobs[block_knob(workload, k)] = 1
    for dim in range(len(grid_dims(workload))):
        knobs[group_knob(workload, dim)] = MATRIX_TILE
    return knobs


class MatrixStep(Step):
    """The ``matrix`` knob's rule step, the last of a matmul-like workload's
    steps: it reads the schedule the earlier steps chose. Joint rules:
    ``matrix_capability`` (the device has the instruction) and
    ``matrix_tile_load`` (``MatrixTileLoad`` accepts both local tiles); the
    matrix kernel's own schedule is a structural rule (never lifted), so the
    space holds one candidate per matrix kernel."""

    name = "matrix"

    def __init__(self, setting: Setting) -> None:
        super().__init__(setting)
        self.schedule = matrix_schedule(setting.workload)
        self.operands, _ = matrix_operands(setting.workload)
        self.available, self.why_none = matrix_capability(setting.device)
        self.storage_only = half_storage_only(setting.workload, setting.device)
        # one key for the whole schedule (:class:`ScheduleWatch`), not each of
        # its knobs: counting memoises on what later steps read, and reading
        # every knob keyed each count on the whole assignment (an NVIDIA
        # float16 matmul's space, its matrix kernels alone valid, took 80 s to
        # count where it now takes under a second)
        self.reads = frozenset({OFF_SCHEDULE, "@local_copies"})

    def derived(self, state: State) -> State:
        return {OFF_SCHEDULE: False}

    def values(self, state: State) -> Sequence[Any]:
        return self.s.matrices

    def check(self, state: State, value: Any) -> list[Broken]:
        if value == "none":
            if self.storage_only:  # structural: no layout or knob gives the device half arithmetic
                return [
                    (
                        None,
                        f"matrix 'none' computes in float16, which needs cl_khr_fp16; "
                        f"{self.s.device.name} lacks it and runs float16 only in its matrix "
                        f"kernels (half as storage)",
                    )
                ]
            return []
        if state[OFF_SCHEDULE]:
            knob, want = next(
                (k, v) for k, v in self.schedule.items() if not strict_in(state[k], (v,))
            )
            return [
                (
                    None,
                    f"matrix {value!r} runs its own schedule: {knob} must be {want!r}, "
                    f"not {state[knob]!r}",
                )
            ]
        if value not in self.available:  # the device's reason alone: no layout would do
            if self.why_none:
                why = f"device has no matrix intrinsic: {self.why_none}"
            else:
                why = f"{self.s.device.name} has {', '.join(sorted(self.available))}, not {value}"
            return [("matrix_capability", f"matrix {value!r}: {why}")]
        out: list[Broken] = []
        facts = {f.buffer: f for f in state.get("@local_copies") or ()}
        for buffer, op in zip(self.operands, ("a", "b"), strict=True):
            local = facts.get(f"{buffer}.local")
            key = matrix_fact(value, op)
            if local is not None and key not in local.accepts:
                out.append(("matrix_tile_load", f"matrix {value!r}: {local.why(key)}"))
        return out


class ScheduleWatch(Step):
    """The step of a knob the matrix kernels fix, as ``inner`` is, and
    besides: choosing a value other than the schedule's (``want``) sets
    :data:`OFF_SCHEDULE`. The matrix step then reads that one key."""

    def __init__(self, inner: Step, want: Any) -> None:
        super().__init__(inner.s)
        self.inner, self.want = inner, want
        self.name, self.reads = inner.name, inner.reads

    def values(self, state: State) -> Sequence[Any]:
        return self.inner.values(state)

    def check(self, state: State, value: Any) -> list[Broken]:
        return self.inner.check(state, value)

    def apply(self, state: State, value: Any) -> None:
        self.inner.apply(state, value)
        if not strict_in(value, (self.want,)):
            state[OFF_SCHEDULE] = True

    @property
    def writes(self) -> frozenset[str]:
        return self.inner.writes | {OFF_SCHEDULE}

    def derived(self, state: State) -> State:
        return self.inner.derived(state)

    def classes(self, state: State, domain: Sequence[Any]) -> list[tuple[Any, int]] | None:
        if state[OFF_SCHEDULE]:  # already off: the values write what inner's do
            return self.inner.classes(state, domain)
        on = [v for v in domain if strict_in(v, (self.want,))]
        off = [v for v in domain if not strict_in(v, (self.want,))]
        grouped = self.inner.classes(state, off) if off else []
        if grouped is None:
            return None
        return [(v, 1) for v in on] + grouped


def watch_schedule(steps: Sequence[Step]) -> list[Step]:
    """``steps`` with each knob a matrix step's schedule fixes watched
    (:class:`ScheduleWatch`); unchanged where no step is a matrix step."""
    matrix = next((step for step in steps if isinstance(step, MatrixStep)), None)
    if matrix is None:
        return list(steps)
    return [
        ScheduleWatch(step, matrix.schedule[step.name]) if step.name in matrix.schedule else step
        for step in steps
    ]
