#include "gradcomp/codec.h"

#include <algorithm>
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

}  // namespace

std::size_t Codec::encode(std::span<const float> in, const StepContext& ctx,
                          std::span<std::byte> out) const {
  check_encode_args(*this, in.size(), out.size(), "encode");
  std::uint32_t payload_crc = 0;
  if (!detail::checksum_disabled()) {
    const std::size_t payload =
        encode_payload_crc(in, ctx, out.subspan(kHeaderBytes), &payload_crc);
    if (payload != kNoPayloadCrc) {
      write_header_payload_crc(out, wire_id(), config_tag(), in.size(), payload, payload_crc);
      return kHeaderBytes + payload;
    }
  }
  const std::size_t payload = encode_payload(in, ctx, out.subspan(kHeaderBytes));
  write_header(out, wire_id(), config_tag(), in.size(), payload);
  return kHeaderBytes + payload;
}

void Codec::decode_add(std::span<const std::byte> msg, std::span<float> out, float alpha) const {
  decode_payload_add(open_payload(msg, *this, out.size()), out, alpha);
}

std::size_t Codec::encode_feedback(std::span<float> p, const StepContext& ctx,
                                   std::span<std::byte> out) const {
  check_encode_args(*this, p.size(), out.size(), "encode");
  std::uint32_t payload_crc = 0;
  if (!detail::checksum_disabled()) {
    const std::size_t payload =
        encode_payload_feedback_crc(p, ctx, out.subspan(kHeaderBytes), &payload_crc);
    if (payload != kNoPayloadCrc) {
      write_header_payload_crc(out, wire_id(), config_tag(), p.size(), payload, payload_crc);
      return kHeaderBytes + payload;
    }
  }
  const std::size_t payload = encode_payload_feedback(p, ctx, out.subspan(kHeaderBytes));
  write_header(out, wire_id(), config_tag(), p.size(), payload);
  return kHeaderBytes + payload;
}

std::size_t Codec::encode_payload_feedback(std::span<float> p, const StepContext& ctx,
                                           std::span<std::byte> payload) const {
  const std::size_t bytes = encode_payload(p, ctx, payload);
  decode_payload_add(payload.first(bytes), p, -1.0f);
  return bytes;
}

std::size_t Codec::encode_with_residual(const ResidualUpdate& update, std::span<float> e,
                                        const StepContext& ctx, std::span<std::byte> out) const {
  if (update.size() != e.size()) {
    throw InvalidArgument(name() + " encode: gradient of " + std::to_string(update.size()) +
                          " elements, residual of " + std::to_string(e.size()));
  }
  check_encode_args(*this, e.size(), out.size(), "encode");
  std::uint32_t payload_crc = 0;
  if (!detail::checksum_disabled()) {
    const std::size_t payload =
        encode_payload_with_residual_crc(update, e, ctx, out.subspan(kHeaderBytes), &payload_crc);
    if (payload != kNoPayloadCrc) {
      write_header_payload_crc(out, wire_id(), config_tag(), e.size(), payload, payload_crc);
      return kHeaderBytes + payload;
    }
  }
  const std::size_t payload =
      encode_payload_with_residual(update, e, ctx, out.subspan(kHeaderBytes));
  write_header(out, wire_id(), config_tag(), e.size(), payload);
  return kHeaderBytes + payload;
}

std::size_t Codec::encode_payload_with_residual(const ResidualUpdate& update, std::span<float> e,
                                                const StepContext& ctx,
                                                std::span<std::byte> payload) const {
  update.apply(e.data(), 0, e.size());
  return encode_payload_feedback(e, ctx, payload);
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

std::size_t Codec::encode_payload_crc(std::span<const float> /*in*/, const StepContext& /*ctx*/,
                                      std::span<std::byte> /*payload*/,
                                      std::uint32_t* /*payload_crc*/) const {
  return kNoPayloadCrc;
}

std::size_t Codec::encode_payload_feedback_crc(std::span<float> /*p*/, const StepContext& /*ctx*/,
                                               std::span<std::byte> /*payload*/,
                                               std::uint32_t* /*payload_crc*/) const {
  return kNoPayloadCrc;
}

std::size_t Codec::encode_payload_with_residual_crc(const ResidualUpdate& /*update*/,
                                                    std::span<float> /*e*/,
                                                    const StepContext& /*ctx*/,
                                                    std::span<std::byte> /*payload*/,
                                                    std::uint32_t* /*payload_crc*/) const {
  return kNoPayloadCrc;
}

LinearRegion Codec::linear_region(std::size_t /*n*/) const {
  throw InvalidArgument(name() + ": not a linear codec; its messages cannot be summed");
}

}  // namespace gradcomp
