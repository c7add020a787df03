"""gradcomp.torch.DiLoCo with CUDA parameters (runs where there is a GPU: scripts/gpu-check.sh;
skipped in CI, whose check of the same bookkeeping on CPU is test_diloco.py's forced
staging). Two ranks share the one GPU; the rounds run over Gloo on pinned host copies."""
import pytest
import torch

import ddp_support
import diloco_workers

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@pytest.mark.parametrize("spec,outer,fragments,delay,mix", [
    ("fp16", "nesterov:lr=0.7,momentum=0.9", 1, 0, 0.0),
    ("ef(topk:ratio=0.05)", "average", 2, 1, 0.25)])
def test_cuda_parameters_train_as_cpu_parameters_bit_for_bit(spec, outer, fragments, delay, mix):
    # The inner steps are subtractions of the same deltas, exact on either device: the
    # rounds then see the same weights, and the replicas stay the same bits.
    for same, merged, staged_merged in ddp_support.run(
            diloco_workers.staged_equals_in_place, 2, "cuda", spec, outer, fragments, delay, mix):
        assert all(same), same
        assert merged == staged_merged and sum(merged) >= 2, merged


def test_a_cuda_bfloat16_replica_trains_as_a_rounded_float32_one():
    for same, merged_alike, kept in ddp_support.run(
            diloco_workers.sixteen_bit_equals_rounded_float32, 2, "cuda", "bfloat16",
            "ef(topk:ratio=0.05)", "average", 2, 1, 0.25):
        assert all(same), same
        assert merged_alike and kept


def test_an_nccl_only_default_group_gets_a_gloo_group_beside_it():
    ((describe, rounds),) = ddp_support.run(diloco_workers.over_nccl_alone, 1, backend="nccl")
    assert describe.startswith("average every 2 steps"), describe
    assert rounds == 2
