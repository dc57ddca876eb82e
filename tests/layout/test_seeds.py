"""The worked examples of the design documents laytune grew from."""

from __future__ import annotations

import numpy as np

from laytune.layout import AXIS_SEPARATOR, IndexMap, pad_every, texture


def test_rfc39_nhwc_to_nchwc_flat_offset() -> None:
    m = IndexMap.from_func(lambda n, h, w, c: [n, c // 4, h, w, c % 4])
    shape = (16, 64, 64, 128)
    assert m.physical_shape(shape) == (16, 32, 64, 64, 4)
    assert m.flat_shape(shape) == (16 * 32 * 64 * 64 * 4,)
    assert m.map_indices((11, 37, 23, 101)) == (11, 25, 37, 23, 1)
    expected = (
        (128 // 4) * 64 * 64 * 4 * 11 + 64 * 64 * 4 * (101 // 4) + 64 * 4 * 37 + 4 * 23 + 101 % 4
    )
    assert m.flat_offset((11, 37, 23, 101), shape) == expected == 6186333
    assert m.padding_count(shape) == 0


def test_rfc39_texture_gives_a_2d_physical_buffer() -> None:
    m = IndexMap.from_func(lambda n, h, w, c: [n, c // 4, h, AXIS_SEPARATOR, w, c % 4])
    shape = (16, 64, 64, 128)
    assert str(m) == "lambda n, h, w, c: [n, c // 4, h, AXIS_SEPARATOR, w, c % 4]"
    assert m.flat_shape(shape) == (16 * 32 * 64, 64 * 4)
    row = (128 // 4) * 64 * 11 + 64 * (101 // 4) + 37
    col = 4 * 23 + 101 % 4
    assert m.flat_offset((11, 37, 23, 101), shape) == (row, col)
    # the texture family builds the same map from NHWC with the channel axis blocked
    assert texture(shape, axis=3).index_map == m


def test_rfc77_split_by_4_pads_the_last_two_positions() -> None:
    m = IndexMap.parse("lambda i: [i // 4, i % 4]")
    assert m.physical_shape((14,)) == (4, 4)
    assert m.padding_count((14,)) == 2
    assert sorted(map(tuple, np.argwhere(m.padding_mask((14,))).tolist())) == [(3, 2), (3, 3)]
    inverse = m.inverse((14,))
    assert str(inverse.index_map) == "lambda p0, p1: [p0 * 4 + p1]"
    assert inverse.is_element((3, 1)) and not inverse.is_element((3, 2))


def test_rfc77_offset_puts_padding_at_the_start() -> None:
    m = IndexMap.parse("lambda i: [(i + 2) // 8, (i + 2) % 8]")
    # shape [14]: [2, 8], padding only at [0, 0] and [0, 1]
    assert m.physical_shape((14,)) == (2, 8)
    assert np.argwhere(m.padding_mask((14,))).tolist() == [[0, 0], [0, 1]]
    # shape [16]: [3, 8], padding [0, 0..1] and [2, 2..7]
    assert m.physical_shape((16,)) == (3, 8)
    expected = [[0, 0], [0, 1]] + [[2, k] for k in range(2, 8)]
    assert np.argwhere(m.padding_mask((16,))).tolist() == expected
    inverse = m.inverse((16,))
    grid = np.indices((3, 8))
    assert np.array_equal(inverse.is_element(tuple(grid)), ~m.padding_mask((16,)))


def test_rfc77_unpadded_split() -> None:
    m = IndexMap.parse("lambda i: [i // 8, i % 8]")
    assert m.physical_shape((16,)) == (2, 8)
    assert m.padding_count((16,)) == 0
    assert m.physical_shape((14,)) == (2, 8)
    assert np.argwhere(m.padding_mask((14,))).tolist() == [[1, 6], [1, 7]]


def test_auto_memory_planning_pad_four_every_two_rows() -> None:
    m = IndexMap.parse("lambda i, j: [i * 64 + j + (i // 2) * 4]")
    shape = (128, 64)
    assert m.is_injective(shape)
    # 64 groups of two rows; the last group's 4 elements of padding are never allocated
    assert m.physical_shape(shape) == (127 * 64 + 63 + 63 * 4 + 1,)
    assert m.padding_count(shape) == 63 * 4
    assert m.flat_offset((3, 5), shape) == 3 * 64 + 5 + 4
    assert pad_every(shape, rows=2, pad=4).index_map.equivalent(m, shape)
    inverse = m.inverse(shape)
    x = np.indices(shape).reshape(2, -1)
    back = inverse.index_map.map_indices(m.map_indices(tuple(x)))
    assert np.array_equal(np.stack(back), x)
