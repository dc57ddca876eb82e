"""Starts that read a buffer the way the caller holds it.

A ``fixed`` buffer that the caller holds in a layout of its own (a matmul
handed ``A`` transposed, as ``A.T @ B`` hands it) costs a conversion per call
in every candidate that lays it out otherwise, identity layouts included. A
candidate whose layout of that buffer *is* the caller's pays nothing for it:
for matmul's ``A`` held as ``[k, i]``, the register block's rows of ``A`` at
one ``k`` lie next to each other, as in a packed panel. The standard starts
know nothing of the boundary, so each is also offered with the held buffers
in their held layouts, before it.
"""

from __future__ import annotations

from collections.abc import Sequence

from laytune.layout import Layout
from laytune.records import Boundary
from laytune.search._strategies import params_of
from laytune.space import Candidate, SearchSpace

__all__ = ["held_layouts", "with_held_layouts"]


def held_layouts(space: SearchSpace, boundary: Boundary) -> dict[str, Layout]:
    """Buffer -> the layout of ``space`` equal to the one the caller holds it
    in, for every ``fixed`` buffer held in a layout other than the logical
    one that the space offers (a layout given as text is matched to the
    space's family layouts by its map on the buffer's shape)."""
    found: dict[str, Layout] = {}
    for name, policy in boundary.policies:
        held = policy.layout
        if policy.kind != "fixed" or held is None or held.is_identity:
            continue
        if name not in space.buffers:
            continue
        for layout in space.layouts(name):
            same_shape = layout.physical_shape == held.physical_shape
            if same_shape and layout.index_map.equivalent(held.index_map, held.shape):
                found[name] = layout
                break
    return found


def with_held_layouts(
    space: SearchSpace, boundary: Boundary, starts: Sequence[Candidate]
) -> list[Candidate]:
    """``starts``, each preceded by its twin with the held buffers in their
    held layouts (:func:`held_layouts`) where the space holds that twin, as
    many as ``starts`` (the budget of starts stays the same)."""
    held = held_layouts(space, boundary)
    if not held:
        return list(starts)
    merged: list[Candidate] = []
    for start in starts:
        twin = Candidate.make({**start.layout_map, **held}, dict(start.knobs))
        replayed = params_of(space, twin)
        for candidate in (None if replayed is None else replayed[1], start):
            if candidate is not None and candidate not in merged:
                merged.append(candidate)
    return merged[: len(starts)]
