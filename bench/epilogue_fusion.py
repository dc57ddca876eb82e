"""Epilogue fusion: one conv2d + bias + ReLU planned fused and unfused, timed in one run.

    python -m bench.epilogue_fusion [--rounds N] [--repeats N] [--out FILE]

The graph, on the default OpenCL device (``LAYTUNE_DEVICE`` picks another),
float32, weights and bias constant: x (1, 64, 56, 56) -> conv2d 3 x 3
(64 -> 64, padding 1) -> bias_add -> relu -> output. The conv runs one fixed
candidate, NCHW8c input and output, OIHW8i8o weights, a vector of 8 along
the filters, a block of 8 filters by 4 columns (no records are needed).

Two plans of it, ``plan_layouts(graph, source)`` and ``plan_layouts(graph,
source, fuse=True)``: unfused, the bias and the ReLU are kernels of their
own and the conv's result is written, converted and read back; fused, the
conv's kernel applies ``max(acc + B[f], 0.0)`` to its accumulators before
the store. Both outputs are checked against numpy first.

**Times.** OpenCL profiling events summed over every launch of one run
(device), per step (the conv's kernel, the rest), the two plans interleaved
round by round (``--rounds`` rounds of ``--repeats`` runs after two warm-up
runs); medians and minima over every run. The host is shared, so the report
states the load average before and after. The report is written to
``bench/results/epilogue_fusion.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

import numpy as np

from laytune import layout as L
from laytune import ops
from laytune.plan import Graph, Plan, plan_layouts
from laytune.runners import default_device
from laytune.space import Candidate

SHAPE = (1, 64, 56, 56)
KNOBS = {"vector_axis": "f", "vector": 8, "block.f": 8, "block.ow": 4}
RESULTS = Path(__file__).parent / "results" / "epilogue_fusion.md"


def network() -> tuple[Graph, dict[str, Candidate]]:
    """The conv + bias + ReLU graph and the conv's candidate, by key."""
    n, c, h, w = SHAPE
    conv = ops.conv2d(n, c, h, w, 64, 3, stride=1, padding=1)
    rng = np.random.default_rng(0)
    g = Graph("conv-bias-relu")
    x = g.input("x", SHAPE)
    weights = g.constant("w", rng.uniform(-1, 1, (64, c, 3, 3)).astype(np.float32))
    bias = g.constant("b", rng.uniform(-1, 1, 64).astype(np.float32))
    y = g.apply(conv, "conv", X=x, W=weights)
    y = g.apply(ops.bias_add(SHAPE, axis=1), "bias", X=y, B=bias)
    g.output(g.apply(ops.relu(SHAPE), "relu", X=y))
    filters = L.block(conv.buffer("W").shape, 1, 8)
    candidate = Candidate.make(
        {
            "X": L.block(conv.buffer("X").shape, 1, 8),
            "W": L.compose(L.block(filters.physical_shape, 0, 8), filters),
            "Y": L.block(conv.buffer("Y").shape, 1, 8),
        },
        KNOBS,
    )
    return g, {conv.key: candidate}


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.1f} (5 min: {five:.1f})"


def measure(rounds: int, repeats: int) -> tuple[dict[str, dict[str, list[float]]], dict, str]:
    """Per plan ("unfused", "fused"): device seconds of every run, and the
    conv's and the other steps' median per round; the plans; the load."""
    import pyopencl as cl

    device = default_device()
    context = cl.Context([device.open()])
    graph, source = network()
    plans: dict[str, Plan] = {
        "unfused": plan_layouts(graph, source, device.info),
        "fused": plan_layouts(graph, source, device.info, fuse=True),
    }
    inputs = {"x": np.random.default_rng(1).uniform(-1, 1, SHAPE).astype(np.float32)}
    want = graph.reference(inputs)["relu"]
    compiled = {name: plan.compile(context) for name, plan in plans.items()}
    times: dict[str, dict[str, list[float]]] = {}
    load = f"load average {_load()} before"
    try:
        for name, cp in compiled.items():
            got = cp.run(inputs)["relu"]
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3, err_msg=name)
            times[name] = {"device": [], "conv": [], "rest": [], "kernels": [len(cp.steps)]}
        for _ in range(rounds):
            for name, cp in compiled.items():
                timing = cp.profile(inputs, repeats=repeats, warmup=2)
                times[name]["device"] += timing.device_seconds
                per_step: dict[str, float] = {}
                for label, seconds in timing.per_step:
                    per_step[label] = per_step.get(label, 0.0) + seconds
                times[name]["conv"].append(per_step.pop("conv"))
                times[name]["rest"].append(sum(per_step.values()))
    finally:
        for cp in compiled.values():
            cp.release()
    load += f", {_load()} after"
    return times, plans, load


def report(times: dict[str, dict[str, list[float]]], plans: dict, load: str, device: str) -> str:
    ms = 1e3
    lines = [
        "# Epilogue fusion: conv2d (1, 64, 56, 56) x 64, 3 x 3, + bias + ReLU",
        "",
        f"`python -m bench.epilogue_fusion` on {device}; {load}.",
        "",
        "| plan | kernels per run | device median (ms) | device min (ms) "
        "| conv kernel median (ms) | other steps median (ms) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, t in times.items():
        lines.append(
            f"| {name} | {t['kernels'][0]} | {statistics.median(t['device']) * ms:.3f} "
            f"| {min(t['device']) * ms:.3f} | {statistics.median(t['conv']) * ms:.3f} "
            f"| {statistics.median(t['rest']) * ms:.3f} |"
        )
    unfused, fused = times["unfused"]["device"], times["fused"]["device"]
    lines += [
        "",
        f"Unfused / fused: {statistics.median(unfused) / statistics.median(fused):.2f}x by "
        f"the medians, {min(unfused) / min(fused):.2f}x by the minima.",
        "",
        "The fused plan:",
        "",
        "```",
        str(plans["fused"]),
        "```",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20, help="interleaved rounds (20)")
    parser.add_argument("--repeats", type=int, default=10, help="timed runs per round (10)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="report file")
    args = parser.parse_args(argv)
    times, plans, load = measure(args.rounds, args.repeats)
    text = report(times, plans, load, plans["fused"].device.name)
    print(text)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
