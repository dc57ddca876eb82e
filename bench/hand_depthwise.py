"""Hand-written depthwise 3 x 3 convolutions beside ONNX Runtime: what makes one fast.

    python -m bench.hand_depthwise [--channels 64] [--size 56] [--repeats N]

The statement is the one ``bench.user_ops`` tunes,
``Y[n, c, oh, ow] += X[n, c, oh + kh, ow + kw] * W[c, kh, kw]`` over X of
``1 x C x S x S`` (no padding: the output is ``S - 2`` square), every buffer
in its logical (NCHW) layout, so no kernel packs or unpacks anything. Kernels:

- ``scalar``: one output per work-item, NDRange dimension 0 along ``ow`` (the
  CPU runtime vectorises across the work-items of dimension 0);
- ``rows R``: one column of ``R`` output rows per work-item, dimension 0
  along ``ow``: each X row read serves up to three output rows;
- ``vec N x R``: a work-item holds ``R`` rows of ``N`` outputs as floatN
  accumulators (``vec_type_hint``), reading X as unaligned ``vloadN`` runs
  (``ow0 + kw``), the last run of a row overlapping the one before it where
  ``N`` does not divide the row (it recomputes a few outputs, never reads
  outside X).

Each kernel's median wall time (enqueue to finish, buffers on the device) is
printed beside ONNX Runtime's Conv with ``group = C`` on 2 threads, measured
in interleaved bursts of 10 runs in the same run, of which the last 5 count
(the CPU runtime's worker threads spin a while after a kernel and slow the
next implementation's first runs); results are checked against numpy.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np

from bench._hand import PEER, bursts, context_and_queue, ort_run, table


def _scalar() -> str:
    return """
__kernel void dw(__global const float* restrict X, __global const float* restrict W,
                 __global float* restrict Y, const int S, const int O) {
    const int ow = get_global_id(0), oh = get_global_id(1), c = get_global_id(2);
    const __global float* x = X + (c * S + oh) * S + ow;
    const __global float* w = W + c * 9;
    float acc = 0.0f;
    for (int kh = 0; kh < 3; ++kh)
        for (int kw = 0; kw < 3; ++kw)
            acc = fma(x[kh * S + kw], w[kh * 3 + kw], acc);
    Y[(c * O + oh) * O + ow] = acc;
}"""


def _rows(r: int) -> str:
    accs = "".join(f"float a{i} = 0.0f; " for i in range(r))
    body = []
    for row in range(r + 2):  # each X row feeds the outputs it lies under
        body.append(
            f"{{ const float x0 = x[{row} * S], x1 = x[{row} * S + 1], x2 = x[{row} * S + 2];"
        )
        for i in range(r):
            kh = row - i
            if 0 <= kh < 3:
                body.append(
                    f"a{i} = fma(x0, w{kh}0, a{i}); a{i} = fma(x1, w{kh}1, a{i}); "
                    f"a{i} = fma(x2, w{kh}2, a{i});"
                )
        body.append("}")
    stores = "".join(
        f"if (oh0 + {i} < O) Y[(c * O + oh0 + {i}) * O + ow] = a{i}; " for i in range(r)
    )
    weights = "".join(
        f"const float w{i}{j} = W[c * 9 + {i * 3 + j}]; " for i in range(3) for j in range(3)
    )
    return f"""
__kernel void dw(__global const float* restrict X, __global const float* restrict W,
                 __global float* restrict Y, const int S, const int O) {{
    const int ow = get_global_id(0), oh0 = get_global_id(1) * {r}, c = get_global_id(2);
    if (oh0 + {r} > O) return;
    const __global float* x = X + (c * S + oh0) * S + ow;
    {weights}
    {accs}
    {" ".join(body)}
    {stores}
}}"""


def _vec(n: int, r: int) -> str:
    v = f"float{n}"
    accs = "".join(f"{v} a{i} = 0.0f; " for i in range(r))
    body = []
    for row in range(r + 2):
        loads = " ".join(f"const {v} x{kw} = vload{n}(0, x + {row} * S + {kw});" for kw in range(3))
        body.append(f"{{ {loads}")
        for i in range(r):
            kh = row - i
            if 0 <= kh < 3:
                body.append(
                    f"a{i} = fma(x0, ({v})(w{kh}0), a{i}); a{i} = fma(x1, ({v})(w{kh}1), a{i}); "
                    f"a{i} = fma(x2, ({v})(w{kh}2), a{i});"
                )
        body.append("}")
    stores = "".join(f"vstore{n}(a{i}, 0, Y + (c * O + oh0 + {i}) * O + ow0); " for i in range(r))
    weights = "".join(
        f"const float w{i}{j} = W[c * 9 + {i * 3 + j}]; " for i in range(3) for j in range(3)
    )
    return f"""
__kernel __attribute__((vec_type_hint({v}))) void dw(__global const float* restrict X,
        __global const float* restrict W, __global float* restrict Y, const int S, const int O) {{
    const int runs = (O + {n - 1}) / {n};
    const int ow0 = min((int)get_global_id(0) * {n}, O - {n});  /* the last run overlaps */
    const int oh0 = min((int)get_global_id(1) * {r}, O - {r});
    const int c = get_global_id(2);
    const __global float* x = X + (c * S + oh0) * S + ow0;
    {weights}
    {accs}
    {" ".join(body)}
    {stores}
}}"""


def _ort(x: np.ndarray, w: np.ndarray) -> Callable[[], object]:
    from onnx import helper, numpy_helper

    c = x.shape[1]
    o = x.shape[2] - 2
    node = helper.make_node("Conv", ["X", "W"], ["Y"], group=c, kernel_shape=[3, 3])
    weights = numpy_helper.from_array(w.reshape(c, 1, 3, 3), "W")
    return ort_run([node], {"X": x}, ("Y", (1, c, o, o)), [weights])


def main(argv: list[str] | None = None) -> None:
    import pyopencl as cl

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--channels", type=int, default=64)
    parser.add_argument("--size", type=int, default=56)
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args(argv)
    c, s = args.channels, args.size
    o = s - 2
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, c, s, s)).astype(np.float32)
    w = rng.standard_normal((c, 3, 3)).astype(np.float32)
    windows = np.lib.stride_tricks.sliding_window_view(x[0], (3, 3), axis=(1, 2))
    expected = np.einsum("chwij,cij->chw", windows, w)[None]

    ctx, queue = context_and_queue()
    device = ctx.devices[0]
    print(f"device: {device.name} ({device.platform.name})")
    mf = cl.mem_flags
    xb = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
    wb = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=w)
    yb = cl.Buffer(ctx, mf.WRITE_ONLY, expected.nbytes)

    kernels: dict[str, tuple[str, tuple[int, int, int]]] = {"scalar": (_scalar(), (o, o, c))}
    for r in (2, 4, 6):
        if o % r == 0:
            kernels[f"rows {r}"] = (_rows(r), (o, o // r, c))
    for n in (4, 8, 16):
        for r in (1, 2, 3, 6):
            if o >= n and o % r == 0 and r * 1 <= 6:
                kernels[f"vec {n} x {r}"] = (_vec(n, r), (-(-o // n), o // r, c))
    runs: dict[str, Callable[[], object]] = {}
    for label, (source, size) in kernels.items():
        kernel = cl.Program(ctx, source).build(options="-cl-fast-relaxed-math").dw

        def launch(kernel=kernel, size=size) -> None:
            kernel(queue, size, None, xb, wb, yb, np.int32(s), np.int32(o))
            queue.finish()

        launch()
        got = np.empty_like(expected)
        cl.enqueue_copy(queue, got, yb)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4, err_msg=label)
        runs[label] = launch
    ort = _ort(x, w)
    np.testing.assert_allclose(ort(), expected, rtol=1e-4, atol=1e-4)
    runs[PEER] = ort
    times = bursts(runs, args.repeats // 10)
    print(
        f"depthwise 3 x 3, {c} x {s} x {s} -> {o} x {o}; median wall of the last 5 runs "
        f"of each burst of 10, {args.repeats // 10} bursts"
    )
    print("\n".join(table(times)))


if __name__ == "__main__":
    main()
