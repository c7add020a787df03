// Byte-level text for language modelling: Debian's fortunes corpus, cut into windows of
// context + 1 bytes (the model reads the first `context` and predicts each next byte).
#include <algorithm>
#include <array>
#include <cinttypes>
#include <cmath>
#include <limits>

#include "gradcomp/data/dataset.h"
#include "gradcomp/error.h"
#include "input_file.h"

namespace gradcomp::data {

namespace {

using detail::format;

// Every plain-text file of the Debian packages fortunes and fortunes-min (1:1.99.1-7.3,
// bookworm), in sorted order: 43 files, 2,576,674 bytes. A fixed list rather than the
// directory's listing: other packages (fortunes-bofh-excuses, ...) install more files
// into the same directory, and the corpus must not change with them. The *.dat indexes
// and the *.u8 links beside them are not text of their own.
constexpr std::array<std::string_view, 43> kFortunesFiles = {
    "art",           "ascii-art",  "computers", "cookie",       "debian",   "definitions",
    "disclaimer",    "drugs",      "education", "ethnic",       "food",     "fortunes",
    "goedel",        "humorists",  "kids",      "knghtbrd",     "law",      "linux",
    "linuxcookie",   "literature", "love",      "magic",        "medicine", "men-women",
    "miscellaneous", "news",       "paradoxum", "people",       "perl",     "pets",
    "platitudes",    "politics",   "pratchett", "riddles",      "science",  "songs-poems",
    "sports",        "startrek",   "tao",       "translate-me", "wisdom",   "work",
    "zippy"};

}  // namespace

std::vector<std::uint8_t> read_fortunes(const std::filesystem::path& dir) {
  const std::filesystem::path d = dir.empty() ? std::filesystem::path(kFortunesDefaultDir) : dir;
  std::vector<std::uint8_t> text;
  for (const std::string_view name : kFortunesFiles) {
    detail::InputFile in(d / name);
    std::vector<std::uint8_t> buf;
    // Each file is a few hundred kB; 64 MiB bounds a file that is not what it should be.
    constexpr std::uint64_t kMaxFile = std::uint64_t{64} << 20;
    in.read_up_to(buf, kMaxFile + 1);
    if (buf.size() > kMaxFile) detail::fail(in.path(), "larger than 64 MiB: not a fortunes file");
    if (buf.empty()) detail::fail(in.path(), "empty");
    text.insert(text.end(), buf.begin(), buf.end());
  }
  return text;
}

TextRange text_split(std::size_t bytes, Split split) {
  // The first 90% train, the last 10% test (whole files do not matter: the cut is by byte).
  const std::size_t cut = bytes - bytes / 10;
  return split == Split::kTrain ? TextRange{0, cut} : TextRange{cut, bytes};
}

Dataset text_windows(std::span<const std::uint8_t> text, std::int64_t context,
                     std::int64_t max_windows, std::string name) {
  if (context < 1 || context > kMaxContext) {
    throw InvalidArgument(
        format("text windows: context %" PRId64 " not in [1, %" PRId64 "]", context, kMaxContext));
  }
  const auto len = static_cast<std::int64_t>(text.size());
  // Windows start every `context` bytes, so consecutive windows share one byte and every
  // byte after the first is a target exactly once.
  const std::int64_t all = len > context ? (len - 1) / context : 0;
  if (all < 1) {
    throw InvalidArgument(
        format("text windows: %" PRId64 " bytes hold no window of %" PRId64, len, context + 1));
  }
  const std::int64_t n = max_windows > 0 ? std::min(all, max_windows) : all;
  Dataset out;
  out.name = std::move(name);
  out.n = n;
  out.c = 1;
  out.h = 1;
  out.w = context + 1;
  out.num_classes = 256;
  out.text = true;
  out.stats = {ChannelStats{0.0f, 1.0f}};
  out.images.resize(static_cast<std::size_t>(n * (context + 1)));
  out.labels.assign(static_cast<std::size_t>(n), 0);
  for (std::int64_t i = 0; i < n; ++i) {
    // A subset is spread evenly over the windows (all of them when n == all).
    const std::int64_t w = n == all ? i : i * all / n;
    const std::uint8_t* src = text.data() + w * context;
    float* dst = out.images.data() + i * (context + 1);
    for (std::int64_t j = 0; j <= context; ++j) dst[j] = static_cast<float>(src[j]);
    // The label is the window's last byte: a classifier's view of the sample; the
    // language model's targets are all the bytes after the first.
    out.labels[static_cast<std::size_t>(i)] = src[context];
  }
  return out;
}

double unigram_cross_entropy(const Dataset& train, const Dataset& test) {
  if (!train.text || !test.text) {
    throw InvalidArgument("unigram cross-entropy: " + train.name + " and " + test.name +
                          " must both be text");
  }
  // Add-one smoothing: a byte the train split never has still has a finite cost.
  std::array<double, 256> count{};
  double total = 0;
  const auto targets = [](const Dataset& d, auto&& visit) {
    const std::size_t w = d.sample_elements();
    for (std::int64_t i = 0; i < d.n; ++i) {
      for (std::size_t j = 1; j < w; ++j) {
        visit(static_cast<std::size_t>(d.images[static_cast<std::size_t>(i) * w + j]));
      }
    }
  };
  targets(train, [&](std::size_t b) {
    count[b] += 1.0;
    total += 1.0;
  });
  double nats = 0;
  double seen = 0;
  targets(test, [&](std::size_t b) {
    nats -= std::log((count[b] + 1.0) / (total + 256.0));
    seen += 1.0;
  });
  return seen > 0 ? nats / seen : 0.0;
}

}  // namespace gradcomp::data
