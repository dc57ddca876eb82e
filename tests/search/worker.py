"""A tuning job in its own process, for the resume and multi-worker tests.

``python -m tests.search.worker URL STRATEGY TRIALS [BATCH]`` tunes the small
copy workload of :data:`WORKLOAD` in :data:`OPTIONS` into the database at URL.
"""

from __future__ import annotations

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
STUDY = "shared-study"


def main(url: str, strategy: str, trials: int, batch: int = 2) -> TuneResult:
    options = TuneOptions(
        trials=trials,
        batch=batch,
        strategy=strategy,
        space=OPTIONS,
        study_name=STUDY,
        warm_start=0,
    )
    result = tune(WORKLOAD, database=url, options=options, progress=False)
    print(f"measured {result.measured} cached {result.cached} stop {result.stop_reason}")
    return result


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), *(int(a) for a in sys.argv[4:]))
