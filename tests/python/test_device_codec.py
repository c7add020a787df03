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
