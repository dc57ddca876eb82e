"""The ``matrix`` knob: which devices and workloads get a matrix instruction,
which local tile layouts each instruction's fragment load takes, and the
auto memory planning seed's example on the matrix path."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import pytest

from laytune.device_info import DeviceInfo
from laytune.exceptions import LayoutRejectedError
from laytune.layout import identity, pad_every, pad_rows
from laytune.ops import matmul
from laytune.space import (
    JOINT_RULES,
    STORAGE_HALF_VARIANTS,
    Candidate,
    MatrixTileLoad,
    SearchSpace,
    SpaceOptions,
    baseline_knobs,
    check_candidate,
    half_storage_only,
    knob_names,
    matrix_capability,
    matrix_operands,
    matrix_schedule,
)
from tests.space.conftest import make_conv2d, make_device, make_matmul

INTEL_EXTENSIONS = (
    "cl_khr_fp16",
    "cl_intel_subgroup_matrix_multiply_accumulate",
    "cl_intel_subgroups",
    "cl_intel_subgroups_short",
    "cl_intel_subgroup_local_block_io",
)
INTEL = make_device(extensions=INTEL_EXTENSIONS, sub_group_sizes=(8, 16, 32))
NVIDIA = make_device(
    platform_name="NVIDIA CUDA", vendor="NVIDIA Corporation", compute_capability=(8, 6)
)
PLAIN = make_device()
# as NVIDIA's OpenCL platform reports an H200: compute capability 9.0, no cl_khr_fp16
NVIDIA_NO_FP16 = make_device(
    platform_name="NVIDIA CUDA",
    vendor="NVIDIA Corporation",
    compute_capability=(9, 0),
    extensions=("cl_nv_device_attribute_query",),
)

# a small space: identity global layouts, the staged schedule, the seed's tiles
OPTIONS = SpaceOptions(
    families=("identity",),
    blocks=(1,),
    groups=(0, 16),
    splits=(1,),
    unrolls=(1,),
    vectors=(1,),
    local_families=("identity", "pad_rows", "pad_every"),
    local_pad_amounts=(4, 8),
    pad_every_rows=(2,),
)


def _half_matmul() -> Any:
    return matmul(32, 32, 32, dtype="float16")


# -- the device capability ---------------------------------------------------------


def test_capability_per_device() -> None:
    assert matrix_capability(INTEL) == (frozenset({"intel_dpas"}), "")
    assert matrix_capability(NVIDIA) == (frozenset({"nv_wmma", "nv_mma"}), "")
    none, why = matrix_capability(PLAIN)
    assert not none and "neither cl_intel_subgroup_matrix_multiply_accumulate" in why
    turing = make_device(platform_name="NVIDIA CUDA", compute_capability=(7, 5))
    assert "compute capability 7.5; mma.sync m16n8k16" in matrix_capability(turing)[1]
    unknown = make_device(platform_name="NVIDIA CUDA")
    assert "reports no compute capability" in matrix_capability(unknown)[1]
    pvc = make_device(extensions=INTEL_EXTENSIONS, sub_group_sizes=(16, 32))
    assert "runs in sub-groups of 8" in matrix_capability(pvc)[1]
    partial = make_device(extensions=INTEL_EXTENSIONS[:2], sub_group_sizes=(8,))
    assert "lacks cl_intel_subgroups" in matrix_capability(partial)[1]


def test_the_cpu_device_says_why_it_offers_none(laytune_device: Any) -> None:
    info: DeviceInfo = laytune_device.info
    if "CPU" not in info.device_type:
        pytest.skip(f"{info.name} is a {info.device_type}; this test is about CPU devices")
    variants, why = matrix_capability(info)
    assert not variants, f"{info.name} unexpectedly has a matrix instruction"
    assert info.name in why
    if not info.supports_fp16:
        pytest.skip(f"{info.name} has no cl_khr_fp16: no float16 space to build")
    space = SearchSpace(_half_matmul(), info, OPTIONS)
    rejection = next(r for r in space.rejections() if r.constraint == "matrix_capability")
    assert rejection.removed > 0
    assert "device has no matrix intrinsic: " + why in rejection.example


def test_half_as_storage_where_the_device_lacks_fp16() -> None:
    """NVIDIA's OpenCL platform has no cl_khr_fp16, so no kernel there may
    compute in half; the NVIDIA matrix kernels keep half as storage, so a
    float16 matmul's space there is its matrix kernels and nothing else,
    and its baseline is the plainest of them."""
    workload = _half_matmul()
    assert half_storage_only(workload, NVIDIA_NO_FP16)
    assert not half_storage_only(workload, NVIDIA)  # has cl_khr_fp16: every kernel runs
    no_fp16 = make_device(extensions=())
    assert not half_storage_only(workload, no_fp16)  # no matrix kernel to fall back on
    with pytest.raises(LayoutRejectedError, match="dtype float16 needs cl_khr_fp16"):
        SearchSpace(workload, no_fp16, OPTIONS)
    with pytest.raises(LayoutRejectedError, match="dtype float16 needs cl_khr_fp16"):
        SearchSpace(matmul(24, 24, 24, dtype="float16"), NVIDIA_NO_FP16, OPTIONS)  # no 16x16

    space = SearchSpace(workload, NVIDIA_NO_FP16, OPTIONS)
    offered = list(space.enumerate())
    assert len(offered) == len(space) > 0
    assert {c.knob("matrix") for c in offered} == STORAGE_HALF_VARIANTS
    base = space.identity()
    assert base.knob("matrix") == "nv_mma"
    assert all(layout.is_identity for layout in base.layout_map.values())
    assert set(base.layout_map) == {"A", "B", "C", "A.local", "B.local"}
    assert check_candidate(workload, base, NVIDIA_NO_FP16).ok
    plain = Candidate.make(base.layout_map, {**base.knob_map, "matrix": "none"})
    verdict = check_candidate(workload, plain, NVIDIA_NO_FP16)
    assert not verdict.ok
    assert "matrix 'none' computes in float16, which needs cl_khr_fp16" in verdict.reasons[0]


# -- which workloads have the knob --------------------------------------------------


def test_only_float16_matmuls_have_the_knob() -> None:
    assert knob_names(_half_matmul())[-1] == "matrix"
    assert "matrix" not in knob_names(matmul(32, 32, 32))  # float32: keys unchanged
    assert matrix_operands(_half_matmul()) == (("A", "B"), "")
    assert "float16" in matrix_operands(matmul(32, 32, 32))[1]
    assert "not 16 x 16" in matrix_operands(matmul(24, 24, 24, dtype="float16"))[1]
    assert "not a sum over one reduce axis" in matrix_operands(make_conv2d())[1]
    assert "matrix" not in knob_names(make_matmul())  # a hand-written float32 description


def test_the_rules_are_joint_rules() -> None:
    assert {"matrix_capability", "matrix_tile_load"} <= set(JOINT_RULES)


# -- the seed's example on the matrix path ----------------------------------------


def _matrix_candidate(variant: str, local_a: Any, local_b: Any = None) -> Candidate:
    workload = _half_matmul()
    layouts = {
        "A": identity((32, 32)),
        "B": identity((32, 32)),
        "C": identity((32, 32)),
        "A.local": local_a,
        "B.local": local_b or identity((16, 16)),
    }
    knobs = {**baseline_knobs(workload), **matrix_schedule(workload), "matrix": variant}
    return Candidate.make(layouts, knobs)


def _why(variant: str, local_a: Any, device: DeviceInfo = NVIDIA) -> str:
    verdict = check_candidate(_half_matmul(), _matrix_candidate(variant, local_a), device)
    return "" if verdict.ok else " | ".join(verdict.reasons)


def test_seed_003_strided_matrix_load_refuses_what_row_pointers_take() -> None:
    """A pad every 2 rows of the local A tile breaks the one row stride of
    ``wmma.load`` but not ldmatrix's row pointers. In bytes: the seed's 4
    halves (8 bytes) also break ldmatrix's 16-byte row alignment, so the
    row-pointer load takes the pad of 8 halves (16 bytes)."""
    seed = pad_every((16, 16), rows=2, pad=8)
    why = _why("nv_wmma", seed)
    assert why.startswith("matrix: matrix 'nv_wmma': 'A.local': MatrixTileLoad(intrinsic='nv_wmma'")
    assert "the stride breaks in tile (0, 0) at row 2" in why
    assert _why("nv_mma", seed) == ""
    assert _why("intel_dpas", seed, INTEL) == ""
    # the seed's literal 4 halves: refused by both, for different reasons
    four = pad_every((16, 16), rows=2, pad=4)
    assert "the stride breaks" in _why("nv_wmma", four)
    assert "not aligned to 16 bytes" in _why("nv_mma", four)
    # one constant stride serves both
    assert _why("nv_wmma", pad_rows((16, 16), 8)) == ""
    assert _why("nv_mma", pad_rows((16, 16), 8)) == ""


def test_seed_003_in_the_space() -> None:
    """The space offers the pad-every-2 tile to ldmatrix and not to wmma."""
    space = SearchSpace(_half_matmul(), NVIDIA, OPTIONS)
    offered = {
        (c.knob("matrix"), c.layout_map["A.local"].describe())
        for c in space.enumerate()
        if c.knob("matrix") != "none"
    }
    assert ("nv_mma", "pad_every(rows=2, pad=8)") in offered
    assert ("nv_wmma", "pad_every(rows=2, pad=8)") not in offered
    assert ("nv_wmma", "identity()") in offered
    assert not any("pad=4" in layout for _, layout in offered)
    rules = {r.constraint: r for r in space.rejections()}
    assert rules["matrix_tile_load"].removed > 0
    assert "MatrixTileLoad" in rules["matrix_tile_load"].example
    assert rules["matrix_capability"].removed > 0  # intel_dpas on an NVIDIA device


def test_a_device_without_the_instruction_gets_the_reason() -> None:
    why = _why("nv_mma", identity((16, 16)), PLAIN)
    assert "matrix 'nv_mma': device has no matrix intrinsic: Written GPU (Hand) has neither" in why
    why = _why("intel_dpas", identity((16, 16)), NVIDIA)
    assert why.endswith(
        "matrix 'intel_dpas': Written GPU (NVIDIA CUDA) has nv_mma, nv_wmma, not intel_dpas"
    )


def test_the_matrix_kernel_owns_its_schedule() -> None:
    candidate = _matrix_candidate("nv_mma", identity((16, 16)))
    knobs = {**candidate.knob_map, "unroll": 2}
    verdict = check_candidate(_half_matmul(), Candidate.make(candidate.layout_map, knobs), NVIDIA)
    assert not verdict.ok
    assert verdict.reasons == (
        "matrix: matrix 'nv_mma' runs its own schedule: unroll must be 1, not 2",
    )


def test_counting_reads_the_matrix_schedule_as_one_fact(monkeypatch: pytest.MonkeyPatch) -> None:
    """The matrix step asks one question of the knobs before it (is any off
    the schedule?), so counting memoises its checks on that answer and the
    local tiles' facts. It read every knob of the schedule before: counting
    an H200's float16 matmul space (only its matrix kernels valid) checked
    the matrix knob 933,440 times and took 80 s, before the job's first
    trial; the space's size is the same either way (373,248)."""
    from laytune.space import _matrix_rules

    calls = 0
    check = _matrix_rules.MatrixStep.check

    def counted(self: Any, state: Any, value: Any) -> Any:
        nonlocal calls
        calls += 1
        return check(self, state, value)

    monkeypatch.setattr(_matrix_rules.MatrixStep, "check", counted)
    space = SearchSpace(matmul(256, 256, 256, dtype="float16"), NVIDIA_NO_FP16)
    assert space.size_up_to(10**6) == 373_248
    assert calls < 1_000
    schedule = matrix_schedule(space.workload)
    for candidate in itertools.islice(space.enumerate(), 50):
        knobs = candidate.knob_map
        assert knobs["matrix"] != "none"
        assert {k: knobs[k] for k in schedule} == schedule


def test_one_fact_counts_what_every_knob_counted() -> None:
    """Wider knobs than OPTIONS: the spaces hold as many candidates as when
    the matrix step read every knob of its schedule (1143, 1156 and 13,
    counted by that rule), and each candidate the walk offers passes the
    check that reads the whole assignment."""
    wide = dataclasses.replace(
        OPTIONS,
        unrolls=(1, 2, 4),
        blocks=(1, 2, 4),
        groups=(0, 4, 16),
        vectors=(1, 2),
        splits=(1, 2),
    )
    spaces = [SearchSpace(_half_matmul(), d, wide) for d in (PLAIN, NVIDIA, NVIDIA_NO_FP16)]
    assert [len(space) for space in spaces] == [1143, 1156, 13]
    space = spaces[1]
    offered = list(space.enumerate())
    assert len(offered) == 1156
    for candidate in offered[::7]:
        assert check_candidate(space.workload, candidate, NVIDIA).ok


def test_matrix_tile_load_strided_variant() -> None:
    shape = (16, 16)
    assert MatrixTileLoad("nv_wmma", "a").check(identity(shape), shape, "float16", PLAIN).ok
    # a stride of 20 halves: 40-byte rows, not 16-byte aligned
    verdict = MatrixTileLoad("nv_wmma", "b").check(pad_rows(shape, 4), shape, "float16", PLAIN)
    assert not verdict.ok and "not aligned to 16 bytes" in " ".join(verdict.reasons)
