"""The device queries pyopencl does not expose, on the devices here."""

from __future__ import annotations

import pyopencl as cl

from laytune._cl_queries import compute_capability_nv, sub_group_sizes_intel
from laytune.runners import register_opencl_runtimes


def _devices() -> list[cl.Device]:
    register_opencl_runtimes()
    return [d for p in cl.get_platforms() for d in p.get_devices()]


def test_compute_capability_only_where_the_device_reports_it() -> None:
    for device in _devices():
        capability = compute_capability_nv(device)
        if "cl_nv_device_attribute_query" not in device.extensions.split():
            assert capability is None, device.name
        else:
            assert capability is not None and capability >= (1, 0), device.name


def test_sub_group_sizes_only_where_the_device_reports_them() -> None:
    for device in _devices():
        sizes = sub_group_sizes_intel(device)
        if "cl_intel_required_subgroup_size" not in device.extensions.split():
            assert sizes == (), device.name
        else:
            assert sizes and list(sizes) == sorted(sizes), device.name
