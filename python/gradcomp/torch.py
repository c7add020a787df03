"""gradcomp for PyTorch DistributedDataParallel: a communication hook.

Two lines switch gradient compression on in an ordinary DDP script::

    import gradcomp.torch as gc
    state = gc.CompressionState("efm(topk:ratio=0.01)", dense_share=0.01)
    ddp.register_comm_hook(state, gc.hook)
    opt = gc.SGD(ddp.parameters(), lr=0.05, momentum=0.9, state=state)  # efm/dgc/sketched-sgd/fetchsgd

Any spec that ``gradcomp list`` (or :func:`gradcomp.list_codecs`) accepts works: the
single-message codecs, ``ef(...)`` / ``efm(...)`` / ``noef(...)``, ``dgc``, ``powersgd``,
``sketched-sgd``, ``fetchsgd``, ``atomo``. The exchange is gradcomp's C++ exchange (the
one ``gradcomp train`` runs), issued on your process group from a thread of its own, so
DDP keeps overlapping communication with the backward pass. Every DDP bucket is split
into its tensors: matrices are compressed one by one, 1-D and small tensors (and the
smallest ones within ``dense_share`` of the model) are averaged densely, as the CLI does.

The first iteration of a fresh run is averaged densely while the hook learns the model's
tensors (DDP also rebuilds its buckets after it). Error feedback and the other memories
are kept per tensor, follow a tensor into DDP's rebuilt buckets, and are saved by
:meth:`CompressionState.state_dict`: a run resumed from it continues exactly as an
uninterrupted one.

The ranks agree before they exchange: constructing the state is collective and compares
the settings, and each process's first step compares the model's tensors; ranks that
differ all raise the same ValueError naming both values. bfloat16 and float16 buckets
are exchanged as fp32 copies.

CUDA buckets (fp32, bf16, fp16) work in jobs whose own collectives run on NCCL: gradcomp
exchanges over a Gloo group of its own, created beside the default group whatever its
backend (``"nccl"``, ``"cpu:gloo,cuda:nccl"``, ``"gloo"``). Each bucket is copied to a pinned
host buffer on a copy stream of its own while backward goes on, exchanged there, and copied
back (gradcomp/_staging.py).

fp16 autocast with loss scaling: pass the ``torch.amp.GradScaler`` as ``grad_scaler``;
compressed tensors are then exchanged unscaled, and a step that overflows on any rank is
skipped by every rank's scaler, no memory changed (see :class:`CompressionState`).
"""
import datetime
import functools
import warnings
import weakref
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

from . import _C, _staging
from ._groups import exchange_group
from ._saved_state import check_saved_rank
from .diloco import DiLoCo

__all__ = ["CompressionState", "hook", "SGD", "DiLoCo"]

_FORMAT = "gradcomp.torch.CompressionState/1"
_THRESHOLD_CHECK_STEP = 10  # gradcomp/method.h Method::kThresholdCheckStep


class CompressionState:
    """The hook's state: the compressor, the layout rules, the memories and statistics.

    Collective: every rank of the group constructs it at the same point, and the ranks
    compare their settings (all but ``process_group`` and ``timeout``): ranks that differ
    all raise ``ValueError`` naming the first setting that differs and both values.

    Args:
        compressor: a gradcomp spec, e.g. ``"efm(topk:ratio=0.01)"``, ``"powersgd:rank=2"``,
            ``"dgc:density=0.001"``. A bad spec raises ``ValueError`` naming the problem.
        process_group: the group to exchange over. Default: a Gloo group over all ranks
            that gradcomp creates for the state (``dist.new_group``; collective, as the
            state is), whatever the default group's backend, so that DDP's own collectives
            (``find_unused_parameters``, ``static_graph``) never meet the exchange, which
            runs on a thread of its own during backward. A group given here is used as it
            is: it needs a Gloo backend (``"gloo"`` or ``"cpu:gloo,cuda:nccl"``; another is
            refused: pass ``dist.new_group(backend="gloo")``), and no other collective may
            run on it while backward runs.
        dense_share: the smallest compressible tensors that together hold at most this
            share of the model's elements stay dense (0.01 keeps a small classifier layer
            out of compression, where compression costs the most accuracy per byte saved).
        min_elements: tensors with fewer elements stay dense (as do all 1-D tensors).
        dense_steps: the first steps are averaged densely (a warm-up).
        reducer: ``"auto"`` (allreduce for linear codecs, allgather otherwise),
            ``"allgather"``, ``"allreduce"``, ``"dense"`` or ``"scatter"`` (each rank
            averages 1/W of every tensor from the others' compressed slices and sends it
            back compressed: any codec at a ring allreduce's bytes; on the GPU for CUDA
            buckets where the codec has a device implementation, else staged through host
            memory).
        seed: the seed of stochastic codecs; the same on every rank.
        steps_per_epoch: steps in one epoch, for schedules counted in epochs (DGC's
            density warm-up); 0 if unknown (such schedules are then off).
        total_steps: steps in the whole run (e.g. ``epochs * steps_per_epoch``), for
            schedules bounded by the run's length: DGC's warm-up is cut to 1/8 of the run
            when its ``warmup_epochs`` would take more. ``None`` if unknown (no cap).
        timeout: how long one exchange may wait for a peer before raising.
        grad_scaler: the run's ``torch.amp.GradScaler`` (fp16 autocast with loss scaling),
            so that the exchange works as DDP's allreduce does under it. Compressed
            tensors are exchanged unscaled (divided by the scaler's scale, the mean
            multiplied back), so that thresholds (2-bit's) and memories (error feedback,
            momenta) stay in gradient units whatever the scale does. A step whose
            gradients overflow on any rank is not exchanged: the ranks agree on it (one
            small allreduce per compressed DDP bucket and step), every rank's bucket
            comes back ``inf``, no memory changes, and the scaler skips the step on every
            rank and lowers its scale. Without a scaler a non-finite gradient in a
            compressed tensor raises ``ValueError``. Every rank passes one, or none.
    """

    def __init__(
        self,
        compressor: str,
        *,
        process_group: Optional[dist.ProcessGroup] = None,
        dense_share: float = 0.01,
        min_elements: int = 1024,
        dense_steps: int = 0,
        reducer: str = "auto",
        seed: int = 0,
        steps_per_epoch: int = 0,
        total_steps: Optional[int] = None,
        timeout: datetime.timedelta = datetime.timedelta(minutes=30),
        grad_scaler: Optional[Any] = None,
    ) -> None:
        settings = _settings(compressor, reducer, dense_share, min_elements, dense_steps, seed,
                             steps_per_epoch, total_steps, grad_scaler)
        # A bad setting is raised only once the ranks have agreed on their settings: a
        # rank that raised at once would leave the others waiting for it in a collective.
        invalid = _invalid_settings(settings)
        if invalid is None and not isinstance(timeout, datetime.timedelta):
            invalid = TypeError(f"timeout must be a datetime.timedelta, got {timeout!r}")
        if process_group is None:
            if not dist.is_initialized():
                if invalid is not None:
                    raise invalid
                raise RuntimeError(
                    "gradcomp: torch.distributed is not initialized "
                    "(call dist.init_process_group('gloo', ...) first)"
                )
            process_group = dist.distributed_c10d._get_default_group()
        process_group = exchange_group(process_group)
        # Collective: the ranks agree on the settings (ValueError on every rank naming the
        # first that differs), then the exchanger validates the spec and the reducer.
        # Settings of the wrong type reach it as the defaults (the fields carry what was
        # given, so ranks that differ still all raise alike); the error follows.
        self._exchanger = _C.Exchanger(
            process_group, compressor if isinstance(compressor, str) else "none",
            reducer if isinstance(reducer, str) else "auto",
            (timeout if isinstance(timeout, datetime.timedelta)
             else datetime.timedelta(minutes=30)).total_seconds(),
            _settings_fields(settings),
        )
        if invalid is not None:
            raise invalid
        # Loss scaling: the scaler whose scale compressed tensors are divided by, and the
        # exchanger's agreement on overflowing steps (dist::Exchanger::NonFinite).
        self._scaler = grad_scaler if settings["loss_scaling"] == "on" else None
        self._exchanger.skip_non_finite = self._scaler is not None
        # As given; the exchanger's spec (self.compressor) gains the default memory of a
        # bare biased codec when gradcomp.torch.SGD attaches (efm(...) under momentum).
        self._given_compressor = compressor
        self.dense_share = float(dense_share)
        self.min_elements = int(min_elements)
        self.dense_steps = int(dense_steps)
        self.seed = int(seed)
        self.steps_per_epoch = int(steps_per_epoch)
        self.total_steps = None if total_steps is None else int(total_steps)
        #: Steps exchanged so far (restored by load_state_dict).
        self.step = 0
        # Tensors, by gradcomp index (the order they were first seen, the same on every
        # rank): (name, numel, dim, rows), and which stay dense once the layout is known.
        self._params: List[Tuple[str, int, int, int]] = []
        self._dense: Optional[List[bool]] = None
        self._index: Dict[int, int] = {}  # id(parameter) -> gradcomp index
        self._next_index = 0
        # DDP bucket index -> (group key, tensor indices, slots); tensor index -> group key.
        self._groups: Dict[int, Tuple[int, List[int], List[Tuple[int, int, int, int, bool]]]] = {}
        self._owner: Dict[int, int] = {}
        self._next_key = 0
        # Memory state not in any group yet (restored, or taken from a retired group).
        self._floating: Dict[int, Dict[str, torch.Tensor]] = {}
        self._optimizer: Optional[weakref.ReferenceType] = None
        # This process's first step is held back until its last bucket, when the ranks
        # agree on the model (see _agree_first_step): (submission, future) per bucket, and
        # each bucket's (gradcomp index, shape) per tensor.
        self._agreed = False
        self._held: List[Tuple[Any, torch.futures.Future]] = []
        self._seen: List[List[Tuple[int, Tuple[int, ...]]]] = []
        # The ranks' disagreement (or the failure to compare), once found: every later
        # bucket fails with it.
        self._refused: Optional[Exception] = None
        # Set by a failed exchange's callback, on the exchange thread: a cell of its own,
        # so that the callback holds no reference to the state (the last reference dropped
        # there would destroy the exchanger on its own thread, which cannot join itself).
        self._failed: List[Optional[Exception]] = [None]
        self._compressed_last_step = False
        # Host buffers and copy streams for device buckets, per device (_staging.py).
        self._staging: Dict[torch.device, "_staging.Staging"] = {}
        self._force_staging = _staging.forced()  # CPU buckets too: CI's check of the bookkeeping
        # CPU buckets through the device reducer: CI's check that it computes what the host
        # reducer does (GRADCOMP_FORCE_DEVICE=1).
        self._force_device = _staging.forced("GRADCOMP_FORCE_DEVICE")
        # The fixed 2-bit threshold check (Method::threshold_warning): due at the first
        # compressed step from step 10 on, on that step's compressed gradients.
        self._threshold_check_due = _C.fixed_2bit_threshold(compressor) > 0
        self._threshold_grads: List[torch.Tensor] = []
        self._totals = dict(
            steps=0, bytes_sent=0, bytes_received=0, encode_seconds=0.0, comm_seconds=0.0,
            decode_seconds=0.0, dense_fallbacks=0, non_finite_skips=0,
        )

    @staticmethod
    def check(compressor: str, *, reducer: str = "auto", dense_share: float = 0.01,
              min_elements: int = 1024, dense_steps: int = 0, seed: int = 0,
              steps_per_epoch: int = 0, total_steps: Optional[int] = None,
              grad_scaler: Optional[Any] = None) -> None:
        """Raises the TypeError or ValueError that constructing a CompressionState with these
        settings would, without a process group or any collective: a launcher's check before
        it starts the ranks (as the examples refuse a bad flag in one line). The constructor
        checks again, and that every rank was given the same settings."""
        invalid = _invalid_settings(_settings(compressor, reducer, dense_share, min_elements,
                                              dense_steps, seed, steps_per_epoch, total_steps,
                                              grad_scaler))
        if invalid is not None:
            raise invalid

    # ---- what the hook does -------------------------------------------------------------

    def _exchange(self, bucket: dist.GradBucket) -> "torch.futures.Future[torch.Tensor]":
        buffer = bucket.buffer()
        if buffer.dtype not in _BUCKET_DTYPES or buffer.device.type not in ("cpu", "cuda"):
            raise TypeError(
                f"gradcomp hook: bucket {bucket.index()} holds {buffer.dtype} on "
                f"{buffer.device}; gradcomp exchanges float32, bfloat16 and float16 "
                "gradients on the CPU or a CUDA device"
            )
        cuda = buffer.device.type == "cuda"
        future: torch.futures.Future = (
            torch.futures.Future(devices=[buffer.device]) if cuda else torch.futures.Future()
        )
        refused = self._refused or self._failed[0]
        if refused is not None:
            _C.fail_future(future, refused)
            return future
        # Where the bucket is exchanged. Compressors with a device implementation run on the
        # bucket's device from the second step on (the first is DDP's dense one): memories
        # stay there and only messages (PowerSGD: its factors) and the dense tensors cross
        # to the host (gradcomp/device/reducer.h).
        # Otherwise everything is fp32 in host memory: a CUDA bucket is staged through a
        # pinned buffer (_staging.py), a bf16 or fp16 CPU bucket exchanged as an fp32
        # copy; each gets the mean back in its own dtype and place.
        on_device = ((cuda or self._force_device) and self._dense is not None
                     and self._exchanger.device_supported)
        # Under loss scaling, groups are exchanged unscaled: all steps but a fresh run's
        # first, a plain dense average (linear: the scale passes through it), as every
        # step of a dense method (none) is.
        scale = (self._loss_scale(buffer.device)
                 if self._scaler is not None and self._dense is not None
                 and not self._exchanger.dense_only else None)
        if self._dense is not None:
            self._keep_threshold_grads(bucket, scale)
        staging = None
        ready = None
        stream = None
        side = None
        staged = not on_device and (cuda or self._force_staging)
        work = buffer if staged or buffer.dtype == torch.float32 else buffer.float()
        if on_device and cuda:
            # The device work runs on gradcomp's side stream, after the gradients.
            side = self._staging_for(buffer.device).stream
            produced = torch.cuda.Event()
            produced.record(torch.cuda.current_stream(buffer.device))
            side.wait_event(produced)
            work.record_stream(side)
            stream = (side.stream_id, side.device_index, side.device_type)
            if scale is not None:
                scale.record_stream(side)
                with torch.cuda.stream(side):
                    work.div_(scale)
        elif staged:
            staging = self._staging_for(buffer.device)
            if scale is not None:
                buffer.div_(scale)  # on the stream that produced it, before the copy out
            work, ready = staging.to_host(bucket.index(), buffer)
        elif scale is not None:
            work.div_(scale)

        step, failed = self.step, self._failed

        def done(error: Optional[BaseException]) -> None:
            if error is not None:
                # The exchange's own error (gradcomp.CommError, ValueError for a
                # non-finite gradient, ...), raised as it is by loss.backward(). The peers
                # may have sent this step's messages, or still wait for this rank's: a
                # later exchange here would pair with the wrong step's on every other rank
                # (a rank that caught the error and went on averaged its next step's
                # gradients into the peers' current one). Every later bucket fails.
                if failed[0] is None:
                    failed[0] = RuntimeError(
                        f"gradcomp: this rank's exchange failed at step {step} ({error}); its "
                        "exchanges are out of step with the other ranks', so every later one "
                        "fails: restart every rank from a checkpoint"
                    )
                _C.fail_future(future, error)
                return
            if staging is not None:
                staging.to_device(work, buffer, lambda: future.set_result(buffer), scale)
                return
            if side is not None:
                # Completed with the side stream current: DDP's use of the bucket waits
                # for the decode (and the copy back of a bf16 or fp16 bucket).
                with torch.cuda.stream(side):
                    if work is not buffer:
                        buffer.copy_(work)
                    if scale is not None:
                        buffer.mul_(scale)
                    future.set_result(buffer)
                return
            if work is not buffer:
                buffer.copy_(work)
            if scale is not None:
                buffer.mul_(scale)
            future.set_result(buffer)

        submit, compressed = self._prepare(
            bucket, work, done, ready, stream if on_device else False)
        if self._agreed:
            submit()
        else:
            self._held.append((submit, future))
            self._seen.append([(self._index[id(p)], tuple(p.shape)) for p in bucket.parameters()])
        if bucket.is_last():
            if not self._agreed and not self._agree_first_step():
                return future
            self._end_step(compressed)
        return future

    def _loss_scale(self, device: torch.device) -> Optional[torch.Tensor]:
        """The scaler's scale on the bucket's device (no wait for the device), or None
        before the scaler's first scale()."""
        scale = getattr(self._scaler, "_scale", None)
        if not isinstance(scale, torch.Tensor):
            # scaler.scale(loss) was not called this run: the gradients are not scaled
            # (and scaler.step() will say so).
            return None
        return scale.to(device=device, dtype=torch.float32, non_blocking=True)

    def _keep_threshold_grads(self, bucket: dist.GradBucket, scale: Optional[torch.Tensor]) -> None:
        """Copies of the compressed gradients, unscaled, for the fixed 2-bit threshold
        check (Method::threshold_warning), at the first compressed step from step 10 on;
        taken before anything else touches the bucket."""
        if not (self._threshold_check_due and self.step >= _THRESHOLD_CHECK_STEP
                and self.step >= self.dense_steps):
            return
        for p, g in zip(bucket.parameters(), bucket.gradients()):
            if not self._dense[self._index_of(p)]:
                kept = g.detach().float().clone()
                self._threshold_grads.append(kept if scale is None else kept.div_(scale))

    def _staging_for(self, device: torch.device) -> "_staging.Staging":
        staging = self._staging.get(device)
        if staging is None:
            staging = self._staging[device] = _staging.Staging(device)
        return staging

    def _prepare(self, bucket: dist.GradBucket, work: torch.Tensor, done, ready, stream):
        """The bucket's submission to the exchanger (not made yet), and whether it is a
        compressed step. stream: False for the host exchange; for the device reducer, its
        stream (None on the CPU)."""
        params = bucket.parameters()
        ctx = self._context()
        if self._dense is None:
            # A fresh run's first iteration: learn the tensors, average densely.
            for p in params:
                self._index_of(p)
            return functools.partial(self._exchanger.submit_dense, work, ctx, done, ready), False
        on_device = stream is not False
        key, slots = self._group(bucket.index(), params, work.numel(),
                                 work.device if on_device else None)
        compressed = self.step >= self.dense_steps
        if compressed and self._exchanger.momentum_in_memory and self._optimizer_ref() is None:
            raise ValueError(
                f"gradcomp: {self.compressor} keeps the optimizer's momentum in its memory; "
                "create the optimizer with gradcomp.torch.SGD(params, lr=..., momentum=..., "
                "state=state) so that it skips momentum on compressed tensors and the "
                "exchange sees its learning rate and momentum"
            )
        if on_device:
            submit = functools.partial(
                self._exchanger.submit_device, key, work, slots, compressed, ctx, done, stream)
        else:
            submit = functools.partial(
                self._exchanger.submit, key, work, slots, compressed, ctx, done, ready)
        return submit, compressed

    def _agree_first_step(self) -> bool:
        """At the last bucket of this process's first step: the ranks agree on what they
        exchange from now on (the compressor in use, the step, the model's tensors in DDP's
        buckets), then the held buckets go to the exchanger. Ranks that differ would issue
        collectives of different sizes, which Gloo answers with an abort; instead every
        rank fails every bucket with the same ValueError. Nothing was submitted yet in this
        process, so the agreement runs here, on the caller's thread, before the exchange
        thread issues anything. Returns whether the ranks agree (a peer lost meanwhile fails
        the buckets with gradcomp.CommError alike)."""
        held, self._held = self._held, []
        try:
            self._exchanger.agree(self._first_step_fields())
        except Exception as e:  # noqa: BLE001 (every held bucket fails with it)
            self._refused = e
            for _, future in held:
                _C.fail_future(future, e)
            return False
        self._agreed = True
        self._seen = []
        for submit, _ in held:
            submit()
        return True

    def _first_step_fields(self) -> List[Tuple[str, str]]:
        """What the ranks must hold alike at their first step, settings first (as
        gradcomp/config_agreement.h wants: the first difference is the one named). A tensor
        reads with its DDP bucket: the same model in other buckets (bucket_cap_mb differs
        and find_unused_parameters keeps DDP from using one bucket at first) shows so."""
        n = len(self._seen)
        tensors = [
            (f"tensor {i}", f"{list(shape)} in DDP bucket {b} of {n}")
            for b, bucket in enumerate(self._seen)
            for i, shape in bucket
        ]
        dense = "(learned at this step)" if self._dense is None else str(
            [i for i, d in enumerate(self._dense) if d])
        return [
            ("compressor in use", self.compressor),
            ("step", str(self.step)),
            ("tensors", str(len(tensors))),
            *tensors,
            ("dense tensors (restored)", dense),
        ]

    @property
    def compressor(self) -> str:
        """The spec that runs: a bare biased codec ("topk") reads ef(...) or, once a
        gradcomp.torch.SGD with momentum is attached, efm(...)."""
        return self._exchanger.compressor

    def _attach_optimizer(self, optimizer: "SGD", momentum: float, nesterov: bool) -> None:
        self._optimizer = weakref.ref(optimizer)
        # The method for this optimizer (Method::with_momentum), as gradcomp train and
        # GradientExchange parse it: momentum-corrected error feedback for a bare biased
        # codec under momentum SGD; a memory that keeps the momentum (dgc, sketched-sgd,
        # fetchsgd) must have the optimizer's (ValueError otherwise).
        self._exchanger.use_momentum(momentum, nesterov)

    def _context(self) -> "_C.StepContext":
        ctx = _C.StepContext()
        ctx.seed = self.seed
        ctx.step = self.step
        ctx.steps_per_epoch = self.steps_per_epoch
        ctx.total_steps = self.total_steps or 0
        opt = self._optimizer_ref()
        if opt is not None:
            group = opt.param_groups[0]
            ctx.lr = float(group["lr"])
            ctx.momentum = float(group.get("momentum", 0.0))
            ctx.nesterov = bool(group.get("nesterov", False))
        return ctx

    def _end_step(self, compressed: bool) -> None:
        if self._dense is None:
            self._dense = list(
                _C.dense_tensors(self._params, self.min_elements, self.dense_share)
            )
            sizes = [p[1] for p, dense in zip(self._params, self._dense) if not dense]
            for line in _C.start_warnings(
                self.compressor, self.steps_per_epoch, self.total_steps or 0, sizes
            ):
                self._warn(line)
        if self._threshold_grads:
            line = _C.threshold_warning(self.compressor, self._threshold_grads, self.step)
            if line is not None:
                self._warn(line)
            self._threshold_check_due = False
            self._threshold_grads = []
        self._compressed_last_step = compressed
        self.step += 1

    def _warn(self, line: str) -> None:
        """A start-of-run warning (Method::start_warnings), emitted once, on rank 0."""
        if self._exchanger.rank == 0:
            warnings.warn(f"gradcomp: {line.removeprefix('warning: ')}", stacklevel=3)

    def _index_of(self, p: torch.Tensor) -> int:
        i = self._index.get(id(p))
        if i is not None:
            return i
        i = self._next_index
        if p.is_complex():
            # DDP lays a complex tensor into a float32 bucket as twice its elements (a view
            # as real pairs): its shape would describe half the values.
            raise TypeError(
                f"gradcomp hook: tensor {i} is {p.dtype}; gradcomp exchanges real float32, "
                "bfloat16 and float16 gradients (keep complex parameters as real pairs, "
                "torch.view_as_real)"
            )
        described = (f"param{i}", p.numel(), p.dim(), p.shape[0] if p.dim() >= 2 else 0)
        if i < len(self._params):
            if tuple(self._params[i][1:]) != described[1:]:
                saved = self._params[i]
                raise ValueError(
                    f"gradcomp: tensor {i} has {p.numel()} elements in {p.dim()} dimensions "
                    f"({described[3]} rows), shape {tuple(p.shape)}, but the restored state "
                    f"was saved for {saved[1]} elements in {saved[2]} dimensions ({saved[3]} "
                    "rows): not the model (or the parameter order) it was saved with"
                )
        else:
            if self._dense is not None:
                raise ValueError(
                    f"gradcomp: a tensor of shape {tuple(p.shape)} appeared after the first "
                    "step; the hook needs every parameter to be in some bucket from step 0"
                )
            self._params.append(described)
        self._index[id(p)] = i
        self._next_index += 1
        return i

    def _group(self, index: int, params: List[torch.Tensor], numel: int,
               device: Optional[torch.device] = None):
        tensors = [self._index_of(p) for p in params]
        group = self._groups.get(index)
        if group is not None and group[1] == tensors:
            return group[0], group[2]
        # First sight of this bucket, or DDP rebuilt its buckets: a new group, into which
        # its tensors' memories move from wherever they were.
        slots = []
        offset = 0
        for i, p in zip(tensors, params):
            rows = p.shape[0] if p.dim() >= 2 else 0
            slots.append((i, offset, p.numel(), rows, not self._dense[i]))
            offset += p.numel()
        if offset != numel:
            raise RuntimeError(
                f"gradcomp hook: bucket {index} holds {numel} elements, its parameters {offset}"
            )
        for i in tensors:
            if i in self._owner:
                self._retire(self._owner[i])
        saved = {}
        for i in tensors:
            for name, values in self._floating.pop(i, {}).items():
                saved[f"bucket{i}.{name}"] = values
        key = self._next_key
        self._next_key += 1
        self._exchanger.restore(key, slots, saved, device)
        for i in tensors:
            self._owner[i] = key
        self._groups[index] = (key, tensors, slots)
        return key, slots

    def _retire(self, key: int) -> None:
        """Moves a group's memory state to the floating pool and forgets the group."""
        for i, values in self._group_state(key).items():
            self._floating[i] = values
        self._exchanger.drop(key)
        self._owner = {i: k for i, k in self._owner.items() if k != key}
        self._groups = {b: g for b, g in self._groups.items() if g[0] != key}

    def _group_state(self, key: int) -> Dict[int, Dict[str, torch.Tensor]]:
        out: Dict[int, Dict[str, torch.Tensor]] = {}
        for name, values in self._exchanger.state(key):
            tensor_id, _, rest = name.partition(".")
            out.setdefault(int(tensor_id[len("bucket"):]), {})[rest] = values
        return out

    def _optimizer_ref(self):
        return self._optimizer() if self._optimizer is not None else None

    def _momentum_skipped(self) -> set:
        """ids of the parameters whose momentum lives in gradcomp's memories this step."""
        if not (self._exchanger.momentum_in_memory and self._compressed_last_step):
            return set()
        return {pid for pid, i in self._index.items() if not self._dense[i]}

    # ---- public -------------------------------------------------------------------------

    @property
    def schedule(self) -> str:
        """The compressor's effective schedule in this run, one line ('' if it has none):
        DGC's density warm-up, bounded by ``total_steps``."""
        return _C.schedule(self.compressor, self.steps_per_epoch, self.total_steps or 0)

    @property
    def on_device(self) -> bool:
        """Whether CUDA buckets are compressed on their GPU, only messages (PowerSGD: its
        P and Q factors) and the dense tensors crossing to the host (the compressor is an
        allgather of a codec in ``gradcomp.device_codec_names()`` under ``ef``, ``efm`` or
        ``noef``, ``dgc``, or ``powersgd``), rather than staged through host memory. The first step
        is staged either way. Read it after attaching ``gradcomp.torch.SGD``, which can turn
        a bare codec into ``efm(...)``."""
        return self._exchanger.device_supported

    @property
    def describe(self) -> str:
        """The exchange, e.g. ``allgather(efm(topk:ratio=0.01,...))``."""
        return self._exchanger.describe

    def stats(self) -> Dict[str, Any]:
        """What the exchange cost so far: totals and per-step means.

        Keys: ``steps``; ``bytes_sent_per_step`` / ``bytes_received_per_step`` (payload
        bytes this rank put on / took off the wire, Gloo's ring algorithms counted
        exactly); ``dense_bytes_per_step`` (what a dense fp32 ring allreduce sends);
        ``compression_ratio`` (dense / sent; None when nothing is sent, e.g. one rank);
        ``encode_seconds_per_step``, ``comm_seconds_per_step``, ``decode_seconds_per_step``
        (time on the exchange thread; communication overlaps the backward pass);
        ``dense_fallbacks`` (tensor-steps sent in the dense allreduce because their gathered
        messages would have cost more bytes, e.g. DGC's warm-up on many ranks);
        ``non_finite_skips`` (bucket-steps not exchanged because a gradient overflowed on
        some rank, under ``grad_scaler``).
        """
        self._exchanger.drain()
        for k, v in self._exchanger.take_stats().items():
            self._totals[k] += v
        t = self._totals
        steps = max(t["steps"], 1)
        world = self._exchanger.world_size
        numel = sum(p[1] for p in self._params)
        dense = 2 * (world - 1) * 4 * numel // world
        sent = t["bytes_sent"] / steps
        return dict(
            steps=t["steps"],
            bytes_sent_per_step=sent,
            bytes_received_per_step=t["bytes_received"] / steps,
            dense_bytes_per_step=dense,
            compression_ratio=(dense / sent) if sent > 0 else None,
            encode_seconds_per_step=t["encode_seconds"] / steps,
            comm_seconds_per_step=t["comm_seconds"] / steps,
            decode_seconds_per_step=t["decode_seconds"] / steps,
            dense_fallbacks=t["dense_fallbacks"],
            non_finite_skips=t["non_finite_skips"],
        )

    def state_dict(self) -> Dict[str, Any]:
        """Everything a resumed run needs: the step, the layout and every memory's state."""
        self._exchanger.drain()
        memories = {i: dict(v) for i, v in self._floating.items()}
        for key in sorted(set(self._owner.values())):
            for i, values in self._group_state(key).items():
                memories[i] = {name: t.clone() for name, t in values.items()}
        return {
            "format": _FORMAT,
            "compressor": self._given_compressor,
            "rank": self._exchanger.rank,
            "world_size": self._exchanger.world_size,
            "step": self.step,
            "params": list(self._params),
            "dense": None if self._dense is None else list(self._dense),
            "memories": memories,
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restores a state_dict() before the first step of a resumed run: this rank's own
        (the memories are per rank; save one file per rank)."""
        if not isinstance(state, dict) or state.get("format") != _FORMAT:
            found = state.get("format") if isinstance(state, dict) else type(state).__name__
            raise ValueError(f"gradcomp: not a {_FORMAT} state (format {found!r})")
        missing = [k for k in ("compressor", "step", "params", "dense", "memories")
                   if k not in state]
        if missing:
            raise ValueError(f"gradcomp: the state lacks {', '.join(missing)}: not a whole "
                             "CompressionState.state_dict()")
        check_saved_rank("gradcomp", state, self._exchanger.rank, self._exchanger.world_size)
        if state["compressor"] != self._given_compressor:
            raise ValueError(
                f"gradcomp: the state was saved with {state['compressor']!r}, "
                f"this run compresses with {self._given_compressor!r}"
            )
        if self.step != 0 or self._groups or self._index:
            raise RuntimeError("gradcomp: load_state_dict() must come before the first step")
        _check_state_shapes(state)
        self.step = int(state["step"])
        self._params = [tuple(p) for p in state["params"]]
        self._dense = None if state["dense"] is None else list(state["dense"])
        self._floating = {int(i): dict(v) for i, v in state["memories"].items()}


def _check_state_shapes(state: Dict[str, Any]) -> None:
    """The containers of a CompressionState.state_dict(), before any is used: a state
    edited or cut elsewhere raises ValueError naming the part, not a KeyError or
    IndexError from deep inside a later step. (The values are checked where they are
    used: each tensor's shape at its first step, each memory's size and finiteness.)"""
    def bad(what: str) -> ValueError:
        return ValueError(f"gradcomp: the state's {what}: not a CompressionState.state_dict()")

    step, params, dense, memories = (state[k] for k in ("step", "params", "dense", "memories"))
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise bad(f"step is {step!r}, not a count")
    if not isinstance(params, (list, tuple)) or not all(
            isinstance(p, (list, tuple)) and len(p) == 4 for p in params):
        raise bad("params are not a list of (name, elements, dimensions, rows)")
    if dense is not None and (not isinstance(dense, (list, tuple)) or len(dense) != len(params)):
        raise bad(f"dense flags are not one per tensor ({len(params)} tensors)")
    if not isinstance(memories, dict) or not all(
            isinstance(i, int) and 0 <= i < len(params) and isinstance(m, dict)
            and all(isinstance(t, torch.Tensor) for t in m.values())
            for i, m in memories.items()):
        raise bad(f"memories are not tensors by tensor index (0 to {len(params) - 1})")


_BUCKET_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _as_text(value: Any, kind) -> str:
    """A setting as the hook uses it (0 and 0.0, 1e-2 and 0.01 read alike), or as given
    when it is not one (it is refused after the agreement)."""
    try:
        return str(kind(value))
    except (TypeError, ValueError):
        return repr(value)


# How each setting of CompressionState reads in the ranks' agreement, in the order a
# difference is reported.
_SETTINGS = (
    ("compressor", str), ("reducer", str), ("dense_share", float), ("min_elements", int),
    ("dense_steps", int), ("seed", int), ("steps_per_epoch", int),
    ("total_steps", lambda v: None if v is None else int(v)),
    ("loss_scaling", str),
)


def _grad_scaler_types() -> Tuple[type, ...]:
    """torch.amp.GradScaler (torch 2.3 on) and torch.cuda.amp.GradScaler, where they exist."""
    owners = (getattr(torch, "amp", None), getattr(torch.cuda, "amp", None))
    return tuple(t for t in (getattr(o, "GradScaler", None) for o in owners) if isinstance(t, type))


def _loss_scaling(grad_scaler: Any) -> str:
    """The grad_scaler setting as the ranks compare it: "on" for an enabled GradScaler,
    "off" for None or a disabled one, else what was given (refused after the agreement)."""
    if grad_scaler is None:
        return "off"
    if not isinstance(grad_scaler, _grad_scaler_types()):
        return f"a {type(grad_scaler).__name__}"
    return "on" if grad_scaler.is_enabled() else "off"



def _settings(compressor, reducer, dense_share, min_elements, dense_steps, seed,
              steps_per_epoch, total_steps, grad_scaler) -> Dict[str, Any]:
    """CompressionState's arguments as the settings every rank must be given alike."""
    return dict(compressor=compressor, reducer=reducer, dense_share=dense_share,
                min_elements=min_elements, dense_steps=dense_steps, seed=seed,
                steps_per_epoch=steps_per_epoch, total_steps=total_steps,
                loss_scaling=_loss_scaling(grad_scaler))


def _settings_fields(settings: Dict[str, Any]) -> List[Tuple[str, str]]:
    """The settings every rank's CompressionState must be given alike, as (name, value)."""
    return [(name, _as_text(settings[name], kind)) for name, kind in _SETTINGS]


def _invalid_settings(s: Dict[str, Any]) -> Optional[Exception]:
    """The error a bad setting raises, returned (not raised); None when all are valid:
    the compressor checked as the exchanger checks it, with the reducer."""
    try:
        for name in ("compressor", "reducer"):
            if not isinstance(s[name], str):
                raise TypeError(f"{name} must be a str, got {s[name]!r}")
        for name in ("min_elements", "dense_steps", "steps_per_epoch", "seed", "total_steps"):
            v = s[name]
            if (v is not None or name != "total_steps") and (
                    isinstance(v, bool) or not hasattr(v, "__index__")):
                raise TypeError(f"{name} must be an int, got {v!r}")
        if s["loss_scaling"] not in ("on", "off"):
            raise TypeError(f"grad_scaler must be a torch.amp.GradScaler or None, got "
                            f"{s['loss_scaling']}")
        if isinstance(s["dense_share"], bool) or not isinstance(s["dense_share"], (int, float)):
            raise TypeError(f"dense_share must be a number, got {s['dense_share']!r}")
        _C.validate_spec(s["compressor"], s["reducer"])
        if not 0.0 <= s["dense_share"] <= 1.0:
            raise ValueError(f"dense_share must be in [0, 1], got {s['dense_share']}")
        if min(s["min_elements"], s["dense_steps"], s["steps_per_epoch"], s["seed"]) < 0:
            raise ValueError("min_elements, dense_steps, steps_per_epoch and seed must be >= 0")
        if s["total_steps"] is not None and s["total_steps"] < 0:
            raise ValueError(f"total_steps must be >= 0 or None, got {s['total_steps']}")
    except (TypeError, ValueError) as e:
        return e
    return None


def hook(state: "CompressionState", bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: ``ddp.register_comm_hook(state, gradcomp.torch.hook)``.

    Exchanges the bucket's gradients with the state's compressor and returns a future of
    the bucket holding their mean over all ranks. Works with any number of buckets and
    any model: the exchanges run one at a time, in bucket order, on every rank.
    A dead or stalled peer fails the future (and so ``loss.backward()``) with
    ``gradcomp.CommError`` within the state's timeout; any other error of the exchange
    (``ValueError`` for a non-finite gradient, unless the state has a ``grad_scaler``)
    fails it as itself. Buckets may be
    float32, bfloat16 or float16, on the CPU or a CUDA device (exchanged as fp32 in host
    memory).
    """
    return state._exchange(bucket)


class SGD(torch.optim.Optimizer):
    """SGD (torch.optim.SGD's update, with momentum, Nesterov and weight decay) that
    cooperates with a :class:`CompressionState`.

    Compressors that keep the optimizer's momentum in their memory (``efm(...)``,
    ``dgc``, ``sketched-sgd``, ``fetchsgd``, and a bare biased codec such as ``topk`` or
    ``2bit`` once this optimizer with momentum > 0 is attached: it then runs as
    ``efm(...)``, momentum-corrected error feedback) apply momentum *before* compression, so the
    optimizer must not apply it again to the tensors they compressed; this optimizer
    skips it there (and keeps it for dense tensors and dense steps), and gives the
    exchange its learning rate, momentum and Nesterov flag. With any other compressor
    it is plain SGD.
    """

    def __init__(
        self,
        params,
        lr: float,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        *,
        state: "CompressionState",
    ) -> None:
        if lr <= 0.0 or momentum < 0.0 or weight_decay < 0.0:
            raise ValueError(f"SGD: lr {lr} must be > 0, momentum and weight_decay >= 0")
        if nesterov and momentum == 0.0:
            raise ValueError("SGD: nesterov needs momentum > 0")
        if not isinstance(state, CompressionState):
            raise TypeError(f"SGD: state must be the gradcomp.torch.CompressionState whose hook "
                            f"the model runs, got {type(state).__name__}")
        super().__init__(
            params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, nesterov=nesterov)
        )
        self._gradcomp = state
        state._attach_optimizer(self, momentum, nesterov)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        skipped = self._gradcomp._momentum_skipped()
        for group in self.param_groups:
            lr, m = group["lr"], group["momentum"]
            wd, nesterov = group["weight_decay"], group["nesterov"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                d = p.grad
                if wd != 0.0:
                    d = d.add(p, alpha=wd)
                if m != 0.0 and id(p) not in skipped:
                    st = self.state[p]
                    buf = st.get("momentum_buffer")
                    if buf is None:
                        buf = st["momentum_buffer"] = d.clone()
                    else:
                        buf.mul_(m).add_(d)
                    d = d.add(buf, alpha=m) if nesterov else buf
                elif m != 0.0:
                    self.state[p].pop("momentum_buffer", None)
                p.add_(d, alpha=-lr)
        return loss
