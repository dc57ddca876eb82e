"""Workloads: buffers with logical shapes, one statement in index notation,
a numpy reference, flop and byte counts.

The library's constructors (``matmul``, ``conv2d``, ...) are registered with
:func:`register`: :func:`constructors` lists them with their parameters,
:func:`from_key` rebuilds a workload from its key. A user's own operators
join the same way, from a module that :func:`import_workloads` (``laytune
--import``) imports.

Pipeline stage before :mod:`laytune.space`. Only identity layouts are known
here: every other layout is a candidate the search chooses.
"""

from __future__ import annotations

from laytune.exceptions import StatementError, UnknownWorkloadError
from laytune.ops._import import import_workloads
from laytune.ops._keys import from_key, key_distance, parse_key, shape_text, short_key
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
from laytune.ops._reductions import REDUCTIONS, Reduction, reduction
from laytune.ops._registry import (
    Parameter,
    WorkloadConstructor,
    constructor,
    constructors,
    defined_workloads,
    format_value,
    parse_params,
    register,
)
from laytune.ops._statement import (
    FUNCTIONS,
    VALUE_OPS,
    Accumulator,
    BinaryOp,
    Function,
    Literal,
    Load,
    Negate,
    Statement,
    Value,
    ValueFunction,
    ValueOp,
    loads,
    parse_statement,
    replace_loads,
    statement_text,
    value_text,
)
from laytune.ops._workload import DTYPES, Axis, BufferDecl, Workload

__all__ = [
    "DTYPES",
    "FUNCTIONS",
    "REDUCTIONS",
    "VALUE_OPS",
    "Accumulator",
    "Axis",
    "BinaryOp",
    "BufferDecl",
    "Function",
    "Literal",
    "Load",
    "Negate",
    "Parameter",
    "Reduction",
    "Statement",
    "StatementError",
    "UnknownWorkloadError",
    "Value",
    "ValueFunction",
    "ValueOp",
    "Workload",
    "WorkloadConstructor",
    "bias_add",
    "constructor",
    "constructors",
    "conv2d",
    "copy",
    "defined_workloads",
    "format_value",
    "from_key",
    "import_workloads",
    "key_distance",
    "loads",
    "matmul",
    "max_pool2d",
    "parse_key",
    "parse_params",
    "parse_statement",
    "reduction",
    "register",
    "relu",
    "replace_loads",
    "shape_text",
    "short_key",
    "statement_text",
    "sum",
    "transpose",
    "value_text",
]
