"""The search space and lower agree: every candidate the space offers lowers,
and a candidate that the space's rules reject is refused by lower with the
rule's reason. No device is needed (lower only checks against DeviceInfo)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from laytune import layout as L
from laytune import ops
from laytune.codegen import GENERIC_DEVICE, lower
from laytune.exceptions import LayoutRejectedError
from laytune.space import Candidate, SearchSpace, SpaceOptions, check_candidate, staging_plan
from tests.codegen.harness import (
    Env,
    RandomTrial,
    StagingTrial,
    VectorTrial,
    choice_pairs,
    pairwise_cover,
    run,
)

# a device with tighter limits than GENERIC_DEVICE: 128 work-items, 4 KiB of local memory
SMALL_DEVICE = GENERIC_DEVICE.__class__(
    platform_name="hand",
    device_name="small device",
    max_work_group_size=128,
    max_work_item_sizes=(128, 128, 64),
    local_mem_size=4096,
    image_support=True,
    image2d_max_width=4096,
    image2d_max_height=4096,
)

WORKLOADS = [
    ops.matmul(16, 16, 32),
    ops.conv2d(1, 2, 6, 6, 2, 3, stride=1, padding=1),
    ops.conv2d(1, 2, 9, 9, 2, 3, stride=2, padding=1),
    ops.max_pool2d(1, 2, 8, 8, 2, 2),
]

# small enough to enumerate whole, wide enough to meet every staging rule
ENUMERABLE = SpaceOptions(
    families=("identity", "pad_rows"),
    pad_amounts=(1,),
    blocks=(1, 4),
    groups=(0, 1, 2, 16),
    splits=(1, 2),
    unrolls=(1, 2),
    local_pad_amounts=(1,),
    local_xor_periods=(4,),
    local_xor_chunks=(1,),
)


def _lowers_everything(workload: ops.Workload, space: SearchSpace, candidates: list) -> None:
    for candidate in candidates:
        assert space.check(candidate).ok
        try:
            lower(workload, candidate, space.device)
        except LayoutRejectedError as err:
            pytest.fail(
                f"the space offered a candidate lower refuses: {err}\n{candidate.describe()}"
            )


# The spaces lowered whole; the convolutions' (44154 candidates each, whose
# lowering took 4 minutes apiece) are lowered through a cover of every pair of
# their choices.
WHOLE = 5000


@pytest.mark.parametrize("workload", WORKLOADS, ids=lambda w: w.key)
def test_lower_accepts_the_small_space_whole_or_every_pair_of_its_choices(
    workload: ops.Workload,
) -> None:
    space = SearchSpace(workload, GENERIC_DEVICE, ENUMERABLE)
    candidates = list(space.enumerate())
    assert len(candidates) == len(space)
    assert any(c.knob("local_stage") for c in candidates)
    if len(candidates) > WHOLE:
        pairs = choice_pairs(candidates)
        cover = pairwise_cover(candidates, pairs)
        # every two choices the space offers together are lowered together once
        kept = {id(c) for c in cover}
        chosen = np.array([id(c) in kept for c in candidates])
        size = int(pairs.max()) + 1
        held = np.bincount(pairs[chosen].ravel(), minlength=size) > 0
        assert np.array_equal(held, np.bincount(pairs.ravel(), minlength=size) > 0)
        assert len(cover) < len(candidates) // 100
        candidates = cover
    _lowers_everything(workload, space, candidates)


@pytest.mark.parametrize("device", [GENERIC_DEVICE, SMALL_DEVICE], ids=lambda d: d.device_name)
@pytest.mark.parametrize("workload", WORKLOADS, ids=lambda w: w.key)
def test_lower_accepts_what_the_full_space_suggests(workload: ops.Workload, device) -> None:
    space = SearchSpace(workload, device)
    candidates = [space.suggest(RandomTrial(seed)) for seed in range(40)]
    candidates += [space.suggest(StagingTrial(seed)) for seed in range(30)]
    assert sum(c.knob("local_stage") for c in candidates) >= 20
    _lowers_everything(workload, space, candidates)


def _with(
    candidate: Candidate, knobs: dict | None = None, layouts: dict | None = None
) -> Candidate:
    return Candidate.make(
        {**candidate.layout_map, **(layouts or {})},
        {**candidate.knob_map, **(knobs or {})},
        dict(candidate.pad_values),
    )


def _refused(workload: ops.Workload, space: SearchSpace, candidate: Candidate, reason: str) -> None:
    verdict = space.check(candidate)
    assert not verdict.ok and reason in str(verdict)
    assert not check_candidate(workload, candidate, space.device).ok
    with pytest.raises(LayoutRejectedError, match=re.escape(reason)):
        lower(workload, candidate, space.device)


def test_lower_refuses_what_the_staging_rules_reject() -> None:
    workload = ops.matmul(32, 32, 32)
    space = SearchSpace(workload, GENERIC_DEVICE)
    base = space.identity()
    tiles = {"A.local": L.identity((16, 16)), "B.local": L.pad_rows((16, 16), 1)}
    knobs = {"local_stage": True, "group.j": 4, "group.i": 16, "block.j": 4}
    staged = _with(base, knobs, tiles)
    lower(workload, staged, GENERIC_DEVICE)
    _refused(
        workload,
        space,
        _with(staged, {"group.j": 8}),
        "group.j must be 4 so that the work-group covers the staging block, got 8",
    )
    _refused(
        workload,
        space,
        _with(staged, {"order": "C", "block.j": 1}),
        "local staging walks the logical order",
    )
    _refused(
        workload,
        space,
        _with(staged, {"unroll": 32}),
        "unroll 32 does not divide one stage's 16 values of 'k'",
    )
    _refused(
        workload,
        space,
        _with(staged, {"vector_axis": "j", "vector": 4}),
        "buffer 'B.local': VectorAccess(axis=1, width=4)",
    )
    _refused(
        workload,
        space,
        _with(staged, {"group.j": 0, "group.i": 0}),
        "local staging needs a work-group of its own",
    )
    _refused(
        workload,
        space,
        _with(staged, {"reduce_order": "k", "split": 2}),
        "reduce_order 'k' is not one of ['']",
    )


def test_lower_refuses_staging_a_conv_with_the_wrong_block() -> None:
    workload = ops.conv2d(1, 2, 9, 9, 2, 3, stride=2, padding=1)  # 5 x 5 outputs, 8 x 8 blocks
    space = SearchSpace(workload, GENERIC_DEVICE)
    plan = staging_plan(workload)
    tiles = {f"{name}.local": L.identity(tile) for name, tile in plan.tiles.items()}
    knobs = {"local_stage": True, "group.ow": 8, "group.oh": 8, "group.f": 1}
    staged = _with(space.identity(), knobs, tiles)
    program = lower(workload, staged, GENERIC_DEVICE)
    assert program.compute[0].global_size == (8, 8, 2)  # one 8 x 8 work-group per filter
    assert program.compute[0].local_size == (8, 8, 1)
    _refused(
        workload,
        space,
        _with(staged, {"group.ow": 4}),
        "group.ow must be 8 so that the work-group covers the staging block, got 4",
    )
    _refused(
        workload,
        space,
        _with(staged, layouts={"X.local": L.identity((4, 4))}),
        "local buffer 'X.local' has tile shape (17, 20)",
    )
    no_window = ops.sum((16, 14), (1,))
    plain = SearchSpace(no_window, GENERIC_DEVICE).identity()
    with pytest.raises(LayoutRejectedError, match="local_stage True is not one of"):
        lower(no_window, _with(plain, {"local_stage": True, "group.i": 16}))


# -- every dtype, every family: the space offers only what lowers ------------------------

_DTYPES = ("float32", "float16")


@st.composite
def _workloads(draw: st.DrawFn) -> ops.Workload:
    dtype = draw(st.sampled_from(_DTYPES))
    dims = st.sampled_from((4, 6, 8, 12, 16))
    kind = draw(
        st.sampled_from(("copy", "transpose", "relu", "bias", "sum", "pool", "matmul", "conv"))
    )
    if kind in ("copy", "transpose", "relu"):
        shape = (draw(dims), draw(dims))
        if kind == "copy":
            return ops.copy(shape, dtype)
        if kind == "relu":
            return ops.relu(shape, dtype)
        return ops.transpose(shape, (1, 0), dtype)
    if kind == "bias":
        return ops.bias_add((1, draw(dims), draw(dims), 4), axis=1, dtype=dtype)
    if kind == "sum":
        return ops.sum((draw(dims), draw(dims), 4), (1,), dtype)
    if kind == "pool":
        return ops.max_pool2d(1, draw(dims), 8, 8, 2, 2, dtype)
    if kind == "matmul":
        return ops.matmul(draw(dims), draw(dims), draw(dims), dtype)
    return ops.conv2d(1, draw(dims), 8, 8, draw(dims), 3, stride=1, padding=1, dtype=dtype)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workload=_workloads(), seed=st.integers(0, 2**20))
def test_every_dtype_and_family_the_space_suggests_lowers(workload: ops.Workload, seed: int):
    for device in (GENERIC_DEVICE, SMALL_DEVICE):
        if workload.dtype == "float16" and not device.supports_fp16:
            with pytest.raises(LayoutRejectedError, match="needs cl_khr_fp16"):
                SearchSpace(workload, device)
            continue
        space = SearchSpace(workload, device)
        trial = VectorTrial(seed) if seed % 2 else RandomTrial(seed)
        _lowers_everything(workload, space, [space.suggest(trial), space.identity()])


def test_a_float16_texture_is_read_as_floats_and_transposes_exactly(env: Env) -> None:
    """A half texture's texels come in as floats (``read_imagef``): the
    kernel computes in float32, and a transpose through it loses nothing."""
    workload = ops.transpose((64, 96), (1, 0), "float16")
    space = SearchSpace(workload, env.info)
    textures = [lay for lay in space.layouts("X") if lay.image_rank == 2]
    assert textures
    x = np.random.default_rng(0).standard_normal((64, 96)).astype(np.float16)
    for layout in textures:
        candidate = _with(space.identity(), layouts={"X": layout})
        program = lower(workload, candidate, env.info)
        assert "read_imagef(" in program.source and "read_imageh(" not in program.source
        out, _ = run(env, program, {"X": x})
        np.testing.assert_array_equal(out["Y"], x.T)


def test_float16_textures_are_offered_and_lowered() -> None:
    """The bug this table fixed: Image2DRead accepted float16 and lower refused it."""
    workload = ops.transpose((8, 16), (1, 0), "float16")
    space = SearchSpace(workload, GENERIC_DEVICE)
    textures = [lay for lay in space.layouts("X") if lay.image_rank == 2]
    assert textures
    base = space.identity()
    for layout in textures:
        candidate = _with(base, layouts={"X": layout})
        assert space.check(candidate).ok
        program = lower(workload, candidate, GENERIC_DEVICE)
        # the compute kernel reads half texels as floats, the type it computes in
        assert "read_imagef(" in program.source
        assert "write_imageh(" in program.source  # the pack kernel moves halves
