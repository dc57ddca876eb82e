"""What a plan costs: the layout-critical operators' kernels plus the rewrites left.

A layout source that keeps records (a records database) offers each
layout-critical operator several candidates (:class:`Option`): its fastest
kernel for each of the few fastest sets of layouts it asks of its
neighbours, and the fastest with the operator's data in logical layouts (no
conversions at all). :class:`PlanPricer` predicts a plan's time from what
was measured: each operator's kernel time (its record; the mean of its cold
and warm times where it was timed both ways; an operator without one is
estimated from the bytes it moves), and each rewrite's time: the
device's best recorded conversion kernel for those layouts, else the time
the operator's own pack or unpack kernel took when its record was measured,
else the bytes it moves at the rate of the generated conversion kernels
measured on the device (an estimate, and said so: with no record the plan
runs a generated kernel). An operator with no record (a planned bias or
relu) is estimated the same way: at the tuned conversions' rate when its
planned kernel has vectors, at the generated ones' when it has none.

A conversion record carries two times (see ``ConversionWorkload.timed_cold``):
cold (a cache flush before each run) and warm (repeated on the same
buffers). Which one a plan meets depends on the plan: when all its tensors
fit in half the device's last-level cache they stay there from run to run, and
the pricer takes the warm times (``warm=True``); otherwise each rewrite
finds its data evicted by the kernels between, and the cold times hold.
"""

from __future__ import annotations

import copy
import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from laytune.layout import identity
from laytune.plan._rewrite import Rewrite, is_identity_layout, same_layout
from laytune.plan._source import SourceLike, lookup_candidate
from laytune.records import (
    FrozenLayouts,
    RecordedConversions,
    conversion_seconds,
    measured_cold,
    model_seconds,
)
from laytune.space import Candidate

__all__ = [
    "NOMINAL_BANDWIDTH",
    "Option",
    "PlanPricer",
    "Prediction",
    "is_store",
    "lookup_options",
    "measured_option",
]

#: Bytes per second assumed for a conversion when the device has none measured.
NOMINAL_BANDWIDTH = 10e9


@dataclass(frozen=True)
class Option:
    """One candidate a layout-critical operator may run with: its kernel's time
    in a model (:func:`laytune.records.model_seconds`; None when the source
    does not say), the times its own pack and unpack
    kernels took (``(buffer, "pack" | "unpack") -> seconds``) and where it
    comes from (``"record 12"``)."""

    candidate: Candidate
    compute_s: float | None = None
    conversions: Mapping[tuple[str, str], float] = field(default_factory=dict)
    origin: str = "the layout source"


@dataclass(frozen=True)
class Prediction:
    """The predicted time of one step of a plan (an operator or a rewrite, by
    its label) and what it comes from; ``seconds`` None when nothing says."""

    label: str
    kind: str  # "operator" or "rewrite"
    seconds: float | None
    source: str


def is_store(source: Any) -> bool:
    """Whether ``source`` is a records store (records and lookup), not a mapping."""
    return (
        hasattr(source, "records") and hasattr(source, "lookup") and not isinstance(source, Mapping)
    )


def _option(record: Any) -> Option:
    own: dict[tuple[str, str], float] = {}
    for direction in ("pack", "unpack"):
        for timing in (record.result or {}).get(f"{direction}_times", ()):
            if timing.get("value_s") is not None:
                own[(str(timing["buffer"]), direction)] = float(timing["value_s"])
    return Option(record.candidate, model_seconds(record), own, f"record {record.id}")


def lookup_options(
    source: SourceLike, workload_key: str, device_key: str, limit: int = 4
) -> list[Option]:
    """The candidates ``source`` offers an operator, the one to freeze first.

    A records store offers the best end-to-end record (what
    ``best_candidate`` freezes) first; then, for each of the ``limit``
    fastest distinct sets of layouts its records ask of the operator's
    neighbours (:func:`fastest_per_layouts`), its fastest verified kernel by
    the time a model meets (:func:`~laytune.records.model_seconds`); then
    the fastest whose non-weight buffers are in their logical layouts. Where
    some records were timed cold (an operator whose weights outgrow the
    cache, :func:`laytune.runners.timed_cold`, beside records written before
    that rule) only those count. A frozen file offers its candidate with the
    kernel time it froze; any other source its one candidate."""
    if isinstance(source, FrozenLayouts):  # its one candidate, with the kernel time it froze
        found = lookup_candidate(source, workload_key, device_key)
        if found is None:
            return []
        entry = source.entry(workload_key, device_key)
        return [Option(found, entry.kernel_s, {}, f"frozen record {entry.record_id}")]
    if not is_store(source):
        found = lookup_candidate(source, workload_key, device_key)
        return [] if found is None else [Option(found)]
    records = [
        r
        for r in source.records(workload=workload_key, device=device_key, status="ok")
        if r.compute_s is not None
    ]
    if not records:
        return []
    best = source.best(workload_key, device_key)
    cold = [r for r in records if measured_cold(r)]
    if cold:  # timed as a model meets them (``laytune.runners.timed_cold``): only those
        records = cold
        best = best if best is not None and measured_cold(best) else None
    by_kernel = sorted(records, key=lambda r: (model_seconds(r), r.id or 0))
    weights = _weights(workload_key)
    logical = [
        r
        for r in by_kernel
        if all(
            index_map.is_identity() for _, _, index_map, _ in layouts_asked(r.candidate, weights)
        )
    ]
    picked: list[Any] = [best] if best is not None else []
    for record in [*fastest_per_layouts(by_kernel, weights)[:limit], *logical[:1]]:
        if all(record.candidate.key != p.candidate.key for p in picked):
            picked.append(record)
    return [_option(r) for r in picked]


def layouts_asked(candidate: Candidate, weights: Collection[str]) -> tuple[Any, ...]:
    """What ``candidate`` asks of the tensors around its operator: the shape,
    index map and pad value of each buffer but its ``weights`` (packed on the
    host, at no cost per run) and its local stages. Two candidates that ask
    the same force the same conversions on a plan."""
    return tuple(
        (name, layout.shape, layout.index_map, candidate.pad_value(name))
        for name, layout in candidate.layouts
        if not name.endswith(".local") and name not in weights
    )


def fastest_per_layouts(records: Sequence[Any], weights: Collection[str]) -> list[Any]:
    """The first record (``records`` fastest first) of each distinct set of
    layouts asked (:func:`layouts_asked`; ``weights``: the workload's), in
    that order. The records of one workload mostly share a few layout sets;
    the fastest kernels alone may all ask one of them (every one NCHW, say,
    where the operator's neighbours run NCHW16c), and then weighing has no
    candidate that agrees with the neighbours and must keep the rewrites
    between them."""
    seen: set[tuple[Any, ...]] = set()
    out = []
    for record in records:
        asked = layouts_asked(record.candidate, weights)
        if asked not in seen:
            seen.add(asked)
            out.append(record)
    return out


def measured_option(store: Any, workload_key: str, device_key: str, option: Option) -> Option:
    """``option`` with the times ``store`` records for its candidate (as it is
    when it has a compute time already, or nothing is recorded)."""
    if option.compute_s is not None:
        return option
    record = store.lookup(workload_key, device_key, option.candidate.key)
    return option if record is None or not record.ok else _option(record)


def _weights(workload_key: str) -> tuple[str, ...]:
    from laytune.exceptions import LaytuneError
    from laytune.ops import from_key

    try:
        return from_key(workload_key).weights
    except LaytuneError:
        return ()


def own_conversion_rates(store: Any, device_key: str, limit: int = 2000) -> list[float]:
    """Bytes per second of the pack and unpack kernels that operators' records
    measured with their candidates on the device (each the logical and the
    physical buffer, read and written), for a device with no conversion
    records: a measured rate beats a nominal one."""
    rates = []
    for record in store.records(device=device_key, status="ok", limit=limit):
        if record.candidate.layouts and record.program and record.result:
            buffers = {b["name"]: b for b in record.program.get("buffers", ())}
            for timing in (
                *record.result.get("pack_times", ()),
                *record.result.get("unpack_times", ()),
            ):
                buffer, seconds = buffers.get(timing.get("buffer")), timing.get("value_s")
                if buffer is None or not seconds:
                    continue
                itemsize = np.dtype(buffer["dtype"]).itemsize
                physical = buffer.get("physical_shape", buffer["shape"])
                elements = int(np.prod(buffer["shape"])) + int(np.prod(physical))
                rates.append(elements * itemsize / seconds)
    return rates


class PlanPricer:
    """Predicts the time of a plan's steps on one device (see the module docstring)."""

    def __init__(
        self,
        source: SourceLike,
        device_key: str,
        options: Mapping[str, Option],
        warm: bool = False,
    ) -> None:
        self.source = source
        self.device_key = device_key
        self.options = dict(options)
        self.warm = warm
        self.conversions = RecordedConversions(source, device_key) if is_store(source) else None
        tuned, generated = self._tuned_rate(), self._generated_rate()
        nominal = (NOMINAL_BANDWIDTH, f"a nominal {NOMINAL_BANDWIDTH / 1e9:.0f} GB/s")
        #: bytes per second (and where from) of a tuned conversion kernel ...
        self.bandwidth, self.bandwidth_source = tuned or generated or nominal
        #: ... and of a generated one (what a rewrite with no record runs)
        self.generated_bandwidth, self.generated_source = generated or tuned or nominal

    def _tuned_rate(self) -> tuple[float, str] | None:
        """Bytes per second of the device's tuned conversion kernels: the
        median over conversions of the best record of each, at the plan's
        cache state (cold records first, as :class:`RecordedConversions`)."""
        if self.conversions is None:
            return None
        by_workload: dict[str, list[Any]] = {}
        for record in self.source.records(device=self.device_key, op="convert", status="ok"):
            if record.value_s:
                by_workload.setdefault(record.workload_key, []).append(record)
        rates = []
        for key, records in by_workload.items():
            best = self.conversions.best_of(key, records)
            if best is None:
                continue
            nbytes = sum(
                int(np.prod(b["shape"])) * np.dtype(b["dtype"]).itemsize
                for b in (best.program or {}).get("buffers", ())
            )
            if nbytes:
                rates.append(nbytes / conversion_seconds(best, self.warm))
        if not rates:
            return None
        state = "warm" if self.warm else "cold"
        return statistics.median(rates), f"the best of {len(rates)} tuned conversions ({state})"

    def _generated_rate(self) -> tuple[float, str] | None:
        """Bytes per second of generated (untuned) conversion kernels on the
        device: the median of the pack and unpack kernels that operators'
        records measured with their candidates."""
        own = own_conversion_rates(self.source, self.device_key) if is_store(self.source) else []
        if not own:
            return None
        return statistics.median(own), (
            f"the median of {len(own)} pack and unpack kernels the operators' "
            "records measured on the device"
        )

    def choosing(self, options: Mapping[str, Option]) -> PlanPricer:
        """This pricer with the critical operators running ``options``."""
        chosen = copy.copy(self)
        chosen.options = dict(options)
        return chosen

    def operator(self, name: str, workload: Any, candidate: Candidate) -> Prediction:
        option = self.options.get(name)
        if option is not None and option.candidate == candidate and option.compute_s is not None:
            return Prediction(name, "operator", option.compute_s, option.origin)
        if is_store(self.source):
            record = self.source.lookup(workload.key, self.device_key, candidate.key)
            if record is not None and record.ok:
                return Prediction(name, "operator", model_seconds(record), f"record {record.id}")
        # a planned kernel with vectors streams like a tuned conversion; one
        # without runs element by element, like a generated one
        vector = candidate.knob_map.get("vector") or 1
        rate, words = (
            (self.bandwidth, self.bandwidth_source)
            if vector > 1
            else (self.generated_bandwidth, self.generated_source)
        )
        return Prediction(
            name, "operator", workload.bytes / rate, f"estimated: its bytes at {words}"
        )

    def rewrite(self, label: str, rewrite: Rewrite, ports: Sequence[tuple[str, str]]) -> Prediction:
        """``ports``: the (operator, port) pairs the rewrite feeds, or the
        producer's (operator, output port) for a rewrite out of its layout."""
        if self.conversions is not None:
            found = self.conversions.best(rewrite.src, rewrite.dst, rewrite.dtype, rewrite.dst_pad)
            if found is not None:
                seconds = conversion_seconds(found, self.warm)
                cold = measured_cold(found) and seconds == found.value_s
                state = "cold" if cold else "warm"
                return Prediction(
                    label, "rewrite", seconds, f"conversion record {found.id}, {state}"
                )
        logical = identity(rewrite.shape)
        for op_name, port in ports:
            option = self.options.get(op_name)
            if option is None:
                continue
            layout = option.candidate.layout_map.get(port)
            if layout is None:
                continue
            if is_identity_layout(rewrite.src) and same_layout(rewrite.dst, layout):
                seconds = option.conversions.get((port, "pack"))
            elif same_layout(rewrite.src, layout) and same_layout(rewrite.dst, logical):
                seconds = option.conversions.get((port, "unpack"))
            else:
                continue
            if seconds is not None:
                return Prediction(
                    label, "rewrite", seconds, f"{op_name}'s own kernel, {option.origin}"
                )
        # no record: the plan runs a generated kernel
        seconds = rewrite.nbytes / self.generated_bandwidth
        return Prediction(
            label, "rewrite", seconds, f"estimated: its bytes at {self.generated_source}"
        )
