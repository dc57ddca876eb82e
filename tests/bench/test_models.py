"""bench.models: the models it writes (their topology, read back through the
ONNX import) and its report, on fabricated times."""

from __future__ import annotations

import argparse
from collections import Counter
from types import SimpleNamespace

from bench._onnx_models import bert_layer, mobilenet_v2, resnet18
from bench.models import Implementation, Outcome, report
from laytune.plan import critical_workloads, from_onnx


def test_resnet18_has_its_real_topology() -> None:
    model = resnet18(size=64, width=16, classes=10)  # its shape, narrower and smaller
    ops = Counter(node.op_type for node in model.graph.node)
    # stem + 8 blocks of two 3 x 3 convs + 3 downsampling 1 x 1 convs, each with BN
    assert ops["Conv"] == ops["BatchNormalization"] == 20
    assert (ops["MaxPool"], ops["GlobalAveragePool"], ops["Flatten"], ops["Gemm"]) == (1, 1, 1, 1)
    assert ops["Add"] == 8
    kernels = sorted(
        tuple(a.ints)
        for n in model.graph.node
        if n.op_type == "Conv"
        for a in n.attribute
        if a.name == "kernel_shape"
    )
    assert Counter(kernels) == {(1, 1): 3, (3, 3): 16, (7, 7): 1}
    graph = from_onnx(model)
    assert graph.tensors["x"].shape == (1, 3, 64, 64)
    assert graph.tensors["logits"].shape == (1, 10)
    assert graph.tensors["pool"].shape == (1, 128, 1, 1)
    # stem; 3 x 3 convs: one per stage at stride 1, one striding into stages 2-4;
    # three 1 x 1 downsamplings; the Gemm
    assert len(critical_workloads(graph)) == 12


def test_the_bert_layer_has_attention_and_an_erf_gelu_feed_forward() -> None:
    model = bert_layer()
    ops = Counter(node.op_type for node in model.graph.node)
    assert ops["MatMul"] == 8  # Q, K, V, QK^T, probs V, output, FFN in and out
    assert (ops["Softmax"], ops["LayerNormalization"], ops["Erf"]) == (1, 2, 1)
    graph = from_onnx(model)
    assert graph.tensors["y"].shape == (1, 128, 768)
    names = {c.workload.key.split("(")[0] for c in critical_workloads(graph)}
    assert names == {"matmul", "batch_matmul"}


def test_mobilenet_v2_has_its_real_topology_and_runs_as_onnx_runtime_does() -> None:
    """Depthwise convolutions import as the depthwise window and the untuned
    plan, the starts derived from each statement, runs its 17 blocks with no
    rewrite between them (its channel counts at full width, 24 and 144
    among them, on a small image) and computes what ONNX Runtime does."""
    import numpy as np
    import onnxruntime

    import laytune
    from laytune.plan import random_inputs

    model = mobilenet_v2(size=64, classes=10)
    ops = Counter(node.op_type for node in model.graph.node)
    # stem, 17 blocks (the first without its expansion), the head
    assert ops["Conv"] == ops["BatchNormalization"] == 1 + 17 * 3 - 1 + 1
    assert (ops["Clip"], ops["Add"]) == (1 + 17 * 2 - 1 + 1, 10)
    graph = from_onnx(model)
    names = Counter(op.workload.name for op in graph.ops)
    assert names["depthwise_conv"] == 17
    inputs = random_inputs(graph, seed=1)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    (want,) = session.run(None, inputs)
    with laytune.load_model(model) as loaded:
        launched = [s.label for s in loaded.compiled.steps if s.label.count(" -> ")]
        assert launched == [], launched
        (got,) = loaded(**inputs)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * float(np.abs(want).max()))


def _outcome(name: str, walls: dict[str, list[float]]) -> Outcome:
    impls = [Implementation(label, lambda: [], "7", 1e-7, times) for label, times in walls.items()]
    tuning = SimpleNamespace(jobs=[SimpleNamespace(kind="operator")] * 3, measured=24)
    steps = [("conv", 2e-3), ("add", 1e-3)]
    return Outcome(name, name, 12.0, tuning, 9.0, 3.0, impls, steps, 4e-3, "plan")


def test_the_report_gives_each_implementation_its_ratio_to_onnx_runtime() -> None:
    walls = {
        "ONNX Runtime (2 threads)": [4e-3, 6e-3, 5e-3],
        "laytune planned, fused": [2e-3, 3e-3, 2.5e-3],
        "laytune fused, measured in the plan": [2e-3, 2e-3, 2.5e-3],
        "laytune planned, unfused": [5e-3, 5e-3, 3e-3],
        "laytune per operator, logical layouts": [10e-3, 20e-3, 30e-3],
    }
    args = argparse.Namespace(argv=["--quick"], trials=4, repeats=3, winograd=False)
    device = SimpleNamespace(
        info=SimpleNamespace(
            name="dev", device_type="CPU", compute_units=2, driver_version="1", opencl_version="3"
        )
    )
    text = report([_outcome("tiny", walls)], args, device, "1.0")
    assert "`python -m bench.models --quick`" in text
    assert "| tiny | laytune planned, fused | 2.50 | 2.00 | 2.00x | 7 | 1.0e-07 | 12 s |" in text
    assert "| tiny | laytune planned, unfused | 5.00 | 3.00 | 1.00x | 7 | 1.0e-07 | 9 s |" in text
    assert "| tiny | laytune per operator, logical layouts | 20.00 | 10.00 | 0.25x | 7 |" in text
    assert "Unfused / fused: 2.00x by the medians, 1.50x by the minima." in text
    assert "| tiny | laytune fused, measured in the plan | 2.00 | 2.00 | 2.50x | 7 |" in text
    assert "1.0e-07 | 15 s |" in text  # the tuning and the choice measured in the plan
    assert (
        "Planned / measured in the plan (its choice took 3 s beyond the tuning): "
        "1.25x by the medians, 1.00x by the minima." in text
    )
    assert "| conv | 2.00 | 50% |" in text
