"""Reading the versioned JSON that layouts, index maps and candidates persist."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from laytune.exceptions import LayoutSyntaxError

__all__ = ["load_versioned"]


def load_versioned(
    data: Mapping[str, Any] | str,
    what: str,
    version: int,
    required: tuple[str, ...] = (),
    *,
    error: type[Exception] = LayoutSyntaxError,
    version_field: str = "version",
) -> Mapping[str, Any]:
    """``data`` (a JSON text or an already decoded object) as a mapping, after
    checking that it is an object, holds the ``required`` fields and was
    written in ``version`` (a missing version means the current one). Each
    failure raises ``error`` saying which."""
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as err:
            raise error(f"{what} JSON is not valid JSON: {err}") from None
    if not isinstance(data, Mapping):
        raise error(f"{what} JSON must be an object, got {data!r}")
    for name in required:
        if name not in data:
            raise error(f"{what} JSON needs the {name!r} field, got {dict(data)!r}")
    found = data.get(version_field, version)
    if found != version:
        label = version_field.replace("_", " ")
        raise error(f"{what} JSON {label} {found} is not supported (this laytune reads {version})")
    return data
