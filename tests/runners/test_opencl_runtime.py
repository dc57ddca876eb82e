"""Registering an OpenCL runtime installed from PyPI with pyopencl's ICD loader."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from laytune.runners import _opencl_runtime


def test_leaves_a_user_setting_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OCL_ICD_VENDORS", "/somewhere/else")
    assert _opencl_runtime.configure_icd_loader() is None


def test_writes_a_vendor_file_naming_the_installed_library(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "lib").mkdir()
    library = tmp_path / "lib" / "libintelocl.so"
    library.write_bytes(b"")
    monkeypatch.delenv("OCL_ICD_VENDORS", raising=False)
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    vendors = _opencl_runtime.configure_icd_loader()
    assert vendors is not None
    icd = Path(vendors) / "laytune-libintelocl.icd"
    assert icd.read_text().strip() == str(library)
    assert os.environ["OCL_ICD_VENDORS"] == vendors


def test_does_nothing_without_a_runtime(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("OCL_ICD_VENDORS", raising=False)
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    assert _opencl_runtime.configure_icd_loader() is None
