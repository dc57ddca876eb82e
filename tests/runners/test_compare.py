"""Checking an output against its reference: the same verdict and error as a
comparison of the whole arrays at once, in memory bounded by a chunk
whatever the output's size (a 4096 x 11008 output is 180 MB in float32)."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pyopencl as cl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laytune.runners import _measure
from laytune.runners._config import Tolerance
from laytune.runners._devices import Device
from laytune.runners._measure import PreparedWorkload, _compare


def whole(out: np.ndarray, ref: np.ndarray, tolerance: Tolerance) -> tuple[float, bool]:
    """The comparison on whole arrays (worst error, passed), as the measure
    protocol states it."""
    got, want = out.astype(np.float64), ref.astype(np.float64)
    finite = np.isfinite(want)
    scale = max(1.0, float(np.abs(want[finite]).max())) if finite.any() else 1.0
    with np.errstate(invalid="ignore"):
        diff = np.abs(got - want)
        within = diff <= tolerance.atol * scale + tolerance.rtol * np.abs(want)
    if finite.all():
        worst = float(diff.max()) if diff.size else 0.0
        return (math.inf if math.isnan(worst) else worst), bool(within.all())
    same_special = ~finite & ((got == want) | (np.isnan(got) & np.isnan(want)))
    passed = bool(np.all(within | same_special))
    if (finite & ~np.isfinite(got)).any():
        return math.inf, passed
    return (float(diff[finite].max()) if finite.any() else 0.0), passed


values = st.one_of(
    st.floats(-100, 100, width=32),
    st.sampled_from([math.nan, math.inf, -math.inf, 0.0, 1e-6]),
)


@settings(max_examples=200, deadline=None)
@given(
    pairs=st.lists(st.tuples(values, values, st.booleans()), min_size=1, max_size=40),
    chunk=st.integers(1, 9),
)
def test_chunks_agree_with_the_whole_comparison(
    pairs: list[tuple[float, float, bool]], chunk: int
) -> None:
    ref = np.array([r for r, _, _ in pairs], dtype=np.float32)
    # Half the outputs near their reference (within or just past the tolerance).
    out = np.array(
        [r * (1 + 1e-5) if near and math.isfinite(r) else o for r, o, near in pairs],
        dtype=np.float32,
    )
    prepared = PreparedWorkload("w", {}, {"Y": ref}, 1)
    expected = prepared.expected("Y", out.dtype)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_measure, "_COMPARE_CHUNK", chunk)
        check = _compare("Y", out, expected)
    worst, passed = whole(out, ref, expected.tolerance)
    assert check.passed == passed
    assert check.max_abs_error == worst


def test_a_non_contiguous_reference_is_made_contiguous_once() -> None:
    ref = np.arange(12, dtype=np.float32).reshape(3, 4).T  # a transpose's reference, a view
    expected = PreparedWorkload("w", {}, {"Y": ref}, 1).expected("Y", np.dtype(np.float32))
    assert expected.reference.flags.c_contiguous
    np.testing.assert_array_equal(expected.reference, ref)
    check = _compare("Y", np.ascontiguousarray(ref) + np.float32(1e-3), expected)
    assert not check.passed and check.max_abs_error == pytest.approx(1e-3, rel=1e-2)


def test_comparing_a_large_output_makes_no_array_of_its_size() -> None:
    rng = np.random.default_rng(0)
    ref = rng.standard_normal(1 << 22).astype(np.float32)  # 16 MiB
    out = ref + np.float32(1e-7)
    expected = PreparedWorkload("w", {}, {"Y": ref}, 1).expected("Y", out.dtype)
    tracemalloc.start()
    try:
        check = _compare("Y", out, expected)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert check.passed
    # Less than the output itself: the float64 copies of whole arrays were 32 MiB each.
    assert peak < out.nbytes, f"comparing took {peak / 2**20:.1f} MiB"


def test_an_exact_output_is_recognised_in_chunks_too() -> None:
    ref = np.arange(1 << 22, dtype=np.float32)  # 16 MiB
    out = ref.copy()
    expected = PreparedWorkload("w", {}, {"Y": ref}, 1).expected("Y", out.dtype)
    tracemalloc.start()
    try:
        check = _compare("Y", out, expected)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert check.passed and check.max_abs_error == 0.0
    # One chunk's comparison; a whole one made a 4 MiB array of booleans.
    assert peak < out.nbytes // 16, f"comparing took {peak / 2**20:.1f} MiB"


def test_an_output_on_the_device_is_read_back_a_chunk_at_a_time(
    device: Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The measuring process compares an output where it lies: chunk by chunk
    into one reused host chunk, never a host copy of the whole output, with
    the verdict and the worst error of the whole comparison."""
    ref = np.random.default_rng(1).standard_normal((1024, 4096)).astype(np.float32)  # 16 MiB
    out = ref.copy()
    out[-1, -1] += np.float32(0.5)  # in the last chunk
    session = _measure.DeviceSession(device)
    source = cl.Buffer(session.context, cl.mem_flags.READ_WRITE, out.nbytes)
    cl.enqueue_copy(session.queue, source, out)
    expected = PreparedWorkload("w", {}, {"Y": ref}, 1).expected("Y", out.dtype)
    expected.float_reference()  # once per workload, not per candidate: not counted here
    monkeypatch.setattr(_measure, "_COMPARE_CHUNK", 1 << 14)  # float64 temporaries of 128 KiB
    tracemalloc.start()
    try:
        check = _compare(
            "Y", _measure._DeviceOutput(session, source, out.shape, out.dtype), expected
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    source.release()
    worst, passed = whole(out, ref, expected.tolerance)
    assert (check.passed, check.max_abs_error) == (passed, worst) == (False, pytest.approx(0.5))
    assert peak < out.nbytes // 16, f"comparing took {peak / 2**20:.1f} MiB"
