"""Staging plans (which box of each input a work-group stages) and the joint
rules that keep staged candidates runnable."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from laytune.exceptions import LayoutRejectedError
from laytune.layout import Var, identity, pad_rows
from laytune.space import (
    JOINT_RULES,
    Axis,
    Buffer,
    Candidate,
    SearchSpace,
    SpaceOptions,
    VectorAccess,
    WorkloadSpec,
    affine_terms,
    check_candidate,
    local_vector_dims,
    stageable_buffers,
    staging_plan,
)
from tests.space.conftest import make_add, make_conv2d, make_matmul

SMALL = SpaceOptions(
    families=("identity", "pad_rows"),
    pad_amounts=(1,),
    blocks=(1, 2, 4),
    groups=(0, 1, 2, 4, 8, 16),
    splits=(1,),
    unrolls=(1, 2, 4),
    local_pad_amounts=(1,),
    local_xor_periods=(4,),
    local_xor_chunks=(1,),
)


def strided_conv(size: int = 9, stride: int = 2, pad: int = 1) -> WorkloadSpec:
    """conv2d with 3 x 3 kernels, zero padding ``pad``: X[n, c, oh * s + kh - p, ...]."""
    n, f, oh, ow, c, kh, kw = (Var(x) for x in range(7))
    out = (size + 2 * pad - 3) // stride + 1
    return WorkloadSpec(
        "conv2d",
        (
            Axis("n", 2),
            Axis("f", 4),
            Axis("oh", out),
            Axis("ow", out),
            Axis("c", 3, "reduce"),
            Axis("kh", 3, "reduce"),
            Axis("kw", 3, "reduce"),
        ),
        (
            Buffer(
                "X",
                (2, 3, size, size),
                indices=(n, c, oh * stride + kh - pad, ow * stride + kw - pad),
            ),
            Buffer("W", (4, 3, 3, 3), indices=(f, c, kh, kw)),
            Buffer("Y", (2, 4, out, out), role="output", indices=(n, f, oh, ow)),
        ),
        "sum",
    )


def test_affine_terms_reads_coefficients_and_refuses_the_rest():
    i, j = Var(0), Var(1)
    assert affine_terms(i * 2 + j - 1) == ({0: 2, 1: 1}, -1)
    assert affine_terms((i << 2) + 3 * j) == ({0: 4, 1: 3}, 0)
    assert affine_terms(i - i + 5) == ({}, 5)
    assert affine_terms(i // 2) is None
    assert affine_terms(i * j) is None
    assert affine_terms(i ^ j) is None


def test_declared_tiles_give_matmul_its_block_and_stage():
    plan = staging_plan(make_matmul(32, 48, 64))
    assert plan.declared
    assert plan.block == (16, 16, 16)  # i, j outputs per work-group; 16 values of k per stage
    assert plan.stepped == 2 and plan.outputs == 256
    assert plan.counts == (2, 3, 1) and plan.groups == 6
    assert plan.tiles == {"A": (16, 16), "B": (16, 16)}
    assert local_vector_dims(make_matmul(), plan) == {"B.local": 1}


def test_a_convolution_stages_its_input_patch_with_the_halo():
    plan = staging_plan(make_conv2d(16, 16, 8))  # input[n, c, oh + kh, ow + kw], 8 x 8 outputs
    assert not plan.declared
    # 8 x 8 outputs of one filter per work-group, one channel per stage, whole 3 x 3 windows
    assert plan.block == (1, 1, 8, 8, 1, 3, 3)
    assert plan.stepped == 4
    assert plan.counts == (1, 16, 1, 1, 1, 1, 1)
    # rows: 8 + 3 - 1 = 10; columns 10, rounded up to 12 so that row XOR swizzles apply
    assert plan.tiles == {"input": (10, 12), "weight": (3, 3)}
    assert local_vector_dims(make_conv2d(), plan) == {}


def test_a_strided_patch_spans_the_stride_and_blocks_may_overshoot():
    plan = staging_plan(strided_conv(9, 2, 1))  # 5 x 5 outputs
    assert plan.block[2:4] == (8, 8) and plan.counts[2:4] == (1, 1)
    assert plan.tiles["X"] == ((8 - 1) * 2 + 3, 20)  # 17 rows; 17 columns rounded up to 20
    staged = next(s for s in plan.inputs if s.buffer == "X")
    assert staged.dims == (2, 3)
    assert staged.terms[2] == (((2, 2), (5, 1)), -1)  # oh * 2 + kh - 1


def test_block_shapes_follow_the_output():
    wide = staging_plan(make_conv2d(4, 4, 222))
    assert wide.block[2:4] == (16, 16) and wide.counts[2:4] == (14, 14)
    small = staging_plan(make_conv2d(4, 4, 56))
    assert small.block[2:4] == (8, 8) and small.counts[2:4] == (7, 7)


@pytest.mark.parametrize(
    ("workload", "reason"),
    [
        (make_add(), "has no reduce axis"),
        (make_matmul(tiles=False), "reads no input through a sliding window"),
    ],
)
def test_workloads_without_a_plan_say_why(workload, reason, device):
    with pytest.raises(LayoutRejectedError, match=reason):
        staging_plan(workload)
    assert stageable_buffers(workload) == {}
    space = SearchSpace(workload, device, SMALL)
    assert not any(c.knob("local_stage") for c in space.enumerate())
    base = space.identity()
    staged = Candidate.make(base.layout_map, {**base.knob_map, "local_stage": True})
    assert "local_stage True is not one of [False]" in str(
        check_candidate(workload, staged, device)
    )


def test_declared_tiles_that_disagree_are_refused(device):
    i, j, k = Var(0), Var(1), Var(2)
    workload = WorkloadSpec(
        "matmul",
        (Axis("i", 32), Axis("j", 32), Axis("k", 32, "reduce")),
        (
            Buffer("A", (32, 32), indices=(i, k)),
            Buffer("B", (32, 32), indices=(k, j)),
            Buffer("C", (32, 32), role="output", indices=(i, j)),
        ),
        "sum",
        {"A": (16, 16), "B": (8, 16)},
    )
    with pytest.raises(LayoutRejectedError, match="disagree on axis 'k': 16 and 8"):
        staging_plan(workload)
    assert not any(c.knob("local_stage") for c in SearchSpace(workload, device, SMALL).enumerate())


def test_staged_candidates_meet_every_staging_rule(device):
    workload = strided_conv()
    # the groups that cover the 8 x 8 staging block with blocks of 1, 2 and 4,
    # one filter per group (1), and the driver's (0): 16 would only multiply
    # the unstaged candidates
    space = SearchSpace(workload, device, dataclasses.replace(SMALL, groups=(0, 1, 2, 4, 8)))
    plan = staging_plan(workload)
    # every staged candidate, the 1.2 million unstaged ones never made
    staged = list(space.enumerate(held={"local_stage": True}))
    rounded = list(
        itertools.islice(
            (
                c
                for c in space.enumerate(held={"local_stage": False})
                if c.knob("group.ow") and -(-5 // c.knob("block.ow")) % c.knob("group.ow")
            ),
            20,
        )
    )
    assert staged
    for candidate in staged:
        for axis in ("oh", "ow"):  # the work-group covers the 8 x 8 block with its register blocks
            assert candidate.knob(f"group.{axis}") * candidate.knob(f"block.{axis}") == 8
        assert candidate.knob("group.f") == 1 and candidate.knob("block.f") == 1
        assert candidate.knob("order") == "logical"
        assert candidate.layout("X.local").shape == plan.tiles["X"]
        assert check_candidate(workload, candidate, device).ok
    # the 5 x 5 outputs do not fill an 8 x 8 block, yet a staged NDRange, one work-group
    # per block, takes it; unstaged work-groups need not divide the blocks they
    # count either (the NDRange rounds up: tests/codegen/test_rounded_grid.py)
    assert {(c.knob("block.ow"), c.knob("group.ow")) for c in staged} >= {(1, 8), (2, 4), (4, 2)}
    assert rounded and all(check_candidate(workload, c, device).ok for c in rounded)


def test_rejections_name_the_staging_rules(device):
    options = dataclasses.replace(SMALL, groups=(0, 1, 4, 8, 16, 32))
    space = SearchSpace(make_matmul(16, 16, 16), device, options)
    report = {r.constraint: r for r in space.rejections()}
    staging_rules = {r for r in JOINT_RULES if r.startswith("local_")}
    assert len(staging_rules) == 8
    block = report["local_stage_block"]
    assert block.removed > 0
    assert "so that the work-group covers the staging block" in block.example
    assert report["local_stage_order"].removed > 0
    assert "local staging walks the logical order" in report["local_stage_order"].example
    vector = report["local_vector_access"]
    assert vector.removed > 0 and "B.local" in vector.example
    vectors = 0
    for candidate in space.enumerate():
        vector = candidate.knob("vector")
        if candidate.knob("local_stage") and vector > 1:
            assert candidate.knob("vector_axis") == "j"
            tile = candidate.layout("B.local")
            assert VectorAccess(1, vector).check(tile, tile.shape, "float32", device).ok
            vectors += 1
    assert vectors


def test_a_vector_reading_a_local_tile_needs_its_layout_to_accept_it(device):
    workload = make_matmul(32, 32, 32)
    base = SearchSpace(workload, device, SMALL).identity()
    knobs = {
        **base.knob_map,
        "local_stage": True,
        "group.j": 4,
        "group.i": 16,
        "block.j": 4,
        "vector_axis": "j",
        "vector": 4,
    }
    layouts = {**base.layout_map, "A.local": identity((16, 16))}
    good = Candidate.make({**layouts, "B.local": identity((16, 16))}, knobs)
    assert check_candidate(workload, good, device).ok
    bad = Candidate.make({**layouts, "B.local": pad_rows((16, 16), 1)}, knobs)
    assert "buffer 'B.local': VectorAccess(axis=1, width=4)" in str(
        check_candidate(workload, bad, device)
    )
