"""The matrix intrinsics: one :class:`MatrixIntrinsic` per instruction,
each in its own module with the emitter of its kernel, registered in
:data:`MATRIX_INTRINSICS`.

It lives outside the pipeline stages, as :mod:`laytune.dtypes` does,
because two stages read one descriptor: the search space offers the
``matrix`` knob's values, checks the device capability and judges the
fragment loads of local tile layouts (``MatrixTileLoad``), and
``laytune.codegen`` hands each intrinsic's ``emit`` the staged tiles
(:class:`MatrixTiles`) to write its kernel. Nothing here imports a stage.

Adding an intrinsic is one module here, holding its descriptor and its
emitter, named in :data:`MATRIX_INTRINSICS`. Each is named once, by the
value of the ``matrix`` knob that selects it; ``intel_mad``, the name
``MatrixTileLoad`` gave Intel's instruction before, is read as
``intel_dpas`` (:func:`matrix_intrinsic`), so a constraint written with it
still loads.

The inline PTX statements come from :func:`ldmatrix_x4`,
:func:`mma_m16n8k16` and the ``wmma_*`` functions, one place, so that a
test can compile the very statements with ``nvcc`` for ``sm_80``.
"""

from __future__ import annotations

from laytune.intrinsics._intrinsic import (
    BARRIER,
    MATRIX_TILE,
    OPERANDS,
    FragmentLoad,
    MatrixIntrinsic,
    MatrixTiles,
)
from laytune.intrinsics._nv_mma import ldmatrix_x4, mma_m16n8k16
from laytune.intrinsics._nv_wmma import wmma_load, wmma_mma, wmma_store
from laytune.intrinsics._registry import MATRIX_INTRINSICS, matrix_intrinsic

__all__ = [
    "BARRIER",
    "MATRIX_INTRINSICS",
    "MATRIX_TILE",
    "OPERANDS",
    "FragmentLoad",
    "MatrixIntrinsic",
    "MatrixTiles",
    "ldmatrix_x4",
    "matrix_intrinsic",
    "mma_m16n8k16",
    "wmma_load",
    "wmma_mma",
    "wmma_store",
]
