"""Device queries that pyopencl does not expose, through the OpenCL C API.

pyopencl answers ``get_info`` only for the parameters it knows; Intel's
``CL_DEVICE_SUB_GROUP_SIZES_INTEL`` (``cl_intel_required_subgroup_size``) is
not one of them, and NVIDIA's compute capability
(``cl_nv_device_attribute_query``) is one only in some pyopencl builds.
:func:`sub_group_sizes_intel` and :func:`compute_capability_nv` call
``clGetDeviceInfo``
through :mod:`ctypes` on the device pyopencl opened: any ICD loader
dispatches a device handle of any platform, so the loader pyopencl bundles
(or the system's) serves.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import os
from typing import Any

__all__ = [
    "CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV",
    "CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV",
    "CL_DEVICE_SUB_GROUP_SIZES_INTEL",
    "compute_capability_nv",
    "sub_group_sizes_intel",
]

CL_DEVICE_SUB_GROUP_SIZES_INTEL = 0x4108
CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV = 0x4000
CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV = 0x4001


@functools.cache
def _opencl_library() -> Any | None:
    import pyopencl

    bundled = sorted(
        glob.glob(os.path.join(os.path.dirname(pyopencl.__file__), ".libs", "libOpenCL*"))
    )
    system = ctypes.util.find_library("OpenCL")
    for path in [*bundled, *([system] if system else [])]:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        query = lib.clGetDeviceInfo
        query.argtypes = [
            ctypes.c_void_p,
            ctypes.c_uint32,
            ctypes.c_size_t,
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_size_t),
        ]
        query.restype = ctypes.c_int32
        return lib
    return None


def sub_group_sizes_intel(device: Any) -> tuple[int, ...]:
    """The sub-group sizes a ``pyopencl.Device`` supports
    (``CL_DEVICE_SUB_GROUP_SIZES_INTEL``), ascending; empty when the device
    does not report them (no ``cl_intel_required_subgroup_size``) or no
    OpenCL library can be loaded."""
    if "cl_intel_required_subgroup_size" not in device.extensions.split():
        return ()
    lib = _opencl_library()
    if lib is None:
        return ()
    handle = ctypes.c_void_p(device.int_ptr)
    size = ctypes.c_size_t(0)
    if lib.clGetDeviceInfo(handle, CL_DEVICE_SUB_GROUP_SIZES_INTEL, 0, None, ctypes.byref(size)):
        return ()
    count = size.value // ctypes.sizeof(ctypes.c_size_t)
    values = (ctypes.c_size_t * count)()
    if lib.clGetDeviceInfo(handle, CL_DEVICE_SUB_GROUP_SIZES_INTEL, size.value, values, None):
        return ()
    return tuple(sorted(int(v) for v in values))


def compute_capability_nv(device: Any) -> tuple[int, int] | None:
    """NVIDIA's (major, minor) compute capability of a ``pyopencl.Device``
    (``CL_DEVICE_COMPUTE_CAPABILITY_{MAJOR,MINOR}_NV``, two ``cl_uint``);
    None when the device lacks ``cl_nv_device_attribute_query`` or no OpenCL
    library answers."""
    if "cl_nv_device_attribute_query" not in device.extensions.split():
        return None
    lib = _opencl_library()
    if lib is None:
        return None
    handle = ctypes.c_void_p(device.int_ptr)
    values = []
    for param in (CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV, CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV):
        value = ctypes.c_uint32(0)
        if lib.clGetDeviceInfo(handle, param, ctypes.sizeof(value), ctypes.byref(value), None):
            return None
        values.append(int(value.value))
    return values[0], values[1]
