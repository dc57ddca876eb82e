"""A grouped convolution written 5-D (``W[g, f, c, kh, kw]``) gets the
direct convolution's derived start: its filters blocked along both channel
axes (``f`` and ``c``, not only a 4-D filter's two leading axes) are in the
space, so the start is kept; where a group's filters are fewer than the
start's vectors want, the work-item takes several groups; and its kernel
matches numpy."""

from __future__ import annotations

import numpy as np

from laytune.codegen import KernelProgram, lower
from laytune.layout import block, compose, pack
from laytune.ops import Workload
from laytune.search import standard_candidates
from laytune.search._starts import simd_lanes
from laytune.space import SearchSpace
from tests.codegen.harness import Env, build, cpu_form, run


def _grouped() -> Workload:
    return Workload.define(
        "grouped",
        "Y[n, g, f, oh, ow] += X[n, g, c, oh + kh - 1, ow + kw - 1] * W[g, f, c, kh, kw]",
        {"n": 1, "g": 2, "f": 16, "oh": 8, "ow": 8, "c": 16, "kh": 3, "kw": 3},
        {"X": (1, 2, 16, 8, 8), "W": (2, 16, 16, 3, 3)},
        weights=("W",),
    )


def _matches_numpy(env: Env, workload: Workload, program: KernelProgram, seed: int) -> None:
    rng = np.random.default_rng(seed)
    inputs = {
        "X": rng.standard_normal((1, 2, 16, 8, 8)).astype(np.float32),
        "W": rng.standard_normal((2, 16, 16, 3, 3)).astype(np.float32),
    }
    outputs, _ = run(env, program, inputs, build(env, program))
    expected = workload.reference(inputs)["Y"]
    np.testing.assert_allclose(outputs["Y"], expected, rtol=1e-4, atol=1e-4)


def test_a_grouped_convolution_starts_from_the_direct_convolution(env: Env) -> None:
    workload = _grouped()
    first = standard_candidates(SearchSpace(workload, env.info), 4)[0]
    assert first.knob("vector_axis") == "f"
    lanes = simd_lanes(env.info)  # 16 on AVX-512, 4 on a GPU's float4
    if lanes == 16:  # one group's 16 filters are one vector: both groups hold the others
        assert (first.knob("block.f"), first.knob("block.g")) == (16, 2)
    inner = block((2, 16, 16, 3, 3), 2, lanes)  # GOIHW16i16o on AVX-512
    twice = compose(block(inner.physical_shape, 1, lanes), inner)
    held = first.layout("W")
    probe = np.arange(np.prod(held.shape), dtype=np.float32).reshape(held.shape)
    np.testing.assert_array_equal(
        pack(probe, held.index_map).ravel(), pack(probe, twice.index_map).ravel()
    )
    _matches_numpy(env, workload, lower(workload, first, env.info), seed=3)


def test_the_start_without_conversions_stores_its_filters_in_rows(env: Env) -> None:
    """The twin of the first start takes the activations and the output as
    they come: no pack, no unpack. Its vectors of filters are not contiguous
    in the NCHW-like output, so the block's vectors are transposed in
    registers and stored as rows of output columns, no lane on its own, and
    the result is numpy's."""
    info = cpu_form(env.info)  # the start's CPU form (a GPU's: test_lockstep_starts)
    workload = _grouped()
    first, twin = standard_candidates(SearchSpace(workload, info), 4)[:2]
    assert twin.knob_map == first.knob_map
    assert twin.layout("X").is_identity and twin.layout("Y").is_identity
    assert not first.layout("Y").is_identity
    assert twin.layout("W") == first.layout("W")  # the weights: packed once, not per call
    program = lower(workload, twin, info)
    assert [launch.kernel for launch in program.pack] == ["W_pack"] and not program.unpack
    compute = program.source.index(f"void {program.compute[0].kernel}(")
    body = program.source[compute:].split("__kernel", 1)[0]
    assert "lanes.s" not in body and "shuffle2(" in body
    assert f"vstore{twin.knob('block.ow')}(" in body
    _matches_numpy(env, workload, program, seed=4)
