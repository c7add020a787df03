#!/usr/bin/env python3
"""Local steps with compressed pseudo-gradients: DiLoCo on a model of your own, without DDP.

Each worker trains its own replica on its own shard for H inner steps (AdamW), then the
workers exchange compressed pseudo-gradients (how far each replica moved) and take one outer
step (Nesterov momentum) from the weights they last agreed on. The gradcomp lines are marked
"gradcomp"; torch >= 2.0 (the inner optimizer's step hook runs the rounds).

    # 2 local processes (started by this script), a round every 20 inner steps, fp16
    # pseudo-gradients (the defaults); then 4-bit ones through the scatter reducer:
    PYTHONPATH=build/python .venv-torch2/bin/python examples/pytorch_diloco.py
    PYTHONPATH=build/python .venv-torch2/bin/python examples/pytorch_diloco.py --compressor int --reducer scatter
    # under torchrun (or Slurm / mpirun setting RANK, WORLD_SIZE, MASTER_ADDR/PORT):
    PYTHONPATH=build/python .venv-torch2/bin/torchrun --nproc_per_node 2 examples/pytorch_diloco.py
    # on GPUs: each rank on GPU LOCAL_RANK (ranks share them when there are fewer)
    ... examples/pytorch_diloco.py --device cuda
    # stop and continue: the second run ends where one run of 600 steps ends, bit for bit
    ... examples/pytorch_diloco.py --steps 300 --checkpoint-dir ck-diloco
    ... examples/pytorch_diloco.py --steps 300 --checkpoint-dir ck-diloco --resume

The model (784-1536-1536-10, ReLU) and data (Fashion-MNIST, pixels normalised) are
pytorch_ddp.py's; each worker draws batches of 64 from a shard of its own.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import gradcomp.torch as gc  # gradcomp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_ddp import (DATA_DIR, device_of, evaluate, human_bytes, launched,  # noqa: E402
                         load, mlp, start)


# The flags a resumed run must share with the run that saved its checkpoint.
RESUMED_FLAGS = ("sync_every", "outer", "compressor", "reducer", "fragments", "delay", "lr",
                 "weight_decay", "batch_size", "seed")


def batch_indices(rank: int, world: int, shard_size: int, step: int, batch: int,
                  seed: int) -> torch.Tensor:
    """Inner step `step`'s batch of this rank's shard: a pass over the shard in an order
    drawn from (seed, rank, pass), so that a resumed run draws what one run would have."""
    per_pass = shard_size // batch
    g = torch.Generator().manual_seed(seed * 1_000_003 + rank * 1009 + step // per_pass)
    order = torch.randperm(shard_size, generator=g)
    at = (step % per_pass) * batch
    return order[at:at + batch] * world + rank  # the shard is every world-th example


def train(args) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(args.threads)
    device = device_of(args)
    x_train, y_train = load("train", args.data_dir)
    x_test, y_test = load("t10k", args.data_dir)
    x_train, y_train = x_train.to(device), y_train.to(device)
    shard_size = len(x_train) // world

    torch.manual_seed(args.seed)
    model = mlp().to(device)  # where and what it trains as, before the DiLoCo holds it
    inner = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    diloco = gc.DiLoCo(  # gradcomp: collective; rank 0's weights become every rank's
        model, inner, args.outer, sync_every=args.sync_every, compressor=args.compressor,
        reducer=args.reducer, fragments=args.fragments, delay=args.delay, seed=args.seed)

    path = os.path.join(args.checkpoint_dir, f"rank{rank}.pt") if args.checkpoint_dir else None
    start = 0
    if args.resume:
        if not os.path.isfile(path):
            raise SystemExit(f"pytorch_diloco: rank {rank}: no {path} to resume from")
        saved = torch.load(path, map_location="cpu")
        model.load_state_dict(saved["model"])  # this rank's replica, mid-round or not
        inner.load_state_dict(saved["inner"])
        diloco.load_state_dict(saved["diloco"])  # gradcomp: global weights, momentum, memories
        start = saved["step"]
    if rank == 0:
        print(f"pytorch_diloco: {world} workers on {device.type}, mlp 784-1536-1536-10, "
              f"fashion-mnist, inner AdamW lr {args.lr}, batch {args.batch_size}/worker, "
              f"steps {start}..{start + args.steps}", flush=True)
        print(f"outer loop: {diloco.describe()}, reducer {args.reducer}", flush=True)

    began = time.monotonic()
    model.train()
    for step in range(start, start + args.steps):
        idx = batch_indices(rank, world, shard_size, step, args.batch_size, args.seed).to(device)
        inner.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x_train[idx]), y_train[idx])
        loss.backward()
        inner.step()  # gradcomp: the hook counts the step and runs the rounds due
        if rank == 0 and (step + 1) % args.log_every == 0:
            print(f"step {step + 1}: loss {loss.item():.4f} ({time.monotonic() - began:.0f} s)",
                  flush=True)

    if path is not None:  # what a later --resume continues from, taken before synchronize
        os.makedirs(args.checkpoint_dir, exist_ok=True)
        torch.save({"model": model.state_dict(), "inner": inner.state_dict(),
                    "diloco": diloco.state_dict(), "step": start + args.steps, "world": world,
                    "flags": {f: getattr(args, f) for f in RESUMED_FLAGS}}, path + ".tmp")
        os.replace(path + ".tmp", path)
    diloco.synchronize()  # gradcomp: every rank now holds the same model
    stats = diloco.stats()
    diloco.close()

    model.cpu().eval()
    with torch.no_grad():
        test_loss = sum(nn.functional.cross_entropy(model(x_test[i:i + 1000]), y_test[i:i + 1000],
                                                    reduction="sum").item()
                        for i in range(0, len(x_test), 1000)) / len(x_test)
    accuracy = evaluate(model, x_test, y_test)
    if rank == 0:
        dense = 4 * sum(p.numel() for p in model.parameters())
        rounds = max(stats["rounds"], 1)
        rows = [("test accuracy", f"{accuracy:.4f}"), ("test loss", f"{test_loss:.6f}"),
                ("rounds", str(stats["rounds"])),
                ("sent per worker per round", human_bytes(stats["bytes_sent"] / rounds)),
                ("the model in fp32", human_bytes(dense)),
                ("wall time", f"{time.monotonic() - began:.0f} s")]
        width = max(len(k) for k, _ in rows)
        print("\n".join(f"{k:<{width}}  {v}" for k, v in rows), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=600, help="inner steps of this run")
    p.add_argument("--sync-every", type=int, default=20, help="H, inner steps per round")
    p.add_argument("--outer", default="nesterov:lr=0.7,momentum=0.9",
                   help="the outer optimizer (DiLoCo's Nesterov by default)")
    p.add_argument("--compressor", default="fp16", help="a gradcomp spec for the pseudo-gradients")
    p.add_argument("--reducer", default="auto", choices=("auto", "scatter"))
    p.add_argument("--fragments", type=int, default=1, help="Streaming DiLoCo's fragments")
    p.add_argument("--delay", type=int, default=0,
                   help="inner steps a fragment's exchange overlaps before its merge")
    p.add_argument("--lr", type=float, default=1e-3, help="the inner AdamW's learning rate")
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--checkpoint-dir", help="save each rank's state here at the end")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint-dir")
    p.add_argument("--log-every", type=int, default=100)
    p.add_argument("--workers", type=int, default=2, help="local processes when not under torchrun")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per worker")
    p.add_argument("--timeout", type=float, default=300.0, help="collective timeout, seconds")
    p.add_argument("--data-dir", default=DATA_DIR)
    args = p.parse_args()
    if args.steps < 1:
        p.error("--steps must be at least 1")
    if args.resume and not args.checkpoint_dir:
        p.error("--resume needs --checkpoint-dir")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: this torch sees no GPU")
    try:  # gradcomp: bad settings are refused here, in one line, before any rank starts
        gc.DiLoCo.check(args.outer, sync_every=args.sync_every, compressor=args.compressor,
                        reducer=args.reducer, fragments=args.fragments, delay=args.delay,
                        seed=args.seed)
    except (TypeError, ValueError) as e:
        p.error(str(e))
    if args.resume and (not launched() or os.environ["RANK"] == "0"):
        check_resume(p, args, int(os.environ["WORLD_SIZE"]) if launched() else args.workers)
    start(train, args)


def check_resume(p: argparse.ArgumentParser, args, world: int) -> None:
    """Refuses, in one line, a checkpoint folder this run cannot continue from."""
    missing = [r for r in range(world)
               if not os.path.isfile(os.path.join(args.checkpoint_dir, f"rank{r}.pt"))]
    if missing:
        p.error(f"--resume: {args.checkpoint_dir} holds no checkpoint of rank {missing[0]}")
    path = os.path.join(args.checkpoint_dir, "rank0.pt")
    try:
        saved = torch.load(path, map_location="cpu")
        saved_world, flags = saved["world"], saved["flags"]
    except Exception as e:  # noqa: BLE001 (any unreadable file is refused the same way)
        p.error(f"--resume: {path} is not a checkpoint of this example ({type(e).__name__})")
    if saved_world != world:
        p.error(f"--resume: {args.checkpoint_dir} was saved by {saved_world} workers; "
                f"this run has {world}")
    for flag in RESUMED_FLAGS:
        if flags.get(flag) != getattr(args, flag):
            p.error(f"--resume: {args.checkpoint_dir} was saved with "
                    f"--{flag.replace('_', '-')} {flags.get(flag)}; this run has "
                    f"{getattr(args, flag)}")


if __name__ == "__main__":
    sys.exit(main())
