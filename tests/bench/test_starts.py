"""bench.starts on small shapes: the first start and the peer measured in
the same rounds, both checked against the reference, and the row they make."""

from __future__ import annotations

import pytest

from bench import starts
from bench._peak import read_peak
from laytune.runners import default_device


@pytest.mark.parametrize(
    "case",
    [starts._matmul(24, 40, 36), starts._conv(8, 13, 16, 3, stride=2, pad=1)],
    ids=["matmul", "strided conv"],
)
def test_a_start_and_its_peer_are_timed_side_by_side(case: starts.StartCase) -> None:
    device = default_device()
    measured = starts.bench_case(case, device, rounds=2, repeats=2)
    assert not measured.error
    assert len(measured.runs) == 2
    if case.missing:  # ONNX Runtime not installed: the row says so
        assert not measured.peer and case.missing in measured.peer_error
    else:
        assert len(measured.peer) == 2
        assert float(measured.peer_error) < 1e-5  # the peer computes the same (stride 2 too)
    row = starts.rows(measured, read_peak(device.open()))
    assert row[0] == case.label and len(row) == 8
    assert float(row[1]) > 0 and float(row[3]) >= float(row[1])  # end to end holds the kernel
    assert "block." in row[7]
