"""laytune's generated kernels side by side with CLBlast and numpy, on one device.

    python -m bench.peers [--repeats N] [--sizes 512 1024] [--random K] [--out FILE]

The device is ``laytune.runners.default_device()`` (``LAYTUNE_DEVICE`` picks
another). In one run:

- Transpose of a 4096 x 4096 float32 matrix: laytune's generated pack kernel
  for the layout ``lambda i, j: [j, i]`` (``lower_conversion``, as
  ``bench.conversions`` measures it), CLBlast's transpose (``omatcopy``,
  reached through the CLBlast library that pyclblast loads, because pyclblast
  does not wrap it), and the float4 copy of ``bench.conversions`` over the
  same bytes as the bandwidth ceiling. GB/s counts the bytes read plus the
  bytes written.
- Matmul ``C = A @ B`` in float32 at each size: laytune's best of a handful
  of candidates of ``SearchSpace(ops.matmul(n, n, n), device)`` (fixed
  profiles resolved through the space, plus ``--random`` draws), measured by
  ``laytune.runners.Runner`` with operands already in their layouts, the
  identity candidate for reference, CLBlast's sgemm, and numpy on the host.

Every time is a median over ``--repeats`` after warm-up. The wall clock is a
blocking call (enqueue, then ``queue.finish()``) timed with
``time.perf_counter``; it is the only clock for CLBlast's sgemm (its event
covers only one of the kernels it may launch) and for numpy, and it is given
for every row so that rows compare. Event times are OpenCL profiling events
of the kernel that does the whole job. Results are checked (the transposes
exactly, matmuls against numpy) before their times are shown.

Without pyclblast (``pip install pyclblast``, which builds against Debian's
``libclblast-dev``) the CLBlast rows say so and the rest runs. The table is
printed and written to ``bench/results/peers.md``.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import datetime
import importlib.metadata
import statistics
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import laytune
from bench.conversions import _COPY
from laytune import layout as L
from laytune import ops
from laytune.codegen import lower, lower_conversion
from laytune.exceptions import LayoutRejectedError
from laytune.runners import Builder, Device, MeasureConfig, RunInput, Runner, default_device
from laytune.space import Candidate, SearchSpace

RESULTS = Path(__file__).resolve().parent / "results" / "peers.md"
TRANSPOSE = 4096
SIZES = (512, 1024)

# Candidates tried at every matmul size, as choices of SearchSpace.suggest:
# a parameter missing from a profile takes the baseline value (identity
# layouts, baseline knobs) when the space allows it there, else its first choice.
PROFILES: tuple[Mapping[str, Any], ...] = (
    {
        "layout:A": "block(axis=0, factor=6)",
        "layout:B": "panel(axis=1, factor=16)",
        "vector_axis": "j",
        "vector": 16,
        "block.i": 6,
        "block.j": 16,
    },
    {
        "layout:A": "block(axis=0, factor=4)",
        "layout:B": "panel(axis=1, factor=16)",
        "vector_axis": "j",
        "vector": 16,
        "block.i": 4,
        "block.j": 16,
    },
    {"vector_axis": "j", "vector": 16, "block.i": 6, "block.j": 16},
    {"vector_axis": "j", "vector": 8, "block.i": 8, "block.j": 8},
    {
        "local_stage": True,
        "vector_axis": "j",
        "vector": 4,
        "block.j": 4,
        "block.i": 4,
        "layout:A.local": "pad_rows(pad=4)",
        "layout:B.local": "pad_rows(pad=4)",
    },
)


# -- timing -------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """Medians of one implementation: event (None where no single event
    covers the work) and wall clock, in seconds."""

    event_s: float | None
    wall_s: float


def measure(
    call: Callable[[], Any], queue: Any, *, warmup: int, repeats: int, events: bool = True
) -> Timing:
    """Median times of ``call()`` made blocking by ``queue.finish()`` (queue may
    be None for host work). With ``events``, ``call`` returns the pyopencl
    event of the kernel that does all the work, and its profiled duration
    is the event time."""

    def finish() -> None:
        if queue is not None:
            queue.finish()

    for _ in range(warmup):
        call()
        finish()
    walls, durations = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        event = call()
        finish()
        walls.append(time.perf_counter() - start)
        if events:
            durations.append((event.profile.end - event.profile.start) * 1e-9)
    return Timing(statistics.median(durations) if events else None, statistics.median(walls))


# -- CLBlast ---------------------------------------------------------------------------

_ROW_MAJOR, _TRANSPOSE = 101, 112  # CLBlastLayoutRowMajor, CLBlastTransposeYes


class CLBlast:
    """What this benchmark uses of CLBlast: pyclblast's sgemm, and ``omatcopy``
    from the library pyclblast links (pyclblast has no wrapper for it).

    ``missing`` says why CLBlast cannot be used (None when it can);
    ``omatcopy_missing`` likewise for the transpose alone.
    """

    def __init__(self) -> None:
        self.missing: str | None = None
        self.omatcopy_missing: str | None = None
        self.version = "not installed"
        self.library = ""
        try:
            import pyclblast
        except ImportError as err:
            self.missing = (
                f"pyclblast is not importable ({err}); pip install pyclblast "
                f"(needs CLBlast's headers and library: Debian's libclblast-dev)"
            )
            self.omatcopy_missing = self.missing
            return
        self.pyclblast = pyclblast
        self.version = importlib.metadata.version("pyclblast")
        name = ctypes.util.find_library("clblast")
        if name is None:
            self.omatcopy_missing = "the CLBlast shared library is not on the loader's path"
            return
        self.library = name
        try:
            somatcopy = ctypes.CDLL(name).CLBlastSomatcopy
        except (OSError, AttributeError) as err:
            self.omatcopy_missing = f"{name} has no usable CLBlastSomatcopy: {err}"
            return
        size, ptr = ctypes.c_size_t, ctypes.c_void_p
        somatcopy.restype = ctypes.c_int
        somatcopy.argtypes = [
            ctypes.c_int,  # layout
            ctypes.c_int,  # a_transpose
            size,  # m
            size,  # n
            ctypes.c_float,  # alpha
            ptr,  # a_buffer
            size,  # a_offset
            size,  # a_ld
            ptr,  # b_buffer
            size,  # b_offset
            size,  # b_ld
            ctypes.POINTER(ptr),  # queue
            ctypes.POINTER(ptr),  # event
        ]
        self._somatcopy = somatcopy

    @property
    def skipped(self) -> str:
        """What is left out and why; empty when nothing is."""
        if self.missing:
            return f"CLBlast rows skipped: {self.missing}"
        if self.omatcopy_missing:
            return f"CLBlast omatcopy skipped: {self.omatcopy_missing}"
        return ""

    def transpose(self, queue: Any, src: Any, dst: Any, rows: int, cols: int) -> Any:
        """``dst = src.T`` for a row-major rows x cols float32 buffer; the event."""
        import pyopencl as cl

        handle, event = ctypes.c_void_p(queue.int_ptr), ctypes.c_void_p()
        status = self._somatcopy(
            _ROW_MAJOR,
            _TRANSPOSE,
            rows,
            cols,
            1.0,
            src.int_ptr,
            0,
            cols,
            dst.int_ptr,
            0,
            rows,
            ctypes.byref(handle),
            ctypes.byref(event),
        )
        if status != 0:
            raise RuntimeError(f"CLBlastSomatcopy returned status {status}")
        return cl.Event.from_int_ptr(event.value, retain=False)  # released with the object

    def sgemm(self, queue: Any, a: Any, b: Any, c: Any) -> Any:
        n, k = a.shape
        m = b.shape[1]
        return self.pyclblast.gemm(queue, n, m, k, a, b, c, a_ld=k, b_ld=m, c_ld=m)


# -- the table --------------------------------------------------------------------


@dataclass
class Row:
    case: str
    implementation: str
    timing: Timing | None
    rate: str = ""
    note: str = ""


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


# -- transpose ----------------------------------------------------------------------


def transpose_rows(
    context: Any, queue: Any, blas: CLBlast, repeats: int, size: int = TRANSPOSE
) -> list[Row]:
    import pyopencl as cl

    case = f"transpose {size} x {size} float32"
    mf = cl.mem_flags
    host = np.random.default_rng(0).standard_normal((size, size)).astype(np.float32)
    expected = np.ascontiguousarray(host.T)
    nbytes = host.nbytes
    src = cl.Buffer(context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=host)
    dst = cl.Buffer(context, mf.READ_WRITE, size=nbytes)

    def gbs(timing: Timing) -> str:
        return f"{2 * nbytes / timing.wall_s / 1e9:.1f}"

    def checked(what: str) -> None:
        out = np.empty_like(host)
        cl.enqueue_copy(queue, out, dst)
        if not np.array_equal(out, expected):
            raise SystemExit(f"{what} did not transpose the matrix")
        cl.enqueue_fill_buffer(queue, dst, np.float32(0), 0, nbytes).wait()

    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        copies = cl.Program(context, _COPY).build()
    best: Row | None = None
    for kernel, items in ((copies.copy4, size * size // 4), (copies.copy4x16, size * size // 64)):
        timing = measure(
            lambda kernel=kernel, items=items: kernel(queue, (items,), None, src, dst),
            queue,
            warmup=1,
            repeats=repeats,
        )
        if best is None or best.timing is None or timing.wall_s < best.timing.wall_s:
            best = Row(case, f"float4 copy ({kernel.function_name})", timing, gbs(timing))
    assert best is not None
    best.note = "the bandwidth ceiling: same bytes, no reordering"
    rows.append(best)

    layout = L.permute((size, size), (1, 0))
    program = lower_conversion("X", layout)
    (launch,) = program.pack
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pack = getattr(cl.Program(context, program.source).build(), launch.kernel)
    timing = measure(
        lambda: pack(queue, launch.global_size, launch.local_size, src, dst),
        queue,
        warmup=1,
        repeats=repeats,
    )
    checked("laytune's pack kernel")
    rows.append(Row(case, "laytune pack (generated)", timing, gbs(timing), f"`{layout.index_map}`"))

    if blas.omatcopy_missing is not None:
        rows.append(Row(case, "CLBlast omatcopy", None, note="skipped: see above"))
    else:
        timing = measure(
            lambda: blas.transpose(queue, src, dst, size, size), queue, warmup=2, repeats=repeats
        )
        checked("CLBlast's omatcopy")
        note = "CLBlastSomatcopy through the C API (pyclblast does not wrap it)"
        rows.append(Row(case, "CLBlast omatcopy", timing, gbs(timing), note))
    return rows


# -- matmul ---------------------------------------------------------------------------


class _Preferred:
    """A stand-in for an optuna trial that answers each choice from a profile."""

    def __init__(self, profile: Mapping[str, Any]) -> None:
        self.profile = dict(profile)

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        base = name.split("|")[0]
        wanted = self.profile.get(base, "identity()" if base.startswith("layout:") else None)
        return wanted if wanted in choices else choices[0]


def matmul_candidates(space: SearchSpace, extra: int, seed: int) -> list[Candidate]:
    """The identity first, then the profiles, then ``extra`` random draws; no repeats."""
    found = [space.identity(), *(space.suggest(_Preferred(p)) for p in PROFILES)]
    if extra:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
        found += [space.suggest(study.ask()) for _ in range(extra)]
    return list({c.key: c for c in found}.values())


def laytune_matmul(
    device: Device, builder: Builder, n: int, repeats: int, extra: int
) -> tuple[list[Row], str]:
    """Rows for the best candidate and the identity, and a note on the best."""
    workload = ops.matmul(n, n, n)
    space = SearchSpace(workload, device.info)
    programs, kept, refused = [], [], 0
    candidates = matmul_candidates(space, extra, seed=n)
    identity_key = candidates[0].key
    for candidate in candidates:
        try:
            programs.append(lower(workload, candidate, device=device.info))
        except LayoutRejectedError:
            refused += 1
            continue
        kept.append(candidate)
    config = MeasureConfig(warmup=1, repeats=repeats, measure_conversions=False, time_limit_s=120)
    with Runner(device, config) as runner:
        results = runner.run([RunInput(b, workload) for b in builder.build(programs)])
    measured = [
        (Timing(r.value_s, statistics.median(r.wall_times_s)), c)
        for r, c in zip(results, kept, strict=True)
        if r.ok and r.value_s is not None
    ]
    failed = len(kept) - len(measured)
    if not measured:
        return [Row(f"matmul {n}", "laytune", None, note="no candidate gave a verified result")], ""
    case = f"matmul {n}"
    (best_timing, best), *_ = sorted(measured, key=lambda tc: tc[0].event_s or tc[0].wall_s)
    flops = 2 * n**3
    tried = f"best of {len(measured)} verified candidates"
    if refused or failed:
        tried += f" ({refused} refused by lowering, {failed} failed)"
    rows = [
        Row(case, "laytune, best candidate", best_timing, _gflops(flops, best_timing), tried),
    ]
    identity = next((t for t, c in measured if c.key == identity_key), None)
    if identity is not None:
        rows.append(
            Row(case, "laytune, identity candidate", identity, _gflops(flops, identity), "baseline")
        )
    return rows, f"laytune's best at {n}: {best.describe()}"


def _gflops(flops: int, timing: Timing) -> str:
    return f"{flops / timing.wall_s / 1e9:.1f}"


def peer_matmul(context: Any, queue: Any, blas: CLBlast, n: int, repeats: int) -> list[Row]:
    import pyopencl.array as cla

    case, flops = f"matmul {n}", 2 * n**3
    rng = np.random.default_rng(n)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    c = np.empty((n, n), np.float32)
    timing = measure(lambda: np.matmul(a, b, out=c), None, warmup=2, repeats=repeats, events=False)
    reference = c.copy()
    scale = float(np.abs(reference).max())
    rows = [Row(case, "numpy", timing, _gflops(flops, timing), "on the host, its BLAS threads")]
    if blas.missing is not None:
        rows.append(Row(case, "CLBlast sgemm", None, note="skipped: see above"))
        return rows
    a_dev, b_dev = cla.to_device(queue, a), cla.to_device(queue, b)
    c_dev = cla.zeros(queue, (n, n), np.float32)
    timing = measure(
        lambda: blas.sgemm(queue, a_dev, b_dev, c_dev),
        queue,
        warmup=2,
        repeats=repeats,
        events=False,
    )
    error = float(np.abs(c_dev.get() - reference).max()) / scale
    if error > 1e-3:
        raise SystemExit(f"CLBlast's sgemm at {n} is off by {error:.2g} (relative)")
    note = f"max error {error:.1e} relative to the largest element of C"
    rows.append(Row(case, "CLBlast sgemm", timing, _gflops(flops, timing), note))
    return rows


# -- main -----------------------------------------------------------------------------


def _versions(blas: CLBlast) -> str:
    import pyopencl as cl

    clblast = f"pyclblast {blas.version}" + (f" ({blas.library})" if blas.library else "")
    return (
        f"laytune {laytune.__version__}, pyopencl {cl.VERSION_TEXT}, {clblast}, "
        f"numpy {np.__version__}"
    )


def main(argv: Sequence[str] | None = None) -> None:
    import pyopencl as cl

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7, help="timed repeats (7)")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="matmul n")
    parser.add_argument("--random", type=int, default=0, help="extra random matmul candidates")
    parser.add_argument("--out", type=Path, default=RESULTS, help="markdown file to write")
    args = parser.parse_args(argv)

    device = default_device()
    blas = CLBlast()
    if blas.skipped:
        print(blas.skipped)
    context = cl.Context([device.open()])
    queue = cl.CommandQueue(context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    started = time.perf_counter()

    rows = transpose_rows(context, queue, blas, args.repeats)
    notes = []
    with Builder(device) as builder:
        for n in args.sizes:
            ours, note = laytune_matmul(device, builder, n, args.repeats, args.random)
            rows += ours + peer_matmul(context, queue, blas, n, args.repeats)
            notes += [note] if note else []

    info = device.info
    lines = [
        "# laytune against its peers",
        "",
        f"Device: {device.name} ({info.device_type}, {info.compute_units} compute units).",
        f"Versions: {_versions(blas)}.",
        *([f"{blas.skipped}."] if blas.skipped else []),
        f"Run: {datetime.date.today().isoformat()}, medians of {args.repeats} repeats after "
        f"warm-up; wall = blocking call timed on the host; GB/s and GFLOP/s from the wall time; "
        f"{time.perf_counter() - started:.0f} s in all.",
        "",
        *_table(
            ["case", "implementation", "event (ms)", "wall (ms)", "GB/s or GFLOP/s", "note"],
            [
                [
                    r.case,
                    r.implementation,
                    _ms(r.timing.event_s) if r.timing else "-",
                    _ms(r.timing.wall_s) if r.timing else "-",
                    r.rate or "-",
                    r.note,
                ]
                for r in rows
            ],
        ),
        "",
        "laytune's matmul times are its compute kernel with A, B and C already in the "
        "candidate's layouts (pack/unpack not counted); CLBlast's sgemm may launch more "
        "than one kernel, so it has no event time.",
        "",
        *(f"- {note}" for note in notes),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
