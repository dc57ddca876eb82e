"""A grouped convolution written 5-D (``W[g, f, c, kh, kw]``) gets the
direct convolution's derived start: its filters blocked along both channel
axes (``f`` and ``c``, not only a 4-D filter's two leading axes) are in the
space, so the start is kept, and its kernel matches numpy."""

from __future__ import annotations

import numpy as np

from laytune.codegen import lower
from laytune.layout import block, compose, pack
from laytune.ops import Workload
from laytune.search import standard_candidates
from laytune.space import SearchSpace
from tests.codegen.harness import Env, build, run


def _grouped() -> Workload:
    return Workload.define(
        "grouped",
        "Y[n, g, f, oh, ow] += X[n, g, c, oh + kh - 1, ow + kw - 1] * W[g, f, c, kh, kw]",
        {"n": 1, "g": 2, "f": 16, "oh": 8, "ow": 8, "c": 16, "kh": 3, "kw": 3},
        {"X": (1, 2, 16, 8, 8), "W": (2, 16, 16, 3, 3)},
        weights=("W",),
    )


def test_a_grouped_convolution_starts_from_the_direct_convolution(env: Env) -> None:
    workload = _grouped()
    first = standard_candidates(SearchSpace(workload, env.info), 4)[0]
    assert first.knob("vector_axis") == "f"
    inner = block((2, 16, 16, 3, 3), 2, 16)  # GOIHW16i16o
    twice = compose(block(inner.physical_shape, 1, 16), inner)
    held = first.layout("W")
    probe = np.arange(np.prod(held.shape), dtype=np.float32).reshape(held.shape)
    np.testing.assert_array_equal(
        pack(probe, held.index_map).ravel(), pack(probe, twice.index_map).ravel()
    )
    program = lower(workload, first, env.info)
    rng = np.random.default_rng(3)
    inputs = {
        "X": rng.standard_normal((1, 2, 16, 8, 8)).astype(np.float32),
        "W": rng.standard_normal((2, 16, 16, 3, 3)).astype(np.float32),
    }
    outputs, _ = run(env, program, inputs, build(env, program))
    expected = workload.reference(inputs)["Y"]
    np.testing.assert_allclose(outputs["Y"], expected, rtol=1e-4, atol=1e-4)
