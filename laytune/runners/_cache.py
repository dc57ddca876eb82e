"""The builder's binary cache: compiled programs on disk, keyed by device, source and options."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from laytune.codegen import KernelProgram

__all__ = ["BinaryCache"]

_FORMAT = 1
_MAGIC = b"laytune-binary\n"


class BinaryCache:
    """A directory of program binaries that a build already produced.

    An entry's key is the SHA-256 of the format version, the device key
    (platform, device, vendor, driver and OpenCL versions, so a new driver
    misses), the source and the build options. An entry is one file: a
    magic line, one JSON line (key fields, build log, binary length), then
    the binary's bytes. It is written to a temporary file and renamed, so a
    reader never sees half an entry and several processes may share the
    directory. Nothing in it is pickled or executed; an entry that does not
    parse or does not match is a miss.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def load(self, device_key: str, program: KernelProgram) -> tuple[bytes, str] | None:
        """(binary, build log) of ``program`` on the device, or None."""
        try:
            data = self._path(device_key, program).read_bytes()
        except OSError:
            return None
        if not data.startswith(_MAGIC):
            return None
        header_end = data.find(b"\n", len(_MAGIC))
        if header_end < 0:
            return None
        try:
            header = json.loads(data[len(_MAGIC) : header_end])
        except ValueError:
            return None
        binary = data[header_end + 1 :]
        expected = self._header(device_key, program)
        if (
            not isinstance(header, dict)
            or any(header.get(name) != value for name, value in expected.items())
            or header.get("binary_bytes") != len(binary)
            or not isinstance(header.get("build_log"), str)
        ):
            return None
        return binary, header["build_log"]

    def store(self, device_key: str, program: KernelProgram, binary: bytes, build_log: str) -> None:
        """Write an entry (atomically); raises OSError if the directory refuses it."""
        header = {
            **self._header(device_key, program),
            "binary_bytes": len(binary),
            "build_log": build_log,
        }
        line = json.dumps(header, sort_keys=True).encode() + b"\n"
        path = self._path(device_key, program)
        handle, temporary = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")
        try:
            with os.fdopen(handle, "wb") as file:
                file.write(_MAGIC + line + binary)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def _header(self, device_key: str, program: KernelProgram) -> dict[str, object]:
        return {
            "format": _FORMAT,
            "device_key": device_key,
            "source_sha256": hashlib.sha256(program.source.encode()).hexdigest(),
            "build_options": list(program.build_options),
        }

    def _path(self, device_key: str, program: KernelProgram) -> Path:
        header = json.dumps(self._header(device_key, program), sort_keys=True)
        return self.directory / f"{hashlib.sha256(header.encode()).hexdigest()}.bin"
