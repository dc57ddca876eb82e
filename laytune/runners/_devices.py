"""Finding OpenCL devices and naming them so that another process can reopen them.

A :class:`Device` holds only plain values (two indices and a
:class:`~laytune.device_info.DeviceInfo` snapshot), never a pyopencl object, so
it pickles into the builder's and the runner's worker processes. A worker calls
:meth:`Device.open`, which finds the device again by its indices and checks
that the snapshot's key still matches (platform enumeration order is not
promised to be stable across processes, so a mismatch is an error rather than
a silent measurement on another device).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from laytune.device_info import DeviceInfo, probe_build
from laytune.exceptions import DeviceNotFoundError
from laytune.runners._opencl_runtime import register_opencl_runtimes

if TYPE_CHECKING:
    import pyopencl as cl

__all__ = ["Device", "default_device", "device_builds", "list_devices", "select_device"]


@dataclass(frozen=True)
class Device:
    """One OpenCL device, addressed by platform and device index.

    ``index`` counts devices over all platforms in listing order (what
    ``select_device(3)`` means); ``spec`` is the ``"platform:device"`` text
    that ``select_device`` also accepts.
    """

    index: int
    platform_index: int
    device_index: int
    info: DeviceInfo

    @property
    def spec(self) -> str:
        return f"{self.platform_index}:{self.device_index}"

    @property
    def key(self) -> str:
        return self.info.key

    @property
    def name(self) -> str:
        return self.info.name

    def open(self) -> cl.Device:
        """The live pyopencl device; raises DeviceNotFoundError if it is gone."""
        import pyopencl as cl

        register_opencl_runtimes()
        try:
            platform = cl.get_platforms()[self.platform_index]
            device = platform.get_devices()[self.device_index]
        except (IndexError, cl.Error) as exc:
            raise DeviceNotFoundError(
                f"device {self.spec} ({self.name}) is no longer present: {exc}"
            ) from exc
        found = DeviceInfo.key_of(device)
        if found != self.info.key:
            raise DeviceNotFoundError(
                f"device {self.spec} is now {device.name.strip()} "
                f"({device.platform.name.strip()}, key {found}), "
                f"not {self.name} (key {self.info.key})"
            )
        return device

    def __str__(self) -> str:
        return f"[{self.index}] {self.spec} {self.name}"


def list_devices() -> list[Device]:
    """Every device of every OpenCL platform, in platform then device order.

    A platform whose devices cannot be queried is left out rather than
    failing the listing.
    """
    import pyopencl as cl

    register_opencl_runtimes()
    try:
        platforms = cl.get_platforms()
    except cl.Error:
        # ocl-icd reports "no platforms" as an error (PLATFORM_NOT_FOUND_KHR).
        return []
    devices: list[Device] = []
    for p_index, platform in enumerate(platforms):
        try:
            cl_devices = platform.get_devices()
        except cl.Error:
            continue
        for d_index, cl_device in enumerate(cl_devices):
            info = DeviceInfo.from_cl_device(cl_device)
            devices.append(Device(len(devices), p_index, d_index, info))
    return devices


def select_device(spec: int | str | Device, devices: list[Device] | None = None) -> Device:
    """The device that ``spec`` names.

    ``spec`` is an ``int`` (or digits) indexing :func:`list_devices`, a
    ``"platform:device"`` index pair, or a case-insensitive substring of
    ``"device name (platform name)"``; the first device in listing order
    that contains it wins. A :class:`Device` is checked against the listing
    and returned. Raises :class:`~laytune.exceptions.DeviceNotFoundError`
    listing every device when nothing matches.
    """
    devices = list_devices() if devices is None else devices
    match: Device | None = None
    if isinstance(spec, Device):
        match = next((d for d in devices if d.key == spec.key and d.spec == spec.spec), None)
    elif isinstance(spec, int) or (isinstance(spec, str) and spec.strip().isdigit()):
        index = int(spec)
        match = devices[index] if 0 <= index < len(devices) else None
    elif isinstance(spec, str) and _is_index_pair(spec):
        p_index, d_index = (int(part) for part in spec.split(":"))
        match = next(
            (d for d in devices if (d.platform_index, d.device_index) == (p_index, d_index)),
            None,
        )
    elif isinstance(spec, str) and spec.strip():
        needle = spec.strip().lower()
        match = next((d for d in devices if needle in d.name.lower()), None)
    if match is None:
        raise DeviceNotFoundError(_not_found_message(spec, devices))
    return match


def _is_index_pair(text: str) -> bool:
    parts = text.strip().split(":")
    return len(parts) == 2 and all(part.strip().isdigit() for part in parts)


def _not_found_message(spec: object, devices: list[Device]) -> str:
    if not devices:
        return f"no OpenCL device matches {spec!r}: no OpenCL platform or device was found"
    listing = "\n".join(f"  {device}" for device in devices)
    return (
        f"no OpenCL device matches {spec!r}; select by index, by 'platform:device', "
        f"or by a name substring. Devices:\n{listing}"
    )


_PROBE = "__kernel void laytune_probe(__global float *a) { a[get_global_id(0)] = 1.0f; }"


def device_builds(device: Device) -> str | None:
    """None when ``device`` compiles a trivial kernel, else why not.

    A listed device is not always a usable one: PoCL 3.0 lists CPUs newer
    than its LLVM and then fails every build.
    """
    try:
        return probe_build(device.open(), _PROBE)
    except DeviceNotFoundError as exc:
        return str(exc).splitlines()[0].strip()


@lru_cache(maxsize=1)
def default_device() -> Device:
    """The device laytune uses when none is named: ``LAYTUNE_DEVICE`` if set
    (any :func:`select_device` spec), else the first GPU that builds a
    kernel, else the first device of any kind that does."""
    import os

    devices = list_devices()
    spec = os.environ.get("LAYTUNE_DEVICE")
    if spec:
        return select_device(spec, devices)
    ranked = sorted(devices, key=lambda d: ("GPU" not in d.info.device_type, d.index))
    failures = []
    for device in ranked:
        why = device_builds(device)
        if why is None:
            return device
        failures.append(f"  {device}: {why}")
    listing = "\n".join(failures) or "  (no OpenCL device found)"
    raise DeviceNotFoundError(
        "no OpenCL device here can build a kernel; install laytune with the 'pocl' "
        f"or 'intel' extra, or a vendor driver. Devices:\n{listing}"
    )
