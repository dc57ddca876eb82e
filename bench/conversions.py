"""Layout conversions against a tuned copy and CLBlast's omatcopy, on one device.

    python -m bench.conversions [--trials N] [--repeats N] [--db URL] [--out FILE] [--quick]
                                [--nchw 1,64,448,448]

The device is ``laytune.runners.default_device()`` (``LAYTUNE_DEVICE`` picks
another), the one the report's header names; every row is measured on it.

1. **The ceiling**: a copy of the same bytes, itself tuned. Every copy kernel
   of a small grid (vector width 1, 4, 8 or 16; 1, 4 or 16 vectors per
   work-item, consecutive or strided; plain or, where the device's compiler
   has ``__builtin_nontemporal_store``, nontemporal stores; the driver's
   work-group, 64 or 256) is
   timed once per size; the fastest is the ceiling that rows are compared with.
2. **The conversions**: a 4096 x 4096 float32 transpose (pack:
   row-major -> ``lambda i, j: [j, i]``; unpack: back) and NCHW <-> NCHW16c
   of (1, 64, 224, 224). Each is a :class:`laytune.space.ConversionWorkload`
   tuned by :func:`laytune.tune` (``--trials`` candidates of its
   :class:`~laytune.space.ConversionSpace`, TPE) into ``--db`` (default: a
   temporary file; give a file to re-run without tuning again: its records are
   reused). The tuned best and the generic kernel (no knobs: today's pack and
   unpack kernels) are timed.
3. **The peer**: CLBlast's ``omatcopy`` for the transposes (through the
   library pyclblast links, as ``bench.peers`` does), when installed.

Timing: OpenCL profiling events. A row and the ceiling take turns: after a
warm-up launch of each, ``--rounds`` rounds of ``--repeats`` back-to-back
launches of one, then of the other, so both see the same load of a shared
machine; the row's percentage is the ratio of the two best times (another
process only ever slows a launch down). GB/s counts the bytes read plus the
bytes written (a padded layout moves its padding too). A row above 100 % says
the ceiling is not one: the report says so instead of hiding it. Results
are checked against numpy before they are timed. The table is printed and
written to ``bench/results/conversions.md``.
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from bench import _report
from laytune import layout as L
from laytune.codegen import lower
from laytune.runners import MeasureConfig, build_source, default_device
from laytune.search import TuneOptions
from laytune.space import Candidate, ConversionWorkload

NCHW = (1, 64, 224, 224)


def cases(transpose: tuple[int, int], nchw: tuple[int, ...]) -> list[tuple[str, Any, Any]]:
    """(title, source layout, destination layout) of every row."""
    t, n = "x".join(map(str, transpose)), ",".join(map(str, nchw))
    return [
        (f"transpose {t} pack", L.identity(transpose), L.permute(transpose, (1, 0))),
        (f"transpose {t} unpack", L.permute(transpose, (1, 0)), L.identity(transpose)),
        (f"NCHW -> NCHW16c ({n})", L.identity(nchw), L.block(nchw, 1, 16)),
        (f"NCHW16c -> NCHW ({n})", L.block(nchw, 1, 16), L.identity(nchw)),
    ]


# -- the tuned copy ------------------------------------------------------------------

_VECTORS = (1, 4, 8, 16)
_ITEMS = (1, 4, 16)
_GROUPS = (None, 64, 256)


def _copy_name(vector: int, items: int, strided: bool, nontemporal: bool = False) -> str:
    return f"copy_v{vector}_i{items}{'s' if strided else 'c'}{'_nt' if nontemporal else ''}"


def _copy_grid(streaming: bool) -> list[tuple[int, int, bool, bool]]:
    """(vector, items, strided, nontemporal) of every copy kernel; the
    nontemporal stores where the device's compiler has them."""
    return [
        (vector, items, strided, nt)
        for vector, items, strided, nt in itertools.product(
            _VECTORS, _ITEMS, (False, True), (False, True) if streaming else (False,)
        )
        if not (items == 1 and strided)
    ]


def _copy_source(streaming: bool) -> str:
    """One copy kernel per (vector, items, strided, nontemporal) of the grid."""
    kernels = []
    for vector, items, strided, nt in _copy_grid(streaming):
        t = "float" if vector == 1 else f"float{vector}"
        index = "i + k * (int)get_global_size(0)" if strided else "i * ITEMS + k"
        store = (
            f"__builtin_nontemporal_store(src[{index}], dst + {index})"
            if nt
            else f"dst[{index}] = src[{index}]"
        )
        kernels.append(
            f"__kernel void {_copy_name(vector, items, strided, nt)}("
            f"__global const {t}* restrict src, __global {t}* restrict dst) {{\n"
            f"    const int i = get_global_id(0);\n"
            f"    #define ITEMS {items}\n"
            f"    for (int k = 0; k < ITEMS; ++k) {store};\n"
            f"    #undef ITEMS\n}}\n"
        )
    return "\n".join(kernels)


def _seconds(queue: Any, launch: tuple[Any, ...]) -> float:
    kernel, global_size, local_size, args = launch
    event = kernel(queue, global_size, local_size, *args)
    event.wait()
    return (event.profile.end - event.profile.start) * 1e-9


def _best(queue: Any, launch: tuple[Any, ...], repeats: int) -> float:
    _seconds(queue, launch)  # warm-up
    return min(_seconds(queue, launch) for _ in range(repeats))


def tuned_copy(
    context: Any, queue: Any, floats: int, repeats: int, streaming: bool = False
) -> tuple[tuple, str]:
    """The fastest copy launch of ``floats`` floats on the grid (with
    nontemporal stores too where ``streaming``), and its description."""
    import pyopencl as cl

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = build_source(context, _copy_source(streaming))
    mf = cl.mem_flags
    src = cl.Buffer(context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=np.ones(floats, "f4"))
    dst = cl.Buffer(context, mf.READ_WRITE, size=4 * floats)
    best: tuple[float, tuple, str] | None = None
    for (vector, items, strided, nt), group in itertools.product(_copy_grid(streaming), _GROUPS):
        if floats % (vector * items):
            continue
        work = floats // (vector * items)
        if group is not None and work % group:
            continue
        kernel = cl.Kernel(program, _copy_name(vector, items, strided, nt))
        launch = (kernel, (work,), None if group is None else (group,), (src, dst))
        seconds = _best(queue, launch, repeats)
        what = (
            f"float{vector if vector > 1 else ''} x {items} "
            f"{'strided' if strided else 'consecutive'}{', nontemporal stores' if nt else ''}, "
            f"work-group {group or 'driver'}"
        )
        if best is None or seconds < best[0]:
            best = (seconds, launch, what)
    assert best is not None
    return best[1], best[2]


def _time_pair(queue: Any, ceiling: tuple, measured: tuple, repeats: int, rounds: int):
    """Best seconds of ``ceiling`` and ``measured``, taking turns (see the module docstring)."""
    for launch in (ceiling, measured):
        _seconds(queue, launch)
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(rounds):
        for launch, out in zip((ceiling, measured), times, strict=True):
            out += [_seconds(queue, launch) for _ in range(repeats)]
    return min(times[0]), min(times[1])


# -- the conversions -----------------------------------------------------------------


def tune_case(workload: ConversionWorkload, device: Any, trials: int, database: Any) -> Any:
    """The best record of ``workload`` after a tuning job of ``trials`` candidates."""
    options = TuneOptions(
        trials=trials, batch=4, warm_start=0, measure=MeasureConfig(warmup=1, repeats=5)
    )
    result = _report.tune(workload, device, options=options, database=database, progress=False)
    return result.best


def conversion_launch(context: Any, workload: ConversionWorkload, candidate: Candidate, device):
    """(launch, checked): the candidate's kernel bound to fresh buffers,
    after checking its output against numpy."""
    import pyopencl as cl

    program = lower(workload, candidate, device.info)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        built = build_source(context, program.source, program.build_options)
    launch = program.compute[0]
    mf = cl.mem_flags
    data = workload.make_inputs(0)["src"]
    src = cl.Buffer(context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=data)
    dst = cl.Buffer(context, mf.READ_WRITE, size=data.itemsize * workload.dst.physical_size)
    return (cl.Kernel(built, launch.kernel), launch.global_size, launch.local_size, (src, dst))


def _check(queue: Any, workload: ConversionWorkload, launch: tuple) -> None:
    import pyopencl as cl

    _seconds(queue, launch)
    got = np.empty(workload.dst.physical_size, np.float32)
    cl.enqueue_copy(queue, got, launch[3][1]).wait()
    want = workload.reference(workload.make_inputs(0))["dst"]
    if not np.array_equal(got, want, equal_nan=True):
        raise SystemExit(f"{workload.describe()}: the kernel's result differs from numpy's")


def _omatcopy_launch(context: Any, queue: Any, blas: Any, rows: int, cols: int):
    """CLBlast's transpose as a launch for :func:`_seconds` (a callable kernel)."""
    import pyopencl as cl

    mf = cl.mem_flags
    data = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    src = cl.Buffer(context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=data)
    dst = cl.Buffer(context, mf.READ_WRITE, size=data.nbytes)
    blas.transpose(queue, src, dst, rows, cols).wait()
    got = np.empty((cols, rows), np.float32)
    cl.enqueue_copy(queue, got, dst).wait()
    if not np.array_equal(got, data.T):
        raise SystemExit("CLBlast omatcopy did not transpose")

    def call(queue: Any, _global: Any, _local: Any, *_args: Any) -> Any:
        return blas.transpose(queue, src, dst, rows, cols)

    return (call, None, None, ())


def main(argv: list[str] | None = None) -> None:
    import pyopencl as cl

    from bench.peers import CLBlast

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=24, help="candidates per conversion (24)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--db", help="records database to tune into and reuse (default: temp)")
    parser.add_argument("--out", type=Path, help="report file (default bench/results/...)")
    parser.add_argument(
        "--quick", action="store_true", help="1024 x 1024 and (1, 16, 64, 64): a smoke test"
    )
    parser.add_argument(
        "--nchw",
        type=lambda text: tuple(int(v) for v in text.split(",")),
        help="the NCHW shape of the NCHW16c rows (default 1,64,224,224; 1,64,448,448 leaves "
        "the last-level cache of most CPUs)",
    )
    args = parser.parse_args(argv)
    transpose, nchw = ((1024, 1024), (1, 16, 64, 64)) if args.quick else ((4096, 4096), NCHW)
    nchw = args.nchw or nchw
    device = default_device()
    context = cl.Context([device.open()])
    queue = cl.CommandQueue(context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    print(f"device: {device.name}")
    scratch = tempfile.TemporaryDirectory()
    database = args.db or f"sqlite:///{Path(scratch.name) / 'conversions.db'}"
    blas = CLBlast()
    ceilings: dict[int, tuple[tuple, str]] = {}
    rows: list[tuple[str, ...]] = []
    notes: list[str] = []
    header = f"{'case':52s} {'ms':>8s} {'GB/s':>7s} {'of copy':>8s} {'copy GB/s':>9s}"
    print(header)
    for title, src, dst in cases(transpose, nchw):
        workload = ConversionWorkload(src, dst)
        floats = int(np.prod(src.shape))
        if floats not in ceilings:
            streaming = device.info.has_builtin("nontemporal_store")
            ceilings[floats] = tuned_copy(context, queue, floats, args.repeats, streaming)
            notes.append(f"copy of {floats} floats: {ceilings[floats][1]}")
        ceiling = ceilings[floats][0]
        best = tune_case(workload, device, args.trials, database)
        variants = [("generic", Candidate.make({}))]
        if best is not None and best.candidate.knobs:
            variants.insert(0, (f"tuned: {best.candidate.describe()}", best.candidate))
        launches = []
        for variant, candidate in variants:
            launch = conversion_launch(context, workload, candidate, device)
            _check(queue, workload, launch)
            launches.append((variant, launch))
        if src.shape == transpose and not blas.omatcopy_missing:
            rows_, cols = transpose
            launches.append(
                ("CLBlast omatcopy", _omatcopy_launch(context, queue, blas, rows_, cols))
            )
        for variant, launch in launches:
            copy_s, seconds = _time_pair(queue, ceiling, launch, args.repeats, args.rounds)
            gbs = workload.bytes / seconds / 1e9
            copy_gbs = 8 * floats / copy_s / 1e9
            share = 100 * gbs / copy_gbs
            if share > 100:
                notes.append(f"{title} ({variant}) beat the tuned copy: the ceiling is not one")
            name = f"{title} ({variant})"
            print(f"{name:52s} {seconds * 1e3:8.3f} {gbs:7.1f} {share:7.1f}% {copy_gbs:9.1f}")
            rows.append(
                (name, f"{seconds * 1e3:.3f}", f"{gbs:.1f}", f"{share:.1f} %", f"{copy_gbs:.1f}")
            )
    text = "\n".join(
        [
            "# Layout conversions against a tuned copy and CLBlast omatcopy",
            "",
            *_report.environment(device),
            f"- best event time over {args.rounds} rounds of {args.repeats} launches, each row "
            "taking turns with the tuned copy of the same size",
            f"- conversions tuned with {args.trials} candidates each (TPE)",
            *[f"- {note}" for note in notes],
            *([f"- {blas.skipped}"] if blas.skipped else []),
            "",
            *_report.table(("case", "ms", "GB/s", "of copy", "copy GB/s"), rows, "lrrrr"),
        ]
    )
    written = _report.write("conversions.md", text + "\n", args.out)
    print(f"written to {_report.shown(written)}")
    scratch.cleanup()


if __name__ == "__main__":
    main()
