#!/usr/bin/env python3
"""Turns the runs of scripts/bench-net.sh into one table, a JSON file and an SVG plot.

    netlab_report.py OUT_DIR

reads OUT_DIR/meta.json and OUT_DIR/runs/*.json (one per run, written by bench-net.sh)
and writes OUT_DIR/results.json, OUT_DIR/table.md and OUT_DIR/step-time.svg; prints the
table. Standard library only (any python3).

Columns: median step time after warm-up; that time over the compute floor (the
no-communication run); speedup over gradcomp dense and over DDP + PowerSGD at the same
bandwidth (> 1: faster); bytes per worker per step as the ring/allgather model counts
them and as measured on the rank's interface (TCP/IP headers included); test accuracy;
and gradcomp's split of a step into compute / encode / communicate / decode (ms/step), and
the time it waited for the exchange after backward (the rest ran hidden behind backward);
and the cost model's prediction of each gradcomp row (`gradcomp advise --json` with the
lab's workers, bandwidth, delay, cores and the measured compute floor; docs/cost-model.md)
with its error against the measured median. The gradcomp binary is $GRADCOMP, else
build/bin/gradcomp beside this script's repository; without it the column is left empty.
Codec speeds are measured by advise on the spot, or read from $GRADCOMP_CODEC_SPEEDS (the
output of `gradcomp bench codec --json`).

    netlab_report.py [--dense-share X] --predict OUT_DIR

re-reports an existing OUT_DIR/results.json (no runs/ needed) with the predictions beside
the measured rows, printing the table and writing nothing.

    netlab_report.py --validate [--exclude SPEC]... OUT_DIR...

prints the gradcomp rows of several sittings (e.g. W = 2, 4, 8, one with a delay) as one
table of measured against predicted step time and bytes, predicted now by this checkout's
model; exits 1 when a row misses the
prediction by more than 15% (issue 13's bar). --exclude leaves a method's rows out (say
why beside the table: e.g. DGC runs shorter than its warm-up, which the model does not
predict). --dense-share: the runs'
gradcomp train --dense-share when meta.json does not record it (default 0.01, train's
default since commit 6f1b9dc; the committed run in docs/measurements/netlab used 0).
"""

import glob
import json
import re
import math
import os
import statistics
import subprocess
import sys

DENSE = "none"  # gradcomp's dense allreduce
DDP_PSGD_PREFIX = "ddp+powersgd"


def rate_bps(s):
    s = s.lower()
    for unit, mult in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1.0)):
        if s.endswith(unit):
            return float(s[: -len(unit)]) * mult
    return float("nan")


def load_runs(out):
    runs = []
    for path in sorted(glob.glob(os.path.join(out, "runs", "*.json"))):
        with open(path) as f:
            runs.append(json.load(f))
    return runs


def row_of(run):
    """Flattens one run into the table's fields."""
    s = run.get("summary") or {}
    steps = s.get("steps") or 0
    row = {
        "bandwidth": run["bandwidth"],
        "system": run["system"],
        "method": run["method"],
        "status": run["status"],
        "note": run.get("note", ""),
        "steps": steps,
        # An outer loop's median step has no round in it: its mean is what a step costs.
        "step_ms": s.get("step_ms_mean") if "--sync-every" in run["method"]
        else s.get("step_ms_median"),
        "model_bytes": s.get("bytes_sent_per_worker_per_step"),
        "wire_bytes": None,
        "accuracy": s.get("test_accuracy"),
        "split_ms": None,
        "repeat": run.get("repeat", 1),
        "load": run.get("load_at_start"),
    }
    if run["system"] == "ddp":
        row["wire_bytes"] = s.get("wire_tx_bytes_per_step")
    else:
        tx = run.get("tx_bytes_per_rank") or []
        workers = run.get("workers") or len(tx)
        if tx and steps:
            row["wire_bytes"] = sum(tx[:workers]) / workers / steps
        if steps and run["status"] == "ok":
            row["split_ms"] = [
                1e3 * (s.get(k) or 0.0) / steps
                for k in ("compute_seconds", "encode_seconds", "comm_seconds", "decode_seconds")
            ]
            # What the step waited for the exchange after backward (the exchange runs
            # alongside backward); binaries before the overlap did not report it.
            waited = s.get("exposed_seconds")
            row["split_ms"].append(None if waited is None else 1e3 * waited / steps)
    if run["method"] == "compute floor":
        row["accuracy"] = None  # a different training (world of one): not comparable
    return row


def merge_repeats(rows):
    """One row per (bandwidth, system, method). With repeats (bench-net.sh --repeats), the
    row is the run whose step time is the median (the lower one of an even count), its
    step time the median of the runs', plus runs_ms (every run's, sorted) and spread
    ((max - min) / median); failed runs are counted in the note."""
    groups = {}
    for r in rows:
        groups.setdefault((r["bandwidth"], r["system"], r["method"]), []).append(r)
    merged = []
    for runs in groups.values():
        ok = sorted((r for r in runs if r["status"] == "ok" and r["step_ms"]),
                    key=lambda r: r["step_ms"])
        if not ok:
            merged.append(runs[0])
            continue
        row = dict(ok[(len(ok) - 1) // 2])
        times = [r["step_ms"] for r in ok]
        row["step_ms"] = statistics.median(times)
        row["runs_ms"] = times
        row["spread"] = (times[-1] - times[0]) / row["step_ms"] if len(times) > 1 else None
        row["loads"] = [r["load"] for r in runs if r.get("load") is not None]
        if len(ok) < len(runs):
            row["note"] = "%d of %d runs failed" % (len(runs) - len(ok), len(runs))
        merged.append(row)
    return merged


def label(row):
    if row["system"] == "ddp":
        return row["method"]
    if row["method"] == "compute floor":
        return "compute floor (no comm)"
    return "gradcomp " + ("dense" if row["method"] == DENSE else row["method"])


def fmt_ms(v):
    return "—" if v is None else ("%.0f" % v if v >= 100 else "%.1f" % v)


def fmt_step(r):
    """The median step time; with repeats, the runs' range beside it."""
    runs = r.get("runs_ms") or []
    if len(runs) < 2:
        return fmt_ms(r["step_ms"])
    return "%s (%s–%s)" % (fmt_ms(r["step_ms"]), fmt_ms(runs[0]), fmt_ms(runs[-1]))


def fmt_mb(v):
    if v is None:
        return "—"
    return "%.2f" % (v / 1e6) if v >= 1e4 else "%.4f" % (v / 1e6)


def fmt_x(v):
    return "—" if v is None or not math.isfinite(v) else "%.2f×" % v


def fmt_acc(v):
    return "—" if v is None else "%.2f%%" % (100 * v)


MLP_MODEL = re.compile(r"MLP 784-([0-9]+(?:,[0-9]+)*)-10\b")
# ns of the workers' CPU per byte an overlapped exchange sends through the delay line:
# kOverlappedExchangeCpuPerByte (6) plus the delay line's packets (44).
DELAY_LINE_EXCHANGE_CPU_NS = 50
LM_MODEL = "transformer LM (834 k parameters) on fortunes"  # bench-net.sh's MODEL_NAME


def group_flags(meta):
    """advise's --min-group-mb for the sitting: its trainer's exchange-group size. Sittings
    before 2026-11-26 (no "min_group_mb" in their meta) ran 1 MiB groups for every method;
    "auto" is the trainer's default, which advise applies itself."""
    g = meta.get("min_group_mb", 1)
    return [] if g == "auto" else ["--min-group-mb", "%g" % float(g)]


def advise_model_flags(meta):
    """advise's model flags for the sitting's model: --model transformer for the LM
    (bench-net.sh --model transformer); --model mlp for the default 1536,1536 MLP, else its
    tensors' shapes (weights out x in, then biases, as the trainer's MLP); None for another
    model."""
    if str(meta.get("model", "")).startswith(LM_MODEL):
        return ["--model", "transformer"]
    m = MLP_MODEL.match(str(meta.get("model", "")))
    if not m:
        return None
    widths = [784] + [int(x) for x in m.group(1).split(",")] + [10]
    if widths == [784, 1536, 1536, 10]:
        return ["--model", "mlp"]
    shapes = []
    for a, b in zip(widths, widths[1:]):
        shapes += ["%dx%d" % (b, a), "%d" % b]
    return ["--sizes", ",".join(shapes)]


def gradcomp_binary():
    g = os.environ.get("GRADCOMP")
    if g:
        return g
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.path.join(root, "build", "bin", "gradcomp")


def delay_seconds(s):
    """netem delay as bench-net.sh passes it ("5ms", "100us"); 0 when empty."""
    s = (s or "").strip().lower()
    for unit, mult in (("ms", 1e-3), ("us", 1e-6), ("s", 1.0)):
        if s.endswith(unit):
            return float(s[: -len(unit)]) * mult
    return 0.0


def add_predictions(meta, rows, floor_ms, gradcomp=None, dense_share=None):
    """Sets row["predicted_ms"] and row["predicted_error"] (predicted / measured - 1) for
    every gradcomp row the cost model can predict; returns a note when it cannot."""
    for r in rows:
        r["predicted_ms"] = None
        r["predicted_error"] = None
        r["predicted_bytes"] = None
    gradcomp = gradcomp or gradcomp_binary()
    if not os.access(gradcomp, os.X_OK):
        return "no prediction: %s is not built" % gradcomp
    model_flags = advise_model_flags(meta)
    if model_flags is None:
        return "no prediction: the advisor knows the lab's MLPs and LM only (model %r)" % meta.get("model")
    if not floor_ms:
        return "no prediction: no compute floor"
    workers = int(meta["workers"])
    cores = int(meta.get("cores") or 0)
    oversub = max(1.0, workers / cores) if cores else 1.0
    # The floor ran W workers on the machine's cores at once; advise scales a one-core
    # compute figure by the same max(1, W/C).
    compute_ms = floor_ms / oversub
    # scripts/netlab.sh: netem (or its delay line) at both ends of a rank's link, so a
    # packet between two ranks is delayed 2 x delay one way (alpha).
    latency_ms = 1e3 * 2 * delay_seconds(meta.get("delay"))
    # gradcomp train's --dense-share of the runs: the meta's, else the caller's, else
    # today's default (0.01; runs before commit 6f1b9dc, 2026-11-25, used 0).
    if dense_share is None:
        dense_share = meta.get("dense_share", 0.01)
    for bw in sorted({r["bandwidth"] for r in rows if r["bandwidth"] != "-"}):
        methods = sorted({r["method"] for r in rows if r["bandwidth"] == bw
                          and r["system"] == "gradcomp" and r["method"] != "compute floor"})
        if not methods:
            continue
        cmd = [gradcomp, "advise", "--json", "--workers", str(workers), "--bandwidth", bw,
               "--latency", "%gms" % latency_ms, "--cores", str(cores),
               "--compute-ms", "%g" % compute_ms, "--dense-share", "%g" % dense_share,
               "--methods", " ".join(methods)] + model_flags + group_flags(meta)
        if meta.get("delay_by") == "delayline" and delay_seconds(meta.get("delay")) > 0:
            # The delay line is a process per rank on the workers' cores: an exchange that
            # overlaps compute pays for its packets too (fit on the 100 Mbit/s + 48 ms
            # sittings of outer loops with --delay, docs/cost-model.md).
            cmd += ["--overlapped-exchange-cpu-ns", "%g" % DELAY_LINE_EXCHANGE_CPU_NS]
        if os.environ.get("GRADCOMP_CODEC_SPEEDS"):  # else measured by advise on the spot
            cmd += ["--codec-speeds", os.environ["GRADCOMP_CODEC_SPEEDS"]]
        try:
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        except (OSError, subprocess.CalledProcessError) as e:
            err = getattr(e, "stderr", "") or str(e)
            return "no prediction: %s" % err.strip()
        predicted = {}
        for line in out.splitlines():
            o = json.loads(line)
            if o.get("available"):
                predicted[o["spec"]] = (o["step_ms"], o["bytes_per_worker_step"])
        for r in rows:
            if r["bandwidth"] == bw and r["system"] == "gradcomp" and r["method"] in predicted:
                r["predicted_ms"], r["predicted_bytes"] = predicted[r["method"]]
                if r["status"] == "ok" and r["step_ms"]:
                    r["predicted_error"] = r["predicted_ms"] / r["step_ms"] - 1.0
    delay_line = meta.get("delay_by") == "delayline" and latency_ms > 0
    return ("predicted: gradcomp advise --workers %d --cores %d --compute-ms %.1f (floor / %g) "
            "--dense-share %g%s%s" % (workers, cores, compute_ms, oversub, dense_share,
                                      " --latency %gms" % latency_ms if latency_ms else "",
                                      " --overlapped-exchange-cpu-ns %g (the delay line)"
                                      % DELAY_LINE_EXCHANGE_CPU_NS if delay_line else ""))


def fmt_err(v):
    return "—" if v is None else "%+.1f%%" % (100 * v)


def build(out):
    with open(os.path.join(out, "meta.json")) as f:
        meta = json.load(f)
    rows = merge_repeats([row_of(r) for r in load_runs(out)])
    floor = next((r for r in rows if r["method"] == "compute floor" and r["step_ms"]), None)
    floor_ms = floor["step_ms"] if floor else None
    prediction_note = add_predictions(meta, rows, floor_ms)
    bandwidths = sorted({r["bandwidth"] for r in rows if r["bandwidth"] != "-"},
                        key=rate_bps, reverse=True)
    for r in rows:
        same = [o for o in rows if o["bandwidth"] == r["bandwidth"] and o["status"] == "ok"]
        dense = next((o for o in same if o["system"] == "gradcomp" and o["method"] == DENSE), None)
        psgd = next((o for o in same if o["method"].startswith(DDP_PSGD_PREFIX)), None)
        ok = r["status"] == "ok" and r["step_ms"]
        r["over_floor"] = r["step_ms"] / floor_ms if ok and floor_ms else None
        r["vs_dense"] = dense["step_ms"] / r["step_ms"] if ok and dense else None
        r["vs_ddp_powersgd"] = psgd["step_ms"] / r["step_ms"] if ok and psgd else None
    targets = []
    for bw in bandwidths:
        cands = [r for r in rows if r["bandwidth"] == bw and r["system"] == "gradcomp"
                 and r["method"] != DENSE and r["status"] == "ok" and r["step_ms"]]
        dense = next((r for r in rows if r["bandwidth"] == bw and r["method"] == DENSE
                      and r["system"] == "gradcomp" and r["status"] == "ok"), None)
        if not cands:
            continue
        # The best method among those within 0.5 point of dense accuracy (all, if dense
        # did not run).
        if dense and dense["accuracy"] is not None:
            fair = [r for r in cands if r["accuracy"] is not None
                    and r["accuracy"] >= dense["accuracy"] - 0.005]
        else:
            fair = cands
        best = min(fair or cands, key=lambda r: r["step_ms"])
        targets.append({
            "bandwidth": bw,
            "best": best["method"],
            "accuracy_within_half_point": bool(fair),
            "over_floor": best["over_floor"], "target_over_floor": 1.25,
            "vs_dense": best["vs_dense"], "target_vs_dense": 4.0,
            "vs_ddp_powersgd": best["vs_ddp_powersgd"], "target_vs_ddp_powersgd": 2.0,
        })
    result = {"meta": meta, "rows": rows, "targets": targets, "prediction": prediction_note}
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(result, f, indent=1)
    table = render_table(meta, rows, bandwidths, floor, targets, prediction_note)
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(table)
    with open(os.path.join(out, "step-time.svg"), "w") as f:
        f.write(render_svg(meta, rows, bandwidths, floor_ms))
    return table


def render_table(meta, rows, bandwidths, floor, targets, prediction_note=""):
    lines = []
    delay = ""
    if meta.get("delay"):
        delay = (", delay " + meta["delay"] + " each end"
                 + (" (netlab's delay line)" if meta.get("delay_by") == "delayline" else ""))
    tcp = meta.get("tcp_slow_start_after_idle", "kernel default")
    if tcp != "kernel default":
        delay += ", net.ipv4.tcp_slow_start_after_idle=" + tcp
    lines.append("Network lab: %s workers, %s, batch %s/worker, %s; links %s%s."
                 % (meta["workers"], meta["model"], meta["batch"], meta["length"],
                    " and ".join(bandwidths), delay))
    lines.append("Measured %s on %s (%s cores, Linux %s), load average %s at start, %s at end; "
                 "gradcomp %s, torch %s."
                 % (meta["date"], meta["cpu"], meta["cores"], meta["kernel"],
                    meta["load_start"], meta.get("load_end", "?"), meta["commit"],
                    meta.get("torch", "—")))
    loads = [v for r in rows for v in (r.get("loads") or [])]
    if int(meta.get("repeats", 1)) > 1:
        lines.append("Every row ran %s times, interleaved; its step time is the median, the "
                     "runs' range in brackets; 1-minute load average at the start of a run: "
                     "%.2f–%.2f." % (meta["repeats"], min(loads or [0]), max(loads or [0])))
    lines.append("")
    head = ("| link | method | step ms | × floor | vs gradcomp dense | vs DDP+PowerSGD "
            "| MB/worker/step (model) | MB/worker/step (wire) | test acc "
            "| compute / encode / comm / decode / waited (ms/step) | predicted ms | error "
            "| predicted MB/worker/step |")
    lines.append(head)
    lines.append("|" + "---|" * 13)
    ordered = []
    if floor:
        ordered.append(floor)
    for bw in bandwidths:
        ordered += [r for r in rows if r["bandwidth"] == bw]
    ordered += [r for r in rows if r["status"] != "ok" and r["bandwidth"] == "-"
                and r is not floor]
    for r in ordered:
        if r["status"] != "ok":
            lines.append("| %s | %s | %s | | | | | | | | | | |" % (r["bandwidth"], label(r),
                                                         r["status"] + (": " + r["note"] if r["note"] else "")))
            continue
        split = "—" if not r["split_ms"] else " / ".join(
            "—" if v is None else "%.1f" % v for v in r["split_ms"])
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["bandwidth"] if r["method"] != "compute floor" else "(none)", label(r),
            fmt_step(r), fmt_x(r["over_floor"]), fmt_x(r["vs_dense"]),
            fmt_x(r["vs_ddp_powersgd"]), fmt_mb(r["model_bytes"]), fmt_mb(r["wire_bytes"]),
            fmt_acc(r["accuracy"]), split, fmt_ms(r.get("predicted_ms")),
            fmt_err(r.get("predicted_error")), fmt_mb(r.get("predicted_bytes"))))
    lines.append("")
    if prediction_note:
        lines.append(prediction_note + ".")
        lines.append("")
    for t in targets:
        def mark(v, want, higher):
            if v is None:
                return "n/a"
            good = v >= want if higher else v <= want
            return "%.2f× (target %s %.2f×: %s)" % (v, "≥" if higher else "≤", want,
                                                     "met" if good else "MISSED")
        lines.append("Targets at %s, best gradcomp method %s%s: over compute floor %s; "
                     "vs dense %s; vs DDP+PowerSGD %s."
                     % (t["bandwidth"], t["best"],
                        "" if t["accuracy_within_half_point"] else
                        " (NONE within 0.5 point of dense accuracy)",
                        mark(t["over_floor"], 1.25, False), mark(t["vs_dense"], 4.0, True),
                        mark(t["vs_ddp_powersgd"], 2.0, True)))
    lines.append("")
    return "\n".join(lines)


PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2",
           "#17becf", "#7f7f7f", "#bcbd22"]


def render_svg(meta, rows, bandwidths, floor_ms):
    """Step time against bandwidth, log-log, one line per method: hand-written SVG."""
    w, h = 760, 460
    left, right, top, bottom = 70, 250, 48, 60
    series = {}
    for r in rows:
        if r["status"] == "ok" and r["step_ms"] and r["bandwidth"] in bandwidths:
            series.setdefault(label(r), []).append((rate_bps(r["bandwidth"]), r["step_ms"]))
    xs = [rate_bps(b) for b in bandwidths] or [1e9]
    ys = [y for pts in series.values() for _, y in pts] + ([floor_ms] if floor_ms else [])
    if not ys:
        ys = [1.0, 10.0]
    x0, x1 = math.log10(min(xs)) - 0.15, math.log10(max(xs)) + 0.15
    y0 = math.floor(math.log10(min(ys)) * 2) / 2
    y1 = math.ceil(math.log10(max(ys)) * 2) / 2
    if y1 - y0 < 1:
        y1 = y0 + 1

    def px(x):
        return left + (math.log10(x) - x0) / (x1 - x0) * (w - left - right)

    def py(y):
        return h - bottom - (math.log10(y) - y0) / (y1 - y0) * (h - top - bottom)

    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="12">' % (w, h),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="18" font-size="14">Median step time against link bandwidth</text>'
           % left,
           '<text x="%d" y="33" font-size="11" fill="#444">%s workers, %s, %s; measured %s'
           '</text>' % (left, meta["workers"], meta["model"], meta["length"], meta["date"][:10])]
    # Axes and grid: decades and half-decades of ms; one tick per measured bandwidth.
    e = y0
    while e <= y1 + 1e-9:
        v = 10 ** e
        y = py(v)
        out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>'
                   % (left, y, w - right, y))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%s</text>'
                   % (left - 6, y + 4, ("%g" % float("%.2g" % v))))
        e += 0.5
    for b, x in zip(bandwidths, xs):
        out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>'
                   % (px(x), top, px(x), h - bottom))
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>'
                   % (px(x), h - bottom + 18, b))
    out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="black"/>'
               % (left, top, w - left - right, h - top - bottom))
    out.append('<text x="%d" y="%d" text-anchor="middle">link bandwidth (each direction, '
               'per worker)</text>' % ((left + w - right) // 2, h - 16))
    out.append('<text transform="translate(18,%d) rotate(-90)" text-anchor="middle">'
               'median step time (ms, log)</text>' % ((top + h - bottom) // 2))
    legend_y = top + 8
    if floor_ms:
        y = py(floor_ms)
        out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="black" '
                   'stroke-dasharray="6,4"/>' % (left, y, w - right, y))
        out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black" '
                   'stroke-dasharray="6,4"/>' % (w - right + 12, legend_y, w - right + 36, legend_y))
        out.append('<text x="%d" y="%d">compute floor (no comm)</text>'
                   % (w - right + 42, legend_y + 4))
        legend_y += 20
    for i, (name, pts) in enumerate(sorted(series.items())):
        color = PALETTE[i % len(PALETTE)]
        pts.sort()
        dash = ' stroke-dasharray="2,3"' if name.startswith("ddp") else ""
        if len(pts) > 1:
            out.append('<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>'
                       % (color, dash, " ".join("%.1f,%.1f" % (px(x), py(y)) for x, y in pts)))
        for x, y in pts:
            out.append('<circle cx="%.1f" cy="%.1f" r="4" fill="%s"/>' % (px(x), py(y), color))
        out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>'
                   % (w - right + 12, legend_y, w - right + 36, legend_y, color, dash))
        out.append('<text x="%d" y="%d">%s</text>'
                   % (w - right + 42, legend_y + 4, name.replace("&", "&amp;").replace("<", "&lt;")))
        legend_y += 20
    out.append("</svg>")
    return "\n".join(out) + "\n"


def repredict(out, dense_share=None):
    """--predict: an existing results.json with the cost model's predictions; writes nothing."""
    with open(os.path.join(out, "results.json")) as f:
        result = json.load(f)
    meta, rows, targets = result["meta"], result["rows"], result.get("targets", [])
    floor = next((r for r in rows if r["method"] == "compute floor" and r["step_ms"]), None)
    note = add_predictions(meta, rows, floor["step_ms"] if floor else None,
                           dense_share=dense_share)
    bandwidths = sorted({r["bandwidth"] for r in rows if r["bandwidth"] != "-"},
                        key=rate_bps, reverse=True)
    return render_table(meta, rows, bandwidths, floor, targets, note)


def validate(dirs, limit=0.15, exclude=()):
    """--validate: the cost model against several lab sittings (one OUT_DIR per workers /
    delay setting, each with its results.json and predictions), as one table; returns
    (table, worst absolute error, rows over the limit)."""
    lines = ["| W | link | delay | method | measured ms: median (range) | predicted ms | error "
             "| MB/worker/step: measured (model's count) | wire | predicted |",
             "|" + "---|" * 10]
    worst, over = 0.0, []
    for d in dirs:
        with open(os.path.join(d, "results.json")) as f:
            result = json.load(f)
        meta = result["meta"]
        # Predicted now, by this checkout's model, not read from the sitting's results.
        floor = next((r for r in result["rows"] if r["method"] == "compute floor"
                      and r["step_ms"]), None)
        note = add_predictions(meta, result["rows"], floor["step_ms"] if floor else None)
        if note.startswith("no prediction"):
            sys.exit("netlab_report.py --validate: %s: %s" % (d, note))
        bandwidths = sorted({r["bandwidth"] for r in result["rows"] if r["bandwidth"] != "-"},
                            key=rate_bps, reverse=True)
        for bw in bandwidths:
            for r in result["rows"]:
                if (r["bandwidth"] != bw or r["system"] != "gradcomp" or r["status"] != "ok"
                        or r.get("predicted_ms") is None or r["method"] in exclude):
                    continue
                err = r["predicted_error"]
                worst = max(worst, abs(err))
                if abs(err) > limit:
                    over.append("W=%s %s %s %s: %+.1f%%" % (meta["workers"], bw,
                                                             meta.get("delay") or "no delay",
                                                             r["method"], 100 * err))
                lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    meta["workers"], bw, meta.get("delay") or "—",
                    "dense" if r["method"] == DENSE else "`%s`" % r["method"], fmt_step(r),
                    fmt_ms(r["predicted_ms"]), fmt_err(err), fmt_mb(r["model_bytes"]),
                    fmt_mb(r["wire_bytes"]), fmt_mb(r["predicted_bytes"])))
    lines.append("")
    lines.append("Worst error %.1f%%; %d row(s) beyond ±%.0f%%%s" % (
        100 * worst, len(over), 100 * limit, (": " + "; ".join(over)) if over else "."))
    return "\n".join(lines), worst, over


def main():
    args = sys.argv[1:]
    if args and args[0] == "--validate":
        args, exclude = args[1:], []
        while len(args) >= 2 and args[0] == "--exclude":
            exclude.append(args[1])
            args = args[2:]
        if not args:
            sys.exit("usage: netlab_report.py --validate [--exclude SPEC]... OUT_DIR...")
        table, _, over = validate(args, exclude=exclude)
        if exclude:
            table += "\nNot compared: %s." % ", ".join(exclude)
        print(table)
        sys.exit(1 if over else 0)
    dense_share = None
    if len(args) >= 2 and args[0] == "--dense-share":
        dense_share = float(args[1])
        args = args[2:]
    if len(args) == 2 and args[0] == "--predict":
        print(repredict(args[1], dense_share))
        return
    if len(args) != 1 or dense_share is not None:
        sys.exit("usage: netlab_report.py OUT_DIR | "
                 "netlab_report.py [--dense-share X] --predict OUT_DIR | "
                 "netlab_report.py --validate [--exclude SPEC]... OUT_DIR...")
    print(build(args[0]))


if __name__ == "__main__":
    main()
