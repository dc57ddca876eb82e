"""bench.starts on small shapes: the first start and the peer measured in
the same rounds, both checked against the reference, and the row they make."""

from __future__ import annotations

import pytest

from bench import peers, starts
from bench._peak import read_peak
from laytune.runners import default_device, default_flush_bytes


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
    assert not measured.cold and not measured.warm and not measured.peer_warm
    row = starts.rows(measured, read_peak(device.open()))
    assert row[0] == case.label and len(row) == 10
    assert float(row[1]) > 0 and float(row[3]) >= float(row[1])  # end to end holds the kernel
    assert row[6] == "warm" and row[7] == "-"
    assert "block." in row[9]


def test_weights_larger_than_the_cache_time_the_start_and_its_peer_cold_and_warm() -> None:
    """The runner times a convolution whose weights outgrow the device's
    cache cold; its peer is then timed cold too, and both warm beside."""
    device = default_device()
    case = starts._conv(64, 6, 512, 3, pad=1)  # 1.2 MB of weights
    assert 64 * 512 * 9 * 4 > device.info.cache_size > 0
    measured = starts.bench_case(case, device, rounds=2, repeats=2)
    assert not measured.error and measured.cold
    assert len(measured.warm) == 2 and all(t > 0 for t in measured.warm)
    if not case.missing:
        assert len(measured.peer) == len(measured.peer_warm) == 2
    row = starts.rows(measured, read_peak(device.open()))
    assert row[6] == "cold"
    warm_kernel, _, rest = row[7].partition(" / ")
    assert float(warm_kernel) > 0
    if not case.missing:
        assert rest.endswith("x)")


def test_the_host_flush_writes_what_the_runner_flushes() -> None:
    info = default_device().info
    flush = peers.HostFlush(info)
    want = default_flush_bytes(info.cache_size, info.max_mem_alloc_size)
    assert flush.scratch.nbytes == want >= 64 << 20
    flush()
    flush()
    assert flush.scratch[0] == flush.scratch[-1] == 2  # every byte written, anew each call
