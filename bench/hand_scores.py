"""Hand-written attention scores ``S = Q K^T`` beside ONNX Runtime: what makes one fast.

    python -m bench.hand_scores [--heads 12] [--seq 128] [--dim 64] [--repeats N]

The statement is the one ``bench.user_ops`` tunes,
``S[b, i, j] += Q[b, i, k] * K[b, j, k]``: both operands hold the reduce axis
``k`` contiguous, so the register-blocked outer product (vectors along ``j``)
cannot read ``K`` as it comes. Every buffer is in its logical layout at the
boundary, so each kernel's wall time is end to end. Kernels:

- ``pack + outer product``: what laytune's search finds today: a kernel
  transposes ``K`` into ``K^T[b, k, j]`` (16 x 16 tiles through the
  ``shuffle2`` network), then the 8 x 2L outer product (8 rows of ``i`` by
  32 columns of ``j`` per work-item, ``float16`` accumulators) reads it in
  vectors: two launches per call;
- ``outer product on packed K``: the second launch alone (``K^T`` given),
  the kernel's own cost;
- ``panel (shuffle)``: one launch; a work-item takes all rows of ``i`` for
  32 columns of ``j``, first transposing its ``32 x dim`` slab of ``K`` into
  a private panel (16 x 16 blocks through the ``shuffle2`` network), then
  runs the 8 x 2L outer product over the panel for every block of 8 rows;
- ``panel (lanes)``: the same, the panel built lane by lane
  (``(float16)(K[j0, k], K[j0 + 1, k], ...)``).

Each kernel's median wall time (enqueue to finish) is printed beside ONNX
Runtime's ``Transpose`` + ``MatMul`` on 2 threads, in interleaved bursts of
10 runs, each after 0.3 s of idle, of which the last 5 count (the runtimes'
threads spin a while after a run and slow whatever runs next); results are
checked against numpy.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np

from bench._hand import PEER, bursts, context_and_queue, ort_run, table
from laytune.codegen._shuffle import transpose_lines

_ROWS = 8  # rows of i per register block
_HALVES = 2  # float16 vectors along j per row: 32 columns


def _pack(dim: int, seq: int) -> str:
    """K[b, j, k] -> KT[b, k, j], one 16 x 16 tile per work-item."""
    rows = [f"r{r}" for r in range(16)]
    body = [f"const float16 r{r} = vload16(0, src + (j0 + {r}) * {dim} + k0);" for r in range(16)]
    lines, cols = transpose_lines(rows, "float", "t")
    body += lines
    body += [f"vstore16({c}, 0, dst + (k0 + {a}) * {seq} + j0);" for a, c in enumerate(cols)]
    return f"""
__kernel void pack(__global const float* restrict K, __global float* restrict KT) {{
    const int j0 = get_global_id(0) * 16, k0 = get_global_id(1) * 16, b = get_global_id(2);
    const __global float* src = K + b * {seq * dim};
    __global float* dst = KT + b * {seq * dim};
    {" ".join(body)}
}}"""


def _block(seq: int, dim: int, b_vector: Callable[[int], str], q_row: str) -> list[str]:
    """The 8 x 2L outer product over k, stored at ``Sb + i0 * seq``."""
    out = [f"float16 c{r}_{h} = 0.0f;" for r in range(_ROWS) for h in range(_HALVES)]
    out.append(f"for (int k = 0; k < {dim}; k++) {{")
    out += [f"  const float16 b{h} = {b_vector(h)};" for h in range(_HALVES)]
    for r in range(_ROWS):
        out.append(f"  const float a{r} = {q_row}[{r * dim} + k];")
        out += [f"  c{r}_{h} = fma((float16)a{r}, b{h}, c{r}_{h});" for h in range(_HALVES)]
    out.append("}")
    out += [
        f"vstore16(c{r}_{h}, 0, Sb + {r * seq + 16 * h});"
        for r in range(_ROWS)
        for h in range(_HALVES)
    ]
    return out


def _outer(seq: int, dim: int) -> str:
    body = _block(seq, dim, lambda h: f"vload16(0, P + k * {seq} + {16 * h})", "Qb")
    return f"""
__kernel void outer(__global const float* restrict Q, __global const float* restrict KT,
                    __global float* restrict S) {{
    const int js = get_global_id(0), i0 = get_global_id(1) * {_ROWS}, b = get_global_id(2);
    const __global float* P = KT + b * {dim * seq} + js * {16 * _HALVES};
    const __global float* Qb = Q + (b * {seq} + i0) * {dim};
    __global float* Sb = S + (b * {seq} + i0) * {seq} + js * {16 * _HALVES};
    {" ".join(body)}
}}"""


def _panel(seq: int, dim: int, style: str) -> str:
    fill: list[str] = []
    for h in range(_HALVES):
        if style == "lanes":
            lanes = ", ".join(f"Kb[{(16 * h + r) * dim} + k]" for r in range(16))
            fill.append(
                f"for (int k = 0; k < {dim}; k++) P[k * {_HALVES} + {h}] = (float16)({lanes});"
            )
            continue
        for kc in range(dim // 16):
            rows = [f"r{h}_{kc}_{r}" for r in range(16)]
            fill += [
                f"const float16 {rows[r]} = vload16(0, Kb + {(16 * h + r) * dim + 16 * kc});"
                for r in range(16)
            ]
            lines, cols = transpose_lines(rows, "float", f"t{h}_{kc}_")
            fill += lines
            fill += [f"P[{(16 * kc + a) * _HALVES + h}] = {c};" for a, c in enumerate(cols)]
    body = _block(seq, dim, lambda h: f"P[k * {_HALVES} + {h}]", "Qi")
    return f"""
__kernel void panel(__global const float* restrict Q, __global const float* restrict K,
                    __global float* restrict S) {{
    const int js = get_global_id(0), b = get_global_id(1);
    const __global float* Kb = K + (b * {seq} + js * {16 * _HALVES}) * {dim};
    float16 P[{dim * _HALVES}];
    {" ".join(fill)}
    for (int i0 = 0; i0 < {seq}; i0 += {_ROWS}) {{
        const __global float* Qi = Q + (b * {seq} + i0) * {dim};
        __global float* Sb = S + (b * {seq} + i0) * {seq} + js * {16 * _HALVES};
        {" ".join(body)}
    }}
}}"""


def _ort(q: np.ndarray, k: np.ndarray) -> Callable[[], object]:
    from onnx import helper

    nodes = [
        helper.make_node("Transpose", ["K"], ["Kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["Q", "Kt"], ["S"]),
    ]
    b, s, _ = q.shape
    return ort_run(nodes, {"Q": q, "K": k}, ("S", (b, s, s)))


def laytune_kernels(
    q: np.ndarray, k: np.ndarray
) -> tuple[dict[str, Callable[[], None]], Callable[[], np.ndarray]]:
    """The hand-written kernels on the default device: per label a call that
    runs it end to end (``q`` and ``k`` already on the device, ``S`` left
    there), and a call that reads ``S`` back."""
    import pyopencl as cl

    heads, seq, dim = q.shape
    if seq % 32 or dim % 16:
        raise ValueError(f"the sequence must be a multiple of 32 and the dim of 16, got {q.shape}")
    ctx, queue = context_and_queue()
    mf = cl.mem_flags
    qb = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=q)
    kb = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=k)
    ktb = cl.Buffer(ctx, mf.READ_WRITE, k.nbytes)
    sb = cl.Buffer(ctx, mf.WRITE_ONLY, heads * seq * seq * 4)
    build = lambda src: cl.Program(ctx, src).build()  # noqa: E731
    pack = build(_pack(dim, seq)).pack
    outer = build(_outer(seq, dim)).outer
    strips = seq // (16 * _HALVES)
    tiles, blocks = (seq // 16, dim // 16, heads), (strips, seq // _ROWS, heads)
    pack(queue, tiles, None, kb, ktb)
    queue.finish()

    def result() -> np.ndarray:
        """``S`` as the last run left it; ``S`` is then set to NaN, so the next
        run's result is all its own."""
        out = np.empty((heads, seq, seq), np.float32)
        cl.enqueue_copy(queue, out, sb)
        cl.enqueue_fill_buffer(queue, sb, np.float32(np.nan), 0, out.nbytes)
        queue.finish()
        return out

    def packed() -> None:
        pack(queue, tiles, None, kb, ktb)
        outer(queue, blocks, None, qb, ktb, sb)
        queue.finish()

    def outer_only() -> None:
        outer(queue, blocks, None, qb, ktb, sb)
        queue.finish()

    runs = {"pack + outer product (2 launches)": packed, "outer product on packed K": outer_only}
    for style in ("shuffle", "lanes"):
        kernel = build(_panel(seq, dim, style)).panel

        def one(kernel=kernel) -> None:
            kernel(queue, (strips, heads), None, qb, kb, sb)
            queue.finish()

        runs[f"panel ({style})"] = one
    return runs, result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args(argv)
    heads, seq, dim = args.heads, args.seq, args.dim
    rng = np.random.default_rng(0)
    q = rng.standard_normal((heads, seq, dim)).astype(np.float32)
    k = rng.standard_normal((heads, seq, dim)).astype(np.float32)
    expected = q @ k.transpose(0, 2, 1)
    from laytune.runners import default_device

    print(f"device: {default_device().name}")
    kernels, result = laytune_kernels(q, k)
    runs: dict[str, Callable[[], object]] = dict(kernels)
    for label, run in kernels.items():
        run()
        got = result()
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-3, err_msg=label)
    ort = _ort(q, k)
    np.testing.assert_allclose(ort(), expected, rtol=1e-4, atol=1e-3)
    runs[PEER] = ort
    times = bursts(runs, args.repeats // 10, idle=0.3)
    print(
        f"scores Q K^T, {heads} x {seq} x {seq} x {dim}; median wall of the last 5 runs "
        f"of each burst of 10, {args.repeats // 10} bursts"
    )
    print("\n".join(table(times, 2 * heads * seq * seq * dim)))


if __name__ == "__main__":
    main()
