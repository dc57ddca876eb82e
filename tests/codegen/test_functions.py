"""The statement language's unary functions (exp, sqrt, rsqrt, tanh, erf)
run on the test device as OpenCL C built-ins and equal numpy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from laytune import layout as L
from laytune.codegen import lower
from laytune.ops import Workload
from laytune.space import Candidate, SearchSpace, SpaceOptions
from tests.codegen.harness import Env, RandomTrial, VectorTrial, run

_ERF = np.frompyfunc(math.erf, 1, 1)

# each function, its argument kept inside its domain, and numpy's result
CASES = {
    "exp": ("exp(X[i, j])", lambda x: np.exp(x)),
    "sqrt": ("sqrt(X[i, j] + 1.5)", lambda x: np.sqrt(x + 1.5)),
    "rsqrt": ("rsqrt(X[i, j] + 1.5)", lambda x: 1.0 / np.sqrt(x + 1.5)),
    "tanh": ("tanh(X[i, j] * 3.0)", lambda x: np.tanh(x * 3.0)),
    "erf": ("erf(X[i, j] * 2.0)", lambda x: _ERF(x * 2.0).astype(np.float64)),
}


def _workload(name: str) -> Workload:
    return Workload.define(
        f"fn_{name}", f"Y[i, j] = {CASES[name][0]}", {"i": 8, "j": 16}, {"X": (8, 16)}
    )


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("vector", [1, 4], ids=["scalar", "vector4"])
def test_a_function_equals_numpy_on_the_device(env: Env, name: str, vector: int) -> None:
    workload = _workload(name)
    knobs = {"vector_axis": "j", "vector": vector, "block.j": 4} if vector > 1 else {}
    program = lower(
        workload,
        Candidate.make({"X": L.identity((8, 16)), "Y": L.identity((8, 16))}, knobs),
        env.info,
    )
    assert f"{name}(" in program.source
    inputs = workload.make_inputs(0)
    outputs, _ = run(env, program, inputs)
    want = CASES[name][1](inputs["X"].astype(np.float64))
    np.testing.assert_allclose(outputs["Y"], want, rtol=1e-5, atol=1e-6)


def test_a_function_inside_a_reduction_equals_numpy(env: Env) -> None:
    """The sum of exponentials of a softmax: a function of two loads under a sum."""
    workload = Workload.define(
        "exp_sum",
        "S[i] += exp(X[i, k] - M[i])",
        {"i": 8, "k": 32},
        {"X": (8, 32), "M": (8,)},
    )
    layouts = {"X": L.identity((8, 32)), "M": L.identity((8,)), "S": L.identity((8,))}
    program = lower(workload, Candidate.make(layouts), env.info)
    inputs = workload.make_inputs(1)
    outputs, _ = run(env, program, inputs)
    x, m = inputs["X"].astype(np.float64), inputs["M"].astype(np.float64)
    want = np.exp(x - m[:, None]).sum(axis=1)
    np.testing.assert_allclose(outputs["S"], want, rtol=1e-5)


# a softmax's exp-sum and a layer norm's normalisation, as the ONNX import writes them
FUNCTION_WORKLOADS = [
    Workload.define(
        "exp_sum_drawn", "S[i] += exp(X[i, k] - M[i])", {"i": 6, "k": 20}, {"X": (6, 20), "M": (6,)}
    ),
    Workload.define(
        "normalise_drawn",
        "Y[i, j] = (X[i, j] - M[i]) * rsqrt(V[i] + E[0]) * G[j] + tanh(B[j])",
        {"i": 6, "j": 20},
        {"X": (6, 20), "M": (6,), "V": (6,), "E": (1,), "G": (20,), "B": (20,)},
    ),
]


@pytest.mark.parametrize("workload", FUNCTION_WORKLOADS, ids=lambda w: w.name)
def test_random_candidates_of_functions_equal_numpy(env: Env, workload: Workload) -> None:
    """Layouts, padding, vectors, blocks and split reductions the space draws
    around function calls all lower and equal the reference."""
    space = SearchSpace(workload, env.info, SpaceOptions(max_block_points=16))
    drawn = [space.suggest(RandomTrial(seed)) for seed in range(6)]
    drawn += [space.suggest(VectorTrial(seed)) for seed in range(2)]
    inputs = workload.make_inputs(5)
    if "V" in inputs:  # a variance and an epsilon
        inputs["V"], inputs["E"] = np.abs(inputs["V"]), np.full(1, 1e-3, np.float32)
    want = workload.reference(inputs)
    if workload.reduction:
        # The space offers overcompute of a sum wherever the padding holds 0.0, which
        # is exact for sums of products only; lower() refuses exp(0 - M[i]) != 0 with
        # its reason. Until the space reads the statement's value at the padding,
        # the sum's draws here are those that guard.
        drawn = [c for c in drawn if c.knob("pad_mode") == "guard"]
        assert len(set(drawn)) >= 3
    for candidate in dict.fromkeys(drawn):
        program = lower(workload, candidate, env.info)
        outputs, _ = run(env, program, inputs)
        for name, value in want.items():
            np.testing.assert_allclose(
                outputs[name], value, rtol=1e-4, atol=1e-5, err_msg=candidate.describe()
            )
