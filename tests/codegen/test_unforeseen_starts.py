"""Statements and shapes the starts were not written around: a 1-D
convolution (its filters ``W[f, c, k]`` blocked along both channel axes, as a
2-D window's are), contractions whose output columns the device's vector
lanes do not divide (a 127 x 257 matmul), whose first starts keep the full
lanes with an overlapping last block, and statements that read an input twice
or broadcast their output. Each start is in the space, and its kernel matches
numpy on the device."""

from __future__ import annotations

import numpy as np

from laytune import ops
from laytune.codegen import lower
from laytune.layout import block, compose, identity, permute
from laytune.ops import Workload
from laytune.search import params_of, standard_candidates
from laytune.search._starts import simd_lanes
from laytune.space import SearchSpace
from tests.codegen.harness import Env, build, cpu_form, run


def _matches_numpy(env: Env, workload: Workload, candidate: object, seed: int) -> None:
    program = lower(workload, candidate, env.info)
    inputs = workload.make_inputs(seed)
    outputs, _ = run(env, program, inputs, build(env, program))
    name = workload.output.name
    np.testing.assert_allclose(
        outputs[name], workload.reference(inputs)[name], rtol=1e-4, atol=1e-4
    )


def _conv1d(filters: int, channels: int, steps: int, padding: int) -> Workload:
    """``Y[n, f, t] += X[n, c, t + k - padding] * W[f, c, k]``, kernel 3."""
    shift = f" - {padding}" if padding else ""
    return Workload.define(
        "conv1d",
        f"Y[n, f, t] += X[n, c, t + k{shift}] * W[f, c, k]",
        {"n": 1, "f": filters, "t": steps - 2 + 2 * padding, "c": channels, "k": 3},
        {"X": (1, channels, steps), "W": (filters, channels, 3)},
        weights=("W",),
    )


def test_a_one_dimensional_convolution_gets_the_direct_convolution(env: Env) -> None:
    lanes = simd_lanes(env.info)
    channels = 2 * lanes
    conv1d = _conv1d(channels, channels, 32, padding=0)
    space = SearchSpace(conv1d, env.info)
    first = standard_candidates(space, 1)[0]
    assert first.knob("vector_axis") == "f"
    # OIW[lanes]i[f]o: each step of the channels reads the work-item's filters in one run
    inner = block((channels, channels, 3), 1, lanes)
    run = first.knob("block.f")
    assert run % lanes == 0 and channels % run == 0
    assert first.layout("W") == compose(block(inner.physical_shape, 0, run), inner)
    assert first.layout("X") == block((1, channels, 32), 1, lanes)
    _matches_numpy(env, conv1d, first, seed=1)


def test_an_unpadded_window_also_starts_from_runs_along_its_rows(env: Env) -> None:
    """After the direct convolution and its twin: every layout as it is,
    vectors along the output's rows (the activations read as runs from any
    start, the last block overlapping), as many filters as fill the
    registers; nothing is converted per call. A padded window's runs would
    read outside the activations, so its space does not hold them."""
    lanes = simd_lanes(env.info)
    conv1d = _conv1d(16, 8, 2 * lanes + 5, padding=0)
    runs = [
        start
        for start in standard_candidates(SearchSpace(conv1d, env.info), 8)
        if start.knob("vector_axis") == "t"
        and all(layout.is_identity for _, layout in start.layouts)
    ]
    assert [start.knob("block.t") for start in runs[:2]] == [2 * lanes, lanes]
    for seed, start in enumerate(runs[:2]):
        _matches_numpy(env, conv1d, start, seed=seed)
    padded = _conv1d(16, 8, 2 * lanes + 5, padding=1)
    assert not any(
        start.knob("vector_axis") == "t"
        for start in standard_candidates(SearchSpace(padded, env.info), 8)
    )


def _odd(lanes: int) -> int:
    return 2 * lanes + 5  # no power of two from 2 up divides it


def test_columns_the_lanes_do_not_divide_keep_full_vectors(env: Env) -> None:
    """The first start runs full-width vectors along the 2L + 5 columns, its
    last block overlapping the one before it, the left operand packed in
    blocks of rows and the right one read as it is (a panel holds no
    unaligned runs); before, the starts narrowed the vectors to 4 lanes. The
    depth of 19 is unrolled with a loop of single steps after."""
    info = cpu_form(env.info)  # the start's CPU form (a GPU's: test_lockstep_starts)
    lanes = simd_lanes(info)
    rows, columns, depth = 29, _odd(lanes), 19  # 29: 8- and 6-row blocks pad it little
    matmul = Workload.define(
        "odd_matmul",
        "C[i, j] += A[i, k] * B[k, j]",
        {"i": rows, "j": columns, "k": depth},
        {"A": (rows, depth), "B": (depth, columns)},
    )
    space = SearchSpace(matmul, info)
    starts = standard_candidates(space, 4)
    assert all(params_of(space, start) is not None for start in starts)
    first = starts[0]
    assert first.knob("vector") == lanes and first.knob("block.j") % lanes == 0
    assert first.layout("A") == block((rows, depth), 0, first.knob("block.i"))
    assert first.layout("B") == identity((depth, columns))
    # the prime depth unrolled all the same, its last steps one by one
    unroll = first.knob("unroll")
    assert unroll > 1 and depth % unroll
    assert f"/* the last {depth % unroll} of {depth} */" in lower(matmul, first, info).source
    _matches_numpy(env, matmul, first, seed=2)


def test_a_transposed_right_operand_is_permuted_to_hold_runs_along_the_columns(
    env: Env,
) -> None:
    """Attention's scores ``S = Q K^T`` read ``K[b, j, k]`` across the columns
    ``j``: with 2L + 5 of them the first start lays ``K`` out as ``[b, k, j]``."""
    info = cpu_form(env.info)  # the start's CPU form (a GPU's: test_lockstep_starts)
    lanes = simd_lanes(info)
    keys = _odd(lanes)
    scores = Workload.define(
        "scores",
        "S[b, i, j] += Q[b, i, k] * K[b, j, k]",
        {"b": 2, "i": 9, "j": keys, "k": 8},
        {"Q": (2, 9, 8), "K": (2, keys, 8)},
    )
    first = standard_candidates(SearchSpace(scores, info), 1)[0]
    assert first.layout("K") == permute((2, keys, 8), (0, 2, 1))
    assert first.knob("vector") == lanes
    _matches_numpy(env, scores, first, seed=3)


def test_statements_that_read_an_input_twice_or_broadcast_their_output_run(env: Env) -> None:
    """GELU and a sum of squares read ``X`` twice at the same point, and a
    row's sum spread along an axis no input reads: their starts' kernels
    match numpy (each read is one load of the one input)."""
    workloads = [
        Workload.define(
            "gelu",
            "Y[i, j] = X[i, j] * (1.0 + erf(X[i, j] * 0.7071067811865476)) * 0.5",
            {"i": 8, "j": 40},
            {"X": (8, 40)},
        ),
        Workload.define("squares", "Y[i] += X[i, j] * X[i, j]", {"i": 8, "j": 64}, {"X": (8, 64)}),
        Workload.define("spread", "G[i, j] += X[i, k]", {"i": 8, "j": 5, "k": 16}, {"X": (8, 16)}),
    ]
    for seed, workload in enumerate(workloads):
        starts = standard_candidates(SearchSpace(workload, env.info), 2)
        assert starts
        for start in starts:
            _matches_numpy(env, workload, start, seed=seed)


def test_an_innermost_axis_shorter_than_every_profile_still_gets_starts(env: Env) -> None:
    """An im2col's gather (``kw`` of 3 innermost, the window's padding read
    as zeros): the plain profiles' blocks of 4 to 16 are cut to the axis, so
    the job starts from a derived candidate, not from sampling alone; it
    matches numpy."""
    im2col = Workload.define(
        "im2col",
        "C[oh, ow, c, kh, kw] = X[c, oh + kh - 1, ow + kw - 1]",
        {"oh": 6, "ow": 5, "c": 8, "kh": 3, "kw": 3},
        {"X": (8, 6, 5)},
    )
    space = SearchSpace(im2col, env.info)
    starts = standard_candidates(space, 4)
    assert starts and all(params_of(space, start) is not None for start in starts)
    assert starts[0].knob("block.kw") == 3
    _matches_numpy(env, im2col, starts[0], seed=4)


def test_a_matrix_vector_product_starts_with_dot_products_of_row_blocks(env: Env) -> None:
    """One output column cannot fill a vector: the first starts take a block of
    rows per work-item, each row's dot product in vectors along ``k`` (both
    operands hold it contiguously: the vector ``B[k, 0]`` too), sharing each
    vector of ``B`` between the rows; a scalar 8 x 1 block was the first
    start before (2.55 against 1.98 ms at 4096 x 4096)."""
    info = cpu_form(env.info)  # the start's CPU form (a GPU's: test_lockstep_starts)
    lanes = simd_lanes(info)
    gemv = ops.matmul(64, 1, 12 * lanes)
    space = SearchSpace(gemv, info)
    starts = standard_candidates(space, 3)
    first = starts[0]
    assert first.knob("reduce_vector") == lanes and first.knob("block.i") == 4
    assert first.knob("unroll") == 2 and first.knob("vector") == 1
    assert all(layout.family == "identity" for _, layout in first.layouts)  # nothing packed
    assert all(s.knob("reduce_vector") > 1 for s in starts)
    for seed, start in enumerate(starts):
        _matches_numpy(env, gemv, start, seed=seed)
    # with columns enough for a vector, the outer product's blocks lead as before
    wide = standard_candidates(SearchSpace(ops.matmul(64, 2 * lanes, 96), info), 1)[0]
    assert wide.knob("reduce_vector") == 1 and wide.knob("vector") > 1


def test_a_vector_by_a_matrix_spends_the_rows_registers_on_columns(env: Env) -> None:
    """One row of output: the blocks sized for 8 rows by 2 or 3 vectors would
    hold 2 or 3 accumulators; the starts widen them to the columns the
    missing rows' registers would have held (1 x 4096 x 4096: 64 columns per
    work-item, 3.41 ms in a 16-trial job, where 16 columns took 7.83)."""
    info = cpu_form(env.info)  # the start's CPU form (a GPU's: test_lockstep_starts)
    lanes = simd_lanes(info)
    gevm = ops.matmul(1, 32 * lanes, 48)
    first = standard_candidates(SearchSpace(gevm, info), 1)[0]
    assert first.knob("block.i") == 1 and first.knob("vector") == lanes
    columns = first.knob("block.j")
    assert columns > 3 * lanes and columns % lanes == 0
    assert columns // lanes <= info.block_registers()
    _matches_numpy(env, gevm, first, seed=3)
