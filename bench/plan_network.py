"""Graph-level layout planning end to end: two small networks, four plans, side by side.

    python -m bench.plan_network [--tune TRIALS] [--tune-conversions TRIALS] [--repeats N]
        [--db URL] [--only NAME] [--out FILE]

The networks, on the default OpenCL device (``LAYTUNE_DEVICE`` picks another),
float32, weights and biases constant:

* ``conv x2``: two blocks of conv2d (3 x 3, padding 1, 32 -> 32 channels) +
  bias_add + relu, then a 2 x 2 max_pool2d, on a (1, 32, 56, 56) input;
* ``thin``: few channels on a large image, where conversions are a real share
  of the time: x (1, 8, 224, 224) -> conv2d 1 x 1 (8 -> 16) + bias + relu = a;
  a -> conv2d 3 x 3 (16 -> 16, padding 1) + bias + relu = b; output a + b
  (an element-wise add).

**Records.** Each conv2d gets measured candidates, written to a records
database (``--db``; default a temporary file, a file given is reused): three
fixed ones, the identity layouts and NCHW4c / NCHW8c (input and output
``block(axis=1)``, weights OIHW[x]i[x]o) with ``block.ow=8``, each measured
with its pack and unpack kernels and priced under the default boundary
(inputs and outputs fixed to their logical layouts, weights constant); then
two tunes of ``--tune`` trials each (default 48; 0: none), one with that
default boundary and one with X and Y ``free`` (the kernels alone ranked:
the candidates a graph could adopt, whose conversions the planner must
weigh); then ``laytune.search.tune_conversions`` over the conv2d records
(``--tune-conversions`` trials each, default 24; 0: none), so that the
rewrites a plan shares with the records run, and are priced by, tuned
conversion kernels.

**Plans.**

* ``identity``: every tensor in its logical layout;
* ``per-operator best``: each conv2d in its best record end to end (with its
  conversions), rewrites through the logical layout
  (``plan_layouts(graph, db, minimize=False)``);
* ``fastest kernels``: each conv2d in its fastest kernel, rewrites flowed,
  folded and cancelled (the planner without weighing: a dict source);
* ``weighed``: ``plan_layouts(graph, db)``: the planner picks among the
  recorded candidates the set whose kernels plus the rewrites left are least.

**Times.** OpenCL profiling events summed over every launch of one run
(device), and the wall time from the first enqueue to the end of the queue
(input upload and output read-back, equal in all plans, are not timed);
medians over ``--repeats`` runs, the plans interleaved run by run. The
predicted time (``Plan.predicted_s``: recorded kernels and conversions; an
operator or rewrite with no record is estimated from its bytes, and says so)
stands beside the measured one; the weighed plan is printed with both per
step. Every plan's output is checked against numpy first. The report is
written to ``bench/results/plan_network.md``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import laytune
from bench import _report
from laytune import layout as L
from laytune import ops
from laytune.codegen import lower
from laytune.plan import Graph, Plan, plan_layouts
from laytune.records import Boundary, Record, open_database
from laytune.runners import Builder, MeasureConfig, RunInput, Runner, default_device
from laytune.space import Candidate

KNOBS = {"block.ow": 8}
MEASURE = MeasureConfig(warmup=2, repeats=10, measure_conversions=True, time_limit_s=120)


def add(shape: tuple[int, ...]) -> ops.Workload:
    """``Y = A + B``, element-wise."""
    names = [f"d{k}" for k in range(len(shape))]
    idx = ", ".join(names)
    return ops.Workload.define(
        "add",
        f"Y[{idx}] = A[{idx}] + B[{idx}]",
        dict(zip(names, shape, strict=True)),
        {"A": shape, "B": shape},
    )


def _constant(g: Graph, name: str, shape: tuple[int, ...], rng: Any, scale: float) -> str:
    return g.constant(name, rng.uniform(-scale, scale, shape).astype(np.float32))


def _block(g: Graph, t: str, conv: ops.Workload, k: int, rng: Any) -> str:
    """conv + bias + relu; the name of the result."""
    w_shape = conv.buffer("W").shape
    w = _constant(g, f"w{k}", w_shape, rng, 1.0 / np.sqrt(np.prod(w_shape[1:])))
    b = _constant(g, f"b{k}", (w_shape[0],), rng, 0.1)
    shape = conv.buffer("Y").shape
    t = g.apply(conv, f"conv{k}", X=t, W=w)
    t = g.apply(ops.bias_add(shape, axis=1), f"bias{k}", X=t, B=b)
    return g.apply(ops.relu(shape), f"relu{k}", X=t)


def conv_network() -> tuple[Graph, list[ops.Workload]]:
    rng = np.random.default_rng(0)
    g = Graph("conv x2")
    t = g.input("x", (1, 32, 56, 56))
    convs = [ops.conv2d(1, 32, 56, 56, 32, 3, stride=1, padding=1) for _ in range(2)]
    for k, conv in enumerate(convs, 1):
        t = _block(g, t, conv, k, rng)
    g.output(g.apply(ops.max_pool2d(1, 32, 56, 56, 2, 2), "pool", X=t))
    return g, convs


def thin_network() -> tuple[Graph, list[ops.Workload]]:
    rng = np.random.default_rng(0)
    g = Graph("thin")
    x = g.input("x", (1, 8, 224, 224))
    pointwise = ops.conv2d(1, 8, 224, 224, 16, 1)
    spatial = ops.conv2d(1, 16, 224, 224, 16, 3, stride=1, padding=1)
    a = _block(g, x, pointwise, 1, rng)
    b = _block(g, a, spatial, 2, rng)
    g.output(g.apply(add((1, 16, 224, 224)), "sum", A=a, B=b))
    return g, [pointwise, spatial]


NETWORKS: dict[str, Callable[[], tuple[Graph, list[ops.Workload]]]] = {
    "conv x2": conv_network,
    "thin": thin_network,
}


def candidates(conv: ops.Workload) -> dict[str, Candidate]:
    """The measured candidates of one conv2d: identity, NCHW4c, NCHW8c."""
    out = {"identity": Candidate.make({b.name: L.identity(b.shape) for b in conv.buffers}, KNOBS)}
    for x in (4, 8):
        if conv.buffer("X").shape[1] % x or conv.buffer("Y").shape[1] % x:
            continue
        weights = L.block(conv.buffer("W").shape, 1, x)
        out[f"NCHW{x}c"] = Candidate.make(
            {
                "X": L.block(conv.buffer("X").shape, 1, x),
                "W": L.compose(L.block(weights.physical_shape, 0, x), weights),
                "Y": L.block(conv.buffer("Y").shape, 1, x),
            },
            KNOBS,
        )
    return out


def record(db: Any, device: Any, convs: list[ops.Workload]) -> None:
    """Measure every candidate not recorded yet (kernel, pack and unpack)."""
    wanted = []
    for conv in {c.key: c for c in convs}.values():
        for candidate in candidates(conv).values():
            if db.lookup(conv.key, device.key, candidate.key) is None:
                wanted.append((conv, candidate, lower(conv, candidate, device.info)))
    if not wanted:
        return
    with Builder(device) as builder, Runner(device, MEASURE) as runner:
        built = builder.build([program for _, _, program in wanted])
        results = runner.run(
            [RunInput(b, conv) for b, (conv, _, _) in zip(built, wanted, strict=True)]
        )
    for (conv, candidate, program), result in zip(wanted, results, strict=True):
        boundary = Boundary.default(conv)
        db.add(
            Record.measured(result, candidate, program, device_name=device.name, boundary=boundary)
        )


def plans(graph: Graph, convs: list[ops.Workload], db: Any, device: Any) -> dict[str, Plan]:
    info = device.info
    fastest = {}
    for conv in convs:
        found = [r for r in db.records(workload=conv, device=device, status="ok")]
        fastest[conv.key] = min(found, key=lambda r: (r.compute_s, r.id)).candidate
    identity = {c.key: candidates(c)["identity"] for c in convs}
    return {
        "identity": plan_layouts(graph, identity, info, records=db),
        "per-operator best": plan_layouts(graph, db, info, minimize=False),
        "fastest kernels": plan_layouts(graph, fastest, info, records=db),
        "weighed": plan_layouts(graph, db, info),
    }


BOUNDARIES = {"fixed": None, "free": {"X": "free", "Y": "free"}}
"""The two tunes of each conv2d: the default boundary, and X and Y free."""


def tune(url: str, device: Any, convs: list[ops.Workload], trials: int) -> None:
    """``trials`` candidates per conv2d and boundary, into ``url`` (a tune
    that finds its records there measures nothing twice)."""
    for conv in {c.key: c for c in convs}.values():
        for label, boundary in BOUNDARIES.items():
            options = laytune.TuneOptions(trials=trials, boundary=boundary)
            result = _report.tune(conv, device, options=options, database=url, progress=False)
            best = result.best
            shown = "-" if best is None else f"{best.value_s * 1e3:.3f} ms"
            print(f"  tuned {conv.key} ({label}): {result.measured} measured, best {shown}")


def tune_rewrites(url: str, device: Any, convs: list[ops.Workload], trials: int) -> None:
    """Tune the conversions the conv2d's best records pay for."""
    from laytune.search import tune_conversions

    keys = sorted({c.key for c in convs})
    options = laytune.TuneOptions(trials=trials)
    for result in tune_conversions(url, device, workloads=keys, options=options, progress=False):
        best = _report.stop_if_interrupted(result).best
        shown = "-" if best is None else f"{best.value_s * 1e3:.3f} ms"
        print(f"  tuned conversion {result.workload_key}: best {shown}")


def run_network(
    name: str,
    url: str,
    db: Any,
    device: Any,
    context: Any,
    repeats: int,
    trials: int,
    conversion_trials: int,
) -> list[str]:
    graph, convs = NETWORKS[name]()
    record(db, device, convs)
    if trials:
        tune(url, device, convs, trials)
    if conversion_trials:
        tune_rewrites(url, device, convs, conversion_trials)
    planned = plans(graph, convs, db, device)
    x = np.random.default_rng(1).uniform(-1, 1, graph.tensors["x"].shape).astype(np.float32)
    want = graph.reference({"x": x})
    compiled = {}
    for label, plan in planned.items():
        compiled[label] = plan.compile(context)
        got = compiled[label].run({"x": x})
        for out, value in want.items():
            np.testing.assert_allclose(got[out], value, rtol=1e-3, atol=1e-3, err_msg=label)
        compiled[label].profile({"x": x}, repeats=1, warmup=2)
    timings: dict[str, list[Any]] = {label: [] for label in planned}
    for _ in range(repeats):
        for label, c in compiled.items():
            timings[label].append(c.profile({"x": x}, repeats=1, warmup=0))
    rows = []
    base = statistics.median(t.device_seconds[0] for t in timings["identity"])
    for label, plan in planned.items():
        device_s = statistics.median(t.device_seconds[0] for t in timings[label])
        wall_s = statistics.median(t.wall_seconds[0] for t in timings[label])
        steps = compiled[label].steps
        rewrite_s = statistics.median(
            sum(s for step, (_, s) in zip(steps, t.per_step, strict=True) if step.kind == "rewrite")
            for t in timings[label]
        )
        predicted = plan.predicted_s
        rewrites = [p.seconds for p in plan.predictions if p.kind == "rewrite"]
        predicted_rewrites = None if None in rewrites else sum(rewrites)  # type: ignore[arg-type]
        rows.append(
            [
                label,
                f"{len(steps)}",
                f"{sum(s.kind == 'rewrite' for s in steps)}",
                f"{plan.rewrite_bytes / 2**20:.2f}",
                "-" if predicted is None else f"{predicted * 1e3:.3f}",
                f"{device_s * 1e3:.3f}",
                "-" if predicted_rewrites is None else f"{predicted_rewrites * 1e3:.3f}",
                f"{rewrite_s * 1e3:.3f}",
                f"{wall_s * 1e3:.3f}",
                f"{base / device_s:.2f}x",
            ]
        )
        print(f"  {label}: predicted {rows[-1][4]} ms, device {rows[-1][5]} ms", flush=True)
    weighed = planned["weighed"].with_timing(compiled["weighed"].profile({"x": x}, repeats=5))
    for c in compiled.values():
        c.release()
    shape = graph.tensors["x"].shape
    return [
        f"## {graph.name}, input {shape}",
        "",
        *_report.table(
            (
                "plan",
                "launches",
                "rewrite launches",
                "rewrite MiB per run",
                "predicted ms",
                "device ms",
                "rewrites predicted ms",
                "rewrite ms",
                "wall ms",
                "device vs identity",
            ),
            rows,
            "lrrrrrrrrr",
        ),
        "",
        "The weighed plan, predicted and measured per step:",
        "",
        "```",
        str(weighed),
        "```",
        "",
    ]


def main(argv: list[str] | None = None) -> None:
    import pyopencl as cl

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument(
        "--tune", type=int, default=48, metavar="TRIALS", help="trials per conv2d and boundary"
    )
    parser.add_argument(
        "--tune-conversions",
        type=int,
        default=24,
        metavar="TRIALS",
        help="trials per conversion the conv2d records pay for (0: none)",
    )
    parser.add_argument("--db", help="records database to measure into and reuse (default: temp)")
    parser.add_argument("--only", choices=sorted(NETWORKS), help="one network")
    parser.add_argument("--out", type=Path, help="report file (default bench/results/...)")
    args = parser.parse_args(argv)
    device = default_device()
    context = cl.Context([device.open()])
    print(f"device: {device.name}", flush=True)
    with tempfile.TemporaryDirectory(prefix="laytune-bench-") as scratch:
        url = args.db or f"sqlite:///{Path(scratch) / 'plan_network.db'}"
        db = open_database(url)
        sections = []
        for name in [args.only] if args.only else list(NETWORKS):
            print(f"{name} ...", flush=True)
            sections += run_network(
                name, url, db, device, context, args.repeats, args.tune, args.tune_conversions
            )
        db.close()
    text = "\n".join(
        [
            "# Layout planning: weighing conversions against kernels",
            "",
            *_report.environment(device),
            f"- {args.repeats} runs per plan, interleaved; medians of OpenCL event times summed "
            "over one run's launches (device; rewrite: the rewrite launches alone) and of first "
            "enqueue to queue end (wall); outputs checked against numpy",
            "- records: identity, NCHW4c and NCHW8c candidates of each conv2d with block.ow=8, "
            "measured with their pack and unpack kernels"
            + (
                f"; then two tunes of each conv2d, {args.tune} trials each (strategy "
                f"{laytune.TuneOptions().strategy}): X and Y fixed "
                "to NCHW (kernel plus conversions ranked), and X and Y free (kernels alone)"
                if args.tune
                else " (no tune)"
            )
            + (
                f"; then the conversions the conv2d records pay for, {args.tune_conversions} "
                "trials each (`tune_conversions`: timed cold, then warm)"
                if args.tune_conversions
                else ""
            ),
            "",
            *sections,
        ]
    )
    written = _report.write("plan_network.md", text, args.out)
    print(f"written to {_report.shown(written)}")


if __name__ == "__main__":
    main()
