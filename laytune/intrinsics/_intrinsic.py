"""What every matrix intrinsic is: :class:`MatrixIntrinsic`, the fragment
loads it accepts, and :class:`MatrixTiles`, what its emitter reads of the
staged tiles that ``laytune.codegen`` passes in."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from laytune.device_info import DeviceInfo
from laytune.exceptions import LayoutError

if TYPE_CHECKING:
    from laytune.layout import Expr

__all__ = [
    "BARRIER",
    "MATRIX_TILE",
    "OPERANDS",
    "FragmentLoad",
    "MatrixIntrinsic",
    "MatrixTiles",
]

OPERANDS = ("a", "b")
"""A matrix product's operands: the left (M x K) and the right (K x N) matrix."""

MATRIX_TILE = 16
"""The staged tiles' extent the matrix kernels take: 16 x 16 tiles of A and
B, one 16 x 16 tile of C per work-group, a K step of 16."""

BARRIER = "barrier(CLK_LOCAL_MEM_FENCE);"
"""The work-group barrier around the uses of the ``__local`` tiles."""


class MatrixTiles(Protocol):
    """What an emitter reads of one matrix kernel: the operands' staged
    tiles in their candidate layouts, C in its global layout, and the
    kernel's frame. ``laytune.codegen`` builds it from a loop nest; an
    emitter writes only the instruction's loads, multiplies and stores.

    ``a`` and ``b``: the buffer names of the left and right operands.
    ``lane``, ``i0``, ``j0``: the work-item's lane and the origin of the
    work-group's 16 x 16 tile of C; ``row`` and ``col``: the element that
    :meth:`each_element` visits. All five are index expressions.
    """

    a: str
    b: str
    lane: Expr
    i0: Expr
    j0: Expr
    row: Expr
    col: Expr

    def local(self, buffer: str, row: Expr | int, col: Expr | int) -> str:
        """The C offset of element (row, col) in ``buffer``'s local tile."""
        ...

    def pointer(self, buffer: str, row: Expr | int, col: Expr | int, ctype: str = "") -> str:
        """A ``__local`` pointer to element (row, col) of ``buffer``'s tile,
        cast to ``__local const ctype*`` when ``ctype`` is given."""
        ...

    def store(self, i: Expr, j: Expr, value: str) -> str:
        """The statement storing the float ``value`` as element (i, j) of C."""
        ...

    def each_element(self, body: list[str]) -> list[str]:
        """A loop in which the lanes share a 16 x 16 tile: each runs
        ``body`` for its elements ``e``, at :attr:`row` ``e / 16`` and
        :attr:`col` ``e % 16``."""
        ...

    def kernel(
        self, name: str, attributes: str, init: str, stages: list[str], stores: list[str]
    ) -> str:
        """The kernel ``name``: ``init`` (the accumulators) after the
        prologue, ``stages`` once per 16 values of k between the tiles'
        copy and a barrier, then ``stores``."""
        ...


@dataclass(frozen=True)
class FragmentLoad:
    """How an intrinsic loads one operand's fragment from a ``__local`` tile:
    ``rows`` row pointers, each at a contiguous run of ``row_elements``
    elements whose start is aligned to ``alignment_bytes``."""

    rows: int
    row_elements: int
    alignment_bytes: int


@dataclass(frozen=True)
class MatrixIntrinsic:
    """One matrix instruction that multiplies staged 16 x 16 tiles.

    ``name``: the value of the ``matrix`` knob (and of ``MatrixTileLoad``'s
    ``intrinsic``). ``lacks``: why a device cannot run it (``""``: it can;
    None: the device is not of the kind the instruction is for, whose
    condition ``requires`` names). ``shape``: (M, N, K) of one instruction.
    ``lanes``: work-items per work-group of its kernel (a sub-group or a
    warp), ``lane_id`` the C expression of a work-item's lane. ``loads``:
    the fragment loads of operands ``"a"`` and ``"b"`` (:meth:`load`).
    ``emit``: writes the kernel, given the tiles and the kernel's name.
    ``stride_alignment``: 0 where each fragment row has its own pointer;
    else the load takes one pointer and one constant row stride per 16 x 16
    fragment, the first row aligned to this many bytes. ``dtypes``: the
    input dtypes it multiplies (fp32 accumulation). ``storage_only``: its
    kernel computes nothing in the input dtype (it moves half as storage),
    so it needs no ``cl_khr_fp16``. ``aliases``: older names read as this one.
    """

    name: str
    instruction: str
    requires: str
    lacks: Callable[[DeviceInfo], str | None]
    shape: tuple[int, int, int]
    lanes: int
    lane_id: str
    loads: tuple[FragmentLoad, FragmentLoad]
    emit: Callable[[MatrixTiles, str], str]
    stride_alignment: int = 0
    dtypes: tuple[str, ...] = ("float16",)
    storage_only: bool = False
    aliases: tuple[str, ...] = ()

    def load(self, operand: str) -> FragmentLoad:
        """The fragment load of ``operand``: ``"a"`` (M x K rows of the left
        matrix) or ``"b"`` (K x N rows of the right one)."""
        if operand not in OPERANDS:
            raise LayoutError(f"matrix operand {operand!r} is not 'a' or 'b'")
        return self.loads[OPERANDS.index(operand)]
