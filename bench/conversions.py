"""Layout conversion bandwidth: generated pack/unpack kernels against the
device's float4 copy bandwidth, measured in the same run.

    python -m bench.conversions [--repeats N]

Cases: a 4096 x 4096 float32 transpose (``lambda i, j: [j, i]``) and NCHW ->
NCHW4c of (1, 64, 224, 224) (``lambda n, c, h, w: [n, c // 4, h, w, c % 4]``),
each with the generated (tiled) kernels and with the naive
one-element-per-work-item kernel for reference. Times are OpenCL profiling
events (median of the repeats after one warm-up launch); GB/s counts the
bytes read plus the bytes written.
"""

from __future__ import annotations

import argparse
import statistics
import warnings

import numpy as np

import laytune  # noqa: F401  (registers PyPI OpenCL runtimes before pyopencl looks)
from laytune import layout as L
from laytune.codegen import lower_conversion

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


def _time(queue, kernel, global_size, args, repeats: int) -> float:
    kernel(queue, global_size, None, *args).wait()  # warm-up (and PoCL's first-launch compile)
    times = []
    for _ in range(repeats):
        event = kernel(queue, global_size, None, *args)
        event.wait()
        times.append((event.profile.end - event.profile.start) * 1e-9)
    return statistics.median(times)


def main() -> None:
    import pyopencl as cl

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    device = _device()
    context = cl.Context([device])
    queue = cl.CommandQueue(context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    mf = cl.mem_flags
    print(f"device: {device.name.strip()} ({device.platform.name.strip()})")

    copies = cl.Program(context, _COPY).build()

    def copy_bandwidth(n: int) -> float:
        """Best of the two float4 copy kernels over n floats: read + write GB/s."""
        src = cl.Buffer(context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=np.ones(n, np.float32))
        dst = cl.Buffer(context, mf.READ_WRITE, size=4 * n)
        best = 0.0
        for kernel, items in ((copies.copy4, n // 4), (copies.copy4x16, n // 64)):
            seconds = _time(queue, kernel, (items,), (src, dst), args.repeats)
            best = max(best, 2 * 4 * n / seconds / 1e9)
        return best

    cases = [
        ("transpose 4096x4096", L.permute((4096, 4096), (1, 0))),
        ("NCHW -> NCHW4c (1,64,224,224)", L.block((1, 64, 224, 224), 1, 4)),
    ]
    for title, layout in cases:
        size = int(np.prod(layout.shape))
        copy_gbs = copy_bandwidth(size)
        print(f"{'float4 copy, same size':44s} {'':11s} {copy_gbs:7.1f} GB/s  100.0%")
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
                kernel = getattr(built, launch.kernel)
                seconds = _time(queue, kernel, launch.global_size, buffers, args.repeats)
                gbs = moved / seconds / 1e9
                name = f"{title} {step} ({variant})"
                print(
                    f"{name:44s} {seconds * 1e3:8.2f} ms {gbs:7.1f} GB/s {100 * gbs / copy_gbs:6.1f}%"
                )


if __name__ == "__main__":
    main()
