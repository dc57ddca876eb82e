"""A 3 x 3, stride-1 convolution as Winograd's F(2 x 2, 3 x 3): three statements.

The direct convolution takes 36 products for each 2 x 2 block of outputs (a
*tile*) and input channel; Winograd's minimal filtering takes 16, from the 4
x 4 input patch around the tile, in three steps that are each a statement of
laytune's language (so each is tuned, laid out and planned like any other):

- the input transform, ``V[x, n, th, tw, c] += T[x, a, b] * X[n, c, 2 th +
  a - pt, 2 tw + b - pl]``: each patch times ``Bt`` on both sides, its 16
  values ``x``; ``T[x, a, b] = Bt[x // 4, a] * Bt[x % 4, b]`` (a read
  outside ``X`` is zero: the convolution's padding);
- 16 independent matmuls, ``M[x, n, th, tw, f] += V[x, n, th, tw, c] * U[x,
  c, f]``, ``U`` the filters transformed once at import (``G w Gt``);
- the output transform, ``Y[n, f, oh, ow] += A[oh % 2, ow % 2, x] * M[x, n,
  oh // 2, ow // 2, f]``, ``A[i, j, x] = At[i, x // 4] * At[j, x % 4]``: the
  bias, ReLU or residual add after it fold into it as into any convolution.

By hand (``bench.hand_winograd``), the three kernels ran ResNet-18's 3 x 3
convolutions 1.17-1.48x faster than ONNX Runtime's direct ones on 2 Zen 5
cores, faster than a direct convolution at the peak; the results differ from
the direct convolution's by float32 rounding (within 1e-6 relative there).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from laytune.ops import Workload

__all__ = ["WinogradConv", "winograd_conv", "winograd_fits", "winograd_steps"]

#: F(2 x 2, 3 x 3)'s input transform Bt, filter transform G, output transform At.
_BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float64)
_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], dtype=np.float64)
_AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.float64)


@dataclass(frozen=True)
class WinogradConv:
    """The three workloads of one convolution and the constants they read:
    ``input_table`` (``T``), ``filters`` (``U``), ``output_table`` (``A``)."""

    transform_in: Workload
    matmuls: Workload
    transform_out: Workload
    input_table: np.ndarray
    filters: np.ndarray
    output_table: np.ndarray


def winograd_fits(
    kernel: tuple[int, int], strides: tuple[int, int], dilations: tuple[int, int], group: int
) -> bool:
    """Whether a convolution of these attributes is one F(2 x 2, 3 x 3) computes."""
    return kernel == (3, 3) and strides == (1, 1) and dilations == (1, 1) and group == 1


def winograd_conv(
    x_shape: tuple[int, int, int, int],
    weights: np.ndarray,
    pads: tuple[int, int, int, int],
) -> WinogradConv:
    """The Winograd form of the 3 x 3 stride-1 convolution of NCHW input of
    ``x_shape`` by OIHW ``weights`` with ``pads`` (top, left, bottom, right)."""
    n, c, h, w = x_shape
    f = weights.shape[0]
    pt, pl, pb, pr = pads
    oh, ow = h + pt + pb - 2, w + pl + pr - 2
    th, tw = -(-oh // 2), -(-ow // 2)
    params = {"x": x_shape, "filters": f, "pads": pads}
    transform_in = Workload.define(
        "winograd_input",
        f"V[x, n, th, tw, c] += T[x, a, b] * X[n, c, th * 2 + a - {pt}, tw * 2 + b - {pl}]",
        {"x": 16, "n": n, "th": th, "tw": tw, "c": c, "a": 4, "b": 4},
        {"T": (16, 4, 4), "X": x_shape},
        params=params,
        weights=("T",),
    )
    matmuls = Workload.define(
        "winograd_matmuls",
        "M[x, n, th, tw, f] += V[x, n, th, tw, c] * U[x, c, f]",
        {"x": 16, "n": n, "th": th, "tw": tw, "f": f, "c": c},
        {"V": (16, n, th, tw, c), "U": (16, c, f)},
        params=params,
        weights=("U",),
    )
    transform_out = Workload.define(
        "winograd_output",
        "Y[n, f, oh, ow] += A[oh % 2, ow % 2, x] * M[x, n, oh // 2, ow // 2, f]",
        {"n": n, "f": f, "oh": oh, "ow": ow, "x": 16},
        {"A": (2, 2, 16), "M": (16, n, th, tw, f)},
        params=params,
        weights=("A",),
    )
    u = np.einsum("ia,fcab,jb->ijcf", _G, weights.astype(np.float64), _G).reshape(16, c, f)
    return WinogradConv(
        transform_in,
        matmuls,
        transform_out,
        np.einsum("ia,jb->ijab", _BT, _BT).reshape(16, 4, 4).astype(np.float32),
        u.astype(np.float32),
        np.einsum("ip,jq->ijpq", _AT, _AT).reshape(2, 2, 16).astype(np.float32),
    )


def winograd_steps(out: str) -> tuple[str, str, str]:
    """The operators the convolution named ``out`` becomes: the input
    transform, the matmuls, the output transform (named ``out`` itself, so
    that what reads the convolution reads it)."""
    return f"{out}.V", f"{out}.M", out
