"""Pack then unpack on the device gives the input back bit for bit, and the
padding holds the pad value (NaN where the pad value is None)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from laytune import layout as L
from laytune.codegen import lower_conversion
from tests.codegen.harness import Env, build, read_physical

SHAPE4 = (2, 6, 5, 8)
LAYOUTS = [
    ("transpose", L.permute((48, 40), (1, 0)), None, "global"),
    ("nchw_to_nhwc", L.permute(SHAPE4, (0, 2, 3, 1)), None, "global"),
    ("nchw4c_padded", L.block(SHAPE4, 1, 4), 0.0, "global"),
    ("nchw3c_padded", L.block(SHAPE4, 1, 3), None, "global"),
    ("row_blocks", L.block((16, 14), 1, 4), -math.inf, "global"),
    ("pad_rows", L.pad_rows((16, 14), 3), 1.5, "global"),
    ("pad_every", L.pad_every((32, 16), 2, 4), None, "global"),
    ("swizzle_flat", L.swizzle((32, 32), 3, 0, 3), None, "global"),
    ("swizzle_rows", L.row_xor((32, 32), 8, 4), None, "global"),
    ("tile", L.tile((32, 48), (8, 16)), None, "global"),
    ("texture", L.texture((2, 8, 6, 8), 1), None, "image2d"),
    ("texture_padded", L.texture(SHAPE4, 1), 0.0, "image2d"),
    (
        "nhwc_then_block",
        L.compose(L.block((2, 5, 8, 6), 3, 4), L.permute(SHAPE4, (0, 2, 3, 1))),
        0.0,
        "global",
    ),
]


# image packs always write whole texels: no naive variant for them
CASES = [(c, False) for c in LAYOUTS] + [(c, True) for c in LAYOUTS if c[3] == "global"]


@pytest.mark.parametrize(
    ("case", "naive"),
    CASES,
    ids=lambda c: c[0] if isinstance(c, tuple) else ("naive" if c else "fast"),
)
def test_pack_then_unpack_round_trips(env: Env, case: tuple, naive: bool) -> None:
    _, layout, pad, memory = case
    program = lower_conversion(
        "X", layout, "float32", pad, memory, elements_per_item=1 if naive else None
    )
    x = np.random.default_rng(3).standard_normal(layout.shape).astype(np.float32)
    prg = build(env, program)
    outputs, physical = _round_trip(env, program, prg, x)
    np.testing.assert_array_equal(outputs.view(np.uint32), x.view(np.uint32))
    want = L.pack(x, layout.index_map, pad).reshape(-1)
    got = physical
    mask = layout.index_map.padding_mask(layout.shape).reshape(-1)
    np.testing.assert_array_equal(got[~mask].view(np.uint32), want[~mask].view(np.uint32))
    if pad is None:
        assert np.isnan(got[mask]).all()
    else:
        assert (got[mask] == pad).all()


@pytest.mark.parametrize("case", [c for c in LAYOUTS if c[3] == "global"], ids=lambda c: c[0])
def test_float16_conversions_copy_bits_without_fp16(env: Env, case: tuple) -> None:
    """Halves move as ushort bits: the program needs no cl_khr_fp16 (which
    NVIDIA's OpenCL platform lacks), the round trip is exact, and the
    padding holds the pad value's half bits."""
    _, layout, pad, memory = case
    program = lower_conversion("X", layout, "float16", pad, memory)
    assert "cl_khr_fp16" not in program.source and "half" not in program.source
    x = np.random.default_rng(3).standard_normal(layout.shape).astype(np.float16)
    outputs, physical = _round_trip(env, program, build(env, program), x)
    np.testing.assert_array_equal(outputs.view(np.uint16), x.view(np.uint16))
    want = L.pack(x, layout.index_map, pad).reshape(-1)
    mask = layout.index_map.padding_mask(layout.shape).reshape(-1)
    got = physical.view(np.float16)
    np.testing.assert_array_equal(got[~mask].view(np.uint16), want[~mask].view(np.uint16))
    if pad is None:
        assert np.isnan(got[mask]).all()
    else:
        assert (got[mask] == np.float16(pad)).all()


def _round_trip(env: Env, program, prg, x):
    import pyopencl as cl

    spec = program.buffers[0]
    mf = cl.mem_flags
    src = cl.Buffer(env.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
    dst = cl.Buffer(env.context, mf.READ_WRITE, size=x.nbytes)
    if spec.memory == "image2d":
        fmt = cl.ImageFormat(cl.channel_order.RGBA, cl.channel_type.FLOAT)
        phys = cl.create_image(env.context, mf.READ_WRITE, fmt, shape=spec.image_shape)
    else:
        phys = cl.Buffer(
            env.context, mf.READ_WRITE, size=int(np.prod(spec.physical_shape)) * x.itemsize
        )
    (pack,), (unpack,) = program.pack, program.unpack
    getattr(prg, pack.kernel)(env.queue, pack.global_size, None, src, phys)
    getattr(prg, unpack.kernel)(env.queue, unpack.global_size, None, phys, dst)
    out = np.empty_like(x)
    cl.enqueue_copy(env.queue, out, dst)
    physical = read_physical(env, spec, phys)
    env.queue.finish()
    return out, physical


def test_transpose_pack_is_tiled() -> None:
    """A square register tile, transposed by a shuffle network whose vectors
    are the unit of work (``vec_type_hint``)."""
    program = lower_conversion("X", L.permute((64, 64), (1, 0)))
    assert "tile 16 x 16" in program.source and "vload16" in program.source
    pack = program.source.split("X_pack")[1].split("}")[0]
    assert pack.count("shuffle2(") == 16 * 4  # log2(16) rounds of 16
    assert "vec_type_hint(float16)" in program.source
    assert ".s" not in pack  # no lane inserts
    naive = lower_conversion("X", L.permute((64, 64), (1, 0)), elements_per_item=1)
    assert "vload" not in naive.source


def test_blocked_unpack_reads_whole_blocks() -> None:
    program = lower_conversion("X", L.block((1, 8, 6, 16), 1, 4))
    unpack = program.source.split("void X_unpack")[1]
    assert "vload4" in unpack and "tile 4 x 4" in program.source
    assert unpack.count("shuffle2(") == 4 * 2


def test_a_tile_finds_its_elements_from_the_global_id() -> None:
    """Blocking is affine in a work-item's position: its first source and
    destination elements come from the global id, digits merged where they
    line up (the NCHW4c side is walked in order, the NCHW side by rows)."""
    source = lower_conversion("X", L.block((1, 8, 6, 16), 1, 4)).source
    pack, unpack = source.split("__kernel __attribute__((vec_type_hint(float4))) void X_unpack")
    assert "const int dst0 = gid << 6;" in pack  # 16 texels per work-item, in order
    assert "const int src0 = ((gid % 6) << 4) + gid / 6 * 384;" in pack
    assert "const int src0 = gid << 4;" in unpack  # 4 texels per work-item, in order
    assert "const int dst0 = ((gid % 24) << 2) + gid / 24 * 384;" in unpack
    assert "vstore4(t1_1, 0, dst + dst0 + 96);" in unpack  # the second channel's row
    # blocked by 4 but 6 channels: the runs of 2 channels are not affine in the work-item
    padded = lower_conversion("X", L.block((1, 6, 6, 16), 1, 4)).source.split("X_unpack")[1]
    assert "src0" not in padded and "vload2" in padded
