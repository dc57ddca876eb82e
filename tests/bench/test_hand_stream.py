"""bench.hand_stream's edited kernels read the next panel and still compute
the matmul: laytune's runner verifies each against numpy, warm and cold."""

from __future__ import annotations

import dataclasses

import pytest

from bench.hand_stream import generated, measure, panel_candidate, report, variants
from laytune import ops
from laytune.codegen import lower
from laytune.runners import default_device
from laytune.space import check_candidate


def test_the_edited_kernels_read_the_next_panel_and_match_numpy() -> None:
    device = default_device()
    lanes = device.info.float_lanes()
    m, n, k = 32, 8 * lanes, 64
    workload = ops.matmul(m, n, k)
    candidate = panel_candidate(workload, lanes, group=4)
    assert check_candidate(workload, candidate, device.info).ok
    programs = variants(lower(workload, candidate, device.info), workload, lanes, group=4)
    assert set(programs) == {"plain", "touch next panel", "prefetch() next panel"}
    assert "dummy += *(B + (min(j_blk + 1, 3)" in programs["touch next panel"].source
    assert "acc0 += dummy * 0.0f;" in programs["touch next panel"].source
    assert "prefetch(B + (min(j_blk + 1, 3)" in programs["prefetch() next panel"].source
    results = measure(device, workload, programs, rounds=1, repeats=1)  # raises unless verified
    assert set(results) == {"warm", "cold"}
    lines = report(results, 2 * m * n * k, "matmul", device.info.name)
    assert len(lines) == 4 + 3 and lines[4].startswith("| plain |")


def test_the_generated_prefetch_joins_where_the_weights_outgrow_the_cache() -> None:
    device = default_device()
    lanes = device.info.float_lanes()
    workload = ops.matmul(32, 8 * lanes, 64)  # 32 KiB of weights on AVX-512
    candidate = panel_candidate(workload, lanes, group=4)
    small = dataclasses.replace(device.info, cache_size=4 * 64 * 8 * lanes // 2)
    assert generated(workload, candidate, device.info) == {}  # they fit: not offered
    (program,) = generated(workload, candidate, small).values()
    assert "__builtin_prefetch(B + " in program.source
    results = measure(
        device, workload, {"plain": lower(workload, candidate, small), "g": program}, 1, 1
    )
    assert set(results["warm"]) == {"plain", "g"}  # both verified against numpy


def test_a_kernel_without_the_expected_reduce_loop_is_refused_by_name() -> None:
    device = default_device()
    lanes = device.info.float_lanes()
    workload = ops.matmul(32, 8 * lanes, 64)
    program = lower(workload, panel_candidate(workload, lanes, group=4), device.info)
    unrolled = dataclasses.replace(program, source=program.source.replace("++k", "k += 1"))
    with pytest.raises(
        SystemExit, match=r"reduce loop is not one 'for \(int k = 0; k < 64; \+\+k\) \{'"
    ):
        variants(unrolled, workload, lanes, group=4)
