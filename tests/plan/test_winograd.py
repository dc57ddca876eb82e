"""Winograd's F(2 x 2, 3 x 3): a 3 x 3 stride-1 convolution imported as three
statements, each tuned, laid out and planned like any other."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnxruntime as ort
import pyopencl as cl
import pytest

import laytune
from laytune.codegen import lower
from laytune.exceptions import ArgumentTypeError, ConfigError, ModelImportError
from laytune.layout import identity
from laytune.plan import (
    faster_in_records,
    from_onnx,
    plan_layouts,
    tune_model,
    tuned_workloads,
    winograd_conv,
)
from laytune.plan._model import _graph_of
from laytune.plan._winograd import transforms
from laytune.records import Record, open_database
from laytune.runners import default_device
from laytune.search import classify, layout_critical, standard_candidates
from laytune.space import Candidate, SearchSpace
from tests.plan.test_onnx import Model
from tests.search.devices import written_cpu


def _direct(x: np.ndarray, w: np.ndarray, pads: tuple[int, int, int, int]) -> np.ndarray:
    """The convolution in float64, NCHW by OIHW, stride one."""
    pt, pl, pb, pr = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh, ow = xp.shape[2] - 2, xp.shape[3] - 2
    out = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for kh in range(3):
        for kw in range(3):
            out += np.einsum("fc,nchw->nfhw", w[:, :, kh, kw], xp[:, :, kh : kh + oh, kw : kw + ow])
    return out


@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize(
    ("shape", "pads"),
    [((1, 4, 6, 6), (1, 1, 1, 1)), ((2, 3, 7, 5), (1, 0, 0, 1)), ((1, 2, 5, 5), (0, 0, 0, 0))],
)
def test_the_three_statements_compute_the_convolution(
    shape: tuple[int, int, int, int], pads: tuple[int, int, int, int], tile: int
) -> None:
    """Odd outputs (a last tile partly outside), uneven and no padding, a
    batch of two; F(2 x 2, 3 x 3) and F(4 x 4, 3 x 3)."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, shape).astype(np.float32)
    w = rng.uniform(-1, 1, (5, shape[1], 3, 3))
    form = winograd_conv(shape, w, pads, tile)
    v = form.transform_in.reference({"T": form.input_table, "X": x})["V"]
    m = form.matmuls.reference({"V": v, "U": form.filters})["M"]
    y = form.transform_out.reference({"A": form.output_table, "M": m})["Y"]
    want = _direct(x, w, pads)
    assert y.shape == want.shape and v.shape[0] == (tile + 2) ** 2
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tile", [2, 3, 4, 6])
def test_the_transforms_are_derived_exact_for_any_tile(tile: int) -> None:
    """``At ((G g) * (Bt d))`` is the correlation of ``d`` with ``g``, in
    exact rational arithmetic, for tiles laytune does not import too; F(2)'s
    input transform takes only 0 and +-1, F(4)'s the known 4, -5, 1 rows."""
    from fractions import Fraction

    bt, g, at = transforms(tile)
    p = tile + 2
    assert bt.shape == (p, p) and g.shape == (p, 3) and at.shape == (tile, p)
    exact = [[Fraction(v).limit_denominator(10**6) for v in row] for row in bt]
    assert all(
        float(f) == v
        for row, frow in zip(bt, exact, strict=True)
        for v, f in zip(row, frow, strict=True)
    )
    rng = np.random.default_rng(tile)
    d, k = rng.uniform(-1, 1, p), rng.uniform(-1, 1, 3)
    want = [sum(d[i + j] * k[j] for j in range(3)) for i in range(tile)]
    np.testing.assert_allclose(at @ ((g @ k) * (bt @ d)), want, rtol=1e-12, atol=1e-12)
    if tile == 2:
        assert set(np.abs(bt).reshape(-1)) == {0.0, 1.0}
    if tile == 4:
        assert sorted(np.abs(bt[0])) == [0, 0, 0, 1, 4, 5]


def test_the_transforms_are_layout_critical_though_neither_form_names_them() -> None:
    form = winograd_conv((1, 16, 8, 8), np.ones((16, 16, 3, 3)), (1, 1, 1, 1))
    assert classify(form.transform_in) is None and classify(form.transform_out) is None
    assert classify(form.matmuls) is not None
    assert all(layout_critical(w) for w in (form.transform_in, form.matmuls, form.transform_out))


@pytest.mark.parametrize("tile", [0, 11, 2.0])
def test_a_tile_laytune_cannot_derive_is_refused_by_name(tile: object) -> None:
    with pytest.raises(ConfigError, match=rf"F\({tile!r}, 3\) is not a filter laytune derives"):
        transforms(tile)  # type: ignore[arg-type]


def test_the_transforms_tables_are_literals_in_their_kernels() -> None:
    """The derived starts write the transforms out step by step: every
    entry of T and A a literal, a zero product gone, a product by one an
    addition, so the kernels hold no multiply at all (the hand kernels' arithmetic)."""
    form = winograd_conv((1, 32, 8, 8), np.ones((32, 32, 3, 3)), (1, 1, 1, 1))
    device = default_device().info
    for workload, table in ((form.transform_in, "T"), (form.transform_out, "A")):
        assert workload.weights == (table,)
        (start,) = standard_candidates(SearchSpace(workload, device), 1)
        body = lower(workload, start, device).source.split("{", 1)[1]
        assert f"{table}[" not in body and "fma(" not in body and " * v" not in body
        # T has 4 nonzero entries of 16 per x, A 9 of 16 per output point
        nonzero = 4 / 16 if table == "T" else 9 / 16
        adds = re.findall(r"^\s*acc\d+ = acc\d+ [+-] v", body, re.MULTILINE)
        assert len(adds) == len(re.findall(r"^\s*acc\d+ = ", body, re.MULTILINE))
        accumulators = len(re.findall(r"^\s*float\d* acc\d+ = ", body, re.MULTILINE))
        copies = 2 if "inside every buffer" in body else 1  # peeled: the interior and the edge
        assert len(adds) == nonzero * 16 * accumulators * copies


def _block(channels: int, size: int) -> tuple[object, dict[str, np.ndarray]]:
    """conv 3 x 3 + batch norm + relu, conv 3 x 3 + residual add + relu, a
    stride-2 conv (not Winograd's), at ``size`` square."""
    m = Model(3)
    c = channels
    y = m.node("Conv", ["x", m.weight((c, c, 3, 3), -0.3, 0.3), m.weight((c,))], pads=[1] * 4)
    bn = [m.weight((c,), 0.5, 1.5), m.weight((c,)), m.weight((c,)), m.weight((c,), 0.5, 2.0)]
    y = m.node("BatchNormalization", [y, *bn])
    y = m.node("Relu", [y])
    y = m.node("Conv", [y, m.weight((c, c, 3, 3), -0.3, 0.3)], pads=[1] * 4)
    y = m.node("Add", [y, "x"])
    y = m.node("Relu", [y])
    y = m.node("Conv", [y, m.weight((c, c, 3, 3), -0.3, 0.3)], "out", strides=[2, 2], pads=[1] * 4)
    model = m.build({"x": (1, c, size, size)}, [y])
    x = np.random.default_rng(1).uniform(-1, 1, (1, c, size, size)).astype(np.float32)
    return model, {"x": x}


@pytest.mark.parametrize("size", [8, 7])
def test_a_model_imported_with_winograd_runs_fused_and_matches_onnx_runtime(
    cl_context: cl.Context, size: int
) -> None:
    model, feeds = _block(16, size)
    graph = from_onnx(model, winograd=True)
    names = [op.workload.name for op in graph.ops]
    assert names.count("winograd_input") == 2 and names.count("winograd_output") == 2
    assert names.count("winograd_matmuls") == 2 and names.count("conv2d") == 1  # stride 2
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, feeds)
    device = default_device().info
    plan = plan_layouts(graph, {}, device, fuse=True, derive=True)
    form_tables = winograd_conv(
        (1, 16, size, size), np.ones((16, 16, 3, 3)), (1,) * 4
    ).transform_out.tables
    fused = {op.name: op.workload.name for op in plan.graph.ops if "+epilogue[" in op.workload.key}
    # the bias, the residual add and both relus run in the output transforms' stores
    assert sorted(fused.values()) == ["winograd_output", "winograd_output"]
    outputs = [op.workload for op in plan.graph.ops if op.workload.name == "winograd_output"]
    assert (
        all(w.tables == form_tables for w in outputs) and len(outputs) == 2
    )  # fused, still tables
    with plan.compile(cl_context) as compiled:
        got = compiled.run(feeds)["out"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def _two_convolutions() -> object:
    """Two 3 x 3 stride-1 convolutions of different filters, each with a relu."""
    m = Model(4)
    y = m.node("Conv", ["x", m.weight((16, 16, 3, 3), -0.3, 0.3)], "a", pads=[1] * 4)
    y = m.node("Relu", [y])
    y = m.node("Conv", [y, m.weight((32, 16, 3, 3), -0.3, 0.3)], "b", pads=[1] * 4)
    y = m.node("Relu", [y], "out")
    return m.build({"x": (1, 16, 8, 8)}, [y])


def test_each_convolution_takes_the_form_its_records_time_faster(tmp_path: Path) -> None:
    """``a``: 1.0 ms directly, 0.2 + 0.3 + 0.2 in Winograd's form; ``b``: 1.0
    directly, 0.3 + 0.6 + 0.2 (its matmuls bound by their filters, as the
    last stage of a ResNet): only ``a`` is imported in Winograd's form. With
    the records of one form only (a frozen file), that form; with none, the
    direct one."""
    model = _two_convolutions()
    device = written_cpu()
    times = {"a": 1e-3, "a.V": 2e-4, "a.M": 3e-4, "b": 1e-3, "b.V": 3e-4, "b.M": 6e-4}
    winograd_out = {"a": 2e-4, "b": 2e-4}
    with open_database(f"sqlite:///{tmp_path / 'r.db'}") as db:
        for graph, outputs in (
            (from_onnx(model), {}),
            (from_onnx(model, winograd=True), winograd_out),
        ):
            for item in tuned_workloads(graph):
                (op,) = item.ops
                seconds = outputs.get(op, times[op])
                db.add(_record(item.workload, device.key, seconds))
        assert faster_in_records(model, db, device.key) == {"a"}
        assert faster_in_records(model, db, device.key, fuse=False) == frozenset()  # bare: none
        assert faster_in_records(model, db, "another device") == frozenset()
        # what load_model imports: the fused choice, and with fuse=False the bare one
        held = SimpleNamespace(info=device)
        assert "a.M" in {op.name for op in _graph_of(model, None, db, held).ops}
        bare = _graph_of(model, None, db, held, fuse=False)
        assert not any(op.name.endswith(".M") for op in bare.ops)
    with open_database(f"sqlite:///{tmp_path / 'w.db'}") as db:  # Winograd's records alone
        for item in tuned_workloads(from_onnx(model, winograd={"b"})):
            (op,) = item.ops
            db.add(_record(item.workload, device.key, winograd_out.get(op, times[op])))
        assert faster_in_records(model, db, device.key) == {"b"}
    assert faster_in_records(model, None, device.key) == frozenset()
    graph = from_onnx(model, winograd={"a"})
    assert [op.name for op in graph.ops if op.workload.name.startswith("winograd")] == [
        "a.V",
        "a.M",
        "a",
    ]
    assert graph.op("b").workload.name == "conv2d"


def _record(workload: object, device_key: str, seconds: float) -> Record:
    """A verified record of ``workload`` in logical layouts taking ``seconds``."""
    layouts = {b.name: identity(b.shape) for b in workload.buffers}  # type: ignore[attr-defined]
    return Record(workload.key, device_key, Candidate.make(layouts), "ok", value_s=seconds)  # type: ignore[attr-defined]


@pytest.mark.slow
def test_tune_model_winograd_tunes_both_forms_and_every_command_runs_the_faster(
    tmp_path: Path,
) -> None:
    """``tune-model --winograd`` records both forms of each convolution;
    ``plan``, ``freeze --model``, ``export --model`` and ``load_model`` then
    run the form the records time faster (nothing to ask), the frozen file
    the same plan as the records, ``winograd=False`` the direct one, and
    every output is ONNX Runtime's."""
    import onnx

    from tests.plan.test_model import _laytune, assert_close, feeds_of, onnx_runtime

    model = _two_convolutions()
    onnx.save(model, tmp_path / "model.onnx")
    url = f"sqlite:///{tmp_path / 'model.db'}"
    tuned = _laytune("tune-model", "model.onnx", "--trials", "2", "--batch", "2", "--winograd",
                     "--db", url, cwd=tmp_path)  # fmt: skip
    assert tuned.returncode == 0, tuned.stdout + tuned.stderr
    assert f"laytune plan model.onnx --db {url}`" in tuned.stdout
    keys = {r.workload_key for r in open_database(url, create=False).records() if r.op != "convert"}
    for graph in (from_onnx(model), from_onnx(model, winograd=True)):  # both forms, each once
        assert {c.workload.key for c in tuned_workloads(graph)} <= keys
    device = default_device()
    with open_database(url, create=False) as db:
        chosen = faster_in_records(model, db, device.info.key)
    shown = _laytune("plan", "model.onnx", "--db", url, "--repeats", "2", cwd=tmp_path)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    for name in ("a", "b"):  # the plan names the form's operators
        assert (f"{name}.M " in shown.stdout) == (name in chosen), name
    frozen = _laytune("freeze", "--model", "model.onnx", "--db", url, cwd=tmp_path)
    assert frozen.returncode == 0, frozen.stdout + frozen.stderr
    exported = _laytune("export", "laytune-model.json", "--model", "model.onnx",
                        "--out", "build", cwd=tmp_path)  # fmt: skip
    assert exported.returncode == 0, exported.stdout + exported.stderr
    sources = "".join(p.read_text() for p in (tmp_path / "build").glob("*.cl"))
    assert ("winograd_matmuls" in sources) == bool(chosen)
    measured = _laytune("freeze", "--model", "model.onnx", "--db", url, "--measure",
                        "--out", "measured.json", cwd=tmp_path)  # fmt: skip
    assert measured.returncode == 0, measured.stdout + measured.stderr
    if chosen:  # the forms are timed in the plan where the records chose Winograd's
        assert "timing each convolution's form in the plan of 'test'" in measured.stderr
        assert measured.stderr.count("the other form") == 2  # a and b: two keys
    feeds = feeds_of(model)
    want = onnx_runtime(model, feeds)
    with (
        laytune.load_model(model, database=url) as a,
        laytune.load_model(model, str(tmp_path / "laytune-model.json")) as b,
        laytune.load_model(model, str(tmp_path / "measured.json")) as c,
        laytune.load_model(model, database=url, winograd=False) as d,
        laytune.load_model(model, database=url, fuse=False) as e,
    ):
        assert a.plan.placements == b.plan.placements
        assert {op.name for op in a.plan.graph.ops} >= {f"{n}.M" for n in chosen}
        # no records of the bare (unfused) Winograd statements: directly
        for direct in (d, e):
            assert not any(op.name.endswith(".M") for op in direct.plan.graph.ops)
        for loaded in (a, b, c, d, e):
            assert_close(loaded(**feeds), want)


def test_a_graph_or_a_name_winograd_cannot_take_is_refused_by_name() -> None:
    """``winograd=True`` chooses forms while importing, so a Graph is refused;
    a name that is no 3 x 3 stride-1 convolution of the model is named."""
    model = _two_convolutions()
    graph = from_onnx(model)
    for call in (
        lambda: tune_model(graph, winograd=True),
        lambda: laytune.load_model(graph, winograd=True),
    ):
        with pytest.raises(ArgumentTypeError, match="pass the model, not a Graph"):
            call()
    with pytest.raises(ModelImportError, match=r"winograd names 'out', 'z', which are not a 3 x 3"):
        from_onnx(model, winograd={"a", "z", "out"})
    assert graph.op("out").workload.name == "relu"  # a name the model has, but not a convolution
