"""bench.nchw16c_profile: the ablated tile kernel keeps every load and store
and drops the shuffles, for the NCHW16c unpack and for the 2-D transpose."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import nchw16c_profile
from laytune import layout as L
from laytune.codegen._convert import conversion_kernel
from laytune.space import Candidate, ConversionWorkload

pytestmark = pytest.mark.xdist_group("opencl")


@pytest.mark.parametrize(
    ("workload", "knobs"),
    [
        (
            ConversionWorkload(L.block((1, 32, 8, 16), 1, 16), L.identity((1, 32, 8, 16))),
            nchw16c_profile.TILE,
        ),
        (
            ConversionWorkload(L.identity((32, 32)), L.permute((32, 32), (1, 0))),
            {**nchw16c_profile.TILE, "axis": 0},
        ),
    ],
)
def test_the_ablation_keeps_the_memory_traffic_and_drops_the_shuffles(workload, knobs) -> None:
    source = conversion_kernel(workload, Candidate.make({}, knobs)).source
    ablated = nchw16c_profile.without_shuffles(source)
    assert "shuffle2(" in source and "shuffle2(" not in ablated
    for access in ("vload", "vstore", "__builtin_nontemporal_store"):
        assert ablated.count(access) == source.count(access)


def test_the_transpose_profile_runs_and_checks_its_kernels(tmp_path: Path, capsys) -> None:
    out = tmp_path / "profile.md"
    nchw16c_profile.main(
        ["--transpose", "--shapes", "256,256", "--repeats", "1", "--rounds", "1", "--out", str(out)]
    )
    text = out.read_text()
    assert text.startswith("# 2-D transpose: where its time goes")
    for row in ("256,256: generic", "256,256: tile 16x16 |", "no shuffles", ": local "):
        assert row in text
