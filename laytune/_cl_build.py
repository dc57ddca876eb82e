"""Building OpenCL C source without pyopencl's binary cache.

``pyopencl.Program.build`` keeps built binaries in a cache directory guarded
by a lock file that it creates and deletes itself. A process killed while it
holds the lock (SIGKILL, the OOM killer) leaves the file behind; every later
build through the cache then waits a minute for it and fails. laytune's jobs
are killed on purpose (Ctrl-C twice, a hung kernel's worker) and keep their
own cache of binaries (:class:`laytune.runners.Builder`'s ``cache_dir``), so
builds of source go through :func:`build_source`, which asks the driver
directly (drivers keep caches of their own) by touching the program before
building it, as the builder's workers (``runners/_compile.py``) do, which
need its build log after a failure.

Every build here and in the runners runs inside :func:`compiler_output`, so
what a compiler writes to the process's stderr (Intel's CPU compiler prints
a crash banner that asks the reader to file a bug report) stays out of the
user's terminal, and a failed build carries it in its error.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = [
    "LOG_NOTE",
    "build_binary",
    "build_logs",
    "build_program",
    "build_source",
    "compiler_output",
    "with_output",
]

#: How the note that carries a failed build's log (where the error lacks it) begins.
LOG_NOTE = "build log:\n"


@contextlib.contextmanager
def compiler_output() -> Iterator[list[str]]:
    """What the compiler writes to this process's stderr (file descriptor 2)
    inside the block, kept out of the user's terminal and handed back as the
    one item of the yielded list when the block ends. The file it is caught
    in has no name, so a process that dies in the block leaves nothing."""
    got: list[str] = []
    sys.stderr.flush()
    with tempfile.TemporaryFile() as sink:
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            yield got
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            got.append(sink.read().decode(errors="replace").strip())


def with_output(text: str, output: list[str]) -> str:
    """``text`` followed by the compiler's stderr, where it wrote any."""
    written = output[0] if output else ""
    if not written:
        return text
    return f"{text}\n\ncompiler's stderr:\n{written}".strip()


def build_program(program: Any, options: Sequence[str], devices: Sequence[Any] | None) -> Any:
    """``program.build(options, devices)`` inside :func:`compiler_output`;
    a failure is raised as ``build`` raised it, with what the compiler wrote
    to stderr as a note (``with_output``'s text)."""
    with compiler_output() as output:
        try:
            return program.build(options=list(options), devices=devices)
        except Exception as exc:
            failed = exc
    log = build_logs(program, devices)
    if log and log not in str(failed):
        failed.add_note(LOG_NOTE + log)
    if output[0]:
        failed.add_note(with_output("", output))
    raise failed


def build_logs(program: Any, devices: Sequence[Any] | None) -> str:
    """The build logs of ``program`` on ``devices`` (default: the
    program's), joined; pyopencl puts them in the error it raises on some
    drivers, not on others (NVIDIA's: ``BUILD_PROGRAM_FAILURE`` alone)."""
    import pyopencl as cl

    try:
        targets = list(devices) if devices else list(program.get_info(cl.program_info.DEVICES))
        logs = [str(program.get_build_info(d, cl.program_build_info.LOG)).strip() for d in targets]
    except (cl.Error, AttributeError, TypeError):
        return ""
    return "\n".join(log for log in logs if log)


def build_binary(context: Any, device: Any, binary: bytes, options: Sequence[str] = ()) -> Any:
    """``cl.Program(context, [device], [binary]).build(options)`` (a CPU
    runtime compiles the binary's intermediate code here); raises what
    ``build`` raises."""
    import pyopencl as cl

    program = cl.Program(context, [device], [binary])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cl.CompilerWarning)
        return build_program(program, options, None)


def build_source(
    context: Any, source: str, options: Sequence[str] = (), devices: Sequence[Any] | None = None
) -> Any:
    """``cl.Program(context, source).build(options, devices)``, bypassing
    pyopencl's binary cache; raises what ``build`` raises."""
    import pyopencl as cl

    program = cl.Program(context, source)
    # Touching the program first makes pyopencl build it through the driver
    # at once: its cached path, even with ``cache_dir=False``, saves the
    # source of every failed build to a temporary file that nothing removes
    # (one per failing candidate of a job).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pyopencl warns of the touch itself
        program.get_info(cl.program_info.REFERENCE_COUNT)
    return build_program(program, options, devices)
