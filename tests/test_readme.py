"""The README runs as written: every Python block as a script in a fresh
folder, every ``laytune`` command of its shell blocks in order, so the
documentation cannot drift from the code.

The tuning examples are made quick, never rewritten: the Python blocks take
their size and trial budget from ``SIZE`` and ``TRIALS`` (as the README says),
and ``laytune tune`` and ``tune-model`` commands get ``--trials 2 --batch 2
--quiet`` appended (argparse keeps the last value), ``tune-conversions``
``--trials 2 --quiet`` (its 24 trials per conversion took 52 of the
commands' 130 s; tests/search/test_conversions.py tunes conversions with a
real budget). A Python block whose
first line names a file (``# bmm_op.py: ...``) is written to that file in the
commands' folder before they run, and beside every Python block, as the
README asks the reader to (for ``--import``, or to import it); a ``python
FILE.py`` line of a shell block runs it there. The ``laytune`` commands run
in order in one process (``tests/readme_commands.py``), through the function
the ``laytune`` program calls. The shell block that builds the C host
runs whole, after the commands before it, where a C compiler and the OpenCL
headers are installed (``tests/test_c_host.py`` says when they are not)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from laytune.records import load_frozen, open_database
from tests.test_c_host import compiler_or_skip

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"^```(\w+)\n(.*?)^```", README, flags=re.MULTILINE | re.DOTALL)
PYTHON = [code for lang, code in BLOCKS if lang == "python"]
QUICK_TUNE = ["--trials", "2", "--batch", "2", "--quiet"]
#: The quick budget of each tuning command (tune-conversions has no --batch).
QUICK = {
    "tune": QUICK_TUNE,
    "tune-model": QUICK_TUNE,
    "tune-conversions": ["--trials", "2", "--quiet"],
}
#: A Python block that the README presents as a file: ``# name.py`` on its first line.
MODULE_FILE = re.compile(r"^# ([A-Za-z_][A-Za-z0-9_]*\.py)\b")
FAILED_TO_RUN = ("device_lost", "crash")


def _env(**extra: str) -> dict[str, str]:
    """This environment without a default database, with this checkout
    importable and this interpreter first on PATH (as ``python``)."""
    env = {k: v for k, v in os.environ.items() if k != "LAYTUNE_DB"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return {**env, "COLUMNS": "100", **extra}


def _shell_lines(programs: tuple[str, ...] = ("laytune",)) -> list[list[str]]:
    """The command lines of the shell blocks that run one of ``programs``,
    continuation lines joined and comments dropped, in the order the README
    gives them."""
    lines = []
    for lang, code in BLOCKS:
        if lang != "sh":
            continue
        for line in code.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] and words[0] in programs:
                lines.append(words)
    return lines


def _commands() -> list[list[str]]:
    """The ``laytune`` command lines of the shell blocks (their arguments)."""
    return [words[1:] for words in _shell_lines()]


def _command(words: list[str]) -> str:
    """The command of ``laytune`` arguments, after the options before it (``--import M``)."""
    k = 0
    while k < len(words) and words[k].startswith("-"):
        k += 2 if words[k] == "--import" else 1
    return words[k]


def _module_files() -> dict[str, str]:
    """The Python blocks the README presents as files, by file name."""
    return {m[1]: code for code in PYTHON if (m := MODULE_FILE.match(code))}


def test_the_readme_has_the_blocks_this_test_runs() -> None:
    assert len(PYTHON) >= 4
    assert any(_command(c) == "tune" for c in _commands())
    assert {_command(c) for c in _commands()} >= {"tune", "workloads", "records", "show", "freeze"}
    # an operator of the user's: its module, tuned and exported with --import
    assert "bmm_op.py" in _module_files()
    imported = [c for c in _commands() if c[:2] == ["--import", "bmm_op"]]
    assert {_command(c) for c in imported} >= {"tune", "freeze", "export"}
    assert _command(["--import", "bmm_op", "tune", "bmm"]) == "tune"
    # an ONNX model: written by a module file, tuned, planned
    assert "tiny_model.py" in _module_files()
    assert ["python", "tiny_model.py"] in _shell_lines(("python",))
    assert {_command(c) for c in _commands()} >= {"tune-model", "plan"}


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(PYTHON)), ids=lambda k: f"python-block-{k + 1}")
def test_a_python_block_runs_as_a_script(index: int, tmp_path: Path) -> None:
    for name, code in _module_files().items():  # the files the README asks for
        (tmp_path / name).write_text(code)
    script = tmp_path / "example.py"
    script.write_text(PYTHON[index])
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=_env(SIZE="32", TRIALS="4"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "Traceback" not in done.stderr, done.stderr[-4000:]
    # a worker that cannot start (a script without the __main__ guard) is
    # recorded as a failure, not raised: no record may say so
    if (tmp_path / "laytune.db").exists():
        records = open_database(tmp_path / "laytune.db", create=False).records()
        assert records and not [r.status for r in records if r.status in FAILED_TO_RUN]


def run_the_commands(folder: Path) -> None:
    """Every laytune command of the README, in order, in ``folder``, by one
    process (``tests/readme_commands.py``: through the function the
    ``laytune`` program calls, the tuning commands with their quick budget;
    a ``python FILE.py`` line as its own process)."""
    for name, code in _module_files().items():
        (folder / name).write_text(code)
    lines = [
        [program, *words, *(QUICK.get(_command(words), []) if program == "laytune" else [])]
        for program, *words in _shell_lines(("laytune", "python"))
    ]
    done = subprocess.run(
        [sys.executable, "-m", "tests.readme_commands"],
        input=json.dumps(lines),
        cwd=folder,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]


@pytest.mark.slow
def test_the_laytune_commands_run_in_order_and_the_c_block_runs_their_export(
    tmp_path: Path,
) -> None:
    """One test, so the commands run once (two tests sharing a fixture of
    them ran it once per xdist worker, about 70 s each)."""
    commands_run = tmp_path / "readme"
    commands_run.mkdir()
    run_the_commands(commands_run)
    records = open_database(commands_run / "laytune.db", create=False).records()
    assert not [r.status for r in records if r.status in FAILED_TO_RUN]
    assert {p.suffix for p in (commands_run / "build").iterdir()} >= {".cl", ".h", ".json", ".bin"}
    # the user's operator: tuned, frozen and exported with its reference data
    bmm = open_database(commands_run / "bmm.db", create=False).records()
    assert bmm and {r.op for r in bmm} == {"bmm"}
    assert len(list((commands_run / "build-bmm").glob("bmm_*.C.ref.bin"))) == 1
    # the ONNX model's conv and gemm, each tuned once
    model = open_database(commands_run / "model.db", create=False).records()
    assert {r.op for r in model if r.op != "convert"} == {"conv2d", "matmul"}
    assert len({r.study for r in model if r.op != "convert"}) == 2
    # and frozen: the kernels its plan runs, which `plan --db model.json` planned from
    assert {e.workload_key.split("(")[0] for e in load_frozen(commands_run / "model.json")} == {
        "conv2d",
        "matmul",
    }
    # the README's C block builds the C host and runs the exported kernel
    compiler_or_skip(tmp_path)
    (block,) = [code for lang, code in BLOCKS if lang == "sh" and "host.c" in code]
    (commands_run / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=commands_run,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(
        r"^C: 65536 elements, max abs error \S+, matches the reference$", done.stdout, re.M
    )
    # and the model that `export --model` wrote, every launch of its plan
    assert re.search(
        r"^logits: 10 elements, max abs error \S+, matches the reference$", done.stdout, re.M
    )
    assert re.search(r"^tiny: \d+ launches, median [0-9.]+ ms", done.stdout, re.M)
