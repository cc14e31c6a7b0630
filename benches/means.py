#!/usr/bin/env python3
"""Prints the mean of every criterion benchmark found in target/criterion, one
line each (`group/function/parameter  mean`), for filling BENCHMARKS.md's
tables after `cargo bench`. Standard library only."""
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CRITERION = ROOT / "target" / "criterion"


def human(seconds):
    for unit, scale in [("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)]:
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def main():
    if not CRITERION.is_dir():
        sys.exit(f"no {CRITERION}: run `cargo bench` first")
    rows = []
    for estimates in CRITERION.glob("**/new/estimates.json"):
        benchmark = json.loads((estimates.parent / "benchmark.json").read_text())
        mean = json.loads(estimates.read_text())["mean"]["point_estimate"] / 1e9
        rows.append((benchmark["full_id"], mean))
    for name, mean in sorted(rows):
        print(f"{name:60} {human(mean)}")


if __name__ == "__main__":
    main()
