"""The exceptions of laytune.

One root, :class:`LaytuneError`. Each leaf also inherits the builtin that a
caller would naturally catch (``ValueError`` for bad values, ``LookupError``
for things that do not exist), so ``except ValueError`` keeps working.
Every message names the offending value.
"""

from __future__ import annotations

__all__ = [
    "DatabaseError",
    "DeviceNotFoundError",
    "FrozenFileError",
    "LayoutError",
    "LayoutRejectedError",
    "LayoutSyntaxError",
    "LaytuneError",
    "NegativeIndexError",
    "NonInjectiveLayoutError",
    "RecordError",
    "ShapeMismatchError",
    "TuningError",
]


class LaytuneError(Exception):
    """Root of every error laytune raises on purpose."""


class LayoutError(LaytuneError, ValueError):
    """A layout (index map) that is invalid on its own or on a shape."""


class LayoutSyntaxError(LayoutError):
    """Text that is not a valid index map; the message says what and where."""

    def __init__(self, message: str, text: str | None = None, column: int | None = None):
        self.text = text
        self.column = column
        if text is not None and column is not None:
            message = f"{message}\n  {text}\n  {' ' * column}^"
        super().__init__(message)


class ShapeMismatchError(LayoutError):
    """A layout applied to a shape (or index) of the wrong rank."""


class NonInjectiveLayoutError(LayoutError):
    """Two logical indices land on one physical index."""

    def __init__(self, message: str, first: tuple[int, ...], second: tuple[int, ...]):
        self.first = first
        self.second = second
        super().__init__(message)


class NegativeIndexError(LayoutError):
    """A logical index maps to a negative physical index."""

    def __init__(self, message: str, index: tuple[int, ...]):
        self.index = index
        super().__init__(message)


class LayoutRejectedError(LaytuneError, ValueError):
    """A layout that an access instruction the kernel uses cannot accept."""


class DeviceNotFoundError(LaytuneError, LookupError):
    """No OpenCL device matches a selection; the message lists what exists."""


class RecordError(LaytuneError, ValueError):
    """A record that is malformed, corrupt or from an unknown schema version."""


class DatabaseError(LaytuneError):
    """A records database that cannot be opened or used; the URL is shown without password."""


class FrozenFileError(LaytuneError, ValueError):
    """A frozen-layouts file that is truncated, from a newer schema, or for another device."""


class TuningError(LaytuneError):
    """A tuning job that cannot start (bad strategy, budget, or workload)."""
