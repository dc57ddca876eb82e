"""laytune: auto-tuning of memory layouts for OpenCL compute kernels."""

from __future__ import annotations

from laytune.device_info import DeviceInfo
from laytune.exceptions import LaytuneError

__version__ = "0.1.0"

__all__ = ["DeviceInfo", "LaytuneError", "__version__"]
