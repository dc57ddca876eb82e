from __future__ import annotations

import pickle
import re
import subprocess
import sys

import pytest

from laytune.codegen import GENERIC_DEVICE
from laytune.device_info import PROBED_BUILTINS, probe_builtins
from laytune.exceptions import DeviceNotFoundError
from laytune.runners import Device, DeviceInfo, default_device, list_devices, select_device

pytestmark = pytest.mark.xdist_group("runners")


def test_list_devices_gives_indexed_snapshots() -> None:
    devices = list_devices()
    assert devices, "the OpenCL install should bring at least one device"
    assert [d.index for d in devices] == list(range(len(devices)))
    for device in devices:
        assert isinstance(device.info, DeviceInfo)
        assert device.info.max_work_group_size >= 1
        assert device.spec == f"{device.platform_index}:{device.device_index}"


def test_select_by_index_pair_name_and_device(device: Device) -> None:
    assert select_device(device.index) == device
    assert select_device(str(device.index)) == device
    assert select_device(device.spec) == device
    assert select_device(device) == device
    by_name = select_device(device.info.device_name.upper())
    assert device.info.device_name in by_name.name


def test_no_match_lists_every_device() -> None:
    devices = list_devices()
    for spec in ("no such device xyz", 999, "7:7"):
        with pytest.raises(DeviceNotFoundError) as caught:
            select_device(spec)
        message = str(caught.value)
        assert repr(spec) in message
        for device in devices:
            assert device.name in message


def test_no_devices_at_all_is_explained() -> None:
    with pytest.raises(LookupError, match="no OpenCL platform or device"):
        select_device(0, devices=[])


def test_device_pickles_and_reopens(device: Device) -> None:
    clone = pickle.loads(pickle.dumps(device))
    assert clone == device
    assert clone.open().name.strip() == device.info.device_name


def test_a_devices_key_reads_from_its_identity_as_from_its_snapshot() -> None:
    """Reopening a device checks its key without a snapshot (whose built-in
    probe builds a program), and a device that moved is named."""
    import pyopencl as cl

    for device in list_devices():
        opened = device.open()
        assert DeviceInfo.key_of(opened) == DeviceInfo.from_cl_device(opened).key == device.key
    first = list_devices()[0]
    elsewhere = Device(first.index, first.platform_index, first.device_index, GENERIC_DEVICE)
    with pytest.raises(DeviceNotFoundError, match=re.escape(f"is now {first.info.device_name}")):
        elsewhere.open()
    assert isinstance(first.open(), cl.Device)


def test_device_key_is_stable_across_processes(device: Device) -> None:
    code = f"from laytune.runners import select_device\nprint(select_device({device.spec!r}).key)\n"
    keys = {
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
        for _ in range(2)
    }
    assert keys == {device.key}


def test_the_probed_builtins_are_recorded_and_round_trip() -> None:
    """Intel's CPU runtime compiles with clang: it has nontemporal stores; a
    source that uses a built-in the compiler lacks is not recorded."""
    device = default_device()
    info = device.info
    assert set(info.builtins) <= set(PROBED_BUILTINS)
    if "Intel" in info.platform_name:
        assert info.has_builtin("nontemporal_store")
    assert DeviceInfo.from_json(info.to_json()) == info
    assert DeviceInfo.from_json({**info.to_json(), "builtins": []}).builtins == ()
    assert probe_builtins(device.open()) == info.builtins  # probed once, then remembered


def test_source_builds_never_take_pyopencls_cache_lock(
    device: Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyopencl guards its binary cache with a lock file that a killed process
    leaves behind (every later cached build then waits a minute and fails):
    laytune's builds of source do not go near it."""
    import pyopencl as cl
    import pyopencl.cache

    from laytune.runners import build_source

    def locked(*args: object) -> None:
        raise AssertionError("took pyopencl's cache lock")

    monkeypatch.setattr(pyopencl.cache.CacheLockManager, "__init__", locked)
    context = cl.Context([device.open()])
    program = build_source(context, "__kernel void k(__global float *a) { a[0] = 1.0f; }")
    assert program.k.function_name == "k"
    with pytest.raises(cl.Error, match="BUILD_PROGRAM_FAILURE"):
        build_source(context, "__kernel void k( {")


def test_a_failed_source_build_leaves_no_file_behind(
    device: Device, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyopencl's cached build path saves the source of a failed build to a
    temporary file that nothing removes: one per failing candidate of a job."""
    import tempfile

    import pyopencl as cl

    from laytune.runners import build_source

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    context = cl.Context([device.open()])
    with pytest.raises(cl.Error, match="BUILD_PROGRAM_FAILURE"):
        build_source(context, "__kernel void k(__global float *a) { a[0] = nofn(1.0f); }")
    assert list(tmp_path.iterdir()) == []


def test_probe_builds_are_remembered_on_disk_and_a_bad_file_is_a_miss(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A probe build's outcome (the default device's choice, the built-ins)
    is kept per device, driver and source: a new process reads it back
    instead of building, a failure keeps its error line, and a file that does
    not parse is built again."""
    from laytune import device_info

    opened = default_device().open()
    monkeypatch.setenv("LAYTUNE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(device_info, "_PROBED", {})  # a new process
    built: list[str] = []
    real = device_info.build_source
    monkeypatch.setattr(
        device_info,
        "build_source",
        lambda ctx, src, opts=(): (built.append(src), real(ctx, src, opts)),
    )
    good = "__kernel void k(__global float *a) { a[0] = 2.0f; }"
    bad = "__kernel void k(__global float *a) { a[0] = no_such_function(1.0f); }"
    assert device_info.probe_build(opened, good) is None
    error = device_info.probe_build(opened, bad)
    assert error and "no_such_function" in error
    assert built == [good, bad]
    files = sorted((tmp_path / "probes").glob("*.json"))
    assert len(files) == 2
    monkeypatch.setattr(device_info, "_PROBED", {})
    assert device_info.probe_build(opened, good) is None
    assert device_info.probe_build(opened, bad) == error
    assert built == [good, bad], "read back, not built again"
    for file in files:
        file.write_text('{"format": 1, "err')  # cut short
    monkeypatch.setattr(device_info, "_PROBED", {})
    assert "no_such_function" in device_info.probe_build(opened, bad)
    assert built == [good, bad, bad]
    assert device_info.probe_build(opened, good, ("-cl-fast-relaxed-math",)) is None
    assert len(list((tmp_path / "probes").glob("*.json"))) == 3  # options are part of the key


def test_a_snapshot_holds_the_devices_cache_line_and_round_trips() -> None:
    """The cache line is read from the device (the transposing starts size
    their work-groups by it) and survives the snapshot's JSON."""
    for device in list_devices():
        opened = device.open()
        info = DeviceInfo.from_cl_device(opened)
        assert info.cacheline_size == int(opened.global_mem_cacheline_size)
        assert DeviceInfo.from_json(info.to_json()) == info
