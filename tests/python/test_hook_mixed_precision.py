"""bfloat16 and float16 gradient buckets through gradcomp.torch's hook (a model in that
dtype, as mixed precision gives): exchanged as fp32 copies, written back in the dtype."""
import pytest
import torch

import ddp_support
import workers

pytestmark = pytest.mark.skipif(
    int(torch.__version__.split(".")[0]) < 2,
    reason="torch < 2: its Gloo refuses bfloat16 (at DDP's first broadcast) and its CPU has "
           "no float16 convolution; run on a torch 2 lane",
)

DTYPES = ["bfloat16", "float16"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("spec", ["none", "fp16"])
def test_matches_ddp_averaging_within_the_dtype(dtype, spec):
    # In units of the dtype's eps times the tensor's largest mean gradient: the hook rounds
    # an fp32 mean once, DDP sums in the dtype (measured with an emulation of 'none' on
    # torch 2.13: 0 for bfloat16, 0.38 for float16).
    for worst in ddp_support.run(workers.mixed_precision_equals_ddp, 2, dtype, spec, 3):
        assert max(worst) <= 4.0, worst


@pytest.mark.parametrize("dtype", DTYPES)
def test_efm_topk_trains_and_keeps_fp32_memories(dtype):
    results = ddp_support.run(workers.mixed_precision_trains, 2, dtype, "efm(topk:ratio=0.01)", 5)
    (losses0, flat0, memories0), (_, flat1, _) = results
    assert all(torch.isfinite(torch.tensor(losses0))), losses0
    assert torch.equal(flat0, flat1), "replicas diverged"
    assert memories0 == {"torch.float32"}, memories0
