"""The matrix kernels run on Intel's CPU runtime with each matrix
instruction replaced by its ISA definition in OpenCL C.

No device here has a matrix instruction, but Intel's CPU runtime has
sub-groups of 8 and 32, their shuffles and the ``__local`` block reads. So
everything a matrix kernel does around the instruction (the tile copy, the
row pointers the local layout gives each lane, the packing of fragments,
the accumulators' stores into C) runs and is checked against numpy, with the
instruction emulated from its documented fragment layout:

* ``intel_sub_group_f16_f16_matrix_mad_k16`` (sub-groups of 8): row m of A
  is component m of ``a``, lane l holding k = 2l, 2l + 1; lane n holds column
  n of B, component p holding k = 2p, 2p + 1;
* ``ldmatrix.sync.aligned.m8n8.x4`` and ``mma.sync.aligned.m16n8k16.row.col``
  (a warp as a sub-group of 32): the PTX ISA's fragment layouts (lane l:
  group g = l / 4, t = l % 4);
* ``wmma.*.m16n16k16``, whose fragment layout PTX leaves opaque: any layout
  consistent between load, mma and store (here lane l holds row l / 2,
  columns 8 (l % 2) ... + 7), which checks the pointers and strides the
  kernel passes.

A wrong reading of the ISA by both the generator and its emulation would
pass; the nvcc test of ``test_matrix.py`` checks the PTX's form, and only a
device with the instructions checks them whole.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np
import pyopencl as cl
import pytest

from laytune.codegen import lower
from laytune.device_info import DeviceInfo
from laytune.runners import register_opencl_runtimes
from tests.codegen.harness import Env, run
from tests.codegen.test_matrix import INTEL, NVIDIA, _candidate, _workload

_INTEL_MAD = """
float8 intel_sub_group_f16_f16_matrix_mad_k16(int8 a, int8 b, float8 acc) {
    int as[8], bs[8];
    float out[8];
    vstore8(a, 0, as);
    vstore8(b, 0, bs);
    vstore8(acc, 0, out);
    for (int k = 0; k < 16; ++k) {
        const half2 bk = as_half2(bs[k / 2]);
        const float bv = (float)((k & 1) ? bk.y : bk.x);
        for (int m = 0; m < 8; ++m) {
            const half2 ak = as_half2(sub_group_broadcast(as[m], (uint)(k / 2)));
            out[m] += (float)((k & 1) ? ak.y : ak.x) * bv;
        }
    }
    return vload8(0, out);
}
"""

_NV = """
float emu_half(uint r, int h) {
    const half2 v = as_half2(r);
    return (float)(h ? v.y : v.x);
}
uint emu_pack(ushort lo, ushort hi) { return (uint)lo | ((uint)hi << 16); }

/* ldmatrix.m8n8.x4{.trans}.b16: lane l gives the row address of row l % 8
   of matrix l / 8; lane l receives of matrix m row l / 4, columns 2 (l % 4),
   +1 (.trans: rows 2 (l % 4), +1 of column l / 4) */
void emu_ldmatrix(uint* r0, uint* r1, uint* r2, uint* r3, ulong addr, int trans) {
    const uint lane = get_sub_group_local_id();
    uint out[4];
    for (int m = 0; m < 4; ++m) {
        if (!trans) {
            const ulong row = intel_sub_group_shuffle(addr, 8 * m + lane / 4);
            __local const ushort* p = (__local const ushort*)row;
            out[m] = emu_pack(p[2 * (lane % 4)], p[2 * (lane % 4) + 1]);
        } else {
            const ulong row0 = intel_sub_group_shuffle(addr, 8 * m + 2 * (lane % 4));
            const ulong row1 = intel_sub_group_shuffle(addr, 8 * m + 2 * (lane % 4) + 1);
            out[m] = emu_pack(((__local const ushort*)row0)[lane / 4],
                              ((__local const ushort*)row1)[lane / 4]);
        }
    }
    *r0 = out[0]; *r1 = out[1]; *r2 = out[2]; *r3 = out[3];
}

/* mma.m16n8k16.row.col: a0 (row g, k 2t..), a1 (row g + 8), a2 (row g, k 2t + 8..),
   a3 (row g + 8, k 2t + 8..); b0 (k 2t.., column g), b1 (k 2t + 8..);
   c0, c1 (row g, columns 2t, 2t + 1), c2, c3 (row g + 8) */
void emu_mma(float* c0, float* c1, float* c2, float* c3, uint a0, uint a1, uint a2, uint a3,
             uint b0, uint b1) {
    const uint lane = get_sub_group_local_id();
    const uint g = lane / 4, t = lane % 4;
    float acc[4] = {*c0, *c1, *c2, *c3};
    for (int k = 0; k < 16; ++k) {
        const uint from = g * 4 + (k % 8) / 2;
        const float lo = emu_half(intel_sub_group_shuffle(k < 8 ? a0 : a2, from), k % 2);
        const float hi = emu_half(intel_sub_group_shuffle(k < 8 ? a1 : a3, from), k % 2);
        for (int j = 0; j < 2; ++j) {
            const uint bfrom = (2 * t + j) * 4 + (k % 8) / 2;
            const float bv = emu_half(intel_sub_group_shuffle(k < 8 ? b0 : b1, bfrom), k % 2);
            acc[j] += lo * bv;
            acc[2 + j] += hi * bv;
        }
    }
    *c0 = acc[0]; *c1 = acc[1]; *c2 = acc[2]; *c3 = acc[3];
}

/* wmma m16n16k16, row-major fragments: lane l holds row l / 2, columns
   8 (l % 2) .. + 7 in registers 0..3 (4..7 unused) */
void emu_wmma_load(uint* r0, uint* r1, uint* r2, uint* r3, uint* r4, uint* r5, uint* r6,
                   uint* r7, ulong addr, uint stride) {
    const uint lane = get_sub_group_local_id();
    __local const ushort* p = (__local const ushort*)addr + (lane / 2) * stride + (lane % 2) * 8;
    *r0 = emu_pack(p[0], p[1]); *r1 = emu_pack(p[2], p[3]);
    *r2 = emu_pack(p[4], p[5]); *r3 = emu_pack(p[6], p[7]);
    *r4 = 0; *r5 = 0; *r6 = 0; *r7 = 0;
}

void emu_wmma_mma(float* d0, float* d1, float* d2, float* d3, float* d4, float* d5, float* d6,
                  float* d7, uint a0, uint a1, uint a2, uint a3, uint a4, uint a5, uint a6,
                  uint a7, uint b0, uint b1, uint b2, uint b3, uint b4, uint b5, uint b6,
                  uint b7) {
    const uint lane = get_sub_group_local_id();
    const uint a[4] = {a0, a1, a2, a3};
    const uint b[4] = {b0, b1, b2, b3};
    float* d[8] = {d0, d1, d2, d3, d4, d5, d6, d7};
    float acc[8];
    for (int q = 0; q < 8; ++q) acc[q] = *d[q];
    for (int k = 0; k < 16; ++k) {
        const float av = emu_half(intel_sub_group_shuffle(a[(k % 8) / 2],
                                                          2 * (lane / 2) + k / 8), k % 2);
        for (int q = 0; q < 8; ++q) {
            acc[q] += av * emu_half(intel_sub_group_shuffle(b[q / 2], 2 * k + lane % 2), q % 2);
        }
    }
    for (int q = 0; q < 8; ++q) *d[q] = acc[q];
}

void emu_wmma_store(ulong addr, float f0, float f1, float f2, float f3, float f4, float f5,
                    float f6, float f7, uint stride) {
    const uint lane = get_sub_group_local_id();
    __local float* p = (__local float*)addr + (lane / 2) * stride + (lane % 2) * 8;
    p[0] = f0; p[1] = f1; p[2] = f2; p[3] = f3; p[4] = f4; p[5] = f5; p[6] = f6; p[7] = f7;
}
"""

_OPERAND = re.compile(r'"[=+]?[rfl]"\(((?:[^()]|\([^()]*\))*)\)')


def _emulated_call(statement: str) -> str:
    """The emulation call of one generated ``asm`` statement: outputs by
    address, inputs by value, in the statement's operand order."""
    op = re.match(r'asm volatile\("([^ ]+)', statement)
    assert op is not None, statement
    name = op.group(1)
    operands = _OPERAND.findall(statement)
    if name.startswith("ldmatrix"):
        outs, rest = operands[:4], [*operands[4:], "1" if ".trans" in name else "0"]
        function = "emu_ldmatrix"
    elif name.startswith("mma.sync"):
        outs, rest, function = operands[:4], operands[4:], "emu_mma"
    elif name.startswith("wmma.load"):
        outs, rest, function = operands[:8], operands[8:], "emu_wmma_load"
    elif name.startswith("wmma.mma"):
        outs, rest, function = operands[:8], operands[8:], "emu_wmma_mma"
    elif name.startswith("wmma.store"):
        outs, rest, function = [], operands, "emu_wmma_store"
    else:
        raise AssertionError(f"no emulation of {name}")
    args = [f"&{o}" for o in outs] + rest
    return f"{function}({', '.join(args)});"


def _intel_cpu() -> tuple[cl.Device, DeviceInfo]:
    register_opencl_runtimes()
    needed = ("cl_intel_subgroups", "cl_intel_subgroup_local_block_io", "cl_khr_fp16")
    for platform in cl.get_platforms():
        for device in platform.get_devices():
            info = DeviceInfo.from_cl_device(device)
            if all(info.has_extension(e) for e in needed) and {8, 32} <= set(info.sub_group_sizes):
                return device, info
    pytest.skip(f"no OpenCL device here has {', '.join(needed)} and sub-groups of 8 and 32")


def _run_emulated(variant: str, source: str, program: Any) -> None:
    device, info = _intel_cpu()
    context = cl.Context([device])
    env = Env(device, context, cl.CommandQueue(context), info)
    workload = _workload()
    rng = np.random.default_rng(0)
    inputs = {b.name: rng.uniform(-1, 1, b.shape).astype(np.float16) for b in workload.inputs}
    outputs, _ = run(env, dataclasses.replace(program, source=source), inputs)
    want = inputs["A"].astype(np.float32) @ inputs["B"].astype(np.float32)
    np.testing.assert_allclose(outputs["C"].astype(np.float32), want, rtol=1e-2, atol=1e-2)


_PRAGMA = "#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n"


def test_the_intel_kernel_with_an_emulated_multiply() -> None:
    program = lower(_workload(), _candidate("intel_dpas"), INTEL)
    assert _PRAGMA in program.source
    _run_emulated("intel_dpas", program.source.replace(_PRAGMA, _PRAGMA + _INTEL_MAD, 1), program)


@pytest.mark.parametrize("variant", ["nv_mma", "nv_wmma"])
def test_the_nvidia_kernels_with_emulated_ptx(variant: str) -> None:
    """A warp is a sub-group of 32; every asm statement becomes a call."""
    program = lower(_workload(), _candidate(variant), NVIDIA)
    assert _PRAGMA not in program.source  # half only as storage: no cl_khr_fp16 on NVIDIA
    source = re.sub(r"asm volatile\(.*?\);", lambda m: _emulated_call(m.group(0)), program.source)
    assert "asm" not in source
    warp = "__attribute__((reqd_work_group_size(32, 1, 1)))"
    assert warp in source
    source = source.replace(warp, "__attribute__((intel_reqd_sub_group_size(32))) " + warp)
    title, body = source.split("\n", 1)  # the emulation itself computes in half
    _run_emulated(variant, f"{title}\n{_PRAGMA}{_NV}{body}", program)
