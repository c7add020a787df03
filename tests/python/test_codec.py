"""gradcomp.Codec and gradcomp.list_codecs: one process, no network."""
import pytest
import torch

import gradcomp


def test_list_codecs_names_every_kind():
    entries = gradcomp.list_codecs()
    names = {e["name"]: e for e in entries}
    for name in ("none", "topk", "2bit", "qsgd", "terngrad", "fp16", "randomk", "atomo"):
        assert names[name]["kind"] == "codec"
    assert names["dgc"]["kind"] == "memory"
    for name in ("powersgd", "sketched-sgd", "fetchsgd"):
        assert names[name]["kind"] == "scheme"
    assert names["topk"]["spec"].startswith("topk:ratio=")
    assert any(p["key"] == "ratio" for p in names["topk"]["params"])


@pytest.mark.parametrize("n", [0, 1, 7, 1000, 4099])
def test_topk_keeps_the_largest_magnitudes(n):
    x = torch.randn(n, generator=torch.Generator().manual_seed(n))
    codec = gradcomp.Codec("topk:ratio=0.25,select=exact")
    msg = codec.encode(x)
    assert msg.dtype == torch.uint8 and msg.numel() <= codec.max_encoded_bytes(n)
    y = codec.decode(msg)
    assert y.shape == (n,)
    kept = y != 0
    # Brute force: the kept values are x's there, and none dropped is larger than one kept.
    assert torch.equal(y[kept], x[kept])
    if kept.any() and (~kept).any():
        assert x[~kept].abs().max() <= x[kept].abs().min()


@pytest.mark.parametrize("spec", ["fp16", "none", "qsgd", "terngrad", "2bit:threshold=0.5"])
def test_round_trip_and_decode_add(spec):
    x = torch.randn(3001, generator=torch.Generator().manual_seed(1))
    codec = gradcomp.Codec(spec)
    msg = codec.encode(x, seed=5, step=2, rank=1, bucket=3)
    assert torch.equal(msg, codec.encode(x, seed=5, step=2, rank=1, bucket=3))
    y = codec.decode(msg)
    out = torch.ones(3001)
    codec.decode_add(msg, out, alpha=0.5)
    assert torch.allclose(out, 1 + 0.5 * y)
    if spec in ("none", "fp16"):
        assert torch.allclose(y, x, atol=1e-3, rtol=1e-3)


def test_bad_spec_is_a_value_error_with_the_registry_message():
    with pytest.raises(ValueError, match="unknown"):
        gradcomp.Codec("topkk")
    with pytest.raises(ValueError, match="ratio"):
        gradcomp.Codec("topk:ratio=2")


def test_corrupt_messages_are_value_errors():
    codec = gradcomp.Codec("topk:ratio=0.1")
    msg = codec.encode(torch.randn(5000))
    with pytest.raises(ValueError):
        codec.decode(msg[:10])  # truncated header
    with pytest.raises(ValueError):
        codec.decode(msg[:-1])  # truncated payload
    bad = msg.clone()
    bad[0] ^= 0xFF  # magic
    with pytest.raises(ValueError):
        codec.decode(bad)
    other = gradcomp.Codec("topk:ratio=0.2")
    with pytest.raises(ValueError):
        other.decode(msg)  # other parameters
    with pytest.raises(ValueError):
        codec.decode(msg, n=4999)
    out = torch.zeros(4999)
    with pytest.raises(ValueError):
        codec.decode_add(msg, out)
    assert torch.count_nonzero(out) == 0


def test_decode_refuses_a_changed_element_count():
    codec = gradcomp.Codec("topk:ratio=0.1")
    msg = codec.encode(torch.randn(100))
    bad = msg.clone()
    bad[15] = 0x7F  # the element count's high byte: ~2^30 elements
    with pytest.raises(ValueError):
        codec.decode(bad)


def test_inputs_must_be_float32_cpu():
    codec = gradcomp.Codec("topk:ratio=0.1")
    with pytest.raises(ValueError, match="float32"):
        codec.encode(torch.randn(10, dtype=torch.float64))
    with pytest.raises(ValueError, match="uint8"):
        codec.decode(torch.zeros(30))


def _import_gradcomp_under(version):
    """Imports gradcomp in a fresh interpreter whose torch says it is `version`."""
    import subprocess
    import sys
    code = ("import torch; torch.__version__ = %r\n"
            "try:\n    import gradcomp\nexcept ImportError as e:\n    print('ImportError:', e)\n"
            "else:\n    print('imported')" % version)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120).stdout.strip()


def test_another_torch_release_is_refused_in_one_line():
    """An extension built for one torch release meets another after an upgrade: it would
    fail with an undefined symbol, or run with another c10d ABI. The import says what to do."""
    assert _import_gradcomp_under(torch.__version__) == "imported"
    out = _import_gradcomp_under("0.0.1+other")
    assert out == (f"ImportError: gradcomp was built against torch {torch.__version__}, and this "
                   "is torch 0.0.1+other: rebuild it for this torch (pip install . from a "
                   "gradcomp checkout, in this environment)"), out
