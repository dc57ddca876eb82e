"""The register-blocked kernels: what the generator emits for the classics
(packed-panel matmul, NCHW16c direct convolution), and that they compute
the reference, tails included."""

from __future__ import annotations

import re

import numpy as np

from laytune import layout as L
from laytune import ops
from laytune.codegen import lower, plan_nest
from laytune.space import Candidate, baseline_knobs
from tests.codegen.harness import Env, run


def _candidate(workload: ops.Workload, layouts: dict, knobs: dict) -> Candidate:
    base = {b.name: L.identity(b.shape) for b in workload.buffers}
    return Candidate.make({**base, **layouts}, {**baseline_knobs(workload), **knobs})


def _packed_matmul(m: int, n: int, k: int, mr: int = 6, nr: int = 16) -> tuple:
    workload = ops.matmul(m, n, k)
    layouts = {
        "A": L.block(workload.buffer("A").shape, 0, mr),  # [i // MR, k, i % MR]
        "B": L.panel(workload.buffer("B").shape, 1, nr),  # [j // NR, k, j % NR]
    }
    knobs = {"vector_axis": "j", "vector": nr, "block.i": mr, "block.j": nr}
    return workload, _candidate(workload, layouts, knobs)


def _loop_body(source: str) -> str:
    """The innermost reduce loop's body of the compute kernel."""
    kernel = source[source.index("_compute(") :]
    start = kernel.index("for (int k = 0;")
    return kernel[start : kernel.index("\n    }\n", start)]


def _check(env: Env, workload: ops.Workload, candidate: Candidate) -> str:
    program = lower(workload, candidate, env.info)
    inputs = workload.make_inputs(3)
    outputs, _ = run(env, program, inputs)
    expected = workload.reference(inputs)
    for name, want in expected.items():
        np.testing.assert_allclose(outputs[name], want, rtol=1e-4, atol=1e-4)
    return program.source


def test_packed_panels_give_the_micro_kernel(env: Env) -> None:
    workload, candidate = _packed_matmul(24, 32, 16)
    source = _check(env, workload, candidate)
    body = _loop_body(source)
    # per k: one 16-wide load of B, six scalars of A (contiguous in the panel), six fmas
    assert body.count("vload16(") == 1
    assert len(re.findall(r"const float vA\d+ = A\[", body)) == 6
    assert body.count("fma((float16)(vA") == 6
    assert "?" not in body  # no index tests: every block is whole
    assert "A[i_blk * 96 + k * 6 + 5]" in body
    assert "vload16(0, B + ((j_blk << 8) + (k << 4)))" in body
    assert "__attribute__((vec_type_hint(float16)))" in source
    assert source.count("vstore16(") == 6
    program = lower(workload, candidate, env.info)
    assert program.compute[0].global_size == (2, 4)  # j blocks, i blocks
    assert program.compute[0].local_size is None


def test_a_tail_is_read_in_padding_or_overlaps_the_block_before_it(env: Env) -> None:
    workload, candidate = _packed_matmul(100, 48, 8)  # 100 rows: 17 blocks of 6, 2 rows over
    source = _check(env, workload, candidate)
    body = _loop_body(source)
    # the packed A holds the two padding rows: reading them needs no test,
    # and the blocks keep their panel-aligned starts
    assert "?" not in body
    assert "A[i_blk * 48 + k * 6 + 5]" in body
    # the stores of the two rows past the end are tested
    assert "if ((i_blk * 6 + 4) < 100) vstore16(acc4" in source
    assert "if ((i_blk * 6 + 5) < 100) vstore16(acc5" in source
    assert source.count(" < 100) vstore16(") == 2
    row_major = _candidate(
        workload, {}, {"vector_axis": "j", "vector": 16, "block.i": 6, "block.j": 16}
    )
    source = _check(env, workload, row_major)
    # row-major A ends at row 99, where an overshooting block would test its
    # loads of the rows past it at every step of k: the last block starts at
    # row 94 instead, overlapping the one before it, and nothing is tested
    assert "const int i0 = min(i_blk * 6, 94);" in source
    assert "?" not in _loop_body(source)
    assert " < 100)" not in source


def test_overlapping_tails_compute_the_reference(env: Env) -> None:
    """Blocks that do not divide their axes, over operands that end there:
    every tail overlaps the block before it, and the outputs are exact."""
    matmul = ops.matmul(29, 40, 19)
    window = ops.conv2d(1, 5, 9, 11, 6, 3, stride=1, padding=0)  # 7 x 9 outputs
    cases = [
        (matmul, {"vector_axis": "j", "vector": 8, "block.i": 8, "block.j": 24}),
        (
            matmul,
            {
                "vector_axis": "j",
                "vector": 4,
                "block.i": 3,
                "block.j": 12,
                "group.i": 2,
                "group.j": 1,
            },
        ),
        (window, {"vector_axis": "ow", "vector": 4, "block.ow": 8, "block.oh": 3, "block.f": 4}),
        (window, {"block.oh": 2, "block.ow": 4, "block.f": 4}),
    ]
    for workload, knobs in cases:
        source = _check(env, workload, _candidate(workload, {}, knobs))
        kernel = source[source.index("_compute(") :]
        assert "?" not in kernel, knobs
        overlapping = re.findall(r"const int (\w+)0 = min\(", kernel)
        assert overlapping, knobs


def _nchw16c(workload: ops.Workload, **knobs: object) -> Candidate:
    weights = L.block(workload.buffer("W").shape, 1, 16)
    layouts = {
        "X": L.block(workload.buffer("X").shape, 1, 16),
        "W": L.compose(L.block(weights.physical_shape, 0, 16), weights),
        "Y": L.block(workload.buffer("Y").shape, 1, 16),
    }
    base = {"vector_axis": "f", "vector": 16, "block.f": 16, "block.ow": 4, "split": 16}
    return _candidate(workload, layouts, {**base, **knobs})


def test_nchw16c_convolution_vectorises_the_output_channels(env: Env) -> None:
    workload = ops.conv2d(1, 32, 10, 10, 32, 3, stride=1, padding=1)
    source = _check(env, workload, _nchw16c(workload))
    assert "for (int c_blk = 0; c_blk < 2; ++c_blk)" in source
    assert "for (int c_in = 0; c_in < 16; ++c_in)" in source  # c // 16, kh, kw, c % 16
    assert source.count("vload16(0, W + ") == 1  # 16 output channels of one weight
    assert source.count("fma((float16)(vX") == 4  # 4 columns, X broadcast
    assert "? X[" in source  # the zero padding of the convolution


def test_peeling_runs_the_interior_without_tests(env: Env) -> None:
    workload = ops.conv2d(1, 16, 12, 12, 16, 3, stride=1, padding=1)
    candidate = _nchw16c(workload, peel=True, split=1, **{"reduce_order": "kh,kw,c"})
    source = _check(env, workload, candidate)
    kernel = source[source.index("_compute(") :]
    interior = kernel[
        kernel.index("/* inside every buffer: no tests */") : kernel.index("} else {")
    ]
    border = kernel[kernel.index("} else {") :]
    assert "?" not in interior and "? X[" in border
    # inside: rows 1 .. 10 and the block's four columns within 1 .. 10 for every kh, kw
    head = kernel[kernel.index("if (") : kernel.index("/* inside every buffer")]
    assert "(oh - 1) >= 0" in head and "(oh + 1) < 12" in head
    assert "((ow_blk << 2) + 4) < 12" in head


def test_two_dimensional_work_groups_are_required(env: Env) -> None:
    workload, candidate = _packed_matmul(24, 32, 16)
    knobs = {**candidate.knob_map, "group.j": 2, "group.i": 2}
    grouped = Candidate.make(candidate.layout_map, knobs)
    source = _check(env, workload, grouped)
    assert "reqd_work_group_size(2, 2, 1)" in source
    assert lower(workload, grouped, env.info).compute[0].local_size == (2, 2)
    nest = plan_nest(workload, knobs, grouped.layout_map, {})
    assert [d.axes for d in nest.grid] == [(1,), (0,)]  # j, then i
    assert nest.tile.blocks == (6, 16, 1)


def test_nontemporal_stores_of_the_output(env: Env) -> None:
    """``store='nontemporal'``: the output's vectors bypass the caches where
    the compiler has the built-in and the output (3 KiB here) would not stay
    in the last-level cache (a device of 4 KiB); a scalar kernel, a device
    without the built-in or one whose cache holds the output is refused with
    its reason."""
    import dataclasses

    from laytune.space import check_candidate

    workload, candidate = _packed_matmul(24, 32, 16)
    streaming = Candidate.make(candidate.layout_map, {**candidate.knob_map, "store": "nontemporal"})
    if not env.info.has_builtin("nontemporal_store"):
        reasons = check_candidate(workload, streaming, env.info).reasons
        assert any("__builtin_nontemporal_store" in r for r in reasons)
        return
    if env.info.holds(24 * 32 * 4):
        reasons = check_candidate(workload, streaming, env.info).reasons
        assert any("stays in" in r and "last-level cache" in r for r in reasons)
    env = dataclasses.replace(env, info=dataclasses.replace(env.info, last_level_cache_size=4096))
    source = _check(env, workload, streaming)
    kernel = source[source.index("_compute(") :].split("\n}")[0]
    assert kernel.count("__builtin_nontemporal_store(") == 6  # one float16 per row of C
    assert "vstore" not in kernel
    plain = dataclasses.replace(env.info, builtins=())
    assert any(
        "has no __builtin_nontemporal_store" in r
        for r in check_candidate(workload, streaming, plain).reasons
    )
    scalar = Candidate.make(
        candidate.layout_map, {**baseline_knobs(workload), "store": "nontemporal"}
    )
    assert any("no vector_axis" in r for r in check_candidate(workload, scalar, env.info).reasons)
