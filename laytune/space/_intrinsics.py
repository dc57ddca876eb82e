"""The matrix intrinsics: one :class:`MatrixIntrinsic` per instruction in
:data:`MATRIX_INTRINSICS`, read by the ``matrix`` knob's values, the device
capability, the fragment loads ``MatrixTileLoad`` judges and the kernel
emitters (``laytune.codegen``, one emitter per name here).

Each is named once, by the value of the ``matrix`` knob that selects it.
``intel_mad``, the name ``MatrixTileLoad`` gave Intel's instruction before,
is read as ``intel_dpas`` (:func:`matrix_intrinsic`), so a constraint
written with it still loads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from laytune.device_info import DeviceInfo
from laytune.exceptions import LayoutError

__all__ = [
    "MATRIX_INTRINSICS",
    "OPERANDS",
    "FragmentLoad",
    "MatrixIntrinsic",
    "matrix_intrinsic",
]


OPERANDS = ("a", "b")
"""A matrix product's operands: the left (M x K) and the right (K x N) matrix."""


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
    the fragment loads of operands ``"a"`` and ``"b"`` (:meth:`load`). ``stride_alignment``:
    0 where each fragment row has its own pointer; else the load takes one
    pointer and one constant row stride per 16 x 16 fragment, the first row
    aligned to this many bytes. ``dtypes``: the input dtypes it multiplies
    (fp32 accumulation). ``storage_only``: its kernel computes nothing in
    the input dtype (it moves half as storage), so it needs no
    ``cl_khr_fp16``. ``aliases``: older names read as this one.
    """

    name: str
    instruction: str
    requires: str
    lacks: Callable[[DeviceInfo], str | None]
    shape: tuple[int, int, int]
    lanes: int
    lane_id: str
    loads: tuple[FragmentLoad, FragmentLoad]
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


INTEL_MATRIX_EXTENSIONS = (
    "cl_intel_subgroup_matrix_multiply_accumulate",
    "cl_intel_subgroups",
    "cl_intel_subgroups_short",
    "cl_intel_subgroup_local_block_io",
    "cl_khr_fp16",
)
"""What the Intel kernel uses: the multiply, sub-group block reads of
``__local`` halves, and half itself."""

INTEL_SUB_GROUP = 8
"""The sub-group size of ``intel_sub_group_f16_f16_matrix_mad_k16`` with an
``int8`` A operand (M = 8, N = 8, K = 16), as on DG2."""


def _intel_lacks(device: DeviceInfo) -> str | None:
    if device.is_nvidia or not device.has_extension(INTEL_MATRIX_EXTENSIONS[0]):
        return None
    missing = [e for e in INTEL_MATRIX_EXTENSIONS[1:] if not device.has_extension(e)]
    if missing:
        return f"{device.name} lacks {', '.join(missing)}"
    if INTEL_SUB_GROUP not in device.sub_group_sizes:
        return (
            f"{device.name} has sub-group sizes {list(device.sub_group_sizes)}; the int8 form "
            f"of intel_sub_group_f16_f16_matrix_mad_k16 runs in sub-groups of {INTEL_SUB_GROUP}"
        )
    return ""


def _nvidia_lacks(device: DeviceInfo) -> str | None:
    if not device.is_nvidia:
        return None
    cc = device.compute_capability
    if cc is None:
        return f"{device.name} reports no compute capability (cl_nv_device_attribute_query)"
    if cc < (8, 0):
        return (
            f"{device.name} has compute capability {cc[0]}.{cc[1]}; mma.sync m16n8k16 with "
            f"ldmatrix needs 8.0"
        )
    return ""


_NVIDIA = "an NVIDIA compute capability >= 8.0"
_WARP_LANE = "get_local_id(0)"


def _registry(*intrinsics: MatrixIntrinsic) -> Mapping[str, MatrixIntrinsic]:
    return MappingProxyType({i.name: i for i in intrinsics})


MATRIX_INTRINSICS: Mapping[str, MatrixIntrinsic] = _registry(
    MatrixIntrinsic(
        "intel_dpas",
        # block reads of each fragment row (intel_sub_group_block_read, _us for B)
        instruction="intel_sub_group_f16_f16_matrix_mad_k16",
        requires=INTEL_MATRIX_EXTENSIONS[0],
        lacks=_intel_lacks,
        shape=(8, 8, 16),
        lanes=INTEL_SUB_GROUP,
        lane_id="get_sub_group_local_id()",
        loads=(
            FragmentLoad(8, 16, 16),  # one block read of 16 halves per row of A
            FragmentLoad(16, 8, 16),  # one block read of 8 halves per row of B
        ),
        aliases=("intel_mad",),
    ),
    MatrixIntrinsic(
        "nv_wmma",
        # wmma.load.{a,b}.sync.aligned.row.m16n16k16.shared.f16 [ptr], stride
        instruction="wmma.mma.sync.aligned.row.row.m16n16k16.f32.f32",
        requires=_NVIDIA,
        lacks=_nvidia_lacks,
        shape=(16, 16, 16),
        lanes=32,
        lane_id=_WARP_LANE,
        loads=(FragmentLoad(16, 16, 16), FragmentLoad(16, 16, 16)),
        stride_alignment=32,  # load_matrix_sync's 256-bit aligned pointer
        storage_only=True,
    ),
    MatrixIntrinsic(
        "nv_mma",
        # ldmatrix.sync.aligned.m8n8.x4 (.trans for B): eight 16-byte rows per 8 x 8 matrix
        instruction="mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
        requires=_NVIDIA,
        lacks=_nvidia_lacks,
        shape=(16, 8, 16),
        lanes=32,
        lane_id=_WARP_LANE,
        loads=(FragmentLoad(8, 8, 16), FragmentLoad(8, 8, 16)),
        storage_only=True,
    ),
)
"""Every matrix intrinsic, by name, in the order of the ``matrix`` knob's values."""

_BY_ALIAS = {alias: i for i in MATRIX_INTRINSICS.values() for alias in i.aliases}


def matrix_intrinsic(name: str) -> MatrixIntrinsic:
    """The intrinsic ``name`` (or an older name of it); a :class:`LayoutError`
    naming the known ones otherwise."""
    found = MATRIX_INTRINSICS.get(name) or _BY_ALIAS.get(name)
    if found is None:
        raise LayoutError(f"matrix intrinsic {name!r} is not one of {tuple(MATRIX_INTRINSICS)}")
    return found
