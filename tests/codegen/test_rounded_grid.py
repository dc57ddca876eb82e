"""A work-group need not divide the blocks of its NDRange dimension: the
launch rounds the dimension up to whole work-groups and the work-items past
the last block return before anything else, so every block is computed once
and nothing is stored outside the output. Kernels of sub-group block reads
and staged kernels keep their exact grids."""

from __future__ import annotations

import numpy as np
import pytest

from laytune.codegen import lower
from laytune.ops import matmul
from laytune.space import Candidate, SearchSpace, baseline_knobs
from laytune.space._check import check_candidate
from tests.codegen.harness import Env, build, run


@pytest.mark.parametrize(
    ("knobs", "grid"),
    [
        # 5 blocks of 8 rows in groups of 4, 9 blocks of 8 columns in groups of 4
        ({"block.i": 8, "block.j": 8, "group.i": 4, "group.j": 4}, (12, 8)),
        # vectors along the columns, the last block overlapping the one before it
        (
            {"block.i": 8, "block.j": 16, "vector_axis": "j", "vector": 8, "group.i": 16},
            (5, 16),
        ),
        # one point per item, walking C's physical order: 2880 items in groups of 128
        ({"order": "C", "group.j": 128}, (2944,)),
    ],
    ids=["blocks", "overlapping-vectors", "physical-order"],
)
def test_a_work_group_that_does_not_divide_its_blocks_computes_each_once(
    env: Env, knobs: dict[str, object], grid: tuple[int, ...]
) -> None:
    workload = matmul(40, 72, 24)
    space = SearchSpace(workload, env.info)
    ones = {name: 1 for name in knobs if name.startswith("group.")}
    groups = {"group.i": 1, "group.j": 1, **ones, **knobs}
    candidate = Candidate.make(
        dict(space.identity().layouts), {**baseline_knobs(workload), **groups}
    )
    assert check_candidate(workload, candidate, env.info).ok
    program = lower(workload, candidate, env.info)
    (launch,) = program.compute
    assert launch.global_size == grid
    assert all(g % size == 0 for g, size in zip(launch.global_size, launch.local_size, strict=True))
    assert "past the last block" in program.source
    inputs = workload.make_inputs(5)
    outputs, _ = run(env, program, inputs, build(env, program))
    np.testing.assert_allclose(outputs["C"], workload.reference(inputs)["C"], rtol=1e-5, atol=1e-5)


def test_a_dividing_work_group_launches_no_item_past_the_blocks(env: Env) -> None:
    workload = matmul(64, 64, 16)
    space = SearchSpace(workload, env.info)
    knobs = {**baseline_knobs(workload), "block.i": 8, "group.i": 8, "group.j": 4}
    program = lower(workload, Candidate.make(dict(space.identity().layouts), knobs), env.info)
    assert program.compute[0].global_size == (64, 8)
    assert "past the last block" not in program.source
