#!/usr/bin/env python3
"""Test accuracy against epoch, one line per method, as an SVG (no plotting library needed).

Reads the per-epoch records of `gradcomp train --metrics` files (what
scripts/accuracy-table.sh writes as <label>-s<seed>.jsonl) and draws one polyline per
file, labelled by the file's <label>.

    usage: scripts/accuracy_curves.py --title TEXT --out curves.svg DIR/*.jsonl
"""
import argparse
import json
import os
import sys

COLOURS = ["#222222", "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
W, H = 720, 440
LEFT, RIGHT, TOP, BOTTOM = 64, 190, 40, 48


def read_curve(path):
    epochs, accs = [], []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            rec = json.loads(line)
            if rec.get("type") == "epoch" and rec.get("complete", True):
                epochs.append(rec["epoch"])
                accs.append(rec["test_accuracy"])
    if not epochs:
        raise SystemExit(f"accuracy_curves: {path} has no epoch records")
    return epochs, accs


def label_of(path):
    name = os.path.basename(path)
    if name.endswith(".jsonl"):
        name = name[: -len(".jsonl")]
    return name.rsplit("-s", 1)[0] if "-s" in name else name


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--title", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--ymin", type=float, default=None, help="lowest accuracy shown")
    p.add_argument("files", nargs="+")
    a = p.parse_args()

    curves = [(label_of(f), *read_curve(f)) for f in a.files]
    max_epoch = max(max(e) for _, e, _ in curves)
    lo = a.ymin if a.ymin is not None else min(min(v) for _, _, v in curves)
    hi = max(max(v) for _, _, v in curves)
    step = 0.01 if hi - lo <= 0.1 else 0.05
    lo = step * int(lo / step)
    hi = step * (int(hi / step) + 1)

    def x(e):
        return LEFT + (W - LEFT - RIGHT) * (e - 1) / max(1, max_epoch - 1)

    def y(v):
        return TOP + (H - TOP - BOTTOM) * (hi - max(v, lo)) / (hi - lo)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
        f'font-family="sans-serif" font-size="12">',
        f'<rect width="{W}" height="{H}" fill="white"/>',
        f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="14">{a.title}</text>',
    ]
    ticks = int(round((hi - lo) / step))
    for i in range(ticks + 1):
        v = lo + i * step
        out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                   'stroke="#dddddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>')
    for e in range(1, max_epoch + 1):
        out.append(f'<text x="{x(e):.1f}" y="{H - BOTTOM + 16}" text-anchor="middle">{e}</text>')
    out.append(f'<text x="{(LEFT + W - RIGHT) / 2}" y="{H - 12}" text-anchor="middle">epoch</text>')
    out.append(f'<text x="16" y="{(TOP + H - BOTTOM) / 2}" text-anchor="middle" '
               f'transform="rotate(-90 16 {(TOP + H - BOTTOM) / 2})">test accuracy</text>')
    for i, (label, epochs, accs) in enumerate(curves):
        c = COLOURS[i % len(COLOURS)]
        pts = " ".join(f"{x(e):.1f},{y(v):.1f}" for e, v in zip(epochs, accs))
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="2" points="{pts}"/>')
        ly = TOP + 18 * i + 8
        out.append(f'<line x1="{W - RIGHT + 12}" x2="{W - RIGHT + 32}" y1="{ly}" y2="{ly}" '
                   f'stroke="{c}" stroke-width="2"/>')
        out.append(f'<text x="{W - RIGHT + 38}" y="{ly + 4}">{label} {accs[-1]:.4f}</text>')
    out.append("</svg>")
    with open(a.out, "w") as f:
        f.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
