"""Intrinsic constraints, decided exactly on concrete shapes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laytune.exceptions import LayoutError, ShapeMismatchError
from laytune.layout import (
    block,
    custom,
    identity,
    pad_every,
    pad_rows,
    permute,
    row_xor,
    texture,
    tile,
)
from laytune.space import (
    BankConflicts,
    ContiguousTileCopy,
    Image2DRead,
    LocalMemoryBudget,
    PaddingBudget,
    RowPointerTileLoad,
    StridedTileCopy,
    VectorAccess,
    Verdict,
    constraint_from_json,
)
from tests.space.conftest import make_device

# -- the seed's problem 1: pad 4 every 2 rows ---------------------------------


def test_seed_pad_every_two_rows_breaks_the_constant_stride(device):
    shape = (128, 64)
    layout = pad_every(shape, 2, 4)  # i * 64 + j + i // 2 * 4
    verdict = StridedTileCopy((16, 16)).check(layout, shape, "float32", device)
    assert not verdict.ok
    assert "32 of 32 tiles" in verdict.reasons[0]
    first = verdict.reasons[1]
    assert "tile (0, 0) at row 2" in first
    assert "offset 132, expected 128" in first
    assert "step 68, not the stride 64" in first


def test_seed_pad_every_two_rows_is_fine_for_row_pointers(device):
    shape = (128, 64)
    layout = pad_every(shape, 2, 4)
    load = RowPointerTileLoad(rows=16, row_elements=16)  # 16-byte aligned row pointers
    assert load.check(layout, shape, "float32", device).ok
    # in float16 the 4 padding elements are 8 bytes: rows lose 16-byte alignment
    verdict = load.check(layout, shape, "float16", device)
    assert not verdict.ok
    assert (
        "row 2 of tile (0, 0) starts at offset 132 (264 bytes), not aligned to 16 bytes"
        in (verdict.reasons[1])
    )
    assert (
        RowPointerTileLoad(16, row_elements=16, alignment_bytes=8)
        .check(layout, shape, "float16", device)
        .ok
    )


def test_strided_copy_accepts_padded_rows_and_names_a_broken_row(device):
    shape = (64, 64)
    assert StridedTileCopy((16, 16)).check(pad_rows(shape, 4), shape, "float32", device).ok
    verdict = StridedTileCopy((16, 16)).check(row_xor(shape, 8), shape, "float32", device)
    assert not verdict.ok and "row 1 of tile (0, 0) is not contiguous" in verdict.reasons[1]


# -- the swizzles of the seed ---------------------------------------------------


def test_elementwise_xor_breaks_16_byte_rows_chunk_xor_keeps_them(device):
    shape = (64, 64)
    ldmatrix = RowPointerTileLoad(rows=8, row_bytes=16)
    verdict = ldmatrix.check(row_xor(shape, 8), shape, "float16", device)
    assert not verdict.ok
    assert "row 1 of tile (0, 0) is not contiguous" in verdict.reasons[1]
    assert ldmatrix.check(row_xor(shape, 8, chunk=8), shape, "float16", device).ok


def test_bank_conflicts_of_16_byte_row_segments(device):
    shape = (64, 64)
    pattern = BankConflicts.row_segments(lanes=8, elements=8, banks=32, bank_bytes=4)
    plain = pattern.check(identity(shape), shape, "float16", device)
    swizzled = pattern.check(row_xor(shape, 8, chunk=8), shape, "float16", device)
    assert plain.ok and plain.score == 8
    assert "8-way" in plain.reasons[0]
    assert swizzled.ok and swizzled.score == 1


def test_bank_conflicts_of_a_column_read(device):
    shape = (32, 32)
    pattern = BankConflicts.column(lanes=32)
    assert pattern.check(identity(shape), shape, "float32", device).score == 32
    assert pattern.check(row_xor(shape, 32), shape, "float32", device).score == 1
    assert pattern.check(pad_rows(shape, 1), shape, "float32", device).score == 1


def test_bank_conflicts_broadcast_is_not_a_conflict(device):
    shape = (32, 32)
    same_word = BankConflicts(tuple(((0, 0),) for _ in range(32)))
    assert same_word.check(identity(shape), shape, "float32", device).score == 1


def test_bank_conflicts_max_degree_makes_it_hard(device):
    shape = (32, 32)
    pattern = BankConflicts.column(32, max_degree=4)
    verdict = pattern.check(identity(shape), shape, "float32", device)
    assert not verdict.ok and "over the allowed 4-way" in verdict.reasons[0]


# -- vectors -------------------------------------------------------------------


def test_nchw4c_accepts_a_width_4_vector_along_c(device):
    shape = (1, 64, 56, 56)
    assert VectorAccess(axis=1, width=4).check(block(shape, 1, 4), shape, "float32", device).ok
    assert not VectorAccess(axis=1, width=4).check(identity(shape), shape, "float32", device).ok


def test_nchw3c_rejects_a_width_4_vector_and_says_why(device):
    shape = (1, 64, 56, 56)
    layout = block(shape, 1, 3)
    assert layout.has_padding
    verdict = VectorAccess(axis=1, width=4).check(layout, shape, "float32", device)
    assert not verdict.ok
    text = "\n".join(verdict.reasons)
    assert "from logical (0, 0, 0, 0) lie at physical offsets [0, 1, 2, 9408]" in text
    assert "not consecutive (break after element 2)" in text
    assert "block(axis=1, factor=3) is padded" in text


def test_vector_needs_alignment_and_a_dividing_extent(device):
    shape = (4, 10)
    shifted = custom(shape, "lambda i, j: [i * 11 + j + 1]")
    verdict = VectorAccess(1, 2).check(shifted, shape, "float32", device)
    assert not verdict.ok and "not a multiple of 2" in verdict.reasons[1]
    verdict = VectorAccess(1, 4).check(identity(shape), shape, "float32", device)
    assert (
        not verdict.ok and "extent 10, not a multiple of the vector width 4" in verdict.reasons[0]
    )


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 12),
    cols=st.sampled_from([4, 8, 16, 24]),
    width=st.sampled_from([2, 4, 8]),
    pad=st.integers(1, 9),
)
def test_vector_access_agrees_with_a_direct_definition(rows, cols, width, pad):
    """Law: accepted iff every aligned group of `width` along the last axis is
    `width` consecutive offsets starting at a multiple of `width`."""
    device = make_device()
    shape = (rows, cols)
    for layout in (identity(shape), pad_rows(shape, pad), permute(shape, (1, 0))):
        offsets = layout.index_map.flat_offsets(shape).reshape(shape)
        expected = cols % width == 0 and all(
            offsets[i, j] % width == 0
            and list(offsets[i, j : j + width]) == list(range(offsets[i, j], offsets[i, j] + width))
            for i in range(rows)
            for j in range(0, cols, width)
        )
        got = VectorAccess(1, width).check(layout, shape, "float32", device).ok
        assert got == expected, layout.describe()


# -- images --------------------------------------------------------------------


def test_texture_is_accepted_only_for_read_only_buffers(device):
    shape = (1, 64, 56, 56)
    layout = texture(shape, 1)
    assert Image2DRead("input").check(layout, shape, "float32", device).ok
    for role in ("output", "local"):
        verdict = Image2DRead(role).check(layout, shape, "float32", device)
        assert not verdict.ok and "read-only input" in verdict.reasons[0]


def test_texture_must_fit_the_device_image_limits():
    shape = (1, 64, 56, 56)
    layout = texture(shape, 1)  # height 1 * 16 * 56 = 896 texels, width 56 texels
    assert layout.flat_shape == (896, 224)
    fits = make_device(image2d_max_width=56, image2d_max_height=896)
    assert Image2DRead().check(layout, shape, "float32", fits).ok
    narrow = make_device(image2d_max_width=32, image2d_max_height=512)
    verdict = Image2DRead().check(layout, shape, "float32", narrow)
    assert not verdict.ok
    assert "56 texels wide, over the device's image2d_max_width 32" in verdict.reasons[0]
    assert "896 texels high, over the device's image2d_max_height 512" in verdict.reasons[1]
    no_images = make_device(image_support=False, image2d_max_width=0, image2d_max_height=0)
    assert not Image2DRead().check(layout, shape, "float32", no_images).ok


def test_image_needs_one_separator_texels_of_4_and_a_float_type(device):
    shape = (8, 16)
    assert not Image2DRead().check(identity(shape), shape, "float32", device).ok
    three = custom(shape, "lambda i, j: [i, AXIS_SEPARATOR, j // 3, j % 3]")
    verdict = Image2DRead().check(three, shape, "float32", device)
    assert "innermost physical extent is 3" in verdict.reasons[0]
    assert not Image2DRead().check(texture(shape, 1), shape, "int32", device).ok
    no_fp16 = make_device(extensions=())
    assert not Image2DRead().check(texture(shape, 1), shape, "float16", no_fp16).ok
    assert Image2DRead().check(texture(shape, 1), shape, "float16", device).ok


# -- tile copies, budgets --------------------------------------------------------


def test_contiguous_tile_copy(device):
    shape = (64, 64)
    tiled = tile(shape, (16, 16))
    assert ContiguousTileCopy((16, 16)).check(tiled, shape, "float32", device).ok
    verdict = ContiguousTileCopy((16, 16)).check(identity(shape), shape, "float32", device)
    assert not verdict.ok
    assert "tile (0, 0) spans offsets 0..975 (976 positions for 256 elements)" in verdict.reasons[1]
    # whole rows are contiguous under identity
    assert ContiguousTileCopy((4, 64)).check(identity(shape), shape, "float32", device).ok
    verdict = ContiguousTileCopy((16, 24)).check(identity(shape), shape, "float32", device)
    assert "not a multiple of the tile extent 24" in verdict.reasons[0]


def test_padding_budget(device):
    shape = (1, 64, 5, 5)
    layout = block(shape, 1, 3)
    assert PaddingBudget(0.05).check(layout, shape, "float32", device).ok
    verdict = PaddingBudget(0.01).check(layout, shape, "float32", device)
    assert "3.0% of the physical buffer (50 of 1650 elements)" in verdict.reasons[0]


def test_local_memory_budget_over_several_buffers():
    device = make_device(local_mem_size=8192)
    a, b = identity((32, 32)), pad_rows((32, 32), 1)
    budget = LocalMemoryBudget()
    assert budget.check(a, (32, 32), "float32", device).ok
    verdict = budget.check_buffers([("A.local", a, "float32"), ("B.local", b, "float32")], device)
    assert not verdict.ok
    assert "8316 bytes (A.local 4096 + B.local 4220), over the budget of 8192" in verdict.reasons[0]
    assert (
        LocalMemoryBudget(10_000)
        .check_buffers([("A.local", a, "float32"), ("B.local", b, "float32")], device)
        .ok
    )


# -- values ----------------------------------------------------------------------


ALL = [
    VectorAccess(1, 4),
    Image2DRead("input"),
    ContiguousTileCopy((16, 16)),
    StridedTileCopy((16, 16)),
    RowPointerTileLoad(8, row_bytes=16),
    PaddingBudget(0.25),
    LocalMemoryBudget(),
    BankConflicts.row_segments(8, 8),
]


@pytest.mark.parametrize("constraint", ALL, ids=lambda c: c.kind)
def test_constraints_are_values_that_round_trip_through_json(constraint):
    data = json.loads(json.dumps(constraint.to_json()))
    back = constraint_from_json(data)
    assert back == constraint and hash(back) == hash(constraint)
    assert str(back) == str(constraint)
    with pytest.raises(AttributeError):
        constraint.soft_value = 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("constraint", ALL, ids=lambda c: c.kind)
def test_every_constraint_refuses_a_shape_that_is_not_the_layouts(constraint, device):
    with pytest.raises(ShapeMismatchError):
        constraint.check(identity((16, 16)), (16, 32), "float32", device)


def test_invalid_constraint_values_name_the_value():
    with pytest.raises(LayoutError, match="width must be one of"):
        VectorAccess(0, 3)
    with pytest.raises(LayoutError, match="exactly one of row_elements and row_bytes"):
        RowPointerTileLoad(8)
    with pytest.raises(LayoutError, match="max_fraction"):
        PaddingBudget(1.5)
    with pytest.raises(LayoutError, match="unknown constraint kind 'Nope'"):
        constraint_from_json({"kind": "Nope"})


def test_verdict_combine_and_bool():
    ok, bad = Verdict.accept("a", 2.0), Verdict.reject("b", "why")
    assert ok and not bad
    both = Verdict.combine([ok, bad])
    assert not both.ok and both.reasons == ("b: why",)
    assert Verdict.combine([ok, ok]).score == 4.0


def test_checks_are_exact_on_a_large_buffer(device):
    """No sampling: one bad row among 4096 is found."""
    shape = (4096, 64)
    text = "lambda i, j: [i * 64 + j + (i // 4095) * 4]"  # only the last row is shifted
    layout = custom(shape, text)
    verdict = RowPointerTileLoad(1, row_elements=64, alignment_bytes=32).check(
        layout, shape, "float32", device
    )
    assert not verdict.ok and "1 of 4096 rows" in verdict.reasons[0]
    assert "tile (4095, 0)" in verdict.reasons[1]
    assert np.all(layout.index_map.flat_offsets(shape)[:-64] < 4095 * 64)
