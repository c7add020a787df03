#include "detail/sparse_message.h"

#include <cmath>
#include <cstring>
#include <string>

#include "gradcomp/error.h"
#include "gradcomp/kernels/half.h"
#include "gradcomp/wire.h"

namespace gradcomp::detail {

using namespace kernels;  // the selection and half-float kernels

namespace {

[[noreturn]] void corrupt(std::string_view op, const std::string& what) {
  throw CorruptMessage(std::string(op) + ": " + what);
}

}  // namespace

std::size_t write_sparse(std::span<const float> x, std::span<const std::uint32_t> idx,
                         SparseValues v, std::span<std::byte> payload) {
  const std::size_t c = idx.size();
  std::byte* p = payload.data();
  store_le<std::uint32_t>(p, static_cast<std::uint32_t>(c));
  if (c != 0) std::memcpy(p + 4, idx.data(), 4 * c);  // little-endian host (wire.h)
  std::byte* vals = p + 4 + 4 * c;
  const float* src = x.data();
  if (v == SparseValues::kFp32) {
    for (std::size_t j = 0; j < c; ++j) store_le<float>(vals + 4 * j, src[idx[j]]);
  } else {
    for (std::size_t j = 0; j < c; ++j) {
      store_le<std::uint16_t>(vals + 2 * j, float_to_fp16_ref(src[idx[j]]));
    }
  }
  return sparse_payload_bytes(c, v);
}

void subtract_sent(std::span<float> p, std::span<const std::uint32_t> idx, SparseValues v) {
  float* dst = p.data();
  if (v == SparseValues::kFp32) {
    for (const std::uint32_t i : idx) dst[i] = 0.0f;
  } else {
    for (const std::uint32_t i : idx) {
      dst[i] = std::fma(-1.0f, fp16_to_float_ref(float_to_fp16_ref(dst[i])), dst[i]);
    }
  }
}

void decode_sparse_add(std::span<const std::byte> payload, std::span<float> out, float alpha,
                       SparseValues v, std::size_t min_count, std::size_t max_count,
                       std::string_view op) {
  const std::size_t n = out.size();
  if (payload.size() < 4) {
    corrupt(op, "payload of " + std::to_string(payload.size()) + " bytes < 4 (count field)");
  }
  const std::byte* p = payload.data();
  const std::size_t count = load_le<std::uint32_t>(p);
  const std::size_t entry = sparse_entry_bytes(v);
  // Compare by division first: count * entry cannot overflow then, on any size_t.
  if (count > (payload.size() - 4) / entry || 4 + count * entry != payload.size()) {
    corrupt(op, "count " + std::to_string(count) + " needs " + std::to_string(entry) +
                    " bytes per entry, payload has " + std::to_string(payload.size()) + " bytes");
  }
  if (count > max_count || count < min_count) {
    corrupt(op, "count " + std::to_string(count) + " outside [" + std::to_string(min_count) + ", " +
                    std::to_string(max_count) + "] for n " + std::to_string(n));
  }
  const std::byte* idx = p + 4;
  const std::byte* vals = p + 4 + 4 * count;
  std::uint32_t prev = 0;
  for (std::size_t j = 0; j < count; ++j) {
    const std::uint32_t i = load_le<std::uint32_t>(idx + 4 * j);
    if (i >= n) {
      corrupt(op, "index " + std::to_string(i) + " >= n " + std::to_string(n));
    }
    if (j != 0 && i <= prev) {
      corrupt(op, "index " + std::to_string(i) + " at position " + std::to_string(j) +
                      " not above the previous " + std::to_string(prev));
    }
    prev = i;
  }
  if (v == SparseValues::kFp32) {
    for (std::size_t j = 0; j < count; ++j) {
      const float x = load_le<float>(vals + 4 * j);
      if (!std::isfinite(x)) corrupt(op, "non-finite value at position " + std::to_string(j));
    }
  } else {
    for (std::size_t j = 0; j < count; ++j) {
      const auto h = load_le<std::uint16_t>(vals + 2 * j);
      if (!half_is_finite(HalfFormat::kFp16, h)) {
        corrupt(op, "non-finite fp16 value at position " + std::to_string(j));
      }
    }
  }

  float* o = out.data();
  if (v == SparseValues::kFp32) {
    for (std::size_t j = 0; j < count; ++j) {
      const std::uint32_t i = load_le<std::uint32_t>(idx + 4 * j);
      o[i] = std::fma(alpha, load_le<float>(vals + 4 * j), o[i]);
    }
  } else {
    for (std::size_t j = 0; j < count; ++j) {
      const std::uint32_t i = load_le<std::uint32_t>(idx + 4 * j);
      o[i] = std::fma(alpha, fp16_to_float_ref(load_le<std::uint16_t>(vals + 2 * j)), o[i]);
    }
  }
}

}  // namespace gradcomp::detail
