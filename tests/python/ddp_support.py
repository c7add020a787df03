"""Runs a function on W local processes joined by a Gloo process group (127.0.0.1).

Each rank's return value (or its traceback) comes back to the test; a rank that hangs
past the deadline fails the test instead of blocking it. Workers must be top-level
functions of an importable module.

Ranks are forked from a forkserver that imported torch and gradcomp once: a fresh
process (the spawn method) spends about 2 s of CPU importing torch 2.x, which was most of
each test's time on a 2-core machine. The forkserver is a clean single-threaded process,
so forking it is as safe as spawning (forking pytest itself would copy its threads).
"""
from __future__ import annotations

import datetime
import importlib
import multiprocessing as mp
import os
import socket
import tempfile
import time
import traceback
from typing import Any, Callable, List

import torch
import torch.distributed as dist


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(fn, rank, world, port, outdir, args, pg_timeout, backend):
    torch.set_num_threads(1)
    result: dict = {}
    try:
        if "fake" in backend:
            # torch's test backend (registered on import) stands in for NCCL without CUDA.
            importlib.import_module("torch.testing._internal.distributed.fake_pg")
        dist.init_process_group(
            backend,
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=pg_timeout),
        )
        result = {"ok": fn(rank, world, *args)}
    except BaseException:  # noqa: BLE001 (reported to the test)
        result = {"error": traceback.format_exc()}
    torch.save(result, os.path.join(outdir, f"rank{rank}.pt"))
    # A peer may be gone (the dead-peer tests): do not wait for it on the way out.
    os._exit(0)


_CONTEXT = None


def _context():
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = mp.get_context("forkserver")
        # torch._dynamo: torch 2.x's DDP imports it on its first construction in a process
        # (with inductor, sympy and onnx: 820 modules, 1.1-1.5 s of CPU per rank, most of a
        # test's time); once here, it is in every rank. torch 1.13 has none (the forkserver
        # skips a preload that does not import).
        _CONTEXT.set_forkserver_preload(["torch", "torch.distributed", "torch._dynamo",
                                         "gradcomp.torch", "ddp_support", "workers",
                                         "diloco_workers"])
    return _CONTEXT


class RankFailed(AssertionError):
    pass


def run(fn: Callable, world: int, *args: Any, timeout: float = 120.0,
        pg_timeout: float = 60.0, allow_errors: bool = False,
        backend: str = "gloo") -> List[Any]:
    """Returns each rank's result; raises RankFailed with the first failing rank's
    traceback (unless allow_errors, which returns {'error': text} entries instead).
    `backend` is init_process_group's, e.g. "cpu:gloo,cuda:fake" (a backend per device)."""
    ctx = _context()
    port = free_port()
    with tempfile.TemporaryDirectory() as outdir:
        procs = [
            ctx.Process(target=_entry,
                        args=(fn, r, world, port, outdir, args, pg_timeout, backend))
            for r in range(world)
        ]
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
        hung = [r for r, p in enumerate(procs) if p.is_alive()]
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
        if hung:
            raise RankFailed(f"ranks {hung} still running after {timeout} s")
        results = []
        for r in range(world):
            path = os.path.join(outdir, f"rank{r}.pt")
            if not os.path.exists(path):
                results.append({"error": f"rank {r} exited with {procs[r].exitcode}, no result"})
            else:
                results.append(torch.load(path))
        if not allow_errors:
            for r, res in enumerate(results):
                if "error" in res:
                    raise RankFailed(f"rank {r} failed:\n{res['error']}")
            return [res["ok"] for res in results]
        return results
