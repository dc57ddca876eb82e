"""Devices written by hand, so that a test of the starts' forms reads the
same limits on every machine."""

from __future__ import annotations

from laytune.device_info import DeviceInfo


def written_cpu(lanes: int = 16) -> DeviceInfo:
    """A 2-core CPU whose float vectors hold ``lanes`` (16: AVX-512)."""
    return DeviceInfo(
        platform_name="Hand",
        device_name=f"Written CPU {lanes}",
        device_type="CPU",
        compute_units=2,
        max_work_group_size=8192,
        max_work_item_sizes=(8192, 8192, 8192),
        preferred_vector_widths=(("float", lanes),),
    )
