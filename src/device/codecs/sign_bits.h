// What 1bit and signsgd share on the device (onebit.cc): the 1-bit layout decoded to +-1.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <span>

#include "checked_decode.h"

namespace gradcomp::device {

// out += alpha where a bit is 1, -alpha where it is 0; the padding bits must be 0 (one
// gather for a whole batch's payloads).
class SignBitsCodec : public CheckedDecodeCodec {
 public:
  using CheckedDecodeCodec::CheckedDecodeCodec;

 protected:
  std::int64_t payload_bytes(std::int64_t n) const final;
  std::int64_t report_size() const final { return 1; }
  at::Tensor reports(const at::Tensor& payloads, std::span<const std::int64_t> offsets,
                     std::span<const std::int64_t> bytes, std::span<const std::int64_t> ns,
                     std::span<const at::Tensor> each) const final;
  void check(const at::Tensor& payload, std::int64_t n, const float* report) const final;
  void add_checked(const at::Tensor& payload, const at::Tensor& out, float alpha,
                   const float* report) const final;
};

// 1bit's and signsgd's encode: the payload (the 1-bit layout) of x = a + b (b defined: the
// error-feedback step, out is then a) or of a: bit = x >= tau (at_least) or x > tau; where
// out is defined, out = x + (bit ? -1 : +1), x minus its decode. One fused kernel on CUDA,
// ATen operations elsewhere; never a sync.
at::Tensor encode_signs(const at::Tensor& a, const at::Tensor& b, float tau, bool at_least,
                        const at::Tensor& out);

}  // namespace gradcomp::device
