"""Which process groups the hook exchanges over: Gloo's CPU backend, and nothing else."""
import pytest
import torch
import torch.distributed as dist

import ddp_support
import gradcomp.torch as gc
import workers


def _torch_major() -> int:
    return int(torch.__version__.split(".")[0])


@pytest.mark.parametrize("spec", ["none", "efm(topk:ratio=0.1)"])
def test_a_group_with_a_backend_per_device_exchanges_over_its_gloo(spec):
    # init_process_group("cpu:gloo,cuda:nccl") in a GPU job; "fake" stands in for NCCL here
    # (no CUDA): the group's collectives on CPU tensors, DDP's and gradcomp's, run on Gloo.
    if _torch_major() < 2:
        pytest.skip("a backend per device is torch 2.x")
    pytest.importorskip("torch.testing._internal.distributed.fake_pg")
    if spec == "none":
        for worst, n_params, describe in ddp_support.run(
                workers.dense_equals_ddp, 2, 3, backend="cpu:gloo,cuda:fake"):
            assert worst <= 1e-6, worst
            assert describe == "dense"
    else:
        (losses0, flat0, stats, _), (_, flat1, _, _) = ddp_support.run(
            workers.train_spec, 2, spec, 4, backend="cpu:gloo,cuda:fake")
        assert torch.equal(flat0, flat1)  # the replicas stay identical
        assert all(loss == loss for loss in losses0)
        assert stats["compression_ratio"] > 1.0, stats


# An NCCL-only default group gets a Gloo group of its own (CompressionState builds it
# with dist.new_group): tested on a GPU, test_hook_cuda.py. torch's "fake" backend cannot
# stand in for NCCL there: a Gloo group cannot be built over its store.


def test_another_group_without_gloo_for_cpu_is_refused_in_one_line():
    # A group without a Gloo backend that is not the default group: a Gloo group over its
    # ranks would need every process of the job, so the exchange refuses it (the message is
    # the exchange's own; "fake" stands in for NCCL).
    fake_pg = pytest.importorskip("torch.testing._internal.distributed.fake_pg")
    if _torch_major() < 2:
        pytest.skip("torch 1.x groups have one backend, checked by name")
    dist.init_process_group("fake", store=fake_pg.FakeStore(), rank=0, world_size=2)
    try:
        with pytest.raises(ValueError) as raised:
            gc._C.Exchanger(dist.group.WORLD, "fp16")
        message = str(raised.value)
        assert "\n" not in message
        assert "'fake' for CPU tensors" in message, message
        assert 'init_process_group("cpu:gloo,cuda:nccl")' in message, message
        assert 'dist.new_group(backend="gloo")' in message, message
    finally:
        dist.destroy_process_group()
