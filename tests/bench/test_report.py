"""The benchmarks' tune: Ctrl-C stops the benchmark, not only the tune."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import laytune
from bench import _report


def test_an_interrupted_tune_stops_the_benchmark(monkeypatch: pytest.MonkeyPatch) -> None:
    reasons = iter(["trial budget (8) spent", "interrupted; every finished record is kept"])

    def tune(*args: object, **kwargs: object) -> SimpleNamespace:
        return SimpleNamespace(stop_reason=next(reasons), workload_key="copy(shape=8;float32)")

    monkeypatch.setattr(laytune, "tune", tune)
    assert _report.tune("w").stop_reason.startswith("trial budget")
    with pytest.raises(KeyboardInterrupt, match=r"copy.*interrupted"):
        _report.tune("w")
