"""Graph-level layout planning end to end: one small network, three plans, side by side.

    python -m bench.plan_network [--channels C] [--size H] [--repeats N]

The network: two blocks of conv2d (3 x 3, padding 1, C -> C channels) + bias_add
+ relu, then a 2 x 2 max_pool2d, on a (1, C, H, H) float32 input; weights and
biases are constants. It runs on the default OpenCL device in three plans:

* ``identity``: every tensor in its logical layout;
* ``per-operator``: each conv2d in its best layout with conversions around it
  (``plan_layouts(..., minimize=False)``);
* ``planned``: the same frozen layouts, with the rewrites flowed, folded and
  cancelled by ``laytune.plan``.

"Best layout" is a fixed known-good candidate, not a tune: conv2d input and
output NCHW4c (``block(axis=1, factor=4)``), weights OIHW4i4o, ``block.ow=8``;
the identity plan runs conv2d with the same knobs, so only layouts differ.
Constants are packed on the host in every plan. Times are OpenCL profiling
events summed over every launch of one run, and the wall time from the first
enqueue to the end of the queue (input upload and output read-back, equal in
all plans, are not timed); medians over the repeats, with the three plans
interleaved repeat by repeat so that drift hits them alike. Every plan's
output is checked against numpy first. The table is also written to
``bench/results/plan_network.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pyopencl as cl

import laytune
from laytune import layout as L
from laytune import ops
from laytune.plan import Graph, Plan, plan_layouts
from laytune.runners import default_device
from laytune.space import Candidate

RESULTS = Path(__file__).parent / "results" / "plan_network.md"
KNOBS = {"block.ow": 8}


def network(channels: int, size: int) -> tuple[Graph, list[ops.Workload]]:
    rng = np.random.default_rng(0)
    g = Graph("conv-bias-relu x2, max_pool")
    t = g.input("x", (1, channels, size, size))
    convs = []
    for k in (1, 2):
        conv = ops.conv2d(1, channels, size, size, channels, 3, stride=1, padding=1)
        convs.append(conv)
        scale = 1.0 / np.sqrt(channels * 9)
        w = g.constant(
            f"w{k}", rng.uniform(-scale, scale, conv.buffer("W").shape).astype(np.float32)
        )
        b = g.constant(f"b{k}", rng.uniform(-0.1, 0.1, channels).astype(np.float32))
        t = g.apply(conv, f"conv{k}", X=t, W=w)
        t = g.apply(ops.bias_add((1, channels, size, size), axis=1), f"bias{k}", X=t, B=b)
        t = g.apply(ops.relu((1, channels, size, size)), f"relu{k}", X=t)
    g.output(g.apply(ops.max_pool2d(1, channels, size, size, 2, 2), "pool", X=t))
    return g, convs


def best(conv: ops.Workload) -> Candidate:
    weights = L.block(conv.buffer("W").shape, 1, 4)
    return Candidate.make(
        {
            "X": L.block(conv.buffer("X").shape, 1, 4),
            "W": L.compose(L.block(weights.physical_shape, 0, 4), weights),
            "Y": L.block(conv.buffer("Y").shape, 1, 4),
        },
        KNOBS,
    )


def identity(conv: ops.Workload) -> Candidate:
    return Candidate.make({b.name: L.identity(b.shape) for b in conv.buffers}, KNOBS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--channels", type=int, default=32)
    parser.add_argument("--size", type=int, default=56)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()

    device = default_device()
    context = cl.Context([device.open()])
    info = device.info
    graph, convs = network(args.channels, args.size)
    plans: dict[str, Plan] = {
        "identity": plan_layouts(graph, {c.key: identity(c) for c in convs}, info),
        "per-operator": plan_layouts(graph, {c.key: best(c) for c in convs}, info, minimize=False),
        "planned": plan_layouts(graph, {c.key: best(c) for c in convs}, info),
    }
    x = np.random.default_rng(1).uniform(-1, 1, graph.tensors["x"].shape).astype(np.float32)
    want = graph.reference({"x": x})["pool"]
    compiled = {}
    for name, plan in plans.items():
        compiled[name] = plan.compile(context)
        got = compiled[name].run({"x": x})["pool"]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"plan {name}")
        compiled[name].profile({"x": x}, repeats=1, warmup=2)
    device_times: dict[str, list[float]] = {name: [] for name in plans}
    wall_times: dict[str, list[float]] = {name: [] for name in plans}
    rewrite_times: dict[str, list[float]] = {name: [] for name in plans}
    for _ in range(args.repeats):
        for name, c in compiled.items():
            timing = c.profile({"x": x}, repeats=1, warmup=0)
            device_times[name].append(timing.device_seconds[0])
            wall_times[name].append(timing.wall_seconds[0])
            rewrite_times[name].append(
                sum(
                    t
                    for s, (_, t) in zip(c.steps, timing.per_step, strict=True)
                    if s.kind == "rewrite"
                )
            )

    base_device = statistics.median(device_times["identity"])
    base_wall = statistics.median(wall_times["identity"])
    rows = [
        "| plan | launches | rewrite launches | rewrite MiB per run | rewrite ms | device ms "
        "| wall ms | device vs identity | wall vs identity |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, plan in plans.items():
        steps = compiled[name].steps
        dev, wall = statistics.median(device_times[name]), statistics.median(wall_times[name])
        rows.append(
            f"| {name} | {len(steps)} | {sum(s.kind == 'rewrite' for s in steps)} "
            f"| {plan.rewrite_bytes / 2**20:.2f} | {statistics.median(rewrite_times[name]) * 1e3:.3f} "
            f"| {dev * 1e3:.3f} | {wall * 1e3:.3f} "
            f"| {base_device / dev:.2f}x | {base_wall / wall:.2f}x |"
        )
    for c in compiled.values():
        c.release()

    header = [
        f"# Layout planning: {graph.name}, input (1, {args.channels}, {args.size}, {args.size})",
        "",
        f"- device: {info.name}, {info.compute_units} compute units, driver "
        f"{info.driver_version}, {info.opencl_version}",
        f"- laytune {laytune.__version__}, pyopencl {cl.VERSION_TEXT}, numpy {np.__version__}, "
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs on the host",
        f"- {time.strftime('%Y-%m-%d %H:%M:%S')}; {args.repeats} repeats per plan, interleaved",
        "- best layout: a fixed known-good candidate per conv2d (NCHW4c input and output, "
        "OIHW4i4o weights, block.ow=8), not a tune; identity runs conv2d with the same knobs",
        "- time: OpenCL profiling events summed over one run's launches (device; rewrite ms: "
        "the rewrite launches alone) and first enqueue to queue end (wall); medians; outputs "
        "checked against numpy",
        "",
    ]
    planned = plans["planned"]
    remaining = ["", "Rewrites left in the planned graph:", ""]
    remaining += [f"- `{r.describe()}` for {', '.join(r.consumers)}" for r in planned.rewrites]
    text = "\n".join([*header, *rows, *remaining]) + "\n"
    print(text)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    scratch = RESULTS.with_suffix(".md.tmp")
    scratch.write_text(text + "\n## The planned graph\n\n```\n" + str(planned) + "\n```\n")
    os.replace(scratch, RESULTS)
    print(
        f"written to {RESULTS.relative_to(Path.cwd()) if RESULTS.is_relative_to(Path.cwd()) else RESULTS}"
    )


if __name__ == "__main__":
    sys.exit(main())
