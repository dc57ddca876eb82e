"""Emitting a matrix kernel: the staged tiles multiplied by a matrix instruction.

A candidate with ``matrix != "none"`` (see :mod:`laytune.space._matrix`)
lowers here instead of the fma nest of :mod:`._kernel`; the rest of the
pipeline is shared: the nest's buffer accesses (global layouts, images), the
local tiles' layouts and the kernel parameters. The kernel, top to bottom::

    prologue        lane, the 16 x 16 tile of C this work-group computes
    __local tiles   A.local, B.local in their candidate layouts
    stage loop      per 16 values of k:
      copy          every lane copies 256 / lanes elements of each tile
      barrier
      fragments     the instruction's loads from the tiles (one pointer per
                    fragment row: ldmatrix, block reads; or one pointer and a
                    stride: wmma.load), then the multiply-accumulate
      barrier
    store           each lane's accumulators into C (float32 -> half)

The NVIDIA kernels move half only as storage: ``ushort`` tiles,
``vload_half``/``vstore_half`` in the copies and the store, the instructions'
own loads from the tiles, so they build without ``cl_khr_fp16`` (NVIDIA's
OpenCL platform has none, and refuses a variable of type half). The
Intel kernel needs the extension anyway and assigns halves.

Each variant's fragment load is exactly the one ``MatrixTileLoad`` judged:
the row pointers are the local layout's offsets of the rows, so a layout
the space accepted (pad 8 every 2 rows, say) is what the kernel addresses.

The inline PTX statements come from :func:`ldmatrix_x4`, :func:`mma_m16n8k16`
and the ``wmma_*`` functions, one place, so that a test can compile the very
statements with ``nvcc`` for ``sm_80``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from laytune.codegen._emit import Scope, ctype_of
from laytune.codegen._kernel import _comments, _params
from laytune.codegen._loads import buffer_accesses
from laytune.codegen._nest import Nest
from laytune.codegen._program import ArgRef, Launch
from laytune.codegen._source import indent
from laytune.codegen._stage import local_accesses
from laytune.layout import Const, Expr, Var
from laytune.space import MATRIX_INTRINSICS, MATRIX_TILE, matrix_operands

__all__ = [
    "MATRIX_EMITTERS",
    "ldmatrix_x4",
    "matrix_kernel",
    "mma_m16n8k16",
    "wmma_load",
    "wmma_mma",
    "wmma_store",
]

_T = MATRIX_TILE
_BARRIER = "barrier(CLK_LOCAL_MEM_FENCE);"


# -- the instructions ------------------------------------------------------------


def _operands(first: int, count: int) -> str:
    return ", ".join(f"%{first + n}" for n in range(count))


def ldmatrix_x4(regs: Sequence[str], address: str, trans: bool) -> str:
    """Four 8 x 8 b16 matrices from ``__local`` memory: lane ``l`` gives the
    address of row ``l % 8`` of matrix ``l // 8``; ``regs[m]`` receives the
    lane's two elements of matrix ``m`` (transposed with ``trans``)."""
    op = f"ldmatrix.sync.aligned.m8n8.x4{'.trans' if trans else ''}.shared.b16"
    outs = ", ".join(f'"=r"({r})' for r in regs)
    return f'asm volatile("{op} {{{_operands(0, 4)}}}, [%4];" : {outs} : "l"({address}));'


def mma_m16n8k16(acc: Sequence[str], a: Sequence[str], b: Sequence[str]) -> str:
    """``acc += A (16 x 16, row) * B (16 x 8, col)``: f16 inputs, f32 accumulators."""
    op = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
    text = (
        f"{op} {{{_operands(0, 4)}}}, {{{_operands(4, 4)}}}, {{{_operands(8, 2)}}}, "
        f"{{{_operands(0, 4)}}};"
    )
    outs = ", ".join(f'"+f"({r})' for r in acc)
    ins = ", ".join(f'"r"({r})' for r in (*a, *b))
    return f'asm volatile("{text}" : {outs} : {ins});'


def wmma_load(matrix: str, regs: Sequence[str], address: str, stride: int) -> str:
    """A 16 x 16 f16 fragment of ``matrix`` ("a" or "b", row-major) at
    ``address`` with rows ``stride`` elements apart."""
    op = f"wmma.load.{matrix}.sync.aligned.row.m16n16k16.shared.f16"
    outs = ", ".join(f'"=r"({r})' for r in regs)
    return (
        f'asm volatile("{op} {{{_operands(0, 8)}}}, [%8], %9;" : {outs} : '
        f'"l"({address}), "r"({stride}));'
    )


def wmma_mma(acc: Sequence[str], a: Sequence[str], b: Sequence[str]) -> str:
    """``acc += A * B`` on 16 x 16 x 16 fragments, f32 accumulators."""
    op = "wmma.mma.sync.aligned.row.row.m16n16k16.f32.f32"
    text = (
        f"{op} {{{_operands(0, 8)}}}, {{{_operands(8, 8)}}}, {{{_operands(16, 8)}}}, "
        f"{{{_operands(0, 8)}}};"
    )
    outs = ", ".join(f'"+f"({r})' for r in acc)
    ins = ", ".join(f'"r"({r})' for r in (*a, *b))
    return f'asm volatile("{text}" : {outs} : {ins});'


def wmma_store(acc: Sequence[str], address: str, stride: int) -> str:
    """The f32 accumulator fragment into ``__local`` memory, row-major."""
    op = "wmma.store.d.sync.aligned.row.m16n16k16.shared.f32"
    ins = ", ".join(f'"f"({r})' for r in acc)
    return (
        f'asm volatile("{op} [%0], {{{_operands(1, 8)}}}, %9;" : : "l"({address}), {ins}, '
        f'"r"({stride}) : "memory");'
    )


# -- the kernel ------------------------------------------------------------------


class _Tiles:
    """What every variant reads: scope, lane, tile origins, accesses."""

    def __init__(self, nest: Nest, lanes: int, lane_id: str, storage: bool) -> None:
        self.nest = nest
        self.lanes = lanes
        self.lane_id = lane_id
        self.storage = storage  # half only through vload_half / vstore_half
        w = nest.workload
        (self.a, self.b), why = matrix_operands(w)
        if why:
            raise ValueError(f"matrix kernel of {w.name!r}: {why}")
        self.c = next(d.name for d in w.buffers if d.role == "output")
        spatial = [k for k, ax in enumerate(w.axes) if ax.kind == "spatial"]
        reduce = next(k for k, ax in enumerate(w.axes) if ax.kind == "reduce")
        self.m, self.n = (w.axes[k].extent for k in spatial)
        self.k = w.axes[reduce].extent
        s = self.scope = Scope()
        self.lane = s.builtin("lane", 0, lanes - 1)
        self.i0 = s.builtin("i0", 0, self.m - _T)
        self.j0 = s.builtin("j0", 0, self.n - _T)
        self.k0 = s.builtin("k0", 0, self.k - _T)
        self.r = s.builtin("r", 0, _T - 1)
        self.col = s.builtin("c", 0, _T - 1)
        self.globals = buffer_accesses(nest)
        self.tiles = local_accesses(nest)

    def local(self, buffer: str, row: Expr | int, col: Expr | int) -> str:
        acc = self.tiles[buffer]
        row = Const(row) if isinstance(row, int) else row
        col = Const(col) if isinstance(col, int) else col
        return self.scope.c(acc.flat_offset([row, col]))

    def pointer(self, buffer: str, row: Expr | int, col: Expr | int, ctype: str = "") -> str:
        base = f"{self.tiles[buffer].c_name} + {self.local(buffer, row, col)}"
        return f"(__local const {ctype}*)({base})" if ctype else f"({base})"

    def prologue(self) -> list[str]:
        lines = [
            f"const int lane = {self.lane_id};",
            f"const int i0 = get_group_id(1) * {_T};  /* this work-group's 16 x 16 tile of C */",
            f"const int j0 = get_group_id(0) * {_T};",
        ]
        # without cl_khr_fp16 no variable may have a half type: the tiles hold ushort bits
        ctype = "ushort" if self.storage else "half"
        for buffer in (self.a, self.b):
            acc = self.tiles[buffer]
            lines.append(
                f"__local {ctype} {acc.c_name}[{acc.layout.physical_size}] "
                "__attribute__((aligned(32)));"
            )
        return lines

    def copy(self) -> list[str]:
        """Every lane copies its share of both tiles, element by element."""
        r, c = Var(self.r.index), Var(self.col.index)
        i0, j0, k0 = (Var(v.index) for v in (self.i0, self.j0, self.k0))
        a_store = self._copy_one(self.a, [i0 + r, k0 + c], [r, c])
        b_store = self._copy_one(self.b, [k0 + r, j0 + c], [r, c])
        return [
            f"for (int e = lane; e < {_T * _T}; e += {self.lanes}) {{",
            f"    const int r = e / {_T};",
            f"    const int c = e % {_T};",
            f"    {a_store}",
            f"    {b_store}",
            "}",
        ]

    def _copy_one(self, buffer: str, at: list[Expr], to: list[Expr]) -> str:
        s, glob, tile = self.scope, self.globals[buffer], self.tiles[buffer]
        if not self.storage:
            return tile.store(to, glob.load(at, s), s)
        src = f"vload_half({s.c(glob.flat_offset(at))}, {glob.c_name})"
        at = s.c(tile.flat_offset(to))
        return f"vstore_half({src}, {at}, (__local half*){tile.c_name});"

    def store(self, i: Expr, j: Expr, value: str) -> str:
        out = self.globals[self.c]
        if self.storage:  # round to nearest even, as (half) does
            offset = self.scope.c(out.flat_offset([i, j]))
            return f"vstore_half_rte({value}, {offset}, {out.c_name});"
        return out.store([i, j], f"(half)({value})", self.scope)

    def kernel(
        self, name: str, attributes: str, init: str, stages: list[str], stores: list[str]
    ) -> str:
        ctype = ctype_of(self.nest.workload.dtype)
        loop = [
            f"for (int k0 = 0; k0 < {self.k}; k0 += {_T}) {{  /* stage: {_T} values of k */",
            *indent([*self.copy(), _BARRIER, *stages, _BARRIER]),
            "}",
        ]
        lines = _comments(self.nest, {b: self.tiles[b] for b in (self.a, self.b)})
        lines.append(f"__kernel {attributes}void {name}({_params(self.nest, ctype)}) {{")
        lines += indent([*self.prologue(), init, *loop, *stores])
        lines.append("}")
        return "\n".join(lines)

    def launch(self, name: str) -> Launch:
        args = tuple(ArgRef(d.name, "physical") for d in self.nest.workload.buffers)
        groups = (self.n // _T * self.lanes, self.m // _T)
        return Launch(name, args, groups, (self.lanes, 1))


def _nv_mma(t: _Tiles, name: str) -> str:
    """One warp per tile: per stage one ``ldmatrix.x4`` of A (the 16 x 16
    fragment), one ``ldmatrix.x4.trans`` of B (two 16 x 8 fragments), two
    ``mma.sync.m16n8k16``. Lane ``l`` points at row ``l % 16``, column
    ``(l / 16) * 8`` of each tile: any row placement the layout gives."""
    lane = Var(t.lane.index)
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
    i0, j0 = Var(t.i0.index), Var(t.j0.index)
    stores = ["/* accumulators: rows lane / 4 (+ 8), columns 2 * (lane % 4) (+ 1) */"]
    for n in range(2):
        for q in range(4):
            i = i0 + lane // 4 + (8 if q >= 2 else 0)
            j = j0 + n * 8 + (lane % 4) * 2 + q % 2
            stores.append(t.store(i, j, acc[n][q]))
    attributes = "__attribute__((reqd_work_group_size(32, 1, 1))) "
    return t.kernel(name, attributes, init, stages, stores)


def _nv_wmma(t: _Tiles, name: str) -> str:
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
    i0, j0 = Var(t.i0.index), Var(t.j0.index)
    r, c = Var(t.r.index), Var(t.col.index)
    stores = [
        f"__local float c_tile[{_T * _T}] __attribute__((aligned(32)));",
        wmma_store(acc, "(ulong)c_tile", _T),
        _BARRIER,
        f"for (int e = lane; e < {_T * _T}; e += 32) {{",
        f"    const int r = e / {_T};",
        f"    const int c = e % {_T};",
        f"    {t.store(i0 + r, j0 + c, 'c_tile[e]')}",
        "}",
    ]
    attributes = "__attribute__((reqd_work_group_size(32, 1, 1))) "
    return t.kernel(name, attributes, init, stages, stores)


def _intel_dpas(t: _Tiles, name: str) -> str:
    """One sub-group of 8 per tile: per stage and per 8 rows of A an
    ``int8`` of block reads (row ``m``: lane ``l`` holds k = 2l, 2l + 1),
    per 8 columns of B an ``int8`` of pairs of rows read with
    ``intel_sub_group_block_read_us`` (lane ``l`` holds column ``l``), and
    four ``intel_sub_group_f16_f16_matrix_mad_k16``."""
    acc = [[f"acc{m}{n}" for n in range(2)] for m in range(2)]
    stages = []
    for m in range(2):
        rows = [
            f"as_int(intel_sub_group_block_read({t.pointer(t.a, m * 8 + q, 0, 'uint')}))"
            for q in range(8)
        ]
        stages.append(f"const int8 a{m} = (int8)({', '.join(rows)});")
    for n in range(2):
        pairs = []
        for q in range(8):
            lo, hi = (
                f"intel_sub_group_block_read_us({t.pointer(t.b, 2 * q + h, n * 8, 'ushort')})"
                for h in range(2)
            )
            pairs.append(f"as_int((ushort2)({lo}, {hi}))")
        stages.append(f"const int8 b{n} = (int8)({', '.join(pairs)});")
    for m in range(2):
        for n in range(2):
            stages.append(
                f"{acc[m][n]} = intel_sub_group_f16_f16_matrix_mad_k16(a{m}, b{n}, {acc[m][n]});"
            )
    init = "float8 " + ", ".join(f"{r} = 0.0f" for row in acc for r in row) + ";"
    i0, j0, lane = Var(t.i0.index), Var(t.j0.index), Var(t.lane.index)
    stores = ["/* component q of acc<m><n>: row 8m + q, column 8n + lane */"]
    for m in range(2):
        for n in range(2):
            for q in range(8):
                stores.append(t.store(i0 + m * 8 + q, j0 + n * 8 + lane, f"{acc[m][n]}.s{q}"))
    attributes = (
        "__attribute__((intel_reqd_sub_group_size(8))) "
        "__attribute__((reqd_work_group_size(8, 1, 1))) "
    )
    return t.kernel(name, attributes, init, stages, stores)


MATRIX_EMITTERS: dict[str, Callable[[_Tiles, str], str]] = {
    "intel_dpas": _intel_dpas,
    "nv_wmma": _nv_wmma,
    "nv_mma": _nv_mma,
}
"""The kernel emitter of each intrinsic of ``laytune.space.MATRIX_INTRINSICS``
(whose descriptor gives the lanes, the lane id and whether half is storage
only); the emitters need the codegen floor, which the space cannot import."""


def matrix_kernel(nest: Nest, name: str) -> tuple[str, Launch]:
    """The matrix kernel of ``nest.knobs["matrix"]`` and its launch."""
    intrinsic = MATRIX_INTRINSICS[nest.knobs["matrix"]]
    t = _Tiles(nest, intrinsic.lanes, intrinsic.lane_id, intrinsic.storage_only)
    return MATRIX_EMITTERS[intrinsic.name](t, name), t.launch(name)
