"""Jobs of one process share the space of a workload: a space is immutable,
and building it (every layout's facts) and counting it cost a job seconds."""

from __future__ import annotations

from laytune import ops
from laytune.runners import Device
from laytune.search import TuneOptions
from laytune.search._tune import _job_space
from laytune.space import SpaceOptions


def test_jobs_on_an_equal_workload_share_its_space(laytune_device: Device) -> None:
    def space(workload: ops.Workload, options: TuneOptions):
        return _job_space(workload, laytune_device, options)[2]

    first = space(ops.copy((24, 24)), TuneOptions())
    # another object of the same workload, another budget and boundary: the same space
    again = space(ops.copy((24, 24)), TuneOptions(trials=3, boundary={"X": "lambda i, j: [j, i]"}))
    assert again is first
    narrower = space(ops.copy((24, 24)), TuneOptions(space=SpaceOptions(vectors=(1,))))
    assert narrower is not first and len(narrower) < len(first)
    assert space(ops.copy((24, 40)), TuneOptions()) is not first
