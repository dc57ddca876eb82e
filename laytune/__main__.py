"""The ``laytune`` program: ``laytune COMMAND ...`` or ``python -m laytune COMMAND ...``.

Its first lines take SIGINT and SIGTERM over, before the command line and
everything it imports load (most of the program's start-up): a stop that
comes meanwhile is held, and once loaded the program ends with that
signal's status (130, 143) and its one line, without running the command
(see :func:`laytune.cli.main`). A second stop ends it at once. Only the
interpreter's own start, before this module runs, is left to Python.
"""

from __future__ import annotations

import os
import signal
import sys

_STATUS = {signal.SIGINT: 128 + signal.SIGINT, signal.SIGTERM: 128 + signal.SIGTERM}
_SAID = {signal.SIGINT: b"laytune: interrupted\n", signal.SIGTERM: b"laytune: terminated\n"}


class HeldStop:
    """Holds the first stop signal that comes while the program loads."""

    def __init__(self) -> None:
        self.first: int | None = None
        for signum in _STATUS:
            signal.signal(signum, self.hold)

    def hold(self, signum: int, frame: object) -> None:
        if self.first is None:
            self.first = signum
            return
        os.write(2, _SAID[self.first])  # the second stop: nothing to clean up yet
        os._exit(_STATUS[self.first])


def main() -> int:
    """Run the command of ``sys.argv`` (the ``laytune`` program)."""
    held = HeldStop()
    from laytune.cli import main as run_command

    return run_command(held=held)


if __name__ == "__main__":
    sys.exit(main())
