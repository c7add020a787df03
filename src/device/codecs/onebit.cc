// 1bit on the device (src/core/codecs/onebit.cc is the CPU codec and the wire format):
// bit 1 (+1) where p > tau, else bit 0 (-1), NaN included; eight bits a byte, first value
// in the MSB, padding bits 0. Encoding never syncs; decoding syncs once (the padding).
// On CUDA, each encode is one fused kernel (read g and e, write e and the bits) and the
// decode's add another (src/device/cuda/sign_bits.cu); elsewhere ATen operations.
#include "codecs.h"
#include "detail/bitpack.h"
#include "device/fused_kernels.h"
#include "gradcomp/error.h"

namespace gradcomp::device {

namespace {

class OneBitDeviceCodec final : public DeviceCodec {
 public:
  OneBitDeviceCodec(const Codec& codec, float tau) : DeviceCodec(codec), tau_(tau) {}

  at::Tensor encode_impl(const at::Tensor& g, const StepContext& /*ctx*/) const override {
    return encode_signs(g, {}, tau_, /*at_least=*/false, {});
  }

  at::Tensor encode_with_residual_impl(const at::Tensor& g, const at::Tensor& e,
                                       const StepContext& /*ctx*/) const override {
    return encode_signs(e, g, tau_, /*at_least=*/false, e);
  }

  at::Tensor encode_feedback_impl(const at::Tensor& p, const StepContext& /*ctx*/) const override {
    return encode_signs(p, {}, tau_, /*at_least=*/false, p);
  }

  void decode_add_impl(const at::Tensor& payload, const at::Tensor& out,
                       float alpha) const override {
    decode_sign_bits(payload, out, alpha * 1.0f, alpha * -1.0f, "1bit decode");
  }

 private:
  float tau_;
};

}  // namespace

at::Tensor encode_signs(const at::Tensor& a, const at::Tensor& b, float tau, bool at_least,
                        const at::Tensor& out) {
  const std::int64_t n = a.numel();
  at::Tensor payload =
      at::empty({static_cast<std::int64_t>(detail::packed1_bytes(static_cast<std::size_t>(n)))},
                a.options().dtype(at::kByte));
  // out += lut[bit] with lut = {+1 (bit 0), -1 (bit 1)}: p minus its decode.
  if (fused::usable(a)) {
    fused::encode_sign_bits(a, b, tau, at_least, out, -1.0f, 1.0f, payload);
    return payload;
  }
  if (b.defined()) a.add_(b);
  const at::Tensor bits = at_least ? a.ge(tau) : a.gt(tau);
  pack1(bits, payload);
  if (out.defined()) out.add_(at::where(bits, -1.0f, 1.0f));
  return payload;
}

void decode_sign_bits(const at::Tensor& packed, const at::Tensor& out, float one, float zero,
                      const std::string& op) {
  const std::int64_t n = out.numel();
  expect_payload_size(packed, static_cast<std::int64_t>(detail::packed1_bytes(n)), op, n);
  // The padding: the bits after n, all in the bytes from n / 8 on (at most four).
  const at::Tensor tail = unpack1(packed.narrow(0, n / 8, packed.numel() - n / 8));
  if (tail.narrow(0, n % 8, tail.numel() - n % 8).any().item<bool>()) {
    throw CorruptMessage(op + ": nonzero padding bits after the last element (n " +
                         std::to_string(n) + ")");
  }
  if (n == 0) return;
  if (fused::usable(out)) {
    fused::add_sign_bits(packed, one, zero, out);
    return;
  }
  const at::Tensor bits = unpack1(packed);
  out.add_(at::where(bits.narrow(0, 0, n).to(at::kBool), one, zero));
}

std::unique_ptr<DeviceCodec> make_onebit(const Codec& codec, const SpecParams& params) {
  return std::make_unique<OneBitDeviceCodec>(codec, static_cast<float>(params.number("threshold")));
}

}  // namespace gradcomp::device
