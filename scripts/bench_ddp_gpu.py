#!/usr/bin/env python3
"""DDP alone against DDP + a communication hook, on torchvision models on one CUDA device
(issue 30: what the codecs cost the GPU; scripts/gpu-check.sh runs it).

A world of one over "cpu:gloo,cuda:nccl": DDP's own collectives run on NCCL, gradcomp's
exchange on Gloo. With one rank nothing crosses a network, so the step time above DDP
alone is what a hook costs on the device and the host: for methods the device reducers run
(top-k, 2bit, efsign, PowerSGD here) their work on the device and the copies of what the
collectives carry (messages; PowerSGD's factors); for the others the bucket's round trip
through pinned host memory and the method on the CPU. Each gradcomp row names its path as
CompressionState.on_device reports it ("device" or "staged"), and for the device path whether
the codecs ran gradcomp's fused CUDA kernels or ATen operations (a spec ending in "@aten"
switches the kernels off: the same method both ways in one run; "@perbucket" runs the device
reducer one bucket at a time, GRADCOMP_DEVICE_BATCH=0, against its batches; "@aten+perbucket"
both; "@scatter" runs the scatter reducer, reducer="scatter": in a world of one every tensor
is one slice, encoded and decoded twice, the codec's cost on the GPU ("int@scatter+perbucket":
int's codec one tensor at a time, against its whole-block batches); "@amp" trains under
fp16 autocast with a GradScaler, given to gradcomp's state: its rows compare with "ddp@amp",
DDP alone under the same autocast). Variants: DDP alone,
torch's PowerSGD hook, gradcomp's hook with each --specs entry. Synthetic ImageNet-sized
batches; the median step of --steps after --warmup. Prints a Markdown table; --json writes
the record. --profile FILE adds, for each gradcomp variant, torch.profiler's table of three
more steps (the operators by CUDA time, then by host time, with their call counts): where
a hook's time goes on the device and on the host.
"""
import argparse
import datetime
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torchvision
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as torch_powersgd
from torch.nn.parallel import DistributedDataParallel as DDP

import gradcomp
import gradcomp.torch as gc


def step_times(model_name, batch, hook, steps, warmup, device, profile=None):
    """The median step time, and the path gradcomp's hook takes ("device" or "staged";
    "-" for the other variants)."""
    torch.manual_seed(0)
    path = "-"
    previous = None  # the kernel switch to restore, for gradcomp's variants
    model = getattr(torchvision.models, model_name)(weights=None).to(device)
    ddp = DDP(model, device_ids=[device.index or 0] if device.type == "cuda" else None)
    amp = hook.partition("@")[2].split("+").count("amp") > 0
    scaler = torch.amp.GradScaler(device.type) if amp else None
    if hook.partition("@")[0] == "ddp":
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    elif hook.startswith("torch-powersgd"):
        rank = int(hook.split("=")[1])
        state = torch_powersgd.PowerSGDState(process_group=None, matrix_approximation_rank=rank,
                                             start_powerSGD_iter=2)
        ddp.register_comm_hook(state, torch_powersgd.powerSGD_hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    else:
        spec, _, mode = hook.partition("@")
        modes = set(mode.split("+")) if mode else set()
        kernels = "aten" not in modes and gradcomp.cuda_kernels_built()
        previous = gradcomp.set_cuda_kernels(kernels)
        # Read when the device reducer is built, at the first compressed step.
        batch_switch = os.environ.get("GRADCOMP_DEVICE_BATCH")
        if "perbucket" in modes:
            os.environ["GRADCOMP_DEVICE_BATCH"] = "0"
        state = gc.CompressionState(spec, reducer="scatter" if "scatter" in modes else "auto",
                                    grad_scaler=scaler)
        ddp.register_comm_hook(state, gc.hook)
        opt = gc.SGD(ddp.parameters(), lr=0.01, momentum=0.9, state=state)
        path = ("device, " + ("kernels" if kernels else "aten")
                + (", one bucket at a time" if "perbucket" in modes else "")
                + (", scatter" if "scatter" in modes else "")) if state.on_device else "staged"
        path += ", fp16 amp" if amp else ""
    x = torch.randn(batch, 3, 224, 224, device=device)
    y = torch.randint(0, 1000, (batch,), device=device)
    times = []

    def train_step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.float16, enabled=amp):
            loss = nn.functional.cross_entropy(ddp(x), y)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for i in range(warmup + steps):
        sync()
        t = time.perf_counter()
        train_step()
        sync()
        if i >= warmup:
            times.append(time.perf_counter() - t)
    if profile is not None and path != "-":
        from torch.profiler import ProfilerActivity
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with torch.profiler.profile(activities=activities) as prof:
            for _ in range(3):
                train_step()
            sync()
        table = prof.key_averages()
        profile.write(f"\n## {model_name} batch {batch} {hook} ({path}), 3 steps\n")
        if device.type == "cuda":
            profile.write(table.table(sort_by="cuda_time_total", row_limit=20) + "\n")
        profile.write(table.table(sort_by="cpu_time_total", row_limit=20) + "\n")
        profile.flush()
    if previous is not None:
        gradcomp.set_cuda_kernels(previous)
        if batch_switch is None:
            os.environ.pop("GRADCOMP_DEVICE_BATCH", None)
        else:
            os.environ["GRADCOMP_DEVICE_BATCH"] = batch_switch
    del ddp, model, opt
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return statistics.median(times), path


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet50:64,alexnet:128", help="name:batch,...")
    ap.add_argument("--specs", default="powersgd:rank=2;efm(topk:ratio=0.01);"
                    "efm(topk:ratio=0.01)@perbucket;efm(topk:ratio=0.01)@aten;"
                    "2bit;2bit@perbucket;2bit@aten;efsign;"
                    "dgc:density=0.001;dgc:density=0.001@perbucket;int@scatter;"
                    "int@scatter+perbucket;"
                    "efm(topk:ratio=0.01)@amp;powersgd:rank=2@amp",
                    help="gradcomp compressors, ';'-separated")
    ap.add_argument("--torch-powersgd-rank", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--profile", help="write torch.profiler tables of each gradcomp variant here")
    ap.add_argument("--device", default="cuda",
                    help="cuda, or cpu: every variant on the CPU over Gloo (a check of this "
                         "script where no GPU is; its times say nothing about a GPU's)")
    args = ap.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    device = torch.device(args.device, 0) if args.device == "cuda" else torch.device("cpu")
    dist.init_process_group("cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo", rank=0,
                            world_size=1, timeout=datetime.timedelta(minutes=5))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    variants = (["ddp", "ddp@amp", f"torch-powersgd:rank={args.torch_powersgd_rank}"]
                + args.specs.split(";"))
    record = dict(device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                  torch=torch.__version__, variants=variants,
                  steps=args.steps, warmup=args.warmup, results=[])
    print(f"# {record['device']}, torch {torch.__version__}, world of one over "
          f"{dist.get_backend()}", flush=True)
    profile = open(args.profile, "w") if args.profile else None
    for entry in args.models.split(","):
        name, batch = entry.split(":")
        bases = {}  # DDP alone's step, without and with fp16 autocast
        for v in variants:
            t, path = step_times(name, int(batch), v, args.steps, args.warmup, device, profile)
            amp = "amp" in v.partition("@")[2].split("+")
            base = bases.setdefault(amp, t)
            record["results"].append(dict(model=name, batch=int(batch), variant=v, path=path,
                                          step_seconds=t, vs_ddp=t / base))
            print(f"{name} batch {batch} {v} ({path}): {t * 1e3:.1f} ms ({t / base:.2f}x DDP)",
                  flush=True)
            if args.json:  # after every variant: a run stopped by gpu-check's timeout keeps them
                write_json(args.json, record)
    print()
    print("| model | batch | variant | path | step (ms) | vs DDP alone (@amp: ddp@amp) |")
    print("|---|---|---|---|---|---|")
    for r in record["results"]:
        print(f"| {r['model']} | {r['batch']} | {r['variant']} | {r['path']} | "
              f"{r['step_seconds'] * 1e3:.1f} | {r['vs_ddp']:.2f}x |")
    dist.destroy_process_group()


def write_json(path, record):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(record, f, indent=1)
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
