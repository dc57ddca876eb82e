"""What the NVIDIA intrinsics share: the device they need, the warp, and
the shape of an inline PTX statement in OpenCL C."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from laytune.device_info import DeviceInfo
from laytune.intrinsics._intrinsic import FragmentLoad, MatrixIntrinsic, MatrixTiles

__all__ = [
    "NVIDIA",
    "WARP",
    "WARP_ATTRIBUTES",
    "WARP_LANE",
    "asm_mma",
    "asm_operands",
    "nvidia_intrinsic",
    "nvidia_lacks",
]

NVIDIA = "an NVIDIA compute capability >= 8.0"
"""What a device needs for ``ldmatrix``, ``mma.sync m16n8k16`` and ``wmma``."""

WARP = 32
WARP_LANE = "get_local_id(0)"
"""A work-item's lane in a warp: the kernels run one warp per work-group."""

WARP_ATTRIBUTES = f"__attribute__((reqd_work_group_size({WARP}, 1, 1))) "


def nvidia_lacks(device: DeviceInfo) -> str | None:
    """Why ``device`` cannot run the NVIDIA intrinsics; None off NVIDIA."""
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


def asm_operands(first: int, count: int) -> str:
    """``%first, ..., %(first + count - 1)``: PTX operands by position."""
    return ", ".join(f"%{first + n}" for n in range(count))


def asm_mma(op: str, acc: Sequence[str], a: Sequence[str], b: Sequence[str]) -> str:
    """``acc += a * b`` by the PTX multiply-accumulate ``op`` on the f32
    accumulator registers ``acc`` and the f16 pairs ``a`` and ``b``."""
    n_acc, n_a, n_b = len(acc), len(a), len(b)
    text = (
        f"{op} {{{asm_operands(0, n_acc)}}}, {{{asm_operands(n_acc, n_a)}}}, "
        f"{{{asm_operands(n_acc + n_a, n_b)}}}, {{{asm_operands(0, n_acc)}}};"
    )
    outs = ", ".join(f'"+f"({r})' for r in acc)
    ins = ", ".join(f'"r"({r})' for r in (*a, *b))
    return f'asm volatile("{text}" : {outs} : {ins});'


def nvidia_intrinsic(
    name: str,
    instruction: str,
    shape: tuple[int, int, int],
    loads: tuple[FragmentLoad, FragmentLoad],
    emit: Callable[[MatrixTiles, str], str],
    **more: Any,
) -> MatrixIntrinsic:
    """An NVIDIA intrinsic: compute capability 8.0, one warp per work-group,
    half moved as storage only (NVIDIA's OpenCL has no ``cl_khr_fp16``)."""
    return MatrixIntrinsic(
        name,
        instruction=instruction,
        requires=NVIDIA,
        lacks=nvidia_lacks,
        shape=shape,
        lanes=WARP,
        lane_id=WARP_LANE,
        loads=loads,
        emit=emit,
        storage_only=True,
        **more,
    )
