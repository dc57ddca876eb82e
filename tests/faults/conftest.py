"""The fault-injection suite reuses the runners' device, workload classes and
sabotaged programs (a kernel that hangs, one that crashes its process)."""

from __future__ import annotations

from tests.runners.conftest import device, kit  # noqa: F401 (fixtures)
