"""The constraints of the staging copies, the sub-group block reads and the
matrix intrinsics, and the rule steps that gate the ``copy`` and
``subgroup`` knobs with them: what each refuses, and why."""

from __future__ import annotations

from typing import Any

import pytest

from laytune.exceptions import LayoutError
from laytune.layout import identity, pad_every, pad_rows, permute, tile
from laytune.space import (
    JOINT_RULES,
    Candidate,
    MatrixTileLoad,
    RowPointerTileLoad,
    StridedTileCopy,
    SubgroupBlockAccess,
    baseline_knobs,
    check_candidate,
)
from tests.space.conftest import make_device, make_matmul

SUBGROUPS = ("cl_intel_subgroups", "cl_intel_subgroup_local_block_io")
INTEL = make_device(extensions=("cl_khr_fp16", *SUBGROUPS), sub_group_sizes=(8, 16, 32))
PLAIN = make_device()


# -- constraints ------------------------------------------------------------------


def test_subgroup_block_access_needs_aligned_runs_of_the_sub_group_size() -> None:
    shape = (8, 32)
    assert SubgroupBlockAccess(1, 16).check(identity(shape), shape, "float32", PLAIN).ok
    # pad 1 per row: the runs of row 1 start at offset 33, not 16-byte aligned
    verdict = SubgroupBlockAccess(1, 16).check(pad_rows(shape, 1), shape, "float32", PLAIN)
    assert not verdict.ok
    assert "not aligned to 16 bytes" in " ".join(verdict.reasons)
    # reads of __global memory need only 4 bytes
    assert SubgroupBlockAccess(1, 16, 4).check(pad_rows(shape, 1), shape, "float32", PLAIN).ok
    # along the rows' axis the lanes' elements are a row apart
    verdict = SubgroupBlockAccess(0, 8).check(identity(shape), shape, "float32", PLAIN)
    assert not verdict.ok
    assert "not consecutive" in " ".join(verdict.reasons)
    verdict = SubgroupBlockAccess(1, 64).check(identity(shape), shape, "float32", PLAIN)
    assert "not a multiple of the sub-group size 64" in verdict.reasons[0]
    with pytest.raises(LayoutError, match="sub_group_size"):
        SubgroupBlockAccess(1, 0)


def test_seed_003_strided_load_refuses_and_row_pointers_accept() -> None:
    """The auto memory planning seed: A_shared 128 x 64 padded 4 elements
    every 2 rows has no constant row stride (wmma load_matrix_sync(ptr, ldm)
    refuses it) but every row is contiguous (row pointers accept it). In
    bytes the seed's example is subtler than its text: 4 halves are 8 bytes,
    so ldmatrix's 16-byte aligned rows need a pad of 8 halves every 2 rows."""
    shape = (128, 64)
    layout = pad_every(shape, rows=2, pad=4)
    strided = StridedTileCopy((16, 16)).check(layout, shape, "float16", PLAIN)
    assert not strided.ok
    assert "the stride breaks" in " ".join(strided.reasons)
    per_row = RowPointerTileLoad(rows=16, row_elements=16, alignment_bytes=2)
    assert per_row.check(layout, shape, "float16", PLAIN).ok
    ldmatrix = RowPointerTileLoad(rows=8, row_bytes=16)
    assert ldmatrix.check(layout, shape, "float32", PLAIN).ok  # 4 floats: 16 bytes
    verdict = MatrixTileLoad("nv_mma", "a").check(layout, shape, "float16", PLAIN)
    assert not verdict.ok and "not aligned to 16 bytes" in " ".join(verdict.reasons)
    eight = pad_every(shape, rows=2, pad=8)
    assert not StridedTileCopy((16, 16)).check(eight, shape, "float16", PLAIN).ok
    for intrinsic in ("nv_mma", "intel_mad"):
        for operand in ("a", "b"):
            assert MatrixTileLoad(intrinsic, operand).check(eight, shape, "float16", PLAIN).ok
    assert StridedTileCopy((16, 16)).check(identity(shape), shape, "float16", PLAIN).ok


def test_matrix_tile_load_names_the_dtype_and_the_intrinsic() -> None:
    shape = (16, 16)
    verdict = MatrixTileLoad("nv_mma", "a").check(identity(shape), shape, "float32", PLAIN)
    assert not verdict.ok and "nv_mma multiplies float16" in verdict.reasons[0]
    with pytest.raises(LayoutError, match="intrinsic 'wmma'"):
        MatrixTileLoad("wmma", "a")
    with pytest.raises(LayoutError, match="operand 'c'"):
        MatrixTileLoad("nv_mma", "c")


def test_strided_copy_with_a_fixed_stride_and_alignment() -> None:
    shape = (16, 16)
    assert (
        StridedTileCopy(shape, stride=16, alignment_bytes=64)
        .check(identity(shape), shape, "float32", PLAIN)
        .ok
    )
    verdict = StridedTileCopy(shape, stride=16).check(pad_rows(shape, 4), shape, "float32", PLAIN)
    assert not verdict.ok and "not the 16 of rows written back to back" in verdict.reasons[1]


# -- the copy and subgroup knobs' rules --------------------------------------------


def _staged(local_a: Any = None, global_b: Any = None, **knobs: Any) -> Candidate:
    workload = make_matmul()
    layouts = {
        "A": identity((32, 32)),
        "B": global_b or identity((32, 32)),
        "C": identity((32, 32)),
        "A.local": local_a or identity((16, 16)),
        "B.local": identity((16, 16)),
    }
    values = {
        **baseline_knobs(workload),
        "local_stage": True,
        "block.i": 1,
        "block.j": 1,
        "group.i": 16,
        "group.j": 16,
        **knobs,
    }
    return Candidate.make(layouts, values)


def _reasons(candidate: Candidate, device: Any = INTEL) -> str:
    verdict = check_candidate(make_matmul(), candidate, device)
    return "" if verdict.ok else " | ".join(verdict.reasons)


def test_every_copy_takes_the_identity_but_contiguous() -> None:
    for copy in ("elementwise", "rows", "async_strided"):
        assert _reasons(_staged(copy=copy)) == ""
    assert _reasons(_staged(copy="subgroup_block", subgroup=16)) == ""
    why = _reasons(_staged(copy="async_contiguous"))
    assert "ContiguousTileCopy" in why and "'A'" in why and "positions for 256 elements" in why


def test_the_contiguous_copy_takes_tiled_inputs() -> None:
    tiled = tile((32, 32), (16, 16))
    candidate = _staged(copy="async_contiguous")
    layouts = {**candidate.layout_map, "A": tiled, "B": tiled}
    assert _reasons(Candidate.make(layouts, candidate.knob_map)) == ""


def test_row_pointers_take_a_pad_every_two_rows_tile_the_strided_copy_refuses() -> None:
    padded = pad_every((16, 16), rows=2, pad=4)
    assert _reasons(_staged(padded, copy="rows")) == ""
    why = _reasons(_staged(padded, copy="async_strided"))
    assert why.startswith("copy: copy 'async_strided': 'A.local': StridedTileCopy")


def test_subgroup_rules_name_the_device_lanes_and_layouts() -> None:
    why = _reasons(_staged(copy="subgroup_block", subgroup=16), PLAIN)
    assert "needs cl_intel_subgroups, cl_intel_subgroup_local_block_io" in why
    assert "has no cl_intel_subgroups" in why
    why = _reasons(_staged(copy="subgroup_block", subgroup=64))
    assert "has sub-group sizes [8, 16, 32]" in why
    why = _reasons(_staged(pad_rows((16, 16), 1), copy="subgroup_block", subgroup=16))
    assert "SubgroupBlockAccess" in why and "not aligned to 16 bytes" in why
    why = _reasons(_staged(copy="rows", subgroup=16))
    assert "subgroup > 0 needs copy 'subgroup_block'" in why
    # unstaged: one point per work-item along j, in whole sub-groups of a row
    workload = make_matmul()
    plain = {n: identity((32, 32)) for n in ("A", "B", "C")}
    knobs = {**baseline_knobs(workload), "subgroup": 8, "group.j": 8, "group.i": 1}
    assert _reasons(Candidate.make(plain, knobs)) == ""
    why = _reasons(Candidate.make(plain, {**knobs, "block.j": 2}))
    assert "the lanes read consecutive points of 'j', one per work-item" in why
    why = _reasons(Candidate.make(plain, {**knobs, "group.j": 4, "group.i": 2}))
    assert "group.j 4 is not a multiple of 8" in why
    why = _reasons(Candidate.make({**plain, "B": permute((32, 32), (1, 0))}, knobs))
    assert "subgroup_block_access" not in why and "SubgroupBlockAccess" in why
    assert "buffer 'B'" in why


def test_the_copy_and_subgroup_rules_are_joint_rules() -> None:
    for rule in (
        "copy_inside",
        "copy_rows",
        "copy_strided",
        "copy_contiguous",
        "copy_subgroup_block",
        "subgroup_lanes",
        "subgroup_block_access",
        "device_capability",
    ):
        assert rule in JOINT_RULES
