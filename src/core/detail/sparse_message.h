// The (index, value) payload shared by the sparsifying codecs (topk, threshold, mask;
// later DGC):
//
//   offset        size        field
//        0           4        count c (u32)
//        4          4c        indices (u32), strictly increasing, each < n
//   4 + 4c    4c or 2c        values: fp32, or fp16 (u16, finite patterns only)
//
// Payload bytes: 4 + 8c (fp32 values) or 4 + 6c (fp16 values). Little-endian, no
// padding. Messages are not linear: receivers decode them one by one (scatter-add).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace gradcomp::detail {

enum class SparseValues : std::uint8_t { kFp32, kFp16 };

constexpr std::size_t sparse_entry_bytes(SparseValues v) {
  return v == SparseValues::kFp32 ? 8 : 6;
}
constexpr std::size_t sparse_payload_bytes(std::size_t count, SparseValues v) {
  return 4 + count * sparse_entry_bytes(v);
}

// Writes the payload for the selected indices of x (ascending, x[idx] finite); fp16
// values round to nearest even and saturate at +-65504. Returns the payload size.
std::size_t write_sparse(std::span<const float> x, std::span<const std::uint32_t> idx,
                         SparseValues v, std::span<std::byte> payload);

// The fused error-feedback update after write_sparse: p[i] -= decode(sent value) at the
// sent positions (fp32: p[i] = 0, as p - p is +0; fp16: fma(-1, half(p[i]), p[i])),
// bit-identical to decode_sparse_add(payload, p, -1).
void subtract_sent(std::span<float> p, std::span<const std::uint32_t> idx, SparseValues v);

// Validates the whole payload (count within [min_count, max_count], exact length with
// overflow-safe arithmetic, indices strictly increasing and < out.size(), values
// finite), throwing CorruptMessage "<op>: ..." before anything is written; then
// out[idx] = fma(alpha, value, out[idx]).
void decode_sparse_add(std::span<const std::byte> payload, std::span<float> out, float alpha,
                       SparseValues v, std::size_t min_count, std::size_t max_count,
                       std::string_view op);

}  // namespace gradcomp::detail
