"""Layout conversion bandwidth: generated pack/unpack kernels against the
device's float4 copy bandwidth, measured in the same run.

    python -m bench.conversions [--repeats N]

Cases: a 4096 x 4096 float32 transpose (``lambda i, j: [j, i]``) and NCHW ->
NCHW4c of (1, 64, 224, 224) (``lambda n, c, h, w: [n, c // 4, h, w, c % 4]``),
each with the generated (tiled) kernels and with the naive
one-element-per-work-item kernel for reference. Times are OpenCL profiling
events; GB/s counts the bytes read plus the bytes written. The reference is
the faster of two float4 copy kernels of the same size, measured next to
every row: after one warm-up launch of each, the copy and the measured kernel
take turns in rounds of ``--repeats`` back-to-back launches (so that both see
the same load of a shared machine, and each runs on its own warm buffers),
and a row's percentage is the ratio of the two best times over all rounds
(another process on a shared machine only ever slows a launch down).
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

from bench import _report
from laytune import layout as L
from laytune.codegen import lower_conversion
from laytune.runners import default_device, register_opencl_runtimes

_COPY = """
__kernel void copy4(__global const float4* restrict src, __global float4* restrict dst) {
    const int i = get_global_id(0);
    dst[i] = src[i];
}
__kernel void copy4x16(__global const float4* restrict src, __global float4* restrict dst) {
    const int i = get_global_id(0) * 16;
    for (int k = 0; k < 16; ++k) dst[i + k] = src[i + k];
}
"""
_PROBE = "__kernel void probe(__global float* a) { a[get_global_id(0)] = 1.0f; }"


def _device():
    import pyopencl as cl

    register_opencl_runtimes()  # before pyopencl lists platforms
    devices = [d for p in cl.get_platforms() for d in p.get_devices()]
    devices.sort(key=lambda d: "Portable Computing Language" not in d.platform.name)
    for device in devices:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cl.Program(cl.Context([device]), _PROBE).build()
        except cl.Error:
            continue
        return device
    raise SystemExit(f"no OpenCL device here builds a kernel: {devices}")


def _seconds(queue, kernel, global_size, args) -> float:
    event = kernel(queue, global_size, None, *args)
    event.wait()
    return (event.profile.end - event.profile.start) * 1e-9


def _time_pair(queue, reference, measured, repeats: int, rounds: int = 3) -> tuple[float, float]:
    """Best seconds of ``reference`` and ``measured`` ((kernel, global size,
    args) each): after one warm-up launch of each, ``rounds`` rounds of
    ``repeats`` launches of one, then ``repeats`` of the other."""
    for launch in (reference, measured):
        _seconds(queue, *launch)  # warm-up (first-touch of pages, first-launch compile)
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(rounds):
        for launch, out in zip((reference, measured), times, strict=True):
            out += [_seconds(queue, *launch) for _ in range(repeats)]
    return min(times[0]), min(times[1])


def main() -> None:
    import pyopencl as cl

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    device = _device()
    context = cl.Context([device])
    queue = cl.CommandQueue(context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    mf = cl.mem_flags
    print(f"device: {device.name.strip()} ({device.platform.name.strip()})")

    copies = cl.Program(context, _COPY).build()
    copy_kernels = (
        (cl.Kernel(copies, "copy4"), 4),
        (cl.Kernel(copies, "copy4x16"), 64),
    )

    def copy_launch(n: int):
        """The faster float4 copy of n floats, as (kernel, global size, args)."""
        src = cl.Buffer(context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=np.ones(n, np.float32))
        dst = cl.Buffer(context, mf.READ_WRITE, size=4 * n)
        launches = [(kernel, (n // per,), (src, dst)) for kernel, per in copy_kernels]
        for launch in launches:
            _seconds(queue, *launch)  # warm-up
        return min(
            launches, key=lambda launch: min(_seconds(queue, *launch) for _ in range(args.repeats))
        )

    cases = [
        ("transpose 4096x4096", L.permute((4096, 4096), (1, 0))),
        ("NCHW -> NCHW4c (1,64,224,224)", L.block((1, 64, 224, 224), 1, 4)),
    ]
    rows: list[tuple[str, ...]] = []
    print(f"{'case':44s} {'time':>11s} {'bandwidth':>12s} {'of copy':>7s} {'copy':>9s}")
    for title, layout in cases:
        size = int(np.prod(layout.shape))
        reference = copy_launch(size)
        logical = cl.Buffer(
            context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=np.ones(size, np.float32)
        )
        physical = cl.Buffer(context, mf.READ_WRITE, size=4 * layout.physical_size)
        back = cl.Buffer(context, mf.READ_WRITE, size=4 * size)
        for variant, per_item in (("generated", None), ("naive", 1)):
            program = lower_conversion("X", layout, elements_per_item=per_item)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                built = cl.Program(context, program.source).build()
            moved = 4 * (size + layout.physical_size)
            steps = [
                ("pack", program.pack[0], (logical, physical)),
                ("unpack", program.unpack[0], (physical, back)),
            ]
            for step, launch, buffers in steps:
                kernel = cl.Kernel(built, launch.kernel)
                copy_s, seconds = _time_pair(
                    queue, reference, (kernel, launch.global_size, buffers), args.repeats
                )
                gbs = moved / seconds / 1e9
                copy_gbs = 2 * 4 * size / copy_s / 1e9
                name = f"{title} {step} ({variant})"
                print(
                    f"{name:44s} {seconds * 1e3:8.2f} ms {gbs:7.1f} GB/s {100 * gbs / copy_gbs:6.1f}% "
                    f"{copy_gbs:5.1f} GB/s"
                )
                rows.append(
                    (
                        name,
                        f"{seconds * 1e3:.2f}",
                        f"{gbs:.1f}",
                        f"{100 * gbs / copy_gbs:.1f} %",
                        f"{copy_gbs:.1f}",
                    )
                )
    text = "\n".join(
        [
            "# Pack and unpack kernels against the device's float4 copy",
            "",
            *_report.environment(default_device()),
            f"- best of {args.repeats} event times each; the copy is measured beside every row",
            "",
            *_report.table(("case", "ms", "GB/s", "of copy bandwidth", "copy GB/s"), rows, "lrrrr"),
        ]
    )
    print(f"written to {_report.shown(_report.write('conversions.md', text + chr(10)))}")


if __name__ == "__main__":
    main()
