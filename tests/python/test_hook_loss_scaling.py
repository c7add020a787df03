"""fp16 autocast's loss scaling (torch.amp.GradScaler) through gradcomp.torch's hook:
compressed tensors are exchanged unscaled, and a step that overflows on any rank is
skipped on every rank with no memory changed, as DDP's allreduce lets the scaler do.
On the CPU (GradScaler("cpu")): CI has no GPU; the CUDA path runs the same code on the
side stream (tests/python/test_hook_cuda.py)."""
import pytest
import torch

import ddp_support
import scaler_workers

pytestmark = pytest.mark.skipif(
    not hasattr(torch, "amp") or not hasattr(torch.amp, "GradScaler"),
    reason="torch.amp.GradScaler (for the CPU) arrived in torch 2.3",
)

# A threshold codec (2-bit's threshold is in gradient units: scaled gradients would all
# cross it), error feedback with momentum in its memory, PowerSGD, and fp16 under the
# allreduce reducer; the host path, CPU buckets staged as CUDA buckets are, and the device
# reducers on CPU tensors.
SPECS = ["efm(topk:ratio=0.05)", "ef(2bit:threshold=0.002)", "powersgd:rank=2", "fp16"]
SWITCHES = [None, "GRADCOMP_FORCE_STAGING", "GRADCOMP_FORCE_DEVICE"]
# Against a run without the overflowing step, whose steps are numbered one less: codecs
# that draw from the step's seed (top-k's sampled threshold) are left out.
DETERMINISTIC = ["efm(topk:ratio=0.05,select=exact)", "ef(2bit:threshold=0.002)",
                 "powersgd:rank=2", "fp16", "none"]


@pytest.mark.parametrize("switch", SWITCHES)
@pytest.mark.parametrize("spec", SPECS)
def test_a_scaled_run_equals_the_unscaled_one_bit_for_bit(spec, switch):
    for same_weights, same_memories, scales, skips in ddp_support.run(
            scaler_workers.scaled_equals_unscaled, 2, spec, 6, switch):
        assert same_weights and same_memories, (same_weights, same_memories)
        assert scales == [2.0**10, 2.0**11, 2.0**11, 2.0**12, 2.0**12, 2.0**13], scales
        assert skips == 0


@pytest.mark.parametrize("switch", SWITCHES)
@pytest.mark.parametrize("spec", DETERMINISTIC)
def test_an_overflow_on_one_rank_skips_the_step_on_every_rank(spec, switch):
    results = ddp_support.run(scaler_workers.overflow_skips_the_step, 2, spec, 6, 3, switch)
    for same_weights, same_memories, scales, skips, _ in results:
        assert same_weights and same_memories, (same_weights, same_memories)
        assert scales == [2.0**10] * 3 + [2.0**9] * 3, scales
        # none: no agreement, no skip counted; its sum carries the inf to every rank.
        assert (skips == 0) if spec == "none" else (skips >= 1), skips
    assert torch.equal(results[0][4], results[1][4]), "replicas diverged"


@pytest.mark.parametrize("switch", [None, "GRADCOMP_FORCE_DEVICE"])
def test_an_overflow_under_the_scatter_reducer(switch):
    # Each rank averages 1/W of every tensor from the others' slices: the agreement comes
    # before the first of its two phases.
    results = ddp_support.run(scaler_workers.overflow_skips_the_step, 2,
                              "efm(int:bits=2,block=7)", 6, 3, switch, "cpu", "scatter")
    for same_weights, same_memories, scales, skips, _ in results:
        assert same_weights and same_memories, (same_weights, same_memories)
        assert scales == [2.0**10] * 3 + [2.0**9] * 3 and skips >= 1, (scales, skips)


def test_a_scaler_on_one_rank_only_is_refused_on_every_rank():
    for error in ddp_support.run(scaler_workers.scaler_on_one_rank, 2):
        assert error is not None and error[0] == "ValueError", error
        assert "loss_scaling: rank 0 has on, rank 1 has off" in error[1], error


def test_a_scaler_of_the_wrong_type_is_a_type_error():
    for error in ddp_support.run(scaler_workers.scaler_of_the_wrong_type, 2):
        assert error == ("TypeError", "grad_scaler must be a torch.amp.GradScaler or None, "
                         "got a str"), error


def test_a_disabled_scaler_is_no_scaler():
    assert ddp_support.run(scaler_workers.disabled_scaler, 2) == [False, False]


def test_the_fixed_threshold_check_judges_the_unscaled_gradients():
    # Scaled by 2^20 the gradients are near threshold=50; unscaled they are far below it.
    w0, w1 = ddp_support.run(scaler_workers.threshold_warning, 2, "2bit:threshold=50", 12)
    assert len(w0) == 1 and "2bit: threshold=50 is" in w0[0] and "at step 10" in w0[0], w0
    assert w1 == []
