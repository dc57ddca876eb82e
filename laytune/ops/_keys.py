"""Workload keys read back: the operator, its parameters and dtype.

A key is what :meth:`Workload.define` writes, ``name(p=v,...;dtype)`` with
tuples written ``4x8``. :func:`from_key` rebuilds a registered workload from
its key (records and frozen files name workloads by key), and
:func:`key_distance` says how far apart two shapes of one operator are
(warm starts use it). Both read the workload registry
(:func:`laytune.ops.register`).
"""

from __future__ import annotations

import math
import re

from laytune.exceptions import StatementError, UnknownWorkloadError
from laytune.layout import Const, Var, to_text
from laytune.ops._registry import (
    ParamValue,
    constructors,
    defined_workloads,
    format_value,
    parse_params,
)
from laytune.ops._statement import loads, parse_statement, value_text
from laytune.ops._workload import Workload

__all__ = [
    "UnknownWorkloadError",
    "from_key",
    "key_distance",
    "parse_key",
    "shape_text",
    "short_key",
]

_KEY = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)\((?P<params>[^;()]*);(?P<dtype>[a-z0-9]+)\)$")


def _split(key: str) -> tuple[str, dict[str, str], str]:
    match = _KEY.match(key.strip())
    if match is None:
        raise UnknownWorkloadError(f"not a workload key: {key!r} (expected name(p=v,...;dtype))")
    return match["name"], parse_params(match["params"], f"workload key {key!r}"), match["dtype"]


def parse_key(key: str) -> tuple[str, dict[str, ParamValue], str]:
    """(operator, parameters, dtype) of a workload key.

    A registered operator's parameters are typed as it declares them (a
    tuple parameter stays a tuple when it has one element); any other
    operator's values are tuples where the key writes ``x``, else ints.
    """
    name, texts, dtype = _split(key)
    entry = constructors().get(name)
    params: dict[str, ParamValue] = {}
    for param, text in texts.items():
        if entry is not None and any(p.name == param for p in entry.parameters):
            params[param] = entry.parameter(param).parse(text)
            continue
        try:
            numbers = tuple(int(v) for v in text.split("x"))
        except ValueError:
            raise UnknownWorkloadError(f"workload key {key!r}: bad value {text!r}") from None
        params[param] = numbers if "x" in text else numbers[0]
    return name, params, dtype


#: Parameters that are not extents of the data: written ``name=value`` after
#: the shape in :func:`shape_text`.
_SETTINGS = frozenset({"perm", "axes", "axis", "filters", "kernel", "stride", "padding"})


def shape_text(key: str) -> str:
    """The shape part of a workload key, the way people write it.

    The extents first, joined by ``x`` (a ``shape`` parameter, else the
    leading parameters up to the first setting), then the settings
    (permutation, axes, kernel, stride, ...) as ``name=value``, then the dtype
    when it is not float32: ``matmul(M=256,N=256,K=256;float32)`` gives
    ``"256x256x256"``, ``transpose(shape=64x32,perm=1x0;float32)`` gives
    ``"64x32 perm=1x0"``; a fused workload's key its operator's shape, then
    ``+epilogue[...]``. A key that is not of that form gives its text
    between the parentheses.
    """
    base, fused, epilogue = key.partition("+epilogue[")
    if fused:  # a fused workload: its operator's shape, then what its stores apply
        return f"{shape_text(base)} +epilogue[{epilogue}"
    try:
        _, params, dtype = parse_key(key)
    except UnknownWorkloadError:  # buffer shapes (and a digest after them: define without params)
        inner = key.partition("(")[2]
        head, paren, _ = inner.rpartition(")")
        return head if paren else inner
    if "shape" in params:
        extents = [format_value(params["shape"])]
        settings = [(n, v) for n, v in params.items() if n != "shape"]
    else:
        names = list(params)
        first = next((k for k, n in enumerate(names) if n in _SETTINGS), len(names))
        extents = ["x".join(format_value(params[n]) for n in names[:first])] if first else []
        settings = [(n, params[n]) for n in names[first:]]
    parts = extents + [f"{name}={format_value(value)}" for name, value in settings]
    if dtype != "float32":
        parts.append(dtype)
    return " ".join(parts)


def short_key(key: str) -> str:
    """Operator and shape of a workload key: ``"matmul 256x256x256"`` (see
    :func:`shape_text`), for titles and tables."""
    op = key.split("(", 1)[0]
    shape = shape_text(key)
    return f"{op} {shape}" if shape else op


#: What to do about a key that names an operator laytune does not know.
_UNKNOWN_HINT = (
    "register its constructor (laytune.ops.register) or define it (Workload.define) "
    "in a module imported first (laytune --import MODULE, or LAYTUNE_IMPORT)"
)


def from_key(key: str) -> Workload:
    """The workload whose key is ``key``: rebuilt by the constructor
    registered under its operator (checked: same key back), else the one
    :meth:`Workload.define` made with that key, while something holds it
    (see :func:`laytune.ops.defined_workloads`)."""
    defined = defined_workloads().get(key.strip())
    try:
        name, params, dtype = parse_key(key)
    except UnknownWorkloadError as err:
        if defined is not None:  # a key of buffer shapes: define without params
            return defined
        if _EPILOGUE in key:
            return _with_epilogue(key.strip())
        raise UnknownWorkloadError(f"{err}; {_UNKNOWN_HINT}") from None
    if name not in constructors():
        if defined is not None:
            return defined
        raise UnknownWorkloadError(
            f"workload key {key!r} names no registered operator "
            f"(known: {', '.join(constructors())}); {_UNKNOWN_HINT}"
        )
    try:
        workload = constructors()[name].build(params, dtype)
    except UnknownWorkloadError as err:
        raise UnknownWorkloadError(f"workload key {key!r}: {err}") from None
    if workload.key != key.strip():
        raise UnknownWorkloadError(f"workload key {key!r} rebuilds as {workload.key!r}")
    return workload


_EPILOGUE = "+epilogue["
_ACC = re.compile(r"\bacc\b(?!\s*\[)")  # the accumulator, not a buffer named acc


def _with_epilogue(key: str) -> Workload:
    """The workload of ``base+epilogue[value]`` (a plan's fused operator):
    ``base``'s, its finished reduction written ``acc`` in ``value``. Each
    operand of the epilogue has the extent of the axis that indexes it in
    each dimension (1 where it reads index 0); any other index leaves its
    shape unknown, and the key is refused."""
    base, _, rest = key.partition(_EPILOGUE)
    producer = from_key(base)
    stmt = producer.statement
    if not rest.endswith("]") or stmt.reduction is None or stmt.epilogue is not None:
        raise UnknownWorkloadError(f"workload key {key!r}: not a reduction's key and an epilogue")
    names = producer.axis_names
    target = f"{stmt.target}[{', '.join(to_text(i, names) for i in stmt.target_indices)}]"
    reduced = f"{stmt.reduction}({value_text(stmt.value, names)})"
    text = f"{target} = {_ACC.sub(lambda _: reduced, rest[:-1])}"
    try:
        epilogue = parse_statement(text, names).epilogue
    except StatementError as err:
        raise UnknownWorkloadError(f"workload key {key!r}: {err}") from None
    inputs = {d.name: d.shape for d in producer.inputs}
    for load in loads(epilogue) if epilogue is not None else []:
        shape = []
        for index in load.indices:
            if isinstance(index, Var):
                shape.append(producer.axes[index.index].extent)
            elif index == Const(0):
                shape.append(1)
            else:
                raise UnknownWorkloadError(
                    f"workload key {key!r}: the shape of {load.buffer} is not known from its "
                    f"index {to_text(index, names)}"
                )
        inputs[load.buffer] = tuple(shape)
    try:
        params = parse_key(base)[1]
        workload = Workload.define(
            producer.name,
            text,
            {a.name: a.extent for a in producer.axes},
            inputs,
            producer.dtype,
            params=params,
            local_tiles=dict(producer.local_tiles),
            weights=producer.weights,
            tables=producer.table_arrays,
        )
    except StatementError as err:
        raise UnknownWorkloadError(f"workload key {key!r}: {err}") from None
    if workload.key != key:
        raise UnknownWorkloadError(f"workload key {key!r} rebuilds as {workload.key!r}")
    return workload


def key_distance(a: str, b: str) -> float:
    """How far apart two shapes of one operator are: the sum of |log ratio| of
    their size parameters; ``inf`` for different operators, dtypes, ranks or
    structural parameters (permutations, axes; see
    :class:`laytune.ops.Parameter`). Keys of an operator that is not
    registered are 0 apart when equal, else ``inf``."""
    try:
        name_a, params_a, dtype_a = parse_key(a)
        name_b, params_b, dtype_b = parse_key(b)
    except UnknownWorkloadError:
        return math.inf
    if (name_a, dtype_a, params_a.keys()) != (name_b, dtype_b, params_b.keys()):
        return math.inf
    entry = constructors().get(name_a)
    if entry is None:
        return 0.0 if params_a == params_b else math.inf
    distance = 0.0
    for param, value_a in params_a.items():
        value_b = params_b[param]
        declared = any(p.name == param for p in entry.parameters)
        if not declared or entry.parameter(param).structural:
            if value_a != value_b:
                return math.inf
            continue
        va = value_a if isinstance(value_a, tuple) else (value_a,)
        vb = value_b if isinstance(value_b, tuple) else (value_b,)
        if len(va) != len(vb):
            return math.inf
        for x, y in zip(va, vb, strict=True):
            if (x <= 0) != (y <= 0):
                return math.inf
            distance += abs(math.log(max(x, 1) / max(y, 1)))
    return distance
