// fp16 on the device (src/core/codecs/fp16.cc is the CPU codec and the wire format):
// saturate to the format's largest finite value, cast with round-to-nearest-even (ATen's
// casts on CPU and CUDA both round so), send the 16-bit patterns. On CUDA, each encode is
// one fused kernel (src/device/cuda/halves.cu: read g and e, write e and the patterns).
// Encoding and decoding each sync once (the finiteness check), once for a whole batch.
#include <cstdio>

#include "codecs.h"
#include "device/fused_kernels.h"
#include "gradcomp/error.h"
#include "segmented_codec.h"

namespace gradcomp::device {

namespace {

class Fp16DeviceCodec final : public SegmentedCodec {
 public:
  Fp16DeviceCodec(const Codec& codec, bool bf16)
      : SegmentedCodec(codec),
        dtype_(bf16 ? at::kBFloat16 : at::kHalf),
        // The largest finite value: fp16 65504; bf16 0x7F7F = (2 - 2^-7) * 2^127.
        max_finite_(bf16 ? 3.38953139e38 : 65504.0),
        format_(bf16 ? "bf16" : "fp16") {}

 protected:
  std::int64_t payload_bytes(std::int64_t n) const override { return 2 * n; }
  std::int64_t report_size() const override { return 1; }

  // [any value not finite].
  at::Tensor reports(const at::Tensor& /*payloads*/, std::span<const std::int64_t> /*offsets*/,
                     std::span<const std::int64_t> /*bytes*/, std::span<const std::int64_t> ns,
                     std::span<const at::Tensor> each) const override {
    return stack_reports(each, ns, [&](const at::Tensor& payload, std::int64_t /*n*/) {
      return payload.view(dtype_).isfinite().logical_not().any().view({1});
    });
  }

  void check(const at::Tensor& payload, std::int64_t /*n*/, const float* report) const override {
    if (report[0] == 0.0f) return;
    // The error path only: the first bad value's index and pattern.
    const at::Tensor bad = payload.view(dtype_).isfinite().logical_not();
    const std::int64_t i = bad.nonzero().select(1, 0)[0].item<std::int64_t>();
    const auto pattern =
        static_cast<unsigned>(payload.view(at::kShort)[i].item<std::int16_t>()) & 0xFFFFu;
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%04X", pattern);
    throw CorruptMessage(codec().name() + " decode: non-finite " + format_ + " pattern " + hex +
                         " at index " + std::to_string(i));
  }

  void add_checked(const at::Tensor& payload, const at::Tensor& out, float alpha,
                   const float* /*report*/) const override {
    out.add_(payload.view(dtype_).to(at::kFloat), alpha);
  }

 private:
  // a_s <- x_s - float(half(x_s)) where write; every value saturated to the format's range.
  // One sync for all segments, for the finiteness check: on CUDA after the fused kernels (which
  // leave x's non-finite entries so in a: inf - max is inf, NaN stays NaN), elsewhere before
  // anything is written. InvalidArgument names the first segment's first non-finite value.
  EncodedBatch encode_segments(const at::Tensor& a, const at::Tensor& b,
                               std::span<const std::int64_t> sizes, bool write) const override {
    const bool kernels = fused::usable(a);
    std::vector<at::Tensor> payloads, non_finite, xs;
    if (!kernels && b.defined()) a.add_(b);
    std::int64_t offset = 0;
    for (const std::int64_t n : sizes) {
      const at::Tensor x = a.narrow(0, offset, n);
      const at::Tensor h = at::empty({kernels ? n : 0}, a.options().dtype(dtype_));
      payloads.push_back(h.view(at::kByte));
      xs.push_back(x);
      if (n == 0) {
        non_finite.push_back(at::zeros({1}, a.options().dtype(at::kInt)));
      } else if (kernels) {
        non_finite.push_back(fused::encode_halves(x, b.defined() ? b.narrow(0, offset, n) : b,
                                                  static_cast<float>(max_finite_),
                                                  write ? x : at::Tensor(), h));
      } else {
        non_finite.push_back(x.isfinite().logical_not().any().to(at::kInt).view({1}));
      }
      offset += n;
    }
    if (!non_finite.empty()) {
      const at::Tensor flags = at::cat(non_finite).to(at::kCPU);  // the sync
      for (std::size_t s = 0; s < sizes.size(); ++s) {
        // x is formed: a + b was added above or written by the kernel (b comes with write).
        if (flags.data_ptr<std::int32_t>()[s] != 0) throw_non_finite(xs[s]);
      }
    }
    if (!kernels) {
      for (std::size_t s = 0; s < sizes.size(); ++s) {
        const at::Tensor h = xs[s].clamp(-max_finite_, max_finite_).to(dtype_);
        payloads[s] = h.view(at::kByte);
        if (write) xs[s].sub_(h.to(at::kFloat));
      }
    }
    return joined(std::move(payloads), a);
  }

  [[noreturn]] void throw_non_finite(const at::Tensor& x) const {
    const std::int64_t i =
        x.isfinite().logical_not().nonzero().select(1, 0)[0].item<std::int64_t>();
    throw InvalidArgument(codec().name() + " encode: non-finite value " +
                          std::to_string(x[i].item<float>()) + " at index " + std::to_string(i));
  }

  at::ScalarType dtype_;
  double max_finite_;
  std::string format_;
};

}  // namespace

std::unique_ptr<DeviceCodec> make_fp16(const Codec& codec, const SpecParams& params) {
  return std::make_unique<Fp16DeviceCodec>(codec, params.text("format") == "bf16");
}

}  // namespace gradcomp::device
