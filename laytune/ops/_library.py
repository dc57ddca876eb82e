"""The built-in workloads: each a statement of a few lines.

Axis order is loop-nest order: the last spatial axis is the innermost (the
one that vectors and register tiles run along), so every constructor lists
the output's axes in the output's row-major order.

Every constructor is registered (:func:`laytune.ops.register`): its
parameter names are the names its key writes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from laytune.exceptions import StatementError
from laytune.layout import default_names
from laytune.ops._registry import register
from laytune.ops._workload import Workload

__all__ = [
    "bias_add",
    "conv2d",
    "copy",
    "matmul",
    "max_pool2d",
    "relu",
    "sum",
    "transpose",
]


def _shape(shape: Sequence[int]) -> tuple[int, ...]:
    shape = tuple(int(s) for s in shape)
    if not shape or any(s <= 0 for s in shape):
        raise StatementError(f"shape {shape} needs at least one axis and positive extents")
    return shape


def _offset(axis: str, stride: int, window: str, shift: int) -> str:
    text = f"{axis} * {stride} + {window}" if stride != 1 else f"{axis} + {window}"
    if shift:
        text += f" - {shift}"
    return text


def _elementwise(
    op: str,
    shape: Sequence[int],
    value: Callable[[str, list[str]], str],
    dtype: str,
    params: dict[str, Any] | None = None,
    others: dict[str, tuple[int, ...]] | None = None,
    weights: tuple[str, ...] = (),
) -> Workload:
    """``Y[idx] = value(X[idx], names)`` over ``shape``, element by element
    (``names``: the axes' names); ``others``: inputs beside ``X``."""
    shape = _shape(shape)
    names = list(default_names(len(shape)))
    idx = ", ".join(names)
    return Workload.define(
        op,
        f"Y[{idx}] = {value(f'X[{idx}]', names)}",
        dict(zip(names, shape, strict=True)),
        {"X": shape, **(others or {})},
        dtype,
        params={"shape": shape, **(params or {})},
        weights=weights,
    )


@register(example={"shape": (512, 512)})
def copy(shape: Sequence[int], dtype: str = "float32") -> Workload:
    """``Y = X``."""
    return _elementwise("copy", shape, lambda x, _: x, dtype)


@register(example={"shape": (512, 512), "perm": (1, 0)}, structural=("perm",))
def transpose(
    shape: Sequence[int], perm: Sequence[int] | None = None, dtype: str = "float32"
) -> Workload:
    """``Y = X.transpose(perm)`` for any permutation of the axes of ``shape``
    (default: the axes reversed, as numpy's)."""
    shape = _shape(shape)
    perm = tuple(reversed(range(len(shape)))) if perm is None else tuple(int(p) for p in perm)
    if sorted(perm) != list(range(len(shape))):
        raise StatementError(
            f"perm {perm} is not a permutation of the {len(shape)} axes of {shape}"
        )
    names = list(default_names(len(shape)))  # output axes, in output order
    x_index = [""] * len(shape)
    for k, p in enumerate(perm):
        x_index[p] = names[k]
    out_shape = tuple(shape[p] for p in perm)
    return Workload.define(
        "transpose",
        f"Y[{', '.join(names)}] = X[{', '.join(x_index)}]",
        dict(zip(names, out_shape, strict=True)),
        {"X": shape},
        dtype,
        params={"shape": shape, "perm": perm},
    )


@register(example={"shape": (1, 64, 56, 56), "axis": 1}, structural=("axis",))
def bias_add(shape: Sequence[int], axis: int = 1, dtype: str = "float32") -> Workload:
    """``Y = X + B`` with ``B`` of shape ``(shape[axis],)`` broadcast along the other axes.

    ``B`` is a weight (a model parameter, see :class:`~laytune.ops.Workload`)."""
    shape = _shape(shape)
    if not -len(shape) <= axis < len(shape):
        raise StatementError(f"axis {axis} is out of range for shape {shape}")
    axis %= len(shape)
    return _elementwise(
        "bias_add",
        shape,
        lambda x, names: f"{x} + B[{names[axis]}]",
        dtype,
        params={"axis": axis},
        others={"B": (shape[axis],)},
        weights=("B",),
    )


@register(example={"shape": (512, 512)})
def relu(shape: Sequence[int], dtype: str = "float32") -> Workload:
    """``Y = max(X, 0)``."""
    return _elementwise("relu", shape, lambda x, _: f"max({x}, 0.0)", dtype)


@register(example={"shape": (512, 512), "axes": (1,)}, structural=("axes",))
def sum(shape: Sequence[int], axes: Sequence[int], dtype: str = "float32") -> Workload:
    """``Y = X.sum(axis=axes)``; at least one axis must remain."""
    shape = _shape(shape)
    reduced = sorted({int(a) % len(shape) for a in axes})
    if not reduced:
        raise StatementError("sum needs at least one axis to reduce")
    if len(reduced) == len(shape):
        raise StatementError(f"sum over every axis of {shape}: keep at least one axis")
    names = list(default_names(len(shape)))
    kept = [names[k] for k in range(len(shape)) if k not in reduced]
    order = kept + [names[k] for k in reduced]  # spatial first, then the reduce loops
    return Workload.define(
        "sum",
        f"Y[{', '.join(kept)}] += X[{', '.join(names)}]",
        {n: shape[names.index(n)] for n in order},
        {"X": shape},
        dtype,
        params={"shape": shape, "axes": tuple(reduced)},
    )


@register(example={"n": 1, "c": 64, "h": 56, "w": 56, "kernel": 2, "stride": 2})
def max_pool2d(
    n: int, c: int, h: int, w: int, kernel: int, stride: int, dtype: str = "float32"
) -> Workload:
    """NCHW max pooling with a ``kernel`` x ``kernel`` window, no padding."""
    if kernel <= 0 or stride <= 0 or kernel > h or kernel > w:
        raise StatementError(f"max_pool2d: kernel {kernel}, stride {stride} on {h}x{w}")
    oh, ow = (h - kernel) // stride + 1, (w - kernel) // stride + 1
    return Workload.define(
        "max_pool2d",
        f"Y[n, c, oh, ow] = max(X[n, c, {_offset('oh', stride, 'kh', 0)}, "
        f"{_offset('ow', stride, 'kw', 0)}])",
        {"n": n, "c": c, "oh": oh, "ow": ow, "kh": kernel, "kw": kernel},
        {"X": (n, c, h, w)},
        dtype,
        params={"n": n, "c": c, "h": h, "w": w, "kernel": kernel, "stride": stride},
    )


@register(example={"M": 128, "N": 128, "K": 128}, demo=True)
def matmul(M: int, N: int, K: int, dtype: str = "float32") -> Workload:
    """``C[i, j] += A[i, k] * B[k, j]`` for ``A`` of shape (M, K) and ``B``
    of shape (K, N).

    Offers 16 x 16 (or the largest of 8, 4 dividing every extent) tiles of A
    and B for ``__local`` staging.

    Neither operand is a weight: a GEMM call, as BLAS sees it, receives both
    operands anew, so a tuning job charges the conversion of each (the
    packing a BLAS does inside the call). Where ``B`` is a layer's weights,
    say so with ``boundary={"B": "constant"}``.
    """
    tile = next((t for t in (16, 8, 4) if M % t == 0 and N % t == 0 and K % t == 0), None)
    tiles = {"A": (tile, tile), "B": (tile, tile)} if tile else None
    return Workload.define(
        "matmul",
        "C[i, j] += A[i, k] * B[k, j]",
        {"i": M, "j": N, "k": K},
        {"A": (M, K), "B": (K, N)},
        dtype,
        params={"M": M, "N": N, "K": K},
        local_tiles=tiles,
    )


@register(
    example={
        "batch": 1,
        "in_channels": 32,
        "height": 28,
        "width": 28,
        "filters": 32,
        "kernel": 3,
        "stride": 1,
        "padding": 1,
    }
)
def conv2d(
    batch: int,
    in_channels: int,
    height: int,
    width: int,
    filters: int,
    kernel: int,
    stride: int = 1,
    padding: int = 0,
    dtype: str = "float32",
) -> Workload:
    """2-D convolution on NCHW input ``X`` and OIHW weights ``W``, zero padding.

    ``W`` is a weight (a model parameter, see :class:`~laytune.ops.Workload`)."""
    oh = (height + 2 * padding - kernel) // stride + 1
    ow = (width + 2 * padding - kernel) // stride + 1
    if kernel <= 0 or stride <= 0 or padding < 0 or oh <= 0 or ow <= 0:
        raise StatementError(
            f"conv2d: kernel {kernel}, stride {stride}, padding {padding} on {height}x{width}"
        )
    x_h = _offset("oh", stride, "kh", padding)
    x_w = _offset("ow", stride, "kw", padding)
    return Workload.define(
        "conv2d",
        f"Y[n, f, oh, ow] += X[n, c, {x_h}, {x_w}] * W[f, c, kh, kw]",
        {
            "n": batch,
            "f": filters,
            "oh": oh,
            "ow": ow,
            "c": in_channels,
            "kh": kernel,
            "kw": kernel,
        },
        {"X": (batch, in_channels, height, width), "W": (filters, in_channels, kernel, kernel)},
        dtype,
        params={
            "batch": batch,
            "in_channels": in_channels,
            "height": height,
            "width": width,
            "filters": filters,
            "kernel": kernel,
            "stride": stride,
            "padding": padding,
        },
        weights=("W",),
    )
