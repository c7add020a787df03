// CIFAR-10, binary version (Krizhevsky 2009, "cifar-10-batches-bin"): each batch file
// is a sequence of 3073-byte records, 1 label byte (0-9) then 3072 pixel bytes,
// channel-major: 1024 red, 1024 green, 1024 blue, each 32x32 row-major. No header:
// the file size must be a positive multiple of 3073.
#include <algorithm>
#include <cinttypes>
#include <string>

#include "gradcomp/data/dataset.h"
#include "gradcomp/error.h"
#include "input_file.h"

namespace gradcomp::data {

namespace {

using detail::format;

constexpr std::size_t kSide = 32;
constexpr std::size_t kChannels = 3;
constexpr std::size_t kPixels = kChannels * kSide * kSide;  // 3072
constexpr std::size_t kRecord = 1 + kPixels;                // 3073
constexpr int kClasses = 10;
// A real batch is 10000 records (30.7 MB); refuse to read gigabytes of something else.
constexpr std::uint64_t kMaxBatchBytes = std::uint64_t{1} << 30;
constexpr const char* kHowToGet =
    "get the CIFAR-10 binary version (cifar-10-binary.tar.gz) from "
    "https://www.cs.toronto.edu/~kriz/cifar.html, extract it, and pass its "
    "cifar-10-batches-bin directory as --data-dir";

}  // namespace

U8Labelled read_cifar10_batch(const std::filesystem::path& file) {
  detail::InputFile f(file);
  std::vector<std::uint8_t> raw;
  const std::size_t size = f.read_up_to(raw, kMaxBatchBytes + 1);
  if (size > kMaxBatchBytes) {
    detail::fail(file,
                 format("larger than %" PRIu64 " bytes: not a CIFAR-10 batch", kMaxBatchBytes));
  }
  if (size == 0 || size % kRecord != 0) {
    detail::fail(file, format("size %zu bytes is not a positive multiple of the %zu-byte record "
                              "(1 label + 3x32x32 pixels)",
                              size, kRecord));
  }
  const std::size_t n = size / kRecord;
  U8Labelled out;
  out.images.n = static_cast<std::int64_t>(n);
  out.images.c = kChannels;
  out.images.h = kSide;
  out.images.w = kSide;
  out.images.pixels.resize(n * kPixels);
  out.labels.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint8_t* rec = raw.data() + i * kRecord;
    if (rec[0] >= kClasses) {
      detail::fail(file, format("label %u of record %zu (byte offset %zu) is out of range "
                                "(%d classes)",
                                unsigned{rec[0]}, i, i * kRecord, kClasses));
    }
    out.labels[i] = rec[0];
    std::copy(rec + 1, rec + kRecord,
              out.images.pixels.begin() + static_cast<std::ptrdiff_t>(i * kPixels));
  }
  return out;
}

Dataset load_cifar10(const std::filesystem::path& dir, Split split) {
  if (dir.empty()) {
    throw InvalidArgument(std::string("load_cifar10: no data directory given (") + kHowToGet + ")");
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    detail::fail(dir, std::string("CIFAR-10 directory not found (") + kHowToGet + ")");
  }
  std::vector<std::string> files;
  if (split == Split::kTrain) {
    for (int b = 1; b <= 5; ++b) files.push_back(format("data_batch_%d.bin", b));
  } else {
    files.push_back("test_batch.bin");
  }
  std::vector<std::uint8_t> pixels;
  Dataset d;
  for (const std::string& name : files) {
    const std::filesystem::path path = dir / name;
    if (!std::filesystem::exists(path, ec)) {
      detail::fail(path, std::string("not found (") + kHowToGet + ")");
    }
    U8Labelled batch = read_cifar10_batch(path);
    pixels.insert(pixels.end(), batch.images.pixels.begin(), batch.images.pixels.end());
    d.labels.insert(d.labels.end(), batch.labels.begin(), batch.labels.end());
  }
  d.name = "cifar10/" + std::string(to_string(split));
  d.n = static_cast<std::int64_t>(d.labels.size());
  d.c = kChannels;
  d.h = kSide;
  d.w = kSide;
  d.num_classes = kClasses;
  d.stats.assign(kCifar10Stats.begin(), kCifar10Stats.end());
  d.images = normalize_u8(pixels, kSide * kSide, d.stats);
  return d;
}

}  // namespace gradcomp::data
