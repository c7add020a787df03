// The pieces of gradcomp's Python extension (gradcomp._C), one function per file.
#pragma once

#include <torch/extension.h>

#include <span>

namespace gradcomp::python {

// gradcomp.Codec and gradcomp.list_codecs (codec_bindings.cc).
void bind_codecs(pybind11::module_& m);
// gradcomp._C.Exchanger and gradcomp._C.dense_tensors (exchanger_bindings.cc): what
// gradcomp.torch's DDP hook drives.
void bind_exchanger(pybind11::module_& m);

// A float32 CPU tensor's data as a span; ValueError naming `what` otherwise.
std::span<float> float_span(const at::Tensor& t, const char* what);

}  // namespace gradcomp::python
