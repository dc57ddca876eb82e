"""The disk fills up under a tuning job's SQLite database.

The job is a real ``laytune tune`` process; once it has committed a few
records, its file size limit (RLIMIT_FSIZE, set from outside with prlimit) is
lowered to just above its database files, so its next writes fail as on a
full disk. It must stop with one clear line (exit 2), and the database must
still open and hold every record committed before, then take a resumed job.

(When a write passes the limit the kernel also sends SIGXFSZ, which Python
ignores; LLVM inside the OpenCL CPU runtime catches it first and prints a
crash banner before handing it back. A disk that is really full answers
ENOSPC and sends no signal, so the banner belongs to this simulation.)
"""

from __future__ import annotations

import re
import resource
from pathlib import Path

import pytest

from laytune.records import Record, open_database
from tests import jobs

pytestmark = pytest.mark.skipif(
    not hasattr(resource, "prlimit"), reason="needs prlimit (Linux) to fill the disk"
)


def test_a_full_disk_stops_the_job_with_a_clear_error_and_keeps_every_record(
    tmp_path: Path,
) -> None:
    db = tmp_path / "full.db"
    job = jobs.start_job(db)
    try:
        jobs.wait_until(lambda: jobs.record_count(db) >= 2, job, 180)
        files = {path.name: path.stat().st_size for path in tmp_path.glob("full.db*")}
        limit = max(files.values()) + 16 * 1024  # a record or two more, then full
        resource.prlimit(job.pid, resource.RLIMIT_FSIZE, (limit, limit))
        committed = jobs.bodies(db)
        _, err = job.communicate(timeout=180)
    finally:
        jobs.kill_all([job])
    assert job.returncode == 2, err
    assert "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    # the disk fills at whichever write comes next: a record, the study, or
    # the claim of the next candidate (on a slow host the job is claiming)
    assert re.fullmatch(
        r"laytune: error: (writing .* to|claiming a candidate in) sqlite:///\S+full\.db: "
        r"(disk I/O error|database or disk is full \([0-9.]+ (bytes|MiB) free on the disk "
        r"holding \S+\))",
        last,
    ), err
    assert jobs.wait_for_session_end(job.pid, 10) == []

    assert jobs.integrity(db) == "ok"
    now = jobs.bodies(db)
    assert all(now.get(i) == body for i, body in committed.items())
    for body in now.values():
        Record.from_json(body)
    resumed = jobs.start_job(db, trials=2)
    try:
        _, err = resumed.communicate(timeout=300)
    finally:
        jobs.kill_all([resumed])
    assert resumed.returncode == 0, err
    with open_database(db) as database:
        records = database.records()
    assert len(records) >= len(now) + 2  # its 2 trials (and the layouts' reference, if new)
    keys = [r.candidate.key for r in records]
    assert len(keys) == len(set(keys))
