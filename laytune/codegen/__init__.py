"""Lowering a (workload, candidate) to OpenCL source: the KernelProgram."""

from __future__ import annotations

from laytune.codegen._program import ArgRef, BufferSpec, KernelProgram, Launch

__all__ = ["ArgRef", "BufferSpec", "KernelProgram", "Launch"]
