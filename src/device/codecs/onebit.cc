// 1bit on the device (src/core/codecs/onebit.cc is the CPU codec and the wire format):
// bit 1 (+1) where p > tau, else bit 0 (-1), NaN included; eight bits a byte, first value
// in the MSB, padding bits 0. Encoding never syncs; decoding syncs once (the padding), once
// for a whole batch. On CUDA, each encode is one fused kernel (read g and e, write e and
// the bits) and the decode's add another (src/device/cuda/sign_bits.cu); elsewhere ATen
// operations. signsgd (signsgd.cc) shares the decode and the encode.
#include "detail/bitpack.h"
#include "device/fused_kernels.h"
#include "gradcomp/error.h"
#include "sign_bits.h"

namespace gradcomp::device {

namespace {

class OneBitDeviceCodec final : public SignBitsCodec {
 public:
  OneBitDeviceCodec(const Codec& codec, float tau) : SignBitsCodec(codec), tau_(tau) {}

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

std::int64_t SignBitsCodec::payload_bytes(std::int64_t n) const {
  return static_cast<std::int64_t>(detail::packed1_bytes(static_cast<std::size_t>(n)));
}

at::Tensor SignBitsCodec::reports(const at::Tensor& payloads, std::span<const std::int64_t> offsets,
                                  std::span<const std::int64_t> bytes,
                                  std::span<const std::int64_t> ns,
                                  std::span<const at::Tensor> /*each*/) const {
  return padding_dirty(payloads, offsets, bytes, ns, 1).unsqueeze(1);
}

void SignBitsCodec::check(const at::Tensor& /*payload*/, std::int64_t n,
                          const float* report) const {
  if (report[0] != 0.0f) {
    throw CorruptMessage(codec().name() +
                         " decode: nonzero padding bits after the last element (n " +
                         std::to_string(n) + ")");
  }
}

void SignBitsCodec::add_checked(const at::Tensor& payload, const at::Tensor& out, float alpha,
                                const float* /*report*/) const {
  const float one = alpha * 1.0f;
  const float zero = alpha * -1.0f;
  if (fused::usable(out)) {
    fused::add_sign_bits(payload, one, zero, out);
    return;
  }
  const std::int64_t n = out.numel();
  out.add_(at::where(unpack1(payload).narrow(0, 0, n).to(at::kBool), one, zero));
}

std::unique_ptr<DeviceCodec> make_onebit(const Codec& codec, const SpecParams& params) {
  return std::make_unique<OneBitDeviceCodec>(codec, static_cast<float>(params.number("threshold")));
}

}  // namespace gradcomp::device
