"""What a tuning job ranks by: each candidate's price under the job's boundary.

A job never ranks a candidate by its compute kernel alone unless its
boundary charges nothing: every record it writes is priced
(:func:`laytune.records.price_record`) with the conversion times of the
candidate's own pack and unpack kernels and of the conversion kernels
recorded for the device. Records other jobs wrote (under another boundary,
or before boundaries existed) are priced again here, never compared by the
time they were stored with.

A ``fixed`` buffer that the caller holds in a layout of its own (not the
logical one) has no conversion kernel in a candidate's program; the job
measures the generic conversion kernel from that layout to each candidate
layout it meets (:meth:`JobPricing.missing`), once per layout, and keeps it
as a record of the conversion workload, as tuning that workload would.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from laytune.codegen import lower
from laytune.layout import Layout, identity
from laytune.records import Boundary, Price, Record, RecordedConversions, price_record
from laytune.runners import RunInput
from laytune.space import Candidate, ConversionWorkload

__all__ = ["JobPricing", "boundary_tag"]


def boundary_tag(workload: Any, boundary: Boundary) -> str:
    """What sets ``boundary`` apart from the workload's default, for a study
    name (``"free=X,Y"``; empty for the default)."""
    default = dict(Boundary.default(workload).policies)
    changed = [(name, p) for name, p in boundary.policies if default.get(name) != p]
    groups: dict[str, list[str]] = {}
    for name, policy in changed:
        kind = policy.kind if policy.layout is None else f"fixed@{policy.layout.describe()}"
        groups.setdefault(kind, []).append(name)
    return ";".join(f"{kind}={','.join(sorted(names))}" for kind, names in sorted(groups.items()))


class JobPricing:
    """Prices the records of one job's workload on its device under its boundary."""

    def __init__(self, database: Any, device: Any, workload: Any, boundary: Boundary) -> None:
        self.database = database
        self.device = device
        self.workload = workload
        self.boundary = boundary
        self.conversions = RecordedConversions(database, device.key)
        self._values: dict[str, float | None] = {}

    def price(self, record: Record) -> Price | None:
        return price_record(record, self.boundary, self.conversions)

    def priced(self, record: Record | None) -> Record | None:
        """``record`` as this boundary ranks it (None when it cannot be priced)."""
        if record is None:
            return None
        price = self.price(record)
        return None if price is None else record.priced(price)

    def note(self, record: Record) -> None:
        """Remember the value of a record this job priced itself."""
        self._values[record.candidate.key] = record.value_s if record.ok else None

    def known(self) -> dict[str, float | None]:
        """Candidate key -> price (None: failed or not priceable) of every
        candidate recorded for the workload on the device."""
        keys = self.database.measured(self.workload, self.device)
        if set(keys) - set(self._values):
            for record in self.database.records(workload=self.workload, device=self.device):
                if record.candidate.key not in self._values:
                    price = self.price(record) if record.ok else None
                    self._values[record.candidate.key] = None if price is None else price.total_s
        return {key: self._values.get(key) for key in keys}

    # -- conversions from a layout the caller names -----------------------------------
    def _held(self) -> list[tuple[str, Layout]]:
        return [
            (name, policy.layout)
            for name, policy in self.boundary.policies
            if policy.kind == "fixed"
            and policy.layout is not None
            and not policy.layout.is_identity
        ]

    def missing(self, candidates: Iterable[Candidate]) -> list[ConversionWorkload]:
        """The conversions from (to) a layout the caller holds into (out of)
        the layouts of ``candidates`` that no record of the device times."""
        held = self._held()
        if not held:
            return []
        decls = {b.name: b for b in self.workload.buffers}
        wanted: dict[str, ConversionWorkload] = {}
        for candidate in candidates:
            layouts = candidate.layout_map
            for name, layout in held:
                decl = decls[name]
                mine = layouts.get(name, identity(tuple(decl.shape)))
                if mine.index_map.equivalent(layout.index_map, layout.shape):
                    continue
                if mine.image_rank != 1:
                    continue  # an image: no conversion workload, the candidate stays unpriced
                pad = candidate.pad_value(name) if decl.role == "input" else None
                src, dst = (layout, mine) if decl.role == "input" else (mine, layout)
                if self.conversions.best(src, dst, decl.dtype, pad) is None:
                    workload = ConversionWorkload(src, dst, decl.dtype, pad)
                    wanted.setdefault(workload.key, workload)
        return list(wanted.values())

    def measure(self, workloads: Sequence[ConversionWorkload], builder: Any, runner: Any) -> None:
        """Measure the generic kernel of each conversion and record it."""
        if not workloads:
            return
        generic = Candidate.make({})
        programs = [lower(w, generic, self.device.info) for w in workloads]
        built = builder.submit(programs).result()
        results = runner.run([RunInput(b, w) for b, w in zip(built, workloads, strict=True)])
        for workload, program, result in zip(workloads, programs, results, strict=True):
            study = f"{workload.key}@{self.device.key}/generic"
            record = Record.measured(
                result, generic, program, device_name=self.device.name, study=study
            )
            self.database.add(record)
        self.conversions = RecordedConversions(self.database, self.device.key)
