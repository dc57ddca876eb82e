"""The workload registry: every library operator, its parameters and their types.

Each constructor of :mod:`laytune.ops` registers itself with :func:`register`;
workload keys (:func:`laytune.ops.from_key`), warm starts
(:func:`laytune.ops.key_distance`) and the ``laytune tune`` command read the
registry, so an operator is added in one place. The parameter names of a
constructor are the names its key writes (``matmul(M=8,N=8,K=8;float32)``
comes from ``matmul(M, N, K, dtype)``), and the law
``from_key(w.key) == w`` holds for every registered workload.

Parameter values are what a key can write: an ``int`` or a tuple of ints
(annotated ``Sequence[int]``, written ``4x8``).

A workload made by :meth:`Workload.define` alone, with no constructor
registered under its name, is known by its key while something holds it (a
module-level variable of the user's module, for one):
:func:`defined_workloads` lists them and :func:`laytune.ops.from_key`
returns them.
"""

from __future__ import annotations

import inspect
import types
import typing
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from laytune.exceptions import RegistryError, UnknownWorkloadError

if TYPE_CHECKING:
    from laytune.ops._workload import Workload

__all__ = [
    "ParamValue",
    "Parameter",
    "WorkloadConstructor",
    "constructor",
    "constructors",
    "defined_workloads",
    "format_value",
    "parse_params",
    "register",
]

ParamValue = int | tuple[int, ...]
F = TypeVar("F", bound=Callable[..., "Workload"])

_REGISTRY: dict[str, WorkloadConstructor] = {}
# Weak: the library's constructors define a workload per call, and a
# workload nobody holds any more cannot be asked for by key.
_DEFINED: weakref.WeakValueDictionary[str, Workload] = weakref.WeakValueDictionary()


@dataclass(frozen=True)
class Parameter:
    """One parameter of a workload constructor, named as its key names it.

    ``ints``: a tuple of ints (written ``4x8``; ``4`` is a 1-tuple), else one
    int. ``required``: no default; else ``default`` (which may be None:
    the constructor decides). ``structural``: not a size; two workloads
    whose structural parameters differ are not shapes of one problem
    (a permutation, the reduced axes).
    """

    name: str
    ints: bool
    required: bool
    default: ParamValue | None
    structural: bool

    def parse(self, text: str) -> ParamValue:
        """The value written ``text`` (``4x8``, ``4``, ``-1``), typed as this parameter."""
        try:
            numbers = tuple(int(part) for part in text.strip().split("x"))
        except ValueError:
            raise UnknownWorkloadError(
                f"parameter {self.name}: {text!r} is not {self._expected()}"
            ) from None
        if self.ints:
            return numbers
        if len(numbers) != 1:
            raise UnknownWorkloadError(f"parameter {self.name}: {text!r} is not {self._expected()}")
        return numbers[0]

    def coerce(self, value: Any) -> ParamValue:
        """``value`` typed as this parameter: an int becomes a 1-tuple for a
        tuple parameter; a 1-tuple becomes an int for an int parameter."""
        if isinstance(value, bool):
            raise UnknownWorkloadError(
                f"parameter {self.name}: {value!r} is not {self._expected()}"
            )
        if isinstance(value, int):
            return (value,) if self.ints else value
        if isinstance(value, (tuple, list)) and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            if self.ints:
                return tuple(value)
            if len(value) == 1:
                return value[0]
        raise UnknownWorkloadError(f"parameter {self.name}: {value!r} is not {self._expected()}")

    def describe(self) -> str:
        """``name=INTxINT..`` or ``name=INT``; in brackets, with its default
        if it has one, when the parameter may be left out."""
        text = f"{self.name}={'INTxINT..' if self.ints else 'INT'}"
        if self.required:
            return text
        if self.default is not None:
            text += f" ({format_value(self.default)})"
        return f"[{text}]"

    def _expected(self) -> str:
        return "a tuple of integers such as 4x8" if self.ints else "an integer"


def format_value(value: ParamValue | list[int]) -> str:
    """A parameter value as a key writes it: ``4x8`` for a tuple, ``4`` for an int."""
    if isinstance(value, (tuple, list)):
        return "x".join(str(v) for v in value)
    return str(value)


@dataclass(frozen=True)
class WorkloadConstructor:
    """A registered workload constructor: ``name`` (the operator, as keys and
    the command line write it), its ``parameters`` in signature order
    (``dtype`` aside), a one-line ``summary``, and an ``example`` of
    parameters that make a workload quick to tune (the CLI's help). ``demo``
    only marks the operators the built-in demo uses; ``laytune tune --demo``
    runs the jobs of :func:`laytune.search.demos`, each a workload with the
    boundary its caller sets, which a flag on an operator cannot say."""

    name: str
    function: Callable[..., Workload] = field(repr=False)
    parameters: tuple[Parameter, ...]
    summary: str
    example: tuple[tuple[str, ParamValue], ...]
    demo: bool

    def parameter(self, name: str) -> Parameter:
        for p in self.parameters:
            if p.name == name:
                return p
        raise UnknownWorkloadError(
            f"{self.name} has no parameter {name!r} (parameters: {self.usage()})"
        )

    def usage(self) -> str:
        """The parameters as the command line takes them: ``M=INT N=INT K=INT``."""
        return " ".join(p.describe() for p in self.parameters)

    def parse(self, texts: Mapping[str, str]) -> dict[str, ParamValue]:
        """Parameters written as text (``{"shape": "4x8"}``), typed; unknown
        and missing names raise :class:`UnknownWorkloadError` naming them."""
        self._check_names(texts)
        return {name: self.parameter(name).parse(text) for name, text in texts.items()}

    def build(self, params: Mapping[str, Any], dtype: str = "float32") -> Workload:
        """The workload of these parameters (by name; defaults fill the rest).

        Unknown and missing names raise :class:`UnknownWorkloadError` naming
        them; values the operator refuses raise its own error (usually
        :class:`laytune.exceptions.StatementError`).
        """
        self._check_names(params)
        values = {name: self.parameter(name).coerce(value) for name, value in params.items()}
        return self.function(**values, dtype=dtype)

    def _check_names(self, names: Iterable[str]) -> None:
        given = set(names)
        unknown = sorted(given - {p.name for p in self.parameters})
        missing = [p.name for p in self.parameters if p.required and p.name not in given]
        if unknown or missing:
            raise UnknownWorkloadError(
                f"{self.name} takes {self.usage()}"
                + (f"; unknown: {unknown}" if unknown else "")
                + (f"; missing: {missing}" if missing else "")
            )

    def example_workload(self, dtype: str = "float32") -> Workload:
        return self.build(dict(self.example), dtype)


def parse_params(text: str, context: str) -> dict[str, str]:
    """``name=value`` pairs separated by commas, values left as text.

    ``context`` names where the text comes from, for the error message."""
    values: dict[str, str] = {}
    for part in text.split(",") if text.strip() else ():
        name, sep, value = part.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise UnknownWorkloadError(f"{context}: expected NAME=VALUE, got {part!r}")
        values[name.strip()] = value.strip()
    return values


def _is_int_sequence(hint: Any) -> bool:
    origin = typing.get_origin(hint)
    return (
        isinstance(origin, type)
        and issubclass(origin, Sequence)
        and typing.get_args(hint) in ((int,), (int, ...))
    )


def _parameter(sig: inspect.Parameter, hint: Any, structural: bool, owner: str) -> Parameter:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):  # X | None
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        hint = options[0] if len(options) == 1 else hint
    if hint is int:
        ints = False
    elif _is_int_sequence(hint):
        ints = True
    else:
        raise RegistryError(
            f"{owner}: parameter {sig.name!r} is annotated {hint!r}; a workload key "
            "writes only int or Sequence[int]"
        )
    required = sig.default is inspect.Parameter.empty
    default = None if required else sig.default
    if default is not None:
        default = tuple(default) if ints else int(default)
    return Parameter(sig.name, ints, required, default, structural)


def register(
    *,
    example: Mapping[str, ParamValue],
    structural: Iterable[str] = (),
    demo: bool = False,
) -> Callable[[F], F]:
    """Register a workload constructor under its function name.

    The constructor takes its parameters (annotated ``int`` or
    ``Sequence[int]``) and a last ``dtype``; the key it makes must name the
    same parameters (checked by the test of ``from_key(w.key) == w``).
    ``structural`` names the parameters that are not sizes (see
    :class:`Parameter`), ``example`` parameters quick to tune, ``demo``
    whether the operator is one the built-in demo uses (``laytune tune
    --demo`` runs :func:`laytune.search.demos`, not the examples).
    """
    structural = frozenset(structural)

    def decorate(function: F) -> F:
        name = function.__name__
        if name in _REGISTRY:
            raise RegistryError(f"a workload constructor named {name!r} is registered already")
        signature = inspect.signature(function)
        hints = typing.get_type_hints(function)
        if "dtype" not in signature.parameters:
            raise RegistryError(f"{name}: a workload constructor takes a dtype parameter")
        parameters = tuple(
            _parameter(sig, hints.get(sig.name), sig.name in structural, name)
            for sig in signature.parameters.values()
            if sig.name != "dtype"
        )
        unknown = structural - {p.name for p in parameters}
        if unknown:
            raise RegistryError(f"{name}: structural names no parameter: {sorted(unknown)}")
        by_name = {p.name: p for p in parameters}
        strange = sorted(set(example) - set(by_name))
        if strange:
            raise RegistryError(f"{name}: example names no parameter: {strange}")
        doc = inspect.getdoc(function) or name
        entry = WorkloadConstructor(
            name=name,
            function=function,
            parameters=parameters,
            summary=" ".join(doc.strip().split("\n\n")[0].split()),
            example=tuple((k, by_name[k].coerce(v)) for k, v in example.items()),
            demo=demo,
        )
        _REGISTRY[name] = entry
        return function

    return decorate


def constructors() -> Mapping[str, WorkloadConstructor]:
    """Every registered constructor by operator name, in registration order."""
    return types.MappingProxyType(_REGISTRY)


def constructor(name: str) -> WorkloadConstructor:
    """The constructor registered as ``name``."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownWorkloadError(
            f"unknown operator {name!r}; known: {', '.join(_REGISTRY)}"
        ) from None


def defined_workloads() -> Mapping[str, Workload]:
    """Every workload made by :meth:`Workload.define` that is still held
    somewhere and whose operator no constructor is registered under, by key
    (a copy): the workloads of a user's module that defines them without
    :func:`register`, and those with an epilogue (a plan's fused operators),
    which no constructor builds."""
    return {
        key: workload
        for key, workload in list(_DEFINED.items())
        if workload.name not in _REGISTRY or workload.statement.epilogue is not None
    }


def remember_defined(workload: Workload) -> None:
    """Note a workload :meth:`Workload.define` made (for :func:`defined_workloads`)."""
    _DEFINED[workload.key] = workload
