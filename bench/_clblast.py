"""What the peers benchmark uses of CLBlast: pyclblast's sgemm, and ``omatcopy``
from the library pyclblast links (pyclblast does not wrap it)."""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.metadata
from typing import Any

__all__ = ["CLBlast"]

_ROW_MAJOR, _TRANSPOSE = 101, 112  # CLBlastLayoutRowMajor, CLBlastTransposeYes


class CLBlast:
    """What this benchmark uses of CLBlast: pyclblast's sgemm, and ``omatcopy``
    from the library pyclblast links (pyclblast has no wrapper for it).

    ``missing`` says why CLBlast cannot be used (None when it can);
    ``omatcopy_missing`` likewise for the transpose alone.
    """

    def __init__(self) -> None:
        self.missing: str | None = None
        self.omatcopy_missing: str | None = None
        self.version = "not installed"
        self.library = ""
        try:
            import pyclblast
        except ImportError as err:
            self.missing = (
                f"pyclblast is not importable ({err}); pip install pyclblast "
                f"(needs CLBlast's headers and library: Debian's libclblast-dev)"
            )
            self.omatcopy_missing = self.missing
            return
        self.pyclblast = pyclblast
        self.version = importlib.metadata.version("pyclblast")
        name = ctypes.util.find_library("clblast")
        if name is None:
            self.omatcopy_missing = "the CLBlast shared library is not on the loader's path"
            return
        self.library = name
        try:
            somatcopy = ctypes.CDLL(name).CLBlastSomatcopy
        except (OSError, AttributeError) as err:
            self.omatcopy_missing = f"{name} has no usable CLBlastSomatcopy: {err}"
            return
        size, ptr = ctypes.c_size_t, ctypes.c_void_p
        somatcopy.restype = ctypes.c_int
        somatcopy.argtypes = [
            ctypes.c_int,  # layout
            ctypes.c_int,  # a_transpose
            size,  # m
            size,  # n
            ctypes.c_float,  # alpha
            ptr,  # a_buffer
            size,  # a_offset
            size,  # a_ld
            ptr,  # b_buffer
            size,  # b_offset
            size,  # b_ld
            ctypes.POINTER(ptr),  # queue
            ctypes.POINTER(ptr),  # event
        ]
        self._somatcopy = somatcopy

    @property
    def skipped(self) -> str:
        """What is left out and why; empty when nothing is."""
        if self.missing:
            return f"CLBlast rows skipped: {self.missing}"
        if self.omatcopy_missing:
            return f"CLBlast omatcopy skipped: {self.omatcopy_missing}"
        return ""

    def transpose(self, queue: Any, src: Any, dst: Any, rows: int, cols: int) -> Any:
        """``dst = src.T`` for a row-major rows x cols float32 buffer; the event."""
        import pyopencl as cl

        handle, event = ctypes.c_void_p(queue.int_ptr), ctypes.c_void_p()
        status = self._somatcopy(
            _ROW_MAJOR,
            _TRANSPOSE,
            rows,
            cols,
            1.0,
            src.int_ptr,
            0,
            cols,
            dst.int_ptr,
            0,
            rows,
            ctypes.byref(handle),
            ctypes.byref(event),
        )
        if status != 0:
            raise RuntimeError(f"CLBlastSomatcopy returned status {status}")
        return cl.Event.from_int_ptr(event.value, retain=False)  # released with the object

    def sgemm(self, queue: Any, a: Any, b: Any, c: Any) -> Any:
        """``c = a @ b`` on row-major pyopencl arrays (M x K, K x N, M x N)."""
        m, k = a.shape
        n = b.shape[1]
        return self.pyclblast.gemm(queue, m, n, k, a, b, c, a_ld=k, b_ld=n, c_ld=n)
