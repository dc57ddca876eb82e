"""Statements with an epilogue (an element-wise value applied to each
finished reduction before the store: a bias, a ReLU, a residual add) lower
to one kernel whose stores apply it, and equal the numpy reference on the
test device for the candidates the space draws."""

from __future__ import annotations

import numpy as np
import pytest

from laytune import layout as L
from laytune.codegen import lower
from laytune.exceptions import StatementError
from laytune.ops import Workload, parse_statement, statement_text
from laytune.space import Candidate, SearchSpace, SpaceOptions
from tests.codegen.harness import Env, RandomTrial, VectorTrial, run

CONV_RELU = Workload.define(
    "conv_relu",
    "Y[f, oh, ow] = max(sum(X[c, oh + kh - 1, ow + kw - 1] * W[f, c, kh, kw]) + B[f], 0.0)",
    {"f": 8, "oh": 6, "ow": 8, "c": 3, "kh": 3, "kw": 3},
    {"X": (3, 6, 8), "W": (8, 3, 3, 3), "B": (8,)},
)
MATMUL_RESIDUAL = Workload.define(
    "matmul_residual",
    "C[i, j] = sum(A[i, k] * M[k, j]) * 0.5 + R[i, j]",
    {"i": 12, "j": 16, "k": 10},
    {"A": (12, 10), "M": (10, 16), "R": (12, 16)},
)
MAX_EXP = Workload.define(
    "max_exp", "S[i] = exp(max(X[i, k]) - G[i])", {"i": 8, "k": 24}, {"X": (8, 24), "G": (8,)}
)


def test_the_epilogue_is_parsed_around_the_reduction() -> None:
    stmt = CONV_RELU.statement
    assert stmt.reduction == "sum"
    assert [b.name for b in CONV_RELU.inputs] == ["X", "W", "B"]
    assert CONV_RELU.key.endswith("+epilogue[max((acc + B[f]), 0.0)]")
    names = CONV_RELU.axis_names
    again = parse_statement(statement_text(stmt, names), names)
    assert (again.value, again.reduction, again.epilogue) == (
        stmt.value,
        stmt.reduction,
        stmt.epilogue,
    )
    clipped = parse_statement("S[i] = min(max(X[i, k]), G[i] * -1e999)", ("i", "k"))
    text = statement_text(clipped, ("i", "k"))  # an infinity is written so it parses back
    assert text == "S[i] = min(max(X[i, k]), (G[i] * -1e999))"
    assert parse_statement(text, ("i", "k")).epilogue == clipped.epilogue
    with pytest.raises(StatementError, match="reduce axes"):
        Workload.define(
            "bad", "S[i] = sum(X[i, k]) + G[k]", {"i": 2, "k": 3}, {"X": (2, 3), "G": (3,)}
        )
    # one reduction used twice (a GELU of it) is one epilogue; two different ones are not
    twice = parse_statement("S[i] = sum(X[i, k]) * erf(sum(X[i, k]))", ("i", "k"))
    assert twice.reduction == "sum" and statement_text(twice, ("i", "k")).count("sum(") == 2
    with pytest.raises(StatementError, match="wraps one reduction"):
        Workload.define(
            "bad",
            "S[i] = sum(X[i, k]) + sum(G[i, k])",
            {"i": 2, "k": 3},
            {"X": (2, 3), "G": (2, 3)},
        )


def test_the_reference_applies_the_epilogue() -> None:
    inputs = CONV_RELU.make_inputs(0)
    x = np.pad(inputs["X"].astype(np.float64), ((0, 0), (1, 1), (1, 1)))
    w = inputs["W"].astype(np.float64)
    conv = np.zeros((8, 6, 8))
    for kh in range(3):
        for kw in range(3):
            conv += np.einsum("chw,fc->fhw", x[:, kh : kh + 6, kw : kw + 8], w[:, :, kh, kw])
    want = np.maximum(conv + inputs["B"][:, None, None], 0.0)
    np.testing.assert_allclose(CONV_RELU.reference(inputs)["Y"], want, rtol=1e-5, atol=1e-6)
    inputs = MATMUL_RESIDUAL.make_inputs(1)  # the einsum path
    a, m = inputs["A"].astype(np.float64), inputs["M"].astype(np.float64)
    want = (a @ m) * 0.5 + inputs["R"]
    np.testing.assert_allclose(MATMUL_RESIDUAL.reference(inputs)["C"], want, rtol=1e-5)


def test_the_kernel_applies_the_epilogue_before_its_store(env: Env) -> None:
    # vectors along f: the bias is read as a vector, the input broadcast
    layouts = {b.name: L.identity(b.shape) for b in CONV_RELU.buffers}
    layouts["W"] = L.permute((8, 3, 3, 3), (1, 2, 3, 0))
    layouts["Y"] = L.permute((8, 6, 8), (1, 2, 0))
    knobs = {"vector_axis": "f", "vector": 4, "block.f": 8}
    program = lower(CONV_RELU, Candidate.make(layouts, knobs), env.info)
    assert "/* epilogue */" in program.source
    assert len(program.compute) == 1
    inputs = CONV_RELU.make_inputs(2)
    outputs, _ = run(env, program, inputs)
    want = CONV_RELU.reference(inputs)["Y"]
    assert (want == 0.0).any() and (want > 0.0).any()  # the ReLU clips some
    np.testing.assert_allclose(outputs["Y"], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("workload", [CONV_RELU, MATMUL_RESIDUAL, MAX_EXP], ids=lambda w: w.name)
def test_random_candidates_with_an_epilogue_equal_numpy(env: Env, workload: Workload) -> None:
    """Layouts, padding, vectors (along the epilogue's operands or across
    them), blocks and split reductions the space draws all lower and equal
    the reference."""
    space = SearchSpace(workload, env.info, SpaceOptions(max_block_points=16))
    drawn = [space.suggest(RandomTrial(seed)) for seed in range(4)]
    drawn += [space.suggest(VectorTrial(seed)) for seed in range(2)]
    inputs = workload.make_inputs(5)
    want = workload.reference(inputs)
    for candidate in dict.fromkeys(drawn):
        program = lower(workload, candidate, env.info)
        outputs, _ = run(env, program, inputs)
        for name, value in want.items():
            np.testing.assert_allclose(
                outputs[name], value, rtol=1e-4, atol=1e-5, err_msg=candidate.describe()
            )
