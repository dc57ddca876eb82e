"""Hand-written float32 transposes against the device's copy: what makes one fast.

    python -m bench.hand_transpose [--sizes 1024,4096] [--repeats N] [--out FILE]

The kernels laytune generates for transposes (the conversions' register
tiles, and compute kernels with ``vector_transpose``) follow what this file
found by hand on the default device (``LAYTUNE_DEVICE`` picks another):

- ``lanes``: each work-item loads an ``n x n`` tile as ``n`` row vectors and
  builds each column vector lane by lane (``(float8)(r0.s3, r1.s3, ...)``),
  what the generator emitted before;
- ``shuffle``: the same tile transposed by ``log2(n)`` rounds of ``shuffle2``
  (:mod:`laytune.codegen._shuffle`, the network the generator emits now);
- ``shuffle+hint``: the same with ``vec_type_hint(floatN)``, so that the
  compiler keeps the vectors instead of vectorising across work-items.

Each kernel runs with tiles of 4, 8 and 16, NDRange dimension 0 along the
source's rows or columns, and a few work-groups; its best time is reported
beside the best of two float copies (float16 per work-item; float4 in
work-groups of 64) of the same bytes, timed in the same run. Results are
checked against numpy. The table is written to ``bench/results/hand_transpose.md``.
"""

from __future__ import annotations

import argparse
import itertools
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from bench import _report
from laytune.codegen._shuffle import transpose_lines
from laytune.runners import build_source, default_device

_LANES = "0123456789abcdef"
_GROUPS = (None, (8, 8), (16, 4), (4, 16))


def _tile_kernel(name: str, n: int, style: str, rows_on_dim0: bool) -> str:
    rows = [f"r{r}" for r in range(n)]
    body = [f"const float{n} r{r} = vload{n}(0, src + (i0 + {r}) * N + j0);" for r in range(n)]
    if style == "lanes":
        columns = []
        for k in range(n):
            lanes = ", ".join(f"r{r}.s{_LANES[k]}" for r in range(n))
            body.append(f"const float{n} c{k} = (float{n})({lanes});")
            columns.append(f"c{k}")
    else:
        lines, columns = transpose_lines(rows, "float", "t")
        body += lines
    body += [f"vstore{n}({c}, 0, dst + (j0 + {k}) * N + i0);" for k, c in enumerate(columns)]
    gi, gj = ("get_global_id(0)", "get_global_id(1)")
    if not rows_on_dim0:
        gi, gj = gj, gi
    hint = f"__attribute__((vec_type_hint(float{n}))) " if style == "shuffle+hint" else ""
    return (
        f"__kernel {hint}void {name}(__global const float* restrict src, "
        f"__global float* restrict dst) {{\n"
        f"const int i0 = {gi} * {n}; const int j0 = {gj} * {n};\n" + "\n".join(body) + "\n}\n"
    )


_COPIES = """
__kernel void copy16(__global const float16* restrict src, __global float16* restrict dst) {
    const int i = get_global_id(0); dst[i] = src[i]; }
__kernel void copy4(__global const float4* restrict src, __global float4* restrict dst) {
    const int i = get_global_id(0); dst[i] = src[i]; }
"""


def _seconds(queue: Any, kernel: Any, global_size: Any, local_size: Any, args: Any) -> float:
    event = kernel(queue, global_size, local_size, *args)
    event.wait()
    return (event.profile.end - event.profile.start) * 1e-9


def _best(queue: Any, kernel: Any, global_size: Any, local_size: Any, args: Any, repeats: int):
    _seconds(queue, kernel, global_size, local_size, args)
    return min(_seconds(queue, kernel, global_size, local_size, args) for _ in range(repeats))


def measure(size: int, repeats: int) -> list[tuple[str, float, float, str]]:
    """(style, best ms, copy ms, the best setting) per kernel style on a
    ``size`` x ``size`` transpose."""
    import pyopencl as cl

    device = default_device()
    context = cl.Context([device.open()])
    queue = cl.CommandQueue(context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    styles = ("lanes", "shuffle", "shuffle+hint")
    settings = list(itertools.product(styles, (4, 8, 16), (True, False)))
    source = f"#define N {size}\n" + _COPIES
    for style, n, rows in settings:
        source += _tile_kernel(_name(style, n, rows), n, style, rows)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = build_source(context, source)
    data = np.random.default_rng(0).standard_normal((size, size)).astype(np.float32)
    mf = cl.mem_flags
    src = cl.Buffer(context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=data)
    dst = cl.Buffer(context, mf.READ_WRITE, size=data.nbytes)
    copies = [
        (cl.Kernel(program, "copy16"), (size * size // 16,), None),
        (cl.Kernel(program, "copy4"), (size * size // 4,), (64,)),
    ]

    def copy_seconds() -> float:
        return min(_best(queue, k, g, lo, (src, dst), repeats) for k, g, lo in copies)

    copy = copy_seconds()
    best: dict[str, tuple[float, str]] = {}
    for style, n, rows in settings:
        kernel = cl.Kernel(program, _name(style, n, rows))
        grid = (size // n, size // n)
        for group in _GROUPS:
            if group and (grid[0] % group[0] or grid[1] % group[1]):
                continue
            seconds = _best(queue, kernel, grid, group, (src, dst), repeats)
            out = np.empty_like(data)
            cl.enqueue_copy(queue, out, dst).wait()
            if not np.array_equal(out, data.T):
                raise SystemExit(f"{_name(style, n, rows)} does not transpose")
            what = (
                f"{n}x{n}, dim 0 along {'rows' if rows else 'columns'}, group {group or 'driver'}"
            )
            if style not in best or seconds < best[style][0]:
                best[style] = (seconds, what)
    copy = min(copy, copy_seconds())  # the copy before and after the kernels
    return [(s, best[s][0] * 1e3, copy * 1e3, best[s][1]) for s in styles]


def _name(style: str, n: int, rows: bool) -> str:
    return f"t_{style.replace('+', '_')}_{n}_{'r' if rows else 'c'}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1024,4096", help="square sizes (1024,4096)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    device = default_device()
    print(f"device: {device.name}")
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        for style, ms, copy_ms, what in measure(size, args.repeats):
            share = f"{copy_ms / ms * 100:.1f} %"
            print(f"{size:5d} {style:13s} {ms:8.3f} ms  {share:>8s} of copy  ({what})")
            rows.append((f"{size}^2", style, f"{ms:.3f}", f"{copy_ms:.3f}", share, what))
    lines = [
        "# Hand-written transposes against the device's copy",
        "",
        *_report.environment(device),
        f"- best of {args.repeats} event times per setting; the copy timed before and after",
        "",
        *_report.table(
            ["size", "kernel", "ms", "copy ms", "of copy", "best setting"], rows, "llrrrl"
        ),
        "",
    ]
    path = _report.write("hand_transpose.md", "\n".join(lines), args.out)
    print(f"written to {_report.shown(path)}")


if __name__ == "__main__":
    main()
