"""Make OpenCL runtimes installed from PyPI visible to pyopencl.

pyopencl's wheels bring their own ICD loader, which finds PoCL (the ``pocl``
extra) by itself. Intel's CPU runtime from PyPI (the ``intel`` extra) installs
``libintelocl.so`` into the environment's ``lib/`` but its vendor file names a
placeholder path, so the loader never sees it. This module writes a vendor
file with the real path and points ``OCL_ICD_VENDORS`` at it. It does
nothing when the user has set ``OCL_ICD_VENDORS`` or when no such runtime is
installed.

When: the loader reads ``OCL_ICD_VENDORS`` once, at the first OpenCL call of
the process, so :func:`register_opencl_runtimes` runs before laytune first
touches OpenCL (listing, selecting or opening a device, in this process and
in its build and measuring workers), never on import: importing laytune
changes neither the environment nor the file system.

Why both runtimes: PoCL 3.0 (the newest on PyPI) bundles LLVM 14, which cannot
compile for CPUs newer than it ("unknown target CPU 'generic'" on AMD Zen 5);
Intel's runtime compiles there. Device selection picks a device that builds.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

__all__ = ["configure_icd_loader", "register_opencl_runtimes"]

_RUNTIMES = ("libintelocl.so",)
_registered = False


def _vendor_dirs() -> list[Path]:
    return [
        Path(sys.prefix) / "etc" / "laytune" / "OpenCL" / "vendors",
        Path(tempfile.gettempdir()) / f"laytune-icd-{os.getuid()}",
    ]


def configure_icd_loader() -> str | None:
    """Register PyPI-installed runtimes; return the vendors folder used, if any."""
    if "OCL_ICD_VENDORS" in os.environ:
        return None
    libraries = [Path(sys.prefix) / "lib" / name for name in _RUNTIMES]
    libraries = [lib for lib in libraries if lib.exists()]
    if not libraries:
        return None
    for vendors in _vendor_dirs():
        try:
            vendors.mkdir(parents=True, exist_ok=True)
            for lib in libraries:
                icd = vendors / f"laytune-{lib.stem}.icd"
                if not icd.exists() or icd.read_text().strip() != str(lib):
                    icd.write_text(f"{lib}\n")
        except OSError:
            continue
        os.environ["OCL_ICD_VENDORS"] = str(vendors)
        return str(vendors)
    return None


def register_opencl_runtimes() -> None:
    """Make the OpenCL runtimes installed from PyPI visible to pyopencl, once
    per process (see the module's docstring).

    laytune calls it before its first OpenCL call; code that calls pyopencl
    itself before laytune lists a device calls it first to see them.
    """
    global _registered
    if not _registered:
        _registered = True
        configure_icd_loader()
