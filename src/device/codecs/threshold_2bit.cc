// 2bit on the device (src/core/codecs/threshold_2bit.cc is the CPU codec and the wire
// format): p >= tau -> code 11 (+tau), p <= -tau -> 10 (-tau), else 00; four codes a
// byte, first value in the top bits; the adaptive variant (threshold=0) sends
// tau = scale * mean |p| in front of the codes.
//
// tau is the CPU codec's float bit for bit: below 2^20 values the exact blocked sum
// (segment_abs_sums: a scan in double on the device, then one .item()), from 2^20 on the
// mean of the fixed stratified sample (gathered on the device, added on the host). The
// sampled case also needs "is all of p finite" (the CPU packing pass checks it): with ATen
// that flag travels with the sample, so every adaptive encode syncs once and the fixed
// threshold never; on CUDA the codes kernel raises the flag, read after it (a second sync,
// for one pass over the values instead of two).
//
// The residual step is p -= c * tau with c = [p >= tau] - [p <= -tau] in {-1, 0, 1}:
// one float op whose zero case subtracts +0 (so p = -0 stays -0, as the CPU's p + (-0)).
#include <cmath>
#include <limits>
#include <mutex>

#include "codecs.h"
#include "detail/abs_sample.h"
#include "detail/bitpack.h"
#include "device/fused_kernels.h"
#include "gradcomp/error.h"

namespace gradcomp::device {

namespace {

class Threshold2BitDeviceCodec final : public DeviceCodec {
 public:
  Threshold2BitDeviceCodec(const Codec& codec, float tau, double scale)
      : DeviceCodec(codec), tau_(tau), scale_(scale) {}

  at::Tensor encode_impl(const at::Tensor& g, const StepContext& /*ctx*/) const override {
    return encode(g, {}, {});
  }

  at::Tensor encode_with_residual_impl(const at::Tensor& g, const at::Tensor& e,
                                       const StepContext& /*ctx*/) const override {
    return encode(e, g, e);
  }

  at::Tensor encode_feedback_impl(const at::Tensor& p, const StepContext& /*ctx*/) const override {
    return encode(p, {}, p);
  }

  void decode_add_impl(const at::Tensor& payload, const at::Tensor& out,
                       float alpha) const override {
    const std::int64_t n = out.numel();
    const std::string op = "2bit decode";
    expect_payload_size(
        payload, header_bytes() + static_cast<std::int64_t>(detail::packed2_bytes(n)), op, n);
    const at::Tensor packed = payload.narrow(0, header_bytes(), payload.numel() - header_bytes());
    const bool kernels = fused::usable(out);
    const at::Tensor tau_t =
        adaptive() ? payload.narrow(0, 0, 4).view(at::kFloat) : at::full({1}, tau_, out.options());
    // One sync: [tau, padding dirty, any 01, any nonzero] in the CPU codec's order of checks.
    at::Tensor flags;
    at::Tensor codes;  // every code, padding included (the ATen path)
    if (kernels) {
      flags = at::cat({tau_t, fused::check_codes2(packed, n).to(at::kFloat)});
    } else {
      codes = unpack2(packed);
      const at::Tensor head = codes.narrow(0, 0, n);
      const at::Tensor tail = codes.narrow(0, n, codes.numel() - n);
      flags = at::stack({tau_t.squeeze(0), tail.ne(0).any().to(at::kFloat),
                         head.eq(1).any().to(at::kFloat), head.ne(0).any().to(at::kFloat)});
    }
    const at::Tensor host = flags.to(at::kCPU);
    const float* f = host.data_ptr<float>();
    const float tau = f[0];
    if (adaptive()) detail::validate_scale(tau, op, "threshold tau");
    if (f[1] != 0.0f) {
      throw CorruptMessage(op + ": nonzero padding bits after the last element (n " +
                           std::to_string(n) + ")");
    }
    if (f[2] != 0.0f) {
      // The error path only: a second sync for the element's index.
      const std::int64_t i =
          unpack2(packed).narrow(0, 0, n).eq(1).nonzero().select(1, 0)[0].item<std::int64_t>();
      throw CorruptMessage(op + ": invalid code 01 at element " + std::to_string(i) + " (n " +
                           std::to_string(n) + ")");
    }
    if (tau == 0.0f && f[3] != 0.0f) {
      throw CorruptMessage(op + ": threshold tau = 0 with nonzero codes (n " + std::to_string(n) +
                           ")");
    }
    // All 00 still adds alpha * 0 everywhere, as the CPU does (-0 + +0 is +0).
    if (n == 0) return;
    // lut[code] = {alpha * 0, (01: refused above), alpha * -tau, alpha * tau}.
    if (kernels) {
      fused::add_codes2(packed, {alpha * 0.0f, 0.0f, alpha * -tau, alpha * tau}, out);
      return;
    }
    const at::Tensor head = codes.narrow(0, 0, n);
    out.add_(at::where(head.eq(3), alpha * tau, at::where(head.eq(2), alpha * -tau, alpha * 0.0f)));
  }

 private:
  struct Codes {
    at::Tensor code;  // uint8: 3 (p >= tau), 2 (p <= -tau), 0
    at::Tensor sign;  // int8: +1, -1, 0
  };

  bool adaptive() const { return tau_ == 0.0f; }
  std::int64_t header_bytes() const { return adaptive() ? 4 : 0; }

  at::Tensor empty_payload(const at::Tensor& p) const {
    return at::empty({header_bytes() + static_cast<std::int64_t>(detail::packed2_bytes(
                                           static_cast<std::size_t>(p.numel())))},
                     p.options().dtype(at::kByte));
  }

  // The payload of x = a + b (b defined: the error-feedback step, out is then a) or of a;
  // where out is defined, out = x - c * tau (x minus its decode). On CUDA one fused kernel
  // (read g and e, write e and the codes), for the fixed threshold and for the adaptive one
  // from 2^20 values (tau from the sample of e + g); below that the exact mean needs all of
  // x first, so a first kernel writes x with its finiteness check.
  at::Tensor encode(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out) const {
    at::Tensor payload = empty_payload(a);
    const at::Tensor packed = payload.narrow(0, header_bytes(), payload.numel() - header_bytes());
    if (fused::usable(a)) {
      at::Tensor addend = b;
      at::Tensor non_finite;  // the codes pass's flag, where it checks x
      float tau = tau_;
      if (adaptive() && sampled_mean(a.numel())) {
        // tau from the sample of x (gathered from e and g), x checked by the codes pass:
        // one pass over e and g, two syncs.
        tau = message_tau(a, b, payload, {}, /*checked_later=*/true);
        non_finite = at::zeros({1}, a.options().dtype(at::kInt));
      } else if (adaptive()) {
        // The exact mean needs all of x first: x = e + g written, then tau, then the codes.
        const at::Tensor all_finite = fused::accumulate(a, b, b.defined() ? a : at::Tensor()).eq(0);
        addend = at::Tensor();
        tau = message_tau(a, {}, payload, all_finite);
      }
      // tau = 0 (an all-zero x) sends no codes and leaves the residual x.
      const float t = tau > 0.0f ? tau : std::numeric_limits<float>::infinity();
      // With tau = 0 a pending e + g is still written: into out, which is then a.
      fused::encode_codes2(a, addend, t, tau > 0.0f || addend.defined() ? out : at::Tensor(), -tau,
                           packed, non_finite);
      if (non_finite.defined() && non_finite.item<std::int32_t>() != 0) throw_non_finite();
      return payload;
    }
    if (b.defined()) a.add_(b);
    const float tau = message_tau(a, {}, payload, {});
    const Codes c = codes(a, tau);
    pack2(c.code, packed);
    // p += lut[code] with lut(tau, -1) = {-0, ., +tau, -tau}: p - c * tau.
    if (out.defined() && tau > 0.0f) out.sub_(c.sign, tau);
    return payload;
  }

  // The codes of p against tau (tau = 0, the all-zero p's, sends nothing).
  static Codes codes(const at::Tensor& p, float tau) {
    const float t = tau > 0.0f ? tau : std::numeric_limits<float>::infinity();
    const at::Tensor sign = p.ge(t).to(at::kChar);
    const at::Tensor lo = p.le(-t);
    sign.add_(lo, -1);  // sub refuses bool operands
    // code = 3 [p >= tau] + 2 [p <= -tau] = 3 sign + 5 [p <= -tau]
    at::Tensor code = sign.mul(3).add_(lo, 5).view(at::kByte);
    return {code, sign};
  }

  [[noreturn]] static void throw_non_finite() {
    throw InvalidArgument(
        "2bit encode: non-finite input (inf or NaN); the adaptive threshold needs a finite "
        "gradient");
  }

  static bool sampled_mean(std::int64_t n) {
    return static_cast<std::size_t>(n) >= detail::kAbsSampleMinN;
  }

  // The fixed tau, or scale * mean |x| written to the payload's first 4 bytes, x = a + b
  // (b defined only where the mean is sampled: the sample is gathered from a and b).
  // all_finite: x's finiteness as a device flag, checked with the sample; undefined: computed
  // here, unless checked_later (the caller's codes pass checks it, sampled means only).
  float message_tau(const at::Tensor& a, const at::Tensor& b, const at::Tensor& payload,
                    const at::Tensor& all_finite, bool checked_later = false) const {
    if (!adaptive()) return tau_;
    const std::int64_t n = a.numel();
    float tau = 0.0f;
    if (n > 0) {
      const bool sampled = sampled_mean(n);
      double sum = 0.0;
      if (sampled) {
        const at::Tensor index = sample_index(n, a.device());
        at::Tensor sample = a.index_select(0, index);
        if (b.defined()) sample.add_(b.index_select(0, index));
        const at::Tensor finite = checked_later ? at::ones({}, a.options().dtype(at::kBool))
                                  : all_finite.defined() ? all_finite
                                                         : a.isfinite().all();
        const std::vector<float> v = sample_and_flag(sample, finite);
        if (v.back() == 0.0f) throw_non_finite();
        sum = sampled_abs_sum(v.data());
      } else {
        sum = segment_abs_sums(a, n).item<double>();
      }
      if (!std::isfinite(sum)) throw_non_finite();
      const double count =
          sampled ? static_cast<double>(detail::kAbsSampleCount) : static_cast<double>(n);
      tau = static_cast<float>(scale_ * sum / count);
      if (!std::isfinite(tau)) tau = std::numeric_limits<float>::max();
    }
    payload.narrow(0, 0, 4).view(at::kFloat).fill_(tau);
    return tau;
  }

  // The sample's positions on p's device, kept for the last n and device (a bucket's size
  // repeats every step: one upload).
  at::Tensor sample_index(std::int64_t n, const at::Device& device) const {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!index_.defined() || index_n_ != n || index_.device() != device) {
      index_ = abs_sample_index(n).to(device);
      index_n_ = n;
    }
    return index_;
  }

  float tau_;
  double scale_;
  mutable std::mutex mutex_;
  mutable at::Tensor index_;
  mutable std::int64_t index_n_ = -1;
};

}  // namespace

std::unique_ptr<DeviceCodec> make_threshold_2bit(const Codec& codec, const SpecParams& params) {
  // As the CPU codec: a fixed threshold below fp32's range stays fixed (the smallest denormal).
  const double t = params.number("threshold");
  const float tau =
      t > 0.0 ? std::max(static_cast<float>(t), std::numeric_limits<float>::denorm_min()) : 0.0f;
  return std::make_unique<Threshold2BitDeviceCodec>(codec, tau, params.number("scale"));
}

}  // namespace gradcomp::device
