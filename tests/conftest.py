"""Shared fixtures: an OpenCL context on the device laytune picks by default.

That is the first device here that builds a kernel (PoCL or Intel's CPU
runtime, both installed from PyPI), so these tests run everywhere and nothing
is skipped. ``LAYTUNE_DEVICE`` selects another one.
"""

from __future__ import annotations

import pyopencl as cl
import pytest

from laytune.runners import Device, default_device


@pytest.fixture(scope="session")
def laytune_device() -> Device:
    return default_device()


@pytest.fixture(scope="session")
def cl_device(laytune_device: Device) -> cl.Device:
    return laytune_device.open()


@pytest.fixture(scope="session")
def cl_context(cl_device: cl.Device) -> cl.Context:
    return cl.Context([cl_device])


@pytest.fixture(scope="session")
def cl_queue(cl_context: cl.Context) -> cl.CommandQueue:
    return cl.CommandQueue(cl_context)
