"""TuneResult.explain: why the best layouts won, read off the records."""

from __future__ import annotations

import pandas as pd

from laytune import ops
from laytune.layout import custom, identity
from laytune.records import Boundary, Record, price_record
from laytune.search import TuneResult
from laytune.space import Candidate

MATMUL = ops.matmul(8, 8, 8)
HELD = {"A": "lambda i, j: [j, i]"}
TRANSPOSED = custom((8, 8), "lambda i, j: [j, i]")
KNOBS = {"block.i": 8, "vector": 8, "vector_axis": "j"}


def _record(layouts, compute_s, packs=(), record_id=1, knobs=KNOBS, boundary=HELD) -> Record:
    """A verified record of MATMUL priced under ``boundary``: its kernel took
    ``compute_s``, its own pack kernels ``packs``, and a conversion from the
    caller's layout is charged at the times ``packs`` give."""
    plain = {name: identity((8, 8)) for name in ("A", "B", "C")}
    candidate = Candidate.make({**plain, **layouts}, knobs)
    buffers = [
        {"name": b.name, "role": b.role, "shape": list(b.shape), "dtype": b.dtype}
        for b in MATMUL.buffers
    ]
    record = Record(
        MATMUL.key,
        "test-device",
        candidate,
        "ok",
        value_s=compute_s,
        program={"buffers": buffers},
        result={"pack_times": [{"buffer": b, "value_s": s} for b, s in packs]},
        id=record_id,
    )
    times = dict(packs)

    class Conversions:
        def conversion_s(self, src, dst, dtype, pad):
            return (times["A"], "conversion record 99") if "A" in times else None

    price = price_record(record, Boundary.of(MATMUL, boundary), Conversions())
    assert price is not None
    return record.priced(price)


def _result(best, reference, boundary=HELD, baseline=None, trials=None) -> TuneResult:
    return TuneResult(
        workload_key=MATMUL.key,
        device_key="test-device",
        device_name="test device",
        study_name="s",
        strategy="model",
        database="sqlite://",
        best=best,
        baseline=baseline,
        reference=reference,
        measured=24,
        references=1,
        cached=0,
        failures={},
        stop_reason="trial budget (24) spent",
        elapsed_s=1.0,
        read_trials=lambda: pd.DataFrame() if trials is None else trials,
        boundary=Boundary.of(MATMUL, boundary),
    )


def test_a_layout_held_by_the_caller_wins_by_the_conversion_it_saves() -> None:
    best = _record({"A": TRANSPOSED}, 2e-3, record_id=4)
    reference = _record({}, 1.9e-3, packs=[("A", 7e-3)], record_id=5)
    text = _result(best, reference).explain()
    assert text.splitlines()[0] == "why the layouts win 4.45x end to end:"
    assert "identity layouts, the same knobs: 8.9000 ms = kernel 1.9000 ms + A pack 7.0000 ms" in (
        text
    )
    assert "the best's layouts:               2.0000 ms = kernel 2.0000 ms, nothing to" in text
    assert "A as lambda i, j: [j, i]: the layout the caller holds it in" in text
    assert "identity layouts pay pack 7.0000 ms (conversion record 99) a call" in text
    assert "of the 6.9000 ms difference: 7.0000 ms of conversions not paid, " in text
    assert "0.1000 ms lost in the kernel" in text


def test_the_figures_are_the_records_own() -> None:
    best = _record({"A": TRANSPOSED}, 1e-3, record_id=7)
    reference = _record({}, 1.5e-3, packs=[("A", 0.5e-3)], record_id=8)
    text = _result(best, reference).explain()
    assert text.splitlines()[0] == "why the layouts win 2.00x end to end:"
    assert "1.0000 ms difference: 0.5000 ms of conversions not paid, 0.5000 ms saved in" in text
    assert "(record 7)" in text and "(record 8)" in text


def test_identity_layouts_that_win_say_what_the_other_layouts_cost() -> None:
    best = _record({}, 2e-3, record_id=5, boundary={})
    baseline = _record({}, 40e-3, record_id=3, knobs={"block.i": 1}, boundary={})
    trials = pd.DataFrame(
        {
            "record_id": [3, 5, 9, 10],
            "status": ["ok", "ok", "ok", "wrong_result"],
            "time_s": [40e-3, 2e-3, 3.5e-3, 1e-3],
            "kernel_s": [40e-3, 2e-3, 2.5e-3, 1e-3],
            "family.A": ["identity", "identity", "block", "permute"],
            "family.B": ["identity"] * 4,
        }
    )
    text = _result(best, best, boundary={}, baseline=baseline, trials=trials).explain()
    assert text.startswith("why identity layouts win: 2.0000 ms = kernel 2.0000 ms")
    assert (
        "the fastest candidate with other layouts: 3.5000 ms = kernel 2.5000 ms + "
        "conversions 1.0000 ms (record 9)" in text
    )
    assert "the win (the 20.00x over the baseline) is the knobs' (block.i=8, vector=8" in text


def test_a_reference_that_was_not_measured_says_so() -> None:
    best = _record({"A": TRANSPOSED}, 2e-3)
    assert "not measured" in _result(best, None).explain()
