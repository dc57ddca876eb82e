"""Benchmark: building, counting and enumerating search spaces; constraint checks.

Run with ``python -m bench.space_enumerate``. Prints, for a conv2d with
ResNet-sized buffers (input and output (1, 64, 56, 56), weights
(64, 64, 3, 3)) and for a 512 x 512 x 512 matmul: the time to build the
space, its size, the time to count it and to enumerate (all of a space
narrowed to a few families, a prefix of the full one); then the time of each
constraint's check on a 16M-element buffer. Uses a hand-written DeviceInfo,
so no OpenCL device is needed.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

from laytune.device_info import DeviceInfo
from laytune.layout import Var, identity, pad_every, row_xor
from laytune.space import (
    Axis,
    BankConflicts,
    Buffer,
    ContiguousTileCopy,
    Image2DRead,
    LocalMemoryBudget,
    PaddingBudget,
    RowPointerTileLoad,
    SearchSpace,
    SpaceOptions,
    StridedTileCopy,
    VectorAccess,
    WorkloadSpec,
)

DEVICE = DeviceInfo(
    platform_name="Hand-written",
    device_name="GPU-like device",
    device_type="GPU",
    local_mem_size=48 * 1024,
    max_work_group_size=1024,
    max_work_item_sizes=(1024, 1024, 64),
    image_support=True,
    image2d_max_width=16384,
    image2d_max_height=16384,
    extensions=("cl_khr_fp16",),
)

PREFIX = 20_000


def conv2d() -> WorkloadSpec:
    n, k, oh, ow, c, kh, kw = (Var(x) for x in range(7))
    return WorkloadSpec(
        "conv2d",
        (
            Axis("n", 1),
            Axis("k", 64),
            Axis("oh", 56),
            Axis("ow", 56),
            Axis("c", 64, "reduce"),
            Axis("kh", 3, "reduce"),
            Axis("kw", 3, "reduce"),
        ),
        (
            Buffer("input", (1, 64, 56, 56), indices=(n, c, oh + kh, ow + kw)),
            Buffer("weight", (64, 64, 3, 3), indices=(k, c, kh, kw)),
            Buffer("output", (1, 64, 56, 56), role="output", indices=(n, k, oh, ow)),
        ),
        "sum",
    )


def matmul(size: int = 512) -> WorkloadSpec:
    i, j, r = Var(0), Var(1), Var(2)
    return WorkloadSpec(
        "matmul",
        (Axis("i", size), Axis("j", size), Axis("k", size, "reduce")),
        (
            Buffer("A", (size, size), indices=(i, r)),
            Buffer("B", (size, size), indices=(r, j)),
            Buffer("C", (size, size), role="output", indices=(i, j)),
        ),
        "sum",
        {"A": (32, 32), "B": (32, 32)},
    )


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def report_space(label: str, workload: WorkloadSpec, options: SpaceOptions | None = None) -> None:
    space, build = timed(lambda: SearchSpace(workload, DEVICE, options))
    size, count = timed(lambda: len(space))
    if size <= PREFIX:
        listed, enum = timed(lambda: sum(1 for _ in space.enumerate()))
        what = "all"
    else:
        listed, enum = timed(lambda: sum(1 for _ in itertools.islice(space.enumerate(), PREFIX)))
        what = "first"
    _, rej = timed(space.rejections)
    layouts = ", ".join(f"{b} {len(space.layouts(b))}" for b in space.buffers)
    print(f"{label}")
    print(f"  layouts per buffer: {layouts}")
    print(f"  size {size:,}   build {build * 1e3:.0f} ms   count {count * 1e3:.1f} ms")
    print(f"  enumerate {what} {listed:,} candidates: {enum * 1e3:.0f} ms")
    print(f"  rejections report: {rej * 1e3:.0f} ms")


def report_checks() -> None:
    shape = (4096, 4096)  # 16M elements
    plain, t_plain = timed(lambda: identity(shape))
    padded, t_padded = timed(lambda: pad_every(shape, 2, 4))
    swizzled, t_swizzled = timed(lambda: row_xor(shape, 8, chunk=8))
    print(f"constraint checks on a {shape[0]} x {shape[1]} buffer (16M elements)")
    print(
        f"  building the layouts (validation + flat offsets, cached for every check): "
        f"identity {t_plain * 1e3:.0f} ms, pad_every {t_padded * 1e3:.0f} ms, "
        f"row_xor {t_swizzled * 1e3:.0f} ms"
    )
    cases = [
        ("VectorAccess(1, 4)", VectorAccess(1, 4), plain, "float32"),
        ("ContiguousTileCopy(16x16)", ContiguousTileCopy((16, 16)), plain, "float32"),
        ("StridedTileCopy(16x16)", StridedTileCopy((16, 16)), padded, "float32"),
        ("RowPointerTileLoad(8, 16 B)", RowPointerTileLoad(8, row_bytes=16), swizzled, "float16"),
        ("PaddingBudget(0.25)", PaddingBudget(0.25), padded, "float32"),
        ("Image2DRead", Image2DRead(), plain, "float32"),
        ("LocalMemoryBudget", LocalMemoryBudget(), plain, "float32"),
        ("BankConflicts(32-lane column)", BankConflicts.column(32), plain, "float32"),
    ]
    for name, constraint, layout, dtype in cases:
        verdict, t = timed(lambda c=constraint, lay=layout, d=dtype: c.check(lay, shape, d, DEVICE))
        state = "ok" if verdict.ok else "rejected"
        score = f" score {verdict.score:g}" if verdict.score is not None else ""
        print(f"  {name:32s} {t * 1e3:7.0f} ms  {state}{score}  on {layout.describe()}")


def main() -> None:
    report_space("conv2d (1,64,56,56) * (64,64,3,3), default options", conv2d())
    narrow = SpaceOptions(families=("identity", "permute", "block"), block_factors=(4, 8))
    report_space("conv2d, families identity/permute/block", conv2d(), narrow)
    report_space("matmul 512^3, default options", matmul())
    report_space(
        "matmul 512^3, families identity/permute/pad_rows",
        matmul(),
        SpaceOptions(families=("identity", "permute", "pad_rows"), local_families=("identity",)),
    )
    report_checks()


if __name__ == "__main__":
    main()
