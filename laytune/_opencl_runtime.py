"""Make OpenCL runtimes installed from PyPI visible to pyopencl.

pyopencl's wheels bring their own ICD loader, which finds PoCL (the ``pocl``
extra) by itself. Intel's CPU runtime from PyPI (the ``intel`` extra) installs
``libintelocl.so`` into the environment's ``lib/`` but its vendor file names a
placeholder path, so the loader never sees it. This module writes a vendor
file with the real path and points ``OCL_ICD_VENDORS`` at it, before any
OpenCL call. It does nothing when the user has set ``OCL_ICD_VENDORS``
or when no such runtime is installed.

Why both runtimes: PoCL 3.0 (the newest on PyPI) bundles LLVM 14, which cannot
compile for CPUs newer than it ("unknown target CPU 'generic'" on AMD Zen 5);
Intel's runtime compiles there. Device selection picks a device that builds.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

__all__ = ["configure_icd_loader"]

_RUNTIMES = ("libintelocl.so",)


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
