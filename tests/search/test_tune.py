"""Tuning jobs: records as the cache, strategies, stopping, warm starts, Ctrl-C,
resuming after SIGKILL, and several workers on one study."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

import laytune
from laytune import ops
from laytune.exceptions import TuningError
from laytune.records import is_baseline, open_database
from laytune.search import TuneCallback, TuneOptions, params_of
from laytune.search._strategies import trial_params_of
from laytune.space import Candidate, SearchSpace
from tests.search import worker
from tests.search.devices import written_cpu

ROOT = Path(__file__).resolve().parents[2]
TINY = worker.OPTIONS


def run_tune(url: str, *, workload=worker.WORKLOAD, callbacks=(), **options):
    """A quiet job on ``workload`` (the small copy) in the small space TINY,
    with the TuneOptions fields ``options``."""
    options.setdefault("space", TINY)
    return laytune.tune(
        workload,
        database=url,
        options=TuneOptions(**options),
        callbacks=callbacks,
        progress=False,
    )


@pytest.mark.slow
def test_exhaustive_measures_every_candidate_once_and_finds_the_minimum(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    space = SearchSpace(worker.WORKLOAD, laytune.runners.default_device().info, worker.PAIR)
    result = run_tune(url, strategy="exhaustive", trials=1000, batch=8, space=worker.PAIR)
    assert result.stop_reason == "every valid candidate measured"
    frame = result.trials
    assert result.measured == len(space) == len(frame)
    assert frame["candidate_key"].is_unique
    assert set(frame["candidate_key"]) == {c.key for c in space.enumerate()}
    ok = frame[frame["status"] == "ok"]
    assert result.best.value_s == ok["time_s"].min()
    assert is_baseline(result.baseline)
    assert result.speedup == pytest.approx(result.baseline.value_s / result.best.value_s)
    # the records are the cache: a second job measures nothing again
    again = run_tune(url, strategy="exhaustive", trials=1000, space=worker.PAIR)
    assert again.measured == 0
    assert again.best == result.best


@pytest.mark.slow
def test_a_wrong_result_is_never_the_best(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from laytune.search import _tune

    lowered = _tune.lower
    sabotaged: list[str] = []

    def lower_with_a_bug(workload, candidate, device=None):
        program = lowered(workload, candidate, device=device)
        if candidate.knob("block.j") == 4 and candidate.layout("X").is_identity and not sabotaged:
            sabotaged.append(candidate.key)  # the fastest possible kernel: it does nothing
            kernel = program.compute[0].kernel
            body = program.source.index("{", program.source.index(f"void {kernel}(")) + 1
            source = program.source[:body] + " return; " + program.source[body:]
            program = type(program)(**{**program.__dict__, "source": source})
        return program

    monkeypatch.setattr(_tune, "lower", lower_with_a_bug)
    result = run_tune(
        f"sqlite:///{tmp_path / 'w.db'}", strategy="exhaustive", trials=1000, space=worker.PAIR
    )
    frame = result.trials.set_index("candidate_key")
    assert frame.loc[sabotaged[0], "status"] == "wrong_result"
    assert result.best.candidate.key != sabotaged[0]
    assert result.best.value_s == frame[frame["status"] == "ok"]["time_s"].min()


@pytest.mark.slow
def test_trial_budget_patience_and_timeout_stop_a_job(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'b.db'}"
    budget = run_tune(url, trials=5, batch=2, strategy="random", study_name="budget")
    assert budget.measured == 5 and budget.stop_reason == "trial budget (5) spent"
    patient = run_tune(
        url, trials=60, batch=1, patience=2, strategy="random", study_name="patience", seed=3
    )
    assert patient.stop_reason == "no improvement in 2 trials"
    assert patient.measured < 60
    hurried = run_tune(url, trials=60, batch=2, timeout=0.01, strategy="random", study_name="t")
    assert hurried.stop_reason == "time budget (0.01 s) spent"
    assert hurried.measured <= 4  # the batch in flight and the one already built


def test_unknown_strategy_and_bad_budgets_are_errors(tmp_path: Path) -> None:
    with pytest.raises(TuningError, match="unknown strategy 'annealing'"):
        run_tune(f"sqlite:///{tmp_path / 'e.db'}", strategy="annealing")
    with pytest.raises(TuningError, match="must be positive"):
        run_tune(f"sqlite:///{tmp_path / 'e.db'}", trials=0)


def test_a_shape_that_cannot_fit_the_device_is_refused_before_anything_starts(
    tmp_path: Path,
) -> None:
    device = laytune.runners.default_device()
    side = 1 << 20  # 4 TiB of float32 per buffer
    with pytest.raises(TuningError, match=r"X \(logical\) 4096 GiB.*allocates at most") as info:
        run_tune(f"sqlite:///{tmp_path / 'm.db'}", workload=ops.copy((side, side)))
    assert f"({device.info.max_mem_alloc_size} bytes)" in str(info.value)
    assert not (tmp_path / "m.db").exists()  # refused before the database was opened


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_and_keeps_every_record(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"

    class PressCtrlC(TuneCallback):
        def on_batch(self, job, records):
            if job.measured >= 4:
                raise KeyboardInterrupt

    result = run_tune(url, trials=40, batch=2, strategy="random", callbacks=[PressCtrlC()])
    assert result.stop_reason.startswith("interrupted")
    db = open_database(url)
    assert len(db) == result.measured == 4
    assert db.claims() == []  # the batch being built was given back
    study = optuna.load_study(study_name=result.study_name, storage=db.optuna_storage())
    assert not study.get_trials(states=(optuna.trial.TrialState.RUNNING,))


@pytest.mark.slow
def test_warm_start_tries_the_best_of_a_nearby_shape_first(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ws.db'}"
    first = run_tune(
        url, workload=ops.copy((16, 16)), strategy="exhaustive", trials=1000, space=worker.PAIR
    )
    nearby = ops.copy((16, 32))
    second = run_tune(url, workload=nearby, trials=2, batch=2, strategy="random")
    frame = second.trials.sort_values("trial")
    assert is_baseline(open_database(url).get(int(frame["record_id"].iloc[0])))
    space = SearchSpace(nearby, laytune.runners.default_device().info, TINY)
    best_knobs = dict(first.best.candidate.knobs)
    tried = open_database(url).get(int(frame["record_id"].iloc[1])).candidate
    assert dict(tried.knobs) == best_knobs
    assert [lay.family for _, lay in tried.layouts] == [
        lay.family for _, lay in first.best.candidate.layouts
    ]
    assert params_of(space, tried) is not None


def _records(url: str) -> list:
    return open_database(url).records()


def _start_worker(
    url: str, strategy: str, trials: int, batch: int = 2, space: str = "small"
) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.search.worker",
            url,
            strategy,
            str(trials),
            str(batch),
            space,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_a_job_killed_with_sigkill_resumes_the_same_study(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'k.db'}"
    job = _start_worker(url, "random", 1000, batch=1)
    deadline = time.monotonic() + 120
    while len(open_database(url)) < 6:
        assert job.poll() is None, job.stderr.read()
        assert time.monotonic() < deadline, "the job wrote no records"
        time.sleep(0.2)
    os.kill(job.pid, signal.SIGKILL)
    job.wait()
    before = {r.id: r for r in _records(url)}
    last_trial = max(r.trial for r in before.values())
    storage = open_database(url).optuna_storage()
    trials_before = len(optuna.load_study(study_name=worker.STUDY, storage=storage).trials)

    resumed = worker.main(url, "random", 6, 2)  # the same study, in this process

    after = {r.id: r for r in _records(url)}
    assert all(after[i] == r for i, r in before.items())  # nothing finished was lost
    keys = [(r.workload_key, r.device_key, r.candidate.key) for r in after.values()]
    assert len(keys) == len(set(keys))  # nothing duplicated
    new = [r for i, r in after.items() if i not in before]
    assert len(new) == 6 + resumed.references  # the layout reference is measured after
    assert min(r.trial for r in new) > last_trial  # the trial count goes on
    study = optuna.load_study(study_name=worker.STUDY, storage=storage)
    assert len(study.trials) > trials_before
    assert not study.get_trials(states=(optuna.trial.TrialState.RUNNING,))


def _two_workers_measure_each_candidate_once(url: str) -> None:
    jobs = [_start_worker(url, "exhaustive", 1000, space="pair") for _ in range(2)]
    outputs = [job.communicate(timeout=300) for job in jobs]
    for job, (_out, err) in zip(jobs, outputs, strict=True):
        assert job.returncode == 0, err
    records = _records(url)
    space = SearchSpace(worker.WORKLOAD, laytune.runners.default_device().info, worker.PAIR)
    keys = [r.candidate.key for r in records]
    assert len(keys) == len(set(keys)) == len(space)
    measured = [int(out.split()[1]) for out, _ in outputs]
    assert sum(measured) == len(space)


@pytest.mark.slow
def test_two_workers_on_one_sqlite_file_measure_each_candidate_once(tmp_path: Path) -> None:
    _two_workers_measure_each_candidate_once(f"sqlite:///{tmp_path / 'two.db'}")


@pytest.mark.slow
@pytest.mark.xdist_group("postgres")
def test_two_workers_on_postgresql_measure_each_candidate_once(postgres_url: str) -> None:
    _two_workers_measure_each_candidate_once(postgres_url)


@pytest.mark.slow
def test_a_candidate_clearly_slower_than_the_best_is_not_measured_to_the_end(
    tmp_path: Path,
) -> None:
    from laytune.runners import MeasureConfig

    config = MeasureConfig(warmup=1, repeats=9, early_stop_after=2)
    result = run_tune(
        f"sqlite:///{tmp_path / 'e.db'}",
        strategy="exhaustive",
        trials=1000,
        batch=4,
        early_stop=1.0,
        measure=config,
        space=worker.PAIR,
    )
    records = open_database(f"sqlite:///{tmp_path / 'e.db'}").records(status="ok")
    abandoned = [r for r in records if r.abandoned]
    full = [r for r in records if not r.abandoned]
    assert abandoned, "with the threshold at the best time, slower candidates stop early"
    assert all(len(r.event_times_s) == 2 for r in abandoned)
    assert all(len(r.event_times_s) == 9 for r in full)
    assert not result.best.abandoned
    assert result.best.value_s <= min(r.value_s for r in abandoned)


@pytest.mark.slow
def test_standard_layouts_are_tried_before_the_sampler(tmp_path: Path) -> None:
    from laytune.layout import block, permute
    from laytune.search import standard_candidates

    # the starts' forms on an AVX-512 CPU, whatever this machine's device (a
    # GPU's contraction takes another form: tests/codegen/test_lockstep_starts.py)
    info = written_cpu(16)
    matmul = SearchSpace(ops.matmul(64, 64, 64), info)
    starts = standard_candidates(matmul, 100)
    assert all(params_of(matmul, c) is not None for c in starts)  # all in the space
    transposed_b = [c for c in starts if c.layout("B") == permute((64, 64), (1, 0))]
    assert {c.knob("block.j") for c in transposed_b} >= {4, 8}
    conv = SearchSpace(ops.conv2d(1, 8, 8, 8, 8, 3, 1, 1), info)
    nchw4c = [
        c for c in standard_candidates(conv, 100) if c.layout("X") == block((1, 8, 8, 8), 1, 4)
    ]
    assert nchw4c and all(c.layout("Y") == block((1, 8, 8, 8), 1, 4) for c in nchw4c)
    assert len(standard_candidates(matmul, 3)) == 3
    # matmul's first start: an 8 x 2L block of C over packed panels of A and B
    # where the registers hold its 16 accumulators (AVX-512), else 8 x L
    lanes = info.float_lanes()
    columns = 2 * lanes if info.block_registers() >= 16 else lanes
    first_matmul = standard_candidates(matmul, 1)[0]
    assert (first_matmul.knob("block.i"), first_matmul.knob("block.j")) == (8, columns)
    assert first_matmul.layout("A") == block((64, 64), 0, 8)
    # the first window start takes the fewest cycles per FMA the registers
    # allow: on AVX-512, 4 vectors of filters by 4 columns, bound by its
    # FMAs with no column wasted on the 56-wide row (0.478 ms on 2 Zen 5
    # cores, where 6 columns took 0.499); with 16 filters, never more
    wide = SearchSpace(ops.conv2d(1, 64, 56, 56, 64, 3, 1, 1), info)
    first = standard_candidates(wide, 1)[0]
    assert first.layout("X") == block((1, 64, 56, 56), 1, 16)
    assert info.block_registers() == 28
    assert (first.knob("block.f"), first.knob("block.ow"), first.knob("vector")) == (64, 4, 16)
    narrow = SearchSpace(ops.conv2d(1, 16, 28, 28, 16, 3, 1, 1), info)
    assert all(c.knob("block.f") <= 16 for c in standard_candidates(narrow, 100))
    result = run_tune(
        f"sqlite:///{tmp_path / 's.db'}",
        workload=ops.matmul(64, 64, 64),
        space=None,
        trials=6,
        batch=6,
        starts=5,
        warm_start=0,
    )
    tried = [r.candidate.key for r in open_database(f"sqlite:///{tmp_path / 's.db'}").records()]
    here = SearchSpace(ops.matmul(64, 64, 64), laytune.runners.default_device().info)
    assert tried[1:6] == [c.key for c in standard_candidates(here, 5)]
    assert result.measured == 6


def test_a_forced_trial_is_created_with_its_params_in_one_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every candidate of the exhaustive strategy is forced: its trial is
    created holding the params the space asks (those of more than one
    choice), so asking them writes nothing."""
    writes: list[str] = []
    original = optuna.storages.RDBStorage.set_trial_param

    def counting(self, trial_id, name, value, distribution):
        writes.append(name)
        return original(self, trial_id, name, value, distribution)

    monkeypatch.setattr(optuna.storages.RDBStorage, "set_trial_param", counting)
    url = f"sqlite:///{tmp_path / 'f.db'}"
    result = run_tune(url, strategy="exhaustive", trials=6, batch=3, warm_start=0)
    assert result.measured == 6
    assert writes == []
    study = optuna.load_study(study_name=result.study_name, storage=url)
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) >= 6 and any(t.params for t in done)
    space = SearchSpace(worker.WORKLOAD, laytune.runners.default_device().info, TINY)
    for trial in done:
        assert all(len(d.choices) > 1 for d in trial.distributions.values())
        candidate = Candidate.from_json(trial.user_attrs["candidate"])
        assert trial.params == trial_params_of(space, candidate)[0]


@pytest.mark.slow
@pytest.mark.parametrize("overlap", [True, False])
def test_the_next_batch_builds_while_this_one_is_measured(overlap: bool, tmp_path: Path) -> None:
    from laytune.runners import BaseBuilder, BaseRunner, Builder, Runner

    events: list[str] = []

    class LoggingBuilder(BaseBuilder):  # any builder: here one around the local one
        def __init__(self, inner: BaseBuilder) -> None:
            self.inner = inner

        @property
        def device(self):
            return self.inner.device

        def build(self, batch):
            return self.inner.build(batch)

        def submit(self, batch):
            events.append("build")
            return super().submit(batch)

    class LoggingRunner(BaseRunner):
        def __init__(self, inner: BaseRunner) -> None:
            self.inner = inner

        @property
        def device(self):
            return self.inner.device

        def run(self, batch, *, abandon_above_s=None):
            events.append("measure")
            return self.inner.run(batch, abandon_above_s=abandon_above_s)

    device = laytune.runners.default_device()
    with Builder(device) as local_builder, Runner(device) as local_runner:
        builder, runner = LoggingBuilder(local_builder), LoggingRunner(local_runner)
        with builder, runner:
            result = laytune.tune(
                worker.WORKLOAD,
                device,
                database=f"sqlite:///{tmp_path / 'o.db'}",
                options=TuneOptions(
                    trials=6, batch=2, overlap=overlap, strategy="random", starts=0, space=TINY
                ),
                progress=False,
                builder=builder,
                runner=runner,
            )
        assert local_runner.worker_pid is not None  # tune left the caller's runner open
    if overlap:  # batch k+1 is submitted before batch k is measured
        assert events[:4] == ["build", "build", "measure", "build"]
    else:
        assert events[:4] == ["build", "measure", "build", "measure"]
    # three batches, then the layout reference of the best when it was not measured
    assert events.count("measure") == 3 + result.references


#: Steps of the spin below: ~50k dependent integer multiply-adds per work-item.
SPIN_STEPS = 50_000


def _lcg(value: int, steps: int = SPIN_STEPS) -> int:
    for _ in range(steps):
        value = (value * 1664525 + 1013904223) & 0xFFFFFFFF
    return value


#: What the spin ends on from 0xFFFFFFFF, and from no other start (the step is
#: a bijection of 32-bit words): no work-item's id reaches it, but no compiler
#: can know that, so the loop stays. (With a ``volatile`` float accumulator
#: instead, the identity kernel still won on an H200 with NVIDIA's OpenCL.)
SPIN_NEVER = _lcg(0xFFFFFFFF)


def _slow_when_identity(lowered):
    """``lower`` whose kernels of all-identity layouts spin first: a layout
    that is not the identity is then the best, whatever the device."""

    def lower(workload, candidate, device=None):
        program = lowered(workload, candidate, device=device)
        if not all(layout.is_identity for _, layout in candidate.layouts):
            return program
        kernel = program.compute[0].kernel
        body = program.source.index("{", program.source.index(f"void {kernel}(")) + 1
        spin = (
            " { uint h = (uint)get_global_id(0);"
            f" for (int k = 0; k < {SPIN_STEPS}; k++) h = h * 1664525u + 1013904223u;"
            f" if (h == {SPIN_NEVER}u) return; }} "
        )
        source = program.source[:body] + spin + program.source[body:]
        return type(program)(**{**program.__dict__, "source": source})

    return lower


def test_the_speedup_splits_into_the_knobs_and_the_layouts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from laytune.layout import identity, permute
    from laytune.records import Record, has_identity_layouts
    from laytune.search import _tune, layout_reference
    from laytune.space import Candidate, baseline_knobs

    monkeypatch.setattr(_tune, "lower", _slow_when_identity(_tune.lower))
    url = f"sqlite:///{tmp_path / 'split.db'}"
    shape = worker.WORKLOAD.buffers[0].shape
    transposed = Candidate.make(
        {"X": permute(shape, (1, 0)), "Y": identity(shape)},
        {**baseline_knobs(worker.WORKLOAD), "block.j": 4},
    )
    # on another device, so that the warm start tries it right after the baseline
    open_database(url).add(Record(worker.WORKLOAD.key, "elsewhere", transposed, "ok", value_s=1e-6))
    result = run_tune(url, trials=2, batch=2, strategy="random", starts=0)

    assert result.measured == 2 and result.references == 1
    best, reference, baseline = result.best, result.reference, result.baseline
    assert best.candidate.layout("X") == permute(shape, (1, 0))
    space = SearchSpace(worker.WORKLOAD, laytune.runners.default_device().info, TINY)
    assert reference.candidate == layout_reference(space, best.candidate)
    assert has_identity_layouts(reference) and reference.candidate.knobs == best.candidate.knobs
    assert reference.trial is not None and reference.study == result.study_name
    assert is_baseline(baseline) and baseline.candidate.knob("block.j") == 1
    assert result.speedup == pytest.approx(baseline.value_s / best.value_s)
    assert result.layout_speedup == pytest.approx(reference.value_s / best.value_s)
    assert result.layout_speedup > 1  # the identity kernels spin
    summary = result.summary()
    assert f"{result.speedup:.2f}x over the baseline" in summary
    assert f"{result.layout_speedup:.2f}x from the layouts" in summary
    assert "(+1 layout reference)" in summary

    frame = result.trials.set_index("record_id")
    assert frame.loc[best.id, "layout_speedup"] == pytest.approx(result.layout_speedup)
    assert frame.loc[best.id, "speedup"] == pytest.approx(result.speedup)
    assert frame.loc[reference.id, "layout_speedup"] == pytest.approx(1.0)
    assert frame.loc[baseline.id, "speedup"] == pytest.approx(1.0)

    # a second job whose one candidate (identity layouts, the first in the
    # exhaustive order) spins keeps the best and finds its reference recorded
    again = run_tune(url, trials=1, strategy="exhaustive")
    assert again.measured == 1 and again.best == best
    assert again.references == 0 and again.reference == reference


def test_trials_carry_times_repeats_and_nan_for_missing_numbers(tmp_path: Path) -> None:
    import numpy as np
    import pandas as pd

    result = run_tune(f"sqlite:///{tmp_path / 't.db'}", trials=4, batch=4, strategy="random")
    frame = result.trials
    assert frame["datetime_complete"].is_unique  # measured one after another
    measured = frame[frame["status"] == "ok"]
    assert (measured["datetime_start"] < measured["datetime_complete"]).all()
    assert (
        measured["duration"] == measured["datetime_complete"] - measured["datetime_start"]
    ).all()
    assert (measured["duration"] > pd.Timedelta(0)).all()
    for _, row in measured.iterrows():
        record = open_database(f"sqlite:///{tmp_path / 't.db'}").get(int(row["record_id"]))
        times = np.array(record.event_times_s)
        assert row["time_min_s"] == times.min() <= row["time_s"]
        q1, q3 = np.percentile(times, [25, 75])
        assert row["time_iqr_s"] == pytest.approx(q3 - q1)
        assert row["repeats"] == len(times)
    assert not frame.map(lambda value: value is None).any().any()


class _Answers:
    """A trial that answers a space's choices from recorded optuna params,
    taking a choice of one value as the job does, without a param."""

    def __init__(self, params: dict) -> None:
        self.params = params

    def suggest_categorical(self, name: str, choices) -> object:
        choices = list(choices)
        return choices[0] if len(choices) == 1 else self.params[name]


def test_the_study_records_only_the_choices_the_sampler_made(tmp_path: Path) -> None:
    """A choice of one value is no choice: the job takes it without writing a
    param to optuna's storage (a round trip each), and the params it does
    write still give every trial's candidate back through the space."""
    url = f"sqlite:///{tmp_path / 'p.db'}"
    result = run_tune(url, trials=6, batch=3, strategy="random", seed=2)
    db = open_database(url)
    study = optuna.load_study(study_name=result.study_name, storage=db.optuna_storage())
    space = SearchSpace(worker.WORKLOAD, laytune.runners.default_device().info, TINY)
    trials = [t for t in study.trials if "candidate" in t.user_attrs]
    assert len(trials) >= 6
    for trial in trials:
        assert trial.params, "a trial of the small space makes some choice"
        single = [n for n, d in trial.distributions.items() if len(d.choices) == 1]
        assert single == [], f"trial {trial.number} recorded choices of one value: {single}"
        rebuilt = space.suggest(_Answers(trial.params))
        assert rebuilt.canonical_json() == trial.user_attrs["candidate"]
