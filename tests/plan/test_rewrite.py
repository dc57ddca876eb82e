"""Rewrites as index maps: composition, folding, and when a crop and a pad cancel."""

from __future__ import annotations

import math

import numpy as np
import pytest

from laytune import layout as L
from laytune.exceptions import LayoutError
from laytune.layout import UNDEF, compose
from laytune.plan import Rewrite

SHAPE = (2, 8, 3, 5)
PADDED = (2, 6, 3, 5)  # NCHW4c pads six channels to eight


def _rewrite(
    src: L.Layout, dst: L.Layout, src_pad: object = None, dst_pad: object = None
) -> Rewrite:
    return Rewrite("t", "float32", src, dst, src_pad, dst_pad)


def _logical(shape: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    return tuple(g.reshape(-1) for g in np.indices(shape))


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        (L.identity(SHAPE), L.block(SHAPE, 1, 4)),
        (L.block(SHAPE, 1, 4), L.identity(SHAPE)),
        (L.block(SHAPE, 1, 4), L.permute(SHAPE, (0, 2, 3, 1))),
        (L.tile(SHAPE, (4, 5)), L.texture(SHAPE, 1)),
        (L.identity(PADDED), L.block(PADDED, 1, 4)),
    ],
    ids=lambda layout: layout.describe(),
)
def test_the_index_map_takes_each_element_from_its_source_to_its_destination(
    src: L.Layout, dst: L.Layout
) -> None:
    rewrite = _rewrite(src, dst)
    x = _logical(src.shape)
    moved = rewrite.index_map.map_indices(src.index_map.map_indices(x))
    for got, want in zip(moved, dst.index_map.map_indices(x), strict=True):
        np.testing.assert_array_equal(*np.broadcast_arrays(got, want))


def test_two_adjacent_rewrites_fold_into_one_whose_map_is_their_composition() -> None:
    nchw4c, nhwc = L.block(SHAPE, 1, 4), L.permute(SHAPE, (0, 2, 3, 1))
    first, second = _rewrite(nchw4c, L.identity(SHAPE)), _rewrite(L.identity(SHAPE), nhwc)
    folded = first.then(second)
    assert (folded.src, folded.dst) == (nchw4c, nhwc)
    assert str(folded.index_map) == "lambda p0, p1, p2, p3, p4: [p0, p2, p3, p1 * 4 + p4]"
    composed = compose(second.index_map, first.index_map)
    reached = nchw4c.index_map.map_indices(_logical(SHAPE))
    for a, b in zip(
        composed.map_indices(reached), folded.index_map.map_indices(reached), strict=True
    ):
        np.testing.assert_array_equal(a, b)
    assert not folded.is_identity


def test_a_rewrite_and_its_inverse_cancel() -> None:
    nchw4c = L.block(SHAPE, 1, 4)
    there, back = _rewrite(nchw4c, L.identity(SHAPE)), _rewrite(L.identity(SHAPE), nchw4c)
    assert there.then(back).is_identity
    assert back.then(there).is_identity


@pytest.mark.parametrize(
    ("cropped", "padded", "cancels"),
    [
        (0.0, 0.0, True),  # the values cropped are the ones padded
        (-math.inf, -math.inf, True),
        (None, 0.0, False),  # the producer promised nothing: the zeros must be written
        (UNDEF, 0.0, False),
        (1.0, 0.0, False),  # other values: the pad must stay
        (1.0, None, True),  # the reader never looks at the padding
        (None, UNDEF, True),  # ... or takes anything there
    ],
)
def test_a_crop_then_a_pad_cancels_only_when_the_padding_agrees(
    cropped: object, padded: object, cancels: bool
) -> None:
    nchw4c = L.block(PADDED, 1, 4)
    crop = _rewrite(nchw4c, L.identity(PADDED), cropped, None)
    pad = _rewrite(L.identity(PADDED), nchw4c, None, padded)
    assert crop.then(pad).is_identity is cancels


@pytest.mark.parametrize("padded", [0.0, None, UNDEF, 5.0])
def test_a_pad_then_a_crop_always_cancels(padded: object) -> None:
    nchw4c = L.block(PADDED, 1, 4)
    pad = _rewrite(L.identity(PADDED), nchw4c, None, padded)
    crop = _rewrite(nchw4c, L.identity(PADDED), padded, None)
    assert pad.then(crop).is_identity


def test_equivalent_maps_cancel_even_when_written_differently() -> None:
    written = L.custom((8, 1, 1), "lambda i, j, k: [i // 4, j, k, i % 4]")
    seed = L.custom((8, 1, 1), "lambda i, j, k: [i // 4, 0, 0, i % 4]")
    assert _rewrite(written, seed).is_identity


def test_folding_rewrites_that_do_not_meet_is_refused() -> None:
    a = _rewrite(L.identity(SHAPE), L.block(SHAPE, 1, 4))
    b = _rewrite(L.identity(SHAPE), L.permute(SHAPE, (0, 2, 3, 1)))
    with pytest.raises(LayoutError, match="the second does not read what the first writes"):
        a.then(b)
    with pytest.raises(LayoutError, match=r"between shapes \(2, 8, 3, 5\) and \(2, 6, 3, 5\)"):
        _rewrite(L.identity(SHAPE), L.identity(PADDED))


def test_a_rewrite_moves_its_source_and_destination_bytes() -> None:
    rewrite = _rewrite(L.identity(PADDED), L.block(PADDED, 1, 4), None, 0.0)
    assert rewrite.nbytes == 4 * (2 * 6 * 3 * 5 + 2 * 8 * 3 * 5)
    assert rewrite.describe() == (
        "t: lambda i, j, k, l: [i, j, k, l] -> lambda i, j, k, l: [i, j // 4, k, l, j % 4], "
        "padding 0.0"
    )
