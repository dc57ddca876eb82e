"""The knob table is the one list of knobs: the space's order, the names and
the rule steps all follow from it."""

from __future__ import annotations

import pytest

from laytune import ops
from laytune.space import KNOB_SPECS, knob_names
from laytune.space._knobs import knob_slots
from laytune.space._rules import STEPS, build_steps
from laytune.space._step import Setting
from tests.space.conftest import make_device

WORKLOADS = [
    ops.matmul(32, 32, 32),
    ops.matmul(32, 32, 32, dtype="float16"),
    ops.conv2d(1, 8, 8, 8, 8, 3, padding=1),
    ops.transpose((16, 8)),
    ops.max_pool2d(1, 4, 8, 8, 2, 2),
    ops.sum((8, 8), axes=(1,)),
]


def test_every_kind_of_knob_has_one_rule_step() -> None:
    assert set(STEPS) == {spec.name for spec in KNOB_SPECS}


@pytest.mark.parametrize("workload", WORKLOADS, ids=lambda w: w.key)
def test_the_steps_are_the_knobs_in_the_tables_order(workload: ops.Workload) -> None:
    setting = Setting(
        workload, make_device(), (1,), (1,), (0,), (1,), (1,), 128, None, ("logical",)
    )
    names = knob_names(workload)
    assert [step.name for step in build_steps(setting)] == list(names)
    kinds = [spec.name for _, spec, _ in knob_slots(workload)]
    # the kinds come in the table's order, blocks and work-groups interleaved per dimension
    table = [spec.name for spec in KNOB_SPECS]
    firsts = [k for i, k in enumerate(kinds) if k not in kinds[:i]]
    assert firsts == [k for k in table if k in kinds]
    assert ("matrix" in names) == (workload.dtype == "float16")
