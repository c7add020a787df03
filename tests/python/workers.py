"""What each rank runs in the DDP hook tests (top-level functions: spawned processes)."""
from __future__ import annotations

import contextlib
import datetime
import inspect
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import gradcomp
import gradcomp.torch as gc


def small_model(seed: int = 0, hidden: int = 256) -> nn.Module:
    """Several DDP buckets at bucket_cap_mb=0.1; a conv kernel (32 rows), matrices, biases."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(4, 32, 3, padding=1),   # 1152 weights: compressible, 32 rows
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(32 * 6 * 6, hidden),    # 294912: a bucket of its own
        nn.ReLU(),
        nn.Linear(hidden, 128),
        nn.ReLU(),
        nn.Linear(128, 10),
    )


def batch(rank: int, step: int, n: int = 16, device: str = "cpu"):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(n, 4, 6, 6, generator=g)
    y = torch.randint(0, 10, (n,), generator=g)
    return x.to(device), y.to(device)


def ddp(model: nn.Module, bucket_cap_mb: float = 0.1) -> DDP:
    device = next(model.parameters()).device
    if device.type == "cuda":  # ranks may share one GPU (over Gloo)
        return DDP(model, device_ids=[device.index or 0], bucket_cap_mb=bucket_cap_mb)
    return DDP(model, bucket_cap_mb=bucket_cap_mb)


def raised(fn):
    """(type name, message) of what fn() raises; None when it returns."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 (reported to the test)
        return type(e).__name__, str(e)
    return None


def _grads(model):
    return [p.grad.detach().clone() for p in model.parameters()]


def dense_equals_ddp(rank, world, steps, device="cpu"):
    """'none' through the hook against DDP's own averaging, step by step."""
    ours, theirs = ddp(small_model().to(device)), ddp(small_model().to(device))
    state = gc.CompressionState("none", dense_share=0.0)
    ours.register_comm_hook(state, gc.hook)
    worst = 0.0
    for step in range(steps):
        x, y = batch(rank, step, device=device)
        for m in (ours, theirs):
            m.zero_grad()
            nn.functional.cross_entropy(m(x), y).backward()
        for a, b in zip(_grads(ours), _grads(theirs)):
            worst = max(worst, (a - b).abs().max().item())
    return worst, len(list(ours.parameters())), state.describe


class _WithUnusedLayer(nn.Module):
    """small_model() and a layer its forward never calls (no gradient on any rank)."""

    def __init__(self):
        super().__init__()
        self.net = small_model()
        self.unused = nn.Linear(3, 3)

    def forward(self, x):
        return self.net(x)


def ddp_flags_equal_ddp(rank, world, spec, steps, flags):
    """DDP built with `flags` (find_unused_parameters, static_graph), through the hook under
    `spec` against the same DDP alone: the largest difference of a gradient (with "none")
    and each step's loss. Its own collectives (the map of used parameters) run on DDP's
    group while gradcomp's exchange thread runs; a layer the forward skips stays unused."""
    ours = DDP(_WithUnusedLayer(), bucket_cap_mb=0.1, **flags)
    theirs = DDP(_WithUnusedLayer(), bucket_cap_mb=0.1, **flags)
    state = gc.CompressionState(spec, dense_share=0.0)
    ours.register_comm_hook(state, gc.hook)
    worst, losses = 0.0, []
    for step in range(steps):
        x, y = batch(rank, step)
        for m in (ours, theirs):
            m.zero_grad()
            loss = nn.functional.cross_entropy(m(x), y)
            loss.backward()
            if m is ours:
                losses.append(loss.item())
        for a, b in zip(ours.parameters(), theirs.parameters()):
            if a.grad is not None:
                worst = max(worst, (a.grad - b.grad).abs().max().item())
    return worst, losses


def topk_equals_reference(rank, world, ratio, device="cpu"):
    """ef(topk) through the hook against the reducer's definition computed here with
    gradcomp.Codec: mean over ranks of decode(encode(g_r + e_r)), dense tensors averaged
    (on the CPU, from each rank's gradients wherever the model is)."""
    spec = f"topk:ratio={ratio},select=exact"  # sampled thresholds draw per (step, rank, bucket)
    model = ddp(small_model().to(device))
    state = gc.CompressionState(f"ef({spec})", dense_share=0.0)
    model.register_comm_hook(state, gc.hook)
    codec = gradcomp.Codec(spec)
    params = list(model.parameters())
    residual = [torch.zeros(p.numel()) for p in params]  # on the CPU, with the reference
    worst = 0.0
    for step in range(3):
        x, y = batch(rank, step, device=device)
        # The local gradient, without the hook: a plain module copy of the same weights.
        local = small_model().to(device)
        local.load_state_dict(model.module.state_dict())
        local.zero_grad()
        nn.functional.cross_entropy(local(x), y).backward()
        mine = [p.grad.detach().flatten().cpu() for p in local.parameters()]
        gathered = [[torch.empty_like(g) for _ in range(world)] for g in mine]
        for g, out in zip(mine, gathered):
            dist.all_gather(out, g)
        model.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        for i, p in enumerate(params):
            dense = p.dim() <= 1 or p.numel() < 1024 or step == 0
            if dense:
                expect = sum(gathered[i]) / world
            else:
                # Every rank's message from its own residual: gather residuals too.
                res_all = [torch.empty_like(residual[i]) for _ in range(world)]
                dist.all_gather(res_all, residual[i])
                expect = torch.zeros_like(mine[i])
                for r in range(world):
                    msg = codec.encode(gathered[i][r] + res_all[r])
                    codec.decode_add(msg, expect, 1.0 / world)
                pr = mine[i] + residual[i]
                residual[i] = pr - codec.decode(codec.encode(pr))
            worst = max(worst, (p.grad.flatten().cpu() - expect).abs().max().item())
        with torch.no_grad():
            for p in params:
                p.add_(p.grad, alpha=-0.1)
    return worst


def buckets_on_two_devices_agree(rank, world, spec, steps, devices=("cpu", "cuda"),
                                 force_device_on_second=False, reducer="auto"):
    """The same gradients, exact on any device, through the hook on buckets of two devices
    (CUDA's device path against the CPU's host reducer), step after step with the memories
    carried: the largest difference of the means relative to the largest mean, and whether
    the second state ran on the device. Every gradient is exactly c: the loss is
    sum(p * c) plus the forward times 0 (DDP needs its forward)."""
    models = []
    for i, device in enumerate(devices):
        model = ddp(small_model().to(device))
        if force_device_on_second and i == 1:
            os.environ["GRADCOMP_FORCE_DEVICE"] = "1"
        try:
            state = gc.CompressionState(spec, dense_share=0.0, seed=7, reducer=reducer)
        finally:
            os.environ.pop("GRADCOMP_FORCE_DEVICE", None)
        model.register_comm_hook(state, gc.hook)
        # Attached for the memories that carry momentum (efm; the state holds it weakly);
        # never stepped: the weights stay put, so every step's gradients are exact again.
        opt = gc.SGD(model.parameters(), lr=0.05, momentum=0.9, state=state)
        models.append((model, state, device, opt))
    worst = 0.0
    for step in range(steps):
        g = torch.Generator().manual_seed(100 * step + rank)
        cs = [torch.randn(p.shape, generator=g) for p in models[0][0].parameters()]
        x, _ = batch(rank, step)
        means = []
        for model, _, device, _ in models:
            model.zero_grad()
            loss = (model(x.to(device)) * 0).sum()
            for p, c in zip(model.parameters(), cs):
                loss = loss + (p * c.to(device)).sum()
            loss.backward()
            means.append([p.grad.detach().cpu().clone() for p in model.parameters()])
        for a, b in zip(*means):
            scale = max(a.abs().max().item(), 1e-30)
            worst = max(worst, (a - b).abs().max().item() / scale)
    return worst, models[1][1].on_device


def train_spec(rank, world, spec, steps, device="cpu", reducer="auto"):
    model = ddp(small_model().to(device))
    state = gc.CompressionState(spec, dense_share=0.0, seed=7, reducer=reducer)
    model.register_comm_hook(state, gc.hook)
    opt = gc.SGD(model.parameters(), lr=0.05, momentum=0.9, state=state)
    losses = _sgd_steps(model, opt, rank, steps, device=device)
    flat = torch.cat([p.detach().flatten().cpu() for p in model.parameters()])
    return losses, flat, state.stats(), state.describe


def _sgd_steps(model, opt, rank, steps, dtype=torch.float32, device="cpu"):
    """`steps` training steps on this rank's batches (inputs in `dtype`); the losses."""
    losses = []
    for step in range(steps):
        x, y = batch(rank, step, device=device)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x.to(dtype)), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _run_steps(model, opt, rank, first, last):
    for step in range(first, last):
        x, y = batch(rank, step)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


def resume(rank, world, spec, steps, stop, path):
    """Uninterrupted run against one saved at `stop` and resumed in a new DDP + state."""
    def fresh():
        model = ddp(small_model())
        state = gc.CompressionState(spec, dense_share=0.0, seed=3)
        opt = gc.SGD(model.parameters(), lr=0.05, momentum=0.9, state=state)
        return model, state, opt

    model, state, opt = fresh()
    model.register_comm_hook(state, gc.hook)
    _run_steps(model, opt, rank, 0, steps)
    straight = torch.cat([p.detach().flatten() for p in model.parameters()])

    model, state, opt = fresh()
    model.register_comm_hook(state, gc.hook)
    _run_steps(model, opt, rank, 0, stop)
    file = f"{path}.rank{rank}"
    torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(),
                "gradcomp": state.state_dict()}, file)
    del model, state, opt

    saved = torch.load(file)
    model, state, opt = fresh()
    model.module.load_state_dict(saved["model"])
    opt.load_state_dict(saved["opt"])
    state.load_state_dict(saved["gradcomp"])
    model.register_comm_hook(state, gc.hook)
    _run_steps(model, opt, rank, stop, steps)
    resumed = torch.cat([p.detach().flatten() for p in model.parameters()])
    return torch.equal(straight, resumed), (straight - resumed).abs().max().item()


def restore_rank_zeros_state(rank, world, path):
    """Every rank restores rank 0's saved state (the single-file checkpoint of the docs'
    earlier example), and a state with its memories cut off: what each load raised."""
    def fresh():
        model = ddp(small_model())
        state = gc.CompressionState("efm(topk:ratio=0.05)", dense_share=0.0)
        return model, state, gc.SGD(model.parameters(), lr=0.05, momentum=0.9, state=state)

    model, state, opt = fresh()
    model.register_comm_hook(state, gc.hook)
    _run_steps(model, opt, rank, 0, 2)
    if rank == 0:
        torch.save(state.state_dict(), path)
    saved = state.state_dict()
    dist.barrier()
    _, others, _ = fresh()
    _, cut, _ = fresh()
    del saved["memories"]
    return raised(lambda: others.load_state_dict(torch.load(path))), \
        raised(lambda: cut.load_state_dict(saved))


def malformed_states(rank, world):
    """What load_state_dict raises for states edited or cut elsewhere."""
    model = ddp(small_model())
    state = gc.CompressionState("efm(topk:ratio=0.05)", dense_share=0.0)
    opt = gc.SGD(model.parameters(), lr=0.05, momentum=0.9, state=state)
    model.register_comm_hook(state, gc.hook)
    _run_steps(model, opt, rank, 0, 2)
    good = state.state_dict()
    edits = [
        lambda s: s.update(step=-5),
        lambda s: s.update(step="3"),
        lambda s: s.update(params=s["params"][:-1] + [("x",)]),
        lambda s: s.update(dense=s["dense"][:-1]),
        lambda s: s.update(memories={99: {}}),
        lambda s: s.update(memories={0: {"residual": [1.0]}}),
    ]
    out = []
    for edit in edits:
        bad = {**good}
        edit(bad)
        fresh = gc.CompressionState("efm(topk:ratio=0.05)", dense_share=0.0)
        out.append(raised(lambda: fresh.load_state_dict(bad)))
    return out


def restored_with_other_rows(rank, world):
    """A state whose tensor 0 is recorded with other rows (the same elements): what the
    first step of the run restored from it raises."""
    model = ddp(small_model())
    state = gc.CompressionState("none", dense_share=0.0)
    model.register_comm_hook(state, gc.hook)
    _run_steps(model, torch.optim.SGD(model.parameters(), lr=0.05), rank, 0, 1)
    saved = state.state_dict()
    name, numel, dims, rows = saved["params"][0]
    saved["params"][0] = (name, numel, dims, rows * 2)
    model = ddp(small_model())
    state = gc.CompressionState("none", dense_share=0.0)
    state.load_state_dict(saved)
    model.register_comm_hook(state, gc.hook)
    x, y = batch(rank, 1)
    return raised(lambda: nn.functional.cross_entropy(model(x), y).backward()), saved["params"][0]


def _train_with_torch_sgd(rank, spec, steps):
    """`steps` steps of DDP with the hook under torch.optim.SGD (not gradcomp's)."""
    model = ddp(small_model())
    state = gc.CompressionState(spec, dense_share=0.0)
    model.register_comm_hook(state, gc.hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step in range(steps):
        x, y = batch(rank, step)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return state


def momentum_without_optimizer(rank, world):
    _train_with_torch_sgd(rank, "efm(topk:ratio=0.1)", 2)
    return "trained"


def optimizer_against_memory_momentum(rank, world, spec, momentum, nesterov):
    """Attaches gradcomp.torch.SGD to a state whose memory keeps a momentum of its own;
    returns the compressor that runs, or the ValueError's text."""
    state = gc.CompressionState(spec)
    try:
        gc.SGD(small_model().parameters(), lr=0.05, momentum=momentum, nesterov=nesterov,
               state=state)
    except ValueError as e:
        return {"value_error": str(e)}
    return {"compressor": state.compressor}


def bare_codec_with_torch_sgd(rank, world, spec):
    return _train_with_torch_sgd(rank, spec, 3).describe


def dead_peer(rank, world, timeout_s):
    model = ddp(small_model())
    state = gc.CompressionState("ef(topk:ratio=0.1)", dense_share=0.0,
                                timeout=datetime.timedelta(seconds=timeout_s))
    model.register_comm_hook(state, gc.hook)
    for step in range(3):
        x, y = batch(rank, step)
        model.zero_grad()
        if rank == 1 and step == 2:
            os._exit(3)  # dies before its step-2 exchange
        start = time.monotonic()
        try:
            nn.functional.cross_entropy(model(x), y).backward()
        except Exception as e:  # noqa: BLE001
            return {"raised": type(e).__name__, "message": str(e).splitlines()[0],
                    "after": time.monotonic() - start, "step": step}
    return {"raised": None}


def run_warnings(rank, world, spec, steps, steps_per_epoch, total_steps):
    """The warnings (Method::start_warnings) a short run emits, and its schedule."""
    import warnings

    model = ddp(small_model())
    state = gc.CompressionState(spec, dense_share=0.0, seed=7, steps_per_epoch=steps_per_epoch,
                                total_steps=total_steps)
    model.register_comm_hook(state, gc.hook)
    opt = gc.SGD(model.parameters(), lr=0.05, momentum=0.9, state=state)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _run_steps(model, opt, rank, 0, steps)
    return [str(w.message) for w in caught if "gradcomp:" in str(w.message)], state.schedule


def _train(model, rank, settings, steps):
    state = gc.CompressionState(**settings)
    model.register_comm_hook(state, gc.hook)
    _run_steps(model, gc.SGD(model.parameters(), lr=0.05, momentum=0.9, state=state), rank, 0,
               steps)


def constructed_in_a_group(rank, world, settings):
    """What each CompressionState(**kwargs) raises over the job's own group, as raised()."""
    return [raised(lambda: gc.CompressionState(**kwargs)) for kwargs in settings]


def mismatched_setting(rank, world, setting, values):
    """Two steps under a CompressionState whose `setting` is values[rank]: what the rank
    raised, (type name, message)."""
    settings = dict(compressor="efm(topk:ratio=0.05)", dense_share=0.0)
    settings[setting] = values[rank]
    return raised(lambda: _train(ddp(small_model()), rank, settings, 2))


def _ddp_without_its_own_check(model: nn.Module) -> DDP:
    """DDP without its start-up collectives (its check of the parameters' shapes across
    ranks, the broadcast of rank 0's weights): torch 2's init_sync=False; switched off by
    hand in torch 1.13, which has no such flag."""
    if "init_sync" in inspect.signature(DDP.__init__).parameters:
        return DDP(model, bucket_cap_mb=0.1, init_sync=False)
    import torch.nn.parallel.distributed as ddp_module

    ddp_module._verify_param_shape_across_processes = lambda *args, **kwargs: None
    ddp_module._sync_module_states = lambda *args, **kwargs: None
    return ddp(model)


def mismatched_model(rank, world):
    """Ranks whose models differ in one hidden width (DDP's own shape check off, so that
    only the hook stands between them and Gloo): what each rank raised."""
    model = _ddp_without_its_own_check(small_model(hidden=256 if rank == 0 else 128))
    settings = dict(compressor="efm(topk:ratio=0.05)", dense_share=0.0)
    return raised(lambda: _train(model, rank, settings, 2))


def mismatched_buckets(rank, world):
    """The same model in DDP buckets of different sizes on the two ranks: bucket_cap_mb
    differs, which DDP does not check. (Its first iteration has one bucket of everything
    unless find_unused_parameters; it rebuilds the buckets after it as rank 0's.)"""
    model = DDP(small_model(), bucket_cap_mb=0.1 if rank == 0 else 25.0,
                find_unused_parameters=True)
    settings = dict(compressor="efm(topk:ratio=0.05)", dense_share=0.0)
    return raised(lambda: _train(model, rank, settings, 2))


def nan_gradient(rank, world, spec):
    """A NaN in every rank's input at step 1: the step and what loss.backward() raised."""
    model = ddp(small_model())
    state = gc.CompressionState(spec, dense_share=0.0)
    model.register_comm_hook(state, gc.hook)
    opt = gc.SGD(model.parameters(), lr=0.05, momentum=0.9, state=state)
    for step in range(3):
        x, y = batch(rank, step)
        if step == 1:
            x[0, 0, 0, 0] = float("nan")
        opt.zero_grad()
        error = raised(lambda: nn.functional.cross_entropy(model(x), y).backward())
        if error is not None:
            return step, error
        opt.step()
    return None


def catch_and_carry_on(rank, world):
    """Rank 1 gets a NaN at step 1, catches the ValueError and goes on with step 2, as a
    script that skips bad batches would: what each rank's steps 1 and 2 raised, and
    whether rank 0's gradients at step 1 were ever changed by rank 1's step-2 messages."""
    model = ddp(small_model())
    state = gc.CompressionState("fp16", dense_share=0.0, timeout=datetime.timedelta(seconds=5))
    model.register_comm_hook(state, gc.hook)
    opt = gc.SGD(model.parameters(), lr=0.05, state=state)
    out = []
    for step in range(3):
        x, y = batch(rank, step)
        if step == 1 and rank == 1:
            x[0, 0, 0, 0] = float("nan")
        opt.zero_grad()
        error = raised(lambda: nn.functional.cross_entropy(model(x), y).backward())
        if step > 0:
            out.append(None if error is None else error[0])
        if error is None:
            opt.step()
        elif rank == 0:
            break
    return out


def bucket_views_equal_copies(rank, world, spec, steps):
    """The same run with DDP(gradient_as_bucket_view=True), whose .grad tensors are views of
    the buckets the hook is given, and without: each run's losses and final parameters."""
    out = []
    for as_view in (False, True):
        model = DDP(small_model(), bucket_cap_mb=0.1, gradient_as_bucket_view=as_view)
        state = gc.CompressionState(spec, dense_share=0.0)
        model.register_comm_hook(state, gc.hook)
        opt = gc.SGD(model.parameters(), lr=0.05, momentum=0.9, state=state)
        losses = _sgd_steps(model, opt, rank, steps)
        out.append((losses, torch.cat([p.detach().flatten() for p in model.parameters()])))
    return out


def accumulated_under_no_sync(rank, world, spec, steps, micro):
    """Gradient accumulation with DDP's no_sync(): `micro` backward passes a step, the last
    one exchanged through the hook; the same with DDP alone. Each run's final parameters,
    and the hook's count of exchanged steps."""
    out = []
    for hooked in (True, False):
        model = DDP(small_model(), bucket_cap_mb=0.1)
        if hooked:
            state = gc.CompressionState(spec, dense_share=0.0)
            model.register_comm_hook(state, gc.hook)
            opt = gc.SGD(model.parameters(), lr=0.05, momentum=0.9, state=state)
        else:
            opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        for step in range(steps):
            opt.zero_grad()
            for m in range(micro):
                x, y = batch(rank, step * micro + m)
                context = model.no_sync() if m < micro - 1 else contextlib.nullcontext()
                with context:
                    (nn.functional.cross_entropy(model(x), y) / micro).backward()
            opt.step()
        out.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
        if hooked:
            out.append(state.step)
    return out


def compiled_equals_eager(rank, world, spec, backend, steps):
    """The same training run with the model as it is and compiled inside DDP
    (DDP(torch.compile(model))): each run's losses, final parameters and compression
    ratio, and how many graphs the compile captured (0: it fell back to eager)."""
    from torch._dynamo.backends.registry import lookup_backend
    graphs = []

    def counting(gm, example_inputs):
        graphs.append(gm)
        return lookup_backend(backend)(gm, example_inputs)

    out = []
    for compiled in (False, True):
        torch._dynamo.reset()
        module = small_model()
        # DDPOptimizer wants the first bucket (1 MiB) no larger than the others.
        model = ddp(torch.compile(module, backend=counting) if compiled else module,
                    bucket_cap_mb=1)
        state = gc.CompressionState(spec, dense_share=0.0)
        model.register_comm_hook(state, gc.hook)
        opt = gc.SGD(model.parameters(), lr=0.05, momentum=0.9, state=state)
        losses = _sgd_steps(model, opt, rank, steps)
        flat = torch.cat([p.detach().flatten() for p in module.parameters()])
        out.append((losses, flat, state.stats()["compression_ratio"]))
    return out, len(graphs)


def exchanger_dropped_by_its_completion(rank, world):
    """An exchanger whose only reference is held by a job's completion: it dies on its own
    exchange thread when that completion is released. The order in which the jobs' completions
    ran, and each job's bucket afterwards (the mean over ranks)."""
    import threading
    ex = gc._C.Exchanger(dist.group.WORLD, "fp16", "auto", 30.0, [])
    buffers = [torch.full((5,), float(rank + j)) for j in range(3)]
    order = []
    finished = threading.Event()
    owner = [ex]

    def first(error):
        order.append((0, error))
        owner.clear()  # the closure's reference goes when the job is released

    def later(j):
        def done(error):
            order.append((j, error))
            if j == 2:
                finished.set()
        return done

    # The first completion must be the last owner: keep the thread busy on it until the
    # others are queued (the exchange runs them in submission order).
    ready_gate = threading.Event()
    ex.submit_dense(buffers[0], gc._C.StepContext(), first, ready_gate.wait)
    for j in (1, 2):
        ex.submit_dense(buffers[j], gc._C.StepContext(), later(j), None)
    del ex
    ready_gate.set()
    assert finished.wait(30), "the queued jobs never ran"
    return [j for j, _ in order], [e for _, e in order], [b.tolist() for b in buffers]


def float64_bucket(rank, world):
    model = ddp(small_model().double())
    model.register_comm_hook(gc.CompressionState("none"), gc.hook)
    x, y = batch(rank, 0)
    return raised(lambda: nn.functional.cross_entropy(model(x.double()), y).backward())


class _ComplexLayer(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.w = nn.Parameter(torch.randn(10, 10, dtype=torch.cfloat))

    def forward(self, x):
        return (x.to(torch.cfloat) @ self.w).real


def complex_parameter(rank, world):
    model = DDP(nn.Sequential(small_model(), _ComplexLayer()), bucket_cap_mb=0.1)
    model.register_comm_hook(gc.CompressionState("none"), gc.hook)
    x, y = batch(rank, 0)
    return raised(lambda: nn.functional.cross_entropy(model(x), y).backward())


def mixed_precision_equals_ddp(rank, world, dtype, spec, steps, device="cpu"):
    """A bfloat16 or float16 model through the hook against DDP's own averaging in that
    dtype: per step, the worst difference over tensors in units of the dtype's eps times
    the tensor's largest mean gradient."""
    dtype = getattr(torch, dtype)
    ours = ddp(small_model().to(device=device, dtype=dtype))
    theirs = ddp(small_model().to(device=device, dtype=dtype))
    ours.register_comm_hook(gc.CompressionState(spec, dense_share=0.0), gc.hook)
    eps = torch.finfo(dtype).eps
    worst = []
    for step in range(steps):
        x, y = batch(rank, step, device=device)
        for m in (ours, theirs):
            m.zero_grad()
            nn.functional.cross_entropy(m(x.to(dtype)), y).backward()
        worst.append(0.0)
        for a, b in zip(_grads(ours), _grads(theirs)):
            assert a.dtype == dtype, a.dtype
            scale = eps * b.float().abs().max().item()
            worst[-1] = max(worst[-1], (a.float() - b.float()).abs().max().item() / scale)
    return worst


def mixed_precision_trains(rank, world, dtype, spec, steps):
    """train_spec on a bfloat16 or float16 model; also the dtypes of the hook's memories."""
    dtype = getattr(torch, dtype)
    model = ddp(small_model().to(dtype))
    state = gc.CompressionState(spec, dense_share=0.0, seed=7)
    model.register_comm_hook(state, gc.hook)
    opt = gc.SGD(model.parameters(), lr=0.05, momentum=0.9, state=state)
    losses = _sgd_steps(model, opt, rank, steps, dtype)
    flat = torch.cat([p.detach().float().flatten() for p in model.parameters()])
    memories = state.state_dict()["memories"].values()
    return losses, flat, {str(t.dtype) for m in memories for t in m.values()}


def _switched_and_plain(rank, spec, steps, dtype, switch, reducer="auto"):
    """The same training with a testing switch on, then off: per run the weights, the
    staging's host buffer allocations (None without staging), the stats, the state_dict and
    whether the buckets went through the device reducer; and the model's parameter count."""
    runs = []
    for on in ("1", "0"):
        os.environ[switch] = on
        model = ddp(small_model().to(getattr(torch, dtype)))
        state = gc.CompressionState(spec, dense_share=0.0, seed=7, reducer=reducer)
        os.environ.pop(switch)
        model.register_comm_hook(state, gc.hook)
        opt = gc.SGD(model.parameters(), lr=0.05, momentum=0.9, state=state)
        _sgd_steps(model, opt, rank, steps, getattr(torch, dtype))
        staging = state._staging.get(torch.device("cpu"))
        runs.append((torch.cat([p.detach().flatten() for p in model.parameters()]),
                     None if staging is None else staging.allocations, state.stats(),
                     state.state_dict(), state._force_device and state.on_device))
    return runs, len(list(model.parameters()))


def switched_equals_plain(rank, world, spec, steps, dtype, switch, reducer="auto"):
    """The same training with a testing switch on (GRADCOMP_FORCE_STAGING: CPU buckets
    staged as CUDA buckets are, host buffers per bucket, the ready wait, the copy back;
    GRADCOMP_FORCE_DEVICE: CPU buckets through the device reducer) and off: identical
    weights; the staged run's host buffer allocations (reused across steps); the stats."""
    runs, n_params = _switched_and_plain(rank, spec, steps, dtype, switch, reducer)
    (switched, allocations, stats_on, state_on, _), (plain, none, stats_off, state_off, _) = runs
    same_state = all(
        torch.equal(state_on["memories"][i][k], state_off["memories"][i][k])
        for i in state_off["memories"] for k in state_off["memories"][i])
    same_state = same_state and state_on["memories"].keys() == state_off["memories"].keys()
    return (torch.equal(switched, plain), allocations, none, n_params,
            stats_on, stats_off, same_state)


def batched_device_equals_plain(rank, world, spec, steps, dtype):
    """switched_equals_plain through the device reducer with its batches, which CPU
    tensors take only when GRADCOMP_DEVICE_BATCH=1 (read when the reducer is built, at the
    first compressed step: set for this whole rank)."""
    os.environ["GRADCOMP_DEVICE_BATCH"] = "1"
    try:
        return switched_equals_plain(rank, world, spec, steps, dtype, "GRADCOMP_FORCE_DEVICE")
    finally:
        os.environ.pop("GRADCOMP_DEVICE_BATCH")


def switched_close_to_plain(rank, world, spec, steps, dtype, switch):
    """switched_equals_plain to a tolerance, for a device path whose arithmetic rounds
    otherwise (PowerSGD's products are ATen matrix multiplications there): the largest
    difference of the weights, and of any memory, each relative to the largest magnitude
    of that tensor in the plain run; whether the memories have the same names and sizes;
    both runs' stats; whether the switched run went through the device reducer."""
    (switched, _, stats_on, state_on, on_device), (plain, _, stats_off, state_off, _) = (
        _switched_and_plain(rank, spec, steps, dtype, switch)[0])

    def relative(a, b):
        return ((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30)
                ).item() if b.numel() else 0.0

    mem_on, mem_off = state_on["memories"], state_off["memories"]
    same_names = mem_on.keys() == mem_off.keys() and all(
        mem_on[i].keys() == mem_off[i].keys()
        and all(mem_on[i][k].shape == mem_off[i][k].shape for k in mem_off[i])
        for i in mem_off)
    worst_memory = max((relative(mem_on[i][k], mem_off[i][k]) for i in mem_off
                        for k in mem_off[i]), default=0.0) if same_names else float("inf")
    return (relative(switched, plain), worst_memory, same_names,
            sum(len(v) for v in mem_off.values()), stats_on, stats_off, on_device)


def device_support(rank, world, specs, reducer="auto"):
    """CompressionState.on_device for each spec (a gradcomp.SGD attached, as in training)."""
    out = {}
    for spec in specs:
        model = ddp(small_model())
        state = gc.CompressionState(spec, dense_share=0.0, reducer=reducer)
        gc.SGD(model.parameters(), lr=0.05, momentum=0.9, state=state)
        out[spec] = (state.on_device, state.compressor)
    return out
