"""The staging copy of a benchmark's best candidates, and what forcing each
other copy costs (``bench.tuned_vs_fixed``).

For one staged candidate (the fastest staged one among those measured side
by side), every other value of the ``copy`` knob with all else equal; a
``subgroup_block`` copy takes the first sub-group size the device offers
that ``SearchSpace.check`` accepts. A variant the rules refuse is reported
with the first reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from laytune.space import COPY_VARIANTS, Candidate, SearchSpace

__all__ = ["CopyVariant", "copy_rows", "copy_variants"]


@dataclass(frozen=True)
class CopyVariant:
    """``copy`` forced on the base candidate: the candidate, or why not."""

    copy: str
    candidate: Candidate | None
    refused: str = ""


def _with_copy(space: SearchSpace, base: Candidate, copy: str) -> CopyVariant:
    sizes = [0] if copy != "subgroup_block" else list(space.device.sub_group_sizes) or [16]
    why = ""
    for size in sizes:
        knobs = {**base.knob_map, "copy": copy, "subgroup": size}
        candidate = Candidate.make(base.layout_map, knobs, base.pad_values)
        verdict = space.check(candidate)
        if verdict.ok:
            return CopyVariant(copy, candidate)
        why = why or verdict.reasons[0]
    return CopyVariant(copy, None, why)


def copy_variants(space: SearchSpace, candidates: Sequence[Candidate]) -> list[CopyVariant]:
    """Every copy forced on the first staged candidate of ``candidates``
    (fastest first); empty when none is staged."""
    base = next((c for c in candidates if c.knob_map.get("local_stage")), None)
    if base is None:
        return []
    return [_with_copy(space, base, copy) for copy in COPY_VARIANTS]


def copy_rows(
    title: str,
    base_copy: str,
    variants: Sequence[CopyVariant],
    times: dict[str, float],
    ms: Callable[[float], str],
) -> list[list[str]]:
    """Report rows: per copy its time and its cost against the base's copy."""
    own = times.get(base_copy, math.inf)
    rows = []
    for v in variants:
        if v.candidate is None:
            rows.append([title, v.copy, "refused", "-", v.refused[:160]])
            continue
        t = times.get(v.copy, math.inf)
        ratio = "-" if math.isinf(t) or math.isinf(own) else f"{t / own:.2f}x"
        mark = " (the best's)" if v.copy == base_copy else ""
        rows.append([title, v.copy + mark, ms(t), ratio, ""])
    return rows
