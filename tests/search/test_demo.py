"""The demo jobs (``laytune tune --demo``): the first is a case where the
layouts win end to end, the second one where identity layouts do; each
result says why."""

from __future__ import annotations

import re

import pytest

from laytune.records import Boundary, open_database
from laytune.runners import default_device
from laytune.search import demos


def test_the_demos_are_one_matmul_held_two_ways() -> None:
    first, second = demos()
    assert first.workload == second.workload
    assert dict(first.boundary) == {"A": "lambda i, j: [j, i]"} and not second.boundary


@pytest.mark.slow
def test_laytune_tune_demo_leads_with_a_layout_that_wins_and_says_why(tmp_path, capsys) -> None:
    from laytune.cli import main

    url = f"sqlite:///{tmp_path}/demo.db"
    assert main(["tune", "--demo", "--trials", "4", "--batch", "4", "--quiet", "--db", url]) == 0
    out = capsys.readouterr().out
    first, second = demos()
    held, row_major = out.split(second.title)
    assert first.title in held
    best = open_database(url).best(
        first.workload, default_device(), boundary=Boundary.of(first.workload, first.boundary)
    )
    held_map = Boundary.of(first.workload, first.boundary).policy("A").layout.index_map
    assert best.candidate.layout("A").index_map.equivalent(held_map, (256, 256))
    speedup = float(re.search(r"([0-9.]+)x from the layouts", held).group(1))
    assert speedup >= 1.3
    assert f"why the layouts win {speedup:.2f}x end to end" in held
    assert "the layout the caller holds it in" in held
    assert "\nwhy " in row_major  # the second job says why too
