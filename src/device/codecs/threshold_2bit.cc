// 2bit on the device (src/core/codecs/threshold_2bit.cc is the CPU codec and the wire
// format): p >= tau -> code 11 (+tau), p <= -tau -> 10 (-tau), else 00; four codes a
// byte, first value in the top bits; the adaptive variant (threshold=0) sends
// tau = scale * mean |p| in front of the codes.
//
// tau is the CPU codec's float bit for bit: below 2^20 values the exact blocked sum
// (segment_abs_sums: a scan in double on the device, read by the host), from 2^20 on the
// mean of the fixed stratified sample (gathered on the device, added on the host). The
// sampled case also needs "is all of p finite" (the CPU packing pass checks it): with ATen
// that flag travels with the sample, so every adaptive encode syncs once and the fixed
// threshold never; on CUDA the codes kernel raises the flag, read after it (a second sync,
// for one pass over the values instead of two). A batch of tensors shares those syncs:
// every tensor's sum or sample comes over in one transfer, every flag in one more. The
// decode syncs once for its checks (CheckedDecodeCodec), once for a whole batch.
//
// The residual step is p -= c * tau with c = [p >= tau] - [p <= -tau] in {-1, 0, 1}:
// one float op whose zero case subtracts +0 (so p = -0 stays -0, as the CPU's p + (-0)).
#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <utility>
#include <vector>

#include "codecs.h"
#include "detail/abs_sample.h"
#include "detail/bitpack.h"
#include "device/fused_kernels.h"
#include "gradcomp/error.h"
#include "segmented_codec.h"

namespace gradcomp::device {

namespace {

class Threshold2BitDeviceCodec final : public SegmentedCodec {
 public:
  Threshold2BitDeviceCodec(const Codec& codec, float tau, double scale)
      : SegmentedCodec(codec), tau_(tau), scale_(scale) {}

 protected:
  std::int64_t payload_bytes(std::int64_t n) const override {
    return header_bytes() + static_cast<std::int64_t>(detail::packed2_bytes(n));
  }
  std::int64_t report_size() const override { return 4; }

  // [tau, padding dirty, any code 01, any code nonzero], in the CPU codec's order of checks.
  // Every message's tau in one gather (the adaptive one's first 4 bytes) or one fill; the
  // codes' flags per message: the kernel's check, or on the ATen path the packed bytes read
  // without unpacking them (with clean padding, checked first, the codes after n are 00 and
  // count for neither) and the padding of all messages from one gather.
  at::Tensor reports(const at::Tensor& payloads, std::span<const std::int64_t> offsets,
                     std::span<const std::int64_t> bytes, std::span<const std::int64_t> ns,
                     std::span<const at::Tensor> each) const override {
    const auto messages = static_cast<std::int64_t>(offsets.size());
    const at::TensorOptions floats = payloads.options().dtype(at::kFloat);
    at::Tensor tau = at::full({messages, 1}, tau_, floats);
    if (adaptive()) {
      std::vector<std::int64_t> positions;
      for (const std::int64_t o : offsets) {
        for (std::int64_t b = 0; b < 4; ++b) positions.push_back(o + b);
      }
      tau = payloads.index_select(0, longs_to_device(positions, payloads.device()))
                .view(at::kFloat)
                .view({messages, 1});
    }
    if (fused::usable(payloads)) {
      return at::cat({tau, stack_reports(each, ns,
                                         [&](const at::Tensor& payload, std::int64_t n) {
                                           return fused::check_codes2(codes_of(payload), n);
                                         })},
                     1);
    }
    const at::Tensor codes = stack_reports(each, ns, [&](const at::Tensor& payload, std::int64_t) {
      const at::Tensor packed = codes_of(payload);
      // Code 01: the low bit of a pair set, its high bit clear.
      const at::Tensor code01 =
          packed.bitwise_and(0x55).bitwise_and_(at::bitwise_right_shift(packed, 1).bitwise_not_());
      return at::stack({code01.ne(0).any(), packed.ne(0).any()});
    });
    return at::cat({tau, padding_dirty(payloads, offsets, bytes, ns, 2).unsqueeze(1), codes}, 1);
  }

  void check(const at::Tensor& payload, std::int64_t n, const float* report) const override {
    const std::string op = "2bit decode";
    const float tau = report[0];
    if (adaptive()) detail::validate_scale(tau, op, "threshold tau");
    if (report[1] != 0.0f) {
      throw CorruptMessage(op + ": nonzero padding bits after the last element (n " +
                           std::to_string(n) + ")");
    }
    if (report[2] != 0.0f) {
      // The error path only: a second sync for the element's index.
      const std::int64_t i = unpack2(codes_of(payload))
                                 .narrow(0, 0, n)
                                 .eq(1)
                                 .nonzero()
                                 .select(1, 0)[0]
                                 .item<std::int64_t>();
      throw CorruptMessage(op + ": invalid code 01 at element " + std::to_string(i) + " (n " +
                           std::to_string(n) + ")");
    }
    if (tau == 0.0f && report[3] != 0.0f) {
      throw CorruptMessage(op + ": threshold tau = 0 with nonzero codes (n " + std::to_string(n) +
                           ")");
    }
  }

  // All 00 still adds alpha * 0 everywhere, as the CPU does (-0 + +0 is +0).
  // lut[code] = {alpha * 0, (01: refused), alpha * -tau, alpha * tau}.
  void add_checked(const at::Tensor& payload, const at::Tensor& out, float alpha,
                   const float* report) const override {
    const float tau = report[0];
    const at::Tensor packed = codes_of(payload);
    if (fused::usable(out)) {
      fused::add_codes2(packed, {alpha * 0.0f, 0.0f, alpha * -tau, alpha * tau}, out);
      return;
    }
    const at::Tensor head = unpack2(packed).narrow(0, 0, out.numel());
    out.add_(at::where(head.eq(3), alpha * tau, at::where(head.eq(2), alpha * -tau, alpha * 0.0f)));
  }

 private:
  struct Codes {
    at::Tensor code;  // uint8: 3 (p >= tau), 2 (p <= -tau), 0
    at::Tensor sign;  // int8: +1, -1, 0
  };

  bool adaptive() const { return tau_ == 0.0f; }
  std::int64_t header_bytes() const { return adaptive() ? 4 : 0; }
  at::Tensor codes_of(const at::Tensor& payload) const {
    return payload.narrow(0, header_bytes(), payload.numel() - header_bytes());
  }

  // The adaptive tau first, for every segment, from one transfer (the sync): the exact
  // blocked sum of |x| below 2^20 values (x = a + b written first), else the fixed sample
  // (gathered from a and b, x's finiteness with it on the ATen path). Then the codes: on
  // CUDA one fused kernel a segment (read a and b, write a and the codes), which checks the
  // finiteness of the sampled segments' x into one flag, read after all of them (a second
  // sync, for one pass over the values instead of two). The fixed threshold never syncs.
  EncodedBatch encode_segments(const at::Tensor& a, const at::Tensor& b,
                               std::span<const std::int64_t> sizes, bool write) const override {
    const bool kernels = fused::usable(a);
    const std::size_t segments = sizes.size();
    std::vector<at::Tensor> payloads(segments);
    std::vector<std::int64_t> start(segments);
    std::vector<char> pending(segments, b.defined() ? 1 : 0);  // b still to add
    std::int64_t offset = 0;
    for (std::size_t s = 0; s < segments; ++s) {
      start[s] = offset;
      payloads[s] = at::empty({payload_bytes(sizes[s])}, a.options().dtype(at::kByte));
      offset += sizes[s];
    }
    const auto part = [&](const at::Tensor& t, std::size_t s) {
      return t.narrow(0, start[s], sizes[s]);
    };
    std::vector<float> taus(segments, tau_);
    at::Tensor non_finite;  // the codes passes' flag, where they check x
    if (adaptive()) {
      if (!kernels && b.defined()) {
        a.add_(b);
        std::fill(pending.begin(), pending.end(), 0);
      }
      taus = thresholds(a, b, sizes, start, kernels, pending);
      for (std::size_t s = 0; s < segments; ++s) {
        payloads[s].narrow(0, 0, 4).view(at::kFloat).fill_(taus[s]);
        if (kernels && sampled_mean(sizes[s]) && !non_finite.defined()) {
          non_finite = at::zeros({1}, a.options().dtype(at::kInt));
        }
      }
    }
    for (std::size_t s = 0; s < segments; ++s) {
      const float tau = taus[s];
      const at::Tensor x = part(a, s);
      const at::Tensor addend = pending[s] ? part(b, s) : at::Tensor();
      const at::Tensor out = write ? x : at::Tensor();
      const at::Tensor packed = codes_of(payloads[s]);
      if (kernels) {
        // tau = 0 (an all-zero x) sends no codes and leaves the residual x; a pending
        // e + g is still written, into out, which is then a.
        const float t = tau > 0.0f ? tau : std::numeric_limits<float>::infinity();
        const bool checks = adaptive() && sampled_mean(sizes[s]);
        fused::encode_codes2(x, addend, t, tau > 0.0f || addend.defined() ? out : at::Tensor(),
                             -tau, packed, checks ? non_finite : at::Tensor());
        continue;
      }
      if (addend.defined()) x.add_(addend);
      const Codes c = codes(x, tau);
      pack2(c.code, packed);
      // p += lut[code] with lut(tau, -1) = {-0, ., +tau, -tau}: p - c * tau.
      if (out.defined() && tau > 0.0f) out.sub_(c.sign, tau);
    }
    if (non_finite.defined() && non_finite.item<std::int32_t>() != 0) throw_non_finite();
    return joined(std::move(payloads), a);
  }

  // Every segment's adaptive tau = scale * mean |x|, from one transfer of each one's exact
  // sum (below 2^20 values: x formed first, pending cleared) or fixed sample (with x's
  // finiteness on the ATen path, where a + b is formed already). InvalidArgument for a
  // non-finite x, first segment first.
  std::vector<float> thresholds(const at::Tensor& a, const at::Tensor& b,
                                std::span<const std::int64_t> sizes,
                                const std::vector<std::int64_t>& start, bool kernels,
                                std::vector<char>& pending) const {
    std::vector<at::Tensor> parts;  // double: each sum, or each sample and its flag
    for (std::size_t s = 0; s < sizes.size(); ++s) {
      const std::int64_t n = sizes[s];
      if (n == 0) continue;
      const at::Tensor x = a.narrow(0, start[s], n);
      if (sampled_mean(n)) {
        const at::Tensor index = sample_index(n, a.device());
        at::Tensor sample = x.index_select(0, index);
        if (pending[s]) sample.add_(b.narrow(0, start[s], n).index_select(0, index));
        // On CUDA the codes pass checks x; here the sample carries the flag.
        const at::Tensor finite =
            kernels ? at::ones({1}, x.options()) : x.isfinite().all().to(at::kFloat).view({1});
        parts.push_back(at::cat({sample, finite}).to(at::kDouble));
      } else {
        if (pending[s]) {
          (void)fused::accumulate(x, b.narrow(0, start[s], n), x);  // x = a + b, on CUDA
          pending[s] = 0;
        }
        parts.push_back(segment_abs_sums(x, n));
      }
    }
    std::vector<float> taus(sizes.size(), 0.0f);
    if (parts.empty()) return taus;
    const at::Tensor host = at::cat(parts).to(at::kCPU);  // the sync
    const double* v = host.data_ptr<double>();
    std::vector<float> sample(detail::kAbsSampleCount);
    for (std::size_t s = 0; s < sizes.size(); ++s) {
      const std::int64_t n = sizes[s];
      if (n == 0) continue;
      double sum = 0.0;
      double count = static_cast<double>(n);
      if (sampled_mean(n)) {
        for (float& x : sample) x = static_cast<float>(*v++);
        if (*v++ == 0.0) throw_non_finite();
        sum = sampled_abs_sum(sample.data());
        count = static_cast<double>(detail::kAbsSampleCount);
      } else {
        sum = *v++;
      }
      if (!std::isfinite(sum)) throw_non_finite();
      const auto tau = static_cast<float>(scale_ * sum / count);
      taus[s] = std::isfinite(tau) ? tau : std::numeric_limits<float>::max();
    }
    return taus;
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

  // The sample's positions on the device, one upload per bucket size (sizes repeat every
  // step; a model's few sizes over 2^20 values are kept).
  at::Tensor sample_index(std::int64_t n, const at::Device& device) const {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [size, index] : indices_) {
      if (size == n && index.device() == device) return index;
    }
    if (indices_.size() >= kMaxIndices) indices_.erase(indices_.begin());
    indices_.emplace_back(n, abs_sample_index(n).to(device));
    return indices_.back().second;
  }

  static constexpr std::size_t kMaxIndices = 64;  // 512 KB each on the device
  float tau_;
  double scale_;
  mutable std::mutex mutex_;
  mutable std::vector<std::pair<std::int64_t, at::Tensor>> indices_;
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
