"""Row stores: an output kept in its logical layout whose vectors run along
an axis it does not hold side by side (a convolution's vectors of filters,
an NCHW output) is stored in rows of its innermost axis, the block's
vectors transposed in registers, instead of lane by lane.

The rectangular shuffle network's law, the kernels' shape (shuffles and
row stores, no lane left alone) and their numerics against numpy, with an
epilogue, and the cases that keep lane-by-lane stores."""

from __future__ import annotations

import numpy as np
import pytest

from laytune import layout as L
from laytune import ops
from laytune.codegen import lower
from laytune.codegen._shuffle import chunk_lane, transpose_lines
from laytune.ops import Workload
from laytune.space import Candidate, baseline_knobs, check_candidate
from tests.codegen.harness import Env, build, run, run_one_item


@pytest.mark.parametrize("rows, lanes", [(2, 4), (2, 16), (4, 8), (4, 16), (8, 16), (8, 8)])
def test_the_rectangular_network_puts_each_lane_in_a_chunk(env: Env, rows: int, lanes: int) -> None:
    """``rows`` vectors of ``lanes``: chunk ``h`` of output ``a`` holds lane
    ``chunk_lane(a, h)`` of every row, in row order, on the device."""
    names = [f"r{b}" for b in range(rows)]
    lines, outputs = transpose_lines(names, "float", "t", lanes)
    assert len(lines) == rows * (rows.bit_length() - 1)  # log2(rows) rounds of rows shuffles
    body = [f"const float{lanes} r{b} = vload{lanes}({b}, src);" for b in range(rows)]
    body += lines + [f"vstore{lanes}({name}, {a}, dst);" for a, name in enumerate(outputs)]
    source = (
        "__kernel void t(__global const float* restrict src, __global float* restrict dst) {\n"
        + "\n".join(body)
        + "\n}"
    )
    data = np.arange(rows * lanes, dtype=np.float32)
    out = run_one_item(env, source, data)
    table = data.reshape(rows, lanes)
    got = out.reshape(rows, lanes // rows, rows)  # output a, chunk h, row b
    for a in range(rows):
        for h in range(lanes // rows):
            np.testing.assert_array_equal(got[a, h], table[:, chunk_lane(a, h, rows, lanes)])


def test_more_rows_than_lanes_are_refused() -> None:
    with pytest.raises(ValueError, match="8 rows of 4"):
        transpose_lines([f"r{b}" for b in range(8)], "float", "t", 4)


# Y[f, t] (filters by steps, steps innermost) with vectors along the filters
CONV1D = Workload.define(
    "conv1d_rows",
    "Y[f, t] += X[c, t + k] * W[f, c, k]",
    {"f": 32, "t": 24, "c": 5, "k": 3},
    {"X": (5, 26), "W": (32, 5, 3)},
)
# the same with a bias and a ReLU applied before the store
CONV1D_RELU = Workload.define(
    "conv1d_rows_relu",
    "Y[f, t] = max(sum(X[c, t + k] * W[f, c, k]) + B[f], 0.0)",
    {"f": 32, "t": 24, "c": 5, "k": 3},
    {"X": (5, 26), "W": (32, 5, 3), "B": (32,)},
)


def _along_filters(workload: ops.Workload, vector: int, filters: int, steps: int) -> Candidate:
    """The filters blocked by the vector, every other layout logical,
    vectors of ``vector`` filters, ``filters`` x ``steps`` outputs per
    work-item."""
    layouts = {b.name: L.identity(b.shape) for b in workload.buffers}
    layouts["W"] = L.block(workload.buffer("W").shape, 0, vector)
    knobs = {
        **baseline_knobs(workload),
        "vector_axis": "f",
        "vector": vector,
        "block.f": filters,
        "block.t": steps,
    }
    return Candidate.make(layouts, knobs)


def _kernel(program) -> str:
    return program.source[program.source.index("_compute(") :].split("\n}")[0]


@pytest.mark.parametrize("workload", [CONV1D, CONV1D_RELU], ids=lambda w: w.name)
@pytest.mark.parametrize(
    "vector, filters, steps, rows",
    [(16, 32, 8, 8), (16, 16, 4, 4), (8, 16, 8, 8), (4, 8, 2, 2), (16, 16, 6, 2), (8, 8, 12, 4)],
)
def test_vectors_across_the_rows_are_stored_as_rows(
    env: Env, workload: ops.Workload, vector: int, filters: int, steps: int, rows: int
) -> None:
    """Each chunk of ``rows`` points along t is transposed (log2(rows)
    rounds of ``rows`` shuffles) and stored as one row of ``rows`` steps per
    filter; no lane is stored alone; the output equals numpy's."""
    candidate = _along_filters(workload, vector, filters, steps)
    verdict = check_candidate(workload, candidate, env.info)
    assert verdict.ok, verdict.reasons
    program = lower(workload, candidate, env.info)
    kernel = _kernel(program)
    chunks = (filters // vector) * (steps // rows)
    assert kernel.count("shuffle2(") == chunks * rows * (rows.bit_length() - 1)
    assert kernel.count(f"vstore{rows}(") == chunks * vector
    assert "lanes.s" not in kernel
    inputs = workload.make_inputs(3)
    outputs, _ = run(env, program, inputs, build(env, program))
    np.testing.assert_allclose(outputs["Y"], workload.reference(inputs)["Y"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "steps, why",
    [(1, "one step per block: nothing to make rows of"), (5, "24 steps in blocks of 5 overshoot")],
)
def test_blocks_without_rows_store_lane_by_lane(env: Env, steps: int, why: str) -> None:
    """Blocks whose step count has no factor of two, or that overshoot the
    output (tested stores), keep the lane-by-lane store, and stay exact."""
    candidate = _along_filters(CONV1D, 16, 16, steps)
    assert check_candidate(CONV1D, candidate, env.info).ok
    program = lower(CONV1D, candidate, env.info)
    kernel = _kernel(program)
    assert "shuffle2(" not in kernel, why
    assert "lanes.s" in kernel, why
    inputs = CONV1D.make_inputs(4)
    outputs, _ = run(env, program, inputs, build(env, program))
    np.testing.assert_allclose(outputs["Y"], CONV1D.reference(inputs)["Y"], rtol=1e-5, atol=1e-5)


def test_a_blocked_output_keeps_its_vector_stores(env: Env) -> None:
    """An output whose layout holds the filters side by side (blocked by the
    vector) stores whole vectors: no transpose."""
    candidate = _along_filters(CONV1D, 16, 32, 8)
    layouts = dict(candidate.layouts)
    layouts["Y"] = L.block(CONV1D.output.shape, 0, 16)
    blocked = Candidate.make(layouts, candidate.knob_map)
    program = lower(CONV1D, blocked, env.info)
    kernel = _kernel(program)
    assert "shuffle2(" not in kernel
    assert kernel.count("vstore16(") == 16
