"""Workloads: the statement parser, references against plain numpy, counts, keys."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

from laytune import ops
from laytune.layout import Var
from laytune.ops import StatementError, Workload, _workload


def test_matmul_is_one_line_and_matches_numpy() -> None:
    w = Workload.define(
        "mm", "C[i, j] += A[i, k] * B[k, j]", {"i": 4, "j": 5, "k": 3}, {"A": (4, 3), "B": (3, 5)}
    )
    assert [a.kind for a in w.axes] == ["spatial", "spatial", "reduce"]
    assert w.reduction == "sum" and w.output.shape == (4, 5)
    assert w.buffer("A").indices == (Var(0), Var(2))
    x = w.make_inputs(1)
    np.testing.assert_allclose(w.reference(x)["C"], x["A"] @ x["B"], rtol=1e-5)
    assert w.flops == 2 * 4 * 5 * 3
    assert w.bytes == 4 * (12 + 15 + 20)


def test_constructors_match_numpy() -> None:
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    t = ops.transpose(x.shape, (3, 1, 0, 2))
    np.testing.assert_array_equal(t.reference({"X": x})["Y"], x.transpose(3, 1, 0, 2))
    np.testing.assert_array_equal(ops.copy(x.shape).reference({"X": x})["Y"], x)
    np.testing.assert_array_equal(ops.relu(x.shape).reference({"X": x})["Y"], np.maximum(x, 0))
    b = np.arange(3, dtype=np.float32)
    got = ops.bias_add(x.shape, 1).reference({"X": x, "B": b})["Y"]
    np.testing.assert_allclose(got, x + b[None, :, None, None], rtol=1e-6)
    s = ops.sum(x.shape, (0, 2)).reference({"X": x})["Y"]
    np.testing.assert_allclose(s, x.sum(axis=(0, 2)), rtol=1e-5, atol=1e-6)
    p = ops.max_pool2d(2, 3, 4, 5, 2, 2).reference({"X": x})["Y"]
    np.testing.assert_array_equal(p, x[:, :, :4, :4].reshape(2, 3, 2, 2, 2, 2).max(axis=(3, 5)))


def test_conv2d_zero_padding_and_stride_match_a_direct_loop() -> None:
    w = ops.conv2d(1, 3, 7, 7, 4, 3, stride=2, padding=1)
    x = w.make_inputs(3)
    padded = np.pad(x["X"].astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((1, 4, 4, 4))
    for f in range(4):
        for oh in range(4):
            for ow in range(4):
                window = padded[0, :, oh * 2 : oh * 2 + 3, ow * 2 : ow * 2 + 3]
                want[0, f, oh, ow] = (window * x["W"][f]).sum()
    np.testing.assert_allclose(w.reference(x)["Y"], want, rtol=1e-5, atol=1e-6)
    assert w.reduction_length == 27


def test_keys_are_stable_and_distinguish_shapes_and_dtypes() -> None:
    assert ops.matmul(8, 8, 8).key == "matmul(M=8,N=8,K=8;float32)"
    assert ops.matmul(8, 8, 8, dtype="float16").key != ops.matmul(8, 8, 8).key
    assert ops.conv2d(1, 3, 8, 8, 4, 3, 1, 0).key != ops.conv2d(1, 3, 8, 8, 4, 3, 2, 0).key
    assert ops.matmul(8, 8, 8) == ops.matmul(8, 8, 8)


def test_inputs_are_seeded() -> None:
    w = ops.bias_add((4, 6))
    a, b, c = w.make_inputs(5), w.make_inputs(5), w.make_inputs(6)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["X"], c["X"])
    assert (
        a["X"].dtype == np.float32
        and ops.relu((4,), dtype="float16").make_inputs(0)["X"].dtype == np.float16
    )


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        (
            "Y[i] = X[i, j]",
            r"write '\+=' or sum\(\.\.\.\), max\(\.\.\.\), min\(\.\.\.\) to reduce over them",
        ),
        ("Y[i] = max(X[i, j]) + min(X[i, j])", r"wraps one reduction \(sum\(\.\.\.\), max"),
        ("Y[i] = X[q]", "unknown axis 'q'"),
        ("Y[i] = __import__('os')", "unknown function"),
        ("Y[i] -= X[i, j]", "augmented assignment"),
        ("Y[i] += X[i, j] * X[i, 0]", "two different indices"),
        ("Y[i, i] = X[i, j]", "distinct axis names"),
        ("Y[i] = X[i // j]", "constant divisor"),
    ],
)
def test_statements_outside_the_grammar_are_refused(statement: str, message: str) -> None:
    with pytest.raises(StatementError, match=message):
        Workload.define("bad", statement, {"i": 2, "j": 3}, {"X": (2, 3)})


def test_an_input_read_twice_at_the_same_point_is_one_input() -> None:
    """A sum of squares and GELU read ``X`` twice at the same indices: one
    input, the same value at both reads."""
    squares = Workload.define("sq", "Y[i] += X[i, j] * X[i, j]", {"i": 3, "j": 5}, {"X": (3, 5)})
    gelu = Workload.define(
        "gelu", "Y[i] = X[i] * (1.0 + erf(X[i] * 0.7071067811865476)) * 0.5", {"i": 7}, {"X": (7,)}
    )
    assert [b.name for b in squares.inputs] == ["X"] == [b.name for b in gelu.inputs]
    x = squares.make_inputs(0)["X"].astype(np.float64)
    np.testing.assert_allclose(squares.reference({"X": x})["Y"], (x * x).sum(axis=1), rtol=1e-6)
    v = gelu.make_inputs(0)["X"].astype(np.float64)
    erf = np.vectorize(math.erf)
    np.testing.assert_allclose(
        gelu.reference({"X": v})["Y"], v * (1 + erf(v / math.sqrt(2))) / 2, rtol=1e-6
    )


def test_an_output_axis_no_input_reads_is_a_broadcast() -> None:
    """``G[i, j] += X[i, k]`` repeats each row's sum along ``j`` (einsum would
    refuse an output subscript no operand has)."""
    spread = Workload.define(
        "spread", "G[i, j] += X[i, k]", {"i": 3, "j": 4, "k": 5}, {"X": (3, 5)}
    )
    x = spread.make_inputs(1)["X"]
    expected = np.repeat(x.astype(np.float64).sum(axis=1, keepdims=True), 4, axis=1)
    np.testing.assert_allclose(spread.reference({"X": x})["G"], expected, rtol=1e-6)


def test_max_reduction_and_elementwise_max_are_told_apart() -> None:
    pool = Workload.define("m", "Y[i] = max(X[i, j])", {"i": 2, "j": 3}, {"X": (2, 3)})
    relu = Workload.define("r", "Y[i] = max(X[i], 0.0)", {"i": 2}, {"X": (2,)})
    assert pool.reduction == "max" and relu.reduction is None
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 3
    np.testing.assert_array_equal(pool.reference({"X": x})["Y"], x.max(axis=1))


def test_a_key_of_buffer_shapes_tells_apart_what_the_shapes_do_not() -> None:
    """Without params the key lists the buffer shapes, then a digest of the
    rest of the definition: two statements over the same shapes (a user
    editing one in a notebook) never share records, nor do the same shapes
    reduced over another extent; how the statement is spelt does not count."""

    def key(statement: str, axes: dict[str, int], **options: object) -> str:
        return Workload.define("r", statement, axes, {"X": (3, 8)}, **options).key

    rows = {"i": 3, "j": 8}
    base = key("Y[i] = max(X[i, j])", rows)
    assert base.startswith("r(X[3, 8],Y[3];float32)#")
    assert key("Y[i]=max( (X[i,j]) )", rows) == base
    others = {
        key("Y[i] = min(X[i, j])", rows),
        key("Y[i] += X[i, j]", rows),
        key("Y[i] = max(X[i, j] * 2.0)", rows),
        key("Y[i] = max(X[i, j])", rows, weights=("X",)),
        key("Y[i] += X[i, 2 * j]", {"i": 3, "j": 4}),
        key("Y[i] += X[i, 2 * j]", {"i": 3, "j": 3}),
    }
    assert len(others) == 6 and base not in others


def test_every_reduction_of_the_table_parses_and_computes_as_numpy() -> None:
    """A one-argument call of each name in ``ops.REDUCTIONS`` reduces with
    it, alone and inside an epilogue; ``+=`` is the sum."""
    x = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    for name, combine in ops.REDUCTIONS.items():
        alone = Workload.define("r", f"Y[i] = {name}(X[i, j])", {"i": 3, "j": 4}, {"X": (3, 4)})
        assert alone.reduction == name and alone.statement.epilogue is None
        want = combine.numpy.reduce(x, axis=1)
        np.testing.assert_allclose(alone.reference({"X": x})["Y"], want, rtol=1e-6)
        fused = Workload.define(
            "e", f"Y[i] = max({name}(X[i, j]) * 2.0, 1.0)", {"i": 3, "j": 4}, {"X": (3, 4)}
        )
        assert fused.reduction == name and fused.statement.epilogue is not None
        np.testing.assert_allclose(
            fused.reference({"X": x})["Y"], np.maximum(want * 2.0, 1.0), rtol=1e-6
        )
    assert Workload.define("s", "Y[i] += X[i, j]", {"i": 3, "j": 4}, {"X": (3, 4)}).reduction == (
        "sum"
    )


def test_workloads_satisfy_the_space_and_runner_protocols() -> None:
    from laytune.runners import VerifiableWorkload
    from laytune.space import WorkloadLike

    w = ops.matmul(16, 16, 16)
    assert isinstance(w, WorkloadLike) and isinstance(w, VerifiableWorkload)
    assert dict(w.local_tiles) == {"A": (16, 16), "B": (16, 16)}


@pytest.mark.parametrize(
    ("workload", "short"),
    [
        (ops.matmul(256, 128, 64), "matmul 256x128x64"),
        (ops.copy((64, 32)), "copy 64x32"),
        (ops.transpose((64, 32), (1, 0)), "transpose 64x32 perm=1x0"),
        (ops.sum((4, 8), (1,)), "sum 4x8 axes=1"),
        (ops.max_pool2d(1, 32, 28, 28, 2, 2), "max_pool2d 1x32x28x28 kernel=2 stride=2"),
        (
            ops.conv2d(1, 32, 28, 28, 16, 3, 1, 1),
            "conv2d 1x32x28x28 filters=16 kernel=3 stride=1 padding=1",
        ),
        (ops.copy((8,), "float16"), "copy 8 float16"),
    ],
)
def test_short_keys_name_the_operator_and_shape(workload, short: str) -> None:
    assert ops.short_key(workload.key) == short
    assert ops.shape_text(workload.key) == short.split(" ", 1)[1]


def test_a_fused_key_is_shortened_to_its_operators_shape_and_epilogue() -> None:
    key = ops.matmul(1, 10, 64).key + "+epilogue[(acc + B1[j])]"
    assert ops.short_key(key) == "matmul 1x10x64 +epilogue[(acc + B1[j])]"


def test_a_key_not_of_the_library_form_is_shortened_to_its_text() -> None:
    assert ops.short_key("mine(a, b)") == "mine a, b"
    assert ops.short_key("mine") == "mine"


@pytest.mark.parametrize(
    ("workload", "spec"),
    [
        (ops.matmul(5, 7, 3), ("ac,cb->ab", ("A", "B"))),
        (ops.sum((2, 3, 4), (0, 2)), ("bac->a", ("X",))),  # spatial j is axis 0
        (
            Workload.define(
                "weighted",
                "C[i, j] += A[k, i] * B[k, j] * D[k]",
                {"i": 3, "j": 3, "k": 4},
                {"A": (4, 3), "B": (4, 3), "D": (4,)},
            ),
            ("ca,cb,c->ab", ("A", "B", "D")),
        ),
    ],
)
def test_sums_of_products_of_whole_axes_are_one_einsum(
    workload: Workload, spec: tuple[str, tuple[str, ...]], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert workload._contraction() == spec
    x = workload.make_inputs(2)
    fast = workload.reference(x)[workload.output.name]
    monkeypatch.setattr(Workload, "_contraction", lambda self: None)
    general = workload.reference(x)[workload.output.name]
    assert fast.dtype == general.dtype == np.float32
    np.testing.assert_allclose(fast, general, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "workload",
    [
        ops.conv2d(1, 3, 7, 7, 4, 3, padding=1),  # windows: oh + kh - 1
        ops.max_pool2d(1, 2, 4, 4, 2, 2),  # max
        ops.bias_add((2, 3, 4), 1),  # no reduction
        ops.transpose((3, 4), (1, 0)),
        Workload.define(
            "scaled",
            "C[i, j] += 2 * A[i, k] * B[k, j]",
            {"i": 2, "j": 2, "k": 2},
            {"A": (2, 2), "B": (2, 2)},
        ),
        Workload.define("trace", "Y[i] += A[i, k, k]", {"i": 2, "k": 3}, {"A": (2, 3, 3)}),
    ],
)
def test_other_statements_take_the_general_path(workload: Workload) -> None:
    assert workload._contraction() is None


_BLOCKED = [
    ops.matmul(37, 29, 53),
    ops.conv2d(2, 3, 9, 9, 5, 3, stride=2, padding=1),
    ops.transpose((33, 17)),
    ops.sum((5, 6, 7), (0, 2)),
    ops.max_pool2d(2, 3, 8, 8, 2, 2),
    ops.bias_add((2, 3, 4), 1),
    Workload.define(
        "weighted",
        "C[i, j] += A[k, i] * B[k, j] * D[k]",
        {"i": 13, "j": 11, "k": 40},
        {"A": (40, 13), "B": (40, 11), "D": (40,)},
    ),
    Workload.define("trace", "Y[i] += A[i, k, k]", {"i": 5, "k": 3}, {"A": (5, 3, 3)}),
]


@pytest.mark.parametrize("block", [5, 100])
def test_the_reference_made_block_by_block_is_the_reference_made_whole(
    block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blocks of the output (a run of rows, single leading indices, runs of a
    contraction's reduce axis) give the same float32 values as one block."""
    whole = [w.reference(w.make_inputs(5))[w.output.name] for w in _BLOCKED]
    monkeypatch.setattr(_workload, "_REFERENCE_BLOCK", block)
    for w, want in zip(_BLOCKED, whole, strict=True):
        x = w.make_inputs(5)
        got = w.reference(x)[w.output.name]
        assert got.dtype == want.dtype and got.shape == want.shape, w.key
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, err_msg=w.key)


def test_inputs_made_block_by_block_are_one_draw_of_the_whole_shape(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_workload, "_REFERENCE_BLOCK", 100)
    w = ops.matmul(30, 20, 40)  # A (30, 40), B (40, 20): many blocks each
    rng = np.random.default_rng(9)
    want = {b.name: rng.uniform(-1.0, 1.0, size=b.shape).astype(b.dtype) for b in w.inputs}
    got = w.make_inputs(9)
    assert all(np.array_equal(got[k], want[k]) and got[k].dtype == want[k].dtype for k in want)


@pytest.mark.parametrize(
    "workload", [ops.transpose((512, 512)), ops.matmul(256, 256, 256)], ids=lambda w: w.key
)
def test_inputs_and_reference_need_no_float64_copy_of_a_tensor(
    workload: Workload, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Making the inputs and the reference allocates the arrays they return
    and a few blocks beside them: a float64 copy of an input or of the output
    (twice the bytes of a float32 one) would break the bound."""
    monkeypatch.setattr(_workload, "_REFERENCE_BLOCK", 1 << 12)
    tracemalloc.start()
    try:
        inputs = workload.make_inputs(1)
        _, made = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        before, _ = tracemalloc.get_traced_memory()
        out = workload.reference(inputs)[workload.output.name]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    input_bytes = sum(a.nbytes for a in inputs.values())
    assert made < input_bytes + (256 << 10)
    assert peak - before < out.nbytes + (256 << 10)
