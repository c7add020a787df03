// gradcomp.DeviceCodec: a codec run on the tensors' own device (gradcomp/device/codec.h),
// writing and reading the same messages as gradcomp.Codec. Messages are CPU uint8 tensors
// (what crosses the network); payloads stay on the device for whoever times the device
// part alone.
#include <cstring>
#include <memory>
#include <string>

#include "bindings.h"
#include "gradcomp/device/codec.h"
#include "gradcomp/error.h"
#include "gradcomp/registry.h"

namespace py = pybind11;

namespace gradcomp::python {

namespace {

class PyDeviceCodec {
 public:
  explicit PyDeviceCodec(const std::string& spec)
      : codec_(builtin_registry().make_codec(spec)), device_(device::make_device_codec(*codec_)) {
    if (!device_) {
      std::string names;
      for (const std::string& n : device::device_codec_names())
        names += (names.empty() ? "" : ", ") + n;
      throw InvalidArgument("DeviceCodec: " + codec_->name() +
                            " has no device implementation (those with one: " + names + ")");
    }
  }

  at::Tensor encode(const at::Tensor& g, std::uint64_t seed, std::uint64_t step, std::uint32_t rank,
                    std::uint32_t bucket) const {
    const StepContext ctx = codec_call_context(g, seed, step, rank, bucket);
    const at::Tensor flat = g.reshape({-1}).contiguous();
    py::gil_scoped_release release;
    return message(flat.numel(), device_->encode_payload(flat, ctx));
  }

  at::Tensor encode_with_residual(const at::Tensor& g, const at::Tensor& e, std::uint64_t seed,
                                  std::uint64_t step, std::uint32_t rank,
                                  std::uint32_t bucket) const {
    const StepContext ctx = codec_call_context(g, seed, step, rank, bucket);
    py::gil_scoped_release release;
    return message(g.numel(),
                   device_->encode_payload_with_residual(flat(g, "g"), flat(e, "e"), ctx));
  }

  at::Tensor payload(const at::Tensor& g, std::uint64_t seed, std::uint64_t step,
                     std::uint32_t rank, std::uint32_t bucket) const {
    const StepContext ctx = codec_call_context(g, seed, step, rank, bucket);
    py::gil_scoped_release release;
    return device_->encode_payload(flat(g, "g"), ctx);
  }

  at::Tensor payload_with_residual(const at::Tensor& g, const at::Tensor& e, std::uint64_t seed,
                                   std::uint64_t step, std::uint32_t rank,
                                   std::uint32_t bucket) const {
    const StepContext ctx = codec_call_context(g, seed, step, rank, bucket);
    py::gil_scoped_release release;
    return device_->encode_payload_with_residual(flat(g, "g"), flat(e, "e"), ctx);
  }

  void decode_add(const at::Tensor& msg, const at::Tensor& out, float alpha) const {
    if (!msg.device().is_cpu() || msg.scalar_type() != at::kByte || !msg.is_contiguous() ||
        msg.dim() != 1) {
      throw InvalidArgument("decode_add: the message must be a 1-D contiguous CPU uint8 tensor");
    }
    const at::Tensor dst = flat(out, "out");
    py::gil_scoped_release release;
    const at::Tensor payload =
        device::open_message({reinterpret_cast<const std::byte*>(msg.data_ptr<std::uint8_t>()),
                              static_cast<std::size_t>(msg.numel())},
                             *codec_, static_cast<std::size_t>(dst.numel()));
    device_->decode_payload_add(payload.to(dst.device()), dst, alpha);
  }

  void decode_payload_add(const at::Tensor& payload, const at::Tensor& out, float alpha) const {
    const at::Tensor dst = flat(out, "out");
    py::gil_scoped_release release;
    device_->decode_payload_add(payload, dst, alpha);
  }

  const Codec& codec() const { return *codec_; }

 private:
  // A view of t as the 1-D float32 tensor the device codec writes through: in-place
  // updates must reach the caller's tensor, so no copy is made.
  static at::Tensor flat(const at::Tensor& t, const char* what) {
    if (t.scalar_type() != at::kFloat || !t.is_contiguous()) {
      throw InvalidArgument(std::string("DeviceCodec: ") + what +
                            " must be a contiguous float32 tensor");
    }
    return t.view({-1});
  }

  at::Tensor message(std::int64_t n, const at::Tensor& payload) const {
    const std::vector<std::byte> bytes =
        device::frame_message(*codec_, static_cast<std::size_t>(n), payload.cpu());
    at::Tensor out =
        at::empty({static_cast<std::int64_t>(bytes.size())}, at::TensorOptions().dtype(at::kByte));
    std::memcpy(out.data_ptr<std::uint8_t>(), bytes.data(), bytes.size());
    return out;
  }

  std::shared_ptr<const Codec> codec_;
  std::unique_ptr<device::DeviceCodec> device_;
};

}  // namespace

void bind_device_codecs(py::module_& m) {
  m.def("device_codec_names", &device::device_codec_names,
        "The codecs that also run on the gradients' device (gradcomp.DeviceCodec).");
  m.def("cuda_kernels_built", &device::cuda_kernels_built,
        "Whether this build has the device codecs' fused CUDA kernels.");
  m.def("set_cuda_kernels", &device::set_cuda_kernels, py::arg("enabled"),
        "Whether the device codecs use their fused CUDA kernels on CUDA tensors (default:\n"
        "yes where built; GRADCOMP_DEVICE_KERNELS=0 in the environment says no). False keeps\n"
        "the ATen operations the kernels are tested against. Returns the previous setting.");

  py::class_<PyDeviceCodec>(m, "DeviceCodec", R"doc(
A codec run on the tensors' own device (CUDA, or the CPU), e.g. ``DeviceCodec("fp16")``.

Its messages are gradcomp.Codec's, byte for byte: the payload is computed where the
tensor lives and only it is copied to the host, where the header is written. Memories
(the error-feedback residual ``e``) stay on the device. ``ValueError`` for a codec with
no device implementation (``device_codec_names()`` lists those with one).)doc")
      .def(py::init<const std::string&>(), py::arg("spec"))
      .def_property_readonly("spec", [](const PyDeviceCodec& c) { return c.codec().spec(); })
      .def_property_readonly("name", [](const PyDeviceCodec& c) { return c.codec().name(); })
      .def("encode", &PyDeviceCodec::encode, py::arg("tensor"), py::kw_only(), py::arg("seed") = 0,
           py::arg("step") = 0, py::arg("rank") = 0, py::arg("bucket") = 0,
           "The message of a float32 tensor (on any device), as a CPU uint8 tensor.")
      .def("encode_with_residual", &PyDeviceCodec::encode_with_residual, py::arg("g"), py::arg("e"),
           py::kw_only(), py::arg("seed") = 0, py::arg("step") = 0, py::arg("rank") = 0,
           py::arg("bucket") = 0,
           "One error-feedback step: e += g, returns the message of e (CPU uint8), then\n"
           "e -= decode(message). g and e on the same device.")
      .def("payload", &PyDeviceCodec::payload, py::arg("g"), py::kw_only(), py::arg("seed") = 0,
           py::arg("step") = 0, py::arg("rank") = 0, py::arg("bucket") = 0,
           "encode's payload (no header), left on the device.")
      .def("payload_with_residual", &PyDeviceCodec::payload_with_residual, py::arg("g"),
           py::arg("e"), py::kw_only(), py::arg("seed") = 0, py::arg("step") = 0,
           py::arg("rank") = 0, py::arg("bucket") = 0,
           "encode_with_residual's payload (no header), left on the device: the device's\n"
           "part of the step alone.")
      .def("decode_add", &PyDeviceCodec::decode_add, py::arg("message"), py::arg("out"),
           py::arg("alpha") = 1.0f,
           "out += alpha * decode(message) on out's device; out untouched if the message is\n"
           "bad (ValueError).")
      .def("decode_payload_add", &PyDeviceCodec::decode_payload_add, py::arg("payload"),
           py::arg("out"), py::arg("alpha") = 1.0f,
           "out += alpha * decode(payload), the payload on out's device (no header check).")
      .def("__repr__", [](const PyDeviceCodec& c) {
        return "gradcomp.DeviceCodec('" + c.codec().spec() + "')";
      });
}

}  // namespace gradcomp::python
