// gradcomp.Codec: one stateless codec of the registry, encoding float32 tensors into
// uint8 wire messages and back; gradcomp.list_codecs: what `gradcomp list` shows.
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "bindings.h"
#include "gradcomp/dist/schemes.h"
#include "gradcomp/error.h"
#include "gradcomp/registry.h"
#include "gradcomp/wire.h"

namespace py = pybind11;

namespace gradcomp::python {

namespace {

// decode() without an expected size trusts the header's element count only up to this
// (1 GiB of float32): a corrupt count must not make it allocate gigabytes.
constexpr std::size_t kMaxUntoldElements = std::size_t{1} << 28;

py::list params_of(const std::vector<ParamDef>& defs) {
  py::list out;
  for (const ParamDef& d : defs) {
    out.append(py::dict(py::arg("key") = d.key, py::arg("default") = d.default_value,
                        py::arg("help") = d.help));
  }
  return out;
}

py::dict entry(const std::string& kind, const std::string& name, const std::string& summary,
               const std::string& spec, const std::vector<ParamDef>& params,
               const std::vector<std::string>& examples) {
  return py::dict(py::arg("kind") = kind, py::arg("name") = name, py::arg("summary") = summary,
                  py::arg("spec") = spec, py::arg("params") = params_of(params),
                  py::arg("examples") = examples);
}

py::list list_codecs() {
  const CodecRegistry& registry = builtin_registry();
  py::list out;
  for (const CodecInfo* c : registry.all()) {
    out.append(entry("codec", c->name, c->summary, registry.make_codec(c->name)->spec(), c->params,
                     c->examples));
  }
  for (const MemoryInfo* mem : registry.memories()) {
    out.append(entry("memory", mem->name, mem->summary, registry.make_memory(mem->name, 0)->spec(),
                     mem->params, mem->examples));
  }
  for (const SchemeDescription* s : registry.schemes()) {
    out.append(entry("scheme", s->name, s->summary, canonical_scheme_spec(*s, parse_spec(s->name)),
                     s->params, s->examples));
  }
  return out;
}

std::span<const std::byte> message_bytes(const at::Tensor& msg) {
  if (!msg.device().is_cpu() || msg.scalar_type() != at::kByte || !msg.is_contiguous() ||
      msg.dim() != 1) {
    throw InvalidArgument("decode: the message must be a 1-D contiguous CPU uint8 tensor");
  }
  return {reinterpret_cast<const std::byte*>(msg.data_ptr<std::uint8_t>()),
          static_cast<std::size_t>(msg.numel())};
}

class PyCodec {
 public:
  explicit PyCodec(const std::string& spec) : codec_(builtin_registry().make_codec(spec)) {}

  at::Tensor encode(const at::Tensor& x, std::uint64_t seed, std::uint64_t step, std::uint32_t rank,
                    std::uint32_t bucket) const {
    const at::Tensor in = x.contiguous();
    const std::span<float> values = float_span(in, "encode");
    const StepContext ctx = codec_call_context(in, seed, step, rank, bucket);
    at::Tensor out =
        at::empty({static_cast<std::int64_t>(codec_->max_encoded_bytes(values.size()))},
                  at::TensorOptions().dtype(at::kByte));
    std::size_t len = 0;
    {
      py::gil_scoped_release release;
      len = codec_->encode(values, ctx,
                           {reinterpret_cast<std::byte*>(out.data_ptr<std::uint8_t>()),
                            static_cast<std::size_t>(out.numel())});
    }
    return out.narrow(0, 0, static_cast<std::int64_t>(len)).clone();
  }

  at::Tensor decode(const at::Tensor& msg, std::optional<std::size_t> n) const {
    const std::span<const std::byte> bytes = message_bytes(msg);
    const WireHeader h = read_header(bytes, "decode");
    if (n && *n != h.elements) {
      throw CorruptMessage("decode: the message holds " + std::to_string(h.elements) +
                           " elements, expected " + std::to_string(*n));
    }
    if (!n && h.elements > kMaxUntoldElements) {
      throw CorruptMessage("decode: the message claims " + std::to_string(h.elements) +
                           " elements, more than " + std::to_string(kMaxUntoldElements) +
                           " (pass n= if that is the size you expect)");
    }
    at::Tensor out = at::zeros({static_cast<std::int64_t>(h.elements)});
    decode_add(msg, out, 1.0f);
    return out;
  }

  void decode_add(const at::Tensor& msg, const at::Tensor& out, float alpha) const {
    const std::span<const std::byte> bytes = message_bytes(msg);
    const std::span<float> dst = float_span(out, "decode_add");
    py::gil_scoped_release release;
    codec_->decode_add(bytes, dst, alpha);
  }

  const Codec& codec() const { return *codec_; }

 private:
  std::shared_ptr<const Codec> codec_;
};

}  // namespace

void bind_codecs(py::module_& m) {
  m.def("list_codecs", &list_codecs,
        "Every codec, named memory (dgc) and reducer scheme (powersgd, sketched-sgd,\n"
        "fetchsgd) as dicts: kind, name, summary, canonical default spec, params, examples.");

  py::class_<PyCodec>(m, "Codec", R"doc(
A stateless gradient codec from a spec string, e.g. ``Codec("topk:ratio=0.01")``.

Plain codec specs only (``gradcomp.list_codecs()`` lists them); error feedback and
the other memories live in the DDP hook's state. A bad spec raises ``ValueError``
with the registry's message.)doc")
      .def(py::init<const std::string&>(), py::arg("spec"))
      .def_property_readonly(
          "spec", [](const PyCodec& c) { return c.codec().spec(); },
          "The canonical spec, every parameter spelled out.")
      .def_property_readonly("name", [](const PyCodec& c) { return c.codec().name(); })
      .def_property_readonly(
          "linear", [](const PyCodec& c) { return c.codec().traits().linear; },
          "Messages may be summed while compressed (allreduce).")
      .def_property_readonly("unbiased",
                             [](const PyCodec& c) { return c.codec().traits().unbiased; })
      .def(
          "max_encoded_bytes",
          [](const PyCodec& c, std::size_t n) { return c.codec().max_encoded_bytes(n); },
          py::arg("n"), "Upper bound of an encoded message of n elements, header included.")
      .def("encode", &PyCodec::encode, py::arg("tensor"), py::kw_only(), py::arg("seed") = 0,
           py::arg("step") = 0, py::arg("rank") = 0, py::arg("bucket") = 0,
           "Encodes a float32 CPU tensor into a uint8 message. Stochastic codecs draw from\n"
           "(seed, step, rank, bucket): the same four give the same message.")
      .def("decode", &PyCodec::decode, py::arg("message"), py::arg("n") = py::none(),
           "Decodes a message into a new flat float32 tensor. ValueError if the message is\n"
           "corrupt, from another codec, or (with n) not of n elements.")
      .def("decode_add", &PyCodec::decode_add, py::arg("message"), py::arg("out"),
           py::arg("alpha") = 1.0f,
           "out += alpha * decode(message), in place; out is untouched if the message is bad.")
      .def("__repr__",
           [](const PyCodec& c) { return "gradcomp.Codec('" + c.codec().spec() + "')"; });
}

}  // namespace gradcomp::python
