"""The hook on CUDA buckets (runs where there is a GPU: scripts/gpu-check.sh; skipped in CI,
whose check of the same bookkeeping on CPU is test_hook.py's forced staging).

Two ranks share the one GPU over Gloo (NCCL refuses two ranks on one device); a world of one
runs over "cpu:gloo,cuda:nccl", DDP's own collectives on NCCL and gradcomp's on Gloo."""
import pytest
import torch

import ddp_support
import scaler_workers
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


# Exact gradients through the hook on CUDA buckets (the device path) and on CPU buckets
# (the host reducer), memories carried over 5 steps: the deterministic codecs' means are
# the same bits (their device codecs are the CPU codecs' byte for byte, and the means are
# summed in rank order on both); PowerSGD's products round differently on the GPU.
@pytest.mark.parametrize("spec,tolerance", [
    ("efm(topk:ratio=0.05)", 0.0), ("ef(topk:ratio=0.05,select=exact)", 0.0),
    ("2bit", 0.0), ("2bit:threshold=0.01", 0.0), ("ef(1bit)", 0.0),
    ("efm(efsign:block=4096)", 0.0), ("dgc:density=0.05", 0.0),
    ("dgc:density=0.05,nesterov=1,select=exact", 0.0), ("powersgd:rank=2", 1e-4),
    ("powersgd:rank=1,error_feedback=false", 1e-4)])
def test_cuda_device_path_equals_the_cpu_host_path(spec, tolerance):
    for worst, on_device in ddp_support.run(workers.buckets_on_two_devices_agree, 2, spec, 5):
        assert on_device
        assert worst <= tolerance, (spec, worst)


# reducer="scatter" on CUDA buckets: the device scatter reducer (src/device/scatter.cc)
# against the host one on CPU buckets, bit for bit.
@pytest.mark.parametrize("spec", ["int", "efm(int:bits=2,block=7)", "efm(topk:ratio=0.05)",
                                  "2bit"])
def test_cuda_device_scatter_equals_the_cpu_host_scatter(spec):
    for worst, on_device in ddp_support.run(workers.buckets_on_two_devices_agree, 2, spec, 5,
                                            ("cpu", "cuda"), False, "scatter"):
        assert on_device
        assert worst == 0.0, (spec, worst)


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


# torch.amp.GradScaler("cuda") through the hook: on the device path (unscaled on the side
# stream) and staged (fp16: unscaled before the copy to the host), against the same run
# without a scaler; and an overflow on rank 1 skipped on both ranks
# (tests/python/test_hook_loss_scaling.py runs the same on CPU buckets).
@pytest.mark.parametrize("spec", ["efm(topk:ratio=0.05,select=exact)",
                                  "ef(2bit:threshold=0.002)", "fp16"])
def test_loss_scaling_on_cuda(spec):
    for same_weights, same_memories, _, skips in ddp_support.run(
            scaler_workers.scaled_equals_unscaled, 2, spec, 6, None, "cuda"):
        assert same_weights and same_memories and skips == 0, (same_weights, same_memories)
    results = ddp_support.run(scaler_workers.overflow_skips_the_step, 2, spec, 6, 3, None, "cuda")
    for same_weights, same_memories, scales, skips, _ in results:
        assert same_weights and same_memories, (same_weights, same_memories)
        assert scales == [2.0**10] * 3 + [2.0**9] * 3 and skips >= 1, (scales, skips)
    assert torch.equal(results[0][4], results[1][4]), "replicas diverged"
