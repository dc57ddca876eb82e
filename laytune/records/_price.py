"""The price of a candidate: its compute kernel plus the conversions its layouts cost.

:func:`price_record` prices a record under a :class:`~laytune.records.Boundary`
(who pays for each buffer's layout): the compute time the record measured
plus one :class:`Charge` per conversion the boundary charges, each the
fastest time known for it: the record's own pack or unpack kernel (measured
with the candidate), or the best recorded conversion kernel of the same
layouts on the device (:class:`ConversionTimes`). A conversion from a layout
the caller names has no kernel in the candidate's program, so only a
recorded conversion prices it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from laytune.layout import Layout, identity
from laytune.records._boundary import Boundary, default_boundary, same_layout
from laytune.space import PadValue, conversion_key

__all__ = [
    "Charge",
    "ConversionTimes",
    "Price",
    "RecordedConversions",
    "best_priced",
    "conversion_seconds",
    "measured_cold",
    "own_times",
    "price_record",
]


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


def own_times(record: Any) -> dict[tuple[str, str], float]:
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
    own = own_times(record)
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


def measured_cold(record: Any) -> bool:
    """Whether ``record`` was timed with a cache flush before every timed run
    (``MeasureConfig.flush_cache``): on data no earlier launch left in the
    caches, as a conversion between other kernels finds it."""
    launches = (record.result or {}).get("launches") or {}
    return bool(launches.get("flush"))


def conversion_seconds(record: Any, warm: bool = False) -> float:
    """A conversion record's time: timed cold (``value_s``, see
    :func:`measured_cold`), or with ``warm`` its time on warm caches where the
    record has one (``warm_value_s``; a record timed warm only has that)."""
    if warm:
        seconds = (record.result or {}).get("warm_value_s")
        if seconds:
            return float(seconds)
    return float(record.value_s)


def model_seconds(record: Any) -> float | None:
    """An operator's kernel time as a model meets it, from its record: the
    compute time, or where the record was timed cold (its weights outgrow the
    cache, :func:`measured_cold`) and warm beside, the mean of the two.

    In a model such a kernel finds its weights evicted by the operators
    before it, as timed cold, but its input just written by its producer,
    and the hardware streams the weights while it computes; a flush before
    every run leaves neither. Timed cold, the convolutions of ResNet-18's
    last stages all ran near one time bounded by memory (0.67-0.68 ms where
    warm they ran 0.45-0.51), so that the cold time did not rank them: the
    kernel ranked first ran 0.63 ms in the plan against 0.50 for the one
    ranked first warm. Over the eight cold-timed kernels of two tuned
    ResNet-18 plans on a Zen 5 host, the cold time was 0.02-0.23 ms over each
    kernel's time in the plan; the warm time was within 0.03 ms of it but
    for two: 0.12 ms under for that kernel ranked first cold, and a third of
    the plan's time for the classifier's matrix-vector product, which memory
    bounds. The mean errs by at most 0.12 ms, and ranks both alike."""
    compute = record.compute_s
    warm = (record.result or {}).get("warm_value_s")
    if compute is None or not warm or not measured_cold(record):
        return compute
    return (float(compute) + float(warm)) / 2


class RecordedConversions:
    """:class:`ConversionTimes` from the conversion records of one device in
    a records store: the best verified record of each conversion workload
    (:func:`laytune.space.conversion_key`) among those timed cold
    (:func:`measured_cold`: every conversion workload is, see
    ``ConversionWorkload.timed_cold``), or among all when none was (records
    written before conversions were timed cold)."""

    def __init__(self, store: Any, device_key: str) -> None:
        self.store = store
        self.device_key = device_key
        self._best: dict[str, Any] = {}

    def best(self, src: Layout, dst: Layout, dtype: str, pad: PadValue) -> Any:
        """The fastest verified record converting ``src`` to ``dst``, or None."""
        if src.image_rank != 1 or dst.image_rank != 1 or src.shape != dst.shape:
            return None
        return self.best_of(conversion_key(src, dst, dtype, pad))

    def best_of(self, key: str, records: Iterable[Any] | None = None) -> Any:
        """The record :meth:`best` picks for conversion workload ``key``, from
        ``records`` when given (that workload's on this device, read once)."""
        if key not in self._best:
            if records is None:
                records = self.store.records(workload=key, device=self.device_key, status="ok")
            records = list(records)
            cold = [r for r in records if measured_cold(r)]
            self._best[key] = best_priced(cold or records, Boundary(()))
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
