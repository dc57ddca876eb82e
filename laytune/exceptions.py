"""The exceptions of laytune.

One root, :class:`LaytuneError`. Each leaf also inherits the builtin that a
caller would naturally catch (``ValueError`` for bad values, ``LookupError``
for things that do not exist), so ``except ValueError`` keeps working.
Every message names the offending value.
"""

from __future__ import annotations

__all__ = [
    "ArgumentTypeError",
    "BoundaryError",
    "ConfigError",
    "DatabaseError",
    "DatabaseNotFoundError",
    "DeviceInfoError",
    "DeviceNotFoundError",
    "ExecutionError",
    "FlowError",
    "FrozenFileError",
    "FrozenFileNotFoundError",
    "GraphError",
    "LayoutError",
    "LayoutRejectedError",
    "LayoutSyntaxError",
    "LaytuneError",
    "ModelFallbackWarning",
    "ModelImportError",
    "ModuleImportError",
    "NegativeIndexError",
    "NonInjectiveLayoutError",
    "NotFoundError",
    "PlanError",
    "PlotError",
    "RecordError",
    "RecordNotFoundError",
    "RecordWarning",
    "RegistryError",
    "ShapeMismatchError",
    "StatementError",
    "TuningError",
    "UnknownNameError",
    "UnknownWorkloadError",
    "UnsupportedNodeError",
    "WorkerError",
    "WorkerStartError",
]

#: The most characters of a user's input that a message quotes.
EXCERPT_LENGTH = 120


def excerpt(text: object, limit: int = EXCERPT_LENGTH) -> str:
    """``str(text)`` for a message: whole when short, else its first
    ``limit`` characters, ``...`` and its length, so that a message stays
    short whatever it quotes (a layout's text can be megabytes long). A
    helper of the messages, not in ``__all__``, which lists the exceptions."""
    text = str(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


class LaytuneError(Exception):
    """Root of every error laytune raises on purpose."""


# -- for any stage --------------------------------------------------------------


class ConfigError(LaytuneError, ValueError):
    """A setting out of its range (a measurement config, a time limit, a count)."""


class ArgumentTypeError(LaytuneError, TypeError):
    """An argument of a kind the function does not take; the message says what it takes."""


class UnknownNameError(LaytuneError, KeyError):
    """A name (buffer, port, operator, tensor) that the object asked does not have."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0]) if self.args else ""


# -- layouts --------------------------------------------------------------------


class LayoutError(LaytuneError, ValueError):
    """A layout (index map) that is invalid on its own or on a shape."""


class LayoutSyntaxError(LayoutError):
    """Text that is not a valid index map, or an index map past the bounds
    of its arithmetic (a constant past 2^62, too many indices, an expression
    too large); the message says what and where, and quotes at most a short
    window of the text around the column."""

    def __init__(self, message: str, text: str | None = None, column: int | None = None):
        self.text = text
        self.column = column
        if text is not None and column is not None:
            window, caret = _window(text, column)
            message = f"{message}\n  {window}\n  {' ' * caret}^"
        super().__init__(message)


def _window(text: str, column: int, width: int = 76) -> tuple[str, int]:
    """At most ``width`` characters of ``text`` around ``column`` (line breaks
    shown as spaces), marked with ``...`` where cut, and the column's
    position in them."""
    column = min(max(column, 0), len(text))
    start = max(0, min(column - width // 2, len(text) - width))
    window = text[start : start + width].replace("\n", " ").replace("\r", " ")
    caret = column - start
    if start > 0:
        window, caret = f"...{window}", caret + 3
    if start + width < len(text):
        window = f"{window}..."
    return window, caret


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


# -- workloads ------------------------------------------------------------------


class StatementError(LaytuneError, ValueError):
    """A statement outside the index-notation grammar, or a workload built
    wrong (shapes, axes, dtype); the message says where."""


class UnknownWorkloadError(LaytuneError, ValueError):
    """A workload key that is malformed or names no registered operator, or
    parameters an operator does not take."""


class RegistryError(LaytuneError, ValueError):
    """A workload constructor that cannot be registered: a name taken twice,
    a parameter whose type a key cannot write."""


class ModuleImportError(LaytuneError, ImportError):
    """A module of the user's (``laytune --import``, ``LAYTUNE_IMPORT``,
    :func:`laytune.ops.import_workloads`) that cannot be imported; the
    message names the module and the error its import raised."""


# -- devices and measuring ------------------------------------------------------


class DeviceNotFoundError(LaytuneError, LookupError):
    """No OpenCL device matches a selection; the message lists what exists."""


class DeviceInfoError(LaytuneError, ValueError):
    """A device description (JSON) with fields this laytune does not know."""


class ExecutionError(LaytuneError, RuntimeError):
    """A program that cannot be built or run on the given context, or inputs
    that do not fit it; the message names the buffer or kernel."""


class WorkerError(LaytuneError, RuntimeError):
    """A measuring worker process that did not start or broke its protocol."""


# -- records --------------------------------------------------------------------


class NotFoundError(LaytuneError, LookupError):
    """What was asked to be read does not exist: a record id, a records database
    opened only to read, a frozen file. (The ``laytune`` command exits 1 on
    these, "nothing found"; a device that matches no selection is a
    :class:`DeviceNotFoundError`, a mistake in the selection.)"""


class RecordError(LaytuneError, ValueError):
    """A record that is malformed, corrupt or from an unknown schema version."""


class RecordNotFoundError(RecordError, NotFoundError):
    """No record with the given id in a database."""


class RecordWarning(LaytuneError, UserWarning):
    """A warning, not an error: a stored record that cannot be read back
    (corrupt JSON, an unknown schema) is left out of a listing, which goes
    on; the message names its id. (Under ``-W error`` it is raised, and
    ``except LaytuneError`` catches it like any of laytune's errors.)"""


class BoundaryError(LaytuneError, ValueError):
    """A boundary policy that does not fit its workload: a name that is not a
    buffer, an unknown policy, a constant output, a held layout of another shape."""


class DatabaseError(LaytuneError):
    """A records database that cannot be opened or used; the URL is shown without password."""


class DatabaseNotFoundError(DatabaseError, NotFoundError):
    """A records database opened to read that does not exist (nothing was created)."""


class FrozenFileError(LaytuneError, ValueError):
    """A frozen-layouts file that is truncated, from a newer schema, or for another device."""


class FrozenFileNotFoundError(FrozenFileError, NotFoundError):
    """No frozen-layouts file at the given path."""


# -- search, planning, figures ----------------------------------------------------


class TuningError(LaytuneError):
    """A tuning job that cannot start (bad strategy, budget, or workload)."""


class WorkerStartError(TuningError):
    """The measuring worker process died while Python started it, before it
    opened the device: every later start would die the same way (typically
    a script that calls laytune without ``if __name__ == "__main__":``)."""


class ModelFallbackWarning(LaytuneError, UserWarning):
    """A warning, not an error: the model strategy's cost model cannot be
    built (its library is missing, a record cannot be featurised), so the
    job goes on with random sampling; the message says why. The test suite
    turns it into an error: a job that falls back silently has lost its
    strategy."""


class GraphError(LaytuneError, ValueError):
    """A graph that is built wrong: unknown tensors, ports or names, shapes that disagree."""


class FlowError(LaytuneError, ValueError):
    """A layout that cannot flow from one buffer of an operator to another; says why."""


class PlanError(LaytuneError, ValueError):
    """A graph that cannot be planned: a frozen candidate codegen refuses, a
    ``critical`` name that matches nothing or has no candidate."""


class ModelImportError(LaytuneError, ValueError):
    """An ONNX model that cannot become a graph: a file that does not load,
    shapes that are not static, a tensor whose element type is not float32;
    the message names the model's tensor or file."""


class UnsupportedNodeError(ModelImportError):
    """An ONNX node laytune does not import, named with its op type: an op
    type outside the supported set (the message lists the set) or an
    attribute or input the import does not take (the message says which).
    ``node``, ``op_type`` and ``supported`` hold the same for a program."""

    def __init__(self, node: str, op_type: str, reason: str, supported: tuple[str, ...]):
        self.node, self.op_type, self.reason, self.supported = node, op_type, reason, supported
        super().__init__(f"node {node!r} ({op_type}): {reason}")

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.node, self.op_type, self.reason, self.supported))


class PlotError(LaytuneError, ValueError):
    """A figure that cannot be drawn from what it was given; the message says why."""
