"""gradcomp.torch.DiLoCo (the outer loop) on real processes over Gloo (127.0.0.1)."""
import inspect

import pytest
import torch

import ddp_support
import diloco_workers
import gradcomp.torch as gc
from workers import raised, small_model


@pytest.mark.parametrize("outer_is_torch", [False, True])
def test_an_exact_exchange_is_diloco_written_with_torchs_own_sgd(outer_is_torch):
    for worst, describe, steps in ddp_support.run(
            diloco_workers.matches_torch_reference, 2, 3, 7, outer_is_torch):
        assert worst <= 1e-5, worst
        assert describe == "nesterov:lr=0.7,momentum=0.9 every 3 steps over dense", describe
        assert steps == 7


@pytest.mark.parametrize("spec,outer,reducer",
                         [("ef(topk:ratio=0.05)", "sparseloco:lr=0.9,decay=0.8", "auto"),
                          ("fp16", "nesterov", "auto"),
                          ("int", "nesterov", "scatter")])  # both stages' error feedback resume
def test_a_resumed_run_continues_bit_for_bit(spec, outer, reducer):
    for same, stats in ddp_support.run(diloco_workers.resumes_bit_for_bit, 2, spec, outer,
                                       reducer):
        assert same
        assert stats["rounds"] >= 1 and stats["bytes_sent"] > 0


def test_ranks_configured_differently_all_raise_the_same_line():
    results = ddp_support.run(diloco_workers.ranks_that_differ, 2)
    assert results[0] == results[1]
    kind, message = results[0]
    assert kind == "ValueError"
    assert "sync_every" in message and "4" in message and "8" in message


def test_bad_settings_are_refused_before_any_collective():
    (results,) = ddp_support.run(diloco_workers.bad_settings, 1)
    kinds = [r[0] if r else None for r in results]
    assert kinds == ["ValueError"] * 5 + ["TypeError"], results
    assert "sync_every" in results[0][1]
    assert "divisor" in results[1][1] or "divide" in results[1][1]
    assert "unknown codec 'bogus'" in results[2][1]
    assert "keeps none" in results[3][1]
    assert "scatter runs a codec under ef, efm, noef or bare" in results[4][1]


def test_check_refuses_what_the_constructor_refuses_without_a_process_group():
    (constructed,) = ddp_support.run(diloco_workers.bad_settings, 1)
    model = small_model(seed=0)
    checked = [raised(lambda: gc.DiLoCo.check(**kwargs))
               for kwargs in diloco_workers.bad_setting_kwargs(model)]
    assert checked == constructed
    gc.DiLoCo.check(sync_every=30)  # the defaults run
    gc.DiLoCo.check("sparseloco:lr=1,decay=0.95", sync_every=20, fragments=2, delay=3,
                    compressor="ef(chunktopk:values=2bit)")
    gc.DiLoCo.check(torch.optim.SGD(model.parameters(), lr=0.7, momentum=0.9, nesterov=True),
                    sync_every=8, compressor="int", reducer="scatter")


def test_check_takes_the_constructors_settings_with_their_defaults():
    settings = dict(inspect.signature(gc.DiLoCo.__init__).parameters)
    for not_a_setting in ("self", "model", "inner_optimizer", "process_group", "timeout"):
        del settings[not_a_setting]
    assert dict(inspect.signature(gc.DiLoCo.check).parameters) == settings


def test_a_parameter_replaced_after_construction_is_refused():
    # Before: the outer loop merged its stale copy of the old tensors and the model never
    # saw a round.
    (results,) = ddp_support.run(diloco_workers.parameters_replaced_after_construction, 1)
    for (kind, message), dtype in zip(results, ("Half", "Half", "Float")):
        assert kind == "ValueError", message
        assert "parameter 0.weight is no longer the tensor DiLoCo was built on" in message
        assert f"(now {dtype} on cpu)" in message, message


@pytest.mark.parametrize("name, value", [("sync_every", 2.7), ("fragments", 2.0),
                                         ("delay", True), ("min_elements", 1.5)])
def test_a_whole_number_setting_given_otherwise_is_a_type_error(name, value):
    # Truncated before: sync_every=2.7 ran every 2 steps.
    kwargs = {"sync_every": 4, name: value}
    with pytest.raises(TypeError) as raised:
        gc.DiLoCo(small_model(), None, **kwargs)
    assert str(raised.value) == f"DiLoCo: {name} must be an int, got {value!r}"


def test_a_round_without_a_peer_raises_commerror_and_changes_nothing():
    results = ddp_support.run(diloco_workers.a_peer_that_leaves, 2, timeout=60)
    error, unchanged = results[0]
    assert error is not None and error[0] == "CommError", error
    assert unchanged


def test_ranks_whose_inner_steps_drifted_all_raise_the_same_line():
    results = ddp_support.run(diloco_workers.ranks_whose_steps_drifted, 2, timeout=60)
    assert results[0] == results[1], results
    assert results[0] == (
        "ValueError", "outer loop: ranks disagree on the inner steps before an outer round: "
        "rank 0 has 4, rank 1 has 6 (every rank must take the same inner steps between rounds)")


def test_rank_zeros_state_restores_everywhere_unless_it_holds_memories(tmp_path):
    # x and the outer momentum are every rank's alike; error feedback is the saving rank's.
    path = str(tmp_path / "rank0.pt")
    assert ddp_support.run(diloco_workers.restore_rank_zeros_state, 2, path, "fp16") == [None] * 2
    own, other = ddp_support.run(diloco_workers.restore_rank_zeros_state, 2, path,
                                 "ef(topk:ratio=0.1)")
    assert own is None
    assert other == ("ValueError", "DiLoCo.load_state_dict: the state was saved by rank 0 of 2; "
                     "this is rank 1 of 2: each rank restores the state it saved (one file per "
                     "rank)")


def test_delayed_rounds_get_a_group_of_their_own():
    # Without process_group, a DiLoCo with delay > 0 exchanges on a Gloo group of its own,
    # so the job's collectives on the default group never pair with its rounds.
    for sums, steps in ddp_support.run(diloco_workers.delayed_rounds_beside_the_jobs_collectives, 2):
        assert sums == [3.0] * 12
        assert steps == 12


def test_synchronize_leaves_one_model_on_every_rank():
    for same_after, same_before in ddp_support.run(diloco_workers.synchronize_makes_one_model, 2):
        assert not same_before  # the replicas had drifted apart
        assert same_after


# Parameters staged through host buffers, as a GPU's are (GRADCOMP_FORCE_STAGING=1 stages
# CPU ones), train exactly as parameters the loop reads in place: every fetch before a
# read and every publish after a write is there, the parameter cut across two fragments
# included (the Linear's 294912 weights). test_diloco_cuda.py runs it with CUDA parameters.
@pytest.mark.parametrize("spec,outer,fragments,delay,mix", [
    ("fp16", "nesterov:lr=0.7,momentum=0.9", 1, 0, 0.0),
    ("ef(topk:ratio=0.05)", "average", 2, 1, 0.25),
    ("none", "sgd:lr=0.9,momentum=0.5", 2, 0, 0.5)])
def test_staged_parameters_train_as_parameters_in_place(spec, outer, fragments, delay, mix):
    for same, merged, staged_merged in ddp_support.run(
            diloco_workers.staged_equals_in_place, 2, "cpu", spec, outer, fragments, delay, mix):
        assert all(same), same
        assert merged == staged_merged and sum(merged) >= 2, merged


# A bfloat16 or float16 model (trained without float32 master weights) is widened into the
# loop's float32 spans at each round and rounded on the way back: it trains exactly as a
# float32 replica rounded to its type after every step, and the outer state stays float32.
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("spec,outer,fragments,delay,mix", [
    ("fp16", "nesterov:lr=0.7,momentum=0.9", 1, 0, 0.0),
    ("ef(topk:ratio=0.05)", "average", 2, 1, 0.25)])
def test_a_sixteen_bit_replica_trains_as_a_rounded_float32_one(dtype, spec, outer, fragments,
                                                                delay, mix):
    for same, merged_alike, kept in ddp_support.run(
            diloco_workers.sixteen_bit_equals_rounded_float32, 2, "cpu", dtype, spec, outer,
            fragments, delay, mix):
        assert all(same), same
        assert merged_alike and kept


# fp16 autocast's GradScaler skips a step after an overflow, on that rank only. Counted by
# iteration (diloco.step() after scaler.update()), the ranks keep their rounds together;
# counted by the optimizer's hook, they drift, and the round says why.
@pytest.mark.skipif(not hasattr(torch, "amp") or not hasattr(torch.amp, "GradScaler"),
                    reason="torch.amp.GradScaler (for the CPU) arrived in torch 2.3")
def test_a_grad_scaler_that_skips_a_step_on_one_rank():
    (e0, scale0, steps0, flat0), (e1, scale1, steps1, flat1) = ddp_support.run(
        diloco_workers.with_a_grad_scaler, 2, "iteration", timeout=60)
    assert e0 is None and e1 is None, (e0, e1)
    assert (scale0, scale1) == (2.0**10, 2.0**9)
    assert steps0 == steps1 == 8
    assert torch.equal(flat0, flat1), "synchronize() left the replicas apart"
    hooked = ddp_support.run(diloco_workers.with_a_grad_scaler, 2, "hook", timeout=60)
    for error, _, _, _ in hooked:
        assert error is not None and error[0] == "ValueError", error
        assert error[1].startswith("outer loop: ranks disagree on the inner steps"), error
        assert "call diloco.step() after every scaler.update()" in error[1], error
