"""Operators users define themselves, tuned with the default job, beside ONNX Runtime and numpy.

    python -m bench.user_ops [--quick] [--trials N] [--timeout S] [--repeats N] [--rounds N]
                             [--match TEXT] [--out FILE] [--clock-ghz F] [--fma-units N]
                             [--simd-lanes N] [--compute-units N]

Each workload is written here with ``Workload.define`` (no constructor of
``laytune.ops`` knows it), tuned by ``laytune.tune`` with the default
strategy from an empty database, so its kernels come from the starts derived
from the statement's structure (``laytune.search.classify``) and the search:

- a batched matmul ``C[b, i, j] += A[b, i, k] * B[b, k, j]``, 8 x 128 x 128 x 64
  (ONNX Runtime: ``MatMul``);
- a depthwise 3 x 3 convolution over 64 channels of 56 x 56 (``Conv``, ``group=64``);
- a grouped 3 x 3 convolution, 4 groups of 16 -> 16 channels, 28 x 28, written
  5-D (``Y[n, g, f, oh, ow]``; ``Conv``, ``group=4`` on the same memory);
- a 1 x 1 (pointwise) convolution 64 -> 128 channels at 56 x 56, written as
  the contraction it is (``Conv`` 1 x 1);
- an image stem: 3 input channels, 7 x 7, stride 2, padding 3, 224 x 224 ->
  64 x 112 x 112 (``Conv``);
- a row-wise max and a row-wise sum of a 2048 x 1024 matrix (softmax's two
  reductions; ``ReduceMax`` / ``ReduceSum``);
- shapes and statements no start was written around: a 1-D convolution
  64 -> 64 channels, kernel 3, over 1024 steps (``Conv`` 1-D); a matmul of
  odd extents, 127 x 257 x 509 (``MatMul``); attention's scores ``Q K^T``,
  12 heads x 128 x 128 x 64, ``K`` read across its rows (``Transpose`` and
  ``MatMul``); GELU over 2048 x 1024, reading ``X`` twice (``Mul``, ``Erf``,
  ``Add``, ``Mul``, ``Mul``; numpy has no ``erf``, so no numpy row).

The best record is measured again with its conversions (the per-call pack of
every input that is not a weight and the unpack of the output), and that
end-to-end time is set beside ONNX Runtime's session (2 threads, the model's
weights as initializers) and numpy on the same host: ``--rounds`` (7)
interleaved rounds, each implementation after 0.3 s of idle (both runtimes'
threads spin for a while after a run and slowed whichever ran next), 5
untimed calls and the same number of timed calls (``--repeats``, 100: after the
idle the host's cores take a few milliseconds to come up to speed, and a side
timed over 20 calls of a 0.05 ms kernel was timed in that ramp, 20 % slower
than over 100); each keeps its median round, and a peer's ratio is the median
of the rounds' ratios with their range (a burst of load on the shared host
that halves the speed of a round falls on both sides of it). Rates: GFLOP/s and the
fraction of the peak (``bench._peak``) for the accumulations, GB/s for the
reductions and GELU (memory-bound). The table is printed and written to
``bench/results/user_ops.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench import _report
from bench._peak import Peak, add_peak_arguments, peak_from_arguments
from bench.peers import (
    Budget,
    Case,
    EndToEnd,
    Row,
    Search,
    Timing,
    measure,
    relative_error,
    remeasuring_all,
    tune_case,
)
from laytune.ops import Workload
from laytune.runners import default_device
from laytune.search import classify

RESULT_NAME = "user_ops.md"
TRIALS, TIMEOUT_S, REPEATS, ROUNDS = 32, 240.0, 100, 7
QUICK_TRIALS, QUICK_TIMEOUT_S, QUICK_REPEATS, QUICK_ROUNDS = 8, 60.0, 20, 2
# untimed calls before each timed block, the same for every side: laytune's
# best (its measuring worker's warm-up launches), ONNX Runtime and numpy
WARMUP = 5
_OPSET, _IR_VERSION = 17, 8


@dataclass(frozen=True)
class UserOp:
    """A user's statement, the ONNX node that computes the same, and numpy's way."""

    case: Case
    node: Callable[[], Any]  # () -> (onnx node or nodes, initializer names)
    numpy: Callable[[dict[str, np.ndarray]], np.ndarray] | None
    memory_bound: bool = False  # rated in GB/s, not GFLOP/s


def _same(array: np.ndarray) -> np.ndarray:
    return array


def _case(label: str, workload: Workload) -> Case:
    return Case(label, workload, workload.flops)


def _windows(x: np.ndarray, kernel: int, stride: int, pad: int) -> np.ndarray:
    """``x[n, c, h, w]`` as ``[n, c, oh, ow, kh, kw]`` windows (zero padding)."""
    padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    view = np.lib.stride_tricks.sliding_window_view(padded, (kernel, kernel), axis=(2, 3))
    return view[:, :, ::stride, ::stride]


def user_ops() -> list[UserOp]:
    from onnx import helper

    bmm = Workload.define(
        "bmm",
        "C[b, i, j] += A[b, i, k] * B[b, k, j]",
        {"b": 8, "i": 128, "j": 128, "k": 64},
        {"A": (8, 128, 64), "B": (8, 64, 128)},
    )
    depthwise = Workload.define(
        "depthwise",
        "Y[n, c, oh, ow] += X[n, c, oh + kh, ow + kw] * W[c, kh, kw]",
        {"n": 1, "c": 64, "oh": 54, "ow": 54, "kh": 3, "kw": 3},
        {"X": (1, 64, 56, 56), "W": (64, 3, 3)},
        weights=("W",),
    )
    grouped = Workload.define(
        "grouped_conv",
        "Y[n, g, f, oh, ow] += X[n, g, c, oh + kh - 1, ow + kw - 1] * W[g, f, c, kh, kw]",
        {"n": 1, "g": 4, "f": 16, "oh": 28, "ow": 28, "c": 16, "kh": 3, "kw": 3},
        {"X": (1, 4, 16, 28, 28), "W": (4, 16, 16, 3, 3)},
        weights=("W",),
    )
    pointwise = Workload.define(
        "pointwise",
        "Y[n, f, oh, ow] += X[n, c, oh, ow] * W[f, c]",
        {"n": 1, "f": 128, "oh": 56, "ow": 56, "c": 64},
        {"X": (1, 64, 56, 56), "W": (128, 64)},
        weights=("W",),
    )
    stem = Workload.define(
        "stem",
        "Y[n, f, oh, ow] += X[n, c, oh * 2 + kh - 3, ow * 2 + kw - 3] * W[f, c, kh, kw]",
        {"n": 1, "f": 64, "oh": 112, "ow": 112, "c": 3, "kh": 7, "kw": 7},
        {"X": (1, 3, 224, 224), "W": (64, 3, 7, 7)},
        weights=("W",),
    )
    row_max = Workload.define(
        "row_max", "Y[i] = max(X[i, j])", {"i": 2048, "j": 1024}, {"X": (2048, 1024)}
    )
    row_sum = Workload.define(
        "row_sum", "Y[i] += X[i, j]", {"i": 2048, "j": 1024}, {"X": (2048, 1024)}
    )

    conv1d = Workload.define(
        "conv1d",
        "Y[n, f, t] += X[n, c, t + k] * W[f, c, k]",
        {"n": 1, "f": 64, "t": 1022, "c": 64, "k": 3},
        {"X": (1, 64, 1024), "W": (64, 64, 3)},
        weights=("W",),
    )
    odd = Workload.define(
        "odd_matmul",
        "C[i, j] += A[i, k] * B[k, j]",
        {"i": 127, "j": 257, "k": 509},
        {"A": (127, 509), "B": (509, 257)},
    )
    scores = Workload.define(
        "scores",
        "S[b, i, j] += Q[b, i, k] * K[b, j, k]",
        {"b": 12, "i": 128, "j": 128, "k": 64},
        {"Q": (12, 128, 64), "K": (12, 128, 64)},
    )
    gelu = Workload.define(
        "gelu",
        "Y[i, j] = X[i, j] * (1.0 + erf(X[i, j] * 0.7071067811865476)) * 0.5",
        {"i": 2048, "j": 1024},
        {"X": (2048, 1024)},
    )

    def gelu_nodes() -> Any:
        constant = {
            name: (lambda _, v=value: np.array(v, dtype=np.float32))
            for name, value in (("root_half", 0.7071067811865476), ("one", 1.0), ("half", 0.5))
        }
        return [
            helper.make_node("Mul", ["X", "root_half"], ["scaled"]),
            helper.make_node("Erf", ["scaled"], ["erf"]),
            helper.make_node("Add", ["erf", "one"], ["shifted"]),
            helper.make_node("Mul", ["X", "shifted"], ["product"]),
            helper.make_node("Mul", ["product", "half"], ["Y"]),
        ], constant

    def conv(group: int, kernel: int, stride: int, pad: int, w4: Callable) -> Callable:
        def node() -> Any:
            return (
                helper.make_node(
                    "Conv",
                    ["X", "W"],
                    ["Y"],
                    group=group,
                    kernel_shape=[kernel, kernel],
                    strides=[stride, stride],
                    pads=[pad] * 4,
                ),
                {"W": w4},
            )

        return node

    def conv_numpy(kernel: int, stride: int, pad: int, group: int, w4: Callable) -> Callable:
        def run(inputs: dict[str, np.ndarray]) -> np.ndarray:
            x = inputs["X"].reshape(1, -1, *inputs["X"].shape[-2:]).astype(np.float64)
            w = w4(inputs["W"]).astype(np.float64)
            win = _windows(x, kernel, stride, pad)  # n, C, oh, ow, kh, kw
            n, channels = win.shape[:2]
            win = win.reshape(n, group, channels // group, *win.shape[2:])
            wg = w.reshape(group, w.shape[0] // group, *w.shape[1:])
            return np.einsum("ngchwyx,gfcyx->ngfhw", win, wg, optimize=True)

        return run

    def reduce(op: str) -> Callable:
        def node() -> Any:  # ReduceSum takes its axes as an input from opset 13 on
            if op == "ReduceSum":
                axes = {"axes": lambda _: np.array([1], dtype=np.int64)}
                return helper.make_node(op, ["X", "axes"], ["Y"], keepdims=0), axes
            return helper.make_node(op, ["X"], ["Y"], axes=[1], keepdims=0), {}

        return node

    return [
        UserOp(
            _case("batched matmul 8 x 128 x 128 x 64", bmm),
            lambda: (helper.make_node("MatMul", ["A", "B"], ["C"]), {}),
            lambda i: np.matmul(i["A"], i["B"]),
        ),
        UserOp(
            _case("depthwise 3 x 3, 64 x 56 x 56", depthwise),
            conv(64, 3, 1, 0, lambda w: w.reshape(64, 1, 3, 3)),
            conv_numpy(3, 1, 0, 64, lambda w: w.reshape(64, 1, 3, 3)),
        ),
        UserOp(
            _case("grouped 3 x 3, 4 x (16 -> 16), 28 x 28", grouped),
            conv(4, 3, 1, 1, lambda w: w.reshape(64, 16, 3, 3)),
            conv_numpy(3, 1, 1, 4, lambda w: w.reshape(64, 16, 3, 3)),
        ),
        UserOp(
            _case("pointwise 1 x 1, 64 -> 128, 56 x 56", pointwise),
            conv(1, 1, 1, 0, lambda w: w.reshape(128, 64, 1, 1)),
            lambda i: np.einsum("fc,nchw->nfhw", i["W"], i["X"]),
        ),
        UserOp(
            _case("stem 7 x 7 stride 2, 3 -> 64, 224 x 224", stem),
            conv(1, 7, 2, 3, lambda w: w),
            conv_numpy(7, 2, 3, 1, lambda w: w),
        ),
        UserOp(
            _case("row max 2048 x 1024", row_max),
            reduce("ReduceMax"),
            lambda i: i["X"].max(axis=1),
            True,
        ),
        UserOp(
            _case("row sum 2048 x 1024", row_sum),
            reduce("ReduceSum"),
            lambda i: i["X"].sum(axis=1),
            True,
        ),
        UserOp(
            _case("conv1d 64 -> 64, k 3, 1024", conv1d),
            lambda: (helper.make_node("Conv", ["X", "W"], ["Y"], kernel_shape=[3]), {"W": _same}),
            lambda i: np.einsum(
                "nctk,fck->nft",
                np.lib.stride_tricks.sliding_window_view(i["X"], 3, axis=2),
                i["W"],
                optimize=True,
            ),
        ),
        UserOp(
            _case("matmul 127 x 257 x 509", odd),
            lambda: (helper.make_node("MatMul", ["A", "B"], ["C"]), {}),
            lambda i: i["A"] @ i["B"],
        ),
        UserOp(
            _case("scores Q K^T 12 x 128 x 128 x 64", scores),
            lambda: (
                [
                    helper.make_node("Transpose", ["K"], ["Kt"], perm=[0, 2, 1]),
                    helper.make_node("MatMul", ["Q", "Kt"], ["S"]),
                ],
                {},
            ),
            lambda i: i["Q"] @ i["K"].transpose(0, 2, 1),
        ),
        UserOp(_case("GELU 2048 x 1024", gelu), gelu_nodes, None, True),
    ]


def onnx_session(op: UserOp, inputs: dict[str, np.ndarray]) -> Callable[[], Any]:
    """``run()``: the op's node in a 2-thread CPU session; the weights are
    initializers (prepacked once by ONNX Runtime, as laytune packs its own once)."""
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper, numpy_helper

    node, weights = op.node()
    nodes = node if isinstance(node, list) else [node]
    workload = op.case.workload
    initializers = [
        numpy_helper.from_array(np.ascontiguousarray(reshape(inputs.get(name))), name)
        for name, reshape in weights.items()
    ]
    feeds = {
        name: array.reshape(1, -1, *array.shape[-2:]) if array.ndim == 5 else array
        for name, array in inputs.items()
        if name not in weights
    }
    shape = list(workload.output.shape)
    if len(shape) == 5:  # the grouped convolution's 5-D output, as ONNX's 4-D one
        shape = [shape[0], shape[1] * shape[2], *shape[3:]]
    graph = helper.make_graph(
        nodes,
        workload.name,
        [
            helper.make_tensor_value_info(n, TensorProto.FLOAT, list(a.shape))
            for n, a in feeds.items()
        ],
        [helper.make_tensor_value_info(workload.output.name, TensorProto.FLOAT, shape)],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)])
    model.ir_version = _IR_VERSION
    onnx.checker.check_model(model)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 2
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return lambda: session.run(None, feeds)[0]


def _rate(op: UserOp, timing: Timing | None, peak: Peak) -> tuple[str, str]:
    if timing is None:
        return "-", "-"
    if op.memory_bound:
        moved = op.case.workload.bytes
        return f"{moved / timing.wall_s / 1e9:.1f} GB/s", "-"
    rate = op.case.flops / timing.wall_s
    return f"{rate / 1e9:.1f} GFLOP/s", peak.fraction(rate)


def _row(op: UserOp, name: str, timing: Timing | None, peak: Peak, note: str = "") -> Row:
    rate, fraction = _rate(op, timing, peak)
    return Row(op.case.label, name, timing, rate, fraction, note)


def paired_ratio(ours: Sequence[float], peer: Sequence[float]) -> str:
    """A peer's time over laytune's, round by round (each round's two blocks
    ran within a second of each other, so a burst of the shared host's load
    that slows one slows both), as the median of the rounds' ratios and their
    range: ``"1.04x (0.97-1.10)"``; "-" without a round."""
    ratios = sorted(p / o for o, p in zip(ours, peer, strict=True))
    if not ratios:
        return "-"
    middle = statistics.median(ratios)
    if len(ratios) == 1:
        return f"{middle:.2f}x"
    return f"{middle:.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f})"


def _median_round(rounds: Sequence[Any], wall: Callable[[Any], float]) -> Any:
    """The round whose wall time is the median of the rounds' (the lower middle)."""
    return sorted(rounds, key=wall)[(len(rounds) - 1) // 2]


def _start_over_best(
    search: Search, runs: Sequence[EndToEnd], start_runs: Sequence[EndToEnd]
) -> str:
    """The best derived start's end-to-end time over the best's: the medians
    of their interleaved rounds (a burst of the host's load during the job
    falls on both alike), 1.00 where the best is a start, else the job's own
    times; "-" where no start was measured."""
    if search.best_start_s is None or not search.best_s:
        return "-"
    if search.start_program is None or not (runs and start_runs):
        return f"{search.best_start_s / search.best_s:.2f}"
    best = statistics.median(e.total.wall_s for e in runs)
    start = statistics.median(e.total.wall_s for e in start_runs)
    return f"{start / best:.2f}"


def bench_op(
    op: UserOp, device: Any, budget: Budget, repeats: int, peak: Peak, rounds: int = ROUNDS
) -> list[Any]:
    """Tune, then time laytune's best end to end, ONNX Runtime and numpy in
    ``rounds`` interleaved rounds (each after :data:`_report.SETTLE_S` of
    idle, so that neither runtime's spinning threads nor the host's load
    fall on one alone); each keeps its median round. Its rows, the ratio
    line and the search."""
    workload = op.case.workload
    with tempfile.TemporaryDirectory() as folder:
        search: Search = tune_case(op.case, device, budget, f"sqlite:///{folder}/records.db")
    inputs = workload.make_inputs(0)
    reference = workload.reference(inputs)[workload.output.name].astype(np.float64)
    # each peer: its row's label, its accuracy note, and one timed block
    peers: dict[str, tuple[str, str, Callable[[], Timing]]] = {}
    missing: list[Row] = []
    try:
        run_onnx = onnx_session(op, inputs)
    except ImportError as err:
        missing.append(_row(op, "ONNX Runtime", None, peak, f"not installed: {err}"))
    else:
        got = np.asarray(run_onnx()).reshape(reference.shape)
        peers["ONNX Runtime"] = (
            "ONNX Runtime (2 threads)",
            f"rel. error {relative_error(got, reference):.1e}",
            lambda: measure(run_onnx, None, warmup=WARMUP, repeats=repeats, events=False),
        )
    if op.numpy is None:
        missing.append(_row(op, "numpy", None, peak, "no such function in numpy"))
    else:
        run_numpy = op.numpy
        got = run_numpy(inputs).reshape(reference.shape)
        peers["numpy"] = (
            "numpy",
            f"rel. error {relative_error(got, reference):.1e}",
            lambda: measure(
                lambda: run_numpy(inputs), None, warmup=WARMUP, repeats=repeats, events=False
            ),
        )
    timed: dict[str, list[Timing]] = {name: [] for name in peers}
    runs: list[EndToEnd] = []
    start_runs: list[EndToEnd] = []
    failed = "no verified candidate" if search.program is None else ""
    with contextlib.ExitStack() as stack:
        # the best, then the best start where it is another program
        programs = [p for p in (search.program, search.start_program) if p is not None]
        again = (
            None
            if search.program is None
            else stack.enter_context(
                remeasuring_all(device, workload, programs, repeats, warmup=WARMUP)
            )
        )
        for _ in range(rounds):
            if again is not None and not failed:
                time.sleep(_report.SETTLE_S)  # the other runtimes' threads idle first
                run, *started = again()
                if run.ok:
                    runs.append(EndToEnd.of(run, frozenset(workload.weights)))
                else:
                    failed = f"re-measure failed: {run.error_kind}"
                start_runs += [EndToEnd.of(s, frozenset(workload.weights)) for s in started if s.ok]
            for name, (_, _, block) in peers.items():
                time.sleep(_report.SETTLE_S)
                timed[name].append(block())
    rows: list[Row] = []
    ours: float | None = None
    if runs and not failed:
        split = _median_round(runs, lambda e: e.total.wall_s)
        ours = split.total.wall_s
        rows.append(_row(op, "laytune end-to-end", split.total, peak, split.note()))
    else:
        rows.append(_row(op, "laytune", None, peak, failed))
    for name, (label, note, _) in peers.items():
        timing = _median_round(timed[name], lambda t: t.wall_s)
        rows.append(_row(op, label, timing, peak, note))
    rows += missing
    ours_rounds = [e.total.wall_s for e in runs]
    ratios = [
        f"{name} {paired_ratio(ours_rounds, [t.wall_s for t in timed[name]])}"
        if ours
        else f"{name} -"
        for name in peers
    ]
    form = type(classify(workload, windows_of_one=True)).__name__.lower()
    if form == "nonetype":
        form = "element-wise / reduction"
    start_text = _start_over_best(search, runs, start_runs)
    summary = [
        op.case.label,
        form,
        "-" if ours is None else f"{ours * 1e3:.3f}",
        ", ".join(ratios),
        start_text,
        f"{search.measured} in {search.seconds:.0f} s",
        search.best_from,
    ]
    return [rows, summary]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="8 trials, fewer repeats")
    parser.add_argument("--trials", type=int, help=f"trials per workload ({TRIALS})")
    parser.add_argument("--timeout", type=float, help=f"tuning seconds per workload ({TIMEOUT_S})")
    parser.add_argument("--repeats", type=int, help=f"timed repeats ({REPEATS})")
    parser.add_argument(
        "--rounds", type=int, help=f"interleaved rounds of every implementation ({ROUNDS})"
    )
    parser.add_argument("--match", help="only the workloads whose label holds this text")
    parser.add_argument("--out", type=Path, help=f"markdown file (bench/results/{RESULT_NAME})")
    add_peak_arguments(parser)
    args = parser.parse_args(argv)
    budget = Budget(
        args.trials or (QUICK_TRIALS if args.quick else TRIALS),
        args.timeout or (QUICK_TIMEOUT_S if args.quick else TIMEOUT_S),
    )
    repeats = args.repeats or (QUICK_REPEATS if args.quick else REPEATS)
    rounds = args.rounds or (QUICK_ROUNDS if args.quick else ROUNDS)
    device = default_device()
    peak = peak_from_arguments(device.open(), args)
    ops = [op for op in user_ops() if args.match is None or args.match in op.case.label]
    rows: list[Row] = []
    summaries: list[list[str]] = []
    started = time.perf_counter()
    for op in ops:
        print(f"{op.case.label} ...", flush=True)
        op_rows, summary = bench_op(op, device, budget, repeats, peak, rounds)
        rows += op_rows
        summaries.append(summary)
        print("  " + " | ".join(summary), flush=True)
    text = "\n".join(
        [
            "# User-defined operators beside ONNX Runtime and numpy",
            "",
            *_report.environment(device),
            f"- peak: {peak.formula()}",
            f"- budget per workload: {budget.text()}, default strategy, empty database; "
            f"{time.perf_counter() - started:.0f} s in all",
            f"- timing: {rounds} interleaved rounds of laytune's best end to end, ONNX Runtime "
            f"and numpy, each after {_report.SETTLE_S:g} s of idle and {WARMUP} untimed calls, "
            f"the median of {repeats} timed calls; each keeps its median round",
            "",
            "A peer's wall time over laytune's end to end (above 1: laytune is faster), "
            "round by round: the median of the rounds' ratios and, in brackets, their range; "
            "`start / best`: the best derived start's end-to-end time over the best's, "
            "both re-measured in the interleaved rounds (the start picked by the job's own "
            "times; 1.00: the search found nothing better than a start).",
            "",
            *_report.table(
                [
                    "workload",
                    "form",
                    "laytune (ms)",
                    "peer / laytune",
                    "start / best",
                    "trials",
                    "best from",
                ],
                summaries,
                "llrlrll",
            ),
            "",
            *_report.table(
                [
                    "workload",
                    "implementation",
                    "event (ms)",
                    "wall (ms)",
                    "rate",
                    "% of peak",
                    "note",
                ],
                [r.cells() for r in rows],
                "llrrrrl",
            ),
            "",
        ]
    )
    path = _report.write(RESULT_NAME, text, args.out)
    print(f"written to {_report.shown(path)}")


if __name__ == "__main__":
    main()
