"""The progress line a job prints first: the space's size, counted only up
to a cap, so that a space of trillions of candidates (a fused convolution
with a residual input) starts measuring at once instead of after minutes of
counting."""

from __future__ import annotations

import io
from dataclasses import replace
from types import SimpleNamespace

import pytest
from rich.console import Console

from laytune import layout as L
from laytune import ops
from laytune.ops import from_key
from laytune.search import _job
from laytune.space import ConversionSpace, ConversionWorkload, SearchSpace
from tests.search.devices import written_cpu


def _first_line(space: SearchSpace | ConversionSpace) -> str:
    out = io.StringIO()
    progress = _job.Progress(Console(file=out, width=400, force_terminal=False))
    job = SimpleNamespace(
        workload=space.workload,
        device=SimpleNamespace(name="a written CPU"),
        space=space,
        strategy="default",
        study_name="s",
    )
    progress.on_start(job)  # type: ignore[arg-type]
    return out.getvalue().splitlines()[0]


def test_a_small_space_prints_its_exact_size() -> None:
    space = SearchSpace(ops.transpose((8, 4)), written_cpu())
    assert len(space) < _job.COUNT_CAP
    assert f": {len(space):,} valid candidates" in _first_line(space)


def test_a_conversion_job_prints_its_size() -> None:
    """A conversion's space lists its candidates: its size is their count."""
    conversion = ConversionWorkload(L.identity((8, 8)), L.permute((8, 8), (1, 0)))
    space = ConversionSpace(conversion, written_cpu())
    assert f": {len(space):,} valid candidates" in _first_line(space)


def test_a_large_space_is_counted_only_up_to_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    space = SearchSpace(ops.transpose((8, 4)), written_cpu())
    monkeypatch.setattr(_job, "COUNT_CAP", 10)
    assert len(space) > 10
    assert ": over 10 valid candidates" in _first_line(space)


def test_a_fused_residual_convolution_starts_without_counting_its_space() -> None:
    """262 trillion candidates over 2487 combinations of layout facts: an
    exact count took 170 s on a 2-core Xeon before the first trial; the
    capped one a fraction of a second."""
    space = SearchSpace(
        from_key(
            "conv2d(batch=1,in_channels=128,height=28,width=28,filters=128,kernel=3,stride=1,"
            "padding=1;float32)+epilogue[max(((acc + B[f]) + B1[n, f, oh, ow]), 0.0)]"
        ),
        written_cpu(),
    )
    assert f"over {_job.COUNT_CAP:,} valid candidates" in _first_line(space)


def test_a_job_whose_weights_outgrow_the_cache_says_it_is_timed_cold() -> None:
    conv = ops.conv2d(1, 64, 8, 8, 64, 3, padding=1)  # W: 144 KiB of weights
    small = replace(written_cpu(), cache_size=64 * 1024)
    assert ", timed cold" in _first_line(SearchSpace(conv, small))
    large = replace(written_cpu(), cache_size=1 << 20)
    assert "timed cold" not in _first_line(SearchSpace(conv, large))
