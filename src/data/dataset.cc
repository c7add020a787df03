// Dataset helpers: splits, sharding, per-epoch shuffles, pixel normalisation.
#include <algorithm>
#include <cinttypes>
#include <limits>
#include <string>
#include <utility>

#include "gradcomp/data/dataset.h"
#include "gradcomp/error.h"
#include "gradcomp/rng.h"
#include "input_file.h"

namespace gradcomp::data {

namespace {

using detail::format;

// Stream constant separating the shuffle's key from other uses of the same seed.
constexpr std::uint64_t kShuffleStream = 0x5348'5546'464C'4531ull;  // "SHUFFLE1"

void check_consistent(const Dataset& d, const char* op) {
  bool ok = d.n >= 0 && d.c >= 0 && d.h >= 0 && d.w >= 0 &&
            d.labels.size() == static_cast<std::size_t>(d.n);
  std::uint64_t elems = 0;
  ok = ok && detail::checked_mul(static_cast<std::uint64_t>(d.n), d.sample_elements(), elems) &&
       d.images.size() == elems;
  if (!ok) {
    throw InvalidArgument(format("%s: data set '", op) + d.name +
                          format("' is inconsistent: n=%" PRId64 " c=%" PRId64 " h=%" PRId64
                                 " w=%" PRId64 " but %zu image values and %zu labels",
                                 d.n, d.c, d.h, d.w, d.images.size(), d.labels.size()));
  }
}

}  // namespace

Split parse_split(std::string_view s) {
  if (s == "train") return Split::kTrain;
  if (s == "test") return Split::kTest;
  throw InvalidArgument("split: unknown split '" + std::string(s) + "' (known: train, test)");
}

std::string_view to_string(Split s) { return s == Split::kTrain ? "train" : "test"; }

SampleRange shard_range(std::int64_t n, int rank, int world) {
  if (world < 1 || rank < 0 || rank >= world) {
    throw InvalidArgument(format("shard: rank %d not in [0, world %d)", rank, world));
  }
  if (n < 0) throw InvalidArgument(format("shard: sample count %" PRId64 " < 0", n));
  const std::int64_t base = n / world;
  const std::int64_t extra = n % world;
  const std::int64_t begin = rank * base + std::min<std::int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

Dataset slice(const Dataset& d, std::int64_t begin, std::int64_t end) {
  check_consistent(d, "slice");
  if (begin < 0 || begin > end || end > d.n) {
    throw InvalidArgument(format(
        "slice: range [%" PRId64 ", %" PRId64 ") not within [0, %" PRId64 ")", begin, end, d.n));
  }
  Dataset out;
  out.name = d.name;
  out.n = end - begin;
  out.c = d.c;
  out.h = d.h;
  out.w = d.w;
  out.num_classes = d.num_classes;
  out.stats = d.stats;
  out.text = d.text;
  const std::size_t per = d.sample_elements();
  out.images.assign(d.images.begin() + static_cast<std::ptrdiff_t>(begin * per),
                    d.images.begin() + static_cast<std::ptrdiff_t>(end * per));
  out.labels.assign(d.labels.begin() + begin, d.labels.begin() + end);
  return out;
}

Dataset shard(const Dataset& d, int rank, int world) {
  const SampleRange r = shard_range(d.n, rank, world);
  Dataset out = slice(d, r.begin, r.end);
  out.name += format("[%d/%d]", rank, world);
  return out;
}

std::vector<std::int64_t> epoch_order(std::int64_t n, std::uint64_t seed, std::uint64_t epoch) {
  // Counters and bounds of CounterRng are 32-bit.
  if (n < 0 || static_cast<std::uint64_t>(n) > std::numeric_limits<std::uint32_t>::max()) {
    throw InvalidArgument(format("epoch_order: sample count %" PRId64 " not in [0, 2^32)", n));
  }
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int64_t>(i);
  const CounterRng rng(
      gradcomp::detail::splitmix64(gradcomp::detail::splitmix64(seed ^ kShuffleStream) ^ epoch));
  // Fisher-Yates: position i takes a uniform pick among positions [0, i].
  for (std::size_t i = order.size(); i > 1; --i) {
    const auto last = static_cast<std::uint32_t>(i - 1);
    std::swap(order[last], order[rng.below(last, last + 1)]);
  }
  return order;
}

std::vector<float> normalize_u8(std::span<const std::uint8_t> pixels, std::size_t plane,
                                std::span<const ChannelStats> stats) {
  const std::size_t channels = stats.size();
  if (channels == 0 || plane == 0 || pixels.size() % (channels * plane) != 0) {
    throw InvalidArgument(
        format("normalize_u8: %zu pixels are not a whole number of %zux%zu samples", pixels.size(),
               channels, plane));
  }
  std::vector<float> out(pixels.size());
  const std::size_t samples = pixels.size() / (channels * plane);
  for (std::size_t s = 0; s < samples; ++s) {
    for (std::size_t ch = 0; ch < channels; ++ch) {
      const std::size_t base = (s * channels + ch) * plane;
      const float mean = stats[ch].mean;
      const float stddev = stats[ch].stddev;
      const std::uint8_t* src = pixels.data() + base;
      float* dst = out.data() + base;
      // Division, not a multiply by 1/255 or 1/stddev: the documented formula, bit
      // for bit (GCC vectorises the division; it is not the bottleneck next to inflate).
      for (std::size_t j = 0; j < plane; ++j) {
        dst[j] = (static_cast<float>(src[j]) / 255.0f - mean) / stddev;
      }
    }
  }
  return out;
}

}  // namespace gradcomp::data
