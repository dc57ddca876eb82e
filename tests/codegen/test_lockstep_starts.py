"""A contraction on a device whose consecutive work-items run in lockstep (a
GPU's warp) starts from register blocks whose work-items follow the output's
columns, in work-groups of squarest output tiles, on the operands as they
are; a CPU keeps its panel form. The lockstep width comes from the device's
vendor query. Each start is in the space, and its kernel (lowered for a GPU,
run on this machine's device) matches numpy."""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from laytune.codegen import lower
from laytune.device_info import DeviceInfo, _lockstep_width
from laytune.ops import Workload, matmul
from laytune.search import standard_candidates
from laytune.search._starts import _lockstep_blocks
from laytune.space import SearchSpace
from tests.codegen.harness import Env, build, run


def _h100() -> DeviceInfo:
    """What NVIDIA's OpenCL reports of an H100 (the limits the starts read)."""
    return DeviceInfo(
        platform_name="NVIDIA CUDA",
        device_name="NVIDIA H100 80GB HBM3",
        vendor="NVIDIA Corporation",
        device_type="GPU",
        compute_units=132,
        local_mem_size=49152,
        max_work_group_size=1024,
        max_work_item_sizes=(1024, 1024, 64),
        preferred_vector_widths=(("float", 1),),
        extensions=("cl_khr_fp64", "cl_nv_device_attribute_query"),
        compute_capability=(9, 0),
        cacheline_size=128,
        cache_size=4325376,
        last_level_cache_size=4325376,
        lockstep_width=32,
    )


def _bmm(b: int, m: int, n: int, k: int) -> Workload:
    # its own name: a defined workload stays listed by name while alive, and
    # the CLI's tests expect no "bmm" but their own
    return Workload.define(
        "lockstep_bmm",
        "C[b, i, j] += A[b, i, k] * B[b, k, j]",
        {"b": b, "i": m, "j": n, "k": k},
        {"A": (b, m, k), "B": (b, k, n)},
    )


def test_the_lockstep_width_is_the_vendors_warp_or_wavefront() -> None:
    nvidia = SimpleNamespace(extensions="cl_khr_fp64 cl_nv_device_attribute_query", warp_size_nv=32)
    amd = SimpleNamespace(extensions="cl_amd_device_attribute_query", wavefront_width_amd=64)
    plain = SimpleNamespace(extensions="cl_khr_fp64")
    assert [_lockstep_width(d) for d in (nvidia, amd, plain)] == [32, 64, 0]
    gpu = _h100()
    assert gpu.lockstep_items() == 32
    assert replace(gpu, lockstep_width=0, sub_group_sizes=(8, 16)).lockstep_items() == 16
    assert replace(gpu, lockstep_width=0).lockstep_items() == 32
    cpu = replace(gpu, device_type="CPU", lockstep_width=0, sub_group_sizes=(4, 8, 16))
    assert cpu.lockstep_items() == 1  # a CPU's work-items are loop iterations


def test_lockstep_blocks_lead_with_rows_twice_the_columns_by_area() -> None:
    assert _lockstep_blocks(128, 4) == [(8, 4), (8, 8), (16, 8), (4, 8), (16, 4), (8, 16)]
    assert all(nr % 4 == 0 for _, nr in _lockstep_blocks(128, 4))


@pytest.mark.parametrize(
    ("workload", "first_group"),
    [(matmul(2048, 2048, 2048), (8, 16)), (_bmm(8, 128, 128, 64), (8, 16))],
)
def test_a_gpu_contraction_runs_its_work_items_along_the_columns(
    workload: Workload, first_group: tuple[int, int]
) -> None:
    gpu = _h100()
    starts = standard_candidates(SearchSpace(workload, gpu), 6)
    assert len(starts) == 6
    first = starts[0]
    assert (first.knob("block.i"), first.knob("block.j"), first.knob("vector")) == (8, 4, 4)
    assert (first.knob("group.i"), first.knob("group.j")) == first_group
    for start in starts:
        assert all(layout.is_identity for _, layout in start.layouts)  # nothing packed per call
        rows, columns = start.knob("group.i"), start.knob("group.j")
        assert rows * columns == 128 and start.knob("vector_axis") == "j"
        assert columns * start.knob("vector") * 4 >= gpu.cacheline_size  # a line per row
        tile = (rows * start.knob("block.i"), columns * start.knob("block.j"))
        assert abs(math.log2(tile[0] / tile[1])) <= 1  # the squarest tile there is


def test_a_cpu_contraction_keeps_its_work_groups_down_the_rows() -> None:
    cpu = replace(
        _h100(),
        device_type="CPU",
        lockstep_width=0,
        preferred_vector_widths=(("float", 16),),
        max_work_group_size=8192,
        max_work_item_sizes=(8192, 8192, 8192),
        compute_units=2,
        cache_size=2 << 20,
    )
    first = standard_candidates(SearchSpace(matmul(512, 512, 512), cpu), 1)[0]
    assert first.knob("group.j") == 1 and first.knob("group.i") > 1


@pytest.mark.parametrize(
    "workload", [matmul(64, 64, 48), _bmm(2, 32, 64, 16)], ids=["matmul", "bmm"]
)
def test_the_gpu_contraction_starts_match_numpy(env: Env, workload: Workload) -> None:
    gpu = _h100()
    starts = standard_candidates(SearchSpace(workload, gpu), 6)
    assert starts and all(s.knob("group.j") > 1 for s in starts)
    inputs = workload.make_inputs(7)
    want = workload.reference(inputs)["C"]
    for start in starts:
        program = lower(workload, start, gpu)
        outputs, _ = run(env, program, inputs, build(env, program))
        np.testing.assert_allclose(outputs["C"], want, rtol=1e-4, atol=1e-4)


def test_an_odd_gpu_contraction_keeps_its_warps_along_the_columns() -> None:
    """257 columns make 65 blocks (no power of two above 1 divides them);
    the NDRange rounds up to whole work-groups, so the lockstep group still
    runs along the columns, a cache line of them per row."""
    gpu = _h100()
    starts = standard_candidates(SearchSpace(matmul(127, 257, 509), gpu), 6)
    assert len(starts) == 6
    for start in starts:
        columns, vector = start.knob("group.j"), start.knob("vector")
        assert columns * vector * 4 >= gpu.cacheline_size
        assert start.knob("group.i") * columns == 128
