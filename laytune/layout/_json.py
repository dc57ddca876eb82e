"""Reading the versioned JSON that layouts, index maps and candidates persist.

JSON text is bounded before and after decoding: at most
:data:`MAX_JSON_LENGTH` characters, and values nested at most
:data:`MAX_JSON_NESTING` levels deep (laytune writes fewer than ten), so that
neither the decoder nor whatever walks the decoded value later can run out
of stack or memory. A text past either bound raises the caller's error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from laytune.exceptions import LayoutSyntaxError

__all__ = ["MAX_JSON_LENGTH", "MAX_JSON_NESTING", "check_nesting", "load_versioned", "loads"]

#: The longest JSON text decoded (characters): a record with a large
#: generated program is a few hundred kilobytes.
MAX_JSON_LENGTH = 16 << 20
#: The deepest nesting of arrays and objects accepted.
MAX_JSON_NESTING = 64


def loads(
    text: str | bytes,
    what: str,
    *,
    error: type[Exception] = LayoutSyntaxError,
    max_length: int = MAX_JSON_LENGTH,
) -> Any:
    """Decode ``text`` within the bounds above; ``error`` says what is wrong
    (not JSON, too long, too deeply nested), never RecursionError or MemoryError."""
    if len(text) > max_length:
        raise error(
            f"{what} JSON is {len(text)} characters long, more than the {max_length} laytune reads"
        )
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise error(f"{what} JSON is not valid JSON: {err}") from None
    except UnicodeDecodeError as err:
        raise error(f"{what} JSON is not UTF-8 text: {err}") from None
    except RecursionError:
        raise error(
            f"{what} JSON nests arrays or objects more than {MAX_JSON_NESTING} levels deep"
        ) from None
    except MemoryError:
        raise error(f"{what} JSON of {len(text)} characters does not fit in memory") from None
    check_nesting(data, what, error=error)
    return data


def check_nesting(data: Any, what: str, *, error: type[Exception] = LayoutSyntaxError) -> None:
    """Raise ``error`` when ``data`` (decoded JSON) nests arrays or objects more
    than :data:`MAX_JSON_NESTING` levels deep; walks without recursion."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, Mapping):
            children: Any = value.values()
        elif isinstance(value, list | tuple):
            children = value
        else:
            continue
        if depth > MAX_JSON_NESTING:
            raise error(
                f"{what} JSON nests arrays or objects more than {MAX_JSON_NESTING} levels deep"
            )
        stack.extend((child, depth + 1) for child in children)


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
    failure raises ``error`` saying which; a text is decoded by :func:`loads`,
    and either is held to :data:`MAX_JSON_NESTING`."""
    if isinstance(data, str | bytes):
        data = loads(data, what, error=error)
    else:
        check_nesting(data, what, error=error)
    if not isinstance(data, Mapping):
        raise error(f"{what} JSON must be an object, got {_short(data)}")
    for name in required:
        if name not in data:
            raise error(f"{what} JSON needs the {name!r} field, got {_short(dict(data))}")
    found = data.get(version_field, version)
    if found != version:
        label = version_field.replace("_", " ")
        raise error(
            f"{what} JSON {label} {_short(found)} is not supported (this laytune reads {version})"
        )
    return data


def _short(value: Any, limit: int = 200) -> str:
    """``repr(value)`` cut to ``limit`` characters: messages name the value,
    not a whole hostile document."""
    try:
        text = repr(value)
    except RecursionError:
        return f"<a deeply nested {type(value).__name__}>"
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
