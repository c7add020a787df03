// chunktopk: per-chunk top-k, the sparsification DeMo (Peng et al. 2024, arXiv 2411.19870)
// and SparseLoCo (arXiv 2508.15706) send.
//   The bucket is cut into chunks of `chunk` elements (the last may be shorter); each full
//   chunk sends the k entries of p = g + e with the largest |p| (ties: lower index), a
//   last chunk of L < chunk elements sends ceil(k * L / chunk) of its entries (in [1, k]:
//   the same density as the others, so a small bucket is not sent nearly dense). Indices
//   are local to their chunk, so each costs ceil(log2(chunk)) bits instead of 32. Error
//   feedback keeps e = p minus what the message decodes to: zero at the sent entries for
//   fp32, their fp16/bf16 rounding error, or their 2-bit quantisation error.
// values=2bit is SparseLoCo's value quantiser (templar's TopKCompressor with
// quantization_bins = 4, quantization_range = 6), over all K values v of the message:
//   mean m = sum(v) / K, s = 1.5 * sqrt(sum((v - m)^2) / (K - 1)) (range 6 sigma over 4
//   bins; s = 1 when that is 0 or not finite, as for K = 1), code q = clamp(round((v - m)
//   / s) + 2, 0, 3) (round half to even), all in double (the squares by fma). So the bins
//   split v - m at -2.25, -0.75 and +0.75 sigma: two bins below the mean, one around it,
//   one above (templar's offset of n_bins/2). Each code decodes to its bin's centroid, the
//   mean of the values that fell in it (summed in double in message order, kept within
//   their range, rounded to fp32); a bin no value fell in sends +0. One set of centroids
//   per message (templar: per tensor). Deterministic, no RNG.
// Wire payload (K = the entries of all chunks, fixed by n, chunk and k):
//   [0,4) chunk (u32) | [4,6) k (u16, 0 = 65536) | [6] index bits w | [7] values (0 fp32,
//   1 fp16, 2 bf16, 3 2bit) | K local indices, w bits each, LSB first (detail/bitstream.h:
//   zero padded to 32-bit words), chunk by chunk, strictly increasing within a chunk |
//   the values in the same order: K fp32, or K fp16/bf16 u16 patterns, or (2bit) the 4
//   centroids as fp32 then K 2-bit codes packed like the indices.
//   8 + 4*ceil(K*w/32) + 4K (fp32), + 2K (fp16, bf16), + 16 + 4*ceil(K/16) (2bit) bytes.
// The 8-byte header repeats what the config tag already pins, so that a message (a file
// from `gradcomp codec encode`, a hex dump) says how to read it, and each field is checked
// against the decoder. A 2bit message's centroids must be finite, and +0 for a code no
// entry uses.
// Not linear: ranks allgather messages and scatter-add each (decode_add), then divide by W.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <numeric>
#include <string>

#include "codecs.h"
#include "detail/bitstream.h"
#include "detail/pending.h"
#include "detail/scratch.h"
#include "gradcomp/error.h"
#include "gradcomp/kernels/half.h"
#include "gradcomp/kernels/select.h"
#include "gradcomp/wire.h"

namespace gradcomp {

namespace {

using kernels::abs_bits;
using kernels::HalfFormat;
using kernels::kNonFiniteBits;

enum class Values : std::uint8_t { kFp32 = 0, kFp16 = 1, kBf16 = 2, k2bit = 3 };

constexpr std::size_t kPayloadHeaderBytes = 8;
constexpr std::int64_t kMaxChunk = 65536;  // local indices fit 16 bits
constexpr const char* kEncodeOp = "chunktopk encode";
constexpr const char* kDecodeOp = "chunktopk decode";

// values=2bit: 4 bins (2-bit codes) over a range of 6 standard deviations, the bins' centroids
// sent as fp32 ahead of the codes.
constexpr unsigned kQuantBits = 2;
constexpr std::size_t kQuantBins = std::size_t{1} << kQuantBits;
constexpr double kQuantRangeSigmas = 6.0;
constexpr std::size_t kCentroidBytes = 4 * kQuantBins;

// Sampling a floor for the threshold pays from this chunk length and density (k/L <=
// 1/stride) on: below, ranking the whole chunk costs about what the sample saves.
constexpr std::size_t kSampleFrom = 512;
constexpr std::size_t kSampleStride = 32;

[[noreturn]] void corrupt(const std::string& what) {
  throw CorruptMessage(std::string(kDecodeOp) + ": " + what);
}

// What a configuration sends for n elements: chunk boundaries, per-chunk counts, sizes.
struct Geometry {
  std::size_t chunk = 0;
  std::size_t k = 0;
  unsigned bits = 0;  // index width on the wire
  Values values = Values::kFp32;

  // The packer's narrowest code is 2 bits, so chunk = 2 spends 2 bits per index, not 1.
  static unsigned index_bits(std::size_t chunk) {
    return std::max(detail::kMinCodeBits, static_cast<unsigned>(std::bit_width(chunk - 1)));
  }
  // Entries of a chunk of `len` elements: k for a full chunk, the same density rounded up
  // for a short last one (1 <= result <= len since k <= chunk).
  std::size_t count_of(std::size_t len) const { return (k * len + chunk - 1) / chunk; }
  std::size_t count(std::size_t n) const {
    const std::size_t rest = n % chunk;
    return n / chunk * k + (rest != 0 ? count_of(rest) : 0);
  }
  std::size_t index_bytes(std::size_t count) const { return detail::packed_bytes(count, bits); }
  // The value section of a message of `count` entries.
  std::size_t value_bytes(std::size_t count) const {
    switch (values) {
      case Values::kFp32:
        return 4 * count;
      case Values::k2bit:
        return kCentroidBytes + detail::packed_bytes(count, kQuantBits);
      default:
        return 2 * count;
    }
  }
  std::size_t payload_bytes(std::size_t n) const {
    const std::size_t c = count(n);
    return kPayloadHeaderBytes + index_bytes(c) + value_bytes(c);
  }
  HalfFormat half() const {
    return values == Values::kFp16 ? HalfFormat::kFp16 : HalfFormat::kBf16;
  }

  // f(first entry, chunk start, chunk length, entries) for every chunk, in order.
  template <class F>
  void for_each_chunk(std::size_t n, const F& f) const {
    std::size_t entry = 0;
    for (std::size_t begin = 0; begin < n; begin += chunk) {
      const std::size_t len = std::min(chunk, n - begin);
      const std::size_t c = len == chunk ? k : count_of(len);
      f(entry, begin, len, c);
      entry += c;
    }
  }
};

// ---- selection within one chunk -------------------------------------------------------
// Scratch: slot 0 holds the message's indices (the caller's), 1 the candidates'
// patterns, 2 the candidates, 3 the threshold sample.

[[noreturn]] void non_finite(const float* x, std::size_t begin) {
  std::size_t j = 0;
  while (abs_bits(x[j]) < kNonFiniteBits) ++j;
  throw InvalidArgument(std::string(kEncodeOp) + ": non-finite value at index " +
                        std::to_string(begin + j));
}

// Throws if x[0, len) holds a non-finite value, naming the first (begin: the chunk's
// offset in the bucket).
void check_finite(const float* x, std::size_t len, std::size_t begin) {
  std::uint32_t hi = 0;
  for (std::size_t j = 0; j < len; ++j) hi = std::max(hi, abs_bits(x[j]));
  if (hi >= kNonFiniteBits) non_finite(x, begin);
}

// A lower bound for the kc-th largest |x| pattern from every 32nd element: the
// (2*expected + 2)-th largest sample, so that some 2 to 3 kc elements reach it (a floor
// that lets fewer than kc through: about 1.5% of chunks at k = 64 of 4096). 0 (keep
// everything) when the chunk is short or dense enough that sampling saves nothing. Any
// bound gives the exact result; a bound too high is caught by the caller (fewer than kc
// candidates) and costs one more pass.
std::uint32_t sampled_floor(const float* x, std::size_t len, std::size_t kc) {
  if (len < kSampleFrom || kc * kSampleStride > len) return 0;
  const std::size_t s = len / kSampleStride;
  const auto sample = detail::scratch<std::uint32_t>(3, s);
  for (std::size_t i = 0; i < s; ++i) sample[i] = abs_bits(x[i * kSampleStride]);
  const std::size_t expected = (kc * s + len - 1) / len;
  const std::size_t r = std::min(s, 2 * expected + 2);
  std::nth_element(sample.begin(), sample.begin() + static_cast<std::ptrdiff_t>(r - 1),
                   sample.end(), std::greater<>());
  return sample[r - 1];
}

// The indices j with |x_j| pattern >= floor into cand, ascending, and in the same pass the
// largest pattern of the chunk, so that non-finite values cost no pass of their own.
// Returns how many. Blocks of 8 are first tested as a whole (a loop the compiler
// vectorizes): under a sampled floor most hold no candidate and cost no append.
std::size_t gather_candidates(const float* x, std::size_t len, std::uint32_t floor,
                              std::uint32_t* cand, std::uint32_t& hi) {
  constexpr std::size_t kBlock = 8;
  std::size_t m = 0;
  std::uint32_t top = 0;
  for (std::size_t j0 = 0; j0 < len; j0 += kBlock) {
    const std::size_t end = std::min(len, j0 + kBlock);
    std::uint32_t block_top = 0;
    for (std::size_t j = j0; j < end; ++j) block_top = std::max(block_top, abs_bits(x[j]));
    top = std::max(top, block_top);
    if (block_top < floor) continue;
    for (std::size_t j = j0; j < end; ++j) {
      cand[m] = static_cast<std::uint32_t>(j);  // branch-free append
      m += abs_bits(x[j]) >= floor ? 1 : 0;
    }
  }
  hi = top;
  return m;
}

// The exact top-kc of |x[0, len)| (ties: lower index) as local indices, ascending, in
// out[0, kc); kc in [1, len]. Throws on a non-finite value (begin: the chunk's offset).
// The kc-th largest pattern t among the candidates (nth_element on their patterns) splits
// them: every candidate above t is sent, and of those equal to t the first ones in index
// order until kc are; the candidates are in index order, so out comes out sorted.
void select_chunk(const float* x, std::size_t len, std::size_t kc, std::size_t begin,
                  std::uint32_t* out) {
  if (kc == len) {
    check_finite(x, len, begin);
    std::iota(out, out + len, 0u);
    return;
  }
  const auto cand = detail::scratch<std::uint32_t>(2, len);
  std::uint32_t hi = 0;
  std::size_t m = gather_candidates(x, len, sampled_floor(x, len, kc), cand.data(), hi);
  if (hi >= kNonFiniteBits) non_finite(x, begin);
  if (m < kc) {
    std::iota(cand.begin(), cand.end(), 0u);
    m = len;
  }
  const auto bits = detail::scratch<std::uint32_t>(1, m);
  for (std::size_t i = 0; i < m; ++i) bits[i] = abs_bits(x[cand[i]]);
  const auto kth = bits.begin() + static_cast<std::ptrdiff_t>(kc - 1);
  std::nth_element(bits.begin(), kth, bits.end(), std::greater<>());
  const std::uint32_t t = *kth;
  std::size_t ties = 0;  // how many equal to t are sent: kc minus those above t
  for (std::size_t i = 0; i < kc; ++i) ties += bits[i] == t ? 1 : 0;
  std::size_t c = 0;
  for (std::size_t i = 0; c < kc; ++i) {
    const std::uint32_t b = abs_bits(x[cand[i]]);
    const bool take = b > t || (b == t && ties > 0);
    ties -= b == t && take ? 1 : 0;
    out[c] = cand[i];
    c += take ? 1 : 0;
  }
}

// ---- values=2bit ------------------------------------------------------------------------

using Centroids = std::array<float, kQuantBins>;

// The 2-bit codes of v[0, count) into q, and their bins' centroids (the file comment's rule;
// +0 for an empty bin). A centroid is kept within its bin's values, so it is finite.
Centroids quantize(const float* v, std::size_t count, std::uint32_t* q) {
  Centroids out{};
  if (count == 0) return out;
  double sum = 0.0;
  for (std::size_t j = 0; j < count; ++j) sum += v[j];
  const double mean = sum / static_cast<double>(count);
  double ss = 0.0;
  for (std::size_t j = 0; j < count; ++j) {
    const double d = v[j] - mean;
    ss = std::fma(d, d, ss);
  }
  double s = count > 1 ? kQuantRangeSigmas / static_cast<double>(kQuantBins) *
                             std::sqrt(ss / static_cast<double>(count - 1))
                       : 0.0;
  if (!(s > 0.0 && std::isfinite(s))) s = 1.0;
  std::array<double, kQuantBins> bin_sum{};
  std::array<std::size_t, kQuantBins> bin_count{};
  std::array<float, kQuantBins> lo{}, hi{};
  for (std::size_t j = 0; j < count; ++j) {
    // round(t) + 2 clamped to [0, 3], round half to even: -1.5 -> 0, -0.5 and 0.5 -> 2.
    const double t = (v[j] - mean) / s;
    const std::uint32_t b = t <= -1.5 ? 0 : t < -0.5 ? 1 : t <= 0.5 ? 2 : 3;
    q[j] = b;
    bin_sum[b] += v[j];
    lo[b] = bin_count[b] == 0 ? v[j] : std::min(lo[b], v[j]);
    hi[b] = bin_count[b] == 0 ? v[j] : std::max(hi[b], v[j]);
    ++bin_count[b];
  }
  for (std::size_t b = 0; b < kQuantBins; ++b) {
    if (bin_count[b] == 0) continue;
    const double c = bin_sum[b] / static_cast<double>(bin_count[b]);
    out[b] =
        static_cast<float>(std::clamp(c, static_cast<double>(lo[b]), static_cast<double>(hi[b])));
  }
  return out;
}

Centroids read_centroids(const std::byte* values) {
  Centroids c{};
  for (std::size_t b = 0; b < kQuantBins; ++b) c[b] = load_le<float>(values + 4 * b);
  return c;
}

// ---- the codec --------------------------------------------------------------------------

class ChunkTopkCodec final : public Codec {
 public:
  ChunkTopkCodec(CodecIdentity id, Geometry geo)
      : Codec(std::move(id),
              CodecTraits{
                  .linear = false, .unbiased = false, .needs_memory = true, .stochastic = false}),
        geo_(geo) {}

 protected:
  std::size_t max_payload_bytes(std::size_t n) const override { return geo_.payload_bytes(n); }

  std::size_t encode_payload(std::span<const float> in, const StepContext& /*ctx*/,
                             std::span<std::byte> payload,
                             PayloadCrc* /*payload_crc*/) const override {
    return write_payload(in, select(in, nullptr), payload);
  }

  // e <- p with what was sent subtracted; only the sent entries change.
  std::size_t encode_payload_feedback(std::span<float> p, const StepContext& /*ctx*/,
                                      std::span<std::byte> payload,
                                      PayloadCrc* /*payload_crc*/) const override {
    const auto codes = select(p, nullptr);
    const std::size_t bytes = write_payload(p, codes, payload);
    subtract_sent(p, codes, payload);
    return bytes;
  }

  // p is formed chunk by chunk just before the chunk is selected, while it is in cache:
  // one pass over g and e instead of two.
  std::size_t encode_payload_with_residual(const ResidualUpdate& update, std::span<float> e,
                                           const StepContext& /*ctx*/, std::span<std::byte> payload,
                                           PayloadCrc* /*payload_crc*/) const override {
    const detail::Pending pending = detail::residual_pending(update, e);
    const auto codes = select(e, &pending);
    const std::size_t bytes = write_payload(e, codes, payload);
    subtract_sent(e, codes, payload);
    return bytes;
  }

  void decode_payload_add(std::span<const std::byte> payload, std::span<float> out,
                          float alpha) const override {
    const std::size_t n = out.size();
    expect_payload_bytes(payload, geo_.payload_bytes(n), kDecodeOp, n);
    check_payload_header(payload);
    const std::size_t count = geo_.count(n);
    const std::byte* stream = payload.data() + kPayloadHeaderBytes;
    const std::byte* values = stream + geo_.index_bytes(count);
    if (!detail::padding_is_zero(stream, count, geo_.bits)) corrupt("nonzero index padding bits");
    const auto codes = detail::scratch<std::uint32_t>(0, count);
    if (count != 0) detail::unpack_codes(stream, count, geo_.bits, codes.data());
    check_indices(codes, n);
    if (geo_.values == Values::k2bit) {
      const auto q = detail::scratch<std::uint32_t>(1, count);
      const Centroids c = check_quantized(values, count, q.data());
      add_quantized(codes, c, q, out, alpha);
      return;
    }
    check_values(values, count);
    add_values(codes, values, out, alpha);
  }

 private:
  // Every chunk's local indices, chunk after chunk, in scratch slot 0. With a pending, each
  // chunk is formed just before it is read, and all of x is formed even when a chunk throws.
  std::span<const std::uint32_t> select(std::span<const float> x,
                                        const detail::Pending* pending) const {
    const std::size_t n = x.size();
    const auto codes = detail::scratch<std::uint32_t>(0, geo_.count(n));
    std::size_t formed = 0;
    try {
      geo_.for_each_chunk(
          n, [&](std::size_t entry, std::size_t begin, std::size_t len, std::size_t c) {
            if (pending != nullptr) pending->fill(begin, begin + len);
            formed = begin + len;
            select_chunk(x.data() + begin, len, c, begin, codes.data() + entry);
          });
    } catch (...) {
      if (pending != nullptr && formed < n) pending->fill(formed, n);
      throw;
    }
    return codes;
  }

  std::size_t write_payload(std::span<const float> x, std::span<const std::uint32_t> codes,
                            std::span<std::byte> payload) const {
    std::byte* p = payload.data();
    store_le<std::uint32_t>(p, static_cast<std::uint32_t>(geo_.chunk));
    store_le<std::uint16_t>(p + 4, static_cast<std::uint16_t>(geo_.k));  // 65536 -> 0
    p[6] = static_cast<std::byte>(geo_.bits);
    p[7] = static_cast<std::byte>(geo_.values);
    std::byte* stream = p + kPayloadHeaderBytes;
    if (!codes.empty()) detail::pack_codes(codes.data(), codes.size(), geo_.bits, stream);
    std::byte* values = stream + geo_.index_bytes(codes.size());
    if (geo_.values == Values::k2bit) {
      write_quantized(x, codes, values);
    } else {
      geo_.for_each_chunk(
          x.size(), [&](std::size_t entry, std::size_t begin, std::size_t /*len*/, std::size_t c) {
            for (std::size_t j = entry; j < entry + c; ++j)
              write_value(values, j, x[begin + codes[j]]);
          });
    }
    return geo_.payload_bytes(x.size());
  }

  // The sent values in message order (scratch slot 1), their codes (slot 2), then the
  // centroids and the packed codes. Selection's slots 1-3 are free by now.
  void write_quantized(std::span<const float> x, std::span<const std::uint32_t> codes,
                       std::byte* values) const {
    const std::size_t count = codes.size();
    const auto v = detail::scratch<float>(1, count);
    geo_.for_each_chunk(
        x.size(), [&](std::size_t entry, std::size_t begin, std::size_t /*len*/, std::size_t c) {
          for (std::size_t j = entry; j < entry + c; ++j) v[j] = x[begin + codes[j]];
        });
    const auto q = detail::scratch<std::uint32_t>(2, count);
    const Centroids c = quantize(v.data(), count, q.data());
    for (std::size_t b = 0; b < kQuantBins; ++b) store_le<float>(values + 4 * b, c[b]);
    if (count != 0) detail::pack_codes(q.data(), count, kQuantBits, values + kCentroidBytes);
  }

  void write_value(std::byte* values, std::size_t j, float v) const {
    if (geo_.values == Values::kFp32) {
      store_le<float>(values + 4 * j, v);
    } else {
      store_le<std::uint16_t>(values + 2 * j, kernels::float_to_half_ref(geo_.half(), v));
    }
  }

  // What decode_add(msg, p, -1) does, bit for bit: fp32 leaves fma(-1, v, v) = +0, the
  // halves their rounding error, 2bit v minus its bin's centroid (read back from the
  // payload just written).
  void subtract_sent(std::span<float> p, std::span<const std::uint32_t> codes,
                     std::span<const std::byte> payload) const {
    if (geo_.values == Values::k2bit) {
      const std::byte* values =
          payload.data() + kPayloadHeaderBytes + geo_.index_bytes(codes.size());
      const auto q = detail::scratch<std::uint32_t>(1, codes.size());
      if (!codes.empty()) {
        detail::unpack_codes(values + kCentroidBytes, codes.size(), kQuantBits, q.data());
      }
      add_quantized(codes, read_centroids(values), q, p, -1.0f);
      return;
    }
    geo_.for_each_chunk(
        p.size(), [&](std::size_t entry, std::size_t begin, std::size_t /*len*/, std::size_t c) {
          for (std::size_t j = entry; j < entry + c; ++j) {
            float& v = p[begin + codes[j]];
            v = geo_.values == Values::kFp32 ? 0.0f : std::fma(-1.0f, round_trip(v), v);
          }
        });
  }

  float round_trip(float v) const {
    return kernels::half_to_float_ref(geo_.half(), kernels::float_to_half_ref(geo_.half(), v));
  }

  void check_payload_header(std::span<const std::byte> payload) const {
    const std::byte* p = payload.data();
    const std::uint32_t chunk = load_le<std::uint32_t>(p);
    const std::uint16_t k = load_le<std::uint16_t>(p + 4);
    const auto bits = static_cast<unsigned>(p[6]);
    const auto values = static_cast<unsigned>(p[7]);
    if (chunk != geo_.chunk) {
      corrupt("chunk " + std::to_string(chunk) + ", decoder has " + std::to_string(geo_.chunk));
    }
    if (k != static_cast<std::uint16_t>(geo_.k)) {
      corrupt("k " + std::to_string(k) + ", decoder has " + std::to_string(geo_.k));
    }
    if (bits != geo_.bits) {
      corrupt("index bits " + std::to_string(bits) + ", decoder has " + std::to_string(geo_.bits));
    }
    if (values != static_cast<unsigned>(geo_.values)) {
      corrupt("value format " + std::to_string(values) + ", decoder has " +
              std::to_string(static_cast<unsigned>(geo_.values)));
    }
  }

  // Within each chunk: strictly increasing and inside the chunk (the short last one too).
  void check_indices(std::span<const std::uint32_t> codes, std::size_t n) const {
    geo_.for_each_chunk(
        n, [&](std::size_t entry, std::size_t begin, std::size_t len, std::size_t c) {
          for (std::size_t j = entry; j < entry + c; ++j) {
            if (codes[j] >= len) {
              corrupt("index " + std::to_string(codes[j]) + " at position " + std::to_string(j) +
                      " >= chunk length " + std::to_string(len) + " (chunk at " +
                      std::to_string(begin) + ")");
            }
            if (j != entry && codes[j] <= codes[j - 1]) {
              corrupt("index " + std::to_string(codes[j]) + " at position " + std::to_string(j) +
                      " not above the previous " + std::to_string(codes[j - 1]));
            }
          }
        });
  }

  void check_values(const std::byte* values, std::size_t count) const {
    for (std::size_t j = 0; j < count; ++j) {
      const bool finite =
          geo_.values == Values::kFp32
              ? std::isfinite(load_le<float>(values + 4 * j))
              : kernels::half_is_finite(geo_.half(), load_le<std::uint16_t>(values + 2 * j));
      if (!finite) corrupt("non-finite value at position " + std::to_string(j));
    }
  }

  float read_value(const std::byte* values, std::size_t j) const {
    if (geo_.values == Values::kFp32) return load_le<float>(values + 4 * j);
    return kernels::half_to_float_ref(geo_.half(), load_le<std::uint16_t>(values + 2 * j));
  }

  void add_values(std::span<const std::uint32_t> codes, const std::byte* values,
                  std::span<float> out, float alpha) const {
    geo_.for_each_chunk(
        out.size(), [&](std::size_t entry, std::size_t begin, std::size_t /*len*/, std::size_t c) {
          for (std::size_t j = entry; j < entry + c; ++j) {
            float& o = out[begin + codes[j]];
            o = std::fma(alpha, read_value(values, j), o);
          }
        });
  }

  // A 2bit value section: the codes into q[0, count), the centroids returned. Throws
  // CorruptMessage on a non-finite centroid, a nonzero one no code uses, or nonzero
  // padding after the codes. (Every 2-bit pattern is a code.)
  Centroids check_quantized(const std::byte* values, std::size_t count, std::uint32_t* q) const {
    const Centroids c = read_centroids(values);
    for (std::size_t b = 0; b < kQuantBins; ++b) {
      if (!std::isfinite(c[b])) corrupt("non-finite centroid " + std::to_string(b));
    }
    const std::byte* stream = values + kCentroidBytes;
    if (!detail::padding_is_zero(stream, count, kQuantBits)) corrupt("nonzero value padding bits");
    if (count != 0) detail::unpack_codes(stream, count, kQuantBits, q);
    std::array<bool, kQuantBins> used{};
    for (std::size_t j = 0; j < count; ++j) used[q[j]] = true;
    for (std::size_t b = 0; b < kQuantBins; ++b) {
      if (!used[b] && std::bit_cast<std::uint32_t>(c[b]) != 0) {
        corrupt("centroid " + std::to_string(b) + " of no entry is not +0");
      }
    }
    return c;
  }

  void add_quantized(std::span<const std::uint32_t> codes, const Centroids& c,
                     std::span<const std::uint32_t> q, std::span<float> out, float alpha) const {
    geo_.for_each_chunk(
        out.size(), [&](std::size_t entry, std::size_t begin, std::size_t /*len*/, std::size_t n) {
          for (std::size_t j = entry; j < entry + n; ++j) {
            float& o = out[begin + codes[j]];
            o = std::fma(alpha, c[q[j]], o);
          }
        });
  }

  Geometry geo_;
};

Values values_of(const std::string& s) {
  if (s == "2bit") return Values::k2bit;
  return s == "fp16" ? Values::kFp16 : s == "bf16" ? Values::kBf16 : Values::kFp32;
}

}  // namespace

void register_chunktopk(CodecRegistry& registry) {
  registry.add(
      {.name = "chunktopk",
       .wire_id = wire_id(WireId::kChunkTopk),
       .summary = "per-chunk top-k (DeMo, SparseLoCo): the k largest |p| of every chunk, "
                  "with chunk-local indices of ceil(log2(chunk)) bits",
       .traits = {.linear = false, .unbiased = false, .needs_memory = true, .stochastic = false},
       .params = {int_param("chunk", 4096, 2, kMaxChunk,
                            "elements per chunk; a shorter last chunk sends ceil(k*len/chunk)"),
                  int_param("k", 64, 1, kMaxChunk, "entries sent per chunk, at most chunk"),
                  choice_param("values", "fp32", {"fp32", "fp16", "bf16", "2bit"},
                               "value precision on the wire (fp16/bf16 saturate; 2bit: "
                               "SparseLoCo's 4 bins over 6 sigma, each sent as its bin's "
                               "mean; error feedback keeps the rounding error)")},
       .examples = {"chunktopk:chunk=16,k=3", "chunktopk:chunk=2,k=1", "chunktopk:chunk=7,k=7",
                    "chunktopk:chunk=1000,k=10,values=fp16", "chunktopk:values=bf16",
                    "chunktopk:chunk=65536,k=1024", "chunktopk:values=2bit",
                    "chunktopk:chunk=16,k=3,values=2bit"},
       .make = [](CodecIdentity id, const Params& p) -> std::unique_ptr<Codec> {
         const auto chunk = static_cast<std::size_t>(p.get_int("chunk"));
         const auto k = static_cast<std::size_t>(p.get_int("k"));
         if (k > chunk) {
           throw InvalidArgument("chunktopk: k=" + std::to_string(k) +
                                 " must be at most chunk=" + std::to_string(chunk));
         }
         const Geometry geo{.chunk = chunk,
                            .k = k,
                            .bits = Geometry::index_bits(chunk),
                            .values = values_of(p.get_choice("values"))};
         return std::make_unique<ChunkTopkCodec>(std::move(id), geo);
       }});
}

}  // namespace gradcomp
