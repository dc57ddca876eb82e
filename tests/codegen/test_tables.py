"""Tables (``Workload.tables``): a statement's own constants, written into
the kernel as literals where the generator knows the index it reads."""

from __future__ import annotations

import re

import numpy as np
import pytest

from laytune import layout as L
from laytune.codegen import lower
from laytune.exceptions import StatementError
from laytune.ops import Workload
from laytune.space import Candidate, SearchSpace
from tests.codegen.harness import Env, run

LAPLACE = np.array([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]])


def _stencil(table: np.ndarray, rows: int = 12, cols: int = 20) -> Workload:
    return Workload.define(
        "stencil",
        "Y[i, j] += K[a, b] * X[i + a, j + b]",
        {"i": rows, "j": cols, "a": 3, "b": 3},
        {"X": (rows + 2, cols + 2)},
        tables={"K": table},
    )


def _stencil_numpy(x: np.ndarray, table: np.ndarray) -> np.ndarray:
    """The 3 x 3 correlation of ``x`` with ``table`` where it fits, float64."""
    rows, cols = x.shape[0] - 2, x.shape[1] - 2
    x = x.astype(np.float64)
    return sum(table[a, b] * x[a : a + rows, b : b + cols] for a in range(3) for b in range(3))


def _layouts(workload: Workload) -> dict[str, L.Layout]:
    return {b.name: L.identity(b.shape) for b in workload.buffers}


@pytest.mark.parametrize("vector", [1, 4], ids=["scalar", "vector4"])
def test_a_stencil_reads_its_table_as_literals_and_equals_numpy(env: Env, vector: int) -> None:
    workload = _stencil(LAPLACE)
    knobs = {"vector_axis": "j", "vector": 4, "block.j": 4} if vector > 1 else {"block.i": 2}
    program = lower(workload, Candidate.make(_layouts(workload), knobs), env.info)
    body = program.source.split("{", 1)[1]
    assert "K[" not in body  # every read of K is a literal
    assert "fma(" in body  # the -4
    assert re.search(r"acc\d+ = acc\d+ \+ vX\d+;", body)  # the ones: additions
    # the zeros: 5 products of the 9 per point, 2 points (scalar) or 1 vector
    updates = re.findall(r"^\s*acc\d+ = ", body, re.MULTILINE)
    assert len(updates) == 5 * (2 if vector == 1 else 1)
    inputs = workload.make_inputs(0)
    np.testing.assert_array_equal(inputs["K"], LAPLACE.astype(np.float32))
    outputs, _ = run(env, program, inputs)
    want = _stencil_numpy(inputs["X"], LAPLACE)
    np.testing.assert_allclose(outputs["Y"], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(workload.reference(inputs)["Y"], want, rtol=1e-6, atol=1e-6)


def test_a_table_read_along_an_outer_loop_is_read_from_its_buffer(env: Env) -> None:
    """Only the innermost loops over a table's axes are written out step by
    step: read along an outer loop, the table is an ordinary input, with its
    values."""
    table = np.linspace(-1.0, 1.0, 6)
    workload = Workload.define(
        "weighted_rows",
        "Y[i] += K[k] * X[i, k, r]",
        {"i": 8, "k": 6, "r": 40},
        {"X": (8, 6, 40)},
        tables={"K": table},
    )
    program = lower(workload, Candidate.make(_layouts(workload), {}), env.info)
    assert "K[" in program.source.split("{", 1)[1]
    inputs = workload.make_inputs(1)
    outputs, _ = run(env, program, inputs)
    want = np.einsum("k,ikr->i", table, inputs["X"].astype(np.float64))
    np.testing.assert_allclose(outputs["Y"], want, rtol=1e-5, atol=1e-5)


def test_a_table_read_modulo_a_block_is_a_literal_at_each_point(env: Env) -> None:
    """An element-wise statement reads ``S[i % 2]``: in a block of two rows
    starting at an even row, each row's entry is known."""
    workload = Workload.define(
        "alternate",
        "Y[i, j] = S[i % 2] * X[i, j]",
        {"i": 8, "j": 16},
        {"X": (8, 16)},
        tables={"S": [0.5, -2.0]},
    )
    knobs = {"vector_axis": "j", "vector": 4, "block.j": 4, "block.i": 2}
    program = lower(workload, Candidate.make(_layouts(workload), knobs), env.info)
    body = program.source.split("{", 1)[1]
    assert "S[" not in body and "0.5f" in body and "-2.0f" in body
    inputs = workload.make_inputs(2)
    outputs, _ = run(env, program, inputs)
    want = inputs["X"].astype(np.float64) * np.array([0.5, -2.0])[np.arange(8) % 2, None]
    np.testing.assert_allclose(outputs["Y"], want, rtol=1e-6)


def test_a_tables_values_are_the_workloads(env: Env) -> None:
    """The values are part of the key; the reference uses them whatever a
    caller passes; a table has only the identity layout to search."""
    a, b = _stencil(LAPLACE), _stencil(LAPLACE * 2)
    assert a.key != b.key and a.key == _stencil(LAPLACE).key
    assert a.weights == ("K",) and a.buffer("K").shape == (3, 3)
    inputs = a.make_inputs(0)
    wrong = {**inputs, "K": np.zeros((3, 3), dtype=np.float32)}
    np.testing.assert_array_equal(a.reference(wrong)["Y"], a.reference(inputs)["Y"])
    space = SearchSpace(a, env.info)
    assert space.layouts("K") == (L.identity((3, 3)),)
    assert len(space.layouts("X")) > 1


@pytest.mark.parametrize(
    ("table", "inputs", "message"),
    [
        (np.full((3, 3), np.nan), {}, "not finite"),
        (np.zeros(5000), {}, "1 to 4096 elements"),
        (np.float64(2.0), {}, "at least one axis"),
        (LAPLACE, {"K": (3, 4)}, "has shape (3, 3) but inputs gives (3, 4)"),
        ("abc", {}, "not an array of numbers"),
    ],
)
def test_a_malformed_table_is_refused_by_name(table: object, inputs: dict, message: str) -> None:
    with pytest.raises(StatementError, match=re.escape(message)) as caught:
        Workload.define(
            "stencil",
            "Y[i, j] += K[a, b] * X[i + a - 1, j + b - 1]",
            {"i": 4, "j": 4, "a": 3, "b": 3},
            {"X": (4, 4), **inputs},
            tables={"K": table},
        )
    assert "'K'" in str(caught.value)


def test_a_table_the_statement_does_not_read_is_refused() -> None:
    with pytest.raises(StatementError, match=r"inputs \['Z'\] are not read"):
        Workload.define("copy", "Y[i] = X[i]", {"i": 4}, {"X": (4,)}, tables={"Z": [1.0, 2.0]})
