"""Building graphs: every wiring mistake is refused with a message naming it."""

from __future__ import annotations

import numpy as np
import pytest

from laytune import ops
from laytune.plan import Graph, GraphError


def test_operators_are_named_after_their_workload_and_wired_by_port() -> None:
    g = Graph("g")
    x = g.input("x", (2, 3))
    a = g.apply(ops.relu((2, 3)), X=x)
    b = g.apply(ops.relu((2, 3)), X=a)
    assert (a.name, b.name) == ("relu", "relu1")
    assert g.op("relu1").inputs == (("X", "relu"),)
    assert g.uses("relu") == [("relu1", "X")]


def test_the_reference_runs_each_workload_in_order() -> None:
    g = Graph("g")
    x = g.input("x", (2, 3))
    b = g.constant("b", np.array([1.0, -2.0, 3.0], np.float32))
    y = g.apply(ops.relu((2, 3)), X=g.apply(ops.bias_add((2, 3), axis=1), X=x, B=b))
    g.output(y)
    data = np.arange(6, dtype=np.float32).reshape(2, 3) - 3
    np.testing.assert_array_equal(
        g.reference({"x": data})["relu"], np.maximum(data + np.array([1, -2, 3]), 0)
    )


def test_wiring_mistakes_are_named() -> None:
    g = Graph("g")
    x = g.input("x", (2, 3))
    with pytest.raises(GraphError, match=r"unknown: \['Z'\], missing: \['X'\]"):
        g.apply(ops.relu((2, 3)), Z=x)
    with pytest.raises(
        GraphError, match=r"port 'X' takes float32\[3, 2\] but tensor 'x' is float32\[2, 3\]"
    ):
        g.apply(ops.relu((3, 2)), X=x)
    with pytest.raises(GraphError, match="has no tensor 'nope'"):
        g.apply(ops.relu((2, 3)), X="nope")
    with pytest.raises(GraphError, match="already has a tensor named 'x'"):
        g.input("x", (1,))
    with pytest.raises(GraphError, match="already has a tensor named 'x'"):
        g.apply(ops.relu((2, 3)), "x", X=x)
    with pytest.raises(GraphError, match="constant 'c' cannot be a graph output"):
        g.output(g.constant("c", np.zeros(3, np.float32)))


def test_run_inputs_are_checked() -> None:
    g = Graph("g")
    g.input("x", (2, 3))
    with pytest.raises(GraphError, match=r"missing: \['x'\], unknown: \['y'\]"):
        g.check_inputs({"y": np.zeros((2, 3))})
    with pytest.raises(
        GraphError, match=r"input 'x' has shape \(3, 2\), the graph declares \(2, 3\)"
    ):
        g.check_inputs({"x": np.zeros((3, 2))})
    assert g.check_inputs({"x": np.zeros((2, 3))})["x"].dtype == np.float32
