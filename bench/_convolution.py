"""The conv2d peers of ``bench.peers``: ONNX Runtime's CPU conv on a one-node
model built here, and im2col + numpy; and the float64 reference both are
checked against.

Every function takes NCHW activations ``x`` (batch, channels, height, width)
and OIHW weights ``w`` (filters, channels, kh, kw), stride 1 (ONNX Runtime's
any ``stride``) and zero padding ``pad`` on each side, as
``laytune.ops.conv2d`` defines them.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

__all__ = ["OnnxRuntimeConv", "im2col_conv", "reference_conv"]

# Opset 17 and IR version 8 (the first IR that opset 17 needs): old enough that
# every ONNX Runtime of the last years loads the model, and Conv is unchanged since.
_OPSET = 17
_IR_VERSION = 8


def _columns(x: np.ndarray, kernel: int, pad: int) -> np.ndarray:
    """im2col: (batch, channels * kernel * kernel, oh * ow), a copy, rows in
    the order of OIHW weights flattened per filter."""
    batch, channels = x.shape[:2]
    padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    windows = sliding_window_view(padded, (kernel, kernel), axis=(2, 3))  # n, c, oh, ow, kh, kw
    oh, ow = windows.shape[2:4]
    return windows.transpose(0, 1, 4, 5, 2, 3).reshape(batch, channels * kernel * kernel, oh * ow)


def im2col_conv(x: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
    """The convolution as im2col then one matmul per image (numpy's BLAS)."""
    filters, _, kernel, _ = w.shape
    oh = x.shape[2] + 2 * pad - kernel + 1
    ow = x.shape[3] + 2 * pad - kernel + 1
    out = np.matmul(w.reshape(filters, -1), _columns(x, kernel, pad))
    return out.reshape(x.shape[0], filters, oh, ow)


def reference_conv(x: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
    """The convolution in float64: what every float32 result is checked against."""
    return im2col_conv(x.astype(np.float64), w.astype(np.float64), pad)


class OnnxRuntimeConv:
    """A one-node ONNX model (``Conv``, weights as an initializer, so ONNX
    Runtime may prepack them once when the session is made) in a CPU session.

    ``missing`` says why ONNX Runtime cannot be used (None when it can); the
    ``bench`` extra installs ``onnxruntime`` and ``onnx``.
    """

    def __init__(self) -> None:
        self.missing: str | None = None
        self.version = "not installed"
        try:
            import onnx  # noqa: F401
            import onnxruntime
        except ImportError as err:
            self.missing = (
                f"onnxruntime or onnx is not importable ({err}); pip install -e '.[bench]'"
            )
            return
        self.version = (
            f"onnxruntime {onnxruntime.__version__}, onnx {importlib.metadata.version('onnx')}"
        )

    def model(self, x_shape: tuple[int, ...], w: np.ndarray, pad: int, stride: int = 1) -> bytes:
        """The serialized model ``Y = Conv(X, W)``, checked by onnx's checker."""
        import onnx
        from onnx import TensorProto, helper, numpy_helper

        filters, _, kernel, _ = w.shape
        batch, _, height, width = x_shape
        y_shape = [
            batch,
            filters,
            (height + 2 * pad - kernel) // stride + 1,
            (width + 2 * pad - kernel) // stride + 1,
        ]
        node = helper.make_node(
            "Conv",
            ["X", "W"],
            ["Y"],
            kernel_shape=[kernel, kernel],
            pads=[pad] * 4,
            strides=[stride, stride],
        )
        graph = helper.make_graph(
            [node],
            "conv2d",
            [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(x_shape))],
            [helper.make_tensor_value_info("Y", TensorProto.FLOAT, y_shape)],
            initializer=[numpy_helper.from_array(np.ascontiguousarray(w), "W")],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)])
        model.ir_version = _IR_VERSION
        onnx.checker.check_model(model)
        return model.SerializeToString()

    def session(
        self, x_shape: tuple[int, ...], w: np.ndarray, pad: int, stride: int = 1
    ) -> Callable[[Any], Any]:
        """``run(x) -> y``: the convolution in a CPU session with ONNX Runtime's
        defaults (all graph optimizations, one intra-op thread per core)."""
        import onnxruntime

        session = onnxruntime.InferenceSession(
            self.model(x_shape, w, pad, stride), providers=["CPUExecutionProvider"]
        )

        def run(x: Any) -> Any:
            return session.run(None, {"X": x})[0]

        return run
