"""Who pays for a buffer's layout: the boundary policy of a tuning job.

A layout is free only where someone else pays for it. Each buffer of a
tuning job has a boundary policy (:class:`BufferPolicy`):

- ``fixed``: the caller holds the buffer in a given layout (the logical,
  row-major one unless named); every call converts it into the candidate's
  layout (an input) or out of it (an output), and pays that conversion.
- ``free``: a producer or consumer adopts the candidate's layout (what a graph
  plan arranges); nothing is charged.
- ``constant``: converted once and reused by every call (weights, biases);
  nothing is charged per call.

A :class:`Boundary` holds one policy per buffer. The default for a standalone
job (:meth:`Boundary.default`) is ``fixed`` to the logical layout for every
input and output and ``constant`` for the workload's weights
(:attr:`laytune.ops.Workload.weights`), so the objective is pack + compute +
unpack (:func:`laytune.records.price_record`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from laytune.exceptions import BoundaryError, LaytuneError, excerpt
from laytune.layout import IndexMap, Layout, custom, identity

__all__ = [
    "POLICIES",
    "Boundary",
    "BufferPolicy",
    "boundary_text",
    "default_boundary",
    "same_layout",
]

PolicyKind = Literal["fixed", "free", "constant"]
POLICIES: tuple[PolicyKind, ...] = ("fixed", "free", "constant")


def same_layout(a: Layout, b: Layout) -> bool:
    """Whether two layouts of one shape put every element at the same physical
    index (with the same axis separators)."""
    return a.shape == b.shape and a.index_map.equivalent(b.index_map, a.shape)


@dataclass(frozen=True)
class BufferPolicy:
    """Who pays for one buffer's layout (see the module docstring).

    ``layout`` is the layout a ``fixed`` buffer is held in by the caller;
    ``None`` means the logical (row-major) layout.
    """

    kind: PolicyKind
    layout: Layout | None = None

    def __post_init__(self) -> None:
        if self.kind not in POLICIES:
            raise BoundaryError(
                f"boundary policy {excerpt(repr(self.kind))} is not one of {POLICIES}"
            )
        if self.layout is not None and self.kind != "fixed":
            raise BoundaryError(f"a {self.kind} buffer holds no layout of the caller's")

    def held(self, shape: tuple[int, ...]) -> Layout:
        """The layout the caller holds a ``fixed`` buffer of logical ``shape`` in."""
        return self.layout if self.layout is not None else identity(shape)

    def describe(self) -> str:
        if self.layout is None or self.layout.is_identity:
            return self.kind
        return f"fixed as {self.layout.index_map}"

    def to_json(self) -> dict[str, Any]:
        return {
            "policy": self.kind,
            "layout": None if self.layout is None else self.layout.to_json(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BufferPolicy:
        layout = data.get("layout")
        return cls(data["policy"], None if layout is None else Layout.from_json(layout))


def _policy(name: str, shape: tuple[int, ...], role: str, value: Any) -> BufferPolicy:
    """A policy from what a user wrote: a policy, its name, a layout, or a layout's text."""
    if isinstance(value, BufferPolicy):
        policy = value
    elif isinstance(value, Layout):
        policy = BufferPolicy("fixed", value)
    elif isinstance(value, IndexMap) or (
        isinstance(value, str) and value.strip().startswith("lambda")
    ):
        try:
            policy = BufferPolicy("fixed", custom(shape, value))
        except LaytuneError as err:
            # the text and the reason, each cut short: a text can be megabytes
            reason = excerpt(str(err).splitlines()[0], 200)
            raise BoundaryError(
                f"buffer {excerpt(name)!r}: {excerpt(value)} is not a layout of {shape}: {reason}"
            ) from None
    elif isinstance(value, str) and value in POLICIES:
        policy = BufferPolicy(value)  # type: ignore[arg-type]
    else:
        raise BoundaryError(
            f"buffer {excerpt(name)!r}: boundary {excerpt(repr(value))} is not one of "
            f"{POLICIES}, a Layout or a layout's text ('lambda i, j: [j, i]')"
        )
    if policy.layout is not None and policy.layout.shape != shape:
        raise BoundaryError(
            f"buffer {name!r} has shape {shape}; the layout it is held in is of shape "
            f"{policy.layout.shape}"
        )
    if policy.kind == "constant" and role != "input":
        raise BoundaryError(f"buffer {name!r} is an {role}: only an input can be constant")
    return policy


@dataclass(frozen=True)
class Boundary:
    """One :class:`BufferPolicy` per buffer of a workload, sorted by buffer name.

    Build one with :meth:`default` or :meth:`of`; a buffer it does not name is
    ``fixed`` to its logical layout.
    """

    policies: tuple[tuple[str, BufferPolicy], ...]

    @classmethod
    def default(cls, workload: Any) -> Boundary:
        """A standalone job's boundary: every input and output ``fixed`` to its
        logical layout, the workload's weights ``constant``."""
        weights = set(getattr(workload, "weights", ()))
        return cls(
            tuple(
                sorted(
                    (b.name, BufferPolicy("constant" if b.name in weights else "fixed"))
                    for b in workload.buffers
                )
            )
        )

    @classmethod
    def of(cls, workload: Any, spec: Boundary | Mapping[str, Any] | None = None) -> Boundary:
        """:meth:`default` with the buffers ``spec`` names changed: each to
        ``"fixed"``, ``"free"``, ``"constant"``, a :class:`BufferPolicy`, or
        a layout (a :class:`~laytune.layout.Layout` or its text) the caller
        holds it in (``fixed`` to that layout). A name that is not a buffer,
        or a constant output, raises :class:`BoundaryError`."""
        if isinstance(spec, Boundary):
            spec = dict(spec.policies)
        policies = dict(cls.default(workload).policies)
        decls = {b.name: b for b in workload.buffers}
        for name, value in (spec or {}).items():
            if name not in decls:
                raise BoundaryError(
                    f"boundary names {excerpt(name)!r}, which is not a buffer of {workload.key} "
                    f"(buffers: {', '.join(sorted(decls))})"
                )
            decl = decls[name]
            policies[name] = _policy(name, tuple(decl.shape), decl.role, value)
        return cls(tuple(sorted(policies.items())))

    def policy(self, buffer: str) -> BufferPolicy:
        return dict(self.policies).get(buffer, BufferPolicy("fixed"))

    def free(self, buffers: Iterable[str]) -> Boundary:
        """This boundary with ``buffers`` free."""
        return Boundary(
            tuple(
                sorted(
                    {**dict(self.policies), **{b: BufferPolicy("free") for b in buffers}}.items()
                )
            )
        )

    @property
    def charges_nothing(self) -> bool:
        """Whether no buffer is fixed: the objective is the compute kernel alone."""
        return all(p.kind != "fixed" for _, p in self.policies)

    def describe(self) -> str:
        """``"W constant, X fixed, Y fixed"``."""
        return ", ".join(f"{name} {p.describe()}" for name, p in self.policies) or "no buffers"

    def __str__(self) -> str:
        return self.describe()

    def to_json(self) -> dict[str, Any]:
        return {name: p.to_json() for name, p in self.policies}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Boundary:
        return cls(tuple(sorted((name, BufferPolicy.from_json(p)) for name, p in data.items())))


def boundary_text(boundary: Boundary | None, workload: Any) -> str:
    """``boundary`` as a table says it: the buffers whose policy differs
    from ``workload``'s default (:func:`default_boundary`; a workload or its
    key), ``"A free"`` or ``"X,Y free; W fixed"``; ``"default"`` when none
    does; ``"-"`` for no boundary (a record that was not priced)."""
    if boundary is None:
        return "-"
    default = dict(default_boundary(workload).policies)
    groups: dict[str, list[str]] = {}
    for name, policy in boundary.policies:
        if default.get(name, BufferPolicy("fixed")) != policy:
            groups.setdefault(policy.describe(), []).append(name)
    if not groups:
        return "default"
    return "; ".join(f"{','.join(sorted(names))} {kind}" for kind, names in sorted(groups.items()))


def default_boundary(workload: Any) -> Boundary:
    """The boundary a standalone job of ``workload`` (a workload or its key)
    has by default (:meth:`Boundary.default`). A key that :func:`laytune.ops.from_key`
    cannot rebuild (an operator of a module not imported) has no weights
    known: every buffer ``fixed``; that answer is not cached, so the key
    gets its weights once the module registering it is imported."""
    if not isinstance(workload, str):
        return Boundary.default(workload)
    try:
        return _default_for_key(workload)
    except LaytuneError:
        return Boundary(())


@lru_cache(maxsize=256)
def _default_for_key(key: str) -> Boundary:
    from laytune.ops import from_key

    return Boundary.default(from_key(key))
