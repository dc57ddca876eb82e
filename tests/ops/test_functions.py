"""Unary functions of the statement language: parsed, printed, counted and
evaluated by the numpy reference."""

from __future__ import annotations

import math

import numpy as np
import pytest

from laytune.exceptions import StatementError
from laytune.ops import FUNCTIONS, Function, Load, Workload, parse_statement, value_text

NUMPY = {
    "exp": np.exp,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "tanh": np.tanh,
    "erf": np.frompyfunc(math.erf, 1, 1),
}


def test_every_function_is_known() -> None:
    assert set(FUNCTIONS) == set(NUMPY)


@pytest.mark.parametrize("name", sorted(NUMPY))
def test_a_function_parses_prints_and_evaluates_as_numpy(name: str) -> None:
    stmt = parse_statement(f"Y[i] = {name}(X[i] + 2.0)", ["i"])
    assert isinstance(stmt.value, Function) and stmt.value.name == name
    assert value_text(stmt.value, ["i"]) == f"{name}((X[i] + 2.0))"
    workload = Workload.define(f"fn_{name}", stmt.text, {"i": 64}, {"X": (64,)})
    assert workload.flops == 2 * 64
    x = workload.make_inputs(3)["X"]
    want = NUMPY[name](x.astype(np.float64) + 2.0).astype(np.float32)
    np.testing.assert_allclose(workload.reference({"X": x})["Y"], want, rtol=1e-6)


def test_functions_nest_and_reduce() -> None:
    workload = Workload.define(
        "nested", "S[i] += exp(tanh(X[i, k]))", {"i": 3, "k": 5}, {"X": (3, 5)}
    )
    x = workload.make_inputs(0)["X"]
    np.testing.assert_allclose(workload.reference({"X": x})["S"], np.exp(np.tanh(x)).sum(1), 1e-6)
    value = workload.statement.value
    assert isinstance(value, Function) and isinstance(value.operand, Function)
    assert isinstance(value.operand.operand, Load)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("Y[i] = exp(X[i], X[i])", "exp\\(...\\) takes one value"),
        ("Y[i] = log(X[i])", "unknown function 'log'.*erf\\(a\\)"),
    ],
)
def test_a_bad_call_is_named(text: str, match: str) -> None:
    with pytest.raises(StatementError, match=match):
        parse_statement(text, ["i"])
