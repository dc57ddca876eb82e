"""Constraint checks and copy facts decided on reduced shapes agree with the
same checks over every element (the full pass), on every family and
compositions of families; and building a space makes no array of a buffer's
size."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from laytune.layout import Layout, compose, identity
from laytune.layout import _index_map as im
from laytune.layout import _reduce as reduce_module
from laytune.ops import transpose
from laytune.space import (
    ContiguousTileCopy,
    RowPointerTileLoad,
    SearchSpace,
    StridedTileCopy,
    SubgroupBlockAccess,
    VectorAccess,
)
from laytune.space._check import usable_staging
from laytune.space._copies import global_copy_facts
from tests.layout.strategies import every_family_layouts, one_of_every_family
from tests.space.conftest import make_device, make_matmul

PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def both_ways(check, layout: Layout, dtype: str):  # type: ignore[no-untyped-def]
    """(verdict on the reduced box, verdict of the pass over every element)."""
    device = make_device()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reduce_module, "WHOLE_BELOW", 0)
        reduced = check.check(layout, layout.shape, dtype, device)
        patch.setattr(reduce_module, "WHOLE_BELOW", 1 << 40)
        full = check.check(layout, layout.shape, dtype, device)
    return reduced, full


def same(reduced, full) -> None:  # type: ignore[no-untyped-def]
    """Same verdict, same count of failures, same first failure named."""
    assert reduced.ok == full.ok, (reduced, full)
    assert reduced.reasons[:2] == full.reasons[:2]


def _divisors(n: int, cap: int = 16) -> list[int]:
    return [d for d in range(1, min(n, cap) + 1) if n % d == 0]


@PROPERTY
@given(every_family_layouts(max_extent=48), st.data())
def test_vector_and_subgroup_checks_agree_with_full_pass(
    layout: Layout, data: st.DataObject
) -> None:
    dtype = data.draw(st.sampled_from(["float32", "float16"]))
    for axis in range(len(layout.shape)):
        for width in (2, 4, 8, 16):
            same(*both_ways(VectorAccess(axis, width), layout, dtype))
        size = data.draw(st.sampled_from([2, 4, 8, 16]))
        align = data.draw(st.sampled_from([4, 16]))
        same(*both_ways(SubgroupBlockAccess(axis, size, align), layout, dtype))


@PROPERTY
@given(every_family_layouts(max_extent=48), st.data())
def test_tile_checks_agree_with_full_pass(layout: Layout, data: st.DataObject) -> None:
    dtype = data.draw(st.sampled_from(["float32", "float16"]))
    shape = layout.shape
    rows = data.draw(st.sampled_from(_divisors(shape[-2])))
    cols = data.draw(st.sampled_from(_divisors(shape[-1])))
    align = data.draw(st.sampled_from([None, 4, 16, 32]))
    same(*both_ways(ContiguousTileCopy((rows, cols)), layout, dtype))
    same(*both_ways(StridedTileCopy((rows, cols), alignment_bytes=align), layout, dtype))
    same(
        *both_ways(
            RowPointerTileLoad(rows, row_elements=cols, alignment_bytes=align or 4), layout, dtype
        )
    )
    # a tile that does not divide the shape is refused the same way
    same(*both_ways(ContiguousTileCopy((shape[-2] + 1, 1)), layout, dtype))


@PROPERTY
@given(st.sampled_from([(32, 48, 64), (64, 32, 48), (96, 64, 32)]), st.booleans(), st.data())
def test_staging_copy_facts_agree_with_every_footprint(
    mnk: tuple[int, int, int], second: bool, data: st.DataObject
) -> None:
    """The copy facts of a staged input's layout, decided on one footprint
    per class of the layout's periods, are those of every footprint."""
    workload = make_matmul(*mnk)
    plan = usable_staging(workload)
    assert plan is not None
    staged = plan.inputs[int(second)]
    shape = next(b.shape for b in workload.buffers if b.name == staged.buffer)
    layout = data.draw(one_of_every_family(shape))
    if data.draw(st.booleans()) and not layout.index_map.separators:
        pshape = layout.physical_shape
        assume(len(pshape) <= 4 and math.prod(pshape) <= 40000)
        layout = compose(data.draw(one_of_every_family(pshape)), layout)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reduce_module, "WHOLE_BELOW", 0)
        reduced = global_copy_facts(workload, plan, staged, layout, (8, 16))
        patch.setattr(reduce_module, "WHOLE_BELOW", 1 << 40)
        full = global_copy_facts(workload, plan, staged, layout, (8, 16))
    assert reduced == full
    assert dict(reduced.reasons) == dict(full.reasons)


def test_building_a_space_makes_no_array_of_a_buffers_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fact of the global layouts of a 256 x 256 transpose and a 128^3
    matmul is decided without the offsets or occupancy of a whole buffer
    (only ``__local`` tiles, 256 elements here, are looked at whole)."""
    offsets = im._ShapeFacts.offsets

    def small_only(self):  # type: ignore[no-untyped-def]
        assert math.prod(self.shape) <= 4096, f"a pass over {self.shape}"
        return offsets.fget(self)

    monkeypatch.setattr(im._ShapeFacts, "offsets", property(small_only))
    device = make_device()
    for workload in (transpose((256, 256)), make_matmul(128, 128, 128)):
        space = SearchSpace(workload, device)
        assert len(space) > 1
        big = identity((4096, 4096))
        assert big.padding_count == 0 and big.padding_fraction == 0.0
