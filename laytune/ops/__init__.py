"""Workloads: buffers with logical shapes, one statement in index notation,
a numpy reference, flop and byte counts.

Pipeline stage before :mod:`laytune.space`. Only identity layouts are known
here: every other layout is a candidate the search chooses.
"""

from __future__ import annotations

from laytune.exceptions import StatementError, UnknownWorkloadError
from laytune.ops._keys import from_key, key_distance, parse_key
from laytune.ops._library import (
    bias_add,
    conv2d,
    copy,
    matmul,
    max_pool2d,
    relu,
    sum,
    transpose,
)
from laytune.ops._statement import Statement, parse_statement
from laytune.ops._workload import Axis, BufferDecl, Workload

__all__ = [
    "Axis",
    "BufferDecl",
    "Statement",
    "StatementError",
    "UnknownWorkloadError",
    "Workload",
    "bias_add",
    "conv2d",
    "copy",
    "from_key",
    "key_distance",
    "matmul",
    "max_pool2d",
    "parse_key",
    "parse_statement",
    "relu",
    "sum",
    "transpose",
]
