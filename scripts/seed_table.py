#!/usr/bin/env python3
"""Final figures over seeds: one row per recipe, the mean of its seeds against a baseline's.

Reads run summaries (JSON lines, each a `gradcomp train --metrics` "summary" record with a
"run" field added, e.g. "v5/h45f3d14-s43"). A run's recipe is its name without the
"-sSEED" suffix; a name without one is seed 42. Only runs whose name starts with --prefix
are read.

    usage: scripts/seed_table.py SUMMARIES.jsonl --prefix v5/ --baseline v5/dense
           [--label RECIPE=TEXT ...] [--metric test_accuracy]

Prints a Markdown table: recipe, each seed's figure, the mean, its standard error and the
difference of the means from the baseline's, in points (x 100). Rows: the baseline, then
the --label recipes in their order, then the others.
"""
import argparse
import json
import math
import re
import statistics
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("summaries")
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--baseline", required=True, help="the recipe the others are compared with")
    ap.add_argument("--label", action="append", default=[], help="RECIPE=TEXT for the table")
    ap.add_argument("--metric", default="test_accuracy")
    a = ap.parse_args()
    labels = dict(item.split("=", 1) for item in a.label)

    figures = {}  # recipe -> {seed: figure}
    with open(a.summaries) as f:
        for line in f:
            run = json.loads(line)
            name = run["run"]
            if not name.startswith(a.prefix) or run.get("type") != "summary":
                continue
            m = re.fullmatch(r"(.*)-s(\d+)", name)
            recipe, seed = (m.group(1), int(m.group(2))) if m else (name, 42)
            figures.setdefault(recipe, {})[seed] = run[a.metric]
    if a.baseline not in figures:
        sys.exit(f"seed_table: no runs of the baseline {a.baseline} under {a.prefix}")

    seeds = sorted({s for runs in figures.values() for s in runs})
    base = statistics.mean(figures[a.baseline].values())
    print("| recipe | " + " | ".join(f"seed {s}" for s in seeds) +
          " | mean | ± s.e. | vs " + labels.get(a.baseline, a.baseline) + " |")
    print("|---" * (len(seeds) + 4) + "|")
    # The baseline first, then the rest as --label lists them, then any others.
    order = [a.baseline] + [r for r in labels if r in figures and r != a.baseline]
    order += [r for r in figures if r not in order]
    for recipe in order:
        runs = figures[recipe]
        values = list(runs.values())
        mean = statistics.mean(values)
        se = f"{100 * statistics.stdev(values) / math.sqrt(len(values)):.2f}" \
            if len(values) > 1 else "—"
        cells = [f"{runs[s]:.4f}" if s in runs else "" for s in seeds]
        diff = "" if recipe == a.baseline else f"{100 * (mean - base):+.2f}"
        print(f"| {labels.get(recipe, recipe)} | " + " | ".join(cells) +
              f" | {mean:.4f} | {se} | {diff} |")


if __name__ == "__main__":
    main()
