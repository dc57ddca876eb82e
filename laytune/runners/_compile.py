"""Compiling one program; runs inside the builder's worker processes."""

from __future__ import annotations

import os
import time
import warnings

import pyopencl as cl

from laytune._cl_build import LOG_NOTE, build_logs, build_program, build_source
from laytune.codegen import KernelProgram
from laytune.runners._devices import Device
from laytune.runners._results import BuildResult, ErrorKind

__all__ = ["compile_program", "warm_worker"]

# One context per device and worker process, made on the first build.
_CONTEXTS: dict[str, tuple[cl.Context, cl.Device]] = {}


def _context(device: Device) -> tuple[cl.Context, cl.Device]:
    if device.key not in _CONTEXTS:
        cl_device = device.open()
        _CONTEXTS[device.key] = (cl.Context([cl_device]), cl_device)
    return _CONTEXTS[device.key]


_PROBE = "__kernel void laytune_warm_up(__global float *a) { a[get_global_id(0)] = 0.0f; }"


def warm_worker(device: Device, hold_s: float) -> int:
    """Open this worker's context on ``device`` and compile a probe kernel (the
    first build of a process loads the compiler), then hold the worker for
    ``hold_s`` so that other pending calls go to other workers. Returns the pid."""
    context, cl_device = _context(device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        build_source(context, _PROBE, (), [cl_device])  # the driver builds, not a cache
    time.sleep(hold_s)
    return os.getpid()


def compile_program(device: Device, program: KernelProgram) -> BuildResult:
    """Compile ``program`` for ``device`` and return its binary or its build log."""
    started_at = time.time()
    start = time.perf_counter()

    def result(**fields: object) -> BuildResult:
        return BuildResult(
            program=program,
            device_key=device.key,
            build_seconds=time.perf_counter() - start,
            worker_pid=os.getpid(),
            started_at=started_at,
            finished_at=time.time(),
            **fields,  # type: ignore[arg-type]
        )

    context, cl_device = _context(device)
    cl_program = cl.Program(context, program.source)
    with warnings.catch_warnings():
        # pyopencl warns about a non-empty build log and about touching the
        # program before building it. Touching it is on purpose: it makes
        # pyopencl build through the driver (which keeps its own cache) rather
        # than through pyopencl's binary cache, which hides the build log of
        # a failure.
        warnings.simplefilter("ignore")
        cl_program.get_info(cl.program_info.REFERENCE_COUNT)
        try:
            build_program(cl_program, program.build_options, [cl_device])
        except cl.Error as exc:
            # the compiler's stderr, where it wrote any (the log is read below)
            notes = [n for n in getattr(exc, "__notes__", []) if not n.startswith(LOG_NOTE)]
            return result(
                binary=None,
                error_kind=ErrorKind.BUILD,
                error_message=(
                    f"clBuildProgram failed for {program.name!r}: "
                    f"{cl.status_code.to_string(exc.code)} ({exc.code}); "
                    f"options {' '.join(program.build_options) or '(none)'}"
                ),
                build_log="\n\n".join([build_logs(cl_program, [cl_device]), *notes]).strip(),
                cl_error_code=exc.code,
            )
    binaries = cl_program.get_info(cl.program_info.BINARIES)
    return result(binary=bytes(binaries[0]), build_log=build_logs(cl_program, [cl_device]))
