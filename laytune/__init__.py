"""laytune: auto-tuning of memory layouts for OpenCL compute kernels.

The entry points users meet first are re-exported here, each imported on
first use (so that ``import laytune`` stays light, and the ``laytune``
program takes its stop signals over at once: :mod:`laytune.__main__`):
:class:`DeviceInfo`, :func:`tune` and :class:`TuneOptions` (laytune.search),
:func:`open_database`, :func:`freeze`, :func:`load_frozen` and
:func:`export` (laytune.records), :func:`load_model` (laytune.plan).
"""

from __future__ import annotations

from laytune._lazy import lazy_exports
from laytune.exceptions import LaytuneError

TYPE_CHECKING = False  # not typing's: importing typing would slow the program's start
if TYPE_CHECKING:
    from laytune.device_info import DeviceInfo
    from laytune.plan import load_model
    from laytune.records import export, freeze, load_frozen, open_database
    from laytune.search import TuneOptions, tune

__version__ = "0.1.0"

__all__ = [
    "DeviceInfo",
    "LaytuneError",
    "TuneOptions",
    "__version__",
    "export",
    "freeze",
    "load_frozen",
    "load_model",
    "open_database",
    "tune",
]

# each name is imported on first use (laytune._lazy)
__getattr__, __dir__ = lazy_exports(
    globals(),
    {
        "laytune.device_info": ("DeviceInfo",),
        "laytune.search": ("tune", "TuneOptions"),
        "laytune.records": ("open_database", "freeze", "load_frozen", "export"),
        "laytune.plan": ("load_model",),
    },
)
