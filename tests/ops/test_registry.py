"""The workload registry: every registered constructor rebuilds from its key
(``from_key(w.key) == w``), keys read back typed, and registration refuses
what a key cannot write."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from laytune import ops
from laytune.exceptions import RegistryError, StatementError, UnknownWorkloadError
from laytune.ops import Workload, _registry
from laytune.search import demos

small_shapes = st.lists(st.integers(1, 8), min_size=1, max_size=4).map(tuple)


@st.composite
def _transpose(draw: st.DrawFn) -> dict[str, Any]:
    shape = draw(small_shapes)
    perm = draw(st.none() | st.permutations(range(len(shape))).map(tuple))
    return {"shape": shape} if perm is None else {"shape": shape, "perm": perm}


@st.composite
def _bias_add(draw: st.DrawFn) -> dict[str, Any]:
    shape = draw(small_shapes)
    return {"shape": shape, "axis": draw(st.integers(-len(shape), len(shape) - 1))}


@st.composite
def _sum(draw: st.DrawFn) -> dict[str, Any]:
    shape = draw(st.lists(st.integers(1, 8), min_size=2, max_size=4).map(tuple))
    rank = len(shape)
    kept = draw(st.integers(0, rank - 1))
    axes = [a for a in range(rank) if a != kept and draw(st.booleans())] or [(kept + 1) % rank]
    return {"shape": shape, "axes": tuple(a - rank if draw(st.booleans()) else a for a in axes)}


@st.composite
def _max_pool2d(draw: st.DrawFn) -> dict[str, Any]:
    h, w = draw(st.integers(1, 8)), draw(st.integers(1, 8))
    return {
        "n": draw(st.integers(1, 3)),
        "c": draw(st.integers(1, 4)),
        "h": h,
        "w": w,
        "kernel": draw(st.integers(1, min(h, w))),
        "stride": draw(st.integers(1, 3)),
    }


@st.composite
def _conv2d(draw: st.DrawFn) -> dict[str, Any]:
    params = {
        "batch": draw(st.integers(1, 2)),
        "in_channels": draw(st.integers(1, 4)),
        "height": draw(st.integers(1, 8)),
        "width": draw(st.integers(1, 8)),
        "filters": draw(st.integers(1, 4)),
        "kernel": draw(st.integers(1, 3)),
        "stride": draw(st.integers(1, 3)),
        "padding": draw(st.integers(0, 2)),
    }
    reach = min(params["height"], params["width"]) + 2 * params["padding"]
    assume(reach >= params["kernel"])
    return params


#: Small parameters of every registered operator; a new operator needs one
#: (test_every_registered_operator_is_drawn says so).
PARAMS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "copy": st.fixed_dictionaries({"shape": small_shapes}),
    "transpose": _transpose(),
    "bias_add": _bias_add(),
    "relu": st.fixed_dictionaries({"shape": small_shapes}),
    "sum": _sum(),
    "max_pool2d": _max_pool2d(),
    "matmul": st.fixed_dictionaries(
        {"M": st.integers(1, 48), "N": st.integers(1, 48), "K": st.integers(1, 48)}
    ),
    "conv2d": _conv2d(),
}


def test_every_registered_operator_is_drawn() -> None:
    assert set(PARAMS) == set(ops.constructors())


@pytest.mark.parametrize("name", list(ops.constructors()))
@settings(max_examples=40, deadline=None)
@given(data=st.data(), dtype=st.sampled_from(ops.DTYPES))
def test_from_key_of_the_key_is_the_workload(name: str, data: st.DataObject, dtype: str) -> None:
    params = data.draw(PARAMS[name], label="params")
    constructor = ops.constructor(name)
    workload = constructor.build(params, dtype)
    assert workload == constructor.function(**params, dtype=dtype)
    assert workload.name == name and workload.dtype == dtype
    assert ops.from_key(workload.key) == workload
    assert ops.key_distance(workload.key, workload.key) == 0.0


@pytest.mark.parametrize("name", list(ops.constructors()))
def test_the_example_of_every_operator_builds_and_reads_back(name: str) -> None:
    constructor = ops.constructor(name)
    workload = constructor.example_workload()
    assert ops.from_key(workload.key) == workload
    assert {p.name for p in constructor.parameters if p.required} <= set(dict(constructor.example))


def test_parameters_come_from_the_signature() -> None:
    matmul = ops.constructor("matmul")
    assert [(p.name, p.ints, p.required) for p in matmul.parameters] == [
        ("M", False, True),
        ("N", False, True),
        ("K", False, True),
    ]
    transpose = ops.constructor("transpose")
    assert [(p.name, p.ints, p.required, p.structural) for p in transpose.parameters] == [
        ("shape", True, True, False),
        ("perm", True, False, True),
    ]
    conv = ops.constructor("conv2d")
    assert conv.parameter("padding").default == 0 and not conv.parameter("padding").required
    assert conv.usage().startswith("batch=INT in_channels=INT")
    assert "[padding=INT (0)]" in conv.usage()
    # the operators of the built-in demo (laytune.search.demos: a matmul, held two ways)
    assert [c.name for c in ops.constructors().values() if c.demo] == ["matmul"]
    assert {d.workload.name for d in demos()} == {"matmul"}


def test_parse_key_types_values_as_the_operator_declares() -> None:
    assert ops.parse_key("copy(shape=8;float32)") == ("copy", {"shape": (8,)}, "float32")
    assert ops.parse_key("bias_add(shape=2x3,axis=1;float16)") == (
        "bias_add",
        {"shape": (2, 3), "axis": 1},
        "float16",
    )
    # an operator nobody registered: tuples where the key writes x
    assert ops.parse_key("mine(a=8,b=2x3;float32)") == ("mine", {"a": 8, "b": (2, 3)}, "float32")


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("matmul", "not a workload key"),
        ("spiral(n=3;float32)", "names no registered operator (known: copy, transpose"),
        ("matmul(M=8,N=8;float32)", "missing: ['K']"),
        ("matmul(M=8,N=8,K=8,Q=1;float32)", "unknown: ['Q']"),
        ("matmul(M=8x2,N=8,K=8;float32)", "parameter M: '8x2' is not an integer"),
        ("matmul(M=a,N=8,K=8;float32)", "parameter M: 'a' is not an integer"),
        ("matmul(K=8,N=8,M=8;float32)", "rebuilds as 'matmul(M=8,N=8,K=8;float32)'"),
        ("sum(shape=4x4,axes=1x1;float32)", "rebuilds as"),
        ("copy(shape;float32)", "expected NAME=VALUE, got 'shape'"),
    ],
)
def test_keys_that_do_not_rebuild_are_refused_by_name(key: str, message: str) -> None:
    with pytest.raises(UnknownWorkloadError, match=re.escape(message)):
        ops.from_key(key)


def test_a_value_the_operator_refuses_raises_its_own_error() -> None:
    with pytest.raises(StatementError, match="keep at least one axis"):
        ops.from_key("sum(shape=4x4,axes=0x1;float32)")


def test_key_distance_reads_sizes_and_structure_from_the_registry() -> None:
    a = ops.transpose((8, 16), (1, 0)).key
    assert ops.key_distance(a, ops.transpose((16, 16), (1, 0)).key) == pytest.approx(0.6931, 1e-3)
    assert ops.key_distance(a, ops.transpose((8, 16, 2), (2, 1, 0)).key) == float("inf")
    assert ops.key_distance(ops.sum((4, 4), (1,)).key, ops.sum((4, 4), (0,)).key) == float("inf")
    assert ops.key_distance(a, ops.copy((8, 16)).key) == float("inf")
    assert ops.key_distance(a, ops.transpose((8, 16), (1, 0), "float16").key) == float("inf")
    # a stride is a size: nearby, not another problem
    near = ops.key_distance(
        ops.conv2d(1, 4, 8, 8, 4, 3, 1).key, ops.conv2d(1, 4, 8, 8, 4, 3, 2).key
    )
    assert 0 < near < float("inf")
    # an operator nobody registered: equal keys only
    assert ops.key_distance("mine(a=8;float32)", "mine(a=8;float32)") == 0.0
    assert ops.key_distance("mine(a=8;float32)", "mine(a=9;float32)") == float("inf")


def test_transpose_reverses_the_axes_by_default_as_numpy() -> None:
    assert ops.transpose((2, 3, 4)) == ops.transpose((2, 3, 4), (2, 1, 0))


def test_registering_keeps_the_registry_consistent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_registry, "_REGISTRY", dict(_registry._REGISTRY))

    @ops.register(example={"shape": (4, 4)})
    def negate(shape: Sequence[int], dtype: str = "float32") -> Workload:
        """``Y = -X``."""
        shape = tuple(shape)
        names = "ijkl"[: len(shape)]
        idx = ", ".join(names)
        return Workload.define(
            "negate",
            f"Y[{idx}] = -X[{idx}]",
            dict(zip(names, shape, strict=True)),
            {"X": shape},
            dtype,
            params={"shape": shape},
        )

    workload = negate((3, 5))
    assert ops.constructor("negate").summary == "``Y = -X``."
    assert ops.from_key(workload.key) == workload

    with pytest.raises(RegistryError, match="'negate' is registered already"):
        ops.register(example={})(negate)

    def strided(shape: Sequence[int], step: float, dtype: str = "float32") -> Workload:
        raise AssertionError("never built")

    with pytest.raises(RegistryError, match="parameter 'step' is annotated"):
        ops.register(example={})(strided)

    def untyped(n: int) -> Workload:
        raise AssertionError("never built")

    with pytest.raises(RegistryError, match="takes a dtype parameter"):
        ops.register(example={})(untyped)

    def shaped(shape: Sequence[int], dtype: str = "float32") -> Workload:
        raise AssertionError("never built")

    with pytest.raises(RegistryError, match=r"structural names no parameter: \['perm'\]"):
        ops.register(example={}, structural=("perm",))(shaped)
    with pytest.raises(RegistryError, match=r"example names no parameter: \['rows'\]"):
        ops.register(example={"rows": 3})(shaped)
    assert "shaped" not in ops.constructors()
