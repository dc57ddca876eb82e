"""How far a reduce loop may run into a buffer's padding (_max_extent): the
layout's inverse decides it on periods, in agreement with a pass over every
element of the grown shape, and a large tensor is never passed over."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from laytune.codegen import _analysis
from laytune.layout import Layout, block, pad_every, pad_rows, tile
from laytune.layout import _index_map as im
from tests.layout.strategies import one_of_every_family


def by_every_element(layout: Layout, dim: int, cap: int) -> int:
    """_max_extent as it was: injectivity looked at on every grown shape."""
    m, pshape = layout.index_map, layout.physical_shape

    def fits(extent: int) -> bool:
        shape = list(layout.shape)
        shape[dim] = extent
        try:
            return m.physical_shape(shape) == pshape and m.is_injective(shape)
        except Exception:
            return False

    lo, hi = layout.shape[dim], cap
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_inverse_agrees_with_every_element(data: st.DataObject) -> None:
    shape = data.draw(st.sampled_from([(6, 10), (12, 7), (5, 9, 6), (16, 14)]))
    layout = data.draw(one_of_every_family(shape))
    dim = data.draw(st.integers(0, len(shape) - 1))
    cap = 2 * shape[dim] + 8
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_analysis, "_WHOLE_CHECK", 0)  # the inverse alone decides
        found = _analysis._max_extent(layout, dim, cap)
    assert found == by_every_element(layout, dim, cap)


@pytest.mark.parametrize(
    ("layout", "dim", "extent"),
    [
        (block((4096, 4094), 1, 8), 1, 4096),
        (pad_rows((4096, 4090), 6), 1, 4090),  # a flat map: its last row ends the buffer
        (tile((4096, 4090), (16, 16)), 1, 4096),
        (pad_every((4096, 4096), 4, 4), 0, 4096),
    ],
)
def test_a_large_tensor_is_never_passed_over(
    monkeypatch: pytest.MonkeyPatch, layout: Layout, dim: int, extent: int
) -> None:
    def no_full_pass(*args: object, **kwargs: object) -> None:
        raise AssertionError("a pass over every element of the tensor")

    monkeypatch.setattr(im._ShapeFacts, "check", no_full_pass)
    monkeypatch.setattr(im.IndexMap, "_grid", no_full_pass)
    assert _analysis._max_extent(layout, dim, 2 * layout.shape[dim] + 64) == extent
