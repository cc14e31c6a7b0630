#!/usr/bin/env python3
"""Plots time against events for projection and ingest, convstore beside the
alternatives, from criterion's results of `cargo bench --bench alternatives`
(target/criterion). Writes benches/plot.png. Needs matplotlib
(`pip install matplotlib`)."""
import json
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
CRITERION = ROOT / "target" / "criterion" / "alternatives"


def series(operation, store):
    points = []
    base = CRITERION / f"{operation}_{store}"
    if not base.is_dir():
        return points
    for size in base.iterdir():
        estimates = size / "new" / "estimates.json"
        if size.name.isdigit() and estimates.exists():
            mean = json.loads(estimates.read_text())["mean"]["point_estimate"]
            points.append((int(size.name), mean / 1e9))
    return sorted(points)


def main():
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, operation, title in [
        (axes[0], "project", "project a conversation (whole view)"),
        (axes[1], "ingest", "ingest a conversation (durable at the end)"),
    ]:
        for store, style in [("convstore", "o-"), ("sqlite", "s--"), ("json_file", "^:")]:
            points = series(operation, store)
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], style, label=store)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("events")
        ax.set_ylabel("seconds")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    out = ROOT / "benches" / "plot.png"
    fig.savefig(out, dpi=110)
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
