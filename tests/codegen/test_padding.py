"""RFC 77's overcompute examples: the row summation and max pooling over a
padded blocked axis, guarded (pad value None) and overcomputed (neutral pad)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from laytune import layout as L
from laytune import ops
from laytune.codegen import lower
from laytune.exceptions import LayoutRejectedError
from laytune.space import Candidate
from tests.codegen.harness import Env, run


def _row_sum(pad_mode: str, pad: float | None) -> tuple[ops.Workload, Candidate]:
    workload = ops.sum((16, 14), (1,))
    layouts = {"X": L.block((16, 14), 1, 4), "Y": L.identity((16,))}
    pads = {} if pad is None else {"X": pad}
    return workload, Candidate.make(layouts, {"pad_mode": pad_mode}, pads)


def _kernel(source: str) -> str:
    return source.split("__kernel void sum_compute")[1].split("\n}\n")[0]


def test_row_summation_overcompute_has_no_guard_and_is_right(env: Env) -> None:
    workload, candidate = _row_sum("overcompute", 0.0)
    program = lower(workload, candidate, env.info)
    kernel = _kernel(program.source)
    assert "j < 16" in kernel  # the loop runs over the physical row, padding included
    assert "if" not in kernel and "?" not in kernel
    inputs = workload.make_inputs(0)
    outputs, physical = run(env, program, inputs)
    np.testing.assert_allclose(outputs["Y"], workload.reference(inputs)["Y"], rtol=1e-5, atol=1e-5)
    assert (physical["X"].reshape(16, 16)[:, 14:] == 0.0).all()


def test_row_summation_guarded_with_pad_value_none_is_right(env: Env) -> None:
    workload, candidate = _row_sum("guard", None)
    program = lower(workload, candidate, env.info)
    kernel = _kernel(program.source)
    assert "if (j < 14)" in kernel
    inputs = workload.make_inputs(0)
    outputs, physical = run(env, program, inputs)
    assert np.isnan(physical["X"].reshape(16, 16)[:, 14:]).all()  # padding never read
    np.testing.assert_allclose(outputs["Y"], workload.reference(inputs)["Y"], rtol=1e-5, atol=1e-5)


def test_overcompute_over_a_non_neutral_pad_is_refused() -> None:
    workload, candidate = _row_sum("overcompute", 1.0)
    with pytest.raises(LayoutRejectedError, match="neutral"):
        lower(workload, candidate)


@pytest.mark.parametrize(("pad", "refused"), [(math.inf, False), (-math.inf, True), (0.0, True)])
def test_a_row_minimum_overcomputes_only_over_positive_infinity(
    env: Env, pad: float, refused: bool
) -> None:
    """``min``'s neutral element is +inf: over a row blocked by 4 (14 -> 16
    columns), padding that holds it is overcomputed, anything else refused."""
    workload = ops.Workload.define(
        "rowmin", "Y[i] = min(X[i, j])", {"i": 16, "j": 14}, {"X": (16, 14)}
    )
    layouts = {"X": L.block((16, 14), 1, 4), "Y": L.identity((16,))}
    candidate = Candidate.make(layouts, {"pad_mode": "overcompute"}, {"X": pad})
    if refused:
        with pytest.raises(LayoutRejectedError, match=r"min .* not the neutral element inf"):
            lower(workload, candidate, env.info)
        return
    program = lower(workload, candidate, env.info)
    assert "j < 16" in program.source.split("__kernel void rowmin_compute")[1]
    inputs = workload.make_inputs(0)
    inputs["X"] += 5.0  # every element positive: a zero read from padding would win
    outputs, physical = run(env, program, inputs)
    np.testing.assert_array_equal(outputs["Y"], inputs["X"].min(axis=1))
    assert (physical["X"].reshape(16, 16)[:, 14:] == math.inf).all()


@pytest.mark.parametrize(
    ("value", "refused"), [("max(X[i, j], -1.0)", False), ("min(X[i, j], 3.0)", True)]
)
def test_a_row_minimum_of_an_element_wise_bound_follows_its_value_at_the_padding(
    env: Env, value: str, refused: bool
) -> None:
    """Over +inf padding ``max(x, -1)`` is still +inf (min's neutral, so the
    padding may be overcomputed) and ``min(x, 3)`` is 3 (it may not)."""
    workload = ops.Workload.define(
        "rowmin", f"Y[i] = min({value})", {"i": 16, "j": 14}, {"X": (16, 14)}
    )
    layouts = {"X": L.block((16, 14), 1, 4), "Y": L.identity((16,))}
    candidate = Candidate.make(layouts, {"pad_mode": "overcompute"}, {"X": math.inf})
    if refused:
        with pytest.raises(LayoutRejectedError, match=r"statement's value is 3\.0"):
            lower(workload, candidate, env.info)
        return
    program = lower(workload, candidate, env.info)
    inputs = workload.make_inputs(0)
    outputs, _ = run(env, program, inputs)
    np.testing.assert_array_equal(outputs["Y"], np.maximum(inputs["X"], -1.0).min(axis=1))


@pytest.mark.parametrize(("pad_mode", "pad"), [("overcompute", -math.inf), ("guard", None)])
def test_max_pool_over_a_padded_blocked_width(env: Env, pad_mode: str, pad: float | None) -> None:
    # a 14 x 14 window over a width blocked by 4 (physical width 16)
    workload = ops.max_pool2d(1, 3, 14, 14, 14, 14)
    layouts = {"X": L.block((1, 3, 14, 14), 3, 4), "Y": L.identity((1, 3, 1, 1))}
    candidate = Candidate.make(layouts, {"pad_mode": pad_mode}, {} if pad is None else {"X": pad})
    program = lower(workload, candidate, env.info)
    kernel = program.source.split("__kernel void max_pool2d_compute")[1].split("\n}\n")[0]
    assert "kw < 16" in kernel
    assert ("if (kw < 14)" in kernel) == (pad_mode == "guard")
    inputs = workload.make_inputs(1)
    inputs["X"] -= 5.0  # every element negative: a zero read from padding would win
    outputs, _ = run(env, program, inputs)
    np.testing.assert_array_equal(outputs["Y"], workload.reference(inputs)["Y"])
