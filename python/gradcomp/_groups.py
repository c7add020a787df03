"""The process group gradcomp's exchange runs on (the DDP hook's and DiLoCo's)."""
import torch.distributed as dist


def exchange_group(group: dist.ProcessGroup) -> dist.ProcessGroup:
    """The group gradcomp exchanges over. For the default group: a Gloo group over all
    ranks of the exchange's own, created here (every rank builds its state at the same
    point, as new_group needs). Its own, even where the default group has Gloo: the
    exchange runs on a thread of its own while backward goes on, and DDP issues
    collectives of its own on its group meanwhile (the map of used parameters under
    find_unused_parameters, and static_graph's first step); two threads' collectives on
    one Gloo group pair differently across ranks, and Gloo aborts the process. Gloo, since
    gradcomp's exchange moves host bytes, which NCCL does not carry (and NCCL refuses two
    ranks on one GPU).

    Another group is used as given when it has a Gloo backend (the caller keeps other
    collectives off it during backward), and is otherwise left to the exchange, which
    refuses it in one line: a Gloo group over its ranks would need every process of the
    job to take part."""
    if group is dist.distributed_c10d._get_default_group():
        return dist.new_group(backend="gloo")
    return group
