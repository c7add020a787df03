"""gradcomp.torch's DDP hook on real processes over Gloo (127.0.0.1)."""
import inspect
import re

import pytest
import torch

import ddp_support
import workers

import gradcomp
import gradcomp.torch as gc


def test_none_equals_ddp_averaging_on_several_buckets():
    results = ddp_support.run(workers.dense_equals_ddp, 2, 3)
    for worst, n_params, describe in results:
        assert worst <= 1e-6, worst
        assert n_params == 8
        assert describe == "dense"


@pytest.mark.parametrize("flags", [dict(find_unused_parameters=True), dict(static_graph=True)])
@pytest.mark.parametrize("spec", ["none", "ef(topk:ratio=0.05)"])
def test_ddp_collectives_of_its_own_beside_the_exchange(flags, spec):
    # find_unused_parameters (every step) and static_graph (its first) allreduce DDP's map
    # of used parameters on DDP's group while gradcomp's exchange thread runs: on one group
    # Gloo paired the two differently across ranks and aborted the process. The hook
    # exchanges over a Gloo group of its own.
    results = ddp_support.run(workers.ddp_flags_equal_ddp, 2, spec, 4, flags, timeout=90)
    for worst, losses in results:
        assert all(loss == loss for loss in losses), losses
        if spec == "none":
            assert worst <= 1e-6, worst


@pytest.mark.parametrize("spec", ["efm(topk:ratio=0.05)", "powersgd:rank=2", "2bit"])
def test_gradients_as_bucket_views_train_as_copies(spec):
    # DDP(gradient_as_bucket_view=True), a common memory saving: the parameters' .grad are
    # views of the buckets the hook reads and writes.
    for (copies, views) in ddp_support.run(workers.bucket_views_equal_copies, 2, spec, 4):
        assert views[0] == copies[0], (views[0], copies[0])
        assert torch.equal(views[1], copies[1])


@pytest.mark.parametrize("spec", ["none", "efm(topk:ratio=0.05)"])
def test_gradient_accumulation_under_no_sync(spec):
    # DDP's no_sync(): the hook exchanges only the last backward pass of each step, the
    # gradients accumulated over all of them.
    results = ddp_support.run(workers.accumulated_under_no_sync, 2, spec, 3, 3)
    (hooked0, exchanged, alone0), (hooked1, _, _) = results
    assert exchanged == 3  # one exchange a step, not one a backward pass
    assert torch.equal(hooked0, hooked1)  # the replicas stay identical
    if spec == "none":
        assert torch.allclose(hooked0, alone0, rtol=0, atol=1e-6)


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


def test_the_scatter_reducer_trains_through_the_hook():
    # Each rank averages half of every tensor from the other's 4-bit slices: the replicas
    # stay identical, and each rank sends 2(W-1)/W of a message per tensor.
    results = ddp_support.run(workers.train_spec, 2, "int", 5, "cpu", "scatter")
    (losses0, flat0, stats0, describe), (_, flat1, _, _) = results
    assert all(torch.isfinite(torch.tensor(losses0)))
    assert torch.equal(flat0, flat1), "replicas diverged"
    assert describe.startswith("scatter(efm(int:bits=4,block=64)"), describe
    assert stats0["compression_ratio"] > 2, stats0  # the first step is dense


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


@pytest.mark.parametrize("kwargs, message", [
    (dict(compressor=5), "compressor must be a str, got 5"),
    (dict(compressor="fp16", reducer=None), "reducer must be a str, got None"),
    (dict(compressor="fp16", timeout=5), "timeout must be a datetime.timedelta, got 5"),
    (dict(compressor="fp16", steps_per_epoch="x"), "steps_per_epoch must be an int, got 'x'"),
    (dict(compressor="fp16", min_elements=1.5), "min_elements must be an int, got 1.5"),
    (dict(compressor="fp16", dense_share="0.1"), "dense_share must be a number, got '0.1'"),
])
def test_settings_of_the_wrong_type_raise_type_error(kwargs, message):
    with pytest.raises(TypeError) as raised:
        gc.CompressionState(**kwargs)
    assert str(raised.value) == message


@pytest.mark.parametrize("kwargs", [
    dict(compressor=5), dict(compressor="fp16", reducer=None),
    dict(compressor="fp16", steps_per_epoch="x"), dict(compressor="fp16", min_elements=1.5),
    dict(compressor="fp16", dense_share="0.1"), dict(compressor="topkk"),
    dict(compressor="powersgd:rank=0"), dict(compressor="fp16", dense_share=1.5),
    dict(compressor="fp16", seed=-1), dict(compressor="fp16", total_steps=-2),
    dict(compressor="fp16", reducer="ring"), dict(compressor="dgc", reducer="scatter"),
    dict(compressor="fp16", grad_scaler="yes"),
])
def test_check_refuses_what_the_constructor_refuses_without_a_process_group(kwargs):
    # Uninitialized torch.distributed: the constructor raises the bad setting before it
    # would need a group.
    with pytest.raises((TypeError, ValueError)) as constructed:
        gc.CompressionState(**kwargs)
    with pytest.raises(type(constructed.value)) as checked:
        gc.CompressionState.check(**kwargs)
    assert str(checked.value) == str(constructed.value)


def test_check_refuses_what_the_constructor_refuses_over_a_group():
    # Over a group the ranks agree first and the exchanger checks the spec with the reducer.
    settings = [dict(compressor="topkk"), dict(compressor="dgc", reducer="scatter"),
                dict(compressor="fp16", reducer="ring")]
    (constructed,) = ddp_support.run(workers.constructed_in_a_group, 1, settings)
    assert all(constructed), constructed
    assert [workers.raised(lambda: gc.CompressionState.check(**kwargs))
            for kwargs in settings] == constructed


def test_check_passes_settings_that_run_and_takes_the_constructors_defaults():
    gc.CompressionState.check("efm(topk:ratio=0.01)", dense_share=0.0, steps_per_epoch=100)
    gc.CompressionState.check("int", reducer="scatter", total_steps=None)
    if hasattr(torch.amp, "GradScaler"):  # torch >= 2.3
        gc.CompressionState.check("powersgd:rank=2", grad_scaler=torch.amp.GradScaler("cpu"))
    settings = dict(inspect.signature(gc.CompressionState.__init__).parameters)
    for not_a_setting in ("self", "process_group", "timeout"):
        del settings[not_a_setting]
    assert dict(inspect.signature(gc.CompressionState.check).parameters) == settings


def test_sgd_without_a_compression_state_is_a_type_error():
    # Before: AttributeError: 'str' object has no attribute '_attach_optimizer'.
    with pytest.raises(TypeError) as raised:
        gc.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1, state="efm(topk)")
    assert str(raised.value) == ("SGD: state must be the gradcomp.torch.CompressionState whose "
                                 "hook the model runs, got str")


def test_momentum_in_memory_without_gradcomp_sgd_is_refused():
    results = ddp_support.run(workers.momentum_without_optimizer, 2, allow_errors=True)
    for r in results:
        assert "error" in r
        assert "gradcomp.torch.SGD" in r["error"]


@pytest.mark.parametrize("spec,momentum,nesterov,refused", [
    ("dgc:density=0.01,momentum=0.5", 0.9, False, "0.5"),
    ("dgc:density=0.01", 0.9, True, "nesterov"),
    ("fetchsgd:momentum=0.8", 0.9, False, "0.8"),
    ("dgc:density=0.01", 0.9, False, None),
])
def test_a_memorys_momentum_must_be_the_optimizers(spec, momentum, nesterov, refused):
    [r] = ddp_support.run(workers.optimizer_against_memory_momentum, 1, spec, momentum, nesterov)
    if refused is None:
        assert "compressor" in r, r
    else:
        assert "value_error" in r, r
        assert refused in r["value_error"], r


def test_a_killed_peer_makes_the_survivor_raise():
    results = ddp_support.run(workers.dead_peer, 2, 10.0, timeout=90, allow_errors=True)
    survivor = results[0]
    assert "ok" in survivor, survivor
    out = survivor["ok"]
    assert out["raised"] == "CommError", out
    assert out["after"] < 30, out
    # Gloo names the peer by address; gradcomp maps it back to the rank (socket_endpoints.h).
    assert "lost rank 1" in out["message"], out


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


# Ranks that disagree must all raise the same ValueError: ddp_support.run fails the test
# when a rank aborts (Gloo's enforce, SIGABRT, before) or is still running at the deadline.
MISMATCHED_SETTINGS = [
    ("compressor", ["efm(topk:ratio=0.05)", "powersgd:rank=2"]),
    ("compressor", ["topkk", "topk"]),  # a bad spec on one rank: refused on both, not alone
    ("dense_share", [0.0, 0.05]),       # other layouts: aborted in Gloo at the second step
    ("seed", [0, 1]),
    ("compressor", ["efm(topk:ratio=0.05)", 5]),  # not a str: refused by pybind alone, before
    ("reducer", ["auto", None]),                  # (the peers waited out the timeout)
]


@pytest.mark.parametrize("setting, values", MISMATCHED_SETTINGS,
                         ids=[f"{s}={v[0]}/{v[1]}" for s, v in MISMATCHED_SETTINGS])
def test_ranks_with_different_settings_are_refused_on_every_rank(setting, values):
    results = ddp_support.run(workers.mismatched_setting, 2, setting, values, timeout=60)
    expected = (f"gradcomp: ranks disagree on {setting}: rank 0 has {values[0]}, "
                f"rank 1 has {values[1]}")
    assert results == [("ValueError", expected)] * 2


def test_a_state_restores_only_on_the_rank_that_saved_it(tmp_path):
    # The memories are per rank: rank 0's on rank 1 would run on with the wrong residuals.
    (own, cut0), (other, cut1) = ddp_support.run(
        workers.restore_rank_zeros_state, 2, str(tmp_path / "rank0.pt"), timeout=90)
    assert own is None
    assert other == ("ValueError", "gradcomp: the state was saved by rank 0 of 2; this is rank 1 "
                     "of 2: each rank restores the state it saved (one file per rank)")
    assert cut0 == cut1 == ("ValueError", "gradcomp: the state lacks memories: not a whole "
                            "CompressionState.state_dict()")


def test_a_malformed_state_is_a_value_error_naming_the_part():
    (results,) = ddp_support.run(workers.malformed_states, 1, timeout=60)
    parts = ["step is -5", "step is '3'", "params are", "dense flags are", "memories are",
             "memories are"]
    for (kind, message), part in zip(results, parts):
        assert kind == "ValueError" and message.startswith(f"gradcomp: the state's {part}"), \
            (kind, message)
        assert message.endswith("not a CompressionState.state_dict()"), message


def test_a_state_for_another_shape_names_both_shapes():
    # It compared rows too, but printed only the elements: "2048 elements ... saved for 2048".
    ((kind, message), (_, numel, dims, rows)), = ddp_support.run(
        workers.restored_with_other_rows, 1, timeout=60)
    assert kind == "ValueError", message
    assert (f"but the restored state was saved for {numel} elements in {dims} dimensions "
            f"({rows} rows)") in message, message
    assert f"has {numel} elements in {dims} dimensions ({rows // 2} rows)" in message, message


def test_ranks_with_different_models_are_refused_on_every_rank():
    results = ddp_support.run(workers.mismatched_model, 2, timeout=60)
    expected = re.compile(r"gradcomp: ranks disagree on tensor \d+: rank 0 has \[256, 1152\] in "
                          r"DDP bucket \d+ of \d+, rank 1 has \[128, 1152\] in DDP bucket")
    assert results[0] == results[1], results
    kind, message = results[0]
    assert kind == "ValueError" and expected.match(message), message


def test_ranks_with_different_ddp_buckets_are_refused_on_every_rank():
    results = ddp_support.run(workers.mismatched_buckets, 2, timeout=60)
    assert results[0] == results[1], results
    kind, message = results[0]
    counts = re.match(r"gradcomp: ranks disagree on tensor \d+: rank 0 has \[[\d, ]+\] in DDP "
                      r"bucket \d+ of (\d+), rank 1 has \[[\d, ]+\] in DDP bucket \d+ of (\d+)$",
                      message)
    assert kind == "ValueError" and counts, message
    assert counts[1] != counts[2], message


@pytest.mark.parametrize("spec, start", [("powersgd:rank=2", "powersgd: bucket "),
                                         ("efm(topk:ratio=0.05)", "topk encode: ")])
def test_a_nan_gradient_raises_the_exchange_error_itself(spec, start):
    # A non-finite value is gradcomp::InvalidArgument: ValueError, as when a call raises it
    # (not "RuntimeError: Unable to cast ... to Tensor").
    for step, (kind, message) in ddp_support.run(workers.nan_gradient, 2, spec, timeout=60):
        assert step == 1
        assert kind == "ValueError", (kind, message)
        assert message.startswith(start) and "non-finite value" in message, message


def test_a_rank_that_catches_a_failed_exchange_cannot_go_on_out_of_step():
    # Rank 1's step 1 fails (NaN) before it sends; caught, its step 2 would have paired with
    # rank 0's step 1 (which averaged rank 1's step-2 gradients into it). Now its later
    # steps fail at once, and rank 0's step 1 ends with the timeout's CommError.
    rank0, rank1 = ddp_support.run(workers.catch_and_carry_on, 2, timeout=90)
    assert rank1 == ["ValueError", "RuntimeError"], rank1
    assert rank0 == ["CommError"], rank0


def test_a_failed_future_raises_the_error_itself():
    future = torch.futures.Future()
    gc._C.fail_future(future, gradcomp.CommError("allreduce_sum: lost rank 1"))
    with pytest.raises(gradcomp.CommError, match=r"^allreduce_sum: lost rank 1$"):
        future.wait()


@pytest.mark.parametrize("spec", ["efm(topk:ratio=0.05)", "powersgd:rank=2"])
def test_a_compiled_ddp_model_trains_as_the_eager_one(spec):
    # DDP(torch.compile(model)): DDP's hook gets every bucket from the compiled backward.
    # aot_eager runs AOTAutograd's graphs without generating code. (torch.compile(ddp_model)
    # compiles nothing on torch 2.13: Dynamo skips DDP's forward, and it runs eagerly.)
    if int(torch.__version__.split(".")[0]) < 2:
        pytest.skip("torch.compile is torch 2.x")
    results = ddp_support.run(workers.compiled_equals_eager, 2, spec, "aot_eager", 4,
                              timeout=240)
    for ((eager, compiled), graphs), (other, _) in zip(results, reversed(results)):
        (eager_losses, eager_flat, eager_ratio), (losses, flat, ratio) = eager, compiled
        assert graphs >= 1, "nothing was compiled"
        assert torch.equal(flat, other[1][1])  # the replicas stay identical
        assert ratio == eager_ratio > 1.0, (ratio, eager_ratio)
        assert losses == pytest.approx(eager_losses, rel=1e-4, abs=1e-5), (losses, eager_losses)
        assert torch.allclose(flat, eager_flat, rtol=1e-4, atol=1e-5)


def test_an_exchanger_dropped_by_its_own_completion_runs_what_is_queued():
    # Destroyed on its own exchange thread, the exchanger used to join itself:
    # std::terminate ("Resource deadlock avoided"), which killed the process.
    results = ddp_support.run(workers.exchanger_dropped_by_its_completion, 2, timeout=60)
    for rank, (order, errors, buffers) in enumerate(results):
        assert order == [0, 1, 2], (rank, order)
        assert errors == [None, None, None], (rank, errors)
        # fp16's dense path: the mean of rank + j over ranks 0 and 1.
        assert buffers == [[0.5 + j] * 5 for j in range(3)], (rank, buffers)


def test_a_float64_bucket_is_refused():
    for kind, message in ddp_support.run(workers.float64_bucket, 2, timeout=60):
        assert ("gradcomp hook: bucket 0 holds torch.float64 on cpu; gradcomp exchanges "
                "float32, bfloat16 and float16 gradients on the CPU or a CUDA device"
                ) in message, (kind, message)


def test_a_complex_parameter_is_refused():
    # DDP lays it into a float32 bucket as real pairs: the hook said, a step later, that the
    # bucket held twice its parameters' elements.
    for kind, message in ddp_support.run(workers.complex_parameter, 2, timeout=60):
        assert kind == "TypeError", (kind, message)
        assert message.startswith("gradcomp hook: tensor 0 is torch.complex64; gradcomp "
                                  "exchanges real float32"), message


@pytest.mark.parametrize("spec,dtype", [("efm(topk:ratio=0.1)", "float32"),
                                        ("powersgd:rank=2", "float32"),
                                        pytest.param("none", "float16", marks=pytest.mark.skipif(
                                            int(torch.__version__.split(".")[0]) < 2,
                                            reason="torch 1.13's CPU lacks fp16 kernels"))])
def test_staging_as_for_cuda_buckets_changes_nothing(spec, dtype):
    # GRADCOMP_FORCE_STAGING runs CPU buckets through the path CUDA buckets take (host
    # buffers reused per DDP bucket, the exchange waiting for the copy, the copy back):
    # the weights come out identical, and buffers are not allocated per step.
    for same, allocations, unstaged, n_params, _, _, same_state in ddp_support.run(
            workers.switched_equals_plain, 2, spec, 6, dtype, "GRADCOMP_FORCE_STAGING"):
        assert same and same_state
        assert unstaged is None
        assert 1 <= allocations <= 2 * n_params, allocations  # buckets, and DDP's rebuilt ones


_TORCH2 = pytest.mark.skipif(int(torch.__version__.split(".")[0]) < 2,
                             reason="torch 1.13's CPU lacks fp16 kernels")


@pytest.mark.parametrize("spec,dtype", [
    ("efm(topk:ratio=0.1)", "float32"), ("ef(topk:ratio=0.05,select=exact)", "float32"),
    ("2bit", "float32"), ("ef(2bit:threshold=0.01)", "float32"), ("1bit", "float32"),
    ("ef(signsgd)", "float32"), ("efsign", "float32"), ("noef(topk:ratio=0.2)", "float32"),
    ("dgc:density=0.1", "float32"), ("dgc:density=0.05,select=exact,clip=1", "float32"),
    pytest.param("efm(topk:ratio=0.1)", "float16", marks=_TORCH2)])
def test_the_device_reducer_computes_what_the_host_reducer_does(spec, dtype):
    # GRADCOMP_FORCE_DEVICE runs CPU buckets through the device reducer (ATen codecs,
    # memories as tensors, only messages to the host): weights, memories and the bytes
    # on the wire come out identical to the host reducer's.
    for same, _, _, _, stats_on, stats_off, same_state in ddp_support.run(
            workers.switched_equals_plain, 2, spec, 6, dtype, "GRADCOMP_FORCE_DEVICE"):
        assert same and same_state
        assert stats_on["bytes_sent_per_step"] == stats_off["bytes_sent_per_step"], (
            stats_on, stats_off)
        assert stats_on["dense_fallbacks"] == stats_off["dense_fallbacks"]


@pytest.mark.parametrize("spec,dtype", [
    ("int", "float32"), ("efm(int:bits=2,block=7)", "float32"), ("efm(topk:ratio=0.1)", "float32"),
    ("noef(fp16)", "float32"), pytest.param("int", "float16", marks=_TORCH2)])
def test_the_device_scatter_reducer_computes_what_the_host_one_does(spec, dtype):
    # reducer="scatter" through the device reducer (src/device/scatter.cc): slices encoded,
    # owners' means decoded and re-encoded, slices decoded, all in ATen on the buckets'
    # device, only messages to the host; identical to the host scatter reducer.
    for same, _, _, _, stats_on, stats_off, same_state in ddp_support.run(
            workers.switched_equals_plain, 2, spec, 6, dtype, "GRADCOMP_FORCE_DEVICE",
            "scatter"):
        assert same and same_state
        assert stats_on["bytes_sent_per_step"] == stats_off["bytes_sent_per_step"], (
            stats_on, stats_off)


@pytest.mark.parametrize("spec", ["efm(topk:ratio=0.1)", "ef(topk:ratio=0.05,select=exact)",
                                  "noef(topk:ratio=0.2,values=fp16)", "2bit", "efm(efsign)",
                                  "dgc:density=0.05"])
def test_the_batched_device_reducer_computes_what_the_host_reducer_does(spec):
    # GRADCOMP_DEVICE_BATCH=1: the device reducer's batches (its default on CUDA) on CPU
    # buckets, identical to the host reducer as the one-at-a-time path is.
    for same, _, _, _, stats_on, stats_off, same_state in ddp_support.run(
            workers.batched_device_equals_plain, 2, spec, 6, "float32"):
        assert same and same_state
        assert stats_on["bytes_sent_per_step"] == stats_off["bytes_sent_per_step"], (
            stats_on, stats_off)


@pytest.mark.parametrize("spec", ["powersgd:rank=2", "powersgd:rank=1,error_feedback=false",
                                  "powersgd:rank=4,warm_start=false,warmup_steps=2"])
def test_the_device_powersgd_computes_what_the_host_powersgd_does(spec):
    # GRADCOMP_FORCE_DEVICE runs CPU buckets through the device PowerSGD (residual and Q as
    # tensors, the products in ATen, only the factors and the dense buckets to the host).
    # Its matrix products round otherwise than the host kernels' fixed order, so weights
    # and memories agree to a tolerance, not bit for bit: 1e-5 of the largest magnitude
    # (about 80 float epsilons) after 6 steps of training that carry the differences
    # forward, as tests/device/powersgd_device_test.cc holds each step. The bytes on the
    # wire, and the memories' names and sizes, are the host's exactly.
    for weights, memory, same_names, n_memories, stats_on, stats_off, on_device in (
            ddp_support.run(workers.switched_close_to_plain, 2, spec, 6, "float32",
                            "GRADCOMP_FORCE_DEVICE")):
        assert on_device
        assert same_names and n_memories > 0
        assert weights <= 1e-5, weights
        assert memory <= 1e-5, memory
        for key in ("bytes_sent_per_step", "bytes_received_per_step", "dense_fallbacks",
                    "steps"):
            assert stats_on[key] == stats_off[key], (key, stats_on, stats_off)


def test_which_compressors_run_on_the_device():
    specs = ["topk:ratio=0.01", "ef(2bit)", "noef(topk)", "efsign", "1bit", "fp16", "powersgd",
             "dgc", "qsgd", "none"]
    expected = {"topk:ratio=0.01": True, "ef(2bit)": True, "noef(topk)": True, "efsign": True,
                "1bit": True, "fp16": False, "powersgd": True, "dgc": True, "qsgd": False,
                "none": False}
    for result in ddp_support.run(workers.device_support, 2, specs):
        assert {spec: on for spec, (on, _) in result.items()} == expected, result
    # Under the scatter reducer: every device codec (int, scatter's default, included);
    # qsgd has no device codec.
    scatter = {"int": True, "fp16": True, "efm(topk:ratio=0.01)": True, "qsgd": False}
    for result in ddp_support.run(workers.device_support, 2, list(scatter), "scatter"):
        assert {spec: on for spec, (on, _) in result.items()} == scatter, result
