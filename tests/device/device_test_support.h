// What the device codec tests share: tensors as the CPU codecs' spans, bitwise equality.
#pragma once

#include <ATen/ATen.h>

#include <cstring>
#include <span>

namespace gradcomp::device::test {

// A CPU float32 tensor's data as the span the CPU codecs take (written through).
inline std::span<float> floats(const at::Tensor& t) {
  return {t.data_ptr<float>(), static_cast<std::size_t>(t.numel())};
}

// The same floats bit for bit (NaN patterns and signed zeros included).
inline bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  return a.numel() == b.numel() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), static_cast<std::size_t>(a.numel()) * 4) == 0;
}

}  // namespace gradcomp::device::test
