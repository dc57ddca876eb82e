"""The statement language's unary functions (exp, sqrt, rsqrt, tanh, erf)
run on the test device as OpenCL C built-ins and equal numpy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from laytune import layout as L
from laytune.codegen import lower
from laytune.ops import Workload
from laytune.space import Candidate
from tests.codegen.harness import Env, run

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
