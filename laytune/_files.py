"""Files laytune writes for a user (frozen layouts, figures): whole or not at all.

:func:`write_atomically` writes into a new file beside the target and
renames it over the target only once every byte is on disk, so a reader
never sees half a file, and a failed write (a full disk, a missing folder)
leaves the target as it was and nothing else behind. Its errors are the
caller's exception type with one line that names the file and the cause.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import IO

from laytune.exceptions import LaytuneError

__all__ = ["check_writable", "os_error_text", "write_atomically"]


def os_error_text(err: OSError, path: str | os.PathLike[str]) -> str:
    """Why writing ``path`` failed, in words that name the place: a full disk
    names the folder whose disk is full."""
    folder = Path(path).expanduser().resolve().parent
    if err.errno == errno.ENOSPC:
        return f"the disk is full (no space left on the device holding {folder})"
    if err.errno == errno.EDQUOT:
        return f"the disk quota is used up (on the device holding {folder})"
    return err.strerror or str(err)


def check_writable(path: str | os.PathLike[str], error: type[LaytuneError]) -> Path:
    """``path`` as a Path, if a file can be written there: its folder exists
    and it is not a folder itself; else ``error`` saying which."""
    out = Path(path).expanduser()
    if out.is_dir():
        raise error(f"cannot write {os.fspath(path)}: it is a folder")
    folder = out.parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise error(f"cannot write {os.fspath(path)}: folder {folder} {what}")
    return out


def write_atomically(
    path: str | os.PathLike[str],
    write: Callable[[IO[bytes]], None],
    *,
    error: type[LaytuneError],
) -> Path:
    """Write ``path`` whole: ``write`` fills a new file in the same folder,
    which is synced and then renamed over ``path``. On any failure the new
    file is removed and ``path`` keeps what it held; an OSError becomes
    ``error`` naming ``path`` (a full disk as such, see :func:`os_error_text`),
    anything else ``write`` raises goes on as it is."""
    out = check_writable(path, error)
    shown = os.fspath(path)
    while True:
        tmp = out.with_name(f".{out.name}.{secrets.token_hex(4)}.tmp")
        try:
            # 0o666: the mode any new file gets, less the umask
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            break
        except FileExistsError:
            continue
        except OSError as err:
            raise error(f"cannot write {shown}: {os_error_text(err, out)}") from None
    try:
        with os.fdopen(fd, "wb") as stream:
            write(stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(tmp, out)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(err, OSError):
            raise error(f"cannot write {shown}: {os_error_text(err, out)}") from None
        raise
    return out
