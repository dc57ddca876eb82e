"""The price of a candidate: its compute kernel plus the conversions its layouts cost.

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
unpack. :func:`price_record` prices a record under a boundary: the compute
time the record measured plus one :class:`Charge` per conversion the policy
charges, each the fastest time known for it: the record's own pack or unpack
kernel (measured with the candidate), or the best recorded conversion kernel
of the same layouts on the device (:class:`ConversionTimes`). A conversion
from a layout the caller names has no kernel in the candidate's program, so
only a recorded conversion prices it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal, Protocol

from laytune.exceptions import BoundaryError, LaytuneError
from laytune.layout import IndexMap, Layout, custom, identity
from laytune.space import PadValue, conversion_key

__all__ = [
    "POLICIES",
    "Boundary",
    "BufferPolicy",
    "Charge",
    "ConversionTimes",
    "Price",
    "RecordedConversions",
    "best_priced",
    "default_boundary",
    "price_record",
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
            raise BoundaryError(f"boundary policy {self.kind!r} is not one of {POLICIES}")
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
            raise BoundaryError(
                f"buffer {name!r}: {value} is not a layout of {shape}: {err}"
            ) from None
    elif isinstance(value, str) and value in POLICIES:
        policy = BufferPolicy(value)  # type: ignore[arg-type]
    else:
        raise BoundaryError(
            f"buffer {name!r}: boundary {value!r} is not one of {POLICIES}, a Layout or a "
            "layout's text ('lambda i, j: [j, i]')"
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
                    f"boundary names {name!r}, which is not a buffer of {workload.key} "
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


@dataclass(frozen=True)
class Charge:
    """One conversion a boundary charges: ``buffer`` packed (an input, from the
    layout the caller holds) or unpacked (an output, into it), taking
    ``seconds``, a time from ``source`` (the candidate's own kernel, or a
    conversion record)."""

    buffer: str
    direction: Literal["pack", "unpack"]
    seconds: float
    source: str

    def to_json(self) -> dict[str, Any]:
        return {
            "buffer": self.buffer,
            "direction": self.direction,
            "seconds": self.seconds,
            "source": self.source,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Charge:
        return cls(
            str(data["buffer"]), data["direction"], float(data["seconds"]), str(data["source"])
        )


@dataclass(frozen=True)
class Price:
    """What a call of a candidate costs under ``boundary``: the compute
    kernels (``compute_s``) plus every charged conversion. ``total_s`` is the
    objective a job ranks by (end-to-end time of one call)."""

    compute_s: float
    charges: tuple[Charge, ...]
    boundary: Boundary

    @property
    def conversions_s(self) -> float:
        return math.fsum(c.seconds for c in self.charges)

    @property
    def total_s(self) -> float:
        return self.compute_s + self.conversions_s

    def describe(self) -> str:
        """``"0.31 ms = compute 0.12 + X pack 0.10 + Y unpack 0.09"``."""
        parts = [f"compute {self.compute_s * 1e3:.4g}"]
        parts += [f"{c.buffer} {c.direction} {c.seconds * 1e3:.4g}" for c in self.charges]
        return f"{self.total_s * 1e3:.4g} ms = " + " + ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "boundary": self.boundary.to_json(),
            "compute_s": self.compute_s,
            "charges": [c.to_json() for c in self.charges],
            "total_s": self.total_s,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Price:
        return cls(
            float(data["compute_s"]),
            tuple(Charge.from_json(c) for c in data.get("charges", ())),
            Boundary.from_json(data.get("boundary", {})),
        )


class ConversionTimes(Protocol):
    """Where the times of recorded conversion kernels come from (the records
    database of the device, see :meth:`laytune.records.Database.conversion_times`).

    ``conversion_s`` returns the fastest recorded time of converting a buffer
    from layout ``src`` to layout ``dst`` (the padding of ``dst`` holding
    ``pad``) and what it comes from (``"conversion record 12"``), or None
    when none is recorded."""

    def conversion_s(
        self, src: Layout, dst: Layout, dtype: str, pad: PadValue
    ) -> tuple[float, str] | None: ...


def _own_times(record: Any) -> dict[tuple[str, str], float]:
    """(direction, buffer) -> the record's measured time of that conversion kernel."""
    result = record.result or {}
    times = {}
    for direction in ("pack", "unpack"):
        for timing in result.get(f"{direction}_times", ()):
            value = timing.get("value_s")
            if value is not None:
                times[(direction, str(timing["buffer"]))] = float(value)
    return times


def price_record(
    record: Any, boundary: Boundary, conversions: ConversionTimes | None = None
) -> Price | None:
    """The price of a verified ``record`` (a :class:`laytune.records.Record`)
    under ``boundary``; None when it is not verified or a charged conversion
    has no time (a record measured without its conversions, or a layout the
    caller holds with no recorded conversion from it)."""
    if not record.ok or record.compute_s is None:
        return None
    layouts = record.candidate.layout_map
    own = _own_times(record)
    charges = []
    for spec in record.program.get("buffers", ()):
        name, role = str(spec["name"]), str(spec["role"])
        policy = boundary.policy(name)
        if policy.kind != "fixed":
            continue
        shape = tuple(int(s) for s in spec["shape"])
        layout = layouts.get(name, identity(shape))
        held = policy.held(shape)
        if same_layout(held, layout):
            continue
        directions = (
            ("pack", "unpack")
            if role == "inout"
            else (("pack",) if role == "input" else ("unpack",))
        )
        for direction in directions:
            src, dst = (held, layout) if direction == "pack" else (layout, held)
            pad = record.candidate.pad_value(name) if direction == "pack" else None
            options = []
            if held.is_identity and (direction, name) in own:
                options.append((own[(direction, name)], "measured with the candidate"))
            if conversions is not None:
                found = conversions.conversion_s(src, dst, str(spec["dtype"]), pad)
                if found is not None:
                    options.append(found)
            if not options:
                return None
            seconds, source = min(options)
            charges.append(Charge(name, direction, seconds, source))  # type: ignore[arg-type]
    return Price(float(record.compute_s), tuple(charges), boundary)


def default_boundary(workload: Any) -> Boundary:
    """The boundary a standalone job of ``workload`` (a workload or its key)
    has by default (:meth:`Boundary.default`). A key that names no registered
    operator has no weights known: every buffer ``fixed``."""
    if not isinstance(workload, str):
        return Boundary.default(workload)
    return _default_for_key(workload)


@lru_cache(maxsize=256)
def _default_for_key(key: str) -> Boundary:
    from laytune.ops import from_key

    try:
        return Boundary.default(from_key(key))
    except LaytuneError:
        return Boundary(())


class RecordedConversions:
    """:class:`ConversionTimes` from the conversion records of one device in
    a records store (the best verified record of each conversion workload,
    :func:`laytune.space.conversion_key`)."""

    def __init__(self, store: Any, device_key: str) -> None:
        self.store = store
        self.device_key = device_key
        self._best: dict[str, Any] = {}

    def best(self, src: Layout, dst: Layout, dtype: str, pad: PadValue) -> Any:
        """The fastest verified record converting ``src`` to ``dst``, or None."""
        if src.image_rank != 1 or dst.image_rank != 1 or src.shape != dst.shape:
            return None
        key = conversion_key(src, dst, dtype, pad)
        if key not in self._best:
            self._best[key] = best_priced(
                self.store.records(workload=key, device=self.device_key, status="ok"),
                Boundary(()),
            )
        return self._best[key]

    def conversion_s(
        self, src: Layout, dst: Layout, dtype: str, pad: PadValue
    ) -> tuple[float, str] | None:
        found = self.best(src, dst, dtype, pad)
        return None if found is None else (float(found.value_s), f"conversion record {found.id}")


def best_priced(
    records: Iterable[Any],
    boundary: Boundary | None = None,
    conversions: ConversionTimes | None = None,
) -> Any:
    """The verified record of least price among ``records`` (one workload and
    device; the first written among equal prices), priced: its ``value_s`` and
    ``price`` those of ``boundary`` (default: the workload's
    :func:`default_boundary`). None when no record can be priced."""
    best: tuple[float, int, Any] | None = None
    for record in records:
        if not record.ok:
            continue
        price = price_record(record, boundary or default_boundary(record.workload_key), conversions)
        if price is None:
            continue
        rank = (price.total_s, record.id if record.id is not None else 0)
        if best is None or rank < best[:2]:
            best = (*rank, record.priced(price))
    return None if best is None else best[2]
