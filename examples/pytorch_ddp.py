#!/usr/bin/env python3
"""Train the main job's MLP on Fashion-MNIST with PyTorch DDP and a gradcomp hook.

An ordinary DistributedDataParallel script; the gradcomp lines are marked "gradcomp".

    # 4 local processes (started by this script), PowerSGD rank 4 (the default, as
    # `gradcomp train`'s), then top-k 1% with momentum-corrected EF:
    PYTHONPATH=build/python .venv-torch2/bin/python examples/pytorch_ddp.py
    PYTHONPATH=build/python .venv-torch2/bin/python examples/pytorch_ddp.py --compressor "efm(topk:ratio=0.01)"
    # the same under torchrun (or Slurm / mpirun setting RANK, WORLD_SIZE, MASTER_ADDR/PORT):
    PYTHONPATH=build/python .venv-torch2/bin/torchrun --nproc_per_node 4 examples/pytorch_ddp.py --compressor powersgd:rank=2
    # a short run: 60 steps of one epoch
    PYTHONPATH=build/python .venv-torch2/bin/python examples/pytorch_ddp.py --epochs 1 --steps-per-epoch 60
    # on GPUs: the hook compresses the CUDA buckets on the device
    PYTHONPATH=build/python .venv-torch2/bin/torchrun --nproc_per_node 8 examples/pytorch_ddp.py --device cuda
    # fp16 autocast with loss scaling (torch 2.3 or later: torch.amp.GradScaler for the CPU)
    PYTHONPATH=build/python .venv-torch2/bin/python examples/pytorch_ddp.py --amp fp16

The model (784-1536-1536-10, ReLU), data (each worker a shard of every epoch's shuffle,
batch 64 per worker, pixels normalised), optimizer (SGD, momentum 0.9, cosine decay to 0)
and 3 epochs are those of `gradcomp train`'s main job; the report ends the same way.
"""
from __future__ import annotations

import argparse
import datetime
import gzip
import math
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import gradcomp.torch as gc  # gradcomp

DATA_DIR = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist
MEAN, STD = 0.2860, 0.3530  # over the train split's pixels


def read_idx(path: str) -> np.ndarray:
    """An IDX file (gzipped) as a numpy array of its declared shape."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    dims = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims))
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims)
    if data.size != int(np.prod(shape)):
        raise ValueError(f"{path}: {data.size} values for shape {shape}")
    return data.reshape(shape)


def load(split: str, data_dir: str):
    images = read_idx(os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz"))
    x = (torch.from_numpy(images.astype(np.float32)) / 255.0 - MEAN) / STD
    return x.reshape(len(x), -1), torch.from_numpy(labels.astype(np.int64))


def mlp(hidden=(1536, 1536), inputs=784, classes=10) -> nn.Module:
    layers, prev = [], inputs
    for width in hidden:
        layers += [nn.Linear(prev, width), nn.ReLU()]
        prev = width
    layers.append(nn.Linear(prev, classes))
    return nn.Sequential(*layers)


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n:.0f} B"
        n /= 1000
    return f"{n:.1f} GB"


def train(args) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    device = device_of(args)
    x_train, y_train = load("train", args.data_dir)
    x_test, y_test = load("t10k", args.data_dir)
    x_train, y_train = x_train.to(device), y_train.to(device)
    steps_per_epoch = math.ceil(len(x_train) // world / args.batch_size)
    if args.steps_per_epoch:  # a shorter run: the first batches of each epoch's shard
        steps_per_epoch = min(steps_per_epoch, args.steps_per_epoch)
    total_steps = steps_per_epoch * args.epochs

    model = DDP(mlp().to(device), device_ids=[device.index] if device.type == "cuda" else None,
                bucket_cap_mb=args.bucket_cap_mb)
    amp = args.amp == "fp16"
    # Loss scaling for fp16 autocast; None without it (torch 1.13 has no CPU scaler).
    scaler = torch.amp.GradScaler(device.type, init_scale=args.init_scale) if amp else None
    state = None
    if args.compressor != "ddp":
        state = gc.CompressionState(  # gradcomp
            args.compressor, dense_share=args.dense_share, seed=args.seed,
            steps_per_epoch=steps_per_epoch, grad_scaler=scaler)
        model.register_comm_hook(state, gc.hook)  # gradcomp
        opt = gc.SGD(model.parameters(), lr=args.lr, momentum=args.momentum, state=state)  # gradcomp
    else:
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1.0 + math.cos(math.pi * min(s, total_steps) / total_steps)))

    if rank == 0:
        print(f"pytorch_ddp: {world} workers on {device.type} ({backend(args)}), "
              "mlp 784-1536-1536-10, fashion-mnist, "
              f"{args.epochs} epochs x {steps_per_epoch} steps, batch {args.batch_size}/worker, "
              f"lr {args.lr} cosine, momentum {args.momentum}"
              + (", fp16 autocast with loss scaling" if amp else ""))
        print(f"exchange: {state.describe if state else 'DDP allreduce (no hook)'}"
              + (f", dense_share {args.dense_share}" if state else ""), flush=True)

    start = time.monotonic()
    step_times = []
    skipped = 0  # steps the loss scaler skipped (an overflow on some rank)
    for epoch in range(args.epochs):
        g = torch.Generator().manual_seed(args.seed * 1000 + epoch)
        order = torch.randperm(len(x_train), generator=g)
        shard = order[rank * (len(order) // world):(rank + 1) * (len(order) // world)]
        model.train()
        losses = []
        for s in range(steps_per_epoch):
            idx = shard[s * args.batch_size:(s + 1) * args.batch_size]
            t0 = time.monotonic()
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device.type, dtype=torch.float16, enabled=amp):
                loss = nn.functional.cross_entropy(model(x_train[idx]), y_train[idx])
            if not torch.isfinite(loss):
                raise SystemExit(f"rank {rank}: step {epoch * steps_per_epoch + s}: "
                                 f"the training loss is {loss.item()} (the run diverged)")
            if scaler is None:
                loss.backward()
                opt.step()
                schedule.step()
            else:
                scale = scaler.get_scale()
                scaler.scale(loss).backward()
                scaler.step(opt)  # skipped on every rank when a gradient overflowed on any
                scaler.update()
                if scaler.get_scale() < scale:
                    skipped += 1  # the schedule counts the updates made
                else:
                    schedule.step()
            step_times.append(time.monotonic() - t0)
            losses.append(loss.item())
        accuracy = evaluate(model.module, x_test, y_test)
        if rank == 0:
            print(f"epoch {epoch + 1}/{args.epochs}: train loss {np.mean(losses):.4f}  "
                  f"test accuracy {accuracy:.4f}  ({time.monotonic() - start:.0f} s)", flush=True)

    if rank == 0:
        report(args, world, accuracy, state, step_times, time.monotonic() - start,
               skipped if amp else None)


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    device = next(model.parameters()).device
    correct = sum((model(x[i:i + 1000].to(device)).argmax(1).cpu() == y[i:i + 1000]).sum().item()
                  for i in range(0, len(x), 1000))
    return correct / len(x)


def report(args, world, accuracy, state, step_times, wall, skipped) -> None:
    median_ms = 1000 * float(np.median(step_times))
    rows = [("compressor", args.compressor), ("workers", str(world)),
            ("test accuracy", f"{accuracy:.4f}"), ("step time (median)", f"{median_ms:.1f} ms"),
            ("wall time", f"{wall:.0f} s")]
    if skipped is not None:
        rows.append(("steps skipped (overflow)", str(skipped)))
    if state is not None:
        st = state.stats()
        ratio = st["compression_ratio"]
        rows += [
            ("sent per worker per step", human_bytes(st["bytes_sent_per_step"])),
            ("dense allreduce would send", human_bytes(st["dense_bytes_per_step"])),
            ("compression ratio", f"{ratio:.1f}x" if ratio else "n/a (a single worker sends nothing)"),
            ("encode / communicate / decode", "{:.1f} / {:.1f} / {:.1f} ms per step".format(
                1000 * st["encode_seconds_per_step"], 1000 * st["comm_seconds_per_step"],
                1000 * st["decode_seconds_per_step"])),
        ]
    width = max(len(k) for k, _ in rows)
    print("\n".join(f"{k:<{width}}  {v}" for k, v in rows), flush=True)


def worker(rank: int, world: int, port: int, train_fn, args) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    run(train_fn, args)


def backend(args) -> str:
    """The job's own collectives: NCCL for CUDA tensors where every rank has a GPU of its own
    (gradcomp exchanges over a Gloo group of its own beside it), Gloo otherwise (ranks
    sharing a GPU: NCCL refuses two ranks on one device)."""
    if getattr(args, "device", "cpu") == "cuda" and torch.cuda.is_available() \
            and int(os.environ["WORLD_SIZE"]) <= torch.cuda.device_count():
        return "cpu:gloo,cuda:nccl"
    return "gloo"


def device_of(args) -> torch.device:
    """This rank's device: the CPU, or GPU LOCAL_RANK (modulo the GPUs: ranks may share)."""
    if getattr(args, "device", "cpu") == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise SystemExit("--device cuda, but this torch sees no GPU")
    local_rank = int(os.environ.get("LOCAL_RANK", dist.get_rank()))
    torch.cuda.set_device(local_rank % torch.cuda.device_count())
    return torch.device("cuda", torch.cuda.current_device())


def run(train_fn, args) -> None:
    """Joins the run the environment describes (RANK, WORLD_SIZE, MASTER_ADDR/PORT), trains."""
    dist.init_process_group(backend(args), timeout=datetime.timedelta(seconds=args.timeout))
    try:
        train_fn(args)
    finally:
        dist.destroy_process_group()


def launched() -> bool:
    """Whether a launcher (torchrun, Slurm, mpirun) set this rank's rendezvous."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def start(train_fn, args) -> None:
    """Trains as this launched rank, or starts args.workers local ranks that do."""
    if launched():
        run(train_fn, args)
    else:
        launch_local(train_fn, args, args.workers)


def launch_local(train_fn, args, workers: int) -> None:
    """Starts `workers` local processes on 127.0.0.1, each running run(train_fn, args)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(worker, args=(workers, port, train_fn, args), nprocs=workers,
                       start_method="spawn")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--compressor", default="powersgd",
                   help="a gradcomp spec (gradcomp list), or 'ddp' for DDP without a hook")
    p.add_argument("--dense-share", type=float, default=0.01)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps-per-epoch", type=int, default=0,
                   help="at most this many steps per epoch (0: the whole shard)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--bucket-cap-mb", type=float, default=25.0)
    p.add_argument("--workers", type=int, default=4, help="local processes when not under torchrun")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cuda: each rank on GPU LOCAL_RANK, DDP's collectives on NCCL where "
                        "every rank has a GPU of its own")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per worker")
    p.add_argument("--timeout", type=float, default=300.0, help="collective timeout, seconds")
    p.add_argument("--data-dir", default=DATA_DIR)
    p.add_argument("--amp", choices=("off", "fp16"), default="off",
                   help="fp16 autocast with loss scaling (torch.amp.GradScaler, torch >= 2.3)")
    p.add_argument("--init-scale", type=float, default=2.0**16,
                   help="the loss scaler's first scale (--amp fp16; torch's default 65536)")
    args = p.parse_args()
    if args.steps_per_epoch < 0:
        p.error("--steps-per-epoch must be 0 (the whole shard) or more")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: this torch sees no GPU")
    if args.compressor != "ddp":
        try:  # gradcomp: a bad spec is refused here, in one line, before any rank starts
            gc.CompressionState.check(args.compressor, dense_share=args.dense_share,
                                      seed=args.seed)
        except (TypeError, ValueError) as e:
            p.error(f"--compressor: {e}")
    start(train, args)


if __name__ == "__main__":
    sys.exit(main())
