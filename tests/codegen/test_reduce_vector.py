"""``reduce_vector``: vectors along the innermost reduce loop, combined across
their lanes at the store (a row's reduction read in vectors along its row),
against numpy, with the space's rules and the starts that a reduction's
structure derives."""

from __future__ import annotations

import numpy as np
import pytest

from laytune import layout as L
from laytune.codegen import lower
from laytune.ops import Workload
from laytune.search._starts import standard_candidates
from laytune.space import Candidate, SearchSpace, baseline_knobs, check_candidate
from tests.codegen.harness import Env, build, run
from tests.search.devices import written_cpu


def _rows(statement: str, rows: int = 24, columns: int = 64) -> Workload:
    return Workload.define("rows", statement, {"i": rows, "j": columns}, {"X": (rows, columns)})


def _candidate(workload: Workload, **knobs: object) -> Candidate:
    layouts = {b.name: L.identity(b.shape) for b in workload.buffers}
    return Candidate.make(layouts, {**baseline_knobs(workload), **knobs})


def _inputs(workload: Workload) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        b.name: rng.standard_normal(b.shape).astype(np.float32)
        for b in workload.buffers
        if b.role == "input"
    }


def _check(env: Env, workload: Workload, candidate: Candidate) -> str:
    assert check_candidate(workload, candidate, env.info).ok
    program = lower(workload, candidate, env.info)
    inputs = _inputs(workload)
    outputs, _ = run(env, program, inputs, build(env, program))
    expected = workload.reference(inputs)
    name = workload.output.name
    np.testing.assert_allclose(outputs[name], expected[name], rtol=1e-5, atol=1e-4)
    return program.source[program.source.index("_compute(") :].split("\n}")[0]


@pytest.mark.parametrize(
    ("width", "unroll", "rows"), [(4, 1, 1), (8, 2, 1), (16, 2, 2), (16, 4, 1), (4, 4, 3)]
)
@pytest.mark.parametrize(
    "statement", ["Y[i] = max(X[i, j])", "Y[i] = min(X[i, j])", "Y[i] += X[i, j]"]
)
def test_a_row_reduction_reads_its_rows_in_vectors(
    env: Env, statement: str, width: int, unroll: int, rows: int
) -> None:
    """Every row in ``floatN`` loads along ``j``, ``unroll`` accumulators per
    row, lanes combined at the store; three rows per work-item leave a tail
    of 24 rows, which is not stored."""
    workload = _rows(statement)
    kernel = _check(
        env, workload, _candidate(workload, reduce_vector=width, unroll=unroll, **{"block.i": rows})
    )
    assert f"vload{width}(0, X" in kernel
    assert "X[" not in kernel  # no scalar load of X is left
    assert kernel.count(f"float{width} acc") == unroll * rows


def test_inputs_broadcast_along_the_reduce_axis_and_two_reduce_axes(env: Env) -> None:
    """``Y[b, i] += A[b, i, k, j] * S[b, i] * V[j]``: S is a scalar broadcast
    into the vectors, V a vector along ``j``; the outer reduce loop ``k``
    stays scalar."""
    workload = Workload.define(
        "scaled",
        "Y[b, i] += A[b, i, k, j] * S[b, i] * V[j]",
        {"b": 2, "i": 6, "k": 3, "j": 32},
        {"A": (2, 6, 3, 32), "S": (2, 6), "V": (32,)},
    )
    kernel = _check(env, workload, _candidate(workload, reduce_vector=8, unroll=2))
    assert "vload8(0, V" in kernel and "vload8(0, A" in kernel


def test_the_space_refuses_reduce_vectors_a_layout_does_not_hold(env: Env) -> None:
    """X stored transposed holds no run of ``j``; a vector along ``i``, a
    split, or a width times unroll that does not divide ``j`` are refused too."""
    workload = _rows("Y[i] += X[i, j]", columns=48)
    turned = Candidate.make(
        {"X": L.permute((24, 48), (1, 0)), "Y": L.identity((24,))},
        {**baseline_knobs(workload), "reduce_vector": 8},
    )
    verdict = check_candidate(workload, turned, env.info)
    assert not verdict.ok and "reduce_vector 8" in " ".join(verdict.reasons)
    for knobs in (
        {"reduce_vector": 8, "vector_axis": "i", "vector": 4, "block.i": 4},
        {"reduce_vector": 16, "unroll": 2},
    ):
        verdict = check_candidate(workload, _candidate(workload, **knobs), env.info)
        assert not verdict.ok and "reduce_vector" in " ".join(verdict.reasons), knobs
    assert check_candidate(workload, _candidate(workload, reduce_vector=16), env.info).ok
    elementwise = Workload.define("add", "Y[i] = X[i] + 1", {"i": 16}, {"X": (16,)})
    assert not check_candidate(elementwise, _candidate(elementwise, reduce_vector=4), env.info).ok


@pytest.mark.parametrize("lanes", [8, 16])
def test_a_reduction_along_a_contiguous_axis_starts_from_row_vectors(lanes: int) -> None:
    """The starts of ``Y[i] = max(X[i, j])`` and of a sum over ``j`` of a
    3-D input read rows in vectors of the device's lanes, two accumulators
    first; a column reduction (``j`` is not X's innermost) gets none."""
    for workload in (
        _rows("Y[i] = max(X[i, j])", 2048, 1024),
        Workload.define(
            "sum3", "Y[b, i] += X[b, i, j]", {"b": 2, "i": 8, "j": 64}, {"X": (2, 8, 64)}
        ),
    ):
        first = standard_candidates(SearchSpace(workload, written_cpu(lanes)), 8)[0]
        assert (first.knob("reduce_vector"), first.knob("unroll")) == (lanes, 2)
    columns = Workload.define("columns", "Y[j] += X[i, j]", {"i": 64, "j": 32}, {"X": (64, 32)})
    starts = standard_candidates(SearchSpace(columns, written_cpu(16)), 8)
    assert all(c.knob("reduce_vector") == 1 for c in starts)
