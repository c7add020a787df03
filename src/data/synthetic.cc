// make_synthetic: a learnable image-classification problem with no files.
//   Class k's template: in each channel, kBlobs Gaussian blobs, each with a random
//   centre, width (sigma in [0.08, 0.2] x min(h, w)) and sign.
//   Sample i (label i % classes) = a * template shifted by (dy, dx) + unit noise,
//   a uniform in [0.6, 1.4], |dy| <= h/8, |dx| <= w/8.
// Blobs are separable, so a shifted blob is an outer product of a row profile and a
// column profile: h + w exp() calls per blob and sample, not h * w.
// Randomness: templates from one CounterRng keyed by (seed, classes, c, h, w); sample
// i from its own key (seed, i), so samples do not depend on n.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <limits>
#include <numbers>

#include "gradcomp/data/dataset.h"
#include "gradcomp/error.h"
#include "gradcomp/rng.h"
#include "input_file.h"

namespace gradcomp::data {

namespace {

using detail::format;
using gradcomp::detail::splitmix64;

constexpr int kBlobs = 2;
// Expected squared norm of a template (all channels and blobs): each blob's peak is
// scaled so that its energy pi * sigma^2 * peak^2 is kTemplateEnergy / (c * kBlobs).
// The difficulty (template energy against noise) then hardly depends on c, h, w.
constexpr float kTemplateEnergy = 60.0f;
constexpr float kNoiseStd = 1.0f;
constexpr std::uint64_t kTemplateStream = 0x5445'4D50'4C41'5445ull;  // "TEMPLATE"
constexpr std::uint64_t kSampleStream = 0x5341'4D50'4C45'5331ull;    // "SAMPLES1"
// Per-sample counters: 0-2 for scale and shift, then two per pixel (noise).
constexpr std::uint32_t kNoiseCounter0 = 8;

struct Blob {
  float cy, cx, inv_two_var, peak;  // peak is signed
};

// Approximately N(0, 1) noise for pixel j: the Irwin-Hall sum of four 16-bit uniforms
// (the two halves of counters 2j and 2j + 1 after `base`), centred and scaled to unit
// variance, within +-2 sqrt(3). Integer arithmetic until one conversion, so the loop
// vectorises (log/cos of Box-Muller made generation 10x slower).
inline float noise(const CounterRng& rng, std::uint32_t base, std::uint32_t j) {
  const std::uint32_t a = rng.bits(base + 2 * j);
  const std::uint32_t b = rng.bits(base + 2 * j + 1);
  const auto sum = static_cast<std::int32_t>((a & 0xFFFFu) + (a >> 16) + (b & 0xFFFFu) + (b >> 16));
  // Each half is uniform on {0..65535}: mean 32767.5, variance (65536^2 - 1) / 12.
  constexpr float kScale = 1.7320508f / 65536.0f;  // sqrt(3) / 65536
  return static_cast<float>(2 * sum - 4 * 65535) * (0.5f * kScale);
}

}  // namespace

Dataset make_synthetic(std::int64_t n, int classes, int c, int h, int w, std::uint64_t seed) {
  if (n < 0 || static_cast<std::uint64_t>(n) > std::numeric_limits<std::uint32_t>::max() ||
      classes < 1 || c < 1 || h < 1 || w < 1) {
    throw InvalidArgument(
        format("make_synthetic: need 0 <= n < 2^32 and classes, c, h, w >= 1 "
               "(got n=%" PRId64 " classes=%d c=%d h=%d w=%d)",
               n, classes, c, h, w));
  }
  const std::uint64_t plane = std::uint64_t(h) * std::uint64_t(w);
  const std::uint64_t per = plane * std::uint64_t(c);
  std::uint64_t total = 0;
  // Two noise counters per pixel must fit CounterRng's 32-bit counter.
  if (per > (std::numeric_limits<std::uint32_t>::max() - kNoiseCounter0) / 2 ||
      !detail::checked_mul(per, std::uint64_t(n), total) ||
      total > std::numeric_limits<std::size_t>::max() / sizeof(float)) {
    throw InvalidArgument(
        format("make_synthetic: %" PRId64 " samples of %dx%dx%d is too large", n, c, h, w));
  }

  Dataset d;
  d.name = "synthetic";
  d.n = n;
  d.c = c;
  d.h = h;
  d.w = w;
  d.num_classes = classes;
  d.stats.assign(static_cast<std::size_t>(c), ChannelStats{0.0f, 1.0f});
  d.images.resize(static_cast<std::size_t>(total));
  d.labels.resize(static_cast<std::size_t>(n));

  // Templates.
  std::uint64_t key = splitmix64(seed ^ kTemplateStream);
  for (const int v : {classes, c, h, w}) key = splitmix64(key ^ static_cast<std::uint64_t>(v));
  const CounterRng trng(key);
  const float side = static_cast<float>(std::min(h, w));
  const float blob_energy_root =
      std::sqrt(kTemplateEnergy / (static_cast<float>(c * kBlobs) * std::numbers::pi_v<float>));
  std::vector<Blob> blobs(static_cast<std::size_t>(classes) * c * kBlobs);
  for (std::size_t b = 0; b < blobs.size(); ++b) {
    const auto ctr = static_cast<std::uint32_t>(4 * b);
    const float sigma = (0.08f + 0.12f * trng.uniform(ctr + 2)) * side;
    const float peak = blob_energy_root / sigma;
    blobs[b] = Blob{trng.uniform(ctr) * static_cast<float>(h),
                    trng.uniform(ctr + 1) * static_cast<float>(w), 1.0f / (2.0f * sigma * sigma),
                    (trng.bits(ctr + 3) & 1) != 0 ? peak : -peak};
  }

  const std::uint64_t sample_key = splitmix64(seed ^ kSampleStream);
  const int max_dy = h / 8;
  const int max_dx = w / 8;
  std::vector<float> rows(static_cast<std::size_t>(h));
  std::vector<float> cols(static_cast<std::size_t>(w));
  for (std::int64_t i = 0; i < n; ++i) {
    const int label = static_cast<int>(i % classes);
    d.labels[static_cast<std::size_t>(i)] = label;
    const CounterRng rng(splitmix64(sample_key + static_cast<std::uint64_t>(i)));
    const float scale = 0.6f + 0.8f * rng.uniform(0);
    const auto dy = static_cast<float>(static_cast<int>(rng.below(1, 2 * max_dy + 1)) - max_dy);
    const auto dx = static_cast<float>(static_cast<int>(rng.below(2, 2 * max_dx + 1)) - max_dx);
    float* out = d.images.data() + static_cast<std::size_t>(i) * per;
    for (std::uint32_t j = 0; j < per; ++j) out[j] = kNoiseStd * noise(rng, kNoiseCounter0, j);
    for (int ch = 0; ch < c; ++ch) {
      float* o = out + static_cast<std::size_t>(ch) * plane;
      for (int b = 0; b < kBlobs; ++b) {
        const Blob& bl = blobs[(static_cast<std::size_t>(label) * c + ch) * kBlobs + b];
        for (int y = 0; y < h; ++y) {
          const float t = static_cast<float>(y) - bl.cy - dy;
          rows[y] = scale * bl.peak * std::exp(-t * t * bl.inv_two_var);
        }
        for (int x = 0; x < w; ++x) {
          const float t = static_cast<float>(x) - bl.cx - dx;
          cols[x] = std::exp(-t * t * bl.inv_two_var);
        }
        for (int y = 0; y < h; ++y) {
          for (int x = 0; x < w; ++x) o[y * w + x] += rows[y] * cols[x];
        }
      }
    }
  }
  return d;
}

}  // namespace gradcomp::data
