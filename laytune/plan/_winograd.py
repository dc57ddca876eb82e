"""A 3 x 3, stride-1 convolution as Winograd's F(m x m, 3 x 3): three statements.

The direct convolution takes 9 m^2 products for each m x m block of outputs
(a *tile*) and input channel; Winograd's minimal filtering takes (m + 2)^2,
from the (m + 2) x (m + 2) input patch around the tile, in three steps that
are each a statement of laytune's language (so each is tuned, laid out and
planned like any other); with ``p = m + 2`` and ``P = p * p``:

- the input transform, ``V[x, n, th, tw, c] += T[x, a, b] * X[n, c, m th +
  a - pt, m tw + b - pl]``: each patch times ``Bt`` on both sides, its P
  values ``x``; ``T[x, a, b] = Bt[x // p, a] * Bt[x % p, b]`` (a read
  outside ``X`` is zero: the convolution's padding);
- P independent matmuls, ``M[x, n, th, tw, f] += V[x, n, th, tw, c] * U[x,
  c, f]``, ``U`` the filters transformed once at import (``G w Gt``);
- the output transform, ``Y[n, f, oh, ow] += A[oh % m, ow % m, x] * M[x, n,
  oh // m, ow // m, f]``, ``A[i, j, x] = At[i, x // p] * At[j, x % p]``: the
  bias, ReLU or residual add after it fold into it as into any convolution.

``T`` and ``A`` are the statements' tables (``Workload.tables``): the
generator writes their entries into the kernels, so that the transforms'
products by 0 vanish and those by 1 or -1 are additions.

The matrices are derived, not written down (:func:`transforms`): ``At`` and
``G`` from the Cook-Toom points 0, 1, -1, 2, -2, ... and infinity, ``Bt``
solved from the identity that makes the three steps a correlation. F(2 x
2, 3 x 3) takes 2.25 times fewer products than the direct convolution, F(4
x 4, 3 x 3) 4 times, with larger transforms, filters (P / 9 of the direct
ones) and rounding (its points reach 2: within 1e-5 relative in float32).

By hand (``bench.hand_winograd``), F(2 x 2)'s three kernels ran ResNet-18's
3 x 3 convolutions 1.17-1.48x faster than ONNX Runtime's direct ones on 2
Zen 5 cores, faster than a direct convolution at the peak.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from laytune.exceptions import ConfigError
from laytune.ops import Workload

__all__ = [
    "WinogradConv",
    "transforms",
    "winograd_conv",
    "winograd_fits",
    "winograd_steps",
]


@functools.lru_cache(maxsize=None, typed=True)  # F(2.0, 3) is refused, not F(2, 3)
def transforms(tile: int, kernel: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(``Bt``, ``G``, ``At``) of F(tile, kernel), float64, exact:
    ``At @ ((G @ g) * (Bt @ d))`` is the correlation of ``d`` (tile +
    kernel - 1 values) with ``g`` (kernel). ``At`` evaluates at the points
    0, 1, -1, 2, -2, 1/2, -1/2, ... and infinity, ``G`` interpolates there
    (Lagrange's weights), and ``Bt`` solves the identity column by column
    (an overdetermined, consistent system), its entries snapped to the
    small fractions they are."""
    p = tile + kernel - 1
    candidates = [0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, 1 / 3, -1 / 3]
    if not (isinstance(tile, int) and tile >= 1 and 2 <= p <= len(candidates) + 1):
        raise ConfigError(
            f"F({tile!r}, {kernel!r}) is not a filter laytune derives: it takes a tile of 1 to "
            f"{len(candidates) + 2 - kernel} outputs (tile + kernel - 2 of the points 0, 1, -1, "
            "2, -2, 1/2, -1/2, 3, -3, 1/3, -1/3)"
        )
    points = candidates[: p - 1]
    at = np.zeros((tile, p))
    g = np.zeros((p, kernel))
    for j, x in enumerate(points):
        weight = np.prod([x - y for y in points if y != x])
        at[:, j] = [x**i for i in range(tile)]
        g[j] = [x**k / weight for k in range(kernel)]
    at[tile - 1, p - 1] = g[p - 1, kernel - 1] = 1.0  # the point at infinity
    # sum_l At[i, l] G[l, k] Bt[l, j] = [j == i + k], for each column j of Bt
    system = np.array([at[i] * g[:, k] for i in range(tile) for k in range(kernel)])
    bt = np.zeros((p, p))
    for j in range(p):
        want = np.array([float(j == i + k) for i in range(tile) for k in range(kernel)])
        solved = np.linalg.lstsq(system, want, rcond=None)[0]
        bt[:, j] = [float(Fraction(v).limit_denominator(1024)) for v in solved]
        if not np.allclose(system @ bt[:, j], want, rtol=0, atol=1e-12):
            raise ConfigError(f"F({tile}, {kernel}): its input transform is not exact in float64")
    return bt, g, at


@dataclass(frozen=True)
class WinogradConv:
    """The three workloads of one convolution and the filters the matmuls
    read (``U``); the transforms' tables are theirs (:attr:`input_table`,
    :attr:`output_table`)."""

    transform_in: Workload
    matmuls: Workload
    transform_out: Workload
    filters: np.ndarray

    @property
    def input_table(self) -> np.ndarray:
        """``T``, the input transform's table, in float32."""
        return self.transform_in.table_arrays["T"].astype(np.float32)

    @property
    def output_table(self) -> np.ndarray:
        """``A``, the output transform's table, in float32."""
        return self.transform_out.table_arrays["A"].astype(np.float32)


def winograd_fits(
    kernel: tuple[int, int], strides: tuple[int, int], dilations: tuple[int, int], group: int
) -> bool:
    """Whether a convolution of these attributes is one F(m x m, 3 x 3) computes."""
    return kernel == (3, 3) and strides == (1, 1) and dilations == (1, 1) and group == 1


def winograd_conv(
    x_shape: tuple[int, int, int, int],
    weights: np.ndarray,
    pads: tuple[int, int, int, int],
    tile: int = 2,
) -> WinogradConv:
    """The F(``tile`` x ``tile``, 3 x 3) form of the 3 x 3 stride-1
    convolution of NCHW input of ``x_shape`` by OIHW ``weights`` with
    ``pads`` (top, left, bottom, right).

    Models import F(2 x 2, 3 x 3) (``from_onnx(winograd=...)``). F(4 x 4,
    3 x 3) computes too, but did not pay on 2 Zen 5 cores: its matmuls ran
    ResNet-18's second stage (128 channels of 28 x 28) in 0.20 ms against
    F(2)'s 0.21-0.24 (both tuned, 32 trials), while its input transform, 484
    multiply-adds per patch of 6 x 6 where F(2) adds 64 of 4 x 4, took 0.07
    ms against 0.02 (derived starts)."""
    n, c, h, w = x_shape
    f = weights.shape[0]
    pt, pl, pb, pr = pads
    m, p = tile, tile + 2
    oh, ow = h + pt + pb - 2, w + pl + pr - 2
    th, tw = -(-oh // m), -(-ow // m)
    bt, g, at = transforms(m)
    params = {"x": x_shape, "filters": f, "pads": pads, "tile": m}
    transform_in = Workload.define(
        "winograd_input",
        f"V[x, n, th, tw, c] += T[x, a, b] * X[n, c, th * {m} + a - {pt}, tw * {m} + b - {pl}]",
        {"x": p * p, "n": n, "th": th, "tw": tw, "c": c, "a": p, "b": p},
        {"X": x_shape},
        params=params,
        tables={"T": np.einsum("ia,jb->ijab", bt, bt).reshape(p * p, p, p)},
    )
    matmuls = Workload.define(
        "winograd_matmuls",
        "M[x, n, th, tw, f] += V[x, n, th, tw, c] * U[x, c, f]",
        {"x": p * p, "n": n, "th": th, "tw": tw, "f": f, "c": c},
        {"V": (p * p, n, th, tw, c), "U": (p * p, c, f)},
        params=params,
        weights=("U",),
    )
    transform_out = Workload.define(
        "winograd_output",
        f"Y[n, f, oh, ow] += A[oh % {m}, ow % {m}, x] * M[x, n, oh // {m}, ow // {m}, f]",
        {"n": n, "f": f, "oh": oh, "ow": ow, "x": p * p},
        {"M": (p * p, n, th, tw, f)},
        params=params,
        tables={"A": np.einsum("ip,jq->ijpq", at, at).reshape(m, m, p * p)},
    )
    u = np.einsum("ia,fcab,jb->ijcf", g, weights.astype(np.float64), g).reshape(p * p, c, f)
    return WinogradConv(transform_in, matmuls, transform_out, u.astype(np.float32))


def winograd_steps(out: str) -> tuple[str, str, str]:
    """The operators the convolution named ``out`` becomes: the input
    transform, the matmuls, the output transform (named ``out`` itself, so
    that what reads the convolution reads it)."""
    return f"{out}.V", f"{out}.M", out
