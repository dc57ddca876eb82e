"""The matrix kernels: golden structure of the generated source for each
instruction, the inline PTX compiled by ``nvcc`` for ``sm_80`` (it proves the
statements well-formed; running them needs an NVIDIA GPU), and runs on a
device that has the instruction (none of this repository's CPU runtimes:
those tests say which capability is missing)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pyopencl as cl
import pytest

from laytune.codegen import lower
from laytune.device_info import DeviceInfo
from laytune.layout import identity, pad_every, pad_rows
from laytune.ops import matmul
from laytune.runners import register_opencl_runtimes
from laytune.space import (
    MATRIX_INTRINSICS,
    Candidate,
    SearchSpace,
    SpaceOptions,
    baseline_knobs,
    matrix_capability,
    matrix_schedule,
)
from tests.codegen.harness import Env, run

INTEL = DeviceInfo(
    "Intel(R) OpenCL Graphics",
    "Intel(R) Arc(TM) A770 Graphics",
    extensions=(
        "cl_khr_fp16",
        "cl_intel_subgroup_matrix_multiply_accumulate",
        "cl_intel_subgroups",
        "cl_intel_subgroups_short",
        "cl_intel_subgroup_local_block_io",
    ),
    sub_group_sizes=(8, 16, 32),
    local_mem_size=64 * 1024,
    max_work_group_size=1024,
    max_work_item_sizes=(1024, 1024, 1024),
)
NVIDIA = DeviceInfo(
    "NVIDIA CUDA",
    "NVIDIA A100",
    vendor="NVIDIA Corporation",
    compute_capability=(8, 0),
    extensions=("cl_khr_fp16", "cl_nv_device_attribute_query"),
    local_mem_size=48 * 1024,
    max_work_group_size=1024,
    max_work_item_sizes=(1024, 1024, 64),
)
SEED = pad_every((16, 16), rows=2, pad=8)  # row pointers only: no constant stride
LOCAL = {"intel_dpas": SEED, "nv_mma": SEED, "nv_wmma": pad_rows((16, 16), 8)}


def _workload() -> Any:
    return matmul(32, 48, 64, dtype="float16")


def _candidate(variant: str, local: Any = None) -> Candidate:
    workload = _workload()
    tile = local or LOCAL[variant]
    layouts = {
        "A": identity((32, 64)),
        "B": pad_rows((64, 48), 4),
        "C": identity((32, 48)),
        "A.local": tile,
        "B.local": tile,
    }
    knobs = {**baseline_knobs(workload), **matrix_schedule(workload), "matrix": variant}
    return Candidate.make(layouts, knobs)


def _compute_source(variant: str, device: DeviceInfo) -> tuple[str, Any]:
    program = lower(_workload(), _candidate(variant), device)
    source = program.source
    start = source.index("__kernel")
    end = source.index("\n}\n", start) + 3
    return source[start:end], program


# -- golden structure ------------------------------------------------------------


def _stage(kernel: str) -> str:
    """The body of the stage loop."""
    return kernel[kernel.index("for (int k0") : kernel.rindex("barrier(CLK_LOCAL_MEM_FENCE);")]


def test_nv_mma_source() -> None:
    kernel, program = _compute_source("nv_mma", NVIDIA)
    assert "__attribute__((reqd_work_group_size(32, 1, 1)))" in kernel
    stage = _stage(kernel)
    assert stage.count("ldmatrix.sync.aligned.m8n8.x4.shared.b16") == 1  # A
    assert stage.count("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16") == 1  # B
    assert stage.count("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") == 2
    assert stage.count("barrier(CLK_LOCAL_MEM_FENCE);") == 1  # after the copy; one closes it
    assert kernel.count("barrier(CLK_LOCAL_MEM_FENCE);") == 2
    # per lane: 4 + 4 fragment registers, 2 x 4 accumulators, 8 stores of C
    assert stage.count('"=r"(') == 8 and stage.count('"+f"(') == 8
    assert kernel.count("vstore_half_rte(acc") == 8
    # half only as storage: no cl_khr_fp16, which NVIDIA's OpenCL platform lacks
    assert "cl_khr_fp16" not in program.source
    assert stage.count("vstore_half(vload_half(") == 2  # one element of each tile per lane
    assert "(half)" not in kernel and "__local half " not in kernel
    assert "__local ushort A_local[" in kernel
    # the row pointer follows the layout: lane % 16 rows, 8 halves of pad every 2
    assert "(((lane & 15) >> 1) << 3)" in kernel
    assert program.compute[0].global_size == (3 * 32, 2)
    assert program.compute[0].local_size == (32, 1)


def test_nv_wmma_source_passes_the_constant_stride() -> None:
    kernel, _ = _compute_source("nv_wmma", NVIDIA)
    stage = _stage(kernel)
    assert stage.count("wmma.load.a.sync.aligned.row.m16n16k16.shared.f16") == 1
    assert stage.count("wmma.load.b.sync.aligned.row.m16n16k16.shared.f16") == 1
    assert stage.count("wmma.mma.sync.aligned.row.row.m16n16k16.f32.f32") == 1
    assert stage.count('"r"(24)') == 2  # pad_rows(8): rows 24 halves apart
    assert "wmma.store.d.sync.aligned.row.m16n16k16.shared.f32" in kernel
    assert kernel.count("barrier(CLK_LOCAL_MEM_FENCE);") == 3  # + before reading c_tile
    assert "vstore_half_rte(c_tile[e]," in kernel and "(half)" not in kernel


def test_intel_dpas_source() -> None:
    kernel, program = _compute_source("intel_dpas", INTEL)
    assert "__attribute__((intel_reqd_sub_group_size(8)))" in kernel
    assert "__attribute__((reqd_work_group_size(8, 1, 1)))" in kernel
    assert "get_sub_group_local_id()" in kernel
    stage = _stage(kernel)
    assert stage.count("intel_sub_group_f16_f16_matrix_mad_k16(") == 4
    assert stage.count("intel_sub_group_block_read((__local const uint*)") == 2 * 8  # rows of A
    assert stage.count("intel_sub_group_block_read_us((__local const ushort*)") == 2 * 16
    # row 2 of the seed's tile starts after one pad of 8: 2 * 16 + 8
    assert "(A_local + 40)" in stage
    assert kernel.count("] = convert_half(acc") == 4 * 8  # float accumulators rounded as stored
    assert program.compute[0].local_size == (8, 1)


def test_every_matrix_candidate_of_a_space_lowers() -> None:
    options = SpaceOptions(
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
    for device, instruction in ((NVIDIA, "asm volatile"), (INTEL, "matrix_mad_k16")):
        space = SearchSpace(_workload(), device, options)
        matrix = [c for c in space.enumerate() if c.knob("matrix") != "none"]
        assert matrix
        for candidate in matrix:
            assert instruction in lower(_workload(), candidate, device).source


def test_a_variant_the_space_refuses_is_not_lowered() -> None:
    from laytune.exceptions import LayoutRejectedError

    with pytest.raises(LayoutRejectedError, match="MatrixTileLoad"):
        lower(_workload(), _candidate("nv_wmma", SEED), NVIDIA)
    with pytest.raises(LayoutRejectedError, match="has intel_dpas, not nv_mma"):
        lower(_workload(), _candidate("nv_mma"), INTEL)


# -- the PTX, compiled ------------------------------------------------------------

_CONSTRAINT_TYPES = {"r": "unsigned int", "f": "float", "l": "unsigned long long"}


def _cuda_kernel(statements: list[str]) -> str:
    """A CUDA kernel around the generated asm statements: every register
    operand declared with the type its constraint names, every address a
    shared-memory address."""
    names: dict[str, str] = {}
    for stmt in statements:
        for constraint, name in re.findall(r'"[=+]?([rfl])"\(([A-Za-z_]\w*)\)', stmt):
            names.setdefault(name, _CONSTRAINT_TYPES[constraint])
    decls = []
    for name, ctype in names.items():
        if ctype == "unsigned long long":
            decls.append(f"{ctype} {name} = (unsigned long long)__cvta_generic_to_shared(smem);")
        else:
            decls.append(f"{ctype} {name} = 0;")
    body = "\n    ".join([*decls, *statements])
    return (
        "__global__ void check(float* out) {\n"
        "    __shared__ __align__(32) unsigned short smem[1024];\n"
        f"    {body}\n"
        "    out[threadIdx.x] = 0.0f;\n"
        "}\n"
    )


def _asm_statements(kernel: str) -> list[str]:
    # the operand casts of an OpenCL pointer become a plain shared address in CUDA
    text = kernel.replace('"l"((ulong)c_tile)', '"l"(c_tile)')
    return re.findall(r"asm volatile\(.*?\);", text)


@pytest.mark.parametrize("variant", ["nv_mma", "nv_wmma"])
def test_the_ptx_compiles_for_sm_80(variant: str, tmp_path: Path) -> None:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH: the inline PTX is checked only by its structure")
    kernel, _ = _compute_source(variant, NVIDIA)
    statements = _asm_statements(kernel)
    assert len(statements) == {"nv_mma": 4, "nv_wmma": 4}[variant]
    source = tmp_path / "check.cu"
    source.write_text(_cuda_kernel(statements))
    done = subprocess.run(
        [nvcc, "-arch=sm_80", "-cubin", "-o", str(tmp_path / "check.cubin"), str(source)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"{done.stderr}\n{source.read_text()}"


def test_malformed_ptx_fails_the_same_check(tmp_path: Path) -> None:
    """The check above can fail: a wrong shape does not compile."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH")
    kernel, _ = _compute_source("nv_mma", NVIDIA)
    statements = [s.replace("m16n8k16", "m16n8k15") for s in _asm_statements(kernel)]
    source = tmp_path / "bad.cu"
    source.write_text(_cuda_kernel(statements))
    done = subprocess.run(
        [nvcc, "-arch=sm_80", "-cubin", "-o", str(tmp_path / "bad.cubin"), str(source)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "Unknown modifier '.m16n8k15'" in done.stderr  # ptxas read the statement


# -- device runs ------------------------------------------------------------------


def _matrix_devices() -> tuple[list[tuple[cl.Device, DeviceInfo, frozenset[str]]], list[str]]:
    register_opencl_runtimes()
    found, missing = [], []
    for platform in cl.get_platforms():
        for device in platform.get_devices():
            info = DeviceInfo.from_cl_device(device)
            variants, why = matrix_capability(info)
            if variants:
                found.append((device, info, variants))
            else:
                missing.append(why)
    return found, missing


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(MATRIX_INTRINSICS))
def test_matrix_kernels_match_numpy_on_a_capable_device(variant: str) -> None:
    """The seed's pad-every-2 tile (row-pointer loads) or a constant stride
    (wmma), run and verified on a device that has the instruction."""
    found, missing = _matrix_devices()
    capable = [(d, i) for d, i, v in found if variant in v]
    if not capable:
        pytest.skip(f"no OpenCL device here has matrix {variant!r}: " + "; ".join(missing))
    device, info = capable[0]
    context = cl.Context([device])
    env = Env(device, context, cl.CommandQueue(context), info)
    workload = _workload()
    program = lower(workload, _candidate(variant), info)
    rng = np.random.default_rng(0)
    inputs = {b.name: rng.uniform(-1, 1, b.shape).astype(np.float16) for b in workload.inputs}
    outputs, _ = run(env, program, inputs)
    want = inputs["A"].astype(np.float32) @ inputs["B"].astype(np.float32)
    np.testing.assert_allclose(outputs["C"].astype(np.float32), want, rtol=2e-2, atol=2e-2)
