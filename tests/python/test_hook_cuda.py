"""The hook on CUDA buckets (runs where there is a GPU: scripts/gpu-check.sh; skipped in CI,
whose check of the same bookkeeping on CPU is test_hook.py's forced staging).

Two ranks share the one GPU over Gloo (NCCL refuses two ranks on one device); a world of one
runs over "cpu:gloo,cuda:nccl", DDP's own collectives on NCCL and gradcomp's on Gloo."""
import pytest
import torch

import ddp_support
import workers

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def test_dense_equals_ddp_on_cuda_two_ranks_over_gloo():
    for worst, n_params, describe in ddp_support.run(workers.dense_equals_ddp, 2, 3, "cuda"):
        assert worst <= 1e-6, worst
        assert describe == "dense"


def test_ef_topk_equals_the_reducer_definition_on_cuda():
    for worst in ddp_support.run(workers.topk_equals_reference, 2, 0.05, "cuda"):
        assert worst <= 1e-6, worst


@pytest.mark.parametrize("spec", ["efm(topk:ratio=0.05)", "2bit", "powersgd:rank=2", "dgc"])
def test_replicas_stay_identical_on_cuda(spec):
    (losses0, flat0, stats, _), (_, flat1, _, _) = ddp_support.run(
        workers.train_spec, 2, spec, 6, "cuda")
    assert torch.equal(flat0, flat1)
    assert all(loss == loss for loss in losses0)
    assert stats["compression_ratio"] > 1.0, stats


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_mixed_precision_cuda_buckets_equal_ddp(dtype):
    for worst in ddp_support.run(workers.mixed_precision_equals_ddp, 2, dtype, "none", 3, "cuda"):
        assert max(worst) <= 1.0, worst


def test_a_world_of_one_over_gloo_and_nccl():
    for worst, n_params, describe in ddp_support.run(
            workers.dense_equals_ddp, 1, 3, "cuda", backend="cpu:gloo,cuda:nccl"):
        assert worst <= 1e-6, worst
    (losses, _, stats, describe), = ddp_support.run(
        workers.train_spec, 1, "efm(topk:ratio=0.01)", 4, "cuda", backend="cpu:gloo,cuda:nccl")
    assert all(loss == loss for loss in losses)


def test_an_nccl_only_job_exchanges_over_a_gloo_group_of_its_own():
    (losses, _, _, _), = ddp_support.run(
        workers.train_spec, 1, "efm(topk:ratio=0.01)", 4, "cuda", backend="nccl")
    assert all(loss == loss for loss in losses)
