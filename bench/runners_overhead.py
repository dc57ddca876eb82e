"""Overhead and throughput of laytune.runners, side by side with Kernel Tuner.

Run: ``python -m bench.runners_overhead`` (``--quick`` for a smaller run).
Pick the device with ``LAYTUNE_DEVICE`` (any ``select_device`` spec);
otherwise the first device that compiles a trivial kernel is used.

Prints a markdown table of:

- per-candidate overhead of the measure path: wall time of ``Runner.run``
  per candidate minus the kernels' own event time (all launches, warm-ups
  and verification included), for 30 distinct small programs of one
  workload (as in a tuning loop);
- a 30-candidate transpose space (naive and local-memory tiles over several
  work-group shapes), build + measure per candidate and candidates per
  minute, with cold and then warm binary caches on both sides: laytune's
  ``Builder(cache_dir=...)`` and pyopencl's compiler cache, which Kernel
  Tuner builds through, each in a fresh temporary directory. Cold, every
  candidate is compiled; warm, the same 30 are built again and every binary
  comes from the cache. Kernel Tuner's time per configuration is the sum of
  its own per-configuration timers (compile, verification, benchmark,
  framework, strategy), which leaves its start-up out as laytune's (worker
  start, build pool start) is left out. Both sides run the same kernels
  with the same ``--repeats`` and check every result against the same
  answer; laytune adds one warm-up launch per candidate;
- agreement of the median of one program measured in two separate worker
  processes.

The machine may be shared and noisy: run it more than once.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench import _report
from laytune.codegen import ArgRef, BufferSpec, KernelProgram, Launch
from laytune.runners import (
    Builder,
    Device,
    MeasureConfig,
    RunInput,
    Runner,
    RunResult,
    build_source,
    list_devices,
    select_device,
)

SIZE = 512  # transpose of a SIZE x SIZE float32 matrix
SMALL = 4096  # elements of the small kernel used for the overhead figure

TRANSPOSE_SOURCE = """
__kernel void transpose(__global const float* a, __global float* b) {
#if USE_LOCAL
  __local float tile[block_size_x][block_size_x + 1];
  int bx = get_group_id(0) * block_size_x, by = get_group_id(1) * block_size_x;
  int tx = get_local_id(0), ty = get_local_id(1);
  for (int j = ty; j < block_size_x; j += block_size_y)
    tile[j][tx] = a[(by + j) * SIZE + bx + tx];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int j = ty; j < block_size_x; j += block_size_y)
    b[(bx + j) * SIZE + by + tx] = tile[tx][j];
#else
  int x = get_group_id(0) * block_size_x + get_local_id(0);
  int y0 = get_group_id(1) * block_size_x;
  for (int j = get_local_id(1); j < block_size_x; j += block_size_y)
    b[x * SIZE + y0 + j] = a[(y0 + j) * SIZE + x];
#endif
}
"""

# Distinct programs (so none is a cached build) that compute the same thing.
SCALE_SOURCE = """
__kernel void scale(__global const float* x, __global float* y) {
  size_t i = get_global_id(0); y[i] = (%d.0f * x[i]) / %d.0f;
}
"""


@dataclass(frozen=True)
class TransposeWorkload:
    size: int = SIZE

    @property
    def key(self) -> str:
        return f"transpose:{self.size}x{self.size}:float32"

    def make_inputs(self, seed: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        return {"a": rng.standard_normal((self.size, self.size)).astype(np.float32)}

    def reference(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"b": np.ascontiguousarray(inputs["a"].T)}


@dataclass(frozen=True)
class ScaleWorkload:
    n: int = SMALL

    @property
    def key(self) -> str:
        return f"scale2:{self.n}:float32"

    def make_inputs(self, seed: int) -> dict[str, np.ndarray]:
        return {"x": np.random.default_rng(seed).standard_normal(self.n).astype(np.float32)}

    def reference(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"y": inputs["x"] * np.float32(2.0)}


def transpose_space(device: Device, count: int = 30) -> list[dict[str, int]]:
    """Naive and local-memory transposes over tile widths and work-group heights."""
    space = []
    for use_local in (0, 1):
        for bx in (4, 8, 16, 32):
            for by in (1, 2, 4, 8, 16):
                fits = bx * by <= device.info.max_work_group_size and by <= bx
                local_ok = not use_local or 4 * bx * (bx + 1) <= device.info.local_mem_size
                if fits and local_ok and SIZE % bx == 0:
                    space.append({"USE_LOCAL": use_local, "block_size_x": bx, "block_size_y": by})
    return space[:count]


def transpose_program(params: dict[str, int]) -> KernelProgram:
    name = "transpose_" + "_".join(f"{k}{v}" for k, v in params.items())
    bx, by = params["block_size_x"], params["block_size_y"]
    options = (*(f"-D{k}={v}" for k, v in params.items()), f"-DSIZE={SIZE}")
    n = SIZE * SIZE
    return KernelProgram(
        name=name,
        source=TRANSPOSE_SOURCE,
        buffers=(
            BufferSpec("a", "float32", (SIZE, SIZE), (n,), "input"),
            BufferSpec("b", "float32", (SIZE, SIZE), (n,), "output"),
        ),
        compute=(
            Launch(
                "transpose",
                (ArgRef("a", "physical"), ArgRef("b", "physical")),
                (SIZE, SIZE // bx * by),
                (bx, by),
            ),
        ),
        build_options=options,
    )


def scale_program(variant: int) -> KernelProgram:
    """y = 2 x, written as (2 v x) / v: a distinct program per variant."""
    return KernelProgram(
        name=f"scale_v{variant}",
        source=SCALE_SOURCE % (2 * variant, variant),
        buffers=(
            BufferSpec("x", "float32", (SMALL,), (SMALL,), "input"),
            BufferSpec("y", "float32", (SMALL,), (SMALL,), "output"),
        ),
        compute=(Launch("scale", (ArgRef("x", "physical"), ArgRef("y", "physical")), (SMALL,)),),
    )


def pick_device() -> Device:
    spec = os.environ.get("LAYTUNE_DEVICE")
    if spec:
        return select_device(spec)
    import pyopencl as cl

    for device in list_devices():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                build_source(cl.Context([device.open()]), "__kernel void k() {}")
        except cl.Error:
            continue
        return device
    raise SystemExit("no OpenCL device here compiles a trivial kernel")


def kernel_seconds(result: RunResult, config: MeasureConfig) -> float:
    """Device time of every launch of a candidate: timed repeats plus an estimate
    (median repeat) for the verification and warm-up launches."""
    median = float(np.median(result.event_times_s))
    return sum(result.event_times_s) + (1 + config.warmup) * median


def measure_overhead(device: Device, builder: Builder, config: MeasureConfig, n: int) -> float:
    # Powers of two, so that (2 v x) / v is exactly 2 x.
    builds = builder.build([scale_program(1 << k) for k in range(n + 1)])
    workload = ScaleWorkload()
    with Runner(device, config) as runner:
        runner.run([RunInput(builds[0], workload)])  # start the worker, prepare the workload
        start = time.perf_counter()
        results = runner.run([RunInput(b, workload) for b in builds[1:]])
        wall = time.perf_counter() - start
    assert all(r.ok for r in results), [r.error_message for r in results if not r.ok]
    device_time = sum(kernel_seconds(r, config) for r in results)
    return (wall - device_time) / n


@dataclass(frozen=True)
class Timing:
    """Seconds for a whole space: building, measuring (all candidates)."""

    build: float
    measure: float
    candidates: int

    @property
    def per_candidate(self) -> float:
        return (self.build + self.measure) / self.candidates

    @property
    def per_minute(self) -> float:
        return 60.0 / self.per_candidate


def laytune_transpose(
    builder: Builder, runner: Runner, space: list[dict[str, int]]
) -> tuple[Timing, list[RunResult], int]:
    """(timing of build + measure, results, builds answered from the cache)."""
    workload = TransposeWorkload()
    start = time.perf_counter()
    builds = builder.build([transpose_program(p) for p in space])
    built = time.perf_counter()
    results = runner.run([RunInput(b, workload) for b in builds])
    end = time.perf_counter()
    cached = sum(b.cached for b in builds)
    return Timing(built - start, end - built, len(space)), results, cached


@contextmanager
def pyopencl_cache_in(directory: Path) -> Iterator[None]:
    """Point pyopencl's compiler cache (which it reads from ``XDG_CACHE_HOME``
    at every build) at ``directory`` for the duration."""
    old = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(directory)
    try:
        yield
    finally:
        if old is None:
            del os.environ["XDG_CACHE_HOME"]
        else:
            os.environ["XDG_CACHE_HOME"] = old


def kernel_tuner_transpose(
    device: Device, repeats: int, space: list[dict[str, int]], cache_home: Path
) -> Timing | None:
    """Kernel Tuner's own per-configuration timers, summed over the space."""
    try:
        import kernel_tuner
    except ImportError:
        return None
    a = np.random.default_rng(0).standard_normal((SIZE, SIZE)).astype(np.float32)
    b = np.zeros_like(a)
    wanted = {tuple(p.values()) for p in space}
    tune_params = {
        "USE_LOCAL": [0, 1],
        "block_size_x": sorted({p["block_size_x"] for p in space}),
        "block_size_y": sorted({p["block_size_y"] for p in space}),
    }

    def restrict(p: dict[str, int]) -> bool:
        return (p["USE_LOCAL"], p["block_size_x"], p["block_size_y"]) in wanted

    with warnings.catch_warnings(), pyopencl_cache_in(cache_home):
        warnings.simplefilter("ignore")
        results, _ = kernel_tuner.tune_kernel(
            "transpose",
            TRANSPOSE_SOURCE,
            (SIZE, SIZE),
            [a, b],
            tune_params,
            grid_div_x=["block_size_x"],
            grid_div_y=["block_size_x"],
            restrictions=restrict,
            answer=[None, np.ascontiguousarray(a.T)],
            lang="OpenCL",
            platform=device.platform_index,
            device=device.device_index,
            iterations=repeats,
            defines={"SIZE": SIZE, **{k: k for k in tune_params}},
            quiet=True,
        )
    if len(results) != len(space):
        print(f"(kernel tuner measured {len(results)} of {len(space)} configurations)")

    def total_ms(*names: str) -> float:
        return sum(float(r.get(name) or 0.0) for r in results for name in names)

    build = total_ms("compile_time") / 1e3
    measure = total_ms("verification_time", "benchmark_time", "framework_time", "strategy_time")
    return Timing(build, measure / 1e3, len(results))


def median_agreement(device: Device, builder: Builder, params: dict[str, int]) -> float:
    config = MeasureConfig(warmup=3, repeats=30)
    (build,) = builder.build([transpose_program(params)])
    medians = []
    for _ in range(2):
        with Runner(device, config) as runner:
            (result,) = runner.run([RunInput(build, TransposeWorkload())])
        assert result.ok, result.error_message
        medians.append(result.value_s or 0.0)
    return abs(medians[0] - medians[1]) / min(medians)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="10 candidates, no Kernel Tuner")
    args = parser.parse_args()

    device = pick_device()
    config = MeasureConfig(warmup=1, repeats=args.repeats, measure_conversions=False)
    space = transpose_space(device, 10 if args.quick else 30)
    n = len(space)
    print(f"device: {device.name}; repeats {args.repeats}; {n} transpose candidates\n", flush=True)
    with tempfile.TemporaryDirectory(prefix="laytune-bench-") as scratch:
        laytune_cache, kt_cache = Path(scratch, "laytune"), Path(scratch, "pyopencl")
        with Builder(device) as builder:
            builder.warm_up()
            overhead = measure_overhead(device, builder, config, 10 if args.quick else 30)
            agreement = median_agreement(device, builder, space[len(space) // 2])
        with (
            Builder(device, cache_dir=laytune_cache) as builder,
            Runner(device, config) as runner,
        ):
            # Start the build workers and the measuring worker outside the timings.
            builder.warm_up()
            runner.run(
                [RunInput(b, ScaleWorkload()) for b in builder.build([scale_program(1 << 20)])]
            )
            # Cold and warm alternate between the two tuners, so that a
            # slow spell of a shared machine does not favour either.
            ours_cold, results, cached_cold = laytune_transpose(builder, runner, space)
            kt_cold = (
                None
                if args.quick
                else kernel_tuner_transpose(device, args.repeats, space, kt_cache)
            )
            ours_warm, _, cached_warm = laytune_transpose(builder, runner, space)
            kt_warm = (
                None
                if args.quick
                else kernel_tuner_transpose(device, args.repeats, space, kt_cache)
            )
    assert cached_cold == 0 and cached_warm == n, (cached_cold, cached_warm)

    def row(name: str, ours: str, theirs: str | None = None) -> tuple[str, str, str]:
        return name, ours, theirs or "-"

    def ms(seconds: float) -> str:
        return f"{seconds * 1e3:.1f}"

    rows = [row("per-candidate overhead, small kernel (ms)", f"{overhead * 1e3:.2f}")]
    for label, ours, theirs in (("cold", ours_cold, kt_cold), ("warm", ours_warm, kt_warm)):
        rows += [
            row(
                f"transpose, {label} caches: build + measure (ms/candidate)",
                ms(ours.per_candidate),
                theirs and ms(theirs.per_candidate),
            ),
            row(
                f"transpose, {label} caches: candidates per minute",
                f"{ours.per_minute:.0f}",
                theirs and f"{theirs.per_minute:.0f}",
            ),
            row(
                f"transpose, {label} caches: build only (ms/candidate)",
                ms(ours.build / n),
                theirs and ms(theirs.build / theirs.candidates),
            ),
            row(
                f"transpose, {label} caches: measure only (ms/candidate)",
                ms(ours.measure / n),
                theirs and ms(theirs.measure / theirs.candidates),
            ),
        ]
    rows.append(row("median agreement, two worker processes", f"{agreement * 100:.1f} %"))
    lines = [
        "# Measure path: laytune beside Kernel Tuner",
        "",
        *_report.environment(device),
        f"- {n} transpose candidates, {args.repeats} repeats each on both sides",
        "",
        *_report.table(("figure", "laytune", "Kernel Tuner"), rows),
    ]
    for label, ours, theirs in (("cold", ours_cold, kt_cold), ("warm", ours_warm, kt_warm)):
        if theirs is not None:
            ratio = theirs.per_candidate / ours.per_candidate
            lines.append(
                f"\nKernel Tuner / laytune time per candidate, {label} caches: {ratio:.1f}x"
            )
    bad = [r for r in results if not r.ok]
    if bad:
        lines.append(
            f"\n{len(bad)} candidates failed: {[(r.program_name, r.error_kind) for r in bad]}"
        )
    best = min((r for r in results if r.ok), key=lambda r: r.value_s or float("inf"))
    lines.append(
        f"\nbest transpose: {best.program_name} {(best.value_s or 0.0) * 1e6:.1f} us (median)"
    )
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.quick:
        print(f"written to {_report.shown(_report.write('runners_overhead.md', text))}")


if __name__ == "__main__":
    main()
