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


def test_the_host_cpu_line_names_family_and_vector_width(tmp_path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\n"
        "model name\t: AMD EPYC\nflags\t\t: fpu avx2 fma avx512f avx512vl\n\n"
        "processor\t: 1\ncpu family\t: 26\nmodel\t\t: 2\n"
    )
    assert _report.host_cpu(cpuinfo) == "AMD EPYC, family 26 model 2, avx512f"
    assert _report.host_cpu(tmp_path / "missing") == ""
