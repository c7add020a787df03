#!/usr/bin/python3
"""PyTorch DDP baseline for the network lab (scripts/bench-net.sh).

Trains the same model on the same data as `gradcomp train` does by default, so that
step times can be compared on the same shaped links:

  * MLP 784-1536-1536-10 with ReLU (--hidden), Fashion-MNIST from the Debian package
    dataset-fashion-mnist, pixels normalised with gradcomp's constants (0.2860, 0.3530);
  * each rank trains on its contiguous shard of the 60000 training images (gradcomp's
    data::shard), reshuffled every epoch, batch 64 per worker, drop-last;
  * SGD lr 0.05, momentum 0.9, linear warm-up over min(50, total/2) steps, then cosine
    to 0 at epochs * steps_per_epoch (gradcomp's LrSchedule);
  * DDP over Gloo, env:// rendezvous (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT;
    GLOO_SOCKET_IFNAME picks the interface), one intra-op thread;
  * --hook dense: plain DDP (its default bucketing, as people run it);
    --hook powersgd: torch's PowerSGD comm hook, rank --psgd-rank, in ONE bucket
    (with several buckets the hook crashes on Gloo);
    --hook gradcomp --gradcomp SPEC: gradcomp.torch's hook (DDP's default buckets; the
    bytes per step are the hook's own counters; needs PYTHONPATH=build/python).

Step time: from taking the batch to the end of optimizer.step(), median over the steps
after the first `--cold-steps` (and after PowerSGD's start iteration), like gradcomp's
step_ms_median. Bytes per worker per step: the ring-allreduce model gradcomp uses,
2(W-1)/W * payload, and, measured, the transmit counter of GLOO_SOCKET_IFNAME in
/proc/self/net/dev (this process's network namespace) over the measured steps (TCP/IP
headers and retransmissions included).

Writes one JSON object to --json (and stdout on rank 0). Needs Debian's python3-torch
(`scripts/install-deps.sh`); run it with /usr/bin/python3.
"""

import argparse
import gzip
import json
import math
import os
import statistics
import struct
import sys
import time
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

FASHION_DIR = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530  # gradcomp's kFashionMnistStats


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack(">I", data[:4])[0]
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4 : 4 + 4 * ndim])
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if arr.size != int(np.prod(dims)):
        raise SystemExit(f"ddp_baseline: {path}: {arr.size} bytes, header says {dims}")
    return arr.reshape(dims)


def load(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    x = (x.astype(np.float32) / np.float32(255.0) - np.float32(MEAN)) / np.float32(STD)
    return torch.from_numpy(x.reshape(x.shape[0], -1).copy()), torch.from_numpy(y.astype(np.int64))


def shard_range(n, rank, world):
    base, extra = divmod(n, world)
    begin = rank * base + min(rank, extra)
    return begin, begin + base + (1 if rank < extra else 0)


def make_mlp(inputs, hidden, classes):
    layers, prev = [], inputs
    for h in hidden:
        layers += [nn.Linear(prev, h), nn.ReLU()]
        prev = h
    layers.append(nn.Linear(prev, classes))
    return nn.Sequential(*layers)


def lr_at(step, base, warmup, total):
    if step < warmup:
        return base * (step + 1) / warmup
    if step >= total:
        return 0.0
    return base * 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / (total - warmup)))


def tx_bytes(ifname):
    """Transmitted bytes of `ifname` as this network namespace sees it (None if absent)."""
    try:
        with open("/proc/self/net/dev") as f:
            for line in f.readlines()[2:]:
                name, rest = line.split(":", 1)
                if name.strip() == ifname:
                    return int(rest.split()[8])
    except OSError:
        pass
    return None


def powersgd_payload_floats(model, rank, min_rate):
    """Floats one worker allreduces per PowerSGD step (torch 1.13's hook: tensors of
    ndim <= 1 and matrices that do not compress by min_rate go uncompressed; every
    other n x m matrix sends P (n x r) and Q (m x r))."""
    total = 0
    for p in model.parameters():
        if p.dim() <= 1:
            total += p.numel()
            continue
        n, m = p.shape[0], p.numel() // p.shape[0]
        r = min(n, m, rank)
        if (n + m) * r * min_rate < n * m:
            total += (n + m) * r
        else:
            total += n * m
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hook", choices=["dense", "powersgd", "gradcomp"], default="dense")
    ap.add_argument("--gradcomp", default="efm(topk:ratio=0.01)",
                    help="--hook gradcomp: the spec (gradcomp.torch's hook; PYTHONPATH=build/python)")
    ap.add_argument("--dense-share", type=float, default=0.01, help="--hook gradcomp")
    ap.add_argument("--psgd-rank", type=int, default=2)
    ap.add_argument("--psgd-start", type=int, default=2,
                    help="PowerSGD's start_powerSGD_iter (vanilla allreduce before; >= 2)")
    ap.add_argument("--hidden", default="1536,1536")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--steps", type=int, default=0, help="stop at this global step (0: none)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--warmup-steps", type=int, default=50)
    ap.add_argument("--cold-steps", type=int, default=2)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--timeout-ms", type=int, default=int(os.environ.get("GRADCOMP_TIMEOUT_MS", 300000)))
    ap.add_argument("--data-dir", default=FASHION_DIR)
    ap.add_argument("--json", default="", help="write the result object here (rank 0)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    ifname = os.environ.get("GLOO_SOCKET_IFNAME", "")
    # A world of one (a quick local check) needs no launcher.
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")

    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world,
                            timeout=timedelta(milliseconds=args.timeout_ms))

    x_all, y_all = load(args.data_dir, "train")
    b, e = shard_range(x_all.shape[0], rank, world)
    x_train, y_train = x_all[b:e].contiguous(), y_all[b:e].contiguous()
    del x_all, y_all
    x_test, y_test = load(args.data_dir, "test")

    hidden = [int(h) for h in args.hidden.split(",") if h]
    torch.manual_seed(args.seed)
    model = make_mlp(x_train.shape[1], hidden, 10)
    n_params = sum(p.numel() for p in model.parameters())

    if args.hook == "powersgd":
        # One bucket: DDP's first bucket after the rebuild is capped by this module
        # constant (1 MB), whatever bucket_cap_mb says.
        dist._DEFAULT_FIRST_BUCKET_BYTES = 1 << 40
        ddp = DDP(model, bucket_cap_mb=1 << 20)
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

        state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=args.psgd_rank,
                                   start_powerSGD_iter=args.psgd_start,
                                   min_compression_rate=2, random_seed=args.seed)
        ddp.register_comm_hook(state, psgd.powerSGD_hook)
        payload = powersgd_payload_floats(model, args.psgd_rank, 2)
        skip = max(args.cold_steps, args.psgd_start)
    elif args.hook == "gradcomp":
        import gradcomp.torch as gc

        ddp = DDP(model)
        gc_state = gc.CompressionState(args.gradcomp, dense_share=args.dense_share,
                                       seed=args.seed,
                                       timeout=timedelta(milliseconds=args.timeout_ms))
        ddp.register_comm_hook(gc_state, gc.hook)
        payload = None  # measured by the hook's own byte counters
        skip = max(args.cold_steps, 1)  # step 0 is dense while the hook learns the layout
    else:
        ddp = DDP(model)
        payload = n_params
        skip = args.cold_steps
    ring = 2.0 * (world - 1) / world if world > 1 else 0.0
    model_bytes_per_step = ring * 4.0 * payload if payload is not None else None

    if args.hook == "gradcomp":
        opt = gc.SGD(ddp.parameters(), lr=args.lr, momentum=args.momentum, state=gc_state)
    else:
        opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=args.momentum)
    loss_fn = nn.CrossEntropyLoss()
    steps_per_epoch = x_train.shape[0] // args.batch_size
    total = args.epochs * steps_per_epoch
    warmup = min(args.warmup_steps, total // 2)
    stop = min(total, args.steps) if args.steps > 0 else total

    step_ms = []
    tx0 = None  # interface counter when the measured (post-warm-up) steps begin
    t_start = time.perf_counter()
    step = 0
    train_loss = 0.0
    while step < stop:
        epoch = step // steps_per_epoch
        g = torch.Generator()
        g.manual_seed(args.seed * 1000003 + epoch)
        order = torch.randperm(x_train.shape[0], generator=g)
        for i in range(steps_per_epoch):
            if step >= stop:
                break
            if step == skip and ifname:
                tx0 = tx_bytes(ifname)
            if step == skip and args.hook == "gradcomp":
                gc_before = gc_state.stats()
            t0 = time.perf_counter()
            idx = order[i * args.batch_size : (i + 1) * args.batch_size]
            xb, yb = x_train.index_select(0, idx), y_train.index_select(0, idx)
            for group in opt.param_groups:
                group["lr"] = lr_at(step, args.lr, warmup, total)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(ddp(xb), yb)
            loss.backward()
            opt.step()
            train_loss = loss.item()
            t1 = time.perf_counter()
            if step >= skip:
                step_ms.append((t1 - t0) * 1e3)
            step += 1
    elapsed = time.perf_counter() - t_start
    tx1 = tx_bytes(ifname) if ifname else None
    if args.hook == "gradcomp":
        # The measured steps only (the hook's totals at `skip` and at the end).
        after = gc_state.stats()
        sent = lambda s: s["bytes_sent_per_step"] * s["steps"]  # noqa: E731
        measured = after["steps"] - gc_before["steps"]
        model_bytes_per_step = (sent(after) - sent(gc_before)) / measured if measured else 0.0

    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, x_test.shape[0], 1000):
            correct += int((model(x_test[i : i + 1000]).argmax(1) == y_test[i : i + 1000]).sum())
    accuracy = correct / x_test.shape[0]

    logging = ddp._get_ddp_logging_data()
    buckets = logging.get("rebuilt_bucket_sizes") or logging.get("bucket_sizes")
    result = {
        "system": "ddp",
        "method": {"powersgd": "ddp+powersgd:rank=%d" % args.psgd_rank,
                   "gradcomp": "ddp+gradcomp %s" % args.gradcomp}.get(args.hook, "ddp dense"),
        "world": world,
        "rank": rank,
        "steps": step,
        "params": n_params,
        "step_ms_median": statistics.median(step_ms) if step_ms else 0.0,
        "bytes_sent_per_worker_per_step": model_bytes_per_step,
        "wire_tx_bytes_per_step": (tx1 - tx0) / len(step_ms) if (tx0 is not None and tx1 is not None and step_ms) else None,
        "test_accuracy": accuracy,
        "train_loss": train_loss,
        "elapsed_seconds": elapsed,
        "buckets": str(buckets),
        "torch": torch.__version__,
    }
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        line = json.dumps(result)
        print(line)
        if args.json:
            with open(args.json, "w") as f:
                f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
