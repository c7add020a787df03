"""What each rank runs in the loss-scaling tests (torch.amp.GradScaler through the hook)."""
from __future__ import annotations

import os
from typing import List, Optional

import torch
import torch.nn as nn

import gradcomp.torch as gc
from workers import batch, ddp, raised, small_model


def _scaler(growth_interval: int = 2, device: str = "cpu") -> torch.amp.GradScaler:
    # A power of two that doubles every other step: each change of scale is one that
    # memories holding scaled gradients would get wrong.
    return torch.amp.GradScaler(device, init_scale=2.0**10, growth_interval=growth_interval)


def _train(rank: int, spec: str, steps: int, scaler: Optional[torch.amp.GradScaler],
           overflow_at: Optional[int] = None, skip: Optional[int] = None,
           switch: Optional[str] = None, device: str = "cpu", reducer: str = "auto"):
    """`steps` steps of SGD with momentum; with a scaler, rank 1's loss is inf at step
    `overflow_at`; step `skip` is left out. Returns the weights, the state, the stats and
    the scale after each step."""
    if switch is not None:
        os.environ[switch] = "1"
    try:
        model = ddp(small_model().to(device))
        state = gc.CompressionState(spec, dense_share=0.0, seed=7, grad_scaler=scaler,
                                    reducer=reducer)
    finally:
        if switch is not None:
            os.environ.pop(switch)
    model.register_comm_hook(state, gc.hook)
    opt = gc.SGD(model.parameters(), lr=0.05, momentum=0.9, state=state)
    scales: List[float] = []
    for step in range(steps):
        if step == skip:
            continue
        x, y = batch(rank, step, device=device)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        if scaler is None:
            loss.backward()
            opt.step()
            continue
        if step == overflow_at and rank == 1:
            loss = loss * float("inf")
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
    flat = torch.cat([p.detach().flatten().cpu() for p in model.parameters()])
    return flat, state.state_dict(), state.stats(), scales


def _same_memories(a, b) -> bool:
    return a["memories"].keys() == b["memories"].keys() and all(
        torch.equal(a["memories"][i][k], b["memories"][i][k])
        for i in a["memories"] for k in a["memories"][i])


def scaled_equals_unscaled(rank, world, spec, steps, switch, device="cpu"):
    """With a GradScaler (scale 2^10, doubling every other step) and without: the same
    weights and memories, bit for bit (powers of two scale exactly)."""
    scaled, state_s, stats_s, scales = _train(
        rank, spec, steps, _scaler(device=device), switch=switch, device=device)
    plain, state_p, _, _ = _train(rank, spec, steps, None, switch=switch, device=device)
    return (torch.equal(scaled, plain), _same_memories(state_s, state_p), scales,
            stats_s["non_finite_skips"])


def overflow_skips_the_step(rank, world, spec, steps, overflow_at, switch, device="cpu",
                            reducer="auto"):
    """Rank 1's loss is inf at one step: every rank skips it (its scaler halves), and the
    run ends where a run without that step ends, memories included."""
    scaled, state_s, stats_s, scales = _train(
        rank, spec, steps, _scaler(growth_interval=1000, device=device), overflow_at=overflow_at,
        switch=switch, device=device, reducer=reducer)
    plain, state_p, _, _ = _train(rank, spec, steps, None, skip=overflow_at, switch=switch,
                                  device=device, reducer=reducer)
    return (torch.equal(scaled, plain), _same_memories(state_s, state_p), scales,
            stats_s["non_finite_skips"], scaled)


def scaler_on_one_rank(rank, world):
    return raised(lambda: gc.CompressionState(
        "ef(topk:ratio=0.05)", grad_scaler=_scaler() if rank == 0 else None))


def scaler_of_the_wrong_type(rank, world):
    return raised(lambda: gc.CompressionState("ef(topk:ratio=0.05)", grad_scaler="yes"))


def disabled_scaler(rank, world):
    state = gc.CompressionState(
        "ef(topk:ratio=0.05)", grad_scaler=torch.amp.GradScaler("cpu", enabled=False))
    return state._exchanger.skip_non_finite


def threshold_warning(rank, world, spec, steps):
    """The start-of-run warnings under a scaler at 2^20 (the fixed 2-bit threshold check
    must judge the unscaled gradients)."""
    import warnings

    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**20, growth_interval=1000)
    model = ddp(small_model())
    state = gc.CompressionState(spec, dense_share=0.0, seed=7, grad_scaler=scaler)
    model.register_comm_hook(state, gc.hook)
    opt = gc.SGD(model.parameters(), lr=0.05, momentum=0.9, state=state)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(steps):
            x, y = batch(rank, step)
            opt.zero_grad()
            scaler.scale(nn.functional.cross_entropy(model(x), y)).backward()
            scaler.step(opt)
            scaler.update()
    return [str(w.message) for w in caught if "gradcomp:" in str(w.message)]
