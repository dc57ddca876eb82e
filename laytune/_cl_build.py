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
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

__all__ = ["build_source"]


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
    return program.build(options=list(options), devices=devices)
