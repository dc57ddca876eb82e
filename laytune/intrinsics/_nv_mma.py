"""``nv_mma``: ``ldmatrix`` row pointers and ``mma.sync m16n8k16`` (NVIDIA, PTX)."""

from __future__ import annotations

from collections.abc import Sequence

from laytune.intrinsics._intrinsic import FragmentLoad, MatrixTiles
from laytune.intrinsics._nvidia import (
    WARP_ATTRIBUTES,
    asm_mma,
    asm_operands,
    nvidia_intrinsic,
)

__all__ = ["NV_MMA", "ldmatrix_x4", "mma_m16n8k16"]

_MMA = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"


def ldmatrix_x4(regs: Sequence[str], address: str, trans: bool) -> str:
    """Four 8 x 8 b16 matrices from ``__local`` memory: lane ``l`` gives the
    address of row ``l % 8`` of matrix ``l // 8``; ``regs[m]`` receives the
    lane's two elements of matrix ``m`` (transposed with ``trans``)."""
    op = f"ldmatrix.sync.aligned.m8n8.x4{'.trans' if trans else ''}.shared.b16"
    outs = ", ".join(f'"=r"({r})' for r in regs)
    return f'asm volatile("{op} {{{asm_operands(0, 4)}}}, [%4];" : {outs} : "l"({address}));'


def mma_m16n8k16(acc: Sequence[str], a: Sequence[str], b: Sequence[str]) -> str:
    """``acc += A (16 x 16, row) * B (16 x 8, col)``: f16 inputs, f32 accumulators."""
    return asm_mma(_MMA, acc, a, b)


def _emit(t: MatrixTiles, name: str) -> str:
    """One warp per tile: per stage one ``ldmatrix.x4`` of A (the 16 x 16
    fragment), one ``ldmatrix.x4.trans`` of B (two 16 x 8 fragments), two
    ``mma.sync.m16n8k16``. Lane ``l`` points at row ``l % 16``, column
    ``(l / 16) * 8`` of each tile: any row placement the layout gives."""
    lane = t.lane
    row, col = lane % 16, (lane // 16) * 8
    acc = [[f"acc{n}_{q}" for q in range(4)] for n in range(2)]
    a = [f"a{q}" for q in range(4)]
    b = [f"b{q}" for q in range(4)]
    stages = [
        f"unsigned int {', '.join(a)}, {', '.join(b)};",
        f"const ulong a_row = (ulong){t.pointer(t.a, row, col)};  /* a __local (shared) address */",
        f"const ulong b_row = (ulong){t.pointer(t.b, row, col)};",
        ldmatrix_x4(a, "a_row", trans=False),
        ldmatrix_x4(b, "b_row", trans=True),
        mma_m16n8k16(acc[0], a, b[:2]),
        mma_m16n8k16(acc[1], a, b[2:]),
    ]
    init = "float " + ", ".join(f"{r} = 0.0f" for r in (*acc[0], *acc[1])) + ";"
    stores = ["/* accumulators: rows lane / 4 (+ 8), columns 2 * (lane % 4) (+ 1) */"]
    for n in range(2):
        for q in range(4):
            i = t.i0 + lane // 4 + (8 if q >= 2 else 0)
            j = t.j0 + n * 8 + (lane % 4) * 2 + q % 2
            stores.append(t.store(i, j, acc[n][q]))
    return t.kernel(name, WARP_ATTRIBUTES, init, stages, stores)


# ldmatrix.sync.aligned.m8n8.x4 (.trans for B): eight 16-byte rows per 8 x 8 matrix
NV_MMA = nvidia_intrinsic(
    "nv_mma", _MMA, (16, 8, 16), (FragmentLoad(8, 8, 16), FragmentLoad(8, 8, 16)), _emit
)
"""``mma.sync.aligned.m16n8k16`` on fragments that ``ldmatrix`` loads from
one row pointer per lane: any row placement whose rows are 16-byte aligned."""
