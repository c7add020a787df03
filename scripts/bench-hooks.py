#!/usr/bin/python3
"""DDP communication hooks side by side: gradcomp's against torch's own, in one run.

    PYTHONPATH=build/python /usr/bin/python3 scripts/bench-hooks.py [--steps 30 --rounds 5]

What a hook costs per step on the main job's MLP (784-1536-1536-10, 3.58 M gradients)
when the network costs nothing: one process, a Gloo group of one, so every collective
is local and what remains is the hook's compression and decompression. Each method
trains its own DDP replica of the same model on the same batches (DDP's default buckets;
torch's PowerSGD hook gets one bucket, the only way it runs on Gloo); a step is timed from
backward() to the end of optimizer.step() (DDP waits for the hook's futures inside
backward). A hook's cost is its median step minus the median step of a hook that
returns the bucket untouched, measured in the same rounds (methods interleaved, so
machine noise hits them alike). torch's PowerSGD hook compresses from its
start_powerSGD_iter (2); the first steps of every method are not timed.
"""
import argparse
import datetime
import faulthandler
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

import gradcomp.torch as gc


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(784, 1536), nn.ReLU(), nn.Linear(1536, 1536), nn.ReLU(),
                         nn.Linear(1536, 10))


def noop_hook(_, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def one_bucket_ddp() -> DDP:
    """DDP with every gradient in one bucket (the first bucket's cap is a module constant)."""
    saved = dist._DEFAULT_FIRST_BUCKET_BYTES
    dist._DEFAULT_FIRST_BUCKET_BYTES = 1 << 40
    try:
        return DDP(mlp(), bucket_cap_mb=1 << 20)
    finally:
        dist._DEFAULT_FIRST_BUCKET_BYTES = saved


def make(method: str):
    """(model, optimizer) with the method's hook registered."""
    model = DDP(mlp())
    if method == "noop":
        model.register_comm_hook(None, noop_hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    elif method == "torch fp16_compress_hook":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    elif method == "torch powerSGD_hook rank 2":
        # One bucket, as the network lab runs it: with several, torch 1.13's hook issues its
        # allreduces from Gloo's callback threads and deadlocks (seen here with a group of one:
        # two Gloo threads inside compute_qs and unpack_uncompressed_tensors_and_allreduce_ps).
        model = one_bucket_ddp()
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=2,
                                            start_powerSGD_iter=2)
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    else:
        spec = method.removeprefix("gradcomp ")
        state = gc.CompressionState(spec, dense_share=0.0)
        model.register_comm_hook(state, gc.hook)
        opt = gc.SGD(model.parameters(), lr=0.01, momentum=0.9, state=state)
    return model, opt


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=20, help="timed steps per method per round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per method first")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--gradcomp", nargs="*",
                   default=["powersgd:rank=2", "fp16", "efm(topk:ratio=0.01)", "2bit"],
                   help="gradcomp specs to time")
    p.add_argument("--only", nargs="*", help=argparse.SUPPRESS)
    p.add_argument("--watchdog", type=float, default=600.0,
                   help="dump every thread's stack and exit after this many seconds")
    args = p.parse_args()
    faulthandler.dump_traceback_later(args.watchdog, exit=True)
    torch.set_num_threads(1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0,
                            world_size=1, timeout=datetime.timedelta(seconds=60))
    methods = ["noop", "torch fp16_compress_hook", "torch powerSGD_hook rank 2"] + \
        [f"gradcomp {s}" for s in args.gradcomp]
    if args.only:
        methods = [m for m in methods if m in args.only or m == "noop"]
    runs = {m: make(m) for m in methods}
    x = torch.randn(args.batch, 784, generator=torch.Generator().manual_seed(1))
    y = torch.randint(0, 10, (args.batch,), generator=torch.Generator().manual_seed(2))
    times = {m: [] for m in methods}

    def step(model, opt):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        t0 = time.perf_counter()
        loss.backward()
        opt.step()
        return time.perf_counter() - t0

    for m, (model, opt) in runs.items():
        for _ in range(args.warmup):
            step(model, opt)
    for _ in range(args.rounds):
        for m, (model, opt) in runs.items():
            for _ in range(args.steps):
                times[m].append(step(model, opt))
    base = statistics.median(times["noop"])
    print(f"bench-hooks: MLP 784-1536-1536-10 (3.58 M gradients), batch {args.batch}, one process, "
          f"{args.rounds} rounds x {args.steps} steps per method, medians")
    print(f"{'method':<36} {'step ms':>9} {'hook ms':>9}")
    for m in methods:
        med = statistics.median(times[m])
        print(f"{m:<36} {1000 * med:9.2f} {1000 * (med - base):9.2f}")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
