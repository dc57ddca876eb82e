"""Whole models: the layout-critical workloads a model's tuning runs, the
conversions its plan needs, ``laytune tune-model`` and ``laytune plan`` on a
tiny ONNX model, and ``laytune.load_model`` against ONNX Runtime."""

from __future__ import annotations

import gc
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import laytune
from laytune import layout as L
from laytune import ops
from laytune.cli import main
from laytune.exceptions import ArgumentTypeError, PlanError
from laytune.ops import Workload
from laytune.plan import (
    Graph,
    critical_workloads,
    from_onnx,
    plan_conversions,
    plan_layouts,
    tuned_workloads,
)
from laytune.records import open_database
from laytune.search import TuneOptions, classify
from laytune.space import ConversionWorkload
from tests import jobs
from tests.plan.graphs import NCHW4C, conv_candidate, weights
from tests.plan.test_onnx import Model as OnnxModel

ROOT = Path(__file__).resolve().parents[2]


def tiny_model(seed: int = 0) -> onnx.ModelProto:
    """conv (with a bias) -> relu -> max pool -> flatten -> gemm, on 1 x 3 x 8 x 8."""
    m = OnnxModel(seed)
    y = m.node("Conv", ["x", m.weight((4, 3, 3, 3)), m.weight((4,))], "c", pads=[1, 1, 1, 1])
    y = m.node("Relu", [y])
    y = m.node("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    y = m.node("Flatten", [y])
    y = m.node("Gemm", [y, m.weight((10, 64)), m.weight((10,))], "logits", transB=1)
    return m.build({"x": (1, 3, 8, 8)}, [y])


def onnx_runtime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)


def feeds_of(model: onnx.ModelProto, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        i.name: rng.uniform(-1, 1, [d.dim_value for d in i.type.tensor_type.shape.dim]).astype(
            np.float32
        )
        for i in model.graph.input
    }


def assert_close(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        scale = float(np.abs(w).max()) or 1.0
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-3 * scale)


# -- which workloads a model's tuning runs -------------------------------------------


def test_the_critical_workloads_of_the_tiny_model_are_its_conv_and_its_gemm_largest_first() -> None:
    found = critical_workloads(from_onnx(tiny_model()))
    assert [(c.workload.name, c.ops) for c in found] == [
        ("conv2d", ("c.conv",)),
        ("matmul", ("logits.matmul",)),
    ]
    assert found[0].workload.flops > found[1].workload.flops
    # the weights stay constant, as the operators mark them
    assert found[0].workload.weights == ("W",)
    assert found[1].workload.weights == ("B",)


def test_a_model_is_tuned_with_the_epilogues_its_plan_fuses() -> None:
    """tune_model measures the kernels load_model runs: the conv with its bias
    and ReLU folded in, the gemm with its bias, classified by their products
    (the epilogue's operands aside) and with their constants still weights."""
    graph = from_onnx(tiny_model())
    fused = tuned_workloads(graph)
    bare = critical_workloads(graph)
    assert [c.ops for c in fused] == [c.ops for c in bare] == [("c.conv",), ("logits.matmul",)]
    for f, b in zip(fused, bare, strict=True):
        assert f.workload.key.startswith(b.workload.key + "+epilogue[")
        assert type(classify(f.workload)) is type(classify(b.workload))
        assert set(b.workload.weights) < set(f.workload.weights)  # the bias is constant too
    assert "max(" in fused[0].workload.key  # the ReLU
    assert [c.workload.key for c in tuned_workloads(graph, fuse=False)] == [
        c.workload.key for c in bare
    ]


def test_operators_of_one_key_are_tuned_once_with_the_weights_all_of_them_hold_constant() -> None:
    m = OnnxModel(2)
    a = m.node("Gemm", ["x", m.weight((16, 8))], "a")  # B a constant
    b = m.node("MatMul", ["x", "w"], "b")  # the same GEMM, B given at run time
    c = m.node("Gemm", ["x", m.weight((16, 8))], "c")
    model = m.build({"x": (4, 16), "w": (16, 8)}, [a, b, c])
    graph = from_onnx(model)
    (only,) = critical_workloads(graph)
    assert only.workload.key == ops.matmul(4, 8, 16).key
    assert len(only.ops) == 3
    assert only.workload.weights == ()  # one of them reads B at run time


def test_layout_critical_is_read_off_the_statement_not_the_name() -> None:
    g = Graph("names")
    x = g.input("x", (8, 8))
    product = Workload.define(
        "blend",
        "C[i, j] += A[i, k] * B[k, j]",
        {"i": 8, "j": 8, "k": 8},
        {"A": (8, 8), "B": (8, 8)},
        weights=("B",),
    )
    scale = Workload.define("matmul", "Y[i, j] = X[i, j] * 2.0", {"i": 8, "j": 8}, {"X": (8, 8)})
    y = g.apply(scale, "scaled", X=x)
    g.output(g.apply(product, "blended", A=y, B=g.constant("w", weights((8, 8), 0))))
    assert [c.ops for c in critical_workloads(g)] == [("blended",)]


def test_the_conversions_a_plan_needs_are_its_rewrites_between_flat_buffers() -> None:
    conv = ops.conv2d(1, 8, 8, 8, 8, 3, stride=1, padding=1)
    g = Graph("pool")
    x = g.input("x", (1, 8, 8, 8))
    y = g.apply(conv, "conv", X=x, W=g.constant("f", weights((8, 8, 3, 3), 0)))
    y = g.apply(ops.relu((1, 8, 8, 8)), "relu", X=y)
    g.output(g.apply(ops.max_pool2d(1, 8, 8, 8, kernel=2, stride=2), "pool", X=y))
    plan = plan_layouts(g, {conv.key: conv_candidate(conv)})
    found = plan_conversions(plan)
    pack, unpack = found
    assert isinstance(pack, ConversionWorkload)
    assert str(pack.src.index_map) == "lambda i, j, k, l: [i, j, k, l]"
    assert str(pack.dst.index_map) == NCHW4C and pack.src.shape == (1, 8, 8, 8)
    assert str(unpack.src.index_map) == NCHW4C and unpack.dst.shape == (1, 8, 4, 4)
    assert unpack.dst.is_identity
    # what the plan's pricer looks the rewrite up by
    (first, second) = plan.rewrites
    assert pack == ConversionWorkload(first.src, first.dst, first.dtype, first.dst_pad)
    assert unpack.key == ConversionWorkload(second.src, second.dst, second.dtype).key


def test_a_plan_with_no_rewrite_needs_no_conversion() -> None:
    graph = from_onnx(tiny_model())
    assert plan_conversions(plan_layouts(graph)) == []


def test_a_rewrite_into_an_image_is_left_to_the_generated_kernel() -> None:
    conv = ops.conv2d(1, 8, 8, 8, 8, 3, stride=1, padding=1)
    g = Graph("image")
    x = g.input("x", (1, 8, 8, 8))
    g.output(g.apply(conv, "conv", X=x, W=g.constant("f", weights((8, 8, 3, 3), 0))))
    texture = L.texture((1, 8, 8, 8), 1)
    plan = plan_layouts(g, {conv.key: conv_candidate(conv, x=texture)})
    assert any(r.dst.image_rank == 2 for r in plan.rewrites)
    assert all(w.dst.image_rank == 1 for w in plan_conversions(plan))


def test_tune_model_refuses_a_boundary_or_a_study_name_of_the_caller() -> None:
    with pytest.raises(ArgumentTypeError, match="boundary"):
        laytune.plan.tune_model(
            tiny_model(),
            options=TuneOptions(trials=1, boundary={"X": "free"}),
            database="sqlite://",
        )


# -- load_model ----------------------------------------------------------------------


def test_load_model_runs_the_model_as_onnx_runtime_does_and_frees_its_buffers(
    tmp_path: Path,
) -> None:
    model = tiny_model()
    path = tmp_path / "tiny.onnx"
    onnx.save(model, path)
    feeds = feeds_of(model)
    want = onnx_runtime(model, feeds)
    with laytune.load_model(path) as loaded:  # no records: the derived starts
        assert loaded.inputs == ("x",) and loaded.outputs == ("logits",)
        assert_close(loaded(**feeds), want)
        compiled = loaded.compiled
        assert compiled._mem
    assert loaded.closed and compiled._mem == []
    with pytest.raises(PlanError, match="closed"):
        loaded(**feeds)
    loaded.close()  # once is enough; again does nothing


def test_a_pooled_head_is_flattened_where_its_blocked_layout_left_it() -> None:
    """ResNet's head: conv -> global pool -> flatten -> gemm, the conv's
    derived start storing 32 channels in blocks of 16 and the pool keeping
    them. A [1, 32, 1, 1] tensor so blocked is stored as the logical one, so
    the rewrite to the flatten's logical layout launches nothing (a view)
    and tune-model tunes no conversion for it."""
    m = OnnxModel(7)
    y = m.node("Conv", ["x", m.weight((32, 16, 3, 3)), m.weight((32,))], pads=[1, 1, 1, 1])
    y = m.node("GlobalAveragePool", [y], "pooled")
    y = m.node("Flatten", [y])
    y = m.node("Gemm", [y, m.weight((10, 32)), m.weight((10,))], "logits", transB=1)
    model = m.build({"x": (1, 16, 8, 8)}, [y])
    feeds = feeds_of(model)
    want = onnx_runtime(model, feeds)
    with laytune.load_model(model) as loaded:
        pooled = loaded.plan.layout_of("pooled")
        assert not pooled.is_identity and pooled.physical_size == 32
        assert any(v.startswith("pooled -> ") for v in loaded.compiled.views)
        assert not any(s.label.startswith("pooled -> ") for s in loaded.compiled.steps)
        # the plan predicts what lowering runs: nothing for each view
        predicted = {p.label: p for p in loaded.plan.predictions}
        assert set(loaded.compiled.views) <= set(predicted)
        for view in loaded.compiled.views:
            assert predicted[view].seconds == 0.0
            assert predicted[view].source.startswith("a view")
        launched = {s.label for s in loaded.compiled.steps}
        assert all(predicted[label].seconds > 0 for label in launched)
        # nor has tune-model a conversion kernel to tune for it
        assert not any(w.src.shape == (1, 32, 1, 1) for w in plan_conversions(loaded.plan))
        assert_close(loaded(**feeds), want)


def test_a_model_nobody_tuned_runs_the_starts_derived_from_its_statements() -> None:
    """No records: the conv and the Gemm (a contraction and a window, by
    their statements) are frozen with their first standard starts, the
    element-wise operators planned around them; ``derive=False`` leaves
    every operator in logical layouts. Both compute what ONNX Runtime does."""
    from laytune.plan._model import _graph_of as graph_of
    from laytune.plan._planner import DERIVED_ORIGIN
    from laytune.runners import default_device
    from laytune.search import standard_candidates
    from laytune.space import SearchSpace

    model = tiny_model()
    feeds = feeds_of(model)
    want = onnx_runtime(model, feeds)
    device = default_device()
    with laytune.load_model(model) as derived, laytune.load_model(model, derive=False) as plain:
        frozen = [p for p in derived.plan.placements if p.frozen]
        assert {derived.plan.graph.op(p.op).workload.name for p in frozen} >= {"conv2d"}
        log = "\n".join(derived.plan.log)
        for placement in frozen:  # the start of the operator as written, its epilogue added
            bare = graph_of(model).op(placement.op).workload
            first = standard_candidates(SearchSpace(bare, device.info), 1)[0]
            assert (
                f"froze {placement.op}: the source's candidate for {bare.key} ({DERIVED_ORIGIN})"
                in log
            )
            assert placement.candidate.knob_map == first.knob_map
            held = placement.candidate.layout_map
            assert all(held[name] == layout for name, layout in first.layout_map.items())
        assert not any(p.frozen for p in plain.plan.placements)
        assert all(
            layout.is_identity
            for p in plain.plan.placements
            for name, layout in p.candidate.layouts
            if not name.endswith(".local")
        )
        assert_close(derived(**feeds), want)
        assert_close(plain(**feeds), want)


def test_a_model_left_to_the_garbage_collector_frees_its_buffers() -> None:
    m = OnnxModel(5)
    model = m.build({"x": (2, 6)}, [m.node("Gemm", ["x", m.weight((6, 5))], "y")])
    loaded = laytune.load_model(model)
    compiled = loaded.compiled
    assert compiled._mem
    del loaded
    gc.collect()
    assert compiled._mem == []


def test_load_model_names_a_missing_input() -> None:
    m = OnnxModel(6)
    model = m.build({"x": (2, 6)}, [m.node("Gemm", ["x", m.weight((6, 5))], "y")])
    with (
        laytune.load_model(model) as loaded,
        pytest.raises(laytune.LaytuneError, match="missing: \\['x'\\], unknown: \\['y'\\]"),
    ):
        loaded(y=np.zeros((2, 6), np.float32))


def test_a_model_takes_inputs_of_other_dtypes_and_strides_and_refuses_other_shapes() -> None:
    """Arrays that already are contiguous float32 of the declared shape go
    to the device as they are; others (float64, a transposed view, nested
    lists) are converted first, with the same result; a wrong shape is
    refused by name."""
    m = OnnxModel(7)
    model = m.build({"x": (2, 6)}, [m.node("Gemm", ["x", m.weight((6, 5))], "y")])
    x = np.random.default_rng(0).standard_normal((2, 6)).astype(np.float32)
    with laytune.load_model(model) as loaded:
        (want,) = loaded(x=x)
        for other in (x.astype(np.float64), np.asfortranarray(x), x.T.copy().T, x.tolist()):
            (got,) = loaded(x=other)
            np.testing.assert_array_equal(got, want)
        with pytest.raises(laytune.LaytuneError, match=r"input 'x' has shape \(6, 2\)"):
            loaded(x=x.T.copy())
    (reference,) = from_onnx(model).reference({"x": x}).values()
    np.testing.assert_allclose(want, reference, rtol=1e-5, atol=1e-5)


def test_a_model_with_several_outputs_returns_them_in_the_models_order() -> None:
    m = OnnxModel(3)
    h = m.node("Gemm", ["x", m.weight((6, 5)), m.weight((5,))], "hidden")
    r = m.node("Relu", [h], "relu")
    model = m.build({"x": (2, 6)}, [r, h])  # the relu first, then the value it reads
    feeds = feeds_of(model)
    with laytune.load_model(model) as loaded:
        assert loaded.outputs == ("relu", "hidden")
        assert_close(loaded(**feeds), onnx_runtime(model, feeds))


# -- the commands, end to end --------------------------------------------------------


def _laytune(*words: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "laytune", *words],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
def test_tune_model_tunes_each_workload_once_resumes_and_the_plan_runs_it(
    tmp_path: Path,
) -> None:
    m = OnnxModel(4)
    y = m.node("Conv", ["x", m.weight((4, 3, 3, 3)), m.weight((4,))], "c", pads=[1, 1, 1, 1])
    y = m.node("Relu", [y])
    y = m.node("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    y = m.node("Flatten", [y])
    w = m.weight((10, 64))
    a = m.node("Gemm", [y, w, m.weight((10,))], "a", transB=1)
    b = m.node("Gemm", [y, w, m.weight((10,))], "b", transB=1)  # the same GEMM again
    model = m.build({"x": (1, 3, 8, 8)}, [a, b])
    onnx.save(model, tmp_path / "model.onnx")
    url = f"sqlite:///{tmp_path / 'model.db'}"
    first = _laytune("tune-model", "model.onnx", "--trials", "2", "--batch", "2", "--db", url,
                     cwd=tmp_path)  # fmt: skip
    assert first.returncode == 0, first.stdout + first.stderr
    # the kernels load_model runs: the conv with its bias and ReLU, each Gemm
    # with its bias, one key for both Gemms
    conv, gemm = (c.workload.key for c in tuned_workloads(from_onnx(model)))
    assert conv.startswith(ops.conv2d(1, 3, 8, 8, 4, 3, stride=1, padding=1).key + "+")
    assert gemm.startswith(ops.matmul(1, 10, 64).key + "+")
    # progress per workload, the largest first
    assert f"[1/2] {conv} (c.conv)" in first.stderr
    assert f"[2/2] {gemm} (a.matmul, b.matmul)" in first.stderr
    db = open_database(tmp_path / "model.db", create=False)
    records = db.records()
    assert {r.workload_key for r in records if r.op != "convert"} == {conv, gemm}
    studies = {r.study for r in records}
    assert len([s for s in studies if s.startswith(gemm)]) == 1  # one job for both Gemms
    assert "2 layout-critical workloads" in first.stdout
    assert f"laytune freeze --model model.onnx --db {url} --measure" in first.stdout
    count = len(records)

    second = _laytune("tune-model", "model.onnx", "--trials", "2", "--db", url, cwd=tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    assert len(open_database(tmp_path / "model.db", create=False).records()) == count
    assert "0 candidates measured" in second.stdout
    assert second.stdout.count("already tuned") >= 2
    assert " before), " not in second.stdout and "tuning" not in second.stderr

    shown = _laytune("plan", "model.onnx", "--db", url, "--repeats", "3", cwd=tmp_path)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert shown.stdout.startswith("plan 'test' for ")
    assert "frozen from the layout source" in shown.stdout
    assert "predicted" in shown.stdout and "measured" in shown.stdout

    # the plan's kernels frozen: the model plans from the file alone, as from the records
    frozen = _laytune("freeze", "--model", "model.onnx", "--db", url, cwd=tmp_path)
    assert frozen.returncode == 0, frozen.stdout + frozen.stderr
    assert "froze 2 workload(s) into laytune-model.json" in frozen.stdout
    replayed = _laytune("plan", "model.onnx", "--db", "laytune-model.json", "--repeats", "3",
                        cwd=tmp_path)  # fmt: skip
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert replayed.stdout.count("frozen from the layout source") == shown.stdout.count(
        "frozen from the layout source"
    )
    # or the kernels that run the plan fastest, timed in it
    measured = _laytune("freeze", "--model", "model.onnx", "--db", url, "--out", "measured.json",
                        "--measure", cwd=tmp_path)  # fmt: skip
    assert measured.returncode == 0, measured.stdout + measured.stderr
    assert "timing the candidates of 'test' in its plan" in measured.stderr
    assert "froze 2 workload(s) into measured.json" in measured.stdout
    alone = _laytune("freeze", "--db", url, "--measure", cwd=tmp_path)
    assert alone.returncode != 0 and "give --model" in alone.stderr
    feeds = feeds_of(model)
    with (
        laytune.load_model(tmp_path / "model.onnx", database=url) as a,
        laytune.load_model(
            tmp_path / "model.onnx", database=str(tmp_path / "laytune-model.json")
        ) as b,
    ):
        assert a.plan.placements == b.plan.placements and a.plan.versions == b.plan.versions
        assert_close(b(**feeds), onnx_runtime(model, feeds))

    with laytune.load_model(tmp_path / "model.onnx", database=url) as loaded:
        assert {p.op for p in loaded.plan.placements if p.frozen} == {
            "c.conv",
            "a.matmul",
            "b.matmul",
        }
        assert_close(loaded(**feeds), onnx_runtime(model, feeds))
        # every rewrite between flat buffers runs a conversion kernel tune-model tuned
        flat = [r for r in loaded.plan.rewrites if r.src.image_rank == r.dst.image_rank == 1]
        assert len(loaded.compiled.tuned) == len(flat)
        # the conv's bias and ReLU and each Gemm's bias run in their operator's
        # kernel (load_model fuses by default)
        assert {f.op for f in loaded.plan.fusions} == {"c.conv", "a.matmul", "b.matmul"}
    with laytune.load_model(tmp_path / "model.onnx", database=url, fuse=False) as plain:
        assert not plain.plan.fusions
        assert len(plain.compiled.steps) > len(loaded.compiled.steps)
        assert_close(plain(**feeds), onnx_runtime(model, feeds))


def test_plan_of_a_missing_database_or_model_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    onnx.save(tiny_model(), tmp_path / "model.onnx")
    assert main(["plan", "model.onnx", "--db", "sqlite:///none.db"]) == 1
    assert "no records database" in capsys.readouterr().err
    assert not (tmp_path / "none.db").exists()
    assert main(["tune-model", "nothing.onnx", "--trials", "1", "--db", "sqlite:///t.db"]) == 2
    assert "'nothing.onnx' is not a file" in capsys.readouterr().err
    assert not (tmp_path / "t.db").exists()


class _StoppedTune:
    """A stand-in for laytune.search.tune whose first job is interrupted."""

    def __init__(self) -> None:
        self.keys: list[str] = []

    def __call__(self, workload: Workload, device: object, **kwargs: object) -> object:
        self.keys.append(workload.key)
        return SimpleNamespace(
            stop_reason="interrupted; every finished record is kept", measured=1, best=None
        )


def test_an_interrupted_workload_ends_the_models_tuning_with_130(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stand_in = _StoppedTune()
    monkeypatch.setattr(laytune.search, "tune", stand_in)
    monkeypatch.chdir(tmp_path)
    onnx.save(tiny_model(), tmp_path / "model.onnx")
    assert main(["tune-model", "model.onnx", "--trials", "2", "--db", "sqlite:///t.db"]) == 130
    conv = tuned_workloads(from_onnx(tiny_model()))[0].workload.key  # with its bias and ReLU
    assert stand_in.keys == [conv]  # the gemm is not tuned after the conv's stop
    out = capsys.readouterr()
    assert "(interrupted; every finished record is kept)" in out.out
    assert "[2/2]" not in out.err


def test_a_stop_between_two_jobs_ends_the_models_tuning_with_130(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C outside a job's own handling (the next job opening its space,
    the plan of the conversions) ends the tuning as one inside a job does:
    the summary of the jobs run, and 130."""
    keys: list[str] = []

    def stand_in(workload: Workload, device: object, **kwargs: object) -> object:
        keys.append(workload.key)
        if len(keys) > 1:
            raise KeyboardInterrupt
        return SimpleNamespace(stop_reason="trial budget (2) spent", measured=2, best=None)

    monkeypatch.setattr(laytune.search, "tune", stand_in)
    monkeypatch.chdir(tmp_path)
    onnx.save(tiny_model(), tmp_path / "model.onnx")
    assert main(["tune-model", "model.onnx", "--trials", "2", "--db", "sqlite:///t.db"]) == 130
    assert len(keys) == 2
    out = capsys.readouterr().out
    assert "2 candidates measured (interrupted; every finished record is kept)" in out
    assert f"{keys[0]}" in out and "stopped: trial budget (2) spent" in out


@pytest.mark.slow
def test_ctrl_c_stops_tune_model_with_130_keeping_its_records(tmp_path: Path) -> None:
    onnx.save(tiny_model(), tmp_path / "model.onnx")
    db = tmp_path / "stopped.db"
    job = jobs.start_job(db, "tune-model", str(tmp_path / "model.onnx"), trials=500)
    try:
        jobs.wait_until(lambda: jobs.record_count(db) >= 2, job, 180)
        out, err = jobs.stop_group(job, signal.SIGINT)
    finally:
        jobs.kill_all([job])
    assert job.returncode == 130, err
    assert "Traceback" not in err and "Traceback" not in out
    assert "interrupted; every finished record is kept" in out, err
    assert jobs.wait_for_session_end(job.pid, 10) == []
    assert jobs.integrity(db) == "ok"
    conv = tuned_workloads(from_onnx(tiny_model()))[0].workload.key  # with its bias and ReLU
    records = open_database(db, create=False).records()
    assert len(records) >= 2 and {r.workload_key for r in records} == {conv}


def test_a_model_with_nothing_layout_critical_has_nothing_to_tune(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    m = OnnxModel(7)
    y = m.node("MaxPool", ["x"], kernel_shape=[2, 2], strides=[2, 2])
    onnx.save(m.build({"x": (1, 4, 8, 8)}, [m.node("Relu", [y], "y")]), tmp_path / "pool.onnx")
    monkeypatch.chdir(tmp_path)
    assert main(["tune-model", "pool.onnx", "--trials", "2", "--db", "sqlite:///t.db"]) == 1
    out = capsys.readouterr()
    assert "0 layout-critical workloads, 0 conversions" in out.out
    assert "pool.onnx has no layout-critical operator to tune" in out.err
