"""Shape, padding and injectivity queries on a 16-million-element buffer.

Each figure is the time of a laytune query next to the time of one plain numpy
pass over the same buffer (the scatter ``out[offsets] = values`` that any
layout conversion must pay), measured in the same run. Run with
``python -m bench.layout_queries``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from laytune.layout import block, pad_every, permute, row_xor, swizzle, texture, tile

SHAPE = (16, 64, 128, 128)  # 16.8 million elements


def best_of(fn: Callable[[], object], repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    n = int(np.prod(SHAPE))
    values = np.zeros(n, dtype=np.float32)
    offsets = np.random.default_rng(0).permutation(n)
    out = np.empty_like(values)

    def scatter() -> None:
        out[offsets] = values

    baseline = best_of(scatter)
    layouts = [
        permute(SHAPE, (0, 2, 3, 1)),
        block(SHAPE, 1, 4),
        block(SHAPE, 1, 3),
        texture(SHAPE, 1),
        tile((4096, 4096), (16, 16)),
        pad_every((4096, 4096), 2, 4),
        row_xor((4096, 4096), 8, 8),
        swizzle((4096, 4096), 3, 3, 3),
    ]
    print(f"buffer: {n / 1e6:.1f} M elements; numpy scatter baseline {baseline * 1e3:.0f} ms\n")
    print(
        "| layout | physical_shape | padding_count | is_injective | all three, cold | / scatter |"
    )
    print("|---|---|---|---|---|---|")
    for layout in layouts:
        m, shape = layout.index_map, layout.shape

        def cold_shape(m=m, shape=shape) -> None:
            fresh_map = type(m).parse(str(m))
            fresh_map.physical_shape(shape)

        def cold_all(m=m, shape=shape) -> None:
            fresh_map = type(m).parse(str(m))
            fresh_map.physical_shape(shape)
            fresh_map.padding_count(shape)
            fresh_map.is_injective(shape)

        t_shape = best_of(cold_shape)
        t_all = best_of(cold_all)

        def padding(m=m, shape=shape) -> None:
            type(m).parse(str(m)).padding_count(shape)

        def injective(m=m, shape=shape) -> None:
            type(m).parse(str(m)).is_injective(shape)

        t_pad = best_of(padding)
        t_inj = best_of(injective)
        print(
            f"| {layout.describe()} | {t_shape * 1e3:.0f} ms | {t_pad * 1e3:.0f} ms | "
            f"{t_inj * 1e3:.0f} ms | {t_all * 1e3:.0f} ms | {t_all / baseline:.1f}x |"
        )


if __name__ == "__main__":
    main()
