"""Candidate layouts per buffer, checked against intrinsic constraints."""

from __future__ import annotations

from laytune.space._candidate import Candidate, PadValue

__all__ = ["Candidate", "PadValue"]
