"""gradcomp.DeviceCodec against gradcomp.Codec (the CPU codec) on every device at hand: the
CPU in CI, CUDA where there is a GPU (scripts/gpu-check.sh). Messages byte for byte, the
error-feedback residual bit for bit, decode alike, corrupt messages refused with the output
untouched."""
import pytest
import torch

import gradcomp

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

# Every device codec's variants that take another code path; a spec whose codec has no
# device implementation yet is skipped (gradcomp.device_codec_names() says which have one).
SPECS = [
    "fp16",
    "fp16:format=bf16",
    "topk",
    "topk:ratio=0.001",
    "topk:ratio=0.01,select=exact",
    "topk:ratio=0.001,select=exact",
    "2bit",
    "2bit:threshold=0.5",
    "1bit",
    "signsgd",
    "efsign",
    "int",
    "int:bits=8,block=256",
]
SIZES = [0, 1, 3, 17, 4097, 100_003]


def _device_spec(spec):
    name = spec.split(":")[0]
    if name not in gradcomp.device_codec_names():
        pytest.skip(f"{name} has no device implementation yet")
    try:
        return gradcomp.Codec(spec), gradcomp.DeviceCodec(spec)
    except ValueError as e:  # a variant this build's codec does not take
        pytest.skip(str(e))


def _gradient(n, seed):
    g = torch.randn(n, generator=torch.Generator().manual_seed(seed)) * 0.01
    g[::97] = 1e5 * torch.sign(g[::97] + 1e-9)  # saturation, thresholds
    g[5::101] = 0.0
    return g


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spec", SPECS)
def test_messages_and_residuals_match_the_cpu_codec(spec, device):
    cpu, dev = _device_spec(spec)
    for n in SIZES:
        e_cpu = _gradient(n, n + 1) * 0.5
        e_dev = e_cpu.to(device)
        for step in range(3):
            g = _gradient(n, 100 * step + n)
            p = e_cpu + g
            expected = cpu.encode(p, seed=42, step=step)
            cpu.decode_add(expected, p, -1.0)
            e_cpu = p
            got = dev.encode_with_residual(g.to(device), e_dev, seed=42, step=step)
            assert torch.equal(got, expected), f"{spec} n={n} step={step}"
            assert torch.equal(e_dev.cpu().view(torch.int32), e_cpu.view(torch.int32)), (
                f"{spec} residual n={n} step={step}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spec", SPECS)
def test_decode_adds_what_the_cpu_codec_adds(spec, device):
    cpu, dev = _device_spec(spec)
    for n in SIZES:
        msg = cpu.encode(_gradient(n, n + 2), seed=42, step=1)
        out = torch.randn(n)
        expected = out.clone()
        cpu.decode_add(msg, expected, 0.25)
        got = out.to(device)
        dev.decode_add(msg, got, 0.25)
        assert torch.equal(got.cpu(), expected), f"{spec} n={n}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spec", SPECS)
def test_corrupt_messages_refused_with_out_untouched(spec, device):
    cpu, dev = _device_spec(spec)
    n = 1000
    msg = cpu.encode(_gradient(n, 3), seed=42, step=1)
    bad = msg.clone()
    bad[-1] ^= 0xFF  # the checksum no longer holds
    out = torch.randn(n, device=device)
    before = out.clone()
    with pytest.raises(ValueError):
        dev.decode_add(bad, out)
    with pytest.raises(ValueError):
        dev.decode_add(msg, torch.zeros(n + 1, device=device))  # another size
    assert torch.equal(out, before)


def test_a_codec_without_a_device_implementation_is_named():
    with pytest.raises(ValueError, match="no device implementation"):
        gradcomp.DeviceCodec("qsgd")


# The fused CUDA kernels (src/device/cuda/) against the ATen operations they replace, on
# the GPU: sizes around the kernels' 32-value chunks and 128-value tiles, and past the
# thresholds where top-k samples (2^18) and 2bit samples its mean (2^20).
KERNEL_SPECS = [
    "fp16",
    "fp16:format=bf16",
    "topk:ratio=0.01",
    "topk:ratio=0.001",
    "topk:ratio=0.01,select=sampled",
    "topk:ratio=0.001,select=exact",
    "topk:ratio=0.01,values=fp16",
    "2bit",
    "2bit:threshold=0.5",
    "1bit",
    "signsgd",
]
KERNEL_SIZES = [1, 31, 32, 33, 127, 129, 4097, 262_147, 1_048_583]
needs_kernels = pytest.mark.skipif(
    not torch.cuda.is_available() or not gradcomp.cuda_kernels_built(),
    reason="the CUDA kernels need a GPU and a build with them")


def _run_steps(dev, n, kernels):
    """Three error-feedback steps, plain encodes and decodes on CUDA, with the kernels on or
    off: the messages, the residual and the decoded outputs."""
    previous = gradcomp.set_cuda_kernels(kernels)
    try:
        e = (_gradient(n, n + 1) * 0.5).cuda()
        messages, decoded = [], []
        for step in range(3):
            g = _gradient(n, 100 * step + n).cuda()
            messages.append(dev.encode(g, seed=42, step=step))
            messages.append(dev.encode_with_residual(g, e, seed=42, step=step))
            out = torch.full((n,), 0.25, device="cuda")
            dev.decode_add(messages[-1], out, -0.5)
            decoded.append(out.cpu())
        return messages, e.cpu(), decoded
    finally:
        gradcomp.set_cuda_kernels(previous)


@needs_kernels
@pytest.mark.parametrize("spec", KERNEL_SPECS)
def test_cuda_kernels_write_what_aten_writes(spec):
    cpu, dev = _device_spec(spec)
    for n in KERNEL_SIZES:
        fused, fused_e, fused_out = _run_steps(dev, n, True)
        aten, aten_e, aten_out = _run_steps(dev, n, False)
        for i, (a, b) in enumerate(zip(fused, aten)):
            assert torch.equal(a, b), f"{spec} n={n} message {i}"
        assert torch.equal(fused_e.view(torch.int32), aten_e.view(torch.int32)), f"{spec} n={n}"
        for a, b in zip(fused_out, aten_out):
            assert torch.equal(a.view(torch.int32), b.view(torch.int32)), f"{spec} n={n} decode"
        # And the first plain message is the CPU codec's.
        assert torch.equal(fused[0], cpu.encode(_gradient(n, n), seed=42, step=0)), f"{spec} n={n}"


@needs_kernels
def test_cuda_kernels_refuse_non_finite_input_as_aten_does():
    for spec in ["topk:ratio=0.01", "topk:ratio=0.001", "2bit", "fp16"]:
        _, dev = _device_spec(spec)
        g = _gradient(1_048_583, 5)
        g[777_777] = float("nan")
        errors = []
        for kernels in (True, False):
            previous = gradcomp.set_cuda_kernels(kernels)
            try:
                with pytest.raises(ValueError) as err:
                    dev.encode(g.cuda())
                errors.append(str(err.value))
            finally:
                gradcomp.set_cuda_kernels(previous)
        assert errors[0] == errors[1], spec


def _switches():
    return [True, False] if gradcomp.cuda_kernels_built() else [False]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spec", ["2bit", "2bit:threshold=0.5", "1bit", "signsgd"])
def test_corrupt_payloads_refused_with_out_untouched(spec, device):
    """Payload contents the CPU codec refuses (padding bits, 2bit's code 01), with the
    kernels' checks and with ATen's."""
    cpu, dev = _device_spec(spec)
    n = 1001  # codes in the last word's padding
    payload = cpu.encode(_gradient(n, 7), seed=42, step=1)[24:]
    header = 4 if spec == "2bit" else 0
    dirty_padding = payload.clone()
    dirty_padding[-1] |= 1
    corrupt = [dirty_padding]
    if spec.startswith("2bit"):
        code01 = payload.clone()
        code01[header] = 0x40  # the first value's code 01
        corrupt.append(code01)
    for kernels in _switches():
        previous = gradcomp.set_cuda_kernels(kernels)
        try:
            for bad in corrupt:
                out = torch.randn(n, device=device)
                before = out.clone()
                with pytest.raises(ValueError):
                    dev.decode_payload_add(bad.to(device), out)
                assert torch.equal(out, before), spec
        finally:
            gradcomp.set_cuda_kernels(previous)


def test_the_kernels_are_in_the_build_ci_asked_for():
    """scripts/test.sh builds the kernels wherever nvcc is and says so here: a CMake
    change that quietly left them out would pass every CPU test."""
    import os
    expected = os.environ.get("GRADCOMP_EXPECT_CUDA_KERNELS")
    if expected is None:
        pytest.skip("GRADCOMP_EXPECT_CUDA_KERNELS unset (not scripts/test.sh)")
    assert gradcomp.cuda_kernels_built() == (expected == "1")


def test_the_kernel_switch_returns_what_was_in_use():
    built = gradcomp.cuda_kernels_built()
    previous = gradcomp.set_cuda_kernels(False)
    try:
        assert previous == built  # on by default where built
        assert gradcomp.set_cuda_kernels(True) is False
        assert gradcomp.set_cuda_kernels(True) == built
    finally:
        gradcomp.set_cuda_kernels(previous)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spec", ["topk:ratio=0.01", "2bit", "1bit", "fp16"])
def test_payload_is_the_message_after_its_header(spec, device):
    cpu, dev = _device_spec(spec)
    g = _gradient(5000, 11)
    assert torch.equal(dev.payload(g.to(device), seed=42, step=3).cpu(),
                       cpu.encode(g, seed=42, step=3)[24:])
