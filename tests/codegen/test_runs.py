"""contiguous_along (the lowering's question "are aligned runs along this axis
consecutive?") agrees with a pass over every element on small shapes, and
answers for a large tensor without one."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from laytune.codegen._runs import contiguous_along
from laytune.layout import Layout, block, pad_every, permute, row_xor, swizzle, tile
from laytune.layout import _index_map as im
from tests.layout.strategies import family_layouts, one_of_every_family


def full_pass(layout: Layout, dim: int, width: int) -> bool:
    """Every aligned run of ``width`` along ``dim``, looked at one by one."""
    shape = layout.shape
    if shape[dim] % width:
        return False
    offsets = np.asarray(layout.index_map.flat_offsets(shape)).reshape(shape)
    runs = np.moveaxis(offsets, dim, -1).reshape(-1, shape[dim] // width, width)
    first = runs[..., :1]
    return bool(((runs == first + np.arange(width)).all()) and not (first % width).any())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layout=family_layouts(max_parts=2), dim=st.integers(0, 2), width=st.sampled_from([2, 4, 8]))
def test_agrees_with_a_pass_over_every_element(layout: Layout, dim: int, width: int) -> None:
    dim %= len(layout.shape)
    assert (contiguous_along(layout, dim, width) is None) == full_pass(layout, dim, width)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), width=st.sampled_from([2, 4, 8]))
def test_agrees_on_every_family_on_shapes_longer_than_their_periods(
    data: st.DataObject, width: int
) -> None:
    shape = data.draw(st.sampled_from([(16, 48), (24, 32), (8, 16, 40), (64, 24)]))
    layout = data.draw(one_of_every_family(shape))
    dim = data.draw(st.integers(0, len(shape) - 1))
    assert (contiguous_along(layout, dim, width) is None) == full_pass(layout, dim, width)


@pytest.mark.parametrize(
    ("layout", "dim", "width", "contiguous"),
    [
        (permute((8192, 8192), (1, 0)), 0, 8, True),
        (permute((8192, 8192), (1, 0)), 1, 8, False),
        (block((8192, 8192), 0, 8), 0, 8, True),
        (pad_every((8192, 8192), 4, 4), 1, 4, True),
        (pad_every((8192, 8192), 4, 3), 1, 4, False),  # rows after a pad start misaligned
        (row_xor((8192, 8192), 8, 4), 1, 4, True),
        (row_xor((8192, 8192), 8, 1), 1, 4, False),
        (swizzle((8192, 8192), 3, 2, 3), 1, 4, True),
        (tile((8192, 8192), (16, 16)), 1, 16, True),
        (tile((8192, 8192), (16, 16)), 0, 2, False),
    ],
)
def test_a_large_tensor_is_never_passed_over(
    monkeypatch: pytest.MonkeyPatch, layout: Layout, dim: int, width: int, contiguous: bool
) -> None:
    def no_full_pass(*args: object, **kwargs: object) -> None:
        raise AssertionError("a pass over every element of the tensor")

    monkeypatch.setattr(im.IndexMap, "flat_offsets", no_full_pass)
    monkeypatch.setattr(im.IndexMap, "_grid", no_full_pass)
    assert (contiguous_along(layout, dim, width) is None) is contiguous


def test_says_why_a_run_is_not_contiguous() -> None:
    assert "not consecutive" in str(contiguous_along(permute((64, 64), (1, 0)), 1, 4))
    assert "not a multiple of 4" in str(contiguous_along(pad_every((64, 64), 4, 3), 1, 4))
    assert "not a multiple of 8" in str(contiguous_along(permute((64, 12), (1, 0)), 1, 8))
