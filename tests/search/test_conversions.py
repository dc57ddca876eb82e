"""Conversion kernels are tuned workloads: recorded per device, then used by
prices and frozen kernels in place of the generated ones."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import laytune
from laytune import ops
from laytune.cli import main
from laytune.codegen import lower
from laytune.layout import block, identity, permute
from laytune.records import (
    Boundary,
    Record,
    RecordedConversions,
    freeze,
    load_frozen,
    measured_cold,
    open_database,
    price_record,
)
from laytune.runners import MeasureConfig
from laytune.search import TuneOptions, conversion_starts, conversions_of, tune_conversions
from laytune.space import ConversionWorkload, SearchSpace

pytestmark = pytest.mark.xdist_group("opencl")

SHAPE = (16, 24)
WORKLOAD = ops.transpose(SHAPE, (1, 0))


@pytest.mark.slow
def test_a_tuned_conversion_kernel_prices_and_runs_in_frozen_programs(
    tmp_path: Path, laytune_device, cl_context
) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    device = laytune_device
    # a transpose kernel that wants X transposed: it pays for packing X
    space = SearchSpace(WORKLOAD, device.info)
    wanted = {"X": permute(SHAPE, (1, 0)), "Y": identity(SHAPE[::-1])}
    candidate = next(iter(space.candidates_with(wanted)))
    program = lower(WORKLOAD, candidate, device.info)
    db = open_database(url)
    kernel = Record(
        WORKLOAD.key,
        device.key,
        candidate,
        "ok",
        value_s=1e-3,
        program=program.to_json(),
        result={"pack_times": [{"buffer": "X", "value_s": 5e-4}], "unpack_times": []},
        device_name=device.name,
    )
    db.add(kernel)
    best = db.best(WORKLOAD, device)
    (conversion,) = conversions_of(best)
    assert conversion == ConversionWorkload(identity(SHAPE), permute(SHAPE, (1, 0)))

    options = TuneOptions(trials=6, batch=3, measure=MeasureConfig(warmup=1, repeats=3))
    result = laytune.tune(conversion, device, options=options, database=url, progress=False)
    # the default strategy, the cost model, describes compute kernels: a copy gets TPE
    assert options.strategy == "model" and result.study_name.endswith("/tpe")
    records = [r for r in db.records(workload=conversion.key) if r.ok]
    assert len(records) == 6
    assert any(not r.candidate.knobs for r in records)  # the generic kernel, the baseline
    assert result.baseline is not None and not result.baseline.candidate.knobs
    assert result.best.value_s == min(r.value_s for r in records)
    found = RecordedConversions(db, device.key).best(
        conversion.src, conversion.dst, "float32", None
    )
    assert found is not None and found.id == result.best.id

    # the price takes the faster of the kernel's own pack and the recorded one
    price = price_record(best, Boundary.default(WORKLOAD), RecordedConversions(db, device.key))
    assert price.charges[0].seconds == min(5e-4, result.best.value_s)

    # a frozen program packs with the recorded kernel, and still transposes
    frozen = load_frozen(freeze(url, tmp_path / "frozen.json", workloads=[WORKLOAD]))
    entry = frozen.entry(WORKLOAD, cl_context)
    assert ("X", "pack", f"conversion record {result.best.id}") in entry.conversions
    assert entry.program.pack[0].kernel.endswith("_tuned")
    x = WORKLOAD.make_inputs(3)["X"]
    np.testing.assert_array_equal(frozen.kernel(WORKLOAD, cl_context)(x), x.T)

    # tune_conversions finds the same conversion from the best records alone
    more = TuneOptions(trials=1, measure=MeasureConfig(warmup=1, repeats=3))
    (again,) = tune_conversions(db, device, workloads=[WORKLOAD.key], options=more)
    assert again.workload_key == conversion.key and again.study_name == result.study_name
    # every conversion record was timed cold, whatever the options said: one
    # flush before each timed run; then timed warm too, without the flushes
    config = more.measure
    for record in db.records(workload=conversion.key, status="ok"):
        again = len(record.result["contended_event_times_s"])  # timed again under load
        flushes = record.result["launches"]["flush"]
        assert measured_cold(record) and flushes == config.repeats + again
        launches = record.result["launches"]
        assert launches["compute"] == config.launch_count(
            0, 1, 0, config.repeats, timed_cold=True, contended_repeats=again
        )
        assert launches["compute"] == 1 + 2 * (config.warmup + config.repeats) + (
            again and config.warmup + again
        )
        assert len(record.result["warm_event_times_s"]) == config.repeats
        assert record.result["warm_value_s"] > 0


@pytest.mark.parametrize("cache", ["device", "small"])
def test_a_conversion_tune_starts_from_the_kernels_people_write(laytune_device, cache: str) -> None:
    """Square register tiles widest first, then a __local tile, gathers;
    nontemporal stores before plain where the device has them and the output
    would not stay in its last-level cache (32 KiB does on this device, not
    on one of 48 KiB); each start a candidate of the space (``tune`` measures
    them after the generic baseline)."""
    from laytune.space import ConversionSpace

    shape = (1, 32, 16, 16)
    conversion = ConversionWorkload(block(shape, 1, 16), identity(shape))
    info = laytune_device.info
    if cache == "small":
        info = dataclasses.replace(info, last_level_cache_size=48 << 10)
    space = ConversionSpace(conversion, info)
    starts = conversion_starts(space, 6)
    assert len(starts) == 6 and len({c.key for c in starts}) == 6
    assert all(space.check(c) for c in starts)
    first = starts[0].knob_map
    assert first["kernel"] == "tile" and first["vector"] == first["items"] == 16
    streaming = info.has_builtin("nontemporal_store") and cache == "small"
    assert (first.get("store") == "nontemporal") == streaming
    kinds = [c.knob("kernel") for c in starts]
    if streaming:  # the kinds take turns: nontemporal tile, local, then plain tile, ...
        assert kinds == ["tile", "local", "tile", "gather", "local", "gather"]
        assert [c.knob("store") for c in starts[:2]] == ["nontemporal", "nontemporal"]
    else:
        assert kinds == ["tile", "local", "gather", "tile", "local", "gather"]
    assert conversion_starts(space, 2) == starts[:2]


@pytest.mark.parametrize(("recorded_s", "runs"), [(9e-4, "generated"), (2e-4, "recorded")])
def test_freeze_keeps_the_faster_pack_and_its_time(
    tmp_path: Path, laytune_device, recorded_s: float, runs: str
) -> None:
    """A conversion record slower than the candidate's own pack does not
    replace it: the frozen program runs the kernels its end-to-end time is of."""
    from laytune.space import ConversionSpace

    device = laytune_device
    space = SearchSpace(WORKLOAD, device.info)
    wanted = {"X": permute(SHAPE, (1, 0)), "Y": identity(SHAPE[::-1])}
    candidate = next(iter(space.candidates_with(wanted)))
    program = lower(WORKLOAD, candidate, device.info)
    db = open_database(tmp_path / "c.db")
    own_pack_s = 5e-4
    db.add(
        Record(
            WORKLOAD.key,
            device.key,
            candidate,
            "ok",
            value_s=1e-3,
            program=program.to_json(),
            result={"pack_times": [{"buffer": "X", "value_s": own_pack_s}], "unpack_times": []},
            device_name=device.name,
        )
    )
    conversion = ConversionWorkload(identity(SHAPE), permute(SHAPE, (1, 0)))
    kernel = next(iter(ConversionSpace(conversion, device.info).enumerate()))
    recorded = db.add(
        Record(
            conversion.key,
            device.key,
            kernel,
            "ok",
            value_s=recorded_s,
            result={"launches": {"flush": 3}},
            device_name=device.name,
        )
    )
    (entry,) = load_frozen(freeze(db, tmp_path / "frozen.json", workloads=[WORKLOAD]))
    assert entry.time_s == pytest.approx(1e-3 + min(own_pack_s, recorded_s))
    (note,) = [k for b, d, k in entry.conversions if (b, d) == ("X", "pack")]
    if runs == "generated":
        assert note == f"generated (faster than conversion record {recorded.id})"
        assert not entry.program.pack[0].kernel.endswith("_tuned")
    else:
        assert note == f"conversion record {recorded.id}"
        assert entry.program.pack[0].kernel.endswith("_tuned")


def _add_blocked_record(db, workload, device, blocked: tuple[str, ...]) -> None:
    """A record of ``workload`` whose ``blocked`` buffers are NCHW8c (the
    input X packed, the output Y unpacked per call), the others identity."""
    shapes = {b.name: b.shape for b in workload.buffers}
    wanted = {name: identity(shape) for name, shape in shapes.items()}
    wanted.update({name: block(shapes[name], 1, 8) for name in blocked})
    candidate = next(iter(SearchSpace(workload, device.info).candidates_with(wanted)))
    times = [{"buffer": name, "value_s": 2e-4} for name in blocked]
    db.add(
        Record(
            workload.key,
            device.key,
            candidate,
            "ok",
            value_s=1e-3,
            program=lower(workload, candidate, device.info).to_json(),
            result={
                "pack_times": [t for t in times if t["buffer"] != "Y"],
                "unpack_times": [t for t in times if t["buffer"] == "Y"],
            },
            device_name=device.name,
        )
    )


@pytest.mark.slow  # starts the build and measure workers; the cause is in tests/space
def test_tune_conversions_on_a_conv2d_database(
    tmp_path: Path, laytune_device, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command on a database whose best conv2d record writes Y as NCHW8c:
    it tunes unpacking Y. Its space offers ``items`` 1 to a gather of
    vectors of 2 and 2 to every tile kernel; the exhaustive order reaches
    both within six trials, and optuna took them for one parameter."""
    device = laytune_device
    workload = ops.conv2d(1, 8, 2, 2, 8, 1)
    shapes = {b.name: b.shape for b in workload.buffers}
    url = f"sqlite:///{tmp_path / 'conv2d.db'}"
    db = open_database(url)
    _add_blocked_record(db, workload, device, ("Y",))
    (unpack,) = conversions_of(db.best(workload, device))
    assert unpack == ConversionWorkload(block(shapes["Y"], 1, 8), identity(shapes["Y"]))

    argv = ["tune-conversions", "--strategy", "exhaustive", "--trials", "6", "--quiet"]
    assert main([*argv, "--db", url]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "prices, freeze, export and plans now use" in out
    knobs = [r.candidate.knob_map for r in db.records(workload=unpack.key, status="ok")]
    assert len(knobs) == 6
    kinds = {(k.get("kernel"), k.get("vector"), k.get("items")) for k in knobs}
    assert ("gather", 2, 1) in kinds and any(kind == "tile" for kind, _, _ in kinds)


def test_the_conversion_jobs_share_their_workers_and_stop_at_an_interrupt(
    tmp_path: Path,
    laytune_device,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A record that packs X and unpacks Y pays for two conversions: their
    jobs get one builder and one runner; a job ended by Ctrl-C is the last."""
    import laytune.search._tune as tune_module

    device = laytune_device
    workload = ops.conv2d(1, 8, 2, 2, 8, 1)
    db = open_database(f"sqlite:///{tmp_path / 'two.db'}")
    _add_blocked_record(db, workload, device, ("X", "Y"))
    assert len(conversions_of(db.best(workload, device))) == 2

    class Stopped:
        def __init__(self, reason: str) -> None:
            self.stop_reason = reason

        def summary(self) -> str:
            return f"stopped: {self.stop_reason}"

    for reasons, expected in ((["trial budget", "trial budget"], 2), (["interrupted (Ctrl-C)"], 1)):
        calls: list[tuple[object, object]] = []

        def fake_tune(workload, device, *, builder, runner, reasons=reasons, calls=calls, **_):
            calls.append((builder, runner))
            return Stopped(reasons[len(calls) - 1])

        monkeypatch.setattr(tune_module, "tune", fake_tune)
        results = tune_conversions(db, device, options=TuneOptions(trials=2))
        assert [r.stop_reason for r in results] == reasons[:expected]
        assert len(calls) == expected
        assert calls[0][0] is not None and calls[0][1] is not None
        assert len(set(calls)) == 1  # the same builder and runner for every job
    # the command: interrupted, it exits 130 without claiming the kernels are in use
    monkeypatch.setattr(tune_module, "tune", lambda *a, **k: Stopped("interrupted (Ctrl-C)"))
    argv = ["tune-conversions", "--db", f"sqlite:///{tmp_path / 'two.db'}", "--quiet"]
    assert main(argv) == 130
    out = capsys.readouterr().out
    assert "stopped: interrupted (Ctrl-C)" in out and "now use the fastest" not in out
