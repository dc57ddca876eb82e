"""``python -m bench`` (``make bench``): every benchmark, one after another."""

from __future__ import annotations

import runpy
import sys

BENCHMARKS = (
    "layout_queries",
    "space_enumerate",
    "conversions",
    "runners_overhead",
    "plan_network",
    "peers",
    "tuned_vs_fixed",
    "search_efficiency",
)


def main() -> None:
    for name in BENCHMARKS:
        print(f"\n### bench.{name}\n", flush=True)
        sys.argv = [name]
        runpy.run_module(f"bench.{name}", run_name="__main__")


if __name__ == "__main__":
    main()
