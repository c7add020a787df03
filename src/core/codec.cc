#include "gradcomp/codec.h"

#include <algorithm>
#include <optional>
#include <string>

#include "detail/checksum_switch.h"
#include "gradcomp/error.h"
#include "gradcomp/wire.h"

namespace gradcomp {

Codec::Codec(CodecIdentity identity, CodecTraits traits)
    : identity_(std::move(identity)), traits_(traits), config_tag_(fnv1a32(identity_.spec)) {}

std::size_t Codec::max_encoded_bytes(std::size_t n) const {
  return kHeaderBytes + max_payload_bytes(n);
}

std::size_t Codec::planned_encoded_bytes(std::size_t n, const StepContext& ctx) const {
  return kHeaderBytes + std::min(planned_payload_bytes(n, ctx), max_payload_bytes(n));
}

namespace {

void check_encode_args(const Codec& codec, std::size_t n, std::size_t out_bytes,
                       std::string_view op) {
  if (n > kMaxElements) {
    throw InvalidArgument(codec.name() + " " + std::string(op) + ": " + std::to_string(n) +
                          " elements > the wire format's limit " + std::to_string(kMaxElements));
  }
  const std::size_t need = codec.max_encoded_bytes(n);
  if (out_bytes < need) {
    throw InvalidArgument(codec.name() + " " + std::string(op) + ": output buffer of " +
                          std::to_string(out_bytes) + " bytes < max_encoded_bytes " +
                          std::to_string(need));
  }
}

// The framing all three encode entry points share: check the arguments, let `hook` write
// the payload after the header (given a CRC slot, null while checksums are off), then
// write the header, with the payload's CRC if the hook fused it into its pass (codec.h,
// PayloadCrc), else checksumming the payload here.
template <class Hook>
std::size_t encode_framed(const Codec& codec, std::size_t n, std::span<std::byte> out,
                          Hook&& hook) {
  check_encode_args(codec, n, out.size(), "encode");
  std::optional<std::uint32_t> payload_crc;
  const std::size_t payload =
      hook(out.subspan(kHeaderBytes), detail::checksum_disabled() ? nullptr : &payload_crc);
  if (payload_crc) {
    write_header_payload_crc(out, codec.wire_id(), codec.config_tag(), n, payload, *payload_crc);
  } else {
    write_header(out, codec.wire_id(), codec.config_tag(), n, payload);
  }
  return kHeaderBytes + payload;
}

}  // namespace

std::size_t Codec::encode(std::span<const float> in, const StepContext& ctx,
                          std::span<std::byte> out) const {
  return encode_framed(*this, in.size(), out, [&](std::span<std::byte> payload, PayloadCrc* crc) {
    return encode_payload(in, ctx, payload, crc);
  });
}

void Codec::decode_add(std::span<const std::byte> msg, std::span<float> out, float alpha) const {
  decode_payload_add(open_payload(msg, *this, out.size()), out, alpha);
}

std::size_t Codec::encode_feedback(std::span<float> p, const StepContext& ctx,
                                   std::span<std::byte> out) const {
  return encode_framed(*this, p.size(), out, [&](std::span<std::byte> payload, PayloadCrc* crc) {
    return encode_payload_feedback(p, ctx, payload, crc);
  });
}

std::size_t Codec::encode_payload_feedback(std::span<float> p, const StepContext& ctx,
                                           std::span<std::byte> payload,
                                           PayloadCrc* payload_crc) const {
  const std::size_t bytes = encode_payload(p, ctx, payload, payload_crc);
  decode_payload_add(payload.first(bytes), p, -1.0f);
  return bytes;
}

std::size_t Codec::encode_with_residual(const ResidualUpdate& update, std::span<float> e,
                                        const StepContext& ctx, std::span<std::byte> out) const {
  if (update.size() != e.size()) {
    throw InvalidArgument(name() + " encode: gradient of " + std::to_string(update.size()) +
                          " elements, residual of " + std::to_string(e.size()));
  }
  return encode_framed(*this, e.size(), out, [&](std::span<std::byte> payload, PayloadCrc* crc) {
    return encode_payload_with_residual(update, e, ctx, payload, crc);
  });
}

std::size_t Codec::encode_payload_with_residual(const ResidualUpdate& update, std::span<float> e,
                                                const StepContext& ctx,
                                                std::span<std::byte> payload,
                                                PayloadCrc* payload_crc) const {
  update.apply(e.data(), 0, e.size());
  return encode_payload_feedback(e, ctx, payload, payload_crc);
}

// The expressions are those of the unfused memories (error_feedback.cc before the fused
// path) and of the tests' references, so a compiler that contracts m*u + g into an FMA
// contracts it here too: apply and peek compute the same values.
void ResidualUpdate::apply(float* e, std::size_t begin, std::size_t end) const {
  const float* g = g_.data();
  if (!momentum_) {
    for (std::size_t i = begin; i < end; ++i) e[i] += g[i];
    return;
  }
  float* u = u_.data();
  const float m = m_;
  if (nesterov_) {
    for (std::size_t i = begin; i < end; ++i) {
      u[i] = m * (u[i] + g[i]);
      e[i] += u[i] + g[i];
    }
  } else {
    for (std::size_t i = begin; i < end; ++i) {
      u[i] = m * u[i] + g[i];
      e[i] += u[i];
    }
  }
}

void ResidualUpdate::peek(const float* e, std::size_t begin, std::size_t end, float* dst) const {
  const float* g = g_.data();
  if (!momentum_) {
    for (std::size_t i = begin; i < end; ++i) dst[i - begin] = e[i] + g[i];
    return;
  }
  const float* u = u_.data();
  const float m = m_;
  if (nesterov_) {
    for (std::size_t i = begin; i < end; ++i) {
      float ui = m * (u[i] + g[i]);
      // apply stores m*(u + g) to u, which keeps compilers from contracting it into the
      // following sum; the empty asm does the same here (peek only serves samples).
      asm("" : "+x"(ui));
      dst[i - begin] = e[i] + (ui + g[i]);
    }
  } else {
    for (std::size_t i = begin; i < end; ++i) {
      const float ui = m * u[i] + g[i];
      dst[i - begin] = e[i] + ui;
    }
  }
}

LinearRegion Codec::linear_region(std::size_t /*n*/) const {
  throw InvalidArgument(name() + ": not a linear codec; its messages cannot be summed");
}

}  // namespace gradcomp
