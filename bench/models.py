"""Whole models: a ResNet-18, a BERT-base encoder layer and a MobileNet-v2,
tuned and planned by laytune, beside ONNX Runtime.

    python -m bench.models [--quick] [--trials N] [--only resnet18|bert|mobilenet_v2]
                           [--db URL] [--repeats N] [--out FILE] [--winograd]

The models are written by :mod:`bench._onnx_models` with seeded random
weights (nothing is downloaded): ResNet-18 at 1 x 3 x 224 x 224, one
BERT-base encoder layer at sequence length 128 (hidden 768, 12 heads, FFN
3072) and MobileNet-v2 at 1 x 3 x 224 x 224 (depthwise convolutions, ReLU6,
channel counts 16 does not divide: the network nobody fitted the starts to);
``--quick`` runs small ones (ResNet-18 at 1 x 3 x 64 x 64 with 16
channels in its first stage, a BERT layer of hidden 128, 4 heads, FFN 512 at
sequence 32, MobileNet-v2 at half width on 1 x 3 x 64 x 64) with 4 trials
per workload, to check the benchmark end to end.

Per model, on the default OpenCL device (``LAYTUNE_DEVICE`` picks another):

1. ``laytune.plan.tune_model`` (what ``laytune tune-model`` runs) tunes each
   distinct layout-critical workload with the epilogue its plan fuses for
   ``--trials`` trials, then the conversions its plan runs, into ``--db``
   (default: a scratch SQLite file); its wall time is the fused rows' tuning
   time. Then ``tune_model(fuse=False)`` tunes the bare operators the unfused
   plan runs, the same way, for the unfused row. A database that holds the trials
   already is reused, so the tuning time is then this run's (little or none).
   With ``--winograd`` each 3 x 3 stride-1 convolution is tuned both directly
   and in Winograd's F(2 x 2, 3 x 3) (``tune-model --winograd``), and every
   laytune row runs the form its records (or, measured, its plan) time faster.
2. Seven implementations, each checked against ONNX Runtime's outputs on the
   same random inputs (the largest absolute difference over the largest
   absolute output of ONNX Runtime):

   - ONNX Runtime, CPU execution provider, ``intra_op_num_threads=2``;
   - laytune planned and fused: ``laytune.load_model(model, database=db)``;
   - laytune fused, measured in the plan: ``freeze_model(model, db,
     measure=True)`` (``laytune freeze --model --measure``: each workload's
     kernel chosen by timing a few recorded candidates in the whole plan),
     loaded from that frozen file;
   - laytune planned, unfused: the same records, ``fuse=False``;
   - laytune untuned: no records, the starts derived from each convolution's
     and matmul's statement (``load_model(model)``: what a model nobody
     tuned runs), fused;
   - laytune per operator in logical layouts: no records, ``fuse=False``,
     ``derive=False`` (every operator its own kernel, identity layouts);
   - the fused plan exported (``laytune export FROZEN --model``, here
     ``export_model`` from the database) and run by
     ``examples/opencl_host/model_host.c``, one inference per line it reads
     on a pipe; checked by the host against the graph's numpy reference
     (where a C compiler and the OpenCL headers are installed).

**Times.** End-to-end wall time of one inference with the inputs and
outputs on the host (``model(**inputs)``, ``session.run(None, inputs)``):
after two warm-up runs, ``--repeats`` rounds in which each implementation
idles 0.3 s, runs twice untimed and three times timed (both runtimes' threads
spin on the cores for a while after a run, which would slow the other's
runs; see ``time_all``), interleaved so that the host's load falls on all
alike (an implementation slower than a second a run is timed in the first
three rounds only); medians and minima. Then the fused plan is profiled
(``CompiledPlan.profile``: OpenCL events per launch, medians) and its
costliest steps are listed: where the time goes. The host is shared, so the
report states the load average before and after. The report is written to
``bench/results/models.md`` (``--out`` another file).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench import _report
from bench._onnx_models import bert_layer, mobilenet_v2, resnet18
from bench.peers import relative_error

RESULT_NAME = "models.md"
#: a run slower than this (seconds) is timed in the first rounds only
SLOW_S = 1.0
SLOW_ROUNDS = 3
#: idle seconds before an implementation's block of runs (see time_all)
SETTLE_S = _report.SETTLE_S
#: untimed, then timed runs of an implementation in each round
WARM_RUNS, BLOCK_RUNS = 2, 3
#: the fused plan's costliest steps listed per model
TOP_STEPS = 12


#: Per model: its builder, and the arguments and words of its full size and
#: of its ``--quick`` size.
_SIZES: dict[
    str, tuple[Callable[..., Any], tuple[dict[str, Any], str], tuple[dict[str, Any], str]]
] = {
    "resnet18": (
        resnet18,
        ({}, "ResNet-18, 1 x 3 x 224 x 224"),
        ({"size": 64, "width": 16, "classes": 10}, "ResNet-18, 16-128 channels, 1 x 3 x 64 x 64"),
    ),
    "bert": (
        bert_layer,
        ({}, "BERT-base encoder layer, seq 128"),
        ({"sequence": 32, "hidden": 128, "heads": 4, "ffn": 512}, "BERT layer, hidden 128, seq 32"),
    ),
    "mobilenet_v2": (
        mobilenet_v2,
        ({}, "MobileNet-v2, 1 x 3 x 224 x 224"),
        ({"size": 64, "width": 0.5, "classes": 10}, "MobileNet-v2 x 0.5, 1 x 3 x 64 x 64"),
    ),
}
#: The models, in the order a run takes them.
MODELS = tuple(_SIZES)


def build(name: str, quick: bool) -> tuple[Any, str]:
    """The model (``onnx.ModelProto``) and the words that describe it."""
    builder, full, small = _SIZES[name]
    kwargs, words = small if quick else full
    return builder(**kwargs), words


@dataclass
class Implementation:
    """One way to run a model: its call, its outputs and its times."""

    name: str
    run: Callable[[], list[np.ndarray]]
    kernels: str = "-"
    error: float = float("nan")
    walls: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.walls)


@dataclass
class Outcome:
    """What one model's benchmark found."""

    name: str
    words: str
    tuning_s: float
    tuning: Any
    unfused_tuning_s: float
    measure_s: float
    implementations: list[Implementation]
    top_steps: list[tuple[str, float]]
    profiled_s: float
    plan_head: str


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.1f} (5 min: {five:.1f})"


def onnx_runtime(model: Any) -> Callable[[dict[str, np.ndarray]], list[np.ndarray]]:
    """``run(inputs)``: the model in a 2-thread ONNX Runtime CPU session."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 2
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return lambda inputs: session.run(None, inputs)


def tune(
    model: Any,
    device: Any,
    trials: int,
    database: str,
    fuse: bool = True,
    winograd: bool = False,
) -> tuple[Any, float]:
    """``tune_model``'s outcome and its wall time (``fuse``: the fused
    kernels, else the bare operators; ``winograd``: both forms of each 3 x 3
    stride-1 convolution); Ctrl-C stops the benchmark."""
    import laytune
    from laytune.plan import tune_model

    start = time.perf_counter()
    tuning = tune_model(
        model,
        device,
        options=laytune.TuneOptions(trials=trials),
        database=database,
        fuse=fuse,
        winograd=winograd,
    )
    elapsed = time.perf_counter() - start
    if tuning.interrupted:
        raise KeyboardInterrupt(f"{tuning.graph}: tuning interrupted")
    print(tuning.summary(), file=sys.stderr, flush=True)
    return tuning, elapsed


def time_all(implementations: Sequence[Implementation], rounds: int) -> None:
    """Two warm-up runs each, then ``rounds`` interleaved rounds in which each
    implementation, after :data:`SETTLE_S` of idle, runs :data:`WARM_RUNS`
    times untimed and :data:`BLOCK_RUNS` times timed.

    Both runtimes keep their threads spinning on the cores for a while after
    a run: ONNX Runtime's thread pool and the OpenCL runtime's workers. On 2
    cores, whichever implementation ran right after the other was slowed by
    them (ResNet-18: laytune 20.5 ms alone, 37.4 ms right after ONNX Runtime;
    ONNX Runtime also slowed after laytune), so each block starts once the
    other's threads have gone idle, and its first runs are not timed."""
    for impl in implementations:
        for _ in range(2):
            impl.run()
    for r in range(rounds):
        for impl in implementations:
            if r >= SLOW_ROUNDS and impl.walls and impl.median > SLOW_S:
                continue
            time.sleep(SETTLE_S)
            for _ in range(WARM_RUNS):
                impl.run()
            for _ in range(BLOCK_RUNS):
                start = time.perf_counter()
                impl.run()
                impl.walls.append(time.perf_counter() - start)


MODEL_HOST = Path(__file__).resolve().parents[1] / "examples" / "opencl_host" / "model_host.c"
C_HOST = "laytune exported, C host"
MEASURED = "laytune fused, measured in the plan"


@contextlib.contextmanager
def c_host(model: Any, database: str, device: Any, folder: Path, winograd: bool = False) -> Any:
    """The fused plan written by ``export_model`` and run by
    ``examples/opencl_host/model_host.c`` in its serve mode (one inference per
    line it reads), as an :class:`Implementation`; its error is the host's own
    check against the graph's numpy reference (on the export's inputs), over
    that reference's largest value. None, with the reason on stderr, where no
    C compiler or OpenCL headers are found or the build fails."""
    from laytune.plan import export_model
    from laytune.runners import register_opencl_runtimes

    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        print("no C compiler: the C host row is left out", file=sys.stderr)
        yield None
        return
    export_model(model, database, folder, device, reference=True, winograd=winograd)
    (header,) = folder.glob("*.h")
    (description,) = (json.loads(p.read_text()) for p in folder.glob("*.json"))
    binary = folder / "model_host"
    command = [cc, "-std=c99", "-O2", "-include", str(header), str(MODEL_HOST), "-lOpenCL"]
    built = subprocess.run([*command, "-lm", "-o", str(binary)], capture_output=True, text=True)
    if built.returncode != 0:
        print(f"the C host did not build, its row is left out:\n{built.stderr}", file=sys.stderr)
        yield None
        return
    register_opencl_runtimes()
    host = subprocess.Popen(
        [str(binary), str(folder), "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert host.stdin is not None and host.stdout is not None
        error = 0.0
        for output in description["outputs"]:
            line = host.stdout.readline()
            reference = np.fromfile(folder / output["reference_file"], dtype="<f4")
            worst = float(line.split("max abs error ")[1].split(",")[0])
            error = max(error, worst / float(np.abs(reference).max()))
            if "matches the reference" not in line:
                error = float("inf")

        def run(stdin: Any = host.stdin, stdout: Any = host.stdout) -> list[np.ndarray]:
            stdin.write("\n")
            stdin.flush()
            if stdout.readline() != "ran\n":
                raise RuntimeError("the C host stopped")
            return []

        yield Implementation(C_HOST, run, str(len(description["launches"])), error)
    finally:
        if host.stdin is not None:
            host.stdin.close()
        host.wait(timeout=30)


def bench_model(
    name: str,
    quick: bool,
    device: Any,
    trials: int,
    database: str,
    repeats: int,
    winograd: bool = False,
) -> Outcome:
    import laytune
    from laytune.plan import freeze_model, from_onnx, random_inputs

    model, words = build(name, quick)
    graph = from_onnx(model)
    inputs = random_inputs(graph, seed=1)
    print(
        f"{words}: {len(graph.ops)} operators; tuning {trials} trials per workload", file=sys.stderr
    )
    tuning, tuning_s = tune(model, device, trials, database, True, winograd)
    frozen_dir = tempfile.TemporaryDirectory()
    start = time.perf_counter()
    measured = freeze_model(
        model,
        database,
        Path(frozen_dir.name) / "measured.json",
        device,
        measure=True,
        winograd=winograd,
    )
    measure_s = time.perf_counter() - start
    _, unfused_tuning_s = tune(model, device, trials, database, False, winograd)
    ort = onnx_runtime(model)
    expected = [np.asarray(a, dtype=np.float64) for a in ort(inputs)]
    models = {
        "laytune planned, fused": laytune.load_model(model, database, device, winograd=winograd),
        MEASURED: laytune.load_model(model, str(measured), device, winograd=winograd),
        "laytune planned, unfused": laytune.load_model(
            model, database, device, fuse=False, winograd=winograd
        ),
        "laytune untuned, derived starts": laytune.load_model(model, None, device),
        "laytune per operator, logical layouts": laytune.load_model(
            model, None, device, fuse=False, derive=False
        ),
    }
    with contextlib.ExitStack() as stack:
        stack.callback(frozen_dir.cleanup)
        for m in models.values():
            stack.callback(m.close)
        exported = stack.enter_context(tempfile.TemporaryDirectory())
        host = stack.enter_context(c_host(model, database, device, Path(exported), winograd))
        impls = [Implementation("ONNX Runtime (2 threads)", lambda: ort(inputs), error=0.0)]
        for label, m in models.items():
            impl = Implementation(
                label, lambda m=m: m(**inputs), kernels=str(len(m.compiled.steps))
            )
            impl.error = max(
                relative_error(g, e) for g, e in zip(impl.run(), expected, strict=True)
            )
            impls.append(impl)
        if host is not None:
            impls.append(host)
        time_all(impls, repeats)
        fused = models["laytune planned, fused"]
        time.sleep(SETTLE_S)  # the runtimes' threads idle, as before each timed block
        profile = fused.profile(inputs, repeats=5)
        steps = sorted(profile.per_step, key=lambda s: -s[1])
        plan_head = str(fused.plan).split("\ntensors:")[0]
    return Outcome(
        name,
        words,
        tuning_s,
        tuning,
        unfused_tuning_s,
        measure_s,
        impls,
        steps[:TOP_STEPS],
        profile.device_median,
        plan_head,
    )


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def _tuning_words(outcome: Outcome) -> str:
    tuning = outcome.tuning
    operators = sum(1 for j in tuning.jobs if j.kind == "operator")
    conversions = len(tuning.jobs) - operators
    return (
        f"{operators} workloads and {conversions} conversions, {tuning.measured} candidates "
        f"measured in {outcome.tuning_s:.0f} s"
    )


def report(outcomes: Sequence[Outcome], args: argparse.Namespace, device: Any, load: str) -> str:
    command = "python -m bench.models " + " ".join(sys.argv[1:] if args.argv is None else args.argv)
    lines = [
        "# Whole models beside ONNX Runtime: " + ", ".join(o.words.split(",")[0] for o in outcomes),
        "",
        f"`{command.strip()}`",
        "",
        *_report.environment(device),
        f"- load average {load}",
        f"- {args.trials} trials per workload, default strategy"
        + (
            "; Winograd's form tuned beside each 3 x 3 stride-1 convolution (`--winograd`)"
            if args.winograd
            else ""
        )
        + f"; {args.repeats} interleaved "
        f"rounds after 2 warm-up runs, in each an implementation idles {SETTLE_S:g} s, runs "
        f"{WARM_RUNS} times untimed and {BLOCK_RUNS} times timed (an implementation slower "
        "than 1 s a run: the first 3 rounds)",
        "",
        "Wall time of one inference, inputs and outputs on the host; ORT / it above 1: "
        "faster than ONNX Runtime. Error: the largest absolute difference from ONNX "
        "Runtime's output over its largest absolute value (the C host's row: from the "
        "graph's numpy reference, its own check). The C host's row is the fused plan as "
        "`laytune export FROZEN --model` writes it, run by "
        "`examples/opencl_host/model_host.c`, each inference asked for over a pipe.",
        "",
    ]
    rows = []
    for o in outcomes:
        ort = o.implementations[0].median
        for impl in o.implementations:
            tuned = {
                "laytune planned, fused": o.tuning_s,
                "laytune planned, unfused": o.unfused_tuning_s,
                MEASURED: o.tuning_s + o.measure_s,
            }.get(impl.name)
            rows.append(
                [
                    o.words,
                    impl.name,
                    _ms(impl.median),
                    _ms(min(impl.walls)),
                    f"{ort / impl.median:.2f}x",
                    impl.kernels,
                    f"{impl.error:.1e}",
                    "-" if tuned is None else f"{tuned:.0f} s",
                ]
            )
    lines += _report.table(
        [
            "model",
            "implementation",
            "median (ms)",
            "min (ms)",
            "ORT / it",
            "kernels per run",
            "error vs ORT",
            "tuning",
        ],
        rows,
        "llrrrrrr",
    )
    for o in outcomes:
        by_name = {impl.name: impl for impl in o.implementations}
        fused, unfused = by_name["laytune planned, fused"], by_name["laytune planned, unfused"]
        measured = by_name.get(MEASURED)
        lines += [
            "",
            f"## {o.words}",
            "",
            f"Tuning: {_tuning_words(o)}. Unfused / fused: "
            f"{unfused.median / fused.median:.2f}x by the medians, "
            f"{min(unfused.walls) / min(fused.walls):.2f}x by the minima."
            + (
                ""
                if measured is None
                else f" Planned / measured in the plan (its choice took {o.measure_s:.0f} s "
                f"beyond the tuning): {fused.median / measured.median:.2f}x by the medians, "
                f"{min(fused.walls) / min(measured.walls):.2f}x by the minima."
            ),
            "",
            f"The fused plan's costliest launches (OpenCL events, median of 5 runs; "
            f"all launches {_ms(o.profiled_s)} ms a run):",
            "",
            *_report.table(
                ["step", "ms", "share"],
                [[label, _ms(s), f"{s / o.profiled_s:.0%}"] for label, s in o.top_steps],
                "lrr",
            ),
            "",
            "```",
            o.plan_head,
            "```",
        ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.models", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="small models, 4 trials")
    parser.add_argument("--trials", type=int, help="trials per workload (32; --quick 4)")
    parser.add_argument("--only", choices=MODELS, help="one model")
    parser.add_argument("--db", help="tuning database URL to reuse (default: a scratch file)")
    parser.add_argument("--repeats", type=int, default=20, help="timed rounds (20)")
    parser.add_argument("--out", help="report file (bench/results/models.md)")
    parser.add_argument(
        "--winograd",
        action="store_true",
        help="tune both forms of each 3 x 3 stride-1 convolution and run the faster "
        "(tune-model --winograd)",
    )
    args = parser.parse_args(argv)
    args.argv = argv
    if args.trials is None:
        args.trials = 4 if args.quick else 32
    if args.trials < 1 or args.repeats < 1:
        parser.error("--trials and --repeats must be at least 1")
    from laytune.runners import default_device

    device = default_device()
    names = (args.only,) if args.only else MODELS
    load = f"{_load()} before"
    with tempfile.TemporaryDirectory() as scratch:
        database = args.db or f"sqlite:///{scratch}/models.db"
        outcomes = [
            bench_model(n, args.quick, device, args.trials, database, args.repeats, args.winograd)
            for n in names
        ]
    load += f", {_load()} after"
    text = report(outcomes, args, device, load)
    print(text)
    path = _report.write(RESULT_NAME, text, Path(args.out) if args.out else None)
    print(f"written to {_report.shown(path)}")


if __name__ == "__main__":
    main()
