// 1bit on the device (src/core/codecs/onebit.cc is the CPU codec and the wire format):
// bit 1 (+1) where p > tau, else bit 0 (-1), NaN included; eight bits a byte, first value
// in the MSB, padding bits 0. Encoding never syncs; decoding syncs once (the padding).
#include "codecs.h"
#include "detail/bitpack.h"
#include "gradcomp/error.h"

namespace gradcomp::device {

namespace {

class OneBitDeviceCodec final : public DeviceCodec {
 public:
  OneBitDeviceCodec(const Codec& codec, float tau) : DeviceCodec(codec), tau_(tau) {}

  at::Tensor encode_impl(const at::Tensor& g, const StepContext& /*ctx*/) const override {
    at::Tensor payload = empty_payload(g);
    pack1(g.gt(tau_), payload);
    return payload;
  }

  // p += lut[bit] with lut(-1) = {+1, -1}: one float add from the same bits.
  at::Tensor encode_feedback_impl(const at::Tensor& p, const StepContext& /*ctx*/) const override {
    at::Tensor payload = empty_payload(p);
    const at::Tensor bits = p.gt(tau_);
    pack1(bits, payload);
    p.add_(at::where(bits, -1.0f, 1.0f));
    return payload;
  }

  void decode_add_impl(const at::Tensor& payload, const at::Tensor& out,
                       float alpha) const override {
    decode_sign_bits(payload, out, alpha * 1.0f, alpha * -1.0f, "1bit decode");
  }

 private:
  static at::Tensor empty_payload(const at::Tensor& p) {
    return at::empty(
        {static_cast<std::int64_t>(detail::packed1_bytes(static_cast<std::size_t>(p.numel())))},
        p.options().dtype(at::kByte));
  }

  float tau_;
};

}  // namespace

void decode_sign_bits(const at::Tensor& packed, const at::Tensor& out, float one, float zero,
                      const std::string& op) {
  const std::int64_t n = out.numel();
  expect_payload_size(packed, static_cast<std::int64_t>(detail::packed1_bytes(n)), op, n);
  const at::Tensor bits = unpack1(packed);
  if (bits.narrow(0, n, bits.numel() - n).any().item<bool>()) {
    throw CorruptMessage(op + ": nonzero padding bits after the last element (n " +
                         std::to_string(n) + ")");
  }
  if (n == 0) return;
  out.add_(at::where(bits.narrow(0, 0, n).to(at::kBool), one, zero));
}

std::unique_ptr<DeviceCodec> make_onebit(const Codec& codec, const SpecParams& params) {
  return std::make_unique<OneBitDeviceCodec>(codec, static_cast<float>(params.number("threshold")));
}

}  // namespace gradcomp::device
