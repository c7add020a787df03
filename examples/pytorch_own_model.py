#!/usr/bin/env python3
"""gradcomp on a model of your own: a small CNN in several DDP buckets, with a checkpoint.

    PYTHONPATH=build/python .venv-torch2/bin/python examples/pytorch_own_model.py --compressor powersgd:rank=2
    PYTHONPATH=build/python .venv-torch2/bin/python examples/pytorch_own_model.py --resume   # continues from ck/
    # under torchrun (or Slurm / mpirun setting RANK, WORLD_SIZE, MASTER_ADDR/PORT):
    PYTHONPATH=build/python .venv-torch2/bin/torchrun --nproc_per_node 2 examples/pytorch_own_model.py

What it shows, beside pytorch_ddp.py's MLP:
  * any nn.Module works: convolutions (compressed as rows x (in*k*k) matrices), biases
    (kept dense), several DDP buckets (bucket_cap_mb=1: torch 1.13's own PowerSGD hook
    aborts on Gloo with more than one; gradcomp's issues every bucket's rounds in order);
  * the hook's memories (error feedback, PowerSGD's Q, DGC's velocities) are checkpointed
    with the model and optimizer, so a resumed run continues where it stopped.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import gradcomp.torch as gc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_ddp import DATA_DIR, evaluate, load, start  # noqa: E402


class SmallCnn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(64 * 7 * 7, 256), nn.ReLU(), nn.Linear(256, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x.view(-1, 1, 28, 28)))


def train(args) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    x, y = load("train", args.data_dir)
    x_test, y_test = load("t10k", args.data_dir)
    shard = torch.arange(rank, len(x), world)  # a strided shard of the training set

    model = DDP(SmallCnn(), bucket_cap_mb=1)
    state = gc.CompressionState(args.compressor, seed=args.seed)
    opt = gc.SGD(model.parameters(), lr=0.05, momentum=0.9, state=state)
    path = os.path.join(args.checkpoint_dir, f"rank{rank}.pt")
    start = 0
    if args.resume and os.path.exists(path):
        saved = torch.load(path)
        model.module.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        state.load_state_dict(saved["gradcomp"])  # before the hook's first step
        start = saved["step"]
    model.register_comm_hook(state, gc.hook)

    for step in range(start, start + args.steps):
        idx = shard[(step * args.batch_size) % len(shard):][:args.batch_size]
        opt.zero_grad()
        nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()

    os.makedirs(args.checkpoint_dir, exist_ok=True)
    torch.save({"model": model.module.state_dict(), "optimizer": opt.state_dict(),
                "gradcomp": state.state_dict(), "step": start + args.steps}, path + ".tmp")
    os.replace(path + ".tmp", path)
    if args.test_images:  # a quicker check: the first images of the test set
        x_test, y_test = x_test[:args.test_images], y_test[:args.test_images]
    accuracy = evaluate(model.module, x_test, y_test)
    if rank == 0:
        st = state.stats()
        ratio = st["compression_ratio"]
        print(f"{state.describe}: steps {start}..{start + args.steps}, test accuracy "
              f"{accuracy:.4f}, compression {f'{ratio:.1f}x' if ratio else 'n/a'}, "
              f"checkpoint {args.checkpoint_dir}/", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--compressor", default="powersgd:rank=2")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--checkpoint-dir", default="ck")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--test-images", type=int, default=0,
                   help="evaluate on the first N of the 10,000 test images (0: all)")
    p.add_argument("--data-dir", default=DATA_DIR)
    p.add_argument("--timeout", type=float, default=300.0, help="collective timeout, seconds")
    args = p.parse_args()
    if args.test_images < 0:
        p.error("--test-images must be 0 (all) or more")
    try:  # gradcomp: a bad spec is refused here, in one line, before any rank starts
        gc.CompressionState.check(args.compressor, seed=args.seed)
    except (TypeError, ValueError) as e:
        p.error(f"--compressor: {e}")
    start(train, args)


if __name__ == "__main__":
    main()
