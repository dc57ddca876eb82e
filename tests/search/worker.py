"""A tuning job in its own process, for the resume and multi-worker tests.

``python -m tests.search.worker URL STRATEGY TRIALS [BATCH [SPACE]]`` tunes the
small copy workload of :data:`WORKLOAD` in :data:`OPTIONS` (SPACE ``small``, 70
candidates), :data:`WIDE` (SPACE ``wide``, 360), :data:`KILLED` (SPACE
``killed``, 140) or :data:`PAIR` (SPACE ``pair``, 35) into the database at URL.
"""

from __future__ import annotations

import dataclasses
import sys

from laytune import TuneOptions, ops, tune
from laytune.search import TuneResult
from laytune.space import SpaceOptions

WORKLOAD = ops.copy((16, 16))
OPTIONS = SpaceOptions(
    families=("identity", "permute"),
    vectors=(1, 4),
    blocks=(1, 4),
    groups=(0, 4),
    unrolls=(1,),
)
#: More work-groups: a space that ten kills of a job on a fast machine do not exhaust.
WIDE = dataclasses.replace(OPTIONS, groups=(0, 2, 4, 8))
#: Fewer than WIDE: four kills on a 2-core Zen 3 host left 8 to 32 records,
#: so a machine several times faster still has most of these 140 left to
#: resume (which builds and measures the rest, about 0.4 s of CPU each).
KILLED = dataclasses.replace(OPTIONS, groups=(2, 4))
#: Fewer: two jobs racing over one space claim each candidate as well on 32.
PAIR = dataclasses.replace(OPTIONS, groups=(0,))
SPACES = {"small": OPTIONS, "wide": WIDE, "killed": KILLED, "pair": PAIR}
STUDY = "shared-study"


def main(url: str, strategy: str, trials: int, batch: int = 2, space: str = "small") -> TuneResult:
    options = TuneOptions(
        trials=trials,
        batch=batch,
        strategy=strategy,
        space=SPACES[space],
        study_name=STUDY,
        warm_start=0,
    )
    result = tune(WORKLOAD, database=url, options=options, progress=False)
    print(f"measured {result.measured} cached {result.cached} stop {result.stop_reason}")
    return result


if __name__ == "__main__":
    url, strategy, trials, *rest = sys.argv[1:]
    main(url, strategy, int(trials), *(int(a) for a in rest[:1]), *rest[1:])
