"""Shared fixtures of the runners tests: a device, small KernelPrograms, workloads.

The workload classes are sent to worker processes by value (cloudpickle), so
the spawned workers never need to import this conftest module.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import cloudpickle
import numpy as np
import pytest

from laytune.codegen import ArgRef, BufferSpec, KernelProgram, Launch
from laytune.runners import Builder, Device, MeasureConfig, Runner
from laytune.runners._measure import DeviceSession

cloudpickle.register_pickle_by_value(sys.modules[__name__])

N = 1024


@pytest.fixture(scope="session")
def device(laytune_device: Device) -> Device:
    """The device laytune picks by default (``LAYTUNE_DEVICE`` selects another)."""
    return laytune_device


@pytest.fixture(scope="session")
def builder(device: Device) -> Iterator[Builder]:
    with Builder(device, time_limit_s=60.0) as session_builder:
        yield session_builder


FAST = MeasureConfig(warmup=1, repeats=3, time_limit_s=20.0)


@pytest.fixture
def session(device: Device) -> Iterator[DeviceSession]:
    """A measuring session in this process, for :func:`measure_candidate` itself."""
    opened = DeviceSession(device)
    yield opened
    opened.close()


@pytest.fixture(scope="session")
def runner(device: Device) -> Iterator[Runner]:
    with Runner(device, FAST) as session_runner:
        yield session_runner


# -- workloads ----------------------------------------------------------------
@dataclass(frozen=True)
class ScaleWorkload:
    """y = 2 * x on N floats."""

    n: int = N
    tag: str = ""

    @property
    def key(self) -> str:
        return f"scale{self.tag}:{self.n}:float32"

    def make_inputs(self, seed: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        return {"x": rng.standard_normal(self.n).astype(np.float32)}

    def reference(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"y": inputs["x"] * np.float32(2.0)}


@dataclass(frozen=True)
class CountingWorkload(ScaleWorkload):
    """ScaleWorkload that appends a line to ``log_path`` each time inputs are made."""

    log_path: str = ""

    def make_inputs(self, seed: int) -> dict[str, np.ndarray]:
        with open(self.log_path, "a") as log:
            log.write(f"{os.getpid()} {seed}\n")
        return super().make_inputs(seed)


@dataclass(frozen=True)
class ReferenceCountingWorkload(ScaleWorkload):
    """ScaleWorkload that appends a line to ``log_path`` each time its reference is computed."""

    log_path: str = ""

    def reference(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with open(self.log_path, "a") as log:
            log.write(f"{os.getpid()}\n")
        return super().reference(inputs)


@dataclass(frozen=True)
class BlasThreadsWorkload(ScaleWorkload):
    """Its reference is y = 2 * x times the threads numpy's BLAS may use where
    the reference is computed: the scale program matches it only on one."""

    def reference(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from threadpoolctl import threadpool_info

        threads = max(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")
        return {"y": inputs["x"] * np.float32(2.0 * threads)}


@dataclass(frozen=True)
class AbortingWorkload(ScaleWorkload):
    """Its reference calls os.abort(): a deterministic crash of the worker process."""

    def reference(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        os.abort()


@dataclass(frozen=True)
class UnpicklableWorkload(ScaleWorkload):
    """ScaleWorkload holding a lock, which no pickler can send to the worker."""

    lock: Any = field(default_factory=threading.Lock)


@dataclass(frozen=True)
class TransposeWorkload:
    rows: int = 48
    cols: int = 80

    @property
    def key(self) -> str:
        return f"transpose:{self.rows}x{self.cols}:float32"

    def make_inputs(self, seed: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        return {"a": rng.standard_normal((self.rows, self.cols)).astype(np.float32)}

    def reference(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"b": np.ascontiguousarray(inputs["a"].T)}


# -- programs -----------------------------------------------------------------
def _scale_buffers(n: int = N) -> tuple[BufferSpec, ...]:
    return (
        BufferSpec("x", "float32", (n,), (n,), "input"),
        BufferSpec("y", "float32", (n,), (n,), "output"),
    )


_SCALE_ARGS = (ArgRef("x", "physical"), ArgRef("y", "physical"))


def scale_program(name: str = "scale", body: str = "y[i] = 2.0f * x[i];") -> KernelProgram:
    """A one-launch program on ScaleWorkload; ``body`` sees i, x and y."""
    source = (
        "__kernel void scale(__global const float* x, __global float* y) {\n"
        f"  size_t i = get_global_id(0);\n  {body}\n}}\n"
    )
    return KernelProgram(
        name=name,
        source=source,
        buffers=_scale_buffers(),
        compute=(Launch("scale", _SCALE_ARGS, (N,)),),
    )


def wrong_program() -> KernelProgram:
    return scale_program("wrong", "y[i] = 2.0f * x[i] + (i == 7 ? 1.0f : 0.0f);")


def broken_program() -> KernelProgram:
    return scale_program("broken", "y[i] = 2.0f * x[i] + this_does_not_exist;")


def hang_program() -> KernelProgram:
    # The loop condition reads volatile global memory, so the compiler cannot
    # prove it ends or drop it; the value only grows, so it never ends.
    body = (
        "volatile __global float* v = y;\n"
        "  v[i] = 0.0f;\n"
        "  while (v[i] >= 0.0f) { v[i] = v[i] + 1.0f; }"
    )
    return scale_program("hang", body)


def crash_program() -> KernelProgram:
    # A store 2**60 bytes past the buffer: a non-canonical address on x86-64
    # and beyond any user address elsewhere, so it faults (SIGSEGV) on a
    # CPU device and takes the measuring process with it.
    return scale_program("crash", "y[i + ((size_t)1 << 58)] = x[i];")


def two_launch_program() -> KernelProgram:
    """Pack copy, two compute launches (scale then identity), unpack copy."""
    source = """
__kernel void copy(__global const float* src, __global float* dst) {
  size_t i = get_global_id(0); dst[i] = src[i];
}
__kernel void scale(__global const float* x, __global float* y) {
  size_t i = get_global_id(0); y[i] = 2.0f * x[i];
}
__kernel void keep(__global float* y) {
  size_t i = get_global_id(0); y[i] = y[i] * 1.0f;
}
"""
    return KernelProgram(
        name="two_launch",
        source=source,
        buffers=_scale_buffers(),
        pack=(Launch("copy", (ArgRef("x", "logical"), ArgRef("x", "physical")), (N,)),),
        compute=(
            Launch("scale", _SCALE_ARGS, (N,)),
            Launch("keep", (ArgRef("y", "physical"),), (N,)),
        ),
        unpack=(Launch("copy", (ArgRef("y", "physical"), ArgRef("y", "logical")), (N,)),),
    )


def lazy_pack_program() -> KernelProgram:
    """two_launch_program whose pack kernel writes nothing: x's physical storage
    holds whatever the memory held before, and the result is wrong."""
    program = two_launch_program()
    lazy = Launch("lazy_copy", program.pack[0].args, program.pack[0].global_size)
    return KernelProgram(
        name="lazy_pack",
        source=program.source
        + "__kernel void lazy_copy(__global const float* src, __global float* dst) {}\n",
        buffers=program.buffers,
        pack=(lazy,),
        compute=program.compute,
        unpack=program.unpack,
    )


def transpose_program(rows: int = 48, cols: int = 80, tag: str = "") -> KernelProgram:
    """Naive transpose with identity pack/unpack copies between views."""
    source = f"""
// {tag}
__kernel void copy(__global const float* src, __global float* dst) {{
  size_t i = get_global_id(0); dst[i] = src[i];
}}
__kernel void transpose(__global const float* a, __global float* b) {{
  size_t c = get_global_id(0), r = get_global_id(1);
  b[c * {rows} + r] = a[r * {cols} + c];
}}
"""
    n = rows * cols
    return KernelProgram(
        name=f"transpose{tag}",
        source=source,
        buffers=(
            BufferSpec("a", "float32", (rows, cols), (n,), "input"),
            BufferSpec("b", "float32", (cols, rows), (n,), "output"),
        ),
        pack=(Launch("copy", (ArgRef("a", "logical"), ArgRef("a", "physical")), (n,)),),
        compute=(
            Launch("transpose", (ArgRef("a", "physical"), ArgRef("b", "physical")), (cols, rows)),
        ),
        unpack=(Launch("copy", (ArgRef("b", "physical"), ArgRef("b", "logical")), (n,)),),
    )


def image_program() -> KernelProgram:
    """x packed into an image2d of RGBA texels (N/4 texels wide, one high)."""
    source = """
__kernel void pack(__global const float4* x, __write_only image2d_t img) {
  int t = get_global_id(0); write_imagef(img, (int2)(t, 0), x[t]);
}
__kernel void scale(__read_only image2d_t img, __global float4* y) {
  const sampler_t s = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_NONE | CLK_FILTER_NEAREST;
  int t = get_global_id(0); y[t] = 2.0f * read_imagef(img, s, (int2)(t, 0));
}
"""
    return KernelProgram(
        name="image",
        source=source,
        buffers=(
            BufferSpec("x", "float32", (N,), (1, N), "input", memory="image2d"),
            BufferSpec("y", "float32", (N,), (N,), "output"),
        ),
        pack=(Launch("pack", (ArgRef("x", "logical"), ArgRef("x", "physical")), (N // 4,)),),
        compute=(Launch("scale", (ArgRef("x", "physical"), ArgRef("y", "physical")), (N // 4,)),),
    )


@pytest.fixture(scope="session")
def kit() -> SimpleNamespace:
    """The workload classes and program factories above.

    Test modules reach them through this fixture rather than ``import
    conftest``, which is ambiguous when several test folders have one.
    """
    return SimpleNamespace(
        N=N,
        FAST=FAST,
        ScaleWorkload=ScaleWorkload,
        CountingWorkload=CountingWorkload,
        ReferenceCountingWorkload=ReferenceCountingWorkload,
        BlasThreadsWorkload=BlasThreadsWorkload,
        AbortingWorkload=AbortingWorkload,
        UnpicklableWorkload=UnpicklableWorkload,
        TransposeWorkload=TransposeWorkload,
        scale_program=scale_program,
        wrong_program=wrong_program,
        broken_program=broken_program,
        hang_program=hang_program,
        crash_program=crash_program,
        two_launch_program=two_launch_program,
        lazy_pack_program=lazy_pack_program,
        transpose_program=transpose_program,
        image_program=image_program,
    )
