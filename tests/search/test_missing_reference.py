"""Why a best has no layout reference: said, not just 'not measured'."""

from __future__ import annotations

import dataclasses

from laytune import ops
from laytune.search import (
    TuneResult,
    layout_reference,
    missing_reference,
    speedup_text,
    standard_candidates,
)
from laytune.space import SearchSpace

CONV2D = ops.conv2d(1, 16, 14, 14, 16, 3, 1, 1)


def test_a_conv2d_best_says_why_identity_layouts_are_no_reference(laytune_device) -> None:
    space = SearchSpace(CONV2D, laytune_device.info)
    # the standard starts vectorise along the filters over channel-blocked layouts
    best = next(
        c
        for c in standard_candidates(space, 6)
        if c.knob("vector_axis") == "f" and layout_reference(space, c) is None
    )
    why = missing_reference(space, best)
    assert why.startswith("identity layouts with the same knobs are not a candidate: ")
    assert f"vector {best.knob('vector')} along 'f'" in why
    line = speedup_text(None, None, "from the layouts", why)
    assert line == f"- from the layouts (no reference: {why})"
    assert "not measured" not in line


def test_the_summary_carries_the_reason() -> None:
    from laytune.records import Record
    from laytune.space import Candidate

    record = Record("copy(shape=4;float32)", "d", Candidate.make({}, {}), "ok", value_s=1e-3)
    result = TuneResult(
        workload_key=record.workload_key,
        device_key="d",
        device_name="dev",
        study_name="s",
        strategy="tpe",
        database="sqlite://",
        best=record,
        baseline=None,
        reference=None,
        measured=1,
        references=0,
        cached=0,
        failures={},
        stop_reason="done",
        elapsed_s=0.1,
    )
    assert "- from the layouts (not measured: identity layouts, the same knobs)" in (
        result.summary()
    )
    why = "identity layouts with the same knobs are not a candidate: because"
    told = dataclasses.replace(result, no_reference=why).summary()
    assert f"- from the layouts (no reference: {why})" in told
