"""gradcomp: gradient compression for data-parallel training on slow networks.

The codecs are gradcomp's C++ core, the same the ``gradcomp`` CLI runs::

    import torch, gradcomp
    codec = gradcomp.Codec("topk:ratio=0.01")
    message = codec.encode(torch.randn(10_000))      # a uint8 tensor: the wire message
    approx = codec.decode(message)                    # float32, 10_000 elements

``gradcomp.DeviceCodec(spec)`` runs a codec on the tensor's own device (CUDA) with the same
messages; ``gradcomp.device_codec_names()`` lists those that have one. On CUDA tensors
1bit, signsgd, 2bit and top-k run fused CUDA kernels where the build has them
(``gradcomp.cuda_kernels_built()``; ``gradcomp.set_cuda_kernels(False)`` keeps ATen's).
``gradcomp.list_codecs()`` lists every codec, memory and scheme with its defaults.
To compress a DistributedDataParallel model's gradients, see ``gradcomp.torch``.
"""
import torch as _torch  # loads LibTorch before the extension links to it

from ._build import TORCH_VERSION as _BUILT_FOR_TORCH

if _torch.__version__ != _BUILT_FOR_TORCH:
    raise ImportError(
        f"gradcomp was built against torch {_BUILT_FOR_TORCH}, and this is torch "
        f"{_torch.__version__}: rebuild it for this torch (pip install . from a gradcomp "
        "checkout, in this environment)")

from ._C import (Codec, CommError, DeviceCodec, cuda_kernels_built, device_codec_names,
                 list_codecs, set_cuda_kernels)

__all__ = ["Codec", "CommError", "DeviceCodec", "cuda_kernels_built", "device_codec_names",
           "list_codecs", "set_cuda_kernels", "__version__"]
__version__ = "0.1.0"
