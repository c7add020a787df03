#!/usr/bin/env python3
"""What gradcomp's loss scaling costs a DDP step on the CPU: the GradScaler given to the
state (compressed buckets exchanged unscaled, one small allreduce per bucket for the
overflow agreement) against the same scaler not given (the hook then compresses the scaled
gradients: for top-k the same selection, so the difference is the cost). Two local ranks,
an MLP of four width x width layers, runs alternated, the best of --runs medians.

    PYTHONPATH=build/python:tests/python .venv-torch2/bin/python \\
        scripts/bench_loss_scaling.py "efm(topk:ratio=0.01)" --width 2048

Measured in docs/pytorch.md (fp16 autocast with GradScaler).
"""
import argparse
import time

import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import ddp_support  # tests/python: ranks forked from a forkserver, results returned
import gradcomp.torch as gc


def worker(rank, world, spec, steps, given, width):
    torch.manual_seed(0)
    net = nn.Sequential(*[nn.Linear(width, width) for _ in range(4)])
    model = DDP(net, bucket_cap_mb=25)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    state = gc.CompressionState(spec, dense_share=0.0, grad_scaler=scaler if given else None)
    model.register_comm_hook(state, gc.hook)
    opt = gc.SGD(model.parameters(), lr=0.01, momentum=0.9, state=state)
    x = torch.randn(32, width)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        scaler.scale(model(x).pow(2).mean()).backward()
        scaler.step(opt)
        scaler.update()
        times.append(time.perf_counter() - t0)
    kept = sorted(times[3:])
    return kept[len(kept) // 2], len(state._groups)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec")
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    medians = {True: [], False: []}
    groups = 0
    for _ in range(args.runs):
        for given in (True, False):
            results = ddp_support.run(worker, 2, args.spec, args.steps, given, args.width,
                                      timeout=600)
            medians[given].append(max(r[0] for r in results))
            groups = results[0][1]
    g, n = min(medians[True]), min(medians[False])
    print(f"{args.spec}, {4 * args.width ** 2 / 1e6:.1f} M parameters, {groups} buckets: "
          f"scaler given {g * 1e3:.1f} ms a step, not given {n * 1e3:.1f} ms ({g / n:.3f}x); "
          f"medians given {[round(t * 1e3, 1) for t in medians[True]]}, "
          f"not given {[round(t * 1e3, 1) for t in medians[False]]}")


if __name__ == "__main__":
    main()
