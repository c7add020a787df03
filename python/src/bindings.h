// The pieces of gradcomp's Python extension (gradcomp._C), one function per file.
#pragma once

#include <torch/python.h>

#include <exception>
#include <span>

#include "gradcomp/step_context.h"

namespace gradcomp::python {

// gradcomp.Codec and gradcomp.list_codecs (codec_bindings.cc).
void bind_codecs(pybind11::module_& m);
// gradcomp._C.Exchanger and gradcomp._C.dense_tensors (exchanger_bindings.cc): what
// gradcomp.torch's DDP hook drives.
void bind_exchanger(pybind11::module_& m);
// gradcomp.DeviceCodec and gradcomp._C.device_codec_names (device_codec_bindings.cc).
void bind_device_codecs(pybind11::module_& m);
// gradcomp._C.OuterLoop (outer_loop_bindings.cc): what gradcomp.torch.DiLoCo drives.
void bind_outer_loop(pybind11::module_& m);

// The Python exception object a C++ exception becomes, as when a call raises it
// (module.cc: gradcomp.CommError, ValueError, otherwise RuntimeError), message intact:
// for errors that reach Python through a future instead of a call. Needs the GIL.
pybind11::object python_exception(const std::exception_ptr& error);

// The context of one codec call from Python (gradcomp.Codec, gradcomp.DeviceCodec): the
// stochastic codecs' draws, and the rows of t's matrix view (its first dimension).
StepContext codec_call_context(const at::Tensor& t, std::uint64_t seed, std::uint64_t step,
                               std::uint32_t rank, std::uint32_t bucket);

// A float32 CPU tensor's data as a span; ValueError naming `what` otherwise.
std::span<float> float_span(const at::Tensor& t, const char* what);

}  // namespace gradcomp::python
