"""The README's command lines, run in order in the current folder by one process.

``python -m tests.readme_commands`` reads a JSON list of command lines (each a
list of words) on stdin. A ``laytune`` line runs through
:func:`laytune.cli.main`, the function the ``laytune`` program calls, in this
process, as an embedding program would: a process per command spent about a
second loading laytune and started its workers again, and the program's own
start, signals and exit are tested by ``tests/test_cli_signals.py``. A
``python FILE.py`` line runs as its own process. The first line that fails
ends the run with its exit status, named on stderr.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys


def run(lines: list[list[str]]) -> int:
    from laytune.cli import main

    for program, *words in lines:
        print(f"$ {program} {shlex.join(words)}", flush=True)
        if program == "python":
            status = subprocess.run([sys.executable, *words], check=False).returncode
        elif program == "laytune":
            status = main(words)
        else:
            raise ValueError(f"not a README command: {program}")
        sys.stdout.flush()
        if status != 0:
            print(f"{program} {shlex.join(words)}: exit status {status}", file=sys.stderr)
            return status
    return 0


if __name__ == "__main__":
    sys.exit(run(json.load(sys.stdin)))
