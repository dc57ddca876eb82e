"""Flowing a layout through an operator, derived from the statement's accesses:
the seed's derived operand layouts for element-wise, broadcast and reduction
operators, and a reshape the layout cannot flow through."""

from __future__ import annotations

import numpy as np
import pytest

from laytune import layout as L
from laytune import ops
from laytune.layout import IndexMap
from laytune.layout._expr import evaluate
from laytune.ops import Workload
from laytune.plan import FlowError, flow_layout
from tests.plan.graphs import NCHW4C, reshape

SHAPE = (2, 8, 3, 5)


def _same_point_same_place(workload: Workload, src: str, src_layout: L.Layout, dst: str) -> None:
    """Law for operators whose buffers share every coordinate: at every point of
    the loop nest both accesses land on the same physical index."""
    dst_layout = flow_layout(workload, src_layout, src, dst)
    grid = np.meshgrid(*(np.arange(a.extent) for a in workload.axes), indexing="ij")
    points = [g.reshape(-1) for g in grid]

    def physical(name: str, layout: L.Layout) -> np.ndarray:
        index = [
            np.broadcast_to(evaluate(e, points), points[0].shape)
            for e in workload.buffer(name).indices
        ]
        return np.stack(np.broadcast_arrays(*layout.index_map.map_indices(tuple(index))))

    np.testing.assert_array_equal(physical(src, src_layout), physical(dst, dst_layout))


@pytest.mark.parametrize(
    "layout",
    [
        L.block(SHAPE, 1, 4),
        L.permute(SHAPE, (0, 2, 3, 1)),
        L.tile(SHAPE, (4, 5)),
        L.row_xor(SHAPE, 4),
        L.texture(SHAPE, 1),
        L.pad_every(SHAPE, 2, 3),
    ],
    ids=lambda layout: layout.describe(),
)
def test_an_elementwise_operator_passes_the_layout_through_unchanged(layout: L.Layout) -> None:
    assert flow_layout(ops.relu(SHAPE), layout, "Y", "X") is layout
    assert flow_layout(ops.relu(SHAPE), layout, "X", "Y") is layout


def test_a_bias_by_channel_takes_the_channel_part_of_the_layout() -> None:
    add = ops.bias_add(SHAPE, axis=1)
    result = L.block(SHAPE, 1, 4)
    assert str(flow_layout(add, result, "Y", "X").index_map) == NCHW4C
    assert str(flow_layout(add, result, "Y", "B").index_map) == "lambda i: [i // 4, i % 4]"
    # the seed's bias of shape (C, 1, 1), read at B[c, 0, 0]: lambda i, j, k: (i // 4, 0, 0, i % 4)
    seed_add = Workload.define(
        "add",
        "Y[n, c, h, w] = X[n, c, h, w] + B[c, 0, 0]",
        {"n": 2, "c": 8, "h": 3, "w": 5},
        {"X": SHAPE, "B": (8, 1, 1)},
    )
    bias = flow_layout(seed_add, result, "Y", "B")
    seed = IndexMap.parse("lambda i, j, k: [i // 4, 0, 0, i % 4]")
    assert bias.index_map.equivalent(seed, (8, 1, 1))


def test_a_sum_over_h_places_the_reduced_axis_beside_its_neighbours() -> None:
    over_h = ops.sum(SHAPE, axes=(2,))  # Y[n, c, w] += X[n, c, h, w]
    result = L.block((2, 8, 5), 1, 4)
    assert str(flow_layout(over_h, result, "Y", "X").index_map) == NCHW4C
    # the seed's reduction to [N, C]: lambda i, j, k, l: (i, j // 4, k, l, j % 4)
    over_hw = ops.sum(SHAPE, axes=(2, 3))
    assert str(flow_layout(over_hw, L.block((2, 8), 1, 4), "Y", "X").index_map) == NCHW4C
    # Relay's example: NWC after the sum is NHWC before it
    nwc = L.permute((2, 8, 5), (0, 2, 1))
    assert str(flow_layout(over_h, nwc, "Y", "X").index_map) == "lambda i, j, k, l: [i, k, l, j]"
    # and forwards, the reduced axis drops out
    assert str(flow_layout(over_h, L.block(SHAPE, 1, 4), "X", "Y").index_map) == (
        "lambda i, j, k: [i, j // 4, k, j % 4]"
    )


def test_pooling_windows_follow_the_output_axes_they_slide_along() -> None:
    pool = ops.max_pool2d(2, 8, 6, 6, kernel=2, stride=2)
    assert str(flow_layout(pool, L.block((2, 8, 3, 3), 1, 4), "Y", "X").index_map) == NCHW4C
    nhwc = L.permute((2, 8, 3, 3), (0, 2, 3, 1))
    assert str(flow_layout(pool, nhwc, "Y", "X").index_map) == "lambda i, j, k, l: [i, k, l, j]"
    assert str(flow_layout(pool, L.block((2, 8, 6, 6), 1, 4), "X", "Y").index_map) == NCHW4C


def test_a_transpose_renames_the_coordinates() -> None:
    transpose = ops.transpose((8, 12), (1, 0))
    flowed = flow_layout(transpose, L.tile((12, 8), (4, 4)), "Y", "X")
    assert str(flowed.index_map) == "lambda i, j: [j // 4, i // 4, j % 4, i % 4]"
    _same_point_same_place(transpose, "Y", L.tile((12, 8), (4, 4)), "X")
    _same_point_same_place(ops.bias_add(SHAPE, 1), "Y", L.row_xor(SHAPE, 4), "X")


def test_a_convolution_keeps_its_reduction_axes_in_place() -> None:
    conv = ops.conv2d(1, 8, 6, 6, 8, 3, stride=1, padding=1)
    result = L.block((1, 8, 6, 6), 1, 4)
    assert str(flow_layout(conv, result, "Y", "X").index_map) == "lambda i, j, k, l: [i, j, k, l]"
    assert str(flow_layout(conv, result, "Y", "W").index_map) == (
        "lambda i, j, k, l: [i // 4, j, k, l, i % 4]"
    )


def test_a_reshape_stops_a_blocked_layout_and_says_where() -> None:
    rs = reshape((1, 8, 4, 4), (1, 16, 2, 4))
    with pytest.raises(FlowError, match=r"physical index j // 4 of Y's layout .* cannot flow to X"):
        flow_layout(rs, L.block((1, 16, 2, 4), 1, 4), "Y", "X")
    with pytest.raises(FlowError, match="cannot flow to Y"):
        flow_layout(rs, L.block((1, 8, 4, 4), 1, 4), "X", "Y")
    # a layout that keeps every coordinate whole passes: identity in, identity out
    assert flow_layout(rs, L.identity((1, 16, 2, 4)), "Y", "X").is_identity


def test_a_layout_of_the_wrong_shape_is_refused() -> None:
    with pytest.raises(
        FlowError, match=r"shape \(4, 4\) given for buffer Y of shape \(2, 8, 3, 5\)"
    ):
        flow_layout(ops.relu(SHAPE), L.identity((4, 4)), "Y", "X")
