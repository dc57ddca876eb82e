"""The builder's binary cache: compiled programs on disk, keyed by device, source and options."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path

from laytune.codegen import KernelProgram
from laytune.exceptions import ConfigError

__all__ = ["DEFAULT_MAX_BYTES", "BinaryCache", "build_cache_dir"]

_FORMAT = 1
_MAGIC = b"laytune-binary\n"

#: The default cache's bound: past it the least recently used entries go.
DEFAULT_MAX_BYTES = 256 * 2**20


def build_cache_dir() -> Path | None:
    """Where jobs keep the binaries they built: ``binaries`` under laytune's
    cache directory (:func:`laytune.device_info.cache_dir`); None when
    ``LAYTUNE_BUILD_CACHE`` is ``0`` (every program is compiled)."""
    if os.environ.get("LAYTUNE_BUILD_CACHE", "").strip().lower() in {"0", "off", "no", "false"}:
        return None
    from laytune.device_info import cache_dir

    return cache_dir() / "binaries"


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

    With ``max_bytes``, a hit marks its entry used (its modification time),
    and a store that takes this process's count of the directory's bytes past
    the bound removes the least recently used entries down to three quarters
    of it (the count is taken from the directory at the first store, then
    kept by each store, so several processes together may pass the bound
    until one of them prunes).
    """

    def __init__(self, directory: str | os.PathLike[str], *, max_bytes: int | None = None) -> None:
        if max_bytes is not None and max_bytes <= 0:
            raise ConfigError(f"max_bytes must be positive or None, got {max_bytes}")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self._bytes: int | None = None  # this process's count of the entries' bytes

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
        if self.max_bytes is not None:
            with contextlib.suppress(OSError):  # another process pruned it meanwhile
                os.utime(self._path(device_key, program))
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
        if self.max_bytes is not None:
            if self._bytes is None:
                self._bytes = sum(size for size, _, _ in self._entries())
            else:
                self._bytes += len(_MAGIC) + len(line) + len(binary)
            if self._bytes > self.max_bytes:
                self.prune(self.max_bytes * 3 // 4)

    def prune(self, keep_bytes: int) -> int:
        """Remove the least recently used entries until at most ``keep_bytes``
        remain; returns how many were removed."""
        entries = sorted(self._entries(), key=lambda entry: entry[1])  # oldest first
        total = sum(size for size, _, _ in entries)
        removed = 0
        for size, _, path in entries:
            if total <= keep_bytes:
                break
            with contextlib.suppress(FileNotFoundError):  # another process took it
                path.unlink()
                removed += 1
            total -= size
        self._bytes = total
        return removed

    def _entries(self) -> list[tuple[int, float, Path]]:
        """(bytes, last use, path) of every entry."""
        found = []
        for path in self.directory.glob("*.bin"):
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            found.append((stat.st_size, stat.st_mtime, path))
        return found

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
