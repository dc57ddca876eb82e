"""The knobs of a planned operator: the kernel it runs in the layouts flowing chose.

A frozen operator runs its source's candidate as it is. Every other operator
(bias, relu, pooling, an element-wise add) gets its layouts from the flow
and, before this step, the baseline knobs: one scalar point per work-item,
which on a CPU moves a few GB/s where a copy moves tens. So, in order:

1. **Recorded**: the fastest verified record of the workload on the device
   with exactly these layouts and pad values (a tune of the operator, a
   ``laytune tune --free ...`` job, left it): its knobs.
2. **Vectorized**: a vector along the last spatial axis that every buffer's
   layout keeps contiguous (the widest of :data:`WIDTHS` that divides the
   axis; ``serves_vector``), with a block of the same width along it, where
   codegen's checks accept it (``check_candidate``).
3. **Plain**: the baseline knobs.

A planned operator's candidate keeps its layouts and pad values: only knobs
change, so nothing the flow decided moves.
"""

from __future__ import annotations

from typing import Any

from laytune.device_info import DeviceInfo
from laytune.space import (
    Candidate,
    block_knob,
    check_candidate,
    complete_knobs,
    serves_vector,
)

__all__ = ["WIDTHS", "planned_kernel"]

WIDTHS = (16, 8, 4)
"""Vector widths tried for a planned operator, widest first."""


def _recorded(records: Any, workload: Any, candidate: Candidate, device: DeviceInfo) -> Any:
    best = None
    for record in records.records(workload=workload.key, device=device.key, status="ok"):
        other = record.candidate
        if other.layout_map != candidate.layout_map or other.pad_values != candidate.pad_values:
            continue
        if best is None or _kernel_s(record) < _kernel_s(best):
            best = record
    return best


def _kernel_s(record: Any) -> float:
    """The kernel alone: the layouts are the plan's, whatever the record's boundary."""
    return record.compute_s if record.compute_s is not None else record.value_s


def _vectorized(workload: Any, candidate: Candidate, device: DeviceInfo) -> Candidate | None:
    layouts = candidate.layout_map
    pads = dict(candidate.pad_values)
    outputs = {b.name for b in workload.buffers if b.role == "output"}
    inputs_pads = {k: v for k, v in pads.items() if k not in outputs}  # as lower() checks
    spatial = [k for k, axis in enumerate(workload.axes) if axis.kind == "spatial"]
    for axis in reversed(spatial):
        extent = workload.axes[axis].extent
        for width in WIDTHS:
            if extent % width:
                continue
            if not all(serves_vector(b, layouts[b.name], axis, width) for b in workload.buffers):
                continue
            knobs = {
                "vector_axis": workload.axes[axis].name,
                "vector": width,
                block_knob(workload, axis): width,
            }
            checked = Candidate.make(layouts, complete_knobs(workload, knobs), inputs_pads)
            if check_candidate(workload, checked, device).ok:
                return Candidate.make(layouts, knobs, pads)
    return None


def planned_kernel(
    workload: Any, candidate: Candidate, device: DeviceInfo, records: Any = None
) -> tuple[Candidate, str]:
    """``candidate`` (a planned operator's layouts, baseline knobs) with the
    knobs of the module docstring, and a note saying which rule gave them."""
    if records is not None:
        found = _recorded(records, workload, candidate, device)
        if found is not None:
            kept = Candidate.make(
                candidate.layout_map, found.candidate.knob_map, dict(candidate.pad_values)
            )
            return kept, f"knobs of record {found.id}"
    vectorized = _vectorized(workload, candidate, device)
    if vectorized is not None:
        knobs = vectorized.knob_map
        return vectorized, f"{knobs['vector']}-wide vectors along {knobs['vector_axis']}"
    return candidate, ""
