// The device codecs' fused CUDA kernels (the ATen compositions they replace on CUDA
// tensors ran at 9-18% of the H200's copy bandwidth: docs/measurements/gpu.md). One pass
// over the gradient each: read g (and e), write the codes (and e). Plain C++: raw device
// pointers, the stream a cudaStream_t passed as void*, launched on the caller's device.
// Each returns nullptr, or the CUDA error's text. They write exactly what the ATen path
// of src/device/codecs/ writes, bit for bit (test_device_codec.py holds them to it on a
// GPU); src/device/fused_kernels.h is their ATen-side interface.
#pragma once

#include <cstdint>

namespace gradcomp::device::cuda {

// The values a kernel encodes: x_i = a_i + b_i where b is non-null (the error-feedback
// step p = e + g, in that float add), else a_i; i < n.
struct Values {
  const float* a = nullptr;
  const float* b = nullptr;
  std::int64_t n = 0;
};

// The 1-bit layout (src/core/detail/bitpack.h): bit_i = x_i >= tau (at_least) or x_i > tau
// (NaN gives 0), eight a byte, first value in the MSB, ceil(n / 32) whole 32-bit words
// with the padding bits 0. Where out is non-null, out_i = x_i + (bit_i ? if_set : if_clear)
// (out may be a: the residual's update in place).
const char* encode_sign_bits(Values x, float tau, bool at_least, float* out, float if_set,
                             float if_clear, std::uint8_t* bytes, void* stream);
// out_i = out_i + (bit_i ? one : zero) for i < n (bytes: the 1-bit layout).
const char* add_sign_bits(const std::uint8_t* bytes, std::int64_t n, float one, float zero,
                          float* out, void* stream);

// The 2-bit layout: code_i = 3 where x_i >= tau, 2 where x_i <= -tau, else 0; four a byte,
// first value in the top bits; `bytes` bytes (a whole number of words, padding 0). Where
// out is non-null, out_i = x_i + neg_tau * s_i with s_i = +1, -1, 0 for codes 3, 2, 0.
// Where non_finite is non-null (int32, zeroed by the caller), it becomes 1 if any x_i is
// inf or NaN.
const char* encode_codes2(Values x, float tau, float* out, float neg_tau, std::uint8_t* codes,
                          std::int64_t bytes, std::int32_t* non_finite, void* stream);
// The checks of a received 2-bit payload, OR-ed into flags (int32, zeroed by the caller):
// flags[0] a nonzero code after the first n, flags[1] a code 01 among the first n,
// flags[2] a nonzero code among the first n.
const char* check_codes2(const std::uint8_t* codes, std::int64_t n, std::int64_t bytes,
                         std::int32_t* flags, void* stream);
// out_i = out_i + lut[code_i] for i < n.
struct Lut4 {
  float value[4];
};
const char* add_codes2(const std::uint8_t* codes, std::int64_t n, Lut4 lut, float* out,
                       void* stream);

// fp16 / bf16: halves_i = the 16-bit pattern of x_i saturated to +-max_finite and rounded
// to nearest even; where out is non-null, out_i = x_i - float(that value). *non_finite
// (int32, zeroed by the caller) becomes 1 if any x_i is inf or NaN (the codec then refuses
// x; out and halves hold nothing to use).
const char* encode_halves(Values x, bool bf16, float max_finite, float* out, std::uint16_t* halves,
                          std::int32_t* non_finite, void* stream);

// Top-k's candidates: every i whose |x_i| bit pattern (sign cleared, NaNs above +inf) is
// >= *thr (a device int32). Each is written at idx[j] for a j < cap taken from *count
// (uint64, zeroed by the caller), in no particular order; *count ends as the number of
// candidates, which may exceed cap (then some were not written). Where out is non-null,
// out_i = x_i.
const char* select_at_least(Values x, const std::int32_t* thr, float* out, std::int64_t* idx,
                            std::int64_t cap, unsigned long long* count, void* stream);

// Top-k's stratified sample (src/core/kernels/select.cc) drawn on the device: of `lines`
// equal strata of the `lines_total` lines of `line` values, line j's first index,
// starts[j] = line * (b_j + CounterRng(key).below(j, b_{j+1} - b_j)), b_j = j * lines_total
// / lines: the host's draws, computed where the sample is gathered.
const char* sample_line_starts(std::uint64_t key, std::int64_t lines, std::int64_t lines_total,
                               std::int64_t line, std::int64_t* starts, void* stream);

// out_i = x_i; *non_finite (int32, zeroed by the caller) becomes 1 if any x_i is inf or
// NaN. out may be null (the check alone).
const char* accumulate(Values x, float* out, std::int32_t* non_finite, void* stream);

}  // namespace gradcomp::device::cuda
