"""laytune: auto-tuning of memory layouts for OpenCL compute kernels."""

from __future__ import annotations

from laytune._opencl_runtime import configure_icd_loader

configure_icd_loader()  # before anything calls into OpenCL

from laytune.device_info import DeviceInfo  # noqa: E402
from laytune.exceptions import LaytuneError  # noqa: E402

__version__ = "0.1.0"

__all__ = ["DeviceInfo", "LaytuneError", "__version__"]
