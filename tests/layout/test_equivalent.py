"""IndexMap.equivalent (asked when pricing every record and matching a held
layout) agrees with comparing both maps at every logical index, and answers
for a large tensor without a pass over it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from laytune.layout import IndexMap, Layout, identity, pad_every, permute, row_xor, tile
from laytune.layout import _index_map as im
from laytune.layout._expr import Var
from tests.layout.strategies import exprs, family_layouts, one_family, shapes

BIG = (8192, 8192)


def everywhere(a: IndexMap, b: IndexMap, shape: tuple[int, ...]) -> bool:
    grid = np.indices(shape).reshape(len(shape), -1)
    cols = [grid[k] for k in range(len(shape))]
    return all(
        np.array_equal(*np.broadcast_arrays(x, y))
        for x, y in zip(a.map_indices(tuple(cols)), b.map_indices(tuple(cols)), strict=True)
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), shape=shapes)
def test_random_maps_agree_with_every_index(data: st.DataObject, shape: tuple[int, ...]) -> None:
    ndim = len(shape)
    names = tuple("ijk"[:ndim])
    outputs = data.draw(st.lists(exprs(ndim), min_size=1, max_size=2))
    other = list(outputs)
    k = data.draw(st.integers(0, len(outputs) - 1))
    # The same output written otherwise, or another output.
    other[k] = data.draw(
        st.one_of(st.just(other[k] + (Var(ndim - 1) - Var(ndim - 1))), exprs(ndim))
    )
    a, b = IndexMap(names, tuple(outputs)), IndexMap(names, tuple(other))
    assert a.equivalent(b, shape) == everywhere(a, b, shape)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), a=family_layouts(max_parts=2))
def test_families_and_compositions_agree_with_every_index(data: st.DataObject, a: Layout) -> None:
    b = data.draw(one_family(a.shape))
    if a.index_map.ndim_out == b.index_map.ndim_out:
        truth = everywhere(a.index_map, b.index_map, a.shape)
        assert a.index_map.equivalent(b.index_map, a.shape) == truth


@pytest.mark.parametrize(
    ("a", "text", "same"),
    [
        (identity(BIG), "lambda i, j: [j, i]", False),
        (permute(BIG, (1, 0)), "lambda i, j: [j % 8192, i]", True),
        (tile(BIG, (16, 16)), "lambda i, j: [(i - i % 16) // 16, j // 16, i % 16, j % 16]", True),
        (tile(BIG, (16, 16)), "lambda i, j: [i // 16, j // 8, i % 16, j % 8]", False),
        (row_xor(BIG, 8, 4), str(row_xor(BIG, 8, 2).index_map), False),
        (pad_every(BIG, 4, 4), str(pad_every(BIG, 4, 8).index_map), False),
    ],
)
def test_a_large_tensor_is_never_passed_over(
    monkeypatch: pytest.MonkeyPatch, a: Layout, text: str, same: bool
) -> None:
    def no_full_pass(*args: object, **kwargs: object) -> None:
        raise AssertionError("a pass over every element of the tensor")

    monkeypatch.setattr(im.IndexMap, "_grid", no_full_pass)
    monkeypatch.setattr(im.IndexMap, "_eval", no_full_pass)
    other = IndexMap.parse(text)
    assert other != a.index_map  # equality of the expressions does not answer
    assert a.index_map.equivalent(other, a.shape) is same
