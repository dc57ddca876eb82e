"""A kernel that hangs and one that crashes the measuring process (on a GPU,
its context), each inside a batch of good ones: the rest of the batch is
measured, and the time the runner takes to recover is printed (run with
``-s`` to see it; it is not asserted, timings belong to benchmarks).

Recovery is the batch's wall time minus that of the same batch with a good
candidate in the sabotaged one's place: for the hang, the time limit it
waits out plus starting a new worker; for the crash, starting a new worker
and making the workload's inputs again.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from laytune.runners import Builder, Device, ErrorKind, MeasureConfig, RunInput, Runner

pytestmark = pytest.mark.xdist_group("runners")

CONFIG = MeasureConfig(warmup=1, repeats=3, time_limit_s=2.0)
GOOD_AROUND = 3  # good candidates before and after the sabotaged one


def _timed(runner: Runner, batch: list[RunInput]) -> tuple[list, float]:
    start = time.perf_counter()
    results = runner.run(batch)
    return results, time.perf_counter() - start


@pytest.mark.parametrize(
    ("sabotage", "kind"), [("hang", ErrorKind.TIMEOUT), ("crash", ErrorKind.CRASH)]
)
def test_the_batch_goes_on_after_a_sabotaged_kernel(
    device: Device,
    kit: SimpleNamespace,
    sabotage: str,
    kind: ErrorKind,
    record_property: pytest.RecordProperty,
) -> None:
    if sabotage == "crash" and "CPU" not in device.info.device_type:
        # a GPU does not fault the process: the store kills its context (NVIDIA's
        # OpenCL answers INVALID_COMMAND_QUEUE), and the worker is replaced the same way
        kind = ErrorKind.DEVICE_LOST
    scale = kit.ScaleWorkload(tag=f"-{sabotage}")
    programs = [kit.scale_program(f"good{i}") for i in range(2 * GOOD_AROUND + 1)]
    bad = getattr(kit, f"{sabotage}_program")()
    with Builder(device, max_workers=1) as builder:
        builds = builder.build([*programs, bad])
    assert all(b.ok for b in builds)
    good_batch = [RunInput(b, scale) for b in builds[:-1]]
    sabotaged = list(good_batch)
    sabotaged[GOOD_AROUND] = RunInput(builds[-1], scale)

    with Runner(device, CONFIG) as runner:
        runner.run(good_batch[:1])  # the worker is up and holds the inputs
        _, clean_s = _timed(runner, good_batch)
        starts = runner.worker_starts
        results, sabotaged_s = _timed(runner, sabotaged)
        restarts = runner.worker_starts - starts
        after, _ = _timed(runner, good_batch[:2])

    kinds = [r.error_kind for r in results]
    expected = [ErrorKind.NONE] * len(sabotaged)
    expected[GOOD_AROUND] = kind
    assert kinds == expected, [(r.program_name, r.error_message) for r in results]
    assert all(r.value_s is not None and r.max_error == 0.0 for r in results if r.ok)
    assert restarts == 1  # one new worker, started at once, measured the rest
    assert all(r.ok for r in after)

    recovery_s = sabotaged_s - clean_s
    record_property("recovery_s", round(recovery_s, 3))
    print(
        f"\n{sabotage}: batch of {len(sabotaged)} in {sabotaged_s:.2f} s against {clean_s:.2f} s "
        f"all good: recovered in {recovery_s:.2f} s"
        + (f" (of which the {CONFIG.time_limit_s:g} s time limit)" if sabotage == "hang" else "")
    )
