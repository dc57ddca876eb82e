"""The hand-written scores kernels of bench.hand_scores compute Q K^T."""

from __future__ import annotations

import numpy as np

from bench.hand_scores import laytune_kernels


def test_every_hand_written_scores_kernel_matches_numpy() -> None:
    rng = np.random.default_rng(1)
    q = rng.standard_normal((2, 64, 32)).astype(np.float32)
    k = rng.standard_normal((2, 64, 32)).astype(np.float32)
    expected = q @ k.transpose(0, 2, 1)
    kernels, result = laytune_kernels(q, k)
    assert set(kernels) == {
        "pack + outer product (2 launches)",
        "outer product on packed K",
        "panel (shuffle)",
        "panel (lanes)",
    }
    for label, run in kernels.items():
        run()
        np.testing.assert_allclose(result(), expected, rtol=1e-5, atol=1e-4, err_msg=label)
