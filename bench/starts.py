"""The derived starts, untuned, beside the peers on shapes nobody fitted them to.

    python -m bench.starts [--match TEXT] [--rounds N] [--repeats N] [--out PATH]
                           [--clock-ghz F] [--fma-units N] [--simd-lanes N] [--compute-units N]

A tuning job measures the derived starts first, and a plan that nobody tuned
runs them as they are (``bench.models``' untuned row), so how close the first
start of an unforeseen statement comes to the best peer says how much the
derivation (:mod:`laytune.search._starts`: blocks from the register file,
unrolls to a number of FMAs, prefetches, whole padded rows) holds beyond the
shapes it was measured on. For each workload: the first start's kernel and
its end-to-end time (the kernel plus the conversions of every operand a call
receives anew: both of a GEMM's operands, a convolution's activations and
output; its weights packed once), and the peer in the same interleaved
rounds: numpy's ``matmul`` (its BLAS) for the contractions, ONNX Runtime's
Conv (2 threads, weights an initializer it prepacks) for the convolutions.
Every output is checked against the float64 reference first.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench import _report
from bench._convolution import OnnxRuntimeConv
from bench._peak import Peak, add_peak_arguments, peak_from_arguments
from bench.peers import EndToEnd, HostFlush, measure, relative_error, remeasuring_all
from laytune import ops
from laytune.codegen import lower
from laytune.ops import Workload
from laytune.runners import default_device, timed_cold
from laytune.search import standard_candidates
from laytune.space import SearchSpace

RESULT_NAME = "starts.md"
ROUNDS = 5
REPEATS = 5
WARMUP = 2


@dataclass(frozen=True)
class StartCase:
    """A workload, its floating-point operations and its peer: ``peer(inputs)``
    makes the call the rounds time (None where the peer is missing, with
    ``missing`` saying why)."""

    label: str
    workload: Workload
    flops: int
    peer_name: str
    peer: Callable[[dict[str, np.ndarray]], Callable[[], Any] | None]
    missing: str = ""


def _matmul(m: int, n: int, k: int) -> StartCase:
    def peer(inputs: dict[str, np.ndarray]) -> Callable[[], Any]:
        a, b = inputs["A"], inputs["B"]
        return lambda: np.matmul(a, b)

    return StartCase(f"matmul {m} x {n} x {k}", ops.matmul(m, n, k), 2 * m * n * k, "numpy", peer)


def _conv(
    channels: int, size: int, filters: int, kernel: int, stride: int = 1, pad: int = 0
) -> StartCase:
    workload = ops.conv2d(1, channels, size, size, filters, kernel, stride, pad)
    out = (size + 2 * pad - kernel) // stride + 1
    ort = OnnxRuntimeConv()

    def peer(inputs: dict[str, np.ndarray]) -> Callable[[], Any] | None:
        if ort.missing:
            return None
        x = inputs["X"]
        run = ort.session(x.shape, inputs["W"], pad, stride)
        return lambda: run(x)

    label = (
        f"conv2d (1, {channels}, {size}, {size}) x {filters}, {kernel} x {kernel}"
        + (f" / {stride}" if stride > 1 else "")
        + (f" pad {pad}" if pad else "")
    )
    flops = 2 * filters * channels * kernel * kernel * out * out
    return StartCase(label, workload, flops, "ONNX Runtime", peer, ort.missing or "")


def cases() -> list[StartCase]:
    """Contractions from a transformer's layer to odd primes, and the
    convolutions of an image network: its stem, a 1 x 1, its 3 x 3 stages
    at every width, and one of no network's shape."""
    return [
        _matmul(128, 3072, 768),
        _matmul(512, 512, 512),
        _matmul(1000, 1000, 1000),
        _matmul(196, 256, 2304),
        _matmul(127, 257, 509),
        _matmul(512, 512, 1021),
        _matmul(2048, 2048, 2048),
        _conv(3, 224, 64, 7, stride=2, pad=3),
        _conv(64, 56, 64, 3, pad=1),
        _conv(128, 28, 128, 3, pad=1),
        _conv(256, 14, 256, 3, pad=1),
        _conv(512, 7, 512, 3, pad=1),
        _conv(1024, 14, 256, 1),
        _conv(96, 33, 160, 3, pad=1),
    ]


@dataclass
class Measured:
    case: StartCase
    start: str
    runs: list[EndToEnd]
    peer: list[float]
    error: str
    peer_error: str
    cold: bool = False
    warm: list[float] = field(default_factory=list)
    peer_warm: list[float] = field(default_factory=list)


def _first_start(workload: Workload, device: Any) -> Any:
    return standard_candidates(SearchSpace(workload, device.info), 1)[0]


def bench_case(case: StartCase, device: Any, rounds: int, repeats: int) -> Measured:
    """The first start's program and the peer, timed in ``rounds``
    interleaved rounds, each after :data:`_report.SETTLE_S` of idle. Where
    the runner times the kernel cold (weights larger than the device's
    cache, as in a model), the peer is timed cold too, after the same flush
    from the host, and both also warm."""
    workload = case.workload
    cold = timed_cold(workload, device.info.cache_size)
    flush = HostFlush(device.info) if cold else None
    start = _first_start(workload, device)
    program = lower(workload, start, device.info)
    inputs = workload.make_inputs(0)
    reference = workload.reference(inputs)[workload.output.name].astype(np.float64)
    call = case.peer(inputs)
    peer_error = case.missing or "-"
    if call is not None:
        got = np.asarray(call()).reshape(reference.shape)
        peer_error = f"{relative_error(got, reference):.1e}"
    runs: list[EndToEnd] = []
    peer: list[float] = []
    warm: list[float] = []
    peer_warm: list[float] = []
    error = ""
    with remeasuring_all(device, workload, [program], repeats, warmup=WARMUP) as again:
        for _ in range(rounds):
            time.sleep(_report.SETTLE_S)
            (run,) = again()
            if not run.ok:
                error = f"{run.error_kind}: {run.error_message}"
                break
            runs.append(EndToEnd.of(run, frozenset(workload.weights)))
            if cold:
                warm.append(statistics.median(run.warm_wall_times_s))
            if call is not None:
                time.sleep(_report.SETTLE_S)
                timing = measure(
                    call, None, warmup=WARMUP, repeats=repeats, events=False, before=flush
                )
                peer.append(timing.wall_s)
                if cold:
                    timing = measure(call, None, warmup=WARMUP, repeats=repeats, events=False)
                    peer_warm.append(timing.wall_s)
    knobs = ", ".join(
        f"{k}={start.knob(k)}"
        for k in sorted(start.knob_map)
        if k.startswith("block.") or k in ("vector", "unroll", "prefetch")
    )
    return Measured(case, knobs, runs, peer, error, peer_error, cold, warm, peer_warm)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}"


def _rate(flops: int, seconds: float, peak: Peak) -> str:
    rate = flops / seconds
    return f"{rate / 1e9:.1f} ({peak.fraction(rate)})"


def rows(measured: Measured, peak: Peak) -> list[str]:
    """One table row: the medians of the rounds, ratios paired round by round."""
    case = measured.case
    if not measured.runs:
        return [case.label, measured.error or "not measured", *["-"] * 8]
    kernel = statistics.median(e.kernel.wall_s for e in measured.runs)
    total = statistics.median(e.total.wall_s for e in measured.runs)
    if measured.peer:
        peer = statistics.median(measured.peer)
        paired = _paired(measured.peer, [e.total.wall_s for e in measured.runs])
        peer_text, ratio = _ms(peer), f"{paired:.2f}x"
    else:
        peer_text, ratio = f"{case.peer_name}: {case.missing or 'none'}", "-"
    return [
        case.label,
        _ms(kernel),
        _rate(case.flops, kernel, peak),
        _ms(total),
        f"{peer_text} ({case.peer_name})",
        ratio,
        "cold" if measured.cold else "warm",
        _warm(measured),
        measured.peer_error,
        measured.start,
    ]


def _paired(peer: Sequence[float], ours: Sequence[float]) -> float:
    """The median of the rounds' ratios, the peer's time over ours, round by
    round (a round the peer did not reach has no ratio)."""
    return statistics.median(p / o for p, o in zip(peer, ours, strict=False))


def _warm(measured: Measured) -> str:
    """Where the row is timed cold: the start's kernel and the peer's call
    warm, medians of the rounds, and the paired ratio."""
    if not measured.cold or not measured.warm:
        return "-"
    kernel = statistics.median(measured.warm)
    if not measured.peer_warm:
        return f"{_ms(kernel)} / -"
    paired = _paired(measured.peer_warm, measured.warm)
    return f"{_ms(kernel)} / {_ms(statistics.median(measured.peer_warm))} ({paired:.2f}x)"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--match", help="only the workloads whose label holds this text")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds ({ROUNDS})")
    parser.add_argument("--repeats", type=int, default=REPEATS, help=f"timed calls ({REPEATS})")
    parser.add_argument("--out", type=Path, help=f"markdown file (bench/results/{RESULT_NAME})")
    add_peak_arguments(parser)
    given = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(given)
    device = default_device()
    peak = peak_from_arguments(device.open(), args)
    chosen = [c for c in cases() if args.match is None or args.match in c.label]
    table: list[list[str]] = []
    started = time.perf_counter()
    for case in chosen:
        print(f"{case.label} ...", flush=True)
        row = rows(bench_case(case, device, args.rounds, args.repeats), peak)
        table.append(row)
        print("  " + " | ".join(row[1:8]), flush=True)
    header = [
        "workload",
        "start kernel (ms)",
        "GFLOP/s (of peak)",
        "start end to end (ms)",
        "peer (ms)",
        "peer / start",
        "timed",
        "warm: start kernel / peer (ms)",
        "peer's error",
        "the start's knobs",
    ]
    text = "\n".join(
        [
            "# The first derived start, untuned, beside the best peer",
            "",
            f"`python -m bench.starts{''.join(' ' + a for a in given)}`",
            "",
            *_report.environment(device),
            f"- peak: {peak.formula()}",
            f"- timing: {args.rounds} interleaved rounds of the start end to end and the peer, "
            f"each after {_report.SETTLE_S:g} s of idle and {WARMUP} untimed calls, the median "
            f"of {args.repeats} timed calls; each column keeps the median round, and "
            f"peer / start is the median of the rounds' ratios (above 1: the start is faster); "
            f"{time.perf_counter() - started:.0f} s in all",
            "- end to end: the kernel and the conversions of the operands a call receives "
            "anew, wall clock; weights packed once, not per call (the peer prepacks its own)",
            "- timed: cold where the weights outgrow the device's cache (as the runner times "
            "them, and as they come in a model), the peer then too, after a flush of as many "
            "bytes from the host; those rows also show the start's kernel and the peer's call "
            "warm (no conversions), paired round by round",
            "",
            *_report.table(header, table, "lrrrrrlrrl"),
            "",
        ]
    )
    path = _report.write(RESULT_NAME, text, args.out)
    print(f"wrote {_report.shown(path)}")


if __name__ == "__main__":
    main()
