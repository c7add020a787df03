"""The process group gradcomp's exchange runs on (the DDP hook's and DiLoCo's)."""
import torch.distributed as dist


def exchange_group(group: dist.ProcessGroup) -> dist.ProcessGroup:
    """The group gradcomp exchanges over: the user's, when it has a Gloo backend for CPU
    tensors; for an NCCL-only default group, a Gloo group over all ranks, created here
    (every rank builds its state at the same point, as new_group needs). gradcomp's exchange
    moves host bytes, which NCCL does not carry (and NCCL refuses two ranks on one GPU).
    Another group without Gloo is left to the exchange, which refuses it in one line: a
    Gloo group over its ranks would need every process of the job to take part."""
    if "gloo" in str(dist.get_backend(group)).lower():
        return group
    if group is not dist.distributed_c10d._get_default_group():
        return group
    return dist.new_group(backend="gloo")
