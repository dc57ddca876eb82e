"""Fixtures of the codegen tests: one OpenCL context for the whole session."""

from __future__ import annotations

import pytest

from tests.codegen.harness import Env, open_env


@pytest.fixture(scope="session")
def env() -> Env:
    return open_env()
