#!/usr/bin/env python3
"""The device codecs on one large bucket, against the device's copy bandwidth and torch's
own top-k (issue 30's targets; run by scripts/gpu-check.sh on a GPU, or on the CPU here).

For a bucket of N float32 elements (default 100 M) on the device:
- copy: a device-to-device copy of the bucket; bandwidth counts bytes read + written (8N);
- encode+EF: DeviceCodec.payload_with_residual (e += g, the payload of e, e -= decode),
  payload left on the device. Its least memory traffic is 12N bytes (read g and e, write
  e); "of copy bw" is 12N / time over the copy's bandwidth: a kernel at the copy's speed
  scores 100%;
- encode: DeviceCodec.payload (no error feedback: x = g, read once);
- decode: decode_payload_add of that payload into a float32 bucket;
- torch.topk(|g|, k): the exact top-k gradcomp's exact selection is compared with, against
  top-k's encode without error feedback (torch.topk has none either) and with it.
Where the build has gradcomp's fused CUDA kernels, each codec is timed twice in the same
run: with them (the default) and with the ATen operations they replace.
Times are medians over --reps runs after warm-up (CUDA events on a GPU). Writes a JSON
record (--json) and prints a Markdown table.
"""
import argparse
import json
import statistics
import sys
import time

import torch

import gradcomp

SPECS = [
    "fp16",
    "fp16:format=bf16",
    "topk:ratio=0.01",
    "topk:ratio=0.001",
    "topk:ratio=0.001,select=exact",
    "topk:ratio=0.01,select=exact",
    "2bit",
    "2bit:threshold=0.5",
    "1bit",
    "signsgd",
    "efsign",
    "int",
    "int:bits=8,block=256",
]


def timer(device):
    if device.type == "cuda":
        def run(fn, reps):
            times = []
            for _ in range(reps):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / 1e3)
            return statistics.median(times)
    else:
        def run(fn, reps):
            times = []
            for _ in range(reps):
                t = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t)
            return statistics.median(times)
    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--elements", type=int, default=100_000_000)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--specs", default=";".join(SPECS), help="specs, separated by ;")
    ap.add_argument("--json", help="write the record here")
    ap.add_argument("--jsonl", help="write one line per codec in `gradcomp bench codec --json`'s "
                    "form, for `gradcomp advise --device-speeds`")
    args = ap.parse_args()
    device = torch.device(args.device)
    n = args.elements
    measure = timer(device)
    torch.manual_seed(0)
    g = torch.randn(n, device=device) * 0.01
    dst = torch.empty_like(g)
    measure(lambda: dst.copy_(g), 2)
    t_copy = measure(lambda: dst.copy_(g), args.reps)
    copy_bw = 8 * n / t_copy
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    record = dict(device=name, torch=torch.__version__, elements=n, reps=args.reps,
                  copy_seconds=t_copy, copy_bandwidth=copy_bw, codecs=[])
    print(f"# {name}, torch {torch.__version__}, {n} float32 elements", flush=True)
    print(f"copy: {t_copy * 1e3:.3f} ms, {copy_bw / 1e9:.0f} GB/s (read + written)", flush=True)

    k = max(1, n // 1000)
    absg = g.abs()
    measure(lambda: torch.topk(absg, k, sorted=False), 1)
    t_torch_topk = measure(lambda: torch.topk(g.abs(), k, sorted=False), max(3, args.reps // 2))
    record["torch_topk_0.001_seconds"] = t_torch_topk
    print(f"torch.topk(|g|, {k}): {t_torch_topk * 1e3:.3f} ms", flush=True)

    available = set(gradcomp.device_codec_names())
    paths = ["kernels", "aten"] if device.type == "cuda" and gradcomp.cuda_kernels_built() else ["aten"]
    rows = []
    for spec in args.specs.split(";"):
        if spec.split(":")[0] not in available:
            continue
        try:
            codec = gradcomp.DeviceCodec(spec)
        except ValueError as e:
            print(f"{spec}: {e}", file=sys.stderr)
            continue
        for path in paths:
            previous = gradcomp.set_cuda_kernels(path == "kernels")
            try:
                row = measure_codec(codec, g, measure, args.reps)
            except (RuntimeError, ValueError) as err:  # e.g. out of memory for a variant
                print(f"{spec} ({path}): failed: {err}", file=sys.stderr)
                continue
            finally:
                gradcomp.set_cuda_kernels(previous)
            row.update(path=path, encode_ef_share_of_copy=(12 * n / row["encode_ef_seconds"]) / copy_bw,
                       decode_share_of_copy=(8 * n / row["decode_seconds"]) / copy_bw)
            if "topk" in spec and "0.001" in spec:
                row["vs_torch_topk"] = t_torch_topk / row["encode_seconds"]
                row["vs_torch_topk_with_ef"] = t_torch_topk / row["encode_ef_seconds"]
            record["codecs"].append(row)
            rows.append(row)
            print(f"{spec} ({path}): encode {row['encode_seconds'] * 1e3:.3f} ms, encode+EF "
                  f"{row['encode_ef_seconds'] * 1e3:.3f} ms, decode {row['decode_seconds'] * 1e3:.3f} ms",
                  flush=True)
            if device.type == "cuda":
                torch.cuda.empty_cache()

    print()
    print("| codec | path | payload bytes | encode (ms) | encode + EF (ms) | of copy bw | decode (ms) "
          "| vs torch.topk (no EF / EF) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        vs = (f"{r['vs_torch_topk']:.1f}x / {r['vs_torch_topk_with_ef']:.1f}x"
              if "vs_torch_topk" in r else "")
        print(f"| `{r['spec']}` | {r['path']} | {r['payload_bytes']} | {r['encode_seconds'] * 1e3:.2f} | "
              f"{r['encode_ef_seconds'] * 1e3:.2f} | {100 * r['encode_ef_share_of_copy']:.0f}% | "
              f"{r['decode_seconds'] * 1e3:.2f} | {vs} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)
    if args.jsonl:
        write_jsonl(record, args.jsonl)


def measure_codec(codec, g, measure, reps):
    """Median times of encode (no error feedback), encode with it, and decode, on g's
    device."""
    e = torch.zeros_like(g)
    step = [0]

    def encode_ef():
        step[0] += 1
        return codec.payload_with_residual(g, e, seed=1, step=step[0])

    def encode():
        step[0] += 1
        return codec.payload(g, seed=1, step=step[0])

    payload = encode_ef()
    encode_ef()
    t_enc_ef = measure(encode_ef, reps)
    encode()
    t_enc = measure(encode, reps)
    out = torch.zeros_like(g)
    codec.decode_payload_add(payload, out)
    t_dec = measure(lambda: codec.decode_payload_add(payload, out), reps)
    return dict(spec=codec.spec, encode_seconds=t_enc, encode_ef_seconds=t_enc_ef,
                decode_seconds=t_dec, payload_bytes=int(payload.numel()))


def write_jsonl(record, path):
    """The codecs' rows as `gradcomp bench codec --json` writes them (kind, spec, n,
    encode_ms with error feedback, decode_ms, message_bytes), which `gradcomp advise
    --device-speeds` reads as the device's speeds."""
    with open(path, "w") as f:
        default = record["codecs"][0]["path"] if record["codecs"] else None
        for r in record["codecs"]:
            if r["path"] != default:  # the path the codecs take by default
                continue
            f.write(json.dumps(dict(
                kind="codec", spec=r["spec"], n=record["elements"],
                encode_ms=r["encode_ef_seconds"] * 1e3, decode_ms=r["decode_seconds"] * 1e3,
                message_bytes=r["payload_bytes"] + 24, device=record["device"])) + "\n")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--jsonl-from":
        # Converts an earlier --json record: --jsonl-from RECORD.json OUT.jsonl
        with open(sys.argv[2]) as f:
            write_jsonl(json.load(f), sys.argv[3])
    else:
        main()
