"""What the hand-written kernel benchmarks share: ONNX Runtime's node as the
peer, and interleaved bursts of runs."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np


def ort_run(
    nodes: Sequence[object],
    feeds: Mapping[str, np.ndarray],
    output: tuple[str, Sequence[int]],
    initializers: Sequence[object] = (),
) -> Callable[[], object]:
    """``run()`` of ``nodes`` (``onnx.helper`` nodes) in a 2-thread CPU
    session of ONNX Runtime on ``feeds``, returning the float ``output``
    (name, shape); ``initializers`` are the graph's constants."""
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper

    name, shape = output
    graph = helper.make_graph(
        list(nodes),
        "hand",
        [
            helper.make_tensor_value_info(n, TensorProto.FLOAT, list(a.shape))
            for n, a in feeds.items()
        ],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))],
        initializer=list(initializers),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 2
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    inputs = dict(feeds)
    return lambda: session.run(None, inputs)[0]


def bursts(
    runs: Mapping[str, Callable[[], object]], count: int, idle: float = 0.0, length: int = 10
) -> dict[str, list[float]]:
    """Wall seconds of each run, interleaved in ``count`` bursts of
    ``length`` runs, each after ``idle`` seconds; the last half of a burst
    counts (the runtimes' worker threads spin a while after a run and slow
    the next one's first, and after an idle the cores take a few
    milliseconds to come up to speed)."""
    times: dict[str, list[float]] = {label: [] for label in runs}
    for _ in range(max(1, count)):
        for label, run in runs.items():
            if idle:
                time.sleep(idle)
            burst = []
            for _ in range(length):
                start = time.perf_counter()
                run()
                burst.append(time.perf_counter() - start)
            times[label] += burst[length // 2 :]
    return times


PEER = "ONNX Runtime (2 threads)"
"""The label of the peer's run in :func:`bursts` and :func:`table`."""


def table(times: Mapping[str, Sequence[float]], flops: int = 0) -> list[str]:
    """Markdown rows, fastest first: each run's median wall time, its rate
    where ``flops`` is given, and the peer's (:data:`PEER`) time over it."""
    peer = statistics.median(times[PEER])
    rate = " GFLOP/s |" if flops else ""
    lines = [f"| kernel | wall (ms) |{rate} ONNX Runtime / kernel |"]
    lines.append("| --- | ---: |" + (" ---: |" if flops else "") + " ---: |")
    for label, ts in sorted(times.items(), key=lambda kv: statistics.median(kv[1])):
        median = statistics.median(ts)
        shown = f" {flops / median / 1e9:.0f} |" if flops else ""
        lines.append(f"| {label} | {median * 1e3:.3f} |{shown} {peer / median:.2f}x |")
    return lines


def context_and_queue() -> tuple[Any, Any]:
    """A context and in-order queue on laytune's default device."""
    import pyopencl as cl

    from laytune.runners import default_device

    device = default_device().open()
    context = cl.Context([device])
    return context, cl.CommandQueue(context)
