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

What differs between variants (the fragments, the multiplies, the stores)
is each intrinsic's own ``emit`` in :mod:`laytune.intrinsics`, one module
per intrinsic beside its descriptor; this module builds what they share,
the :class:`~laytune.intrinsics.MatrixTiles` they write against.
"""

from __future__ import annotations

from laytune.codegen._emit import Scope, ctype_of
from laytune.codegen._kernel import _comments, _params
from laytune.codegen._loads import buffer_accesses
from laytune.codegen._nest import Nest
from laytune.codegen._program import ArgRef, Launch
from laytune.codegen._source import indent
from laytune.codegen._stage import local_accesses
from laytune.dtypes import dtype_of
from laytune.intrinsics import BARRIER, MATRIX_INTRINSICS, MATRIX_TILE, MatrixIntrinsic
from laytune.layout import Const, Expr, Var
from laytune.space import matrix_operands

__all__ = ["matrix_kernel"]

_T = MATRIX_TILE


class _Tiles:
    """The :class:`~laytune.intrinsics.MatrixTiles` of one nest: the scope,
    the lane, the tile origins and the buffers' accesses, for ``intrinsic``."""

    def __init__(self, nest: Nest, intrinsic: MatrixIntrinsic) -> None:
        self.nest = nest
        self.lanes = intrinsic.lanes
        self.lane_id = intrinsic.lane_id
        self.storage = intrinsic.storage_only  # half only through vload_half / vstore_half
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
        # the index expressions the emitters compute with; the scope names them
        self.lane = Var(s.builtin("lane", 0, self.lanes - 1).index)
        self.i0 = Var(s.builtin("i0", 0, self.m - _T).index)
        self.j0 = Var(s.builtin("j0", 0, self.n - _T).index)
        self.k0 = Var(s.builtin("k0", 0, self.k - _T).index)
        self.row = Var(s.builtin("r", 0, _T - 1).index)
        self.col = Var(s.builtin("c", 0, _T - 1).index)
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
        dtype = dtype_of(self.nest.workload.dtype)
        ctype = dtype.storage_ctype if self.storage else dtype.ctype
        for buffer in (self.a, self.b):
            acc = self.tiles[buffer]
            lines.append(
                f"__local {ctype} {acc.c_name}[{acc.layout.physical_size}] "
                "__attribute__((aligned(32)));"
            )
        return lines

    def each_element(self, body: list[str]) -> list[str]:
        return [
            f"for (int e = lane; e < {_T * _T}; e += {self.lanes}) {{",
            f"    const int r = e / {_T};",
            f"    const int c = e % {_T};",
            *indent(body),
            "}",
        ]

    def copy(self) -> list[str]:
        """Every lane copies its share of both tiles, element by element."""
        r, c, i0, j0, k0 = self.row, self.col, self.i0, self.j0, self.k0
        a_store = self._copy_one(self.a, [i0 + r, k0 + c], [r, c])
        b_store = self._copy_one(self.b, [k0 + r, j0 + c], [r, c])
        return self.each_element([a_store, b_store])

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
        return out.store([i, j], value, self.scope)  # rounded as it is stored

    def kernel(
        self, name: str, attributes: str, init: str, stages: list[str], stores: list[str]
    ) -> str:
        ctype = ctype_of(self.nest.workload.dtype)
        loop = [
            f"for (int k0 = 0; k0 < {self.k}; k0 += {_T}) {{  /* stage: {_T} values of k */",
            *indent([*self.copy(), BARRIER, *stages, BARRIER]),
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


def matrix_kernel(nest: Nest, name: str) -> tuple[str, Launch]:
    """The matrix kernel of ``nest.knobs["matrix"]`` and its launch."""
    intrinsic = MATRIX_INTRINSICS[nest.knobs["matrix"]]
    t = _Tiles(nest, intrinsic)
    return intrinsic.emit(t, name), t.launch(name)
