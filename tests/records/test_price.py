"""The price of a record under each boundary policy: fixed, free, constant."""

from __future__ import annotations

from pathlib import Path

import pytest

from laytune import ops
from laytune.exceptions import BoundaryError
from laytune.layout import custom, identity
from laytune.records import (
    Boundary,
    BufferPolicy,
    Record,
    RecordedConversions,
    best_priced,
    measured_cold,
    open_database,
    price_record,
)
from laytune.space import Candidate, conversion_key

TRANSPOSE = ops.transpose((8, 8))
CONV = ops.conv2d(1, 4, 6, 6, 4, 3)
DEVICE = "test-device"


def _record(
    workload, layouts, compute_s, packs=(), unpacks=(), record_id=None, device=DEVICE
) -> Record:
    """A verified record of ``workload`` whose pack and unpack kernels took
    the given ``(buffer, seconds)`` times."""
    candidate = Candidate.make(layouts)
    buffers = [
        {"name": b.name, "role": b.role, "shape": list(b.shape), "dtype": b.dtype}
        for b in workload.buffers
    ]
    result = {
        "pack_times": [{"buffer": b, "value_s": s} for b, s in packs],
        "unpack_times": [{"buffer": b, "value_s": s} for b, s in unpacks],
    }
    return Record(
        workload.key,
        device,
        candidate,
        "ok",
        value_s=compute_s,
        program={"buffers": buffers},
        result=result,
        id=record_id,
    )


TRANSPOSED = custom((8, 8), "lambda i, j: [j, i]")


def test_the_default_boundary_fixes_data_and_keeps_weights_constant() -> None:
    assert Boundary.default(TRANSPOSE).policies == (
        ("X", BufferPolicy("fixed")),
        ("Y", BufferPolicy("fixed")),
    )
    policies = dict(Boundary.default(CONV).policies)
    assert policies["W"].kind == "constant" and policies["X"].kind == "fixed"
    assert policies[CONV.output.name].kind == "fixed"


def test_a_fixed_buffer_pays_its_conversion_every_call() -> None:
    record = _record(TRANSPOSE, {"X": TRANSPOSED}, 1e-3, packs=[("X", 2e-3)])
    price = price_record(record, Boundary.default(TRANSPOSE))
    assert price is not None
    assert price.compute_s == 1e-3
    assert [(c.buffer, c.direction, c.seconds) for c in price.charges] == [("X", "pack", 2e-3)]
    assert price.total_s == pytest.approx(3e-3)
    # the same record in logical layouts pays nothing: its pack is a copy of the caller's array
    plain = _record(TRANSPOSE, {"X": identity((8, 8))}, 1e-3, packs=[("X", 5e-4)])
    assert price_record(plain, Boundary.default(TRANSPOSE)).total_s == 1e-3


def test_a_free_buffer_pays_nothing() -> None:
    record = _record(
        TRANSPOSE, {"X": TRANSPOSED, "Y": TRANSPOSED}, 1e-3, [("X", 2e-3)], [("Y", 3e-3)]
    )
    free_x = price_record(record, Boundary.of(TRANSPOSE, {"X": "free"}))
    assert [(c.buffer, c.direction) for c in free_x.charges] == [("Y", "unpack")]
    assert free_x.total_s == pytest.approx(4e-3)
    both = price_record(record, Boundary.of(TRANSPOSE, {"X": "free", "Y": "free"}))
    assert both.charges == () and both.total_s == 1e-3


def test_a_constant_weight_is_not_charged_unless_fixed() -> None:
    weights = custom(CONV.buffer("W").shape, "lambda o, c, kh, kw: [c, kh, kw, o]")
    record = _record(CONV, {"W": weights}, 1e-3, packs=[("W", 4e-3)])
    assert price_record(record, Boundary.default(CONV)).total_s == 1e-3
    fixed = price_record(record, Boundary.of(CONV, {"W": "fixed"}))
    assert fixed.total_s == pytest.approx(5e-3)
    assert [c.buffer for c in fixed.charges] == ["W"]


def test_a_record_without_its_conversion_times_cannot_be_priced_when_fixed() -> None:
    record = _record(TRANSPOSE, {"X": TRANSPOSED}, 1e-3)  # measured without conversions
    assert price_record(record, Boundary.default(TRANSPOSE)) is None
    assert price_record(record, Boundary.of(TRANSPOSE, {"X": "free"})).total_s == 1e-3


def test_a_layout_the_caller_holds_is_priced_by_recorded_conversions(tmp_path: Path) -> None:
    held = Boundary.of(TRANSPOSE, {"X": "lambda i, j: [j, i]"})
    assert held.policy("X") == BufferPolicy("fixed", TRANSPOSED)
    # the caller holds X transposed: a candidate that wants it so pays nothing for it
    same = _record(TRANSPOSE, {"X": TRANSPOSED}, 1e-3, packs=[("X", 2e-3)])
    assert price_record(same, held).total_s == 1e-3
    # one that wants X row-major needs a conversion from the held layout: none recorded yet
    plain = _record(TRANSPOSE, {}, 5e-4)
    assert price_record(plain, held) is None
    with open_database(f"sqlite:///{tmp_path / 'p.db'}") as db:
        key = conversion_key(TRANSPOSED, identity((8, 8)), "float32")
        for vector, seconds in ((1, 7e-4), (4, 6e-4)):
            kernel = Candidate.make({}, {"kernel": "gather", "vector": vector})
            db.add(Record(key, DEVICE, kernel, "ok", value_s=seconds))
        price = price_record(plain, held, RecordedConversions(db, DEVICE))
        assert price is not None
        assert price.total_s == pytest.approx(5e-4 + 6e-4)  # the fastest recorded kernel
        assert price.charges[0].source.startswith("conversion record ")
        # another device's records say nothing about this one
        assert price_record(plain, held, RecordedConversions(db, "elsewhere")) is None


def test_recorded_conversions_timed_cold_come_before_faster_warm_ones(tmp_path: Path) -> None:
    """A conversion runs between other kernels, on data they evicted: a
    record timed with a cache flush prices it, though a warm one was faster."""
    key = conversion_key(TRANSPOSED, identity((8, 8)), "float32")
    with open_database(f"sqlite:///{tmp_path / 'p.db'}") as db:
        conversions = RecordedConversions(db, DEVICE)
        warm = Record(key, DEVICE, Candidate.make({}, {"vector": 4}), "ok", value_s=2e-4)
        db.add(warm)
        # only warm records: the fastest of them
        assert conversions.best(TRANSPOSED, identity((8, 8)), "float32", None).value_s == 2e-4
        for vector, seconds in ((1, 7e-4), (8, 5e-4)):
            launches = {"pack": 0, "compute": 4, "unpack": 0, "flush": 3}
            kernel = Candidate.make({}, {"vector": vector})
            db.add(
                Record(key, DEVICE, kernel, "ok", value_s=seconds, result={"launches": launches})
            )
        assert measured_cold(db.records(workload=key)[-1])
        assert not measured_cold(warm)
        found = RecordedConversions(db, DEVICE).best(TRANSPOSED, identity((8, 8)), "float32", None)
        assert found.value_s == 5e-4 and found.candidate.knob("vector") == 8


def test_the_best_record_depends_on_the_boundary() -> None:
    fast_kernel = _record(TRANSPOSE, {"X": TRANSPOSED}, 1e-3, packs=[("X", 2e-3)], record_id=1)
    no_conversion = _record(TRANSPOSE, {}, 2e-3, record_id=2)
    records = [fast_kernel, no_conversion]
    fixed = best_priced(records, Boundary.default(TRANSPOSE))
    assert fixed.id == 2 and fixed.value_s == 2e-3
    free = best_priced(records, Boundary.of(TRANSPOSE, {"X": "free"}))
    assert free.id == 1 and free.value_s == 1e-3
    assert free.objective.boundary == Boundary.of(TRANSPOSE, {"X": "free"})


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"Z": "free"}, "'Z', which is not a buffer"),
        ({"Y": "constant"}, "only an input can be constant"),
        ({"X": "loose"}, "'loose' is not one of"),
        ({"X": "lambda i: [i]"}, "is not a layout of (8, 8)"),
    ],
)
def test_a_boundary_that_does_not_fit_its_workload_is_refused(spec, words) -> None:
    with pytest.raises(BoundaryError, match=words.replace("(", r"\(").replace(")", r"\)")):
        Boundary.of(TRANSPOSE, spec)


def test_a_price_survives_the_records_json() -> None:
    record = _record(TRANSPOSE, {"X": TRANSPOSED}, 1e-3, packs=[("X", 2e-3)])
    price = price_record(record, Boundary.default(TRANSPOSE))
    again = Record.from_json(record.priced(price).to_json())
    assert again.objective == price
    assert again.compute_s == 1e-3 and again.value_s == pytest.approx(3e-3)
    assert again.conversions_s == pytest.approx(2e-3)
