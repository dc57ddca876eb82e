"""An OpenCL call that fails inside the measuring process is a failure of
the candidate that names the call, the status and its code."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from laytune.runners import ErrorKind, _measure
from laytune.runners._devices import Device


def test_a_binary_the_device_refuses_is_a_build_failure_naming_its_status(device: Device) -> None:
    session = _measure.DeviceSession(device)
    program = SimpleNamespace(build_options=())
    with pytest.raises(_measure._Failure) as failed:
        _measure._load_binary(session, program, b"not a program binary")  # type: ignore[arg-type]
    failure = failed.value
    assert failure.kind == ErrorKind.BUILD
    assert failure.code is not None and failure.code < 0
    status = _measure._status_name(failure.code)
    assert failure.message == (
        f"creating the program from its binary failed: {status} ({failure.code})"
    )
    assert status != "UNKNOWN_STATUS"
