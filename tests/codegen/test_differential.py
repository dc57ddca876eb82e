"""Differential testing: random valid candidates of the search space, run on
the device, against each workload's numpy reference."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import pytest

from laytune import ops
from laytune.codegen import lower
from laytune.space import SearchSpace, SpaceOptions
from tests.codegen.harness import (
    Env,
    RandomTrial,
    StagingTrial,
    VectorTrial,
    build_in_series,
    run,
)

WORKLOADS = [
    ops.copy((6, 40)),
    ops.transpose((8, 12, 16), (2, 0, 1)),
    ops.bias_add((2, 8, 4, 8), axis=1),
    ops.relu((12, 16)),
    ops.sum((16, 14), (1,)),
    ops.sum((4, 6, 8), (0, 2)),
    ops.max_pool2d(1, 4, 8, 8, 2, 2),
    ops.matmul(32, 48, 32),
    ops.conv2d(1, 4, 8, 8, 8, 3, stride=1, padding=1),
    ops.conv2d(2, 4, 9, 9, 4, 3, stride=2, padding=1),
    # shapes no register block, vector or tile divides: tails everywhere (prime
    # channels and widths; the conv's kernels build in a third of a 30 x 27 x 27's time)
    ops.matmul(100, 130, 70),
    ops.conv2d(1, 7, 13, 13, 11, 3, stride=1, padding=1),
]

CANDIDATES = 30
# the default space with register blocks of at most 16 outputs: every knob and
# family as a tuning job draws them, kernels small enough to compile quickly
OPTIONS = SpaceOptions(max_block_points=16)


def _families(candidate) -> set[str]:
    out = set()
    for _, layout in candidate.layouts:
        out.update(layout.family.split("+"))
    return out


def _check(env: Env, workload: ops.Workload, candidates: Sequence) -> int:
    inputs = workload.make_inputs(7)
    expected = workload.reference(inputs)
    ran = 0
    for index, candidate in enumerate(candidates):
        program = lower(workload, candidate, env.info)  # the space offers only what lowers
        outputs, _ = run(env, program, inputs, build_in_series(env, program, index))
        for name, want in expected.items():
            np.testing.assert_allclose(
                outputs[name],
                want,
                rtol=1e-4,
                atol=1e-4,
                err_msg=f"{candidate.describe()}\n{program.source}",
            )
        ran += 1
    return ran


@functools.cache  # the coverage test below reads the same draws (spaces take seconds)
def _random_candidates(workload: ops.Workload, info) -> tuple:
    space = SearchSpace(workload, info, OPTIONS)
    drawn = [space.suggest(RandomTrial(seed)) for seed in range(CANDIDATES)]
    drawn += [space.suggest(VectorTrial(seed)) for seed in range(10)]
    return tuple(dict.fromkeys(drawn))


@pytest.mark.slow
@pytest.mark.parametrize("workload", WORKLOADS, ids=lambda w: w.key)
def test_random_candidates_match_the_reference(env: Env, workload: ops.Workload) -> None:
    assert _check(env, workload, _random_candidates(workload, env.info)) >= CANDIDATES


STAGED = [
    ops.matmul(32, 48, 32),
    ops.conv2d(1, 4, 8, 8, 8, 3, stride=1, padding=1),
    ops.conv2d(2, 4, 9, 9, 4, 3, stride=2, padding=1),  # 5 x 5 outputs in 8 x 8 blocks
    ops.conv2d(1, 3, 12, 20, 4, 3, stride=1, padding=0),  # 10 x 18 outputs in 16 x 4 blocks
    ops.max_pool2d(1, 4, 8, 8, 2, 2),
]


@functools.cache
def _staged_candidates(workload: ops.Workload, info) -> tuple:
    space = SearchSpace(workload, info, OPTIONS)
    candidates = [space.suggest(StagingTrial(seed)) for seed in range(10)]
    return tuple(dict.fromkeys(c for c in candidates if c.knob("local_stage")))


@pytest.mark.parametrize("workload", STAGED, ids=lambda w: w.key)
def test_local_staging_candidates_match_the_reference(env: Env, workload: ops.Workload) -> None:
    staged = _staged_candidates(workload, env.info)
    assert len(staged) >= 8
    _check(env, workload, staged)  # every one lowers and matches the reference


def test_the_candidates_covered_every_family_and_knob(env: Env) -> None:
    """What the draws of the tests above exercise (the same seeded draws)."""
    drawn = [(w, c) for w in WORKLOADS for c in _random_candidates(w, env.info)]
    drawn += [(w, c) for w in STAGED for c in _staged_candidates(w, env.info)]
    families = set().union(*(_families(c) for _, c in drawn))
    assert {"permute", "pad_rows", "pad_every", "swizzle", "block", "tile", "texture"} <= families
    assert {1, 2, 4} <= {c.knob("vector") for _, c in drawn}
    assert {c.knob("pad_mode") for _, c in drawn} == {"guard", "overcompute"}
    # vectors along an axis other than the innermost, register blocks over several axes
    # (with tails), work-groups in two dimensions, split and reordered reduce loops
    inner = {w.key: w.axes[w.spatial_axes[-1]].name for w, _ in drawn}
    assert any(c.knob("vector_axis") not in ("", inner[w.key]) for w, c in drawn)
    assert any(sum(v > 1 for k, v in c.knobs if k.startswith("block.")) >= 2 for _, c in drawn)
    assert any(
        any(w.axes[k].extent % c.knob(f"block.{w.axes[k].name}") for k in w.spatial_axes)
        for w, c in drawn
    )
    assert any(sum(v > 0 for k, v in c.knobs if k.startswith("group.")) >= 2 for _, c in drawn)
    assert any(c.knob("split") > 1 for _, c in drawn)
    assert any(c.knob("reduce_order") for _, c in drawn)
    assert {c.knob("order") != "logical" for _, c in drawn} == {True, False}
    staged = [(w, c) for w, c in drawn if c.knob("local_stage")]
    assert {"matmul", "conv2d", "max_pool2d"} <= {w.name for w, _ in staged}
    local_families = {
        layout.family for _, c in staged for name, layout in c.layouts if name.endswith(".local")
    }
    assert {"identity", "pad_rows", "row_xor"} <= local_families
