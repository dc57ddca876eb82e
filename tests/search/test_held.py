"""Starts that keep a buffer in the layout its caller holds it in."""

from __future__ import annotations

from laytune import ops
from laytune.layout import permute
from laytune.records import Boundary
from laytune.search import held_layouts, standard_candidates, with_held_layouts
from laytune.space import SearchSpace
from tests.search.devices import written_cpu

MATMUL = ops.matmul(64, 16, 32)


def _space() -> SearchSpace:
    return SearchSpace(MATMUL, written_cpu())


def test_a_held_layout_given_as_text_is_found_among_the_space_layouts() -> None:
    space = _space()
    boundary = Boundary.of(MATMUL, {"A": "lambda i, j: [j, i]"})
    held = held_layouts(space, boundary)
    assert list(held) == ["A"]
    assert held["A"].index_map.equivalent(permute((64, 32), (1, 0)).index_map, (64, 32))
    assert held["A"] in space.layouts("A")


def test_each_start_is_preceded_by_its_twin_in_the_held_layout() -> None:
    space = _space()
    starts = standard_candidates(space, 6)
    boundary = Boundary.of(MATMUL, {"A": "lambda i, j: [j, i]"})
    merged = with_held_layouts(space, boundary, starts)
    assert len(merged) == len(starts)  # the budget of starts stays the same
    transposed = str(permute((64, 32), (1, 0)).index_map)
    twins = [c for c in merged if str(c.layout("A").index_map) == transposed]
    plain = [c for c in merged if c not in twins]
    assert twins and merged[0] in twins
    assert plain == starts[: len(plain)]  # the starts themselves, in their order
    for twin in twins:  # each right before the start it comes from, or last
        origin = next(s for s in starts if s.knobs == twin.knobs)
        assert twin.layout("B") == origin.layout("B")
        assert twin.layout("C") == origin.layout("C")
        k = merged.index(twin)
        assert k == len(merged) - 1 or merged[k + 1].knobs == twin.knobs


def test_without_a_held_layout_the_starts_are_unchanged() -> None:
    space = _space()
    starts = standard_candidates(space, 6)
    for spec in ({}, {"A": "free"}, {"A": "lambda i, j: [i, j]"}):
        assert with_held_layouts(space, Boundary.of(MATMUL, spec), starts) == starts
