"""gradcomp.torch's DDP hook on real processes over Gloo (127.0.0.1)."""
import pytest
import torch

import ddp_support
import workers

import gradcomp.torch as gc


def test_none_equals_ddp_averaging_on_several_buckets():
    results = ddp_support.run(workers.dense_equals_ddp, 2, 3)
    for worst, n_params, describe in results:
        assert worst <= 1e-6, worst
        assert n_params == 8
        assert describe == "dense"


def test_ef_topk_equals_the_reducer_definition():
    for worst in ddp_support.run(workers.topk_equals_reference, 3, 0.05):
        assert worst <= 1e-6, worst


SPECS = [
    "ef(topk:ratio=0.05)",
    "efm(topk:ratio=0.05)",
    "noef(randomk:ratio=0.1)",
    "2bit",
    "qsgd",
    "terngrad",
    "efsign",
    "fp16",
    "dgc:density=0.01,warmup_epochs=0",
    "powersgd:rank=2",
    "sketched-sgd",
    "fetchsgd",
    "atomo:budget=2",
]


@pytest.mark.parametrize("spec", SPECS)
def test_every_spec_trains_a_multi_bucket_model(spec):
    results = ddp_support.run(workers.train_spec, 2, spec, 5)
    (losses0, flat0, stats0, describe), (losses1, flat1, _, _) = results
    assert all(torch.isfinite(torch.tensor(losses0)))
    assert torch.equal(flat0, flat1), "replicas diverged"
    assert stats0["steps"] == 5
    assert stats0["bytes_sent_per_step"] > 0
    if spec in ("2bit", "efsign"):
        # A bare biased codec under gc.SGD(momentum=0.9): momentum-corrected error feedback.
        assert f"efm({spec}:" in describe, describe


def test_bare_biased_codec_with_torch_sgd_is_plain_error_feedback():
    for describe in ddp_support.run(workers.bare_codec_with_torch_sgd, 2, "topk:ratio=0.1"):
        assert describe.startswith("allgather(ef(topk:"), describe


@pytest.mark.parametrize("spec", ["efm(topk:ratio=0.05)", "powersgd:rank=2", "fetchsgd"])
def test_resume_from_state_dict_is_bit_exact(spec, tmp_path):
    for exact, worst in ddp_support.run(workers.resume, 2, spec, 6, 3, str(tmp_path / "ck")):
        assert exact, f"resumed run differs by {worst}"


def test_bad_spec_raises_value_error():
    with pytest.raises(ValueError, match="unknown"):
        gc.CompressionState("topkk")


def test_momentum_in_memory_without_gradcomp_sgd_is_refused():
    results = ddp_support.run(workers.momentum_without_optimizer, 2, allow_errors=True)
    for r in results:
        assert "error" in r
        assert "gradcomp.torch.SGD" in r["error"]


def test_a_killed_peer_makes_the_survivor_raise():
    results = ddp_support.run(workers.dead_peer, 2, 10.0, timeout=90, allow_errors=True)
    survivor = results[0]
    assert "ok" in survivor, survivor
    out = survivor["ok"]
    assert out["raised"] is not None, out
    assert out["after"] < 30, out


def test_start_of_run_warnings_on_rank_0():
    # DGC's 4 warm-up epochs of 10 steps cover a 20-step run: capped at 2.5 steps.
    (w0, schedule0), (w1, _) = ddp_support.run(workers.run_warnings, 2, "dgc:density=0.01", 3,
                                                10, 20)
    assert len(w0) == 1 and "covers the whole run of 20 steps; capped at 2.5 steps" in w0[0], w0
    assert w1 == []  # rank 0 only
    assert schedule0.startswith("dgc warm-up: 2.5 steps of 20"), schedule0
    # A fixed 2-bit threshold far above the gradients: once, after step 10.
    (w0, schedule0), _ = ddp_support.run(workers.run_warnings, 2, "2bit:threshold=50", 13, 0, None)
    assert len(w0) == 1 and "2bit: threshold=50 is" in w0[0] and "at step 10" in w0[0], w0
    assert schedule0 == ""
    (w0, _), _ = ddp_support.run(workers.run_warnings, 2, "2bit", 12, 0, None)
    assert w0 == []
