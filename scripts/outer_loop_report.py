#!/usr/bin/env python3
"""Time to accuracy on a shaped network: a method's accuracy curve against the wall clock.

What a method computes does not depend on the network; only how long each step takes does.
So each row joins two measurements of the same job:
  - its accuracy every N steps, from an unshaped run with `gradcomp train --eval-every N
    --metrics FILE` ("eval" records: step, test accuracy);
  - its step time in the network lab (scripts/bench-net.sh's results: the median step of a
    per-step method, the mean step of an outer loop, whose rounds land on some steps only).
A step's wall-clock time is then step x step time. The table gives, per row: the step
time and its ratio to the compute floor; the bytes per step; the final figure; the first
evaluated step within --within of the target (dense's final figure by default); and the
wall-clock time to it, with the speedup over the --baseline rows. The figure is the test
accuracy (higher is better, --within in points: 0.005 = 0.5 point) or, with --figure
perplexity, a language model's test perplexity (lower is better, --within a share of the
target: 0.03 = 3%).

    usage: scripts/outer_loop_report.py --lab DIR [--lab DIR ...] --row 'LABEL|CURVE.jsonl|LAB METHOD' ...
           [--target-row LABEL] [--within 0.005] [--baseline LABEL ...] [--svg OUT.svg]
           [--title TEXT] [--final-step N] [--figure accuracy|perplexity]

LAB METHOD is the method as bench-net records it ("none", "ddp dense",
"fp16+--sync-every=30"); the compute floor is taken from the same results. METHOD@SITTING
takes the run of the --lab directory named SITTING only, for a method several sittings ran.
"""
import argparse
import glob
import json
import math
import os
import statistics
import sys

COLOURS = ["#222222", "#7f7f7f", "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
           "#8c564b", "#17becf", "#e377c2"]


def lab_rows(lab_dir):
    """method -> its runs, each with the step time, the bytes and its sitting's floor."""
    rows = {}
    for path in glob.glob(os.path.join(lab_dir, "runs", "*.json")):
        with open(path) as f:
            run = json.load(f)
        s = run.get("summary") or {}
        if run.get("status") != "ok" or not s:
            continue
        outer = "--sync-every" in run["method"]
        ms = s.get("step_ms_mean") if outer else s.get("step_ms_median")
        if run["system"] == "ddp":
            ms = s.get("step_ms_median") or s.get("step_ms")
        rows.setdefault(run["method"], []).append(
            {"step_ms": ms, "bytes": s.get("bytes_sent_per_worker_per_step"),
             "bandwidth": run["bandwidth"]})
    # A sitting with --repeats has several runs of each row: one entry with their median
    # step and the median of its floor runs, as the lab's own table gives them.
    floors = [r["step_ms"] for r in rows.get("compute floor", []) if r["step_ms"]]
    floor = statistics.median(floors) if floors else None
    return {method: [{"step_ms": statistics.median(r["step_ms"] for r in runs),
                      "bytes": runs[0]["bytes"], "bandwidth": runs[0]["bandwidth"],
                      "floor": floor}]  # each sitting's own: the machine's load moves it
            for method, runs in rows.items()}


FIGURE_KEY = {"accuracy": "test_accuracy", "perplexity": "test_perplexity"}


def curve(path, final_step, figure="accuracy"):
    points = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            rec = json.loads(line)
            if rec.get("type") == "eval" and (final_step is None or rec["step"] <= final_step):
                if FIGURE_KEY[figure] not in rec:
                    raise SystemExit(f"outer_loop_report: {path} step {rec['step']} has no "
                                     f"{FIGURE_KEY[figure]} (--figure)")
                points.append((rec["step"], rec[FIGURE_KEY[figure]], rec.get("bytes_sent")))
    if not points:
        raise SystemExit(f"outer_loop_report: {path} has no eval records (--eval-every)")
    return sorted(points)


def fmt_figure(v, figure):
    return f"{v:.2f}" if figure == "perplexity" else f"{v:.4f}"


def fmt_s(v):
    return "—" if v is None else (f"{v:.1f} s" if v < 600 else f"{v / 60:.1f} min")


def reached(value, target, within, figure):
    """Whether a figure is within `within` of the target (see the module's comment)."""
    if figure == "perplexity":
        return value <= target * (1 + within)
    return value >= target - within


def svg(rows, target, title, out, figure="accuracy"):
    W, H, L, R, T, B = 760, 440, 64, 250, 40, 48
    # Log time: the outer loops finish within seconds, dense within many minutes.
    times = [p[0] * r["step_ms"] / 1e3 for r in rows for p in r["curve"] if p[0] > 0]
    tmin, tmax = min(times), max(times)
    accs = [p[1] for r in rows for p in r["curve"]]
    if figure == "perplexity":  # lower is better: the target near the bottom
        lo, hi = 0.95 * min(min(accs), target), min(max(accs), 2.5 * target)
    else:
        lo, hi = max(min(accs), target - 0.06), max(max(accs), target) + 0.005
    span = math.log10(tmax) - math.log10(tmin)
    x = lambda t: L + (W - L - R) * (math.log10(max(t, tmin)) - math.log10(tmin)) / span
    y = lambda a: T + (H - T - B) * (1 - (min(max(a, lo), hi) - lo) / (hi - lo))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
             f'font-family="sans-serif" font-size="12">',
             f'<rect width="{W}" height="{H}" fill="white"/>',
             f'<text x="{L}" y="22" font-size="14">{title}</text>',
             f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
             f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>',
             f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">wall-clock '
             f'seconds (log scale)</text>',
             f'<line x1="{L}" y1="{y(target):.1f}" x2="{W - R}" y2="{y(target):.1f}" '
             f'stroke="#999" stroke-dasharray="4 3"/>',
             f'<text x="{W - R + 4}" y="{y(target) + 4:.1f}" fill="#666">target</text>']
    decade = 10 ** math.floor(math.log10(tmin))
    while decade <= tmax:
        for m in (1, 2, 5):
            t = m * decade
            if tmin <= t <= tmax:
                parts.append(f'<text x="{x(t):.1f}" y="{H - B + 16}" text-anchor="middle">'
                             f'{t:g}</text>')
        decade *= 10
    for i in range(6):
        a = lo + (hi - lo) * i / 5
        label = f"{a:.1f}" if figure == "perplexity" else f"{a:.3f}"
        parts.append(f'<text x="{L - 6}" y="{y(a) + 4:.1f}" text-anchor="end">{label}</text>')
    for k, r in enumerate(rows):
        c = COLOURS[k % len(COLOURS)]
        pts = " ".join(f"{x(p[0] * r['step_ms'] / 1e3):.1f},{y(p[1]):.1f}"
                       for p in r["curve"] if p[0] > 0)
        parts.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.6" points="{pts}"/>')
        parts.append(f'<text x="{W - R + 4}" y="{T + 16 * k + 24}" fill="{c}">{r["label"]}</text>')
    parts.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(parts) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lab", action="append", required=True,
                    help="a bench-net output directory; several: their runs together (the "
                         "compute floor from the first)")
    ap.add_argument("--row", action="append", required=True)
    ap.add_argument("--target-row", default=None, help="its final figure is the target")
    ap.add_argument("--figure", choices=sorted(FIGURE_KEY), default="accuracy")
    ap.add_argument("--within", type=float, default=None,
                    help="accuracy: points (default 0.005); perplexity: a share (default 0.03)")
    ap.add_argument("--baseline", action="append", default=[])
    ap.add_argument("--final-step", type=int, default=None, help="curves end here")
    ap.add_argument("--target-step", type=int, default=None,
                    help="the target is the target row's figure at this step (default: its last)")
    ap.add_argument("--svg", default=None)
    ap.add_argument("--title", default="test accuracy against wall-clock time")
    a = ap.parse_args()
    if a.within is None:
        a.within = 0.03 if a.figure == "perplexity" else 0.005

    lab = {}
    for d in a.lab:
        for method, runs in lab_rows(d).items():
            lab.setdefault(method, []).extend(runs)
            # METHOD@SITTING: that sitting's run only (a method several sittings ran).
            lab.setdefault(method + "@" + os.path.basename(os.path.normpath(d)), []).extend(runs)
    rows = []
    for spec in a.row:
        try:
            label, path, method = spec.split("|")
        except ValueError:
            sys.exit(f"outer_loop_report: --row '{spec}': expected LABEL|CURVE.jsonl|LAB METHOD")
        if method not in lab:
            sys.exit(f"outer_loop_report: no lab run of '{method}' in {a.lab}")
        runs = lab[method]
        run = sorted(runs, key=lambda r: r["step_ms"])[len(runs) // 2]  # over sittings
        step_ms = run["step_ms"]
        rows.append({"label": label, "method": method, "step_ms": step_ms, "floor": run["floor"],
                     "bytes": runs[0]["bytes"], "curve": curve(path, a.final_step, a.figure)})
    target_row = next((r for r in rows if r["label"] == a.target_row), rows[0])
    target = target_row["curve"][-1][1]
    if a.target_step is not None:
        at = [p for p in target_row["curve"] if p[0] == a.target_step]
        if not at:
            sys.exit(f"outer_loop_report: {target_row['label']} has no evaluation at step "
                     f"{a.target_step}")
        target = at[0][1]
    for r in rows:
        r["final"] = r["curve"][-1][1]
        hit = next((p for p in r["curve"] if reached(p[1], target, a.within, a.figure)), None)
        r["steps_to"] = hit[0] if hit else None
        r["time_to"] = hit[0] * r["step_ms"] / 1e3 if hit else None
    tolerance = (f"{a.within * 100:g}% (≤ {target * (1 + a.within):.2f})"
                 if a.figure == "perplexity" else f"{a.within * 100:.1f} point")
    print(f"target: {fmt_figure(target, a.figure)} ({target_row['label']}'s {a.figure} at step "
          f"{a.target_step or target_row['curve'][-1][0]}), reached within {tolerance}; "
          f"× floor: against the compute floor of the row's own lab sitting\n")
    head = ["method", "step (lab)", "× floor", "sent/worker/step", "final", "steps to target",
            "time to target"] + [f"vs {b}" for b in a.baseline]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        cells = [r["label"], f"{r['step_ms']:.1f} ms",
                 f"{r['step_ms'] / r['floor']:.2f}" if r["floor"] else "—",
                 f"{r['bytes'] / 1e3:.1f} kB" if r["bytes"] is not None else "—",
                 fmt_figure(r["final"], a.figure), str(r["steps_to"] or "not reached"),
                 fmt_s(r["time_to"])]
        for b in a.baseline:
            base = next((x for x in rows if x["label"] == b), None)
            ok = base and base["time_to"] and r["time_to"]
            cells.append(f"{base['time_to'] / r['time_to']:.1f}×" if ok else "—")
        print("| " + " | ".join(cells) + " |")
    if a.svg:
        svg(rows, target, a.title, a.svg, a.figure)


if __name__ == "__main__":
    main()
