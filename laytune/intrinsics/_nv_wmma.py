"""``nv_wmma``: ``wmma.load`` at one row stride and ``wmma.mma m16n16k16``
(NVIDIA, PTX)."""

from __future__ import annotations

from collections.abc import Sequence

from laytune.intrinsics._intrinsic import (
    BARRIER,
    MATRIX_TILE,
    FragmentLoad,
    MatrixTiles,
)
from laytune.intrinsics._nvidia import (
    WARP_ATTRIBUTES,
    asm_mma,
    asm_operands,
    nvidia_intrinsic,
)

__all__ = ["NV_WMMA", "wmma_load", "wmma_mma", "wmma_store"]

_MMA = "wmma.mma.sync.aligned.row.row.m16n16k16.f32.f32"


def wmma_load(matrix: str, regs: Sequence[str], address: str, stride: int) -> str:
    """A 16 x 16 f16 fragment of ``matrix`` ("a" or "b", row-major) at
    ``address`` with rows ``stride`` elements apart."""
    op = f"wmma.load.{matrix}.sync.aligned.row.m16n16k16.shared.f16"
    outs = ", ".join(f'"=r"({r})' for r in regs)
    return (
        f'asm volatile("{op} {{{asm_operands(0, 8)}}}, [%8], %9;" : {outs} : '
        f'"l"({address}), "r"({stride}));'
    )


def wmma_mma(acc: Sequence[str], a: Sequence[str], b: Sequence[str]) -> str:
    """``acc += A * B`` on 16 x 16 x 16 fragments, f32 accumulators."""
    return asm_mma(_MMA, acc, a, b)


def wmma_store(acc: Sequence[str], address: str, stride: int) -> str:
    """The f32 accumulator fragment into ``__local`` memory, row-major."""
    op = "wmma.store.d.sync.aligned.row.m16n16k16.shared.f32"
    ins = ", ".join(f'"f"({r})' for r in acc)
    return (
        f'asm volatile("{op} [%0], {{{asm_operands(1, 8)}}}, %9;" : : "l"({address}), {ins}, '
        f'"r"({stride}) : "memory");'
    )


def _emit(t: MatrixTiles, name: str) -> str:
    """One warp per tile: per stage ``wmma.load.a`` and ``wmma.load.b`` of
    the 16 x 16 tiles at their one row stride, one ``wmma.mma``; the
    accumulator fragment (whose lane layout PTX leaves opaque) goes through
    ``wmma.store`` into a row-major ``__local`` float tile, then to C."""
    acc = [f"acc{q}" for q in range(8)]
    a = [f"a{q}" for q in range(8)]
    b = [f"b{q}" for q in range(8)]
    strides = {}
    for buffer in (t.a, t.b):
        first, second = int(t.local(buffer, 0, 0)), int(t.local(buffer, 1, 0))
        strides[buffer] = second - first
    stages = [
        f"unsigned int {', '.join(a)}, {', '.join(b)};",
        f"const ulong a_tile = (ulong){t.pointer(t.a, 0, 0)};  /* a __local (shared) address */",
        f"const ulong b_tile = (ulong){t.pointer(t.b, 0, 0)};",
        wmma_load("a", a, "a_tile", strides[t.a]),
        wmma_load("b", b, "b_tile", strides[t.b]),
        wmma_mma(acc, a, b),
    ]
    init = "float " + ", ".join(f"{r} = 0.0f" for r in acc) + ";"
    stores = [
        f"__local float c_tile[{MATRIX_TILE * MATRIX_TILE}] __attribute__((aligned(32)));",
        wmma_store(acc, "(ulong)c_tile", MATRIX_TILE),
        BARRIER,
        *t.each_element([t.store(t.i0 + t.row, t.j0 + t.col, "c_tile[e]")]),
    ]
    return t.kernel(name, WARP_ATTRIBUTES, init, stages, stores)


# wmma.load.{a,b}.sync.aligned.row.m16n16k16.shared.f16 [ptr], stride
NV_WMMA = nvidia_intrinsic(
    "nv_wmma",
    _MMA,
    (16, 16, 16),
    (FragmentLoad(16, 16, 16), FragmentLoad(16, 16, 16)),
    _emit,
    stride_alignment=32,  # load_matrix_sync's 256-bit aligned pointer
)
"""``wmma.mma.sync m16n16k16`` on fragments that ``wmma.load`` reads from
one pointer and one constant row stride per tile."""
