"""Differential testing: random valid candidates of the search space, run on
the device, against each workload's numpy reference."""

from __future__ import annotations

import numpy as np
import pytest

from laytune import ops
from laytune.codegen import lower
from laytune.exceptions import LayoutRejectedError
from laytune.space import SearchSpace
from tests.codegen.harness import Env, RandomTrial, StagingTrial, build, run

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
]

CANDIDATES = 30
STAGING_RULES = ("work_group * per_item", "local staging walks the logical order", "on local tile")
SEEN: dict[str, set] = {"families": set(), "vector": set(), "pad_mode": set(), "order": set()}


def _families(candidate) -> set[str]:
    out = set()
    for _, layout in candidate.layouts:
        out.update(layout.family.split("+"))
    return out


def _check(env: Env, workload: ops.Workload, candidates: list) -> int:
    inputs = workload.make_inputs(7)
    expected = workload.reference(inputs)
    ran = 0
    for candidate in candidates:
        try:
            program = lower(workload, candidate, env.info)
        except LayoutRejectedError as err:
            # only the staging rules are stricter than the space's joint rules
            assert any(rule in str(err) for rule in STAGING_RULES), str(err)
            continue
        outputs, _ = run(env, program, inputs, build(env, program))
        for name, want in expected.items():
            np.testing.assert_allclose(
                outputs[name],
                want,
                rtol=1e-4,
                atol=1e-4,
                err_msg=f"{candidate.describe()}\n{program.source}",
            )
        ran += 1
        SEEN["families"] |= _families(candidate)
        SEEN["vector"].add(candidate.knob("vector"))
        SEEN["pad_mode"].add(candidate.knob("pad_mode"))
        SEEN["order"].add(candidate.knob("order") != "logical")
    return ran


@pytest.mark.parametrize("workload", WORKLOADS, ids=lambda w: w.key)
def test_random_candidates_match_the_reference(env: Env, workload: ops.Workload) -> None:
    space = SearchSpace(workload, env.info)
    candidates = list(
        dict.fromkeys(space.suggest(RandomTrial(seed)) for seed in range(CANDIDATES + 10))
    )
    ran = _check(env, workload, candidates[: CANDIDATES + 10])
    assert ran >= CANDIDATES


def test_local_staging_candidates_match_the_reference(env: Env) -> None:
    workload = ops.matmul(32, 48, 32)
    space = SearchSpace(workload, env.info)
    candidates = [space.suggest(StagingTrial(seed, 16 * 16)) for seed in range(12)]
    staged = [c for c in candidates if c.knob("local_stage")]
    assert len(staged) >= 10
    ran = _check(env, workload, staged)
    assert ran >= 8
    locals_ = {c.layout("B.local").family for c in staged} | {
        c.layout("A.local").family for c in staged
    }
    assert {"pad_rows", "swizzle"} <= locals_


def test_the_candidates_covered_every_family_and_knob() -> None:
    """Runs after the tests above (file order): what the random draws exercised."""
    if not SEEN["families"]:
        pytest.skip("run with the differential tests above")
    assert {"permute", "pad_rows", "pad_every", "swizzle", "block", "tile", "texture"} <= SEEN[
        "families"
    ]
    assert {1, 2, 4} <= SEEN["vector"]
    assert SEEN["pad_mode"] == {"guard", "overcompute"}
    assert SEEN["order"] == {True, False}
