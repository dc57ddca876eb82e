"""Workload keys read back: the operator, its parameters and dtype.

A key is what :meth:`Workload.define` writes, ``name(p=v,...;dtype)`` with
tuples written ``4x8``. :func:`from_key` rebuilds a library workload from its
key (records and frozen files name workloads by key), and :func:`key_distance`
says how far apart two shapes of one operator are (warm starts use it).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from laytune.exceptions import UnknownWorkloadError
from laytune.ops import _library as lib
from laytune.ops._workload import Workload

__all__ = ["UnknownWorkloadError", "from_key", "key_distance", "parse_key"]

_KEY = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)\((?P<params>[^;()]*);(?P<dtype>[a-z0-9]+)\)$")


def parse_key(key: str) -> tuple[str, dict[str, tuple[int, ...] | int], str]:
    """(operator, parameters, dtype) of a library workload key."""
    match = _KEY.match(key.strip())
    if match is None:
        raise UnknownWorkloadError(f"not a workload key: {key!r} (expected name(p=v,...;dtype))")
    params: dict[str, tuple[int, ...] | int] = {}
    text = match["params"]
    for part in text.split(",") if text else ():
        name, sep, value = part.partition("=")
        try:
            numbers = tuple(int(v) for v in value.split("x"))
        except ValueError:
            raise UnknownWorkloadError(f"workload key {key!r}: bad value {part!r}") from None
        if not sep or not numbers:
            raise UnknownWorkloadError(f"workload key {key!r}: bad parameter {part!r}")
        params[name] = numbers if "x" in value else numbers[0]
    return match["name"], params, match["dtype"]


def _tuple(value: Any) -> tuple[int, ...]:
    return value if isinstance(value, tuple) else (value,)


_BUILDERS: Mapping[str, Callable[[dict[str, Any], str], Workload]] = {
    "copy": lambda p, d: lib.copy(_tuple(p["shape"]), d),
    "transpose": lambda p, d: lib.transpose(_tuple(p["shape"]), _tuple(p["perm"]), d),
    "relu": lambda p, d: lib.relu(_tuple(p["shape"]), d),
    "bias_add": lambda p, d: lib.bias_add(_tuple(p["shape"]), p["axis"], d),
    "sum": lambda p, d: lib.sum(_tuple(p["shape"]), _tuple(p["axes"]), d),
    "max_pool2d": lambda p, d: lib.max_pool2d(
        p["n"], p["c"], p["h"], p["w"], p["kernel"], p["stride"], d
    ),
    "matmul": lambda p, d: lib.matmul(p["M"], p["N"], p["K"], d),
    "conv2d": lambda p, d: lib.conv2d(
        p["batch"],
        p["in_channels"],
        p["height"],
        p["width"],
        p["filters"],
        p["kernel"],
        p["stride"],
        p["padding"],
        d,
    ),
}


def from_key(key: str) -> Workload:
    """The library workload whose key is ``key`` (checked: same key back)."""
    name, params, dtype = parse_key(key)
    if name not in _BUILDERS:
        raise UnknownWorkloadError(
            f"workload key {key!r} names no library operator (known: {', '.join(_BUILDERS)})"
        )
    try:
        workload = _BUILDERS[name](params, dtype)
    except (KeyError, TypeError) as err:
        raise UnknownWorkloadError(f"workload key {key!r} lacks parameter {err}") from None
    if workload.key != key.strip():
        raise UnknownWorkloadError(f"workload key {key!r} rebuilds as {workload.key!r}")
    return workload


def key_distance(a: str, b: str) -> float:
    """How far apart two shapes of one operator are: the sum of |log ratio| of
    their numeric parameters; ``inf`` for different operators, dtypes, or
    parameters that must match (permutations, axes, ranks)."""
    try:
        name_a, params_a, dtype_a = parse_key(a)
        name_b, params_b, dtype_b = parse_key(b)
    except UnknownWorkloadError:
        return math.inf
    if (name_a, dtype_a, params_a.keys()) != (name_b, dtype_b, params_b.keys()):
        return math.inf
    distance = 0.0
    for name, value_a in params_a.items():
        va, vb = _tuple(value_a), _tuple(params_b[name])
        if len(va) != len(vb):
            return math.inf
        if name in ("perm", "axes", "axis"):
            if va != vb:
                return math.inf
            continue
        for x, y in zip(va, vb, strict=True):
            if (x <= 0) != (y <= 0):
                return math.inf
            distance += abs(math.log(max(x, 1) / max(y, 1)))
    return distance
