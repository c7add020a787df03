#include "gradcomp/device/codec.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <utility>

#include "codecs/codecs.h"
#include "gradcomp/error.h"
#include "gradcomp/wire.h"

namespace gradcomp::device {

namespace {

using Factory = std::function<std::unique_ptr<DeviceCodec>(const Codec&, const SpecParams&)>;

// The built-in codecs with a device implementation, by the CPU codec's name.
const std::vector<std::pair<std::string, Factory>>& factories() {
  static const std::vector<std::pair<std::string, Factory>> table = {
      {"fp16", make_fp16},   {"topk", make_topk},       {"2bit", make_threshold_2bit},
      {"1bit", make_onebit}, {"signsgd", make_signsgd}, {"efsign", make_efsign},
      {"int", make_int},
  };
  return table;
}

}  // namespace

// The payload where ATen can view its fields as 4- and 8-byte values: a payload cut from
// messages gathered back to back starts wherever the one before it ended (after top-k's
// 4 + 6c bytes with fp16 values, 2 bytes off a word), and a dtype view needs its offset
// to be a multiple of the new element size. Such a payload is copied (it is small).
at::Tensor aligned_payload(const at::Tensor& payload) {
  return payload.storage_offset() % 8 == 0 ? payload : payload.clone();
}

std::optional<bool> batch_override() {
  const char* batch = std::getenv("GRADCOMP_DEVICE_BATCH");
  if (batch == nullptr) return std::nullopt;
  return std::string(batch) != "0";
}

bool batches_on(const at::Device& device, std::optional<bool> override) {
  return override.value_or(device.is_cuda());
}

at::Tensor longs_to_device(const std::vector<std::int64_t>& v, const at::Device& device) {
  at::Tensor t = at::empty({static_cast<std::int64_t>(v.size())},
                           at::TensorOptions().dtype(at::kLong).pinned_memory(device.is_cuda()));
  std::copy(v.begin(), v.end(), t.data_ptr<std::int64_t>());
  return t.to(device, /*non_blocking=*/true);
}

DeviceCodec::EncodedBatch joined(std::vector<at::Tensor> payloads, const at::Tensor& like) {
  DeviceCodec::EncodedBatch out;
  for (const at::Tensor& p : payloads) out.bytes.push_back(p.numel());
  out.payloads = payloads.empty()       ? at::empty({0}, like.options().dtype(at::kByte))
                 : payloads.size() == 1 ? payloads.front()
                                        : at::cat(payloads);
  return out;
}

at::Tensor DeviceCodec::encode_payload(const at::Tensor& g, const StepContext& ctx) const {
  check_floats(g, (codec().name() + " encode").c_str());
  return encode_impl(g, ctx);
}

at::Tensor DeviceCodec::encode_payload_with_residual(const at::Tensor& g, const at::Tensor& e,
                                                     const StepContext& ctx) const {
  const std::string op = codec().name() + " encode";
  check_floats(g, op.c_str());
  check_floats(e, op.c_str());
  if (g.numel() != e.numel() || g.device() != e.device()) {
    throw InvalidArgument(op + ": gradient and residual differ in size or device");
  }
  return encode_with_residual_impl(g, e, ctx);
}

at::Tensor DeviceCodec::encode_payload_feedback(const at::Tensor& p, const StepContext& ctx) const {
  check_floats(p, (codec().name() + " encode").c_str());
  return encode_feedback_impl(p, ctx);
}

void DeviceCodec::decode_payload_add(const at::Tensor& payload, const at::Tensor& out,
                                     float alpha) const {
  const std::string op = codec().name() + " decode";
  check_floats(out, op.c_str());
  check_payload(payload, out.device(), op.c_str());
  decode_add_impl(aligned_payload(payload), out, alpha);
}

namespace {

// Throws InvalidArgument naming `op` unless sizes and ctxs describe flat's segments.
void check_segments(const at::Tensor& flat, std::span<const std::int64_t> sizes,
                    std::span<const StepContext> ctxs, const std::string& op) {
  check_floats(flat, op.c_str());
  std::int64_t total = 0;
  for (const std::int64_t n : sizes) {
    if (n < 0) throw InvalidArgument(op + ": a batch segment of " + std::to_string(n) + " values");
    total += n;
  }
  if (total != flat.numel() || ctxs.size() != sizes.size()) {
    throw InvalidArgument(op + ": a batch of " + std::to_string(sizes.size()) + " segments (" +
                          std::to_string(total) + " values, " + std::to_string(ctxs.size()) +
                          " contexts) over " + std::to_string(flat.numel()) + " values");
  }
}

}  // namespace

DeviceCodec::EncodedBatch DeviceCodec::encode_batch(const at::Tensor& flat,
                                                    std::span<const std::int64_t> sizes,
                                                    std::span<const StepContext> ctxs,
                                                    bool feedback) const {
  check_segments(flat, sizes, ctxs, codec().name() + " encode");
  return encode_batch_impl(flat, sizes, ctxs, feedback);
}

DeviceCodec::EncodedBatch DeviceCodec::encode_batch_with_residual(
    const at::Tensor& g, const at::Tensor& e, std::span<const std::int64_t> sizes,
    std::span<const StepContext> ctxs) const {
  const std::string op = codec().name() + " encode";
  check_segments(g, sizes, ctxs, op);
  check_floats(e, op.c_str());
  if (g.numel() != e.numel() || g.device() != e.device()) {
    throw InvalidArgument(op + ": gradient and residual differ in size or device");
  }
  return encode_batch_with_residual_impl(g, e, sizes, ctxs);
}

void DeviceCodec::decode_batch(const at::Tensor& payloads, std::span<const std::int64_t> offsets,
                               std::span<const std::int64_t> bytes,
                               std::span<const at::Tensor> outs, float alpha) const {
  const std::string op = codec().name() + " decode";
  for (const at::Tensor& out : outs) check_floats(out, op.c_str());
  if (!outs.empty()) check_payload(payloads, outs.front().device(), op.c_str());
  const bool shaped = offsets.size() == bytes.size() &&
                      (outs.empty() ? offsets.empty() : offsets.size() % outs.size() == 0);
  if (!shaped) {
    throw InvalidArgument(op + ": " + std::to_string(offsets.size()) + " offsets and " +
                          std::to_string(bytes.size()) + " lengths for " +
                          std::to_string(outs.size()) + " outputs");
  }
  for (std::size_t i = 0; i < offsets.size(); ++i) {
    if (offsets[i] < 0 || bytes[i] < 0 || offsets[i] > payloads.numel() ||
        bytes[i] > payloads.numel() - offsets[i]) {
      throw InvalidArgument(op + ": payload " + std::to_string(i) + " outside the batch's " +
                            std::to_string(payloads.numel()) + " bytes");
    }
  }
  decode_batch_impl(payloads, offsets, bytes, outs, alpha);
}

DeviceCodec::EncodedBatch DeviceCodec::encode_batch_impl(const at::Tensor& flat,
                                                         std::span<const std::int64_t> sizes,
                                                         std::span<const StepContext> ctxs,
                                                         bool feedback) const {
  std::vector<at::Tensor> payloads;
  std::int64_t offset = 0;
  for (std::size_t s = 0; s < sizes.size(); ++s) {
    const at::Tensor segment = flat.narrow(0, offset, sizes[s]);
    payloads.push_back(feedback ? encode_feedback_impl(segment, ctxs[s])
                                : encode_impl(segment, ctxs[s]));
    offset += sizes[s];
  }
  return joined(std::move(payloads), flat);
}

DeviceCodec::EncodedBatch DeviceCodec::encode_batch_with_residual_impl(
    const at::Tensor& g, const at::Tensor& e, std::span<const std::int64_t> sizes,
    std::span<const StepContext> ctxs) const {
  std::vector<at::Tensor> payloads;
  std::int64_t offset = 0;
  for (std::size_t s = 0; s < sizes.size(); ++s) {
    payloads.push_back(encode_with_residual_impl(g.narrow(0, offset, sizes[s]),
                                                 e.narrow(0, offset, sizes[s]), ctxs[s]));
    offset += sizes[s];
  }
  return joined(std::move(payloads), g);
}

void DeviceCodec::decode_batch_impl(const at::Tensor& payloads,
                                    std::span<const std::int64_t> offsets,
                                    std::span<const std::int64_t> bytes,
                                    std::span<const at::Tensor> outs, float alpha) const {
  const std::size_t segments = outs.size();
  const std::size_t ranks = segments == 0 ? 0 : offsets.size() / segments;
  for (std::size_t s = 0; s < segments; ++s) {
    outs[s].zero_();
    for (std::size_t r = 0; r < ranks; ++r) {
      const std::size_t i = r * segments + s;
      decode_add_impl(aligned_payload(payloads.narrow(0, offsets[i], bytes[i])), outs[s], alpha);
    }
  }
}

at::Tensor DeviceCodec::encode_with_residual_impl(const at::Tensor& g, const at::Tensor& e,
                                                  const StepContext& ctx) const {
  e.add_(g);
  return encode_feedback_impl(e, ctx);
}

at::Tensor DeviceCodec::encode_feedback_impl(const at::Tensor& p, const StepContext& ctx) const {
  at::Tensor payload = encode_impl(p, ctx);
  decode_add_impl(payload, p, -1.0f);
  return payload;
}

std::unique_ptr<DeviceCodec> make_device_codec(const Codec& codec) {
  for (const auto& [name, make] : factories()) {
    if (name == codec.name()) return make(codec, SpecParams(codec));
  }
  return nullptr;
}

std::vector<std::string> device_codec_names() {
  std::vector<std::string> names;
  for (const auto& entry : factories()) names.push_back(entry.first);
  return names;
}

std::vector<std::byte> frame_message(const Codec& codec, std::size_t n, const at::Tensor& payload) {
  if (!payload.device().is_cpu() || payload.scalar_type() != at::kByte || payload.dim() != 1 ||
      !payload.is_contiguous()) {
    throw InvalidArgument(codec.name() +
                          " frame_message: the payload must be a contiguous 1-D "
                          "CPU uint8 tensor");
  }
  if (n > kMaxElements) {
    throw InvalidArgument(codec.name() + " frame_message: " + std::to_string(n) +
                          " elements > the wire format's limit " + std::to_string(kMaxElements));
  }
  const auto bytes = static_cast<std::size_t>(payload.numel());
  std::vector<std::byte> msg(kHeaderBytes + bytes);
  if (bytes > 0) std::memcpy(msg.data() + kHeaderBytes, payload.data_ptr<std::uint8_t>(), bytes);
  write_header(msg, codec.wire_id(), codec.config_tag(), n, bytes);
  return msg;
}

at::Tensor open_message(std::span<const std::byte> msg, const Codec& codec, std::size_t n) {
  const std::span<const std::byte> payload = open_payload(msg, codec, n);
  // from_blob never writes through the pointer it is given here (callers read it).
  return at::from_blob(const_cast<std::byte*>(payload.data()),
                       {static_cast<std::int64_t>(payload.size())},
                       at::TensorOptions().dtype(at::kByte));
}

SpecParams::SpecParams(const Codec& codec) : node_(parse_spec(codec.spec())) {}

const std::string& SpecParams::text(std::string_view key) const {
  for (const auto& [k, v] : node_.params) {
    if (k == key) return v;
  }
  throw InvalidArgument(node_.name + ": no parameter " + std::string(key) + " in its spec");
}

double SpecParams::number(std::string_view key) const { return std::stod(text(key)); }

std::int64_t SpecParams::integer(std::string_view key) const { return std::stoll(text(key)); }

void check_floats(const at::Tensor& t, const char* what) {
  if (t.scalar_type() != at::kFloat || t.dim() != 1 || !t.is_contiguous()) {
    throw InvalidArgument(std::string(what) + ": expected a contiguous 1-D float32 tensor, got " +
                          std::string(c10::toString(t.scalar_type())) + " of " +
                          std::to_string(t.dim()) + " dimensions");
  }
}

void check_payload(const at::Tensor& payload, const at::Device& device, const char* what) {
  if (payload.scalar_type() != at::kByte || payload.dim() != 1 || !payload.is_contiguous() ||
      payload.device() != device) {
    throw InvalidArgument(std::string(what) +
                          ": the payload must be a contiguous 1-D uint8 "
                          "tensor on " +
                          device.str());
  }
}

void expect_payload_size(const at::Tensor& payload, std::int64_t expected, const std::string& op,
                         std::int64_t n) {
  if (payload.numel() != expected) {
    throw CorruptMessage(op + ": payload of " + std::to_string(payload.numel()) +
                         " bytes, expected " + std::to_string(expected) + " for n " +
                         std::to_string(n));
  }
}

}  // namespace gradcomp::device
