"""Conversion workloads: every candidate of small conversion spaces runs and
gives numpy's answer, the generic kernel is today's pack or unpack kernel."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pyopencl as cl
import pytest

from laytune import layout as L
from laytune.codegen import ConversionKernel, KernelProgram, conversion_kernel, lower
from laytune.codegen._conversion import pack_kernel, unpack_kernel
from laytune.codegen._source import Source
from laytune.exceptions import LayoutRejectedError
from laytune.layout import Layout
from laytune.space import Candidate, ConversionSpace, ConversionWorkload
from tests.codegen.harness import Env, build, open_env

pytestmark = pytest.mark.xdist_group("opencl")

SHAPE = (1, 32, 8, 16)
TILED = {"generic", "gather", "tile", "local"}
#: source, destination, the kernel kinds the space offers
CASES: dict[str, tuple[Layout, Layout, set[str]]] = {
    "transpose pack": (L.identity((64, 96)), L.permute((64, 96), (1, 0)), TILED),
    "transpose unpack": (L.permute((64, 96), (1, 0)), L.identity((64, 96)), TILED),
    "NCHW -> NCHW16c": (L.identity(SHAPE), L.block(SHAPE, 1, 16), TILED),
    "NCHW16c -> NCHW": (L.block(SHAPE, 1, 16), L.identity(SHAPE), TILED),
    # c % 16 is innermost on both sides: runs of 16 along the innermost axis, no tile
    "NCHW16c -> NHWC": (
        L.block(SHAPE, 1, 16),
        L.permute(SHAPE, (0, 2, 3, 1)),
        {"generic", "gather"},
    ),
    "3-D permute": (L.identity((4, 16, 32)), L.permute((4, 16, 32), (0, 2, 1)), TILED),
    "padded rows": (L.identity((6, 10)), L.pad_rows((6, 10), 3), {"generic", "gather"}),
    "from padded rows": (
        L.pad_rows((6, 10), 3),
        L.permute((6, 10), (1, 0)),
        {"generic", "gather", "tile"},  # runs of 2 along the 10 columns: too short for a local tile
    ),
}


@pytest.fixture(scope="module")
def env() -> Env:
    return open_env()


def _run(
    env: Env, workload: ConversionWorkload, kernels: list[ConversionKernel]
) -> list[np.ndarray]:
    """Each kernel's destination array, the kernels built as one program."""
    source = Source("test")
    for kernel in kernels:
        source.add(kernel.source, workload.dtype)
    built = build(env, KernelProgram("test", source.text(), (), ()))
    mf = cl.mem_flags
    data = workload.make_inputs(7)["src"]
    src = cl.Buffer(env.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=data)
    outs = []
    for kernel in kernels:
        out = np.full(workload.dst.physical_size, 1234.0, dtype=np.float32)
        dst = cl.Buffer(env.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=out)
        launch = cl.Kernel(built, kernel.name)
        launch.set_args(src, dst)
        cl.enqueue_nd_range_kernel(env.queue, launch, kernel.global_sizes, kernel.local_size)
        cl.enqueue_copy(env.queue, out, dst)
        outs.append(out)
    env.queue.finish()
    return outs


def _sample(space: ConversionSpace, count: int = 12) -> list[Candidate]:
    """The generic kernel and an even spread over every kernel kind."""
    by_kind: dict[str, list[Candidate]] = {}
    for candidate in space:
        by_kind.setdefault(candidate.knob("kernel", "generic"), []).append(candidate)
    picked = []
    for found in by_kind.values():
        step = max(1, len(found) // (count // len(by_kind)))
        picked += found[::step]
    return picked


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_kernel_kind_converts_like_numpy(env: Env, case: str) -> None:
    src, dst, kinds = CASES[case]
    workload = ConversionWorkload(src, dst)
    want = workload.reference(workload.make_inputs(7))["dst"]
    space = ConversionSpace(workload, env.info)
    assert {c.knob("kernel", "generic") for c in space} == kinds
    picked = _sample(space)
    kernels = [conversion_kernel(workload, c, f"k{i}") for i, c in enumerate(picked)]
    for candidate, got in zip(picked, _run(env, workload, kernels), strict=True):
        np.testing.assert_array_equal(got, want, err_msg=candidate.describe())


def test_lower_gives_a_program_of_the_two_physical_arrays(env: Env) -> None:
    src, dst, _ = CASES["NCHW -> NCHW16c"]
    workload = ConversionWorkload(src, dst)
    local = next(c for c in ConversionSpace(workload, env.info) if c.knob("kernel") == "local")
    program = lower(workload, local, env.info)
    assert [(b.name, b.role, b.shape) for b in program.buffers] == [
        ("src", "input", (src.physical_size,)),
        ("dst", "output", (dst.physical_size,)),
    ]
    (launch,) = program.compute
    assert not program.pack and not program.unpack
    assert launch.local_size is not None and "__local" in program.source


def test_tiled_kernels_need_a_source_read_in_runs() -> None:
    workload = ConversionWorkload(*CASES["padded rows"][:2])
    space = ConversionSpace(workload, open_env().info)
    assert {c.knob("kernel", "generic") for c in space} == {"generic", "gather"}
    tiled = Candidate.make({}, {"kernel": "tile", "axis": 0, "vector": 2, "items": 2})
    with pytest.raises(LayoutRejectedError, match="padding"):
        conversion_kernel(workload, tiled)


def test_local_tiles_search_their_layout() -> None:
    workload = ConversionWorkload(*CASES["transpose pack"][:2])
    space = ConversionSpace(workload, open_env().info)
    families = {c.layout("tile.local").family for c in space if c.knob("kernel") == "local"}
    assert families == {"identity", "pad_rows", "row_xor"}
    assert set(space.layouts("tile.local")) == {
        c.layout("tile.local") for c in space if c.knob("kernel") == "local"
    }


def test_the_generic_kernel_is_todays_pack_and_unpack() -> None:
    layout = L.block(SHAPE, 1, 16)
    generic = Candidate.make({})
    packed = conversion_kernel(ConversionWorkload(L.identity(SHAPE), layout), generic)
    unpacked = conversion_kernel(ConversionWorkload(layout, L.identity(SHAPE)), generic)
    assert packed.source == pack_kernel("dst", layout, "float32", kernel_name="convert").source
    assert unpacked.source == unpack_kernel("src", layout, "float32", kernel_name="convert").source


def test_a_candidate_outside_the_space_is_refused() -> None:
    workload = ConversionWorkload(*CASES["transpose pack"][:2])
    wide = Candidate.make({}, {"kernel": "gather", "vector": 3, "items": 1, "group": 0})
    with pytest.raises(LayoutRejectedError, match="not in the conversion space"):
        lower(workload, wide, open_env().info)


def test_conversion_keys_name_both_layouts() -> None:
    src, dst, _ = CASES["NCHW -> NCHW16c"]
    key = ConversionWorkload(src, dst).key
    assert key.startswith("convert(shape=1x32x8x16,src=identity,dst=block-")
    assert key == ConversionWorkload(src, L.block(SHAPE, 1, 16)).key
    assert key != ConversionWorkload(src, L.block(SHAPE, 1, 8)).key
    padded = L.pad_rows((6, 10), 3)
    zero = ConversionWorkload(L.identity((6, 10)), padded, pad_value=0.0).key
    assert zero != ConversionWorkload(L.identity((6, 10)), padded).key
    assert zero.endswith(",pad=0.0;float32)")


@pytest.mark.parametrize("case", ["transpose pack", "NCHW -> NCHW16c", "3-D permute"])
def test_nontemporal_stores_convert_like_numpy(env: Env, case: str) -> None:
    """Where the device's compiler has ``__builtin_nontemporal_store`` and
    the output would not stay in its last-level cache (a device of 1 KiB,
    here), every kernel kind that stores vectors comes again with it, and
    converts like numpy; elsewhere the space holds none."""
    src, dst, _ = CASES[case]
    workload = ConversionWorkload(src, dst)
    held = [c for c in ConversionSpace(workload, env.info) if c.knob("store")]
    assert not held or not env.info.holds(math.prod(dst.flat_shape) * 4)
    small = dataclasses.replace(env.info, last_level_cache_size=1024)
    streaming = [c for c in ConversionSpace(workload, small) if c.knob("store") == "nontemporal"]
    if not env.info.has_builtin("nontemporal_store"):
        assert not streaming
        return
    assert {c.knob("kernel") for c in streaming} == {"gather", "tile", "local"}
    picked = _sample(ConversionSpaceView(streaming))
    kernels = [conversion_kernel(workload, c, f"k{i}") for i, c in enumerate(picked)]
    for kernel in kernels:
        assert "__builtin_nontemporal_store(" in kernel.source
        assert not re.search(r"vstore\d+\([^;]*\bdst\b", kernel.source)  # no plain store to dst
    want = workload.reference(workload.make_inputs(7))["dst"]
    for candidate, got in zip(picked, _run(env, workload, kernels), strict=True):
        np.testing.assert_array_equal(got, want, err_msg=candidate.describe())


class ConversionSpaceView(list):
    """A list of candidates that :func:`_sample` spreads over like a space."""


def test_a_device_without_nontemporal_stores_gets_none(env: Env) -> None:
    plain = dataclasses.replace(env.info, builtins=())
    workload = ConversionWorkload(*CASES["transpose pack"][:2])
    assert not [c for c in ConversionSpace(workload, plain) if c.knob("store")]
