"""Hostile layout text, by every way it enters laytune: ``IndexMap.parse``,
a layout's JSON, a record (read, imported, stored in a database), a
boundary, a frozen file given to ``laytune export``.

Layout arithmetic is bounded by value size: a constant or folded constant
past 2^62 (a shift, a product, a literal of thousands of digits), a shift
past 62, too many indices, an expression too large are a named error,
raised before the huge value is computed. Each case here once ate all the
memory (``1 << 99999999999`` folded to a number of 12.5 GB, and a frozen
file of 9 KB made ``laytune export`` grow to 24 GB) or gave a traceback or a
message echoing megabytes of input.

Every case runs in a process of its own under a memory limit
(``RLIMIT_AS``), so that a regression fails here instead of taking the
machine: the probe's cases in one process (:mod:`tests.faults.hostile_probe`),
``laytune export`` in another.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from laytune.layout import custom
from laytune.space import Candidate
from tests import jobs
from tests.faults.hostile_probe import HUGE_SHIFT

#: Address space the hostile processes get: laytune with pyopencl and
#: SQLAlchemy needs a few hundred MiB; the huge shift alone needed 12.5 GB.
MEMORY_LIMIT = 2 << 30
#: Bounds checked loosely: a case must end at all, and say what is wrong in
#: a message of a few lines (the inputs run to 10 MB).
SECONDS = 2.0
MESSAGE = 400

SHIFT = "past the largest shift, 62"
CONSTANT = "past 2^62 in magnitude"
EXPECTED: dict[str, tuple[str, str]] = {
    "parse: huge shift": ("LayoutSyntaxError", SHIFT),
    "parse: shift of an index": ("LayoutSyntaxError", SHIFT),
    "parse: shift 20000": ("LayoutSyntaxError", SHIFT),
    "parse: huge right shift": ("LayoutSyntaxError", SHIFT),
    "parse: huge power": ("LayoutSyntaxError", "unsupported operator '**'"),
    "parse: folded product": ("LayoutSyntaxError", CONSTANT),
    "parse: 4000-digit literal": ("LayoutSyntaxError", CONSTANT),
    "parse: 5000-digit literal": ("LayoutSyntaxError", "integer literal of thousands of digits"),
    "parse: hex literal": ("LayoutSyntaxError", CONSTANT),
    "parse: 3000 outputs": ("LayoutSyntaxError", "3000 physical indices, more than the 32"),
    "parse: 10 MB text": ("LayoutSyntaxError", "10485778 characters long"),
    "layout JSON: huge shift": ("LayoutSyntaxError", SHIFT),
    "layout JSON: 40 tripling parts": ("LayoutSyntaxError", "more than 10000 nodes"),
    "layout JSON: swizzle by 99999999999 bits": ("LayoutSyntaxError", SHIFT),
    "record: huge shift": ("RecordError", SHIFT),
    "database import: huge shift": ("RecordError", SHIFT),
    "database record: huge shift": ("RecordError", SHIFT),
    "boundary: huge shift": ("BoundaryError", SHIFT),
    "boundary: 10 MB text": ("BoundaryError", "10485778 characters long"),
}


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _run(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, *args],
        cwd=jobs.ROOT,
        env=env,
        preexec_fn=_limit_memory,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


#: one worker runs the module's tests, so its module fixture is built once
#: (tests of one module spread over both workers built it once each, or more)
pytestmark = pytest.mark.xdist_group("hostile_layouts")


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    """Each case's line from the probe, and the probe's stderr; a probe
    stopped by the time limit gives the lines of the cases it finished."""
    args = ["-m", "tests.faults.hostile_probe", str(tmp_path_factory.mktemp("probe"))]
    try:
        done = _run(args, timeout=60)
        stdout, stderr = done.stdout, done.stderr
    except subprocess.TimeoutExpired as stopped:
        stdout, stderr = (
            s.decode() if isinstance(s, bytes) else (s or "")
            for s in (stopped.stdout, stopped.stderr)
        )
        stderr += "\n(stopped after 60 s)"
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return {line["case"]: line for line in lines}, stderr[-3000:]


def test_the_probe_runs_every_case() -> None:
    from tests.faults.hostile_probe import cases

    assert set(cases(Path("unused"))) == set(EXPECTED)


@pytest.mark.parametrize("case", list(EXPECTED))
def test_hostile_layout_text_is_a_named_error_at_once(
    probed: tuple[dict[str, Any], str], case: str
) -> None:
    lines, stderr = probed
    assert case in lines, f"the probe ended before {case!r} (memory? time?):\n{stderr}"
    line = lines[case]
    error, phrase = EXPECTED[case]
    assert line["error"] is not None, f"{case}: no error raised"
    assert error in line["classes"], line
    assert phrase in line["message"], line["message"]
    assert line["length"] <= MESSAGE, line["message"]
    assert "Traceback" not in line["message"]
    # quotes at most an excerpt: no long run of the input survives
    for run in ("i" * 200, "7" * 200, "f" * 200, "i + i - i + " * 40):
        assert run not in line["message"], line["message"]
    assert line["seconds"] < SECONDS, line


def _frozen_file(path: Path, index_map: str) -> Path:
    """A frozen file of one entry whose buffer A's layout is ``index_map``
    (an entry's candidate is read before its program)."""
    candidate = Candidate.make({"A": custom((16, 16), "lambda i, j: [j, i]")}, {}).to_json()
    candidate["layouts"]["A"]["index_map"] = index_map
    entry = {
        "workload_key": "copy dtype=float32,shape=16x16",
        "device_key": "0123456789abcdef",
        "time_s": 1e-3,
        "candidate": candidate,
        "program": {},
    }
    frozen = {
        "format": "laytune-frozen",
        "version": 1,
        "laytune_version": "0.1",
        "entries": [entry],
    }
    path.write_text(json.dumps(frozen))
    return path


def test_export_of_a_frozen_file_with_a_huge_shift_is_one_line_and_exit_2(
    tmp_path: Path,
) -> None:
    frozen = _frozen_file(tmp_path / "hostile.json", HUGE_SHIFT)
    assert frozen.stat().st_size < 2000
    out = tmp_path / "exported"
    start = time.monotonic()
    done = _run(["-m", "laytune.cli", "export", str(frozen), "--out", str(out)], timeout=60)
    elapsed = time.monotonic() - start
    assert done.returncode == 2, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith(f"laytune: error: {frozen} entry 0: malformed entry")
    assert SHIFT in lines[0] and len(lines[0]) <= MESSAGE, lines[0]
    assert not out.exists()
    assert elapsed < 60  # the process start dominates; the refusal itself is at once


def test_a_free_buffer_of_10_mb_is_named_in_one_short_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from laytune.cli import main

    monkeypatch.chdir(tmp_path)
    name = "X" * (10 << 20)
    db = f"sqlite:///{tmp_path / 'free.db'}"
    args = ["tune", "copy", "--shape", "shape=16x16", "--free", name, "--trials", "1", "--db", db]
    assert main([*args, "--quiet"]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err[:3000]
    assert "has no buffer XXXX" in lines[0] and "(10485760 characters)" in lines[0]
    assert len(lines[0]) <= MESSAGE, lines[0][:3000]
