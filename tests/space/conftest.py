"""Shared workloads and devices of the space tests (hand-written, no device needed)."""

from __future__ import annotations

import pytest

from laytune.device_info import DeviceInfo
from laytune.layout import Var
from laytune.space import Axis, Buffer, WorkloadSpec


def make_device(**overrides: object) -> DeviceInfo:
    values: dict[str, object] = {
        "platform_name": "Hand",
        "device_name": "Written GPU",
        "device_type": "GPU",
        "local_mem_size": 48 * 1024,
        "max_work_group_size": 256,
        "max_work_item_sizes": (256, 256, 64),
        "image_support": True,
        "image2d_max_width": 16384,
        "image2d_max_height": 16384,
        "extensions": ("cl_khr_fp16",),
    }
    values.update(overrides)
    return DeviceInfo(**values)  # type: ignore[arg-type]


def make_matmul(m: int = 32, n: int = 32, k: int = 32, tiles: bool = True) -> WorkloadSpec:
    i, j, r = Var(0), Var(1), Var(2)
    return WorkloadSpec(
        "matmul",
        (Axis("i", m), Axis("j", n), Axis("k", k, "reduce")),
        (
            Buffer("A", (m, k), indices=(i, r)),
            Buffer("B", (k, n), indices=(r, j)),
            Buffer("C", (m, n), role="output", indices=(i, j)),
        ),
        "sum",
        {"A": (16, 16), "B": (16, 16)} if tiles else {},
    )


def make_conv2d(c: int = 64, k: int = 64, hw: int = 56) -> WorkloadSpec:
    n, ko, oh, ow, ci, kh, kw = (Var(x) for x in range(7))
    return WorkloadSpec(
        "conv2d",
        (
            Axis("n", 1),
            Axis("k", k),
            Axis("oh", hw),
            Axis("ow", hw),
            Axis("c", c, "reduce"),
            Axis("kh", 3, "reduce"),
            Axis("kw", 3, "reduce"),
        ),
        (
            Buffer("input", (1, c, hw + 2, hw + 2), indices=(n, ci, oh + kh, ow + kw)),
            Buffer("weight", (k, c, 3, 3), indices=(ko, ci, kh, kw)),
            Buffer("output", (1, k, hw, hw), role="output", indices=(n, ko, oh, ow)),
        ),
        "sum",
    )


def make_add(shape: tuple[int, ...] = (8, 16)) -> WorkloadSpec:
    idx = tuple(Var(k) for k in range(len(shape)))
    axes = tuple(Axis(f"x{k}", s) for k, s in enumerate(shape))
    return WorkloadSpec(
        "add",
        axes,
        (
            Buffer("x", shape, indices=idx),
            Buffer("y", shape, indices=idx),
            Buffer("z", shape, role="output", indices=idx),
        ),
        None,
    )


@pytest.fixture
def device() -> DeviceInfo:
    return make_device()
