"""The demo jobs (``laytune tune --demo``): the first is a case where the
layouts win end to end, the second one where identity layouts do."""

from __future__ import annotations

import pytest

import laytune
from laytune.search import demos


@pytest.mark.slow
def test_the_first_demo_is_won_by_the_layout_its_caller_holds(tmp_path) -> None:
    demo = demos()[0]
    options = laytune.TuneOptions(trials=6, batch=3, boundary=dict(demo.boundary))
    result = laytune.tune(
        demo.workload, options=options, database=f"sqlite:///{tmp_path}/d.db", progress=False
    )
    assert result.best is not None and result.reference is not None
    assert str(result.best.candidate.layout("A").index_map) == "lambda i, j: [j, i]"
    assert result.layout_speedup is not None and result.layout_speedup >= 1.3
    explained = result.explain()
    assert explained.startswith(f"why the layouts win {result.layout_speedup:.2f}x end to end")
    assert "the layout the caller holds it in" in explained


def test_the_demos_are_one_matmul_held_two_ways() -> None:
    first, second = demos()
    assert first.workload == second.workload
    assert dict(first.boundary) == {"A": "lambda i, j: [j, i]"} and not second.boundary
