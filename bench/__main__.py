"""``python -m bench`` (``make bench``): every benchmark, one after another."""

from __future__ import annotations

import runpy
import sys

BENCHMARKS = (
    "layout_queries",
    "space_enumerate",
    "hand_transpose",
    "hand_winograd",
    "conversions",
    "runners_overhead",
    "plan_network",
    "epilogue_fusion",
    "models",
    "starts",
    "peers",
    "tuned_vs_fixed",
    "search_efficiency",
    "soak",
    "scale",
)


def main() -> int:
    failed = []
    for name in BENCHMARKS:
        print(f"\n### bench.{name}\n", flush=True)
        sys.argv = [name]
        try:
            runpy.run_module(f"bench.{name}", run_name="__main__")
        except SystemExit as done:  # a benchmark's own exit must not end the others
            if done.code not in (None, 0):
                failed.append(name)
    if failed:
        print(f"\nbenchmarks that failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
