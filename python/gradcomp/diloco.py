"""Local steps with compressed pseudo-gradients (local SGD, DiLoCo, Streaming DiLoCo,
SparseLoCo) for an ordinary PyTorch training loop, without DDP.

Every worker trains its own replica with its own (inner) optimizer; every ``sync_every``
steps the workers exchange their pseudo-gradients (global minus local weights) through
any gradcomp compressor, with error feedback kept per worker, and take one outer step
together::

    import gradcomp.torch as gc
    model = Net()
    inner = torch.optim.AdamW(model.parameters(), lr=1e-3)
    diloco = gc.DiLoCo(model, inner, "nesterov:lr=0.7,momentum=0.9", sync_every=30,
                       compressor="ef(chunktopk:chunk=4096,k=64,values=2bit)")
    for x, y in shard:
        inner.zero_grad()
        loss_fn(model(x), y).backward()
        inner.step()          # every 30th step also runs the round (a hook on the optimizer)

The round is gradcomp's C++ outer loop (``gradcomp::dist::OuterLoop``), the object
``gradcomp train --sync-every`` and LibTorch's ``gradcomp::DiLoCo`` run, on a
Gloo group of its own. Constructing it is collective: the ranks compare their settings and
parameter shapes (all raise the same ValueError if they differ), and rank 0's weights are
broadcast to every rank, as DDP does.
"""
import contextlib
import datetime
from typing import Any, Dict, Optional, Union

import torch
import torch.distributed as dist

from . import _C, _staging
from ._groups import exchange_group
from ._saved_state import check_saved_rank

__all__ = ["DiLoCo"]

_FORMAT = "gradcomp.torch.DiLoCo/1"


def _outer_spec(outer: Union[str, torch.optim.Optimizer]) -> str:
    """A spec string as it is, or a torch.optim.SGD's settings as the same rule."""
    if isinstance(outer, str):
        return outer
    if not isinstance(outer, torch.optim.SGD) or len(outer.param_groups) != 1:
        raise TypeError("DiLoCo: outer_optimizer must be a spec string (e.g. "
                        "'nesterov:lr=0.7,momentum=0.9') or a torch.optim.SGD with one "
                        f"parameter group, got {type(outer).__name__}")
    g = outer.param_groups[0]
    if g.get("weight_decay", 0) or g.get("dampening", 0) or g.get("maximize", False):
        raise ValueError("DiLoCo: an outer torch.optim.SGD with weight_decay, dampening or "
                         "maximize has no outer rule here; use a spec string")
    lr, momentum = float(g["lr"]), float(g.get("momentum", 0.0))
    if g.get("nesterov", False):
        return f"nesterov:lr={lr!r},momentum={momentum!r}"
    return f"sgd:lr={lr!r},momentum={momentum!r}"


def _whole(name: str, value: Any) -> int:
    """An integer setting as given: 2.7 steps is a mistake to name, not to round."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"DiLoCo: {name} must be an int, got {value!r}")
    return value.__index__()


def _options(outer_optimizer: Union[str, torch.optim.Optimizer], sync_every: int,
             fragments: int, delay: int, mix: float, seed: int, min_elements: int,
             dense_share: float) -> "_C.OuterLoopOptions":
    """The C++ outer loop's options from DiLoCo's arguments (TypeError for a wrong type)."""
    options = _C.OuterLoopOptions()
    options.sync_every = _whole("sync_every", sync_every)
    options.outer = _outer_spec(outer_optimizer)
    options.fragments = _whole("fragments", fragments)
    options.delay = _whole("delay", delay)
    options.mix = float(mix)
    options.seed = _whole("seed", seed)
    options.min_elements = _whole("min_elements", min_elements)
    options.dense_share = float(dense_share)
    return options


class DiLoCo:
    """The outer loop around ``model``'s parameters (see the module's documentation).

    Args:
        model: the replica; its parameters that require grad, in ``named_parameters``
            order, must be contiguous float32, bfloat16 or float16 tensors updated in
            place, on the CPU or a GPU (whose are copied to pinned host buffers for each
            round and back after its merge, on the current stream: only at rounds, never at
            the other steps). 16-bit ones are widened into float32 buffers and the merged
            weights rounded back; the outer state is float32.
            Move or convert the model (``.to()``, ``.half()``) before building the
            DiLoCo: a parameter whose tensor is replaced afterwards is refused at the next
            step (ValueError).
        inner_optimizer: when given (torch >= 2.0), a post-step hook on it calls
            :meth:`step` after each of its steps; otherwise call :meth:`step` yourself
            after every optimizer step. With fp16 autocast's ``GradScaler``, pass none and
            call :meth:`step` after every ``scaler.update()``: the scaler skips the
            optimizer's step after an overflow, on that rank only, so the hook would count
            fewer steps there and the ranks would meet at different rounds. Counted by
            iteration, every rank runs its rounds together; a skipped update is one inner
            step fewer in that rank's pseudo-gradient.
        outer_optimizer: ``"nesterov:lr=0.7,momentum=0.9"`` (DiLoCo, the default),
            ``"average"`` (local SGD), ``"sgd:lr=L,momentum=M"``,
            ``"sparseloco:lr=1,decay=0.95"`` (SparseLoCo: each worker's error feedback
            decays between rounds; needs an ``ef(...)`` compressor), or a
            ``torch.optim.SGD`` whose settings are read as one of them.
        sync_every: H, inner steps per round.
        compressor: any spec ``gradcomp.list_codecs()`` names, applied to the
            pseudo-gradients: ``"fp16"`` (the default, as OpenDiLoCo), ``"none"`` (fp32,
            as DiLoCo), ``"ef(chunktopk:values=2bit)"`` (SparseLoCo's message), ...
        reducer: how the workers combine them: ``"auto"`` (fp16 and none are
            allreduced, other codecs gathered) or ``"scatter"`` (any codec at a ring
            allreduce's bytes: each rank averages 1/W of the model from the others'
            compressed slices and sends it back compressed; ``compressor="int"`` then
            sends 4 bits per value).
        fragments: Streaming DiLoCo's fragments, exchanged on a staggered schedule
            (must divide ``sync_every``).
        delay: inner steps a fragment's exchange overlaps before it is merged
            (``< sync_every / fragments``).
        mix: share of the local weights kept when a round is merged, in [0, 1).
        process_group: the group (its CPU backend must be Gloo). Default: a Gloo group of
            the DiLoCo's own over all ranks (``dist.new_group``, built here: every rank
            constructs the DiLoCo at the same point anyway), so that the rounds never meet
            the job's own collectives, whatever the default group's backend.
        timeout: a round's deadline; a peer that misses it ends the round on every rank
            with ``gradcomp.CommError`` and no weight changed.

    With ``delay > 0`` a round's exchange runs on a thread of its own while training goes
    on: no other collective may run on its process group meanwhile. Two threads issuing
    collectives on one group can pair different operations across ranks, which Gloo aborts
    on. Without ``process_group`` the DiLoCo gets a group of its own; with one, issue nothing
    else on it, and :meth:`close` the DiLoCo (or take its :meth:`state_dict`, which waits
    too) before another collective on that group.
    """

    def __init__(self, model: torch.nn.Module,
                 inner_optimizer: Optional[torch.optim.Optimizer] = None,
                 outer_optimizer: Union[str, torch.optim.Optimizer] = "nesterov:lr=0.7,momentum=0.9",
                 *, sync_every: int, compressor: str = _C.DEFAULT_OUTER_COMPRESSOR,
                 reducer: str = "auto", fragments: int = 1,
                 delay: int = 0, mix: float = 0.0,
                 process_group: Optional[dist.ProcessGroup] = None, seed: int = 0,
                 timeout: datetime.timedelta = datetime.timedelta(minutes=30),
                 min_elements: int = 1024, dense_share: float = 0.0) -> None:
        options = _options(outer_optimizer, sync_every, fragments, delay, mix, seed,
                           min_elements, dense_share)
        _C.check_outer_loop(compressor, reducer, options)  # before any collective
        # The parameters themselves, not detached copies: the outer loop refuses one whose
        # memory a later model.to(), .half() or .data assignment swapped.
        params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        if process_group is not None:
            group = process_group
        else:  # a Gloo group of the rounds' own (see the class docs)
            group = exchange_group(dist.distributed_c10d._get_default_group())
        self._rank, self._world = dist.get_rank(group), dist.get_world_size(group)
        self._settings = {"sync_every": options.sync_every, "outer": options.outer,
                          "compressor": compressor, "reducer": reducer,
                          "fragments": options.fragments,
                          "delay": options.delay, "mix": options.mix}
        # GRADCOMP_FORCE_STAGING=1 stages CPU parameters as a GPU's are: CI's check of it.
        self._loop = _C.OuterLoop(group, params, compressor, reducer, options,
                                  timeout.total_seconds(), _staging.forced())
        self._steps = 0
        self._hook = None
        if inner_optimizer is not None:
            if not hasattr(inner_optimizer, "register_step_post_hook"):
                raise TypeError("DiLoCo: this torch has no optimizer step hooks (torch < 2.0): "
                                "pass no inner_optimizer and call diloco.step() after each "
                                "optimizer step")
            self._hook = inner_optimizer.register_step_post_hook(lambda *_: self.step())

    @staticmethod
    def check(outer_optimizer: Union[str, torch.optim.Optimizer] = "nesterov:lr=0.7,momentum=0.9",
              *, sync_every: int, compressor: str = _C.DEFAULT_OUTER_COMPRESSOR,
              reducer: str = "auto", fragments: int = 1, delay: int = 0, mix: float = 0.0,
              seed: int = 0, min_elements: int = 1024, dense_share: float = 0.0) -> None:
        """Raises the TypeError or ValueError that constructing a DiLoCo with these settings
        would, without a model, a process group or any collective: a launcher's check before
        it starts the ranks (as the examples refuse a bad flag in one line). The constructor
        checks again, and that every rank was given the same settings."""
        _C.check_outer_loop(compressor, reducer, _options(
            outer_optimizer, sync_every, fragments, delay, mix, seed, min_elements, dense_share))

    def step(self) -> bool:
        """After an inner optimizer step: runs the rounds due. True when the parameters
        were changed (a round merged). Raises gradcomp.CommError when a round failed."""
        with self._hinted():
            changed = self._loop.after_inner_step(self._steps + 1)
        self._steps += 1
        return changed

    def synchronize(self) -> None:
        """At the end of training: every rank's parameters become one model, the
        consensus (a last round of every fragment; the replicas set to its result).
        Collective: call it on every rank after the same inner step, before evaluating or
        saving the final model. Training may go on afterwards."""
        with torch.no_grad(), self._hinted():
            self._loop.synchronize(self._steps)

    @contextlib.contextmanager
    def _hinted(self):
        """The ranks' disagreement on their inner steps, with the likely cause when the
        optimizer's hook counts them: a loss scaler skipped a step on some rank."""
        try:
            yield
        except ValueError as e:
            if self._hook is None or "ranks disagree on the inner steps" not in str(e):
                raise
            raise ValueError(
                f"{e}; the inner optimizer's hook counts its steps, which a GradScaler skips "
                "after an overflow on one rank only: with a scaler, pass no inner_optimizer "
                "and call diloco.step() after every scaler.update()") from None

    @property
    def inner_steps(self) -> int:
        return self._steps

    def describe(self) -> str:
        """e.g. ``"nesterov:lr=0.7,momentum=0.9 every 30 steps over dense"``."""
        return self._loop.describe()

    def stats(self) -> Dict[str, Any]:
        """Bytes and seconds of the rounds since the last call (``rounds`` counted)."""
        return self._loop.take_stats()

    def state_dict(self) -> Dict[str, Any]:
        """The outer state (global weights, outer momentum, every error-feedback memory)
        and the step count; save it with the model and the inner optimizer. The memories
        (and, with a delay, the round's start) are this rank's own: with them, each rank
        restores its own state (load_state_dict refuses another rank's)."""
        return {"format": _FORMAT, "rank": self._rank, "world_size": self._world,
                "inner_steps": self._steps, "settings": dict(self._settings),
                "state": self._loop.state()}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        if not isinstance(state, dict) or state.get("format") != _FORMAT:
            raise ValueError(f"DiLoCo.load_state_dict: not a {_FORMAT} state")
        saved = state.get("settings")
        if isinstance(saved, dict) and "reducer" not in saved:
            saved = {**saved, "reducer": "auto"}  # saved before the reducer was a setting
        if saved != self._settings:
            raise ValueError(f"DiLoCo.load_state_dict: saved with {state.get('settings')}, "
                             f"this outer loop has {self._settings}")
        missing = [k for k in ("inner_steps", "state") if k not in state]
        if missing:
            raise ValueError(f"DiLoCo.load_state_dict: the state lacks {', '.join(missing)}: "
                             "not a whole DiLoCo.state_dict()")
        # The global weights and the outer momentum are every rank's alike (a state saved
        # on rank 0 alone serves them all); the codec's memories and a delayed round's start
        # are the saving rank's own.
        per_rank = [name for name in state["state"]
                    if not name.endswith((".global", ".momentum"))]
        if per_rank:
            check_saved_rank("DiLoCo.load_state_dict", state, self._rank, self._world)
        steps = state["inner_steps"]
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(f"DiLoCo.load_state_dict: inner_steps is {steps!r}, not a count")
        self._loop.load_state(state["state"], steps)
        self._steps = steps

    def close(self) -> None:
        """Waits for a round in flight (``delay > 0``) and removes the hook on the inner
        optimizer. Call it before building another DiLoCo over the same process group."""
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        self._loop.drain()

    def __enter__(self) -> "DiLoCo":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
