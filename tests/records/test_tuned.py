"""Frozen programs with tuned conversions: what each buffer's conversion runs."""

from __future__ import annotations

from laytune import layout as L
from laytune import ops
from laytune.codegen import lower
from laytune.records._tuned import with_tuned_conversions
from laytune.space import Candidate


class NoRecords:
    """A conversion store with no record."""

    def best(self, *args: object) -> None:
        return None


def test_a_frozen_program_says_an_aliased_buffer_runs_no_conversion() -> None:
    workload = ops.matmul(8, 12, 16)
    layouts = {b.name: L.identity(b.shape) for b in workload.buffers}
    candidate = Candidate.make({**layouts, "A": L.permute((8, 16), (1, 0))})
    program, notes = with_tuned_conversions(lower(workload, candidate), candidate, NoRecords())
    assert sorted(notes) == [
        ("A", "pack", "generated"),
        ("B", "pack", "none (aliased)"),
        ("C", "unpack", "none (aliased)"),
    ]
    assert [launch.args[0].buffer for launch in program.pack] == ["A"]
