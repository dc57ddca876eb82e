"""The parts of ``bench.peers`` its figures rest on: the peak and how it is
stated, the conv2d peers' arithmetic, and what an end-to-end time adds up."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyopencl as cl
import pytest

from bench._convolution import im2col_conv, reference_conv
from bench._peak import DEFAULT_FMA_UNITS, host_clock_ghz, read_peak
from bench.peers import EndToEnd, relative_error
from laytune import ops
from laytune.runners import ConversionTiming, RunResult


def _device(**overrides: int) -> SimpleNamespace:
    """What read_peak reads of a pyopencl device: a 2-core AVX2 CPU that, like
    Intel's CPU runtime, prefers scalar floats and reports no clock."""
    fields = {
        "max_compute_units": 2,
        "preferred_vector_width_float": 1,
        "native_vector_width_float": 8,
        "max_clock_frequency": 0,
        "type": cl.device_type.CPU,
    }
    return SimpleNamespace(**{**fields, **overrides})


def test_peak_is_the_product_of_its_factors_with_their_sources() -> None:
    peak = read_peak(_device(), host_clock=2.445)
    assert DEFAULT_FMA_UNITS == 2
    assert peak.flops == pytest.approx(2 * 8 * 2 * 2 * 2.445e9)
    formula = peak.formula()
    assert formula.startswith(
        "2 compute units x 8 SIMD lanes x 2 (FMA) x 2 FMA units per core x 2.445 GHz "
        "= 156.5 GFLOP/s"
    )
    assert "preferred (1) and native (8)" in formula
    assert "max_clock_frequency 0" in formula
    assert peak.fraction(78.24e9) == "50.0 %"


def test_peak_flags_override_the_device_and_a_reported_clock_is_used() -> None:
    peak = read_peak(_device(max_clock_frequency=3500), fma_units=1, lanes=16)
    assert peak.clock_ghz.value == pytest.approx(3.5)
    assert "3500 MHz" in peak.clock_ghz.source
    assert peak.flops == pytest.approx(2 * 16 * 2 * 1 * 3.5e9)
    assert "--fma-units" in peak.formula() and "--simd-lanes" in peak.formula()
    forced = read_peak(_device(max_clock_frequency=3500), clock_ghz=2.0, compute_units=4)
    assert forced.flops == pytest.approx(4 * 8 * 2 * 2 * 2.0e9)


def test_a_device_without_a_clock_has_no_fraction_of_peak() -> None:
    gpu = _device(type=cl.device_type.GPU)
    peak = read_peak(gpu)
    assert peak.flops is None
    assert peak.fraction(1e12) == "-"
    assert "unknown (pass --clock-ghz)" in peak.formula()


def test_a_gpus_lanes_come_from_its_compute_capability() -> None:
    """OpenCL reports an H100's 132 multiprocessors and a float vector width
    of 1; its peak is 132 x 128 lanes x 2 x 1 FMA x 1.98 GHz."""
    h100 = _device(
        type=cl.device_type.GPU,
        max_compute_units=132,
        native_vector_width_float=1,
        max_clock_frequency=1980,
        compute_capability_major_nv=9,
        compute_capability_minor_nv=0,
    )
    peak = read_peak(h100)
    assert peak.flops == pytest.approx(132 * 128 * 2 * 1 * 1.98e9)
    assert "compute capability 9.0" in peak.formula()
    other = read_peak(_device(type=cl.device_type.GPU, max_clock_frequency=2000))
    assert other.flops is None and "unknown (pass --simd-lanes)" in other.formula()


def test_host_clock_is_the_largest_listed(tmp_path: Path) -> None:
    listing = tmp_path / "cpuinfo"
    listing.write_text(
        "processor\t: 0\ncpu MHz\t\t: 2445.432\nprocessor\t: 1\ncpu MHz\t\t: 3500.000\n"
    )
    assert host_clock_ghz(listing) == pytest.approx(3.5)
    assert host_clock_ghz(tmp_path / "missing") is None
    (tmp_path / "empty").write_text("processor\t: 0\n")
    assert host_clock_ghz(tmp_path / "empty") is None


@pytest.mark.parametrize(
    ("shape", "padding"), [((1, 3, 7, 9, 5), 1), ((2, 4, 6, 5, 3), 0), ((1, 30, 27, 27, 7), 1)]
)
def test_im2col_conv_matches_laytune_reference(
    shape: tuple[int, int, int, int, int], padding: int
) -> None:
    batch, channels, height, width, filters = shape
    workload = ops.conv2d(batch, channels, height, width, filters, 3, padding=padding)
    inputs = workload.make_inputs(1)
    want = workload.reference(inputs)["Y"]
    got = im2col_conv(inputs["X"], inputs["W"], padding)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    exact = reference_conv(inputs["X"], inputs["W"], padding)
    assert exact.dtype == np.float64
    assert relative_error(got, exact) < 1e-6
    assert relative_error(got + 1.0, exact) > 1e-3


def _conversion(buffer: str, wall_ms: tuple[float, ...]) -> ConversionTiming:
    walls = tuple(t / 1e3 for t in wall_ms)
    events = tuple(t * 0.9 for t in walls)
    return ConversionTiming(buffer, f"pack_{buffer}", events, walls, float(np.median(events)))


def test_end_to_end_adds_every_per_call_conversion_and_leaves_out_constants() -> None:
    run = RunResult(
        program_name="conv",
        source_hash="0",
        workload_key="conv2d",
        device_key="d",
        value_s=2e-3,
        event_times_s=(2e-3, 1e-3, 3e-3),
        wall_times_s=(2.2e-3, 2.1e-3, 9.0e-3),
        pack_times=(_conversion("X", (0.3, 0.2, 0.4)), _conversion("W", (0.5, 0.5, 0.5))),
        unpack_times=(_conversion("Y", (0.1, 0.1, 0.7)),),
    )
    split = EndToEnd.of(run, frozenset({"W"}))
    assert split.kernel.event_s == pytest.approx(2e-3)
    assert split.kernel.wall_s == pytest.approx(2.2e-3)
    assert split.total.wall_s == pytest.approx(2.2e-3 + 0.3e-3 + 0.1e-3)
    assert split.total.event_s == pytest.approx(2e-3 + 0.9 * (0.3e-3 + 0.1e-3))
    assert [(verb, t.buffer) for verb, t in split.per_call] == [("pack", "X"), ("unpack", "Y")]
    assert [(verb, t.buffer) for verb, t in split.once] == [("pack", "W")]
    assert split.note() == (
        "kernel + conversions (wall ms): pack X 0.300, unpack Y 0.100; "
        "packed once, not per call: pack W 0.500"
    )
    everything = EndToEnd.of(run, frozenset())
    assert everything.total.wall_s == pytest.approx(split.total.wall_s + 0.5e-3)
    assert everything.once == ()


def test_an_aliased_conversion_adds_nothing_to_the_end_to_end_time() -> None:
    """A buffer held in its logical layout is its own physical storage: the
    runner reports its conversion with no times and a value of 0 s."""
    aliased = ConversionTiming("X", "", (), (), 0.0)
    run = RunResult(
        program_name="t",
        source_hash="0",
        workload_key="transpose",
        device_key="d",
        value_s=2e-3,
        event_times_s=(2e-3,),
        wall_times_s=(2.5e-3,),
        pack_times=(aliased,),
        unpack_times=(_conversion("Y", (0.4,)),),
    )
    split = EndToEnd.of(run, frozenset())
    assert split.total.wall_s == pytest.approx(2.5e-3 + 0.4e-3)
    assert split.total.event_s == pytest.approx(2e-3 + 0.9 * 0.4e-3)
    assert split.note() == "kernel + conversions (wall ms): pack X 0.000, unpack Y 0.400"


def test_without_clblast_or_onnxruntime_their_rows_say_so_and_the_rest_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    from bench._clblast import CLBlast
    from bench._convolution import OnnxRuntimeConv
    from bench.peers import conv_case, conv_peers, matmul_case, matmul_peers

    for module in ("pyclblast", "onnxruntime"):
        monkeypatch.setitem(sys.modules, module, None)  # import raises ImportError
    blas, runtime = CLBlast(), OnnxRuntimeConv()
    assert blas.missing is not None and "pyclblast" in blas.missing
    assert runtime.missing is not None and "onnxruntime" in runtime.missing
    peak = read_peak(_device(), host_clock=2.0)

    rows = matmul_peers(matmul_case(32, 48, 16), None, blas, 3, peak)
    assert [r.implementation for r in rows] == ["numpy", "CLBlast sgemm"]
    assert rows[0].timing is not None and rows[0].rate != "-" and rows[0].fraction.endswith("%")
    assert rows[1].timing is None and rows[1].note.startswith("skipped: pyclblast")

    rows = conv_peers(conv_case(1, 4, 6, 6, 3), runtime, 3, peak)
    assert [r.implementation for r in rows] == ["ONNX Runtime", "im2col + numpy"]
    assert rows[0].timing is None and rows[0].note.startswith("skipped: onnxruntime")
    assert rows[1].timing is not None and "relative error" in rows[1].note


def test_the_transpose_verdict_sets_the_tuned_end_to_end_against_the_copy_and_clblast() -> None:
    from bench.peers import Row, Timing, transpose_verdict

    case = "transpose 4096 x 4096 float32"
    rows = [
        Row(case, "tuned copy (float4)", Timing(2.0e-3, 2.4e-3)),
        Row(case, "laytune pack (generated)", Timing(5.0e-3, 5.1e-3)),
        Row(case, "laytune tuned, end to end", Timing(3.8e-3, 4.0e-3)),
        Row(case, "CLBlast omatcopy", Timing(9.0e-3, 9.0e-3)),
    ]
    assert transpose_verdict(rows) == [
        "laytune tuned, end to end: 60% of the tuned copy's bandwidth (target 60 %), "
        "2.25x CLBlast's omatcopy (target 2x)."
    ]
    without_blas = [r for r in rows if r.implementation != "CLBlast omatcopy"]
    assert transpose_verdict(without_blas)[0].endswith("(target 60 %).")
    untuned = [r for r in rows if not r.implementation.startswith("laytune tuned")]
    assert transpose_verdict(untuned) == []
