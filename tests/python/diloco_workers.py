"""What each rank runs in the DiLoCo tests (top-level functions: forked processes)."""
from __future__ import annotations

import torch
import torch.distributed as dist

import gradcomp
import gradcomp.torch as gc
from workers import batch, raised, small_model


def _inner_steps(model, opt, rank, first, last, diloco=None):
    for step in range(first, last):
        x, y = batch(rank, step)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if diloco is not None and not hasattr(opt, "register_step_post_hook"):
            diloco.step()


def matches_torch_reference(rank, world, sync_every, steps, outer_is_torch):
    """DiLoCo with an exact exchange against the method written with torch's own pieces:
    an all-reduced mean pseudo-gradient fed to torch.optim.SGD(nesterov=True) on a copy of
    the global weights. The worst difference over every parameter."""
    model = small_model(seed=rank)  # replicas start apart: rank 0's weights win
    inner = torch.optim.AdamW(model.parameters(), lr=1e-3)
    outer = (torch.optim.SGD(model.parameters(), lr=0.7, momentum=0.9, nesterov=True)
             if outer_is_torch else "nesterov:lr=0.7,momentum=0.9")
    # torch < 2.0 has no optimizer step hooks: there _inner_steps calls step() itself.
    hooked = inner if hasattr(inner, "register_step_post_hook") else None
    diloco = gc.DiLoCo(model, hooked, outer, sync_every=sync_every, compressor="none")

    ref = small_model(seed=0)
    ref_inner = torch.optim.AdamW(ref.parameters(), lr=1e-3)
    glob = [p.detach().clone().requires_grad_(True) for p in ref.parameters()]
    ref_outer = torch.optim.SGD(glob, lr=0.7, momentum=0.9, nesterov=True)
    for step in range(steps):
        _inner_steps(model, inner, rank, step, step + 1, diloco)
        _inner_steps(ref, ref_inner, rank, step, step + 1)
        if (step + 1) % sync_every == 0:
            with torch.no_grad():
                for g, p in zip(glob, ref.parameters()):
                    d = g - p
                    dist.all_reduce(d)
                    g.grad = d / world
                ref_outer.step()
                for g, p in zip(glob, ref.parameters()):
                    p.copy_(g)
    diloco.close()
    worst = max((a - b).abs().max().item() for a, b in zip(model.parameters(), ref.parameters()))
    return worst, diloco.describe(), diloco.inner_steps


def resumes_bit_for_bit(rank, world, spec, outer, reducer="auto"):
    """10 steps straight against 5, a state_dict round trip into new objects, 5 more."""
    def fresh():
        model = small_model(seed=0)
        inner = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        d = gc.DiLoCo(model, None, outer, sync_every=4, compressor=spec, reducer=reducer,
                      fragments=2, delay=1)
        return model, inner, d

    # The hook-less form: step() after each optimizer step.
    model, inner, d = fresh()
    for step in range(10):
        _inner_steps(model, inner, rank, step, step + 1)
        d.step()
    straight = [p.detach().clone() for p in model.parameters()]
    d.close()  # its round of step 10 is in flight: the next loop's collectives must wait

    model, inner, d = fresh()
    for step in range(5):
        _inner_steps(model, inner, rank, step, step + 1)
        d.step()
    saved = (
        {k: v.clone() for k, v in model.state_dict().items()},
        inner.state_dict(),
        d.state_dict(),
    )
    d.close()
    model, inner, d = fresh()
    model.load_state_dict(saved[0])
    inner.load_state_dict(saved[1])
    d.load_state_dict(saved[2])
    for step in range(5, 10):
        _inner_steps(model, inner, rank, step, step + 1)
        d.step()
    return all(torch.equal(a, b) for a, b in zip(straight, model.parameters())), d.stats()


def ranks_that_differ(rank, world):
    model = small_model(seed=0)
    return raised(lambda: gc.DiLoCo(model, None, sync_every=4 if rank == 0 else 8))


def bad_setting_kwargs(model):
    """DiLoCo settings that cannot run, one of each kind of refusal."""
    return ({"sync_every": 0}, {"sync_every": 4, "fragments": 3},
            {"sync_every": 4, "compressor": "bogus"},
            {"sync_every": 4, "outer_optimizer": "sparseloco", "compressor": "fp16"},
            {"sync_every": 4, "compressor": "dgc", "reducer": "scatter"},
            {"sync_every": 4, "outer_optimizer": torch.optim.Adam(model.parameters())})


def bad_settings(rank, world):
    model = small_model(seed=0)
    return [raised(lambda: gc.DiLoCo(model, **kwargs)) for kwargs in bad_setting_kwargs(model)]


def a_peer_that_leaves(rank, world):
    model = small_model(seed=0)
    inner = torch.optim.SGD(model.parameters(), lr=0.05)
    d = gc.DiLoCo(model, None, sync_every=2, timeout=__import__("datetime").timedelta(seconds=20))
    if rank == 1:
        return None  # the process exits: its connections close
    _inner_steps(model, inner, rank, 0, 1)
    d.step()
    _inner_steps(model, inner, rank, 1, 2)
    before = [p.detach().clone() for p in model.parameters()]
    error = raised(d.step)
    unchanged = all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    return error, unchanged


def parameters_replaced_after_construction(rank, world):
    """model.half() and a .data assignment after DiLoCo(model): what step() and
    synchronize() raised, and whether the outer loop's copy took any round meanwhile."""
    out = []
    for replace, call in ((lambda m: m.half(), "step"),
                          (lambda m: m.half(), "synchronize"),
                          (lambda m: setattr(m[0].weight, "data", m[0].weight.detach() * 1),
                           "step")):
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
        d = gc.DiLoCo(model, None, sync_every=1)
        replace(model)
        out.append(raised(getattr(d, call)))
        d.close()
    return out


def ranks_whose_steps_drifted(rank, world):
    """Rank 1 calls step() twice more than rank 0 (a skipped batch on rank 0, say), with
    fragments: until synchronize() the rounds pair by their step counts; there rank 0's
    fragment 0 met rank 1's fragment 1 and Gloo aborted the process."""
    model = small_model(seed=0)
    inner = torch.optim.SGD(model.parameters(), lr=0.05)
    d = gc.DiLoCo(model, None, sync_every=4, fragments=2,
                  timeout=__import__("datetime").timedelta(seconds=30))
    def train():  # rank 1 raises from its round at step 6, rank 0 from synchronize()
        if rank == 1:
            d.step()
            d.step()
        for step in range(4):
            _inner_steps(model, inner, rank, step, step + 1)
            d.step()
        d.synchronize()

    return raised(train)


def restore_rank_zeros_state(rank, world, path, compressor):
    """Every rank restores rank 0's saved DiLoCo state: what the load raised."""
    model = small_model(seed=0)
    inner = torch.optim.SGD(model.parameters(), lr=0.05)
    d = gc.DiLoCo(model, None, sync_every=2, compressor=compressor)
    for step in range(2):
        _inner_steps(model, inner, rank, step, step + 1)
        d.step()
    if rank == 0:
        torch.save(d.state_dict(), path)
    dist.barrier()
    d.close()
    again = gc.DiLoCo(model, None, sync_every=2, compressor=compressor)
    return raised(lambda: again.load_state_dict(torch.load(path)))


def delayed_rounds_beside_the_jobs_collectives(rank, world):
    """delay > 0 with no process_group: the job's own allreduces on the default group run
    while rounds are in flight on the DiLoCo's thread, and both complete."""
    model = small_model(seed=0)
    inner = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    d = gc.DiLoCo(model, None, sync_every=4, fragments=2, delay=1)
    sums = []
    for step in range(12):
        _inner_steps(model, inner, rank, step, step + 1)
        d.step()
        t = torch.full((1000,), float(rank + 1))
        dist.all_reduce(t)  # the default group, while a round may be in flight
        sums.append(t[0].item())
    d.close()
    return sums, d.inner_steps


def synchronize_makes_one_model(rank, world):
    """Streaming (2 fragments, a round in flight at the end): after synchronize() every
    rank holds the same parameters; the ranks' parameters gathered, as rank 0 sees them."""
    model = small_model(seed=rank)
    inner = torch.optim.SGD(model.parameters(), lr=0.1)
    hooked = inner if hasattr(inner, "register_step_post_hook") else None
    d = gc.DiLoCo(model, hooked, "average", sync_every=4, fragments=2, delay=1)
    _inner_steps(model, inner, rank, 0, 6, d)  # fragment 0's round of step 6 in flight
    apart = torch.cat([p.detach().flatten() for p in model.parameters()])
    d.synchronize()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    before = [torch.empty_like(apart) for _ in range(world)]
    d.close()
    dist.all_gather(gathered, flat)
    dist.all_gather(before, apart)
    return (all(torch.equal(gathered[0], g) for g in gathered),
            all(torch.equal(before[0], b) for b in before))


def _moved(model, rank, step):
    """A deterministic inner step: p -= a rank- and step-dependent delta, computed on the
    CPU and subtracted on the parameter's device (the same rounding on any device)."""
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            g = torch.Generator().manual_seed(1000 * rank + 10 * step + i)
            p.sub_((torch.rand(p.shape, generator=g) - 0.5).mul_(0.01).to(p.device))


def _traced(model, d, rank, settle=lambda model: None):
    """11 deterministic inner steps and synchronize(): the parameters (float32, on the CPU)
    after each step and at the end, and whether each step merged a round. settle(model)
    runs after every change to the parameters (a reference's rounding)."""
    def values():
        return [p.detach().to("cpu", torch.float32, copy=True) for p in model.parameters()]

    trace, merged = [], []
    for step in range(11):
        _moved(model, rank, step)
        settle(model)
        merged.append(d.step())
        settle(model)
        trace.append(values())
    d.synchronize()
    settle(model)
    trace.append(values())
    return trace, merged


def _same_per_step(a, b):
    return [all(torch.equal(x, y) for x, y in zip(p, q)) for p, q in zip(a, b)]


def staged_equals_in_place(rank, world, device, spec, outer, fragments, delay, mix):
    """The same DiLoCo twice: parameters in place on the CPU, and parameters on `device`
    ("cpu" here means staged through host buffers, GRADCOMP_FORCE_STAGING=1, as a GPU's
    are). Per step: whether both replicas hold the same bits, and whether the step changed
    the replica beyond the inner step (a merge); then the same after synchronize()."""
    import os

    def run(on, staged):
        os.environ["GRADCOMP_FORCE_STAGING"] = "1" if staged else "0"
        model = small_model(seed=rank).to(on)  # replicas start apart: rank 0's win
        d = gc.DiLoCo(model, None, outer, sync_every=4, compressor=spec, fragments=fragments,
                      delay=delay, mix=mix)
        os.environ.pop("GRADCOMP_FORCE_STAGING")
        trace, merged = _traced(model, d, rank)
        d.close()
        return trace, merged

    reference, merged = run("cpu", False)
    staged, staged_merged = run(device, device == "cpu")
    return _same_per_step(reference, staged), merged, staged_merged


def sixteen_bit_equals_rounded_float32(rank, world, device, dtype, spec, outer, fragments,
                                       delay, mix):
    """A bfloat16 or float16 replica against a float32 one rounded to that type at the start
    and after every step: per step, whether both hold the same values; whether their merges
    fell on the same steps; whether the replica kept its type and the outer state float32."""
    dtype = getattr(torch, dtype)

    def rounded(model):
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(dtype).float())

    def run(on, low):
        model = small_model(seed=rank)
        if low:
            model = model.to(on, dtype)
        else:
            rounded(model)
        d = gc.DiLoCo(model, None, outer, sync_every=4, compressor=spec, fragments=fragments,
                      delay=delay, mix=mix)
        trace, merged = _traced(model, d, rank, (lambda m: None) if low else rounded)
        kept = (all(p.dtype == dtype for p in model.parameters()) and
                all(t.dtype == torch.float32 for t in d.state_dict()["state"].values()
                    if isinstance(t, torch.Tensor) and t.is_floating_point()))
        d.close()
        return trace, merged, kept

    reference, merged, _ = run("cpu", False)
    low, low_merged, kept = run(device, True)
    return (_same_per_step(reference, low), merged == low_merged and sum(merged) >= 2, kept)


def over_nccl_alone(rank, world):
    """A CUDA model under an NCCL-only default group (as GPU jobs start): the DiLoCo
    exchanges on a Gloo group it builds beside it. Its description and rounds taken."""
    model = small_model(seed=0).cuda()
    d = gc.DiLoCo(model, None, "average", sync_every=2)
    for step in range(4):
        _moved(model, rank, step)
        d.step()
    stats = d.stats()
    d.close()
    return d.describe(), stats["rounds"]


def with_a_grad_scaler(rank, world, counted_by):
    """8 iterations of fp16-style loss scaling (GradScaler("cpu")) in rounds of 4; rank 1's
    loss is inf at iteration 1, so its scaler skips that step and halves its scale.
    counted_by "iteration": diloco.step() after every scaler.update(); "hook": the inner
    optimizer's hook counts the steps. What was raised (None), the scales, and the
    weights after synchronize()."""
    model = small_model(seed=0)
    inner = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=1000)
    d = gc.DiLoCo(model, inner if counted_by == "hook" else None, sync_every=4,
                  timeout=__import__("datetime").timedelta(seconds=30))

    def train():
        for step in range(8):
            x, y = batch(rank, step)
            inner.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            if rank == 1 and step == 1:
                loss = loss * float("inf")
            scaler.scale(loss).backward()
            scaler.step(inner)
            scaler.update()
            if counted_by == "iteration":
                d.step()
        d.synchronize()

    error = raised(train)
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    return error, scaler.get_scale(), d.inner_steps, flat
