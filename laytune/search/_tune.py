"""The tuning loop: propose a batch, build it while the last one is measured,
record, repeat until a budget is spent.

The loop stays thin: what to try is the strategy's (an optuna sampler over
:meth:`SearchSpace.suggest`), building and measuring are the runners',
persisting, progress and logging are callbacks on each batch.

:func:`tune` opens the job (its space, study and starting records) and hands
it to a scheduler, which decides when each batch is proposed, built and
measured (:meth:`_Scheduler.search`, then the layout reference), and passes
every measured batch to one batch step (:meth:`_Scheduler._step`): price,
record, tell the study, persist, call the watchers. The proposer
(:class:`_Proposer`) turns the strategy's trials into claimed, lowered
candidates and gives back what the job holds when it stops.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import os
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from laytune._stop import checkpoint
from laytune.codegen import KernelProgram, lower
from laytune.exceptions import DatabaseError, LayoutRejectedError, TuningError
from laytune.layout import FAMILIES
from laytune.ops import key_distance
from laytune.records import (
    DEFAULT_URL,
    Boundary,
    Record,
    RecordStore,
    error_reason,
    identity_twins,
    open_database,
    owner_alive,
    process_owner,
)
from laytune.runners import (
    BaseBuilder,
    BaseRunner,
    Device,
    RunInput,
    default_device,
    local_workers,
    memory_refusal,
    refuse_while_a_worker_starts,
    select_device,
)
from laytune.search._held import with_held_layouts
from laytune.search._job import Job, LogBatches, Persist, Progress, TuneCallback, TuneResult
from laytune.search._model_search import ModelProposals
from laytune.search._options import TuneOptions, options_from_keywords
from laytune.search._pricing import JobPricing, boundary_tag
from laytune.search._starts import conversion_starts, standard_candidates
from laytune.search._strategies import make_sampler, params_of, trial_params_of
from laytune.space import Candidate, ConversionSpace, ConversionWorkload, SearchSpace, SpaceOptions

__all__ = [
    "layout_reference",
    "missing_reference",
    "standard_candidates",
    "study_name_for",
    "tune",
    "warm_start_candidates",
]

#: Proposals in a row that are already measured (or held by another worker)
#: after which a sampler is taken to have exhausted what it will propose.
_MISS_LIMIT = 64
#: Seconds a clean-up after a stop waits for a database another writer holds.
_CLEAN_UP_WAIT_S = 1.0


def study_name_for(
    workload: Any, device: Device, strategy: str, boundary: Boundary | None = None
) -> str:
    """``<workload key>@<device key>/<strategy>``, and ``/<what differs>`` when
    ``boundary`` is not the workload's default (one objective per study)."""
    name = f"{workload.key}@{device.key}/{strategy}"
    tag = "" if boundary is None else boundary_tag(workload, boundary)
    return f"{name}/{tag}" if tag else name


@dataclass
class _Item:
    trial: Any
    candidate: Candidate
    program: KernelProgram | None
    rejected: str = ""


class _Asking:
    """An optuna trial as a space asks it: a choice of one value is no choice,
    taken without asking the trial. Each param optuna records is a round
    trip to its storage of its own, and most knobs of a space have one value
    for a given statement and layouts (15 of the 20 of a copy, 12 of 21 of a
    matmul): the sampler learns nothing from them."""

    def __init__(self, trial: Any) -> None:
        self.trial = trial

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        choices = list(choices)
        if len(choices) == 1:
            return choices[0]
        return self.trial.suggest_categorical(name, choices)

    def set_user_attr(self, key: str, value: Any) -> None:
        self.trial.set_user_attr(key, value)


class _Proposer:
    """Turns optuna trials into new candidates: skips recorded ones (the
    records are the cache, and the trial learns the recorded time), claims
    each one so that no other worker measures it, lowers it.

    What the job holds (its RUNNING trials, its claims) is given back as one
    unit by :meth:`abandon`, whatever instant a stop lands on: a trial is
    noted (by a mark it carries) before the write that creates it, and a
    candidate before the write that claims it, so neither can exist unseen
    by the stop path. :meth:`settle` lets go of candidates whose records are
    stored (the record's write drops the claim).
    """

    def __init__(self, job: Job, forced: Iterator[Candidate], sampled: bool) -> None:
        self.job = job
        self.forced = forced
        self.sampled = sampled
        self.owner = process_owner()
        self.exhausted = False
        self.exhausted_why = ""
        self.proposed: set[str] = set()  # by this job, recorded or still in flight
        self.held: set[str] = set()  # candidate keys claimed, or being claimed, not yet recorded
        self.marks: set[str] = set()  # of the trials this job created, or is creating
        storage = job.database.optuna_storage()
        self._trial_ids = functools.partial(
            storage.get_trial_id_from_study_id_trial_number,
            storage.get_study_id_from_name(job.study.study_name),
        )

    def _new_trial(
        self, params: dict[str, Any] | None = None, distributions: dict[str, Any] | None = None
    ) -> Any:
        """A RUNNING trial that names its owner from the moment it exists.

        ``study.ask()`` and naming the owner after it would leave a trial
        without an owner, RUNNING for ever, when the job stops in between;
        so the trial is created whole, owner included, in one write.
        ``params`` (with their ``distributions``) are a forced candidate's,
        written in that same write, so that asking them writes nothing;
        never through a WAITING trial: one could be popped by two workers at
        once on SQLite, which locks no rows, or by another job of the study.
        """
        import optuna

        study = self.job.study
        mark = uuid.uuid4().hex  # finds this trial again: add_trial returns nothing
        self.marks.add(mark)
        study.add_trial(
            optuna.trial.create_trial(
                state=optuna.trial.TrialState.RUNNING,
                params=params or {},
                distributions=distributions or {},
                user_attrs={"owner": self.owner, "proposal": mark},
            )
        )
        running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
        number = next(t.number for t in running if t.user_attrs.get("proposal") == mark)
        return optuna.trial.Trial(study, self._trial_ids(number))

    def _forced_trial(self, known: dict[str, float | None], forced: Iterator[Candidate]) -> Any:
        """A trial of the next candidate of ``forced`` not yet recorded, or None."""
        for candidate in forced:
            checkpoint()
            if candidate.key in known:
                continue
            found = trial_params_of(self.job.space, candidate)
            if found is None or found[2].key in known:
                continue
            return self._new_trial(found[0], found[1])
        return None

    def _claim(self, key: str) -> bool:
        """Claim ``key`` for this job, noted as held before the claim is written."""
        job = self.job
        self.held.add(key)
        if job.database.claim(job.workload.key, job.device.key, key, self.owner):
            return True
        self.held.discard(key)
        return False

    def next(self, count: int, only: Sequence[Candidate] | None = None) -> list[_Item]:
        """Up to ``count`` new items: the forced candidates, then the sampler's.
        With ``only``, those candidates alone (the ones not recorded yet)."""
        import optuna

        job = self.job
        items: list[_Item] = []
        misses = 0
        known: dict[str, float | None] = dict.fromkeys(self.proposed)
        known.update(job.pricing.known())
        forced = self.forced if only is None else iter(only)
        while len(items) < count and (only is not None or not self.exhausted):
            checkpoint()
            trial = self._forced_trial(known, forced)
            if trial is None:
                if only is not None:
                    break
                if not self.sampled:
                    self.exhausted = True
                    self.exhausted_why = "every valid candidate measured"
                    break
                trial = self._new_trial()
            candidate = job.space.suggest(_Asking(trial))
            key = candidate.key
            if key in known or not self._claim(key):
                value = known.get(key)
                if key in known:
                    job.cached += 1
                    trial.set_user_attr("cached", True)
                    job.study.tell(trial, math.inf if value is None else value)
                else:  # another worker is measuring it right now
                    job.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                misses += 1
                if misses > _MISS_LIMIT:
                    self.exhausted = True
                    self.exhausted_why = (
                        f"the sampler proposed only measured candidates {_MISS_LIMIT} times "
                        "in a row"
                    )
                continue
            misses = 0
            known[key] = None  # proposed: never again in this job
            self.proposed.add(key)
            try:
                program = lower(job.workload, candidate, device=job.device.info)
            except LayoutRejectedError as err:
                items.append(_Item(trial, candidate, None, str(err)))
                continue
            items.append(_Item(trial, candidate, program))
        return items

    def settle(self, records: Sequence[Record]) -> None:
        """Let go of candidates whose records are stored (their claims went
        with the write)."""
        self.held.difference_update(r.candidate.key for r in records)

    def abandon(self) -> None:
        """Give back everything this job holds (Ctrl-C, an error): every claim
        it may have written and not yet replaced by a record, and every trial
        it created that is still RUNNING, however far proposing had got."""
        import optuna

        job = self.job
        # A database that fails now (a full disk), or that another writer
        # keeps locked past a second, keeps the claim, or the trial; they die
        # with this process and the next job takes them over. A stop must not
        # wait out the connection's minute on a lock: the rest is skipped.
        job.database.end_optuna_session()
        for key in sorted(self.held):
            try:
                job.database.release(
                    job.workload.key, job.device.key, key, self.owner, wait_s=_CLEAN_UP_WAIT_S
                )
            except DatabaseError:
                self.held.clear()
                return
        self.held.clear()
        try:
            running = job.study.get_trials(
                deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)
            )
        except Exception:  # the storage is gone
            return
        for trial in running:
            if trial.user_attrs.get("proposal") in self.marks:
                with contextlib.suppress(Exception):
                    job.study.tell(
                        trial.number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True
                    )


def _translate(candidate: Candidate, space: SearchSpace) -> Candidate | None:
    """The same families and parameters on this space's buffer shapes."""
    layouts = {}
    for name, layout in candidate.layouts:
        try:
            shape = space.layouts(name)[0].shape
        except KeyError:
            return None
        if layout.shape == shape:
            layouts[name] = layout
            continue
        if layout.family not in FAMILIES or layout.parts:
            return None
        try:
            layouts[name] = FAMILIES[layout.family](shape, **dict(layout.params))
        except Exception:  # the parameters do not fit this shape
            return None
    return Candidate.make(layouts, dict(candidate.knobs), dict(candidate.pad_values))


def warm_start_candidates(job: Job, limit: int) -> list[Candidate]:
    """The best candidates recorded for this workload on other devices, then
    for the nearest shapes of the same operator, translated to this workload."""
    workload, device = job.workload, job.device
    ranked: list[tuple[float, float, Candidate]] = []
    if isinstance(workload, ConversionWorkload):
        return []
    for record in job.database.best_records(op=workload.name):
        if record.device_key == device.key and record.workload_key == workload.key:
            continue
        distance = key_distance(record.workload_key, workload.key)
        if math.isinf(distance):
            continue
        translated = _translate(record.candidate, job.space)
        if translated is not None:
            ranked.append((distance, record.value_s or math.inf, translated))
    ranked.sort(key=lambda t: (t[0], t[1]))
    unique = list({c.key: c for _, _, c in ranked}.values())
    return unique[:limit]


def layout_reference(space: SearchSpace, candidate: Candidate) -> Candidate | None:
    """The identity layouts with ``candidate``'s knobs, as ``space`` makes it
    (:func:`laytune.records.identity_twins`): what ``candidate``'s layouts are
    measured against. None when the space does not hold it (knobs that
    identity layouts do not admit)."""
    for twin in identity_twins(candidate):
        found = params_of(space, twin)
        if found is not None:
            return found[1]
    return None


def missing_reference(space: SearchSpace, candidate: Candidate, recorded: Any = None) -> str:
    """Why ``candidate`` has no layout reference (:func:`layout_reference`):
    the space's first reason for refusing identity layouts with its knobs
    (a knob's reason before a buffer's: it names what the knobs need), or
    what became of the reference's record ``recorded``."""
    if layout_reference(space, candidate) is None:
        verdict = space.check(identity_twins(candidate)[0])
        reasons = [r for r in verdict.reasons if not r.startswith("buffer ")]
        first = (reasons or list(verdict.reasons) or ["the space does not hold them"])[0]
        first = first.split("; ")[0]
        rule, _, rest = first.partition(": ")
        if rest.startswith(rule):  # "vector: vector 8 along 'f': ..."
            first = rest
        return f"identity layouts with the same knobs are not a candidate: {first}"
    twin = "identity layouts with the same knobs"
    if recorded is None:
        return f"{twin} were not measured: the job stopped before its layout reference"
    if not recorded.ok:
        return f"{twin} failed: record {recorded.id}, {recorded.status}"
    return f"{twin}, record {recorded.id}, cannot be priced under this boundary"


def _fail_stale_trials(study: Any) -> None:
    """Trials left RUNNING by a killed process of this host become FAIL, so the
    study resumes cleanly (other hosts' trials are left alone)."""
    import optuna

    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        owner = trial.user_attrs.get("owner")
        if owner is not None and owner_alive(owner) is False:
            study.tell(trial.number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)


def _resolve_device(device: Any) -> Device:
    if device is None:
        return default_device()
    if isinstance(device, Device):
        return device
    return select_device(device)


def tune(
    workload: Any,
    device: Any = None,
    *,
    options: TuneOptions | None = None,
    database: RecordStore | str | os.PathLike[str] = DEFAULT_URL,
    callbacks: Sequence[TuneCallback] = (),
    progress: bool = True,
    builder: BaseBuilder | None = None,
    runner: BaseRunner | None = None,
    **legacy: Any,
) -> TuneResult:
    """Search the layouts of ``workload`` on ``device`` and record every trial.

    - ``device``: a Device, index, ``platform:device`` pair or name substring
      (default: :func:`laytune.runners.default_device`).
    - ``options``: a :class:`TuneOptions` (budget, strategy, seed, batch,
      stopping, warm start, measurement, space, boundary); default
      ``TuneOptions()``. Candidates are ranked by their price under the
      boundary (:class:`laytune.records.Price`): by default pack + compute +
      unpack, weights packed once.
    - ``database``: a :class:`laytune.records.RecordStore` or a URL to open
      one; the optuna study (named ``options.study_name``, default
      ``<workload>@<device>/<strategy>``) lives in it, so calling again
      resumes the study.
    - ``callbacks``: :class:`TuneCallback` objects, called after the built-in
      ones: persisting (first, so records have ids), progress
      (``progress=True``) and logging.
    - ``builder``, ``runner``: a :class:`laytune.runners.BaseBuilder` and
      :class:`laytune.runners.BaseRunner` for ``device`` to use instead of
      local worker processes (a remote runner, say); the caller keeps them
      open and closes them. The local builder keeps what it compiles in
      :func:`laytune.runners.build_cache_dir` (a program built before, on
      the same device and driver, is not compiled again; bounded, least
      recently used first; ``LAYTUNE_BUILD_CACHE=0`` turns it off). The
      local workers of a job that ends normally stay warm for the next job
      of this process (:func:`laytune.runners.keep_seconds`, 30 s by
      default; :func:`laytune.runners.release_workers` closes them now).

    The keywords ``tune`` took before :class:`TuneOptions` (``trials=``,
    ``strategy=``, ..., ``options=`` for space options) still work for this
    release, with a :class:`DeprecationWarning`.

    The identity baseline is measured first (once per workload and device).
    When the search ends (not on Ctrl-C or an error), the identity layouts
    with the best candidate's knobs (:func:`layout_reference`) are measured
    too, if not recorded yet, so that the result says what the layouts
    bought apart from the knobs; this reference is a record like any other
    but does not count against ``trials``.

    Ctrl-C (KeyboardInterrupt, at any moment) stops after cleaning up: the
    candidates in flight are given back, the workers stopped, every finished
    record kept; the result's ``stop_reason`` starts with "interrupted". A
    database that fails during the job (a full disk, a lost server) raises
    :class:`~laytune.exceptions.DatabaseError`; what it committed before stays.
    """
    refuse_while_a_worker_starts("laytune.tune")
    if legacy or isinstance(options, SpaceOptions):
        options = options_from_keywords(options, legacy)  # warns at the caller's line
    opts = options if options is not None else TuneOptions()
    if not isinstance(opts, TuneOptions):
        raise TuningError(f"options must be a TuneOptions, got {opts!r}")
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    device = _resolve_device(device)
    _refuse_misfits(workload, device, builder, runner)
    job = _open_job(workload, device, opts, open_database(database))
    watchers: list[TuneCallback] = [Progress()] if progress else []
    scheduler = _Scheduler(job, opts, [*watchers, LogBatches(), *callbacks])
    scheduler.run(builder, runner)
    return _result(job)


def _refuse_misfits(
    workload: Any, device: Device, builder: BaseBuilder | None, runner: BaseRunner | None
) -> None:
    """Refuse, before anything starts, a workload too large for ``device``
    and a builder or runner of another device."""
    # Every candidate holds each buffer in its logical layout and in its own,
    # which is at least as large: if that does not fit, no candidate does.
    least = {
        f"{buffer.name} ({view})": buffer.nbytes
        for buffer in getattr(workload, "buffers", ())
        for view in ("logical", "physical")
    }
    too_large = memory_refusal(device.info, least)
    if too_large is not None:
        raise TuningError(f"{workload.key} does not fit the device: {too_large}")
    for given in (builder, runner):
        if given is not None and given.device.key != device.key:
            raise TuningError(
                f"{type(given).__name__} works on {given.device.name} ({given.device.key}), "
                f"the job on {device.name} ({device.key})"
            )


def _job_space(workload: Any, device: Device, opts: TuneOptions) -> tuple[str, Boundary, Any]:
    """The job's strategy, boundary and space. A conversion workload has no
    boundary (it is the conversion) and no cost model (its features describe
    compute kernels, not copies): ``"model"`` searches it with ``"tpe"``."""
    if isinstance(workload, ConversionWorkload):
        if opts.boundary:
            raise TuningError("a conversion workload has no boundary to set: it is the conversion")
        strategy = "tpe" if opts.strategy == "model" else opts.strategy
        return strategy, Boundary(()), ConversionSpace(workload, device.info)
    boundary = Boundary.of(workload, opts.boundary)
    try:
        hash((workload, device.info, opts.space))
    except TypeError:  # a workload (or options) that cannot be a key: a space of its own
        return opts.strategy, boundary, SearchSpace(workload, device.info, opts.space)
    return opts.strategy, boundary, _shared_space(workload, device.info, opts.space)


@functools.lru_cache(maxsize=4)
def _shared_space(workload: Any, device: Any, options: Any) -> SearchSpace:
    """The space of ``workload`` on ``device`` under ``options``, shared by the
    jobs of this process: a space is immutable, and its construction (every
    layout's facts) and what it has counted and memoised since cost a job
    seconds. Keyed by value (workloads, device facts and options compare by
    their fields), the last four."""
    return SearchSpace(workload, device, options)


def _open_job(workload: Any, device: Device, opts: TuneOptions, db: RecordStore) -> Job:
    """The job: its space, its optuna study in ``db`` (created, or resumed with
    this host's dead trials failed), its pricing, and the best and baseline
    records it starts from."""
    import optuna

    strategy, boundary, space = _job_space(workload, device, opts)
    if not opts.measure.measure_conversions and not boundary.charges_nothing:
        raise TuningError(
            f"boundary {boundary} charges conversions but measure.measure_conversions is "
            "off: measure them, or make the buffers free"
        )
    name = opts.study_name or study_name_for(workload, device, strategy, boundary)
    study = optuna.create_study(
        study_name=name,
        storage=db.optuna_storage(),
        sampler=make_sampler(strategy, opts.seed),
        direction="minimize",
        load_if_exists=True,
    )
    _fail_stale_trials(study)
    job = Job(
        workload, device, space, db, study, name, strategy, opts.trials, opts.timeout, opts.patience
    )
    job.boundary = boundary
    job.pricing = JobPricing(db, device, workload, boundary)
    job.best = db.best(workload, device, boundary=boundary)
    # the space's baseline: the plain kernel, or where the device runs only
    # matrix kernels (float16 without cl_khr_fp16) the plainest of those
    job.baseline_candidate = space.identity()
    recorded = db.records(workload=workload, device=device, status="ok")
    job.baseline = job.pricing.priced(next((r for r in recorded if job.is_baseline(r)), None))
    return job


def _proposal_order(job: Job, opts: TuneOptions) -> Iterator[Candidate]:
    """The candidates the job proposes before its sampler, or instead of it:
    the baseline, the warm starts, then every candidate of the space
    (``exhaustive``) or the standard starts, then the cost model's batches
    (``model``)."""
    space, trials = job.space, job.trials
    forced: list[Candidate] = [job.baseline_candidate]
    if opts.warm_start:
        forced += warm_start_candidates(job, opts.warm_start)
    if job.strategy == "exhaustive":
        return iter([*forced, *space.enumerate()])
    if isinstance(job.workload, ConversionWorkload):  # a few: the sampler finds the rest
        starts = conversion_starts(space, trials // 8 if opts.starts is None else opts.starts)
    else:
        starts = standard_candidates(space, trials // 4 if opts.starts is None else opts.starts)
        starts = with_held_layouts(space, job.boundary, starts)
    forced += starts
    if job.strategy == "model":
        return itertools.chain(forced, ModelProposals(job, opts.seed, opts.batch, leads=starts))
    return iter(forced)


def _programs(items: Sequence[_Item]) -> list[KernelProgram]:
    """The programs of ``items`` to build (rejected candidates have none)."""
    return [item.program for item in items if item.program is not None]


class _Scheduler:
    """Drives one job's batches through its builder and runner: proposes a
    batch, builds it (the next one while this one is measured, with
    ``overlap``), measures it, and hands each measured batch to
    :meth:`_step`, the one place a batch is priced, recorded and announced.
    The search ends when the budget is spent or the proposer is exhausted;
    then the best candidate's layout reference is measured, outside the
    budget. A stop or an error at any point gives back what the job holds.
    """

    def __init__(self, job: Job, opts: TuneOptions, watchers: Sequence[TuneCallback]) -> None:
        self.job = job
        self.batch = opts.batch
        self.measure = opts.measure
        self.early_stop = opts.early_stop
        self.overlap = opts.overlap
        if self.overlap is None:  # on a CPU the compiler would take the measured kernel's cores
            self.overlap = not job.device.info.is_cpu
        sampled = job.strategy != "exhaustive"
        self.proposer = _Proposer(job, _proposal_order(job, opts), sampled=sampled)
        self.persist = Persist()  # first: the watchers see records with ids
        self.watchers = list(watchers)
        self.builder: BaseBuilder
        self.runner: BaseRunner

    def run(self, builder: BaseBuilder | None, runner: BaseRunner | None) -> None:
        """Search, then measure the layout reference, with ``builder`` and
        ``runner`` or local ones (closed at the end); the callbacks'
        ``on_end`` comes whatever happens. Ctrl-C ends the job with what it
        recorded; a failed write of the study is a DatabaseError."""
        import optuna

        job = self.job
        for callback in (self.persist, *self.watchers):
            callback.on_start(job)
        try:
            with contextlib.ExitStack() as owned:
                if builder is None or runner is None:
                    local = owned.enter_context(local_workers(job.device, self.measure))
                    builder = local[0] if builder is None else builder
                    runner = local[1] if runner is None else runner
                self.builder, self.runner = builder, runner
                self.search()
                self.measure_reference()
        except KeyboardInterrupt:
            job.stop_reason = "interrupted; every finished record is kept"
            self.proposer.abandon()
        except optuna.exceptions.StorageInternalError as err:  # its SQLAlchemy error says why
            job.stop_reason = "error"
            self.proposer.abandon()
            url = job.database.safe_url
            reason = error_reason(err, url)  # the driver's words, and a full disk's room
            raise DatabaseError(f"writing the optuna study to {url}: {reason}") from None
        except BaseException:
            job.stop_reason = "error"
            self.proposer.abandon()
            raise
        finally:
            for callback in (self.persist, *self.watchers):
                callback.on_end(job)

    def search(self) -> None:
        """Batches until the budget is spent or nothing new is proposed."""
        job = self.job
        pending = self.proposer.next(min(self.batch, job.trials))
        future = self.builder.submit(_programs(pending))
        while pending:
            checkpoint()
            # proposed while this batch compiles in the build workers, where
            # the host had waited idle (its first proposal, with the model
            # strategy's pool and first fit, is seconds): it reads no build
            following = self._following(len(pending))
            built = future.result()
            programs = _programs(following)
            if programs and self.overlap:  # build the next batch while this one is measured
                future = self.builder.submit(programs)
            results = self._measure(built, early_stop=True)
            if programs and not self.overlap:
                future = self.builder.submit(programs)
            self._step(pending, results)
            pending = following
        if job.stop_reason is None:
            job.stop_reason = job.out_of_budget() or self.proposer.exhausted_why or "done"

    def _following(self, in_hand: int) -> list[_Item]:
        """The batch after the ``in_hand`` candidates being measured: none once
        the budget is spent (its reason noted, even if the batch in hand
        brings a new best)."""
        job = self.job
        spent = job.out_of_budget()
        if spent is not None:
            job.stop_reason = spent
            return []
        room = job.trials - job.measured - in_hand
        return self.proposer.next(min(self.batch, room)) if room > 0 else []

    def measure_reference(self) -> None:
        """The best candidate's layout reference, if it is not recorded (and
        not being measured by another worker): identity layouts with its knobs."""
        job = self.job
        twin = None if job.best is None else layout_reference(job.space, job.best.candidate)
        reference = [] if twin is None else self.proposer.next(1, only=[twin])
        if not reference:
            return
        programs = _programs(reference)
        built = self.builder.submit(programs).result() if programs else []
        self._step(reference, self._measure(built, early_stop=False), reference=True)

    def _measure(self, built: Sequence[Any], *, early_stop: bool) -> Iterator[Any]:
        """The runner's results of ``built``; with ``early_stop`` a candidate
        clearly slower than the best is not measured to the end."""
        job = self.job
        inputs = [RunInput(b, job.workload) for b in built]
        if early_stop and self.early_stop is not None and job.best is not None:
            threshold = job.best.value_s * self.early_stop  # type: ignore[operator]
            return iter(self.runner.run(inputs, abandon_above_s=threshold))
        return iter(self.runner.run(inputs))

    def _step(
        self, items: Sequence[_Item], results: Iterator[Any], *, reference: bool = False
    ) -> None:
        """The batch step: price ``items`` (measuring the conversions their
        held buffers need), record each with its result, tell the study,
        persist, let go of their claims, update the job and call the watchers."""
        job = self.job
        held = job.pricing.missing(i.candidate for i in items if i.program is not None)
        job.pricing.measure(held, self.builder, self.runner)
        records = [_record(job, item, results) for item in items]
        _tell(job, items, records)
        self.persist.on_batch(job, records)  # ids first: the job's best is a stored record
        self.proposer.settle(records)
        for record in records:
            job.note(record, reference=reference)
        for callback in self.watchers:
            callback.on_batch(job, records)


def _result(job: Job) -> TuneResult:
    """What the job found, with the best record of the database under its
    boundary and that record's layout reference, or why it has none."""
    db, workload, device, name = job.database, job.workload, job.device, job.study_name
    best = db.best(workload, device, boundary=job.boundary)
    twin = None if best is None else layout_reference(job.space, best.candidate)
    recorded = None if twin is None else db.lookup(workload.key, device.key, twin.key)
    reference = None if recorded is None else job.pricing.priced(recorded)
    return TuneResult(
        workload_key=workload.key,
        device_key=device.key,
        device_name=device.name,
        study_name=name,
        strategy=job.strategy,
        database=db.safe_url,
        best=best,
        baseline=job.baseline,
        reference=reference,
        no_reference=""
        if best is None or reference is not None
        else missing_reference(job.space, best.candidate, recorded),
        boundary=job.boundary,
        measured=job.measured,
        references=job.references,
        cached=job.cached,
        failures=dict(job.failures),
        stop_reason=job.stop_reason or "done",
        elapsed_s=job.elapsed_s,
        read_trials=functools.partial(db.to_dataframe, study=name),
    )


def _tell(job: Job, items: Sequence[_Item], records: Sequence[Record]) -> None:
    """Give each trial its record's price (inf when failed or not priceable)."""
    for item, record in zip(items, records, strict=True):
        item.trial.set_user_attr("status", record.status)
        value = (
            None
            if record.objective is None and not job.boundary.charges_nothing
            else record.value_s
        )
        job.study.tell(item.trial, math.inf if not record.ok or value is None else value)


def _record(job: Job, item: _Item, results: Iterator[Any]) -> Record:
    meta = {
        "device_name": job.device.name,
        "study": job.study_name,
        "trial": item.trial.number,
        "strategy": job.strategy,
        "run": job.run,
    }
    if item.program is None:
        record = Record.rejected(
            job.workload.key, job.device.key, item.candidate, item.rejected, **meta
        )
    else:
        record = Record.measured(
            next(results),
            item.candidate,
            item.program,
            boundary=job.boundary,
            conversions=job.pricing.conversions,
            **meta,
        )
    job.pricing.note(record)
    return record
