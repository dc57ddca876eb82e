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

__all__ = ["MatrixStep", "matrix_schedule"]


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
        self.reads = frozenset({*self.schedule, "@local_copies"})

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
        out: list[Broken] = []
        for knob, want in self.schedule.items():
            if not strict_in(state.get(knob), (want,)):
                out.append(
                    (
                        None,
                        f"matrix {value!r} runs its own schedule: {knob} must be {want!r}, "
                        f"not {state.get(knob)!r}",
                    )
                )
        if out:
            return out
        if value not in self.available:  # the device's reason alone: no layout would do
            if self.why_none:
                why = f"device has no matrix intrinsic: {self.why_none}"
            else:
                why = f"{self.s.device.name} has {', '.join(sorted(self.available))}, not {value}"
            return [("matrix_capability", f"matrix {value!r}: {why}")]
        facts = {f.buffer: f for f in state.get("@local_copies") or ()}
        for buffer, op in zip(self.operands, ("a", "b"), strict=True):
            local = facts.get(f"{buffer}.local")
            key = matrix_fact(value, op)
            if local is not None and key not in local.accepts:
                out.append(("matrix_tile_load", f"matrix {value!r}: {local.why(key)}"))
        return out
