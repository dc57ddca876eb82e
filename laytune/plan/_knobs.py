"""The knobs of a planned operator: the kernel it runs in the layouts flowing chose.

A frozen operator runs its source's candidate as it is. Every other operator
(bias, relu, pooling, an element-wise add) gets its layouts from the flow
and, before this step, the baseline knobs: one scalar point per work-item,
which on a CPU moves a few GB/s where a copy moves tens. So, in order:

1. **Recorded**: the fastest verified record of the workload on the device
   with exactly these layouts and pad values (a tune of the operator, a
   ``laytune tune --free ...`` job, left it): its knobs.
2. **Derived**: the knobs of the first standard start derived from the
   statement's structure (:func:`laytune.search.standard_candidates`: a
   reduction's vectors along its reduce axis with several accumulators, a
   transpose's register tiles, rows of vectors for an element-wise
   statement) that reads vectors and that codegen's checks accept on these
   layouts (``check_candidate``). A softmax's row max over BERT's
   12 x 128 x 128 scores ran 0.029 ms as the plain kernel, one row per
   work-item, 0.017 ms so.
3. **Vectorized**: a vector along the last spatial axis that every buffer's
   layout keeps contiguous (the widest of :data:`WIDTHS` that divides the
   axis; ``serves_vector``), with a block of the same width along it.
4. **Derived, scalar**: the first accepted start that blocks scalars.
5. **Plain**: the baseline knobs.

A planned operator's candidate keeps its layouts and pad values: only knobs
change, so nothing the flow decided moves.
"""

from __future__ import annotations

from typing import Any

from laytune.device_info import DeviceInfo
from laytune.exceptions import LaytuneError
from laytune.space import (
    Candidate,
    block_knob,
    check_candidate,
    complete_knobs,
    is_default,
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


#: Standard starts whose knobs a planned operator tries on its own layouts.
STARTS = 8


def _inputs_pads(workload: Any, candidate: Candidate) -> dict[str, Any]:
    """The candidate's pad values of its inputs: what ``lower()`` checks."""
    outputs = {b.name for b in workload.buffers if b.role == "output"}
    return {k: v for k, v in candidate.pad_values if k not in outputs}


def _derived(workload: Any, candidate: Candidate, device: DeviceInfo) -> list[Candidate]:
    """The standard starts' knobs that codegen accepts on ``candidate``'s
    layouts, in the starts' order, each kept to the knobs it sets."""
    from laytune.search import standard_candidates
    from laytune.space import SearchSpace, SpaceOptions

    layouts = candidate.layout_map
    inputs_pads = _inputs_pads(workload, candidate)
    # only the starts' knobs are taken: a space of identity layouts holds
    # them (a third of a second per operator less than every family's)
    try:
        space = SearchSpace(workload, device, SpaceOptions(families=("identity",)))
        starts = standard_candidates(space, STARTS)
    except LaytuneError:  # a dtype the device lacks: rules 3 and 5
        return []
    found = []
    for start in starts:
        knobs = {k: v for k, v in start.knob_map.items() if not is_default(k, v)}
        if not knobs:
            continue  # the baseline's: rule 5
        checked = Candidate.make(layouts, start.knob_map, inputs_pads)
        if check_candidate(workload, checked, device).ok:
            found.append(Candidate.make(layouts, knobs, dict(candidate.pad_values)))
    return found


def _vectors(candidate: Candidate) -> bool:
    """Whether the kernel reads and writes vectors (along an axis or a reduction)."""
    knobs = candidate.knob_map
    return knobs.get("vector", 1) > 1 or knobs.get("reduce_vector", 1) > 1


def _vectorized(workload: Any, candidate: Candidate, device: DeviceInfo) -> Candidate | None:
    layouts = candidate.layout_map
    pads = dict(candidate.pad_values)
    inputs_pads = _inputs_pads(workload, candidate)
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
    derived = _derived(workload, candidate, device)
    for start in derived:
        if _vectors(start):
            return start, "the statement's derived start"
    vectorized = _vectorized(workload, candidate, device)
    if vectorized is not None:
        knobs = vectorized.knob_map
        return vectorized, f"{knobs['vector']}-wide vectors along {knobs['vector_axis']}"
    if derived:
        return derived[0], "the statement's derived start, scalar"
    return candidate, ""
