"""Hand-written Winograd 3 x 3 convolutions beside ONNX Runtime and a direct convolution at peak.

    python -m bench.hand_winograd [--shapes 64x56,128x28,256x14,512x7] [--repeats N]
                                  [--clock-ghz F] [--fma-units N] [...]

The statement is ResNet-18's 3 x 3, stride-1, padding-1 convolution with its
bias and ReLU, ``Y = max(conv(X, W) + B, 0)``, C -> C channels on S x S, batch
one, activations in NCHW16c (``[c // 16][h][w][c % 16]``, the layout laytune's
plans of ResNet-18 give them). Winograd's F(2 x 2, 3 x 3) computes each 2 x 2
block of outputs (a tile) from the 4 x 4 input patch around it with 16
products per input channel where the direct convolution takes 36, as three
kernels:

- ``in``: each work-item takes one tile and 16 channels (float16 vectors),
  transforms its 4 x 4 patch (``Bt d B``: additions and subtractions only)
  and stores the 16 transformed values to ``V[xi][tile][c]``;
- ``gemm``: 16 independent matmuls ``M[xi] = V[xi] U[xi]`` (tiles x C times
  C x C), ``U = G w Gt`` the filters transformed once, as a packed weight
  (``[xi][k // 32][c][k % 32]``); a work-item holds ``R`` tiles by 32 output
  channels as float16 accumulators, like laytune's convolution kernels;
- ``out``: each work-item transforms one tile's 16 values of 16 channels back
  (``At m A``), adds the bias, applies the ReLU and stores the 2 x 2 outputs.

Each row is the median wall time (enqueue to finish, buffers on the device) of
its launches, in interleaved bursts of :data:`BURST` runs, each after
:data:`IDLE_S` of idle, of which the last half count,
beside ONNX Runtime's Conv + Relu (2 threads, NCHW, weights as initializers),
and the time a direct convolution would take at the device's peak
(``bench._peak``: ``2 * C * C * 9 * S * S`` flops). Every result is checked
against a float64 numpy convolution.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np

from bench._convolution import reference_conv
from bench._hand import PEER, bursts, context_and_queue, ort_run, table
from bench._peak import add_peak_arguments, peak_from_arguments

#: Idle before each burst: ONNX Runtime's threads spin for a while after a
#: run, and the kernels of a burst started in that while ran at half speed
#: (0.65 ms against 0.33 alone for 64 x 56 x 56).
IDLE_S = 0.3
#: Runs per burst, of which the last half count: after the idle the cores
#: take a few milliseconds to come up to speed (bursts of 10 timed both
#: sides 20-30 % slow).
BURST = 40

#: Winograd F(2 x 2, 3 x 3): the input transform Bt, the filter transform G.
BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float64)
G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], dtype=np.float64)

SOURCE = r"""
__kernel __attribute__((vec_type_hint(float16)))
void wino_in(__global const float* restrict X, __global float* restrict V) {
    const int t = get_global_id(0), cb = get_global_id(1);
    const int th = t / TW, tw = t % TW;
    float16 d[4][4];
    #pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int y = 2 * th + i - 1;
        #pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int x = 2 * tw + j - 1;
            d[i][j] = (y >= 0 && y < S && x >= 0 && x < S)
                ? vload16(0, X + ((cb * S + y) * S + x) * 16) : (float16)0.0f;
        }
    }
    float16 s[4][4];
    #pragma unroll
    for (int j = 0; j < 4; ++j) {
        s[0][j] = d[0][j] - d[2][j];
        s[1][j] = d[1][j] + d[2][j];
        s[2][j] = d[2][j] - d[1][j];
        s[3][j] = d[1][j] - d[3][j];
    }
    __global float* v = V + t * C + cb * 16;
    #pragma unroll
    for (int i = 0; i < 4; ++i) {
        vstore16(s[i][0] - s[i][2], 0, v + (i * 4 + 0) * T * C);
        vstore16(s[i][1] + s[i][2], 0, v + (i * 4 + 1) * T * C);
        vstore16(s[i][2] - s[i][1], 0, v + (i * 4 + 2) * T * C);
        vstore16(s[i][1] - s[i][3], 0, v + (i * 4 + 3) * T * C);
    }
}

__kernel __attribute__((vec_type_hint(float16)))
void wino_gemm(__global const float* restrict V, __global const float* restrict U,
               __global float* restrict M) {
    const int t0 = get_global_id(0) * R, kb = get_global_id(1), xi = get_global_id(2);
    __global const float* v = V + (xi * T + t0) * C;
    __global const float* u = U + (xi * (C / 32) + kb) * C * 32;
    float16 a0[R], a1[R];
    #pragma unroll
    for (int r = 0; r < R; ++r) { a0[r] = 0.0f; a1[r] = 0.0f; }
    for (int c = 0; c < C; ++c) {
        const float16 w0 = vload16(0, u + c * 32), w1 = vload16(0, u + c * 32 + 16);
        #pragma unroll
        for (int r = 0; r < R; ++r) {
            const float x = (t0 + r < T) ? v[r * C + c] : 0.0f;
            a0[r] = fma((float16)x, w0, a0[r]);
            a1[r] = fma((float16)x, w1, a1[r]);
        }
    }
    #pragma unroll
    for (int r = 0; r < R; ++r) {
        if (t0 + r < T) {
            vstore16(a0[r], 0, M + (xi * T + t0 + r) * C + kb * 32);
            vstore16(a1[r], 0, M + (xi * T + t0 + r) * C + kb * 32 + 16);
        }
    }
}

__kernel __attribute__((vec_type_hint(float16)))
void wino_out(__global const float* restrict M, __global const float* restrict B,
              __global float* restrict Y) {
    const int t = get_global_id(0), kb = get_global_id(1);
    const int th = t / TW, tw = t % TW;
    float16 s0[4], s1[4];
    #pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float16 m0 = vload16(0, M + ((0 * 4 + j) * T + t) * C + kb * 16);
        const float16 m1 = vload16(0, M + ((1 * 4 + j) * T + t) * C + kb * 16);
        const float16 m2 = vload16(0, M + ((2 * 4 + j) * T + t) * C + kb * 16);
        const float16 m3 = vload16(0, M + ((3 * 4 + j) * T + t) * C + kb * 16);
        s0[j] = m0 + m1 + m2;
        s1[j] = m1 - m2 - m3;
    }
    const float16 b = vload16(0, B + kb * 16);
    const int y = 2 * th, x = 2 * tw;
    __global float* out = Y + ((kb * S + y) * S + x) * 16;
    vstore16(max(s0[0] + s0[1] + s0[2] + b, 0.0f), 0, out);
    if (x + 1 < S) vstore16(max(s0[1] - s0[2] - s0[3] + b, 0.0f), 0, out + 16);
    if (y + 1 < S) {
        vstore16(max(s1[0] + s1[1] + s1[2] + b, 0.0f), 0, out + S * 16);
        if (x + 1 < S) vstore16(max(s1[1] - s1[2] - s1[3] + b, 0.0f), 0, out + S * 16 + 16);
    }
}
"""


def transformed_filters(w: np.ndarray) -> np.ndarray:
    """``U = G w Gt`` per filter and channel, packed ``[xi][k // 32][c][k % 32]``
    (``xi`` the 16 positions of the 4 x 4 transform, row-major)."""
    k, c = w.shape[:2]
    u = np.einsum("ia,kcab,jb->ijkc", G, w.astype(np.float64), G).reshape(16, k // 32, 32, c)
    return np.ascontiguousarray(u.transpose(0, 1, 3, 2)).astype(np.float32)


def nchw16c(x: np.ndarray) -> np.ndarray:
    """``[c][h][w]`` as ``[c // 16][h][w][c % 16]``."""
    c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(c // 16, 16, h, w).transpose(0, 2, 3, 1))


def winograd_runs(
    ctx: object, queue: object, x: np.ndarray, w: np.ndarray, b: np.ndarray, rows: tuple[int, ...]
) -> dict[str, tuple[Callable[[], None], Callable[[], np.ndarray]]]:
    """Per tile block ``R`` in ``rows``: (run, result) of the three kernels."""
    import pyopencl as cl

    c, s = x.shape[0], x.shape[1]
    tiles_side = (s + 1) // 2
    tiles = tiles_side * tiles_side
    mf = cl.mem_flags
    xb = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=nchw16c(x))
    ub = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=transformed_filters(w))
    bb = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=b)
    vb = cl.Buffer(ctx, mf.READ_WRITE, 16 * tiles * c * 4)
    mb = cl.Buffer(ctx, mf.READ_WRITE, 16 * tiles * c * 4)
    yb = cl.Buffer(ctx, mf.READ_WRITE, c * s * s * 4)
    runs = {}
    for r in rows:
        options = f"-DS={s} -DC={c} -DT={tiles} -DTW={tiles_side} -DR={r}"
        program = cl.Program(ctx, SOURCE).build(options=options)
        launches = (
            (program.wino_in, (tiles, c // 16), (xb, vb)),
            (program.wino_gemm, (-(-tiles // r), c // 32, 16), (vb, ub, mb)),
            (program.wino_out, (tiles, c // 16), (mb, bb, yb)),
        )

        def run(launches=launches) -> None:
            for kernel, size, args in launches:
                kernel(queue, size, None, *args)
            queue.finish()

        def result() -> np.ndarray:
            y = np.empty((c // 16, s, s, 16), dtype=np.float32)
            cl.enqueue_copy(queue, y, yb)
            return y.transpose(0, 3, 1, 2).reshape(c, s, s)

        runs[f"Winograd F(2x2, 3x3), {r} tiles x 32 channels per work-item"] = (run, result)
    return runs


def _ort(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> Callable[[], object]:
    from onnx import helper, numpy_helper

    c, s = x.shape[0], x.shape[1]
    nodes = [
        helper.make_node("Conv", ["X", "W", "B"], ["Z"], kernel_shape=[3, 3], pads=[1] * 4),
        helper.make_node("Relu", ["Z"], ["Y"]),
    ]
    constants = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")]
    return ort_run(nodes, {"X": x[None]}, ("Y", (1, c, s, s)), constants)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--shapes",
        default="64x56,128x28,256x14,512x7",
        help="channels x size of each convolution (ResNet-18's 3 x 3 stride-1 ones)",
    )
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--rows", default="4,7,8", help="tiles per work-item of the matmuls")
    add_peak_arguments(parser)
    args = parser.parse_args(argv)
    rows = tuple(int(r) for r in args.rows.split(","))
    ctx, queue = context_and_queue()
    device = ctx.devices[0]
    peak = peak_from_arguments(device, args)
    print(f"device: {device.name} ({device.platform.name}); peak {peak.flops / 1e9:.0f} GFLOP/s")
    for shape in args.shapes.split(","):
        c, s = (int(v) for v in shape.split("x"))
        if c % 32:
            parser.error(f"--shapes: {c} channels is not a multiple of 32")
        rng = np.random.default_rng(0)
        x = rng.standard_normal((c, s, s)).astype(np.float32)
        w = (rng.standard_normal((c, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
        b = rng.standard_normal(c).astype(np.float32)
        expected = np.maximum(reference_conv(x[None], w, 1)[0] + b[:, None, None], 0)
        runs: dict[str, Callable[[], object]] = {}
        for label, (run, result) in winograd_runs(ctx, queue, x, w, b, rows).items():
            run()
            np.testing.assert_allclose(result(), expected, rtol=1e-4, atol=1e-4, err_msg=label)
            runs[label] = run
        ort = _ort(x, w, b)
        np.testing.assert_allclose(ort()[0], expected, rtol=1e-4, atol=1e-4)
        runs[PEER] = ort
        times = bursts(runs, max(1, args.repeats // BURST), idle=IDLE_S, length=BURST)
        flops = 2 * c * c * 9 * s * s
        print(
            f"\n{c} x {s} x {s} -> {c} channels, 3 x 3, bias and ReLU; median wall of the "
            f"last {BURST // 2} runs of each burst of {BURST}, {max(1, args.repeats // BURST)} "
            f"bursts; GFLOP/s counts "
            f"the direct convolution's {flops / 1e6:.0f} MFLOP"
        )
        print("\n".join(table(times, flops)))
        if peak.flops:
            print(f"| a direct convolution at peak | {flops / peak.flops * 1e3:.3f} | | |")


if __name__ == "__main__":
    main()
