// gradcomp_data: IDX and CIFAR-10 readers (round trips and every malformed file),
// sharding, per-epoch shuffles, the synthetic problem, and the real Fashion-MNIST
// files when the Debian package is installed.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "gradcomp/data/dataset.h"
#include "gradcomp/error.h"

namespace gradcomp::data {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

// A fresh directory under the system temp dir, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = fs::temp_directory_path() /
            ("gradcomp_data_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

void write_plain(const fs::path& p, const Bytes& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  ASSERT_TRUE(f.good()) << p;
}

void write_gz(const fs::path& p, const Bytes& b) {
  gzFile f = gzopen(p.c_str(), "wb");
  ASSERT_NE(f, nullptr) << p;
  if (!b.empty()) {
    ASSERT_EQ(gzwrite(f, b.data(), static_cast<unsigned>(b.size())), static_cast<int>(b.size()));
  }
  ASSERT_EQ(gzclose(f), Z_OK);
}

Bytes read_plain(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), {});
}

void put_be32(Bytes& b, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<std::uint8_t>(v >> s));
}

Bytes idx_images(std::uint32_t n, std::uint32_t rows, std::uint32_t cols, const Bytes& pixels,
                 std::uint32_t magic = 0x00000803) {
  Bytes b;
  put_be32(b, magic);
  put_be32(b, n);
  put_be32(b, rows);
  put_be32(b, cols);
  b.insert(b.end(), pixels.begin(), pixels.end());
  return b;
}

Bytes idx_labels(const Bytes& labels, std::uint32_t magic = 0x00000801) {
  Bytes b;
  put_be32(b, magic);
  put_be32(b, static_cast<std::uint32_t>(labels.size()));
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

// Deterministic bytes covering 0..255.
Bytes pattern(std::size_t n, unsigned salt) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::uint8_t>((i * 37 + salt * 11) % 256);
  return b;
}

// Runs fn, which must throw InvalidArgument whose one-line message contains every
// piece (the file's path, the problem).
void expect_invalid(const std::function<void()>& fn, const std::vector<std::string>& pieces) {
  try {
    fn();
  } catch (const InvalidArgument& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const auto& p : pieces)
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected InvalidArgument, got: " << e.what();
    return;
  }
  ADD_FAILURE() << "expected InvalidArgument, nothing thrown";
}

float normalised(std::uint8_t p, ChannelStats s) {
  return (static_cast<float>(p) / 255.0f - s.mean) / s.stddev;
}

// ---- IDX ----------------------------------------------------------------------

constexpr std::uint32_t kN = 5, kRows = 4, kCols = 3;

struct IdxFiles {
  Bytes pixels = pattern(kN * kRows * kCols, 1);
  Bytes labels = {3, 0, 9, 9, 1};
};

TEST(DataIdx, PlainAndGzipRoundTripExactly) {
  TempDir dir;
  const IdxFiles src;
  for (const bool gz : {false, true}) {
    const fs::path img = dir / (gz ? "i.gz" : "i");
    const fs::path lab = dir / (gz ? "l.gz" : "l");
    (gz ? write_gz : write_plain)(img, idx_images(kN, kRows, kCols, src.pixels));
    (gz ? write_gz : write_plain)(lab, idx_labels(src.labels));
    const U8Images im = read_idx_images(img);
    EXPECT_EQ(im.n, kN);
    EXPECT_EQ(im.c, 1);
    EXPECT_EQ(im.h, kRows);
    EXPECT_EQ(im.w, kCols);
    EXPECT_EQ(im.pixels, src.pixels);
    EXPECT_EQ(read_idx_labels(lab), src.labels);
  }
}

TEST(DataIdx, EmptySetIsValid) {
  TempDir dir;
  write_plain(dir / "i", idx_images(0, 28, 28, {}));
  write_plain(dir / "l", idx_labels({}));
  EXPECT_EQ(read_idx_images(dir / "i").pixels.size(), 0u);
  EXPECT_EQ(read_idx_labels(dir / "l").size(), 0u);
}

TEST(DataIdx, LoadMnistNormalisesAndAcceptsBothNames) {
  TempDir dir;
  const IdxFiles src;
  // train: uncompressed names; test (t10k): gzipped names.
  write_plain(dir / "train-images-idx3-ubyte", idx_images(kN, kRows, kCols, src.pixels));
  write_plain(dir / "train-labels-idx1-ubyte", idx_labels(src.labels));
  const Bytes test_pixels = pattern(2 * kRows * kCols, 2);
  write_gz(dir / "t10k-images-idx3-ubyte.gz", idx_images(2, kRows, kCols, test_pixels));
  write_gz(dir / "t10k-labels-idx1-ubyte.gz", idx_labels({7, 2}));

  const Dataset tr = load_mnist(dir.path(), Split::kTrain);
  EXPECT_EQ(tr.name, "mnist/train");
  EXPECT_EQ(tr.n, kN);
  EXPECT_EQ(tr.c, 1);
  EXPECT_EQ(tr.h, kRows);
  EXPECT_EQ(tr.w, kCols);
  EXPECT_EQ(tr.num_classes, 10);
  ASSERT_EQ(tr.images.size(), src.pixels.size());
  for (std::size_t i = 0; i < src.pixels.size(); ++i) {
    ASSERT_EQ(tr.images[i], normalised(src.pixels[i], kMnistStats)) << i;
  }
  EXPECT_EQ(tr.labels, (std::vector<std::int64_t>{3, 0, 9, 9, 1}));
  ASSERT_EQ(tr.stats.size(), 1u);
  EXPECT_EQ(tr.stats[0].mean, kMnistStats.mean);

  const Dataset te = load_fashion_mnist(dir.path(), Split::kTest);
  EXPECT_EQ(te.name, "fashion-mnist/test");
  EXPECT_EQ(te.n, 2);
  for (std::size_t i = 0; i < test_pixels.size(); ++i) {
    ASSERT_EQ(te.images[i], normalised(test_pixels[i], kFashionMnistStats)) << i;
  }
  EXPECT_EQ(te.labels, (std::vector<std::int64_t>{7, 2}));
  // image(i) is sample i's slice.
  EXPECT_EQ(te.image(1).data(), te.images.data() + kRows * kCols);
  EXPECT_EQ(te.image(1).size(), kRows * kCols);
}

// Each malformed image file, plain and gzipped, with the words its error must carry.
struct BadFile {
  std::string what;
  Bytes bytes;
  std::vector<std::string> pieces;
};

std::vector<BadFile> bad_image_files() {
  const Bytes px = pattern(kN * kRows * kCols, 3);
  const Bytes good = idx_images(kN, kRows, kCols, px);
  std::vector<BadFile> bad;
  bad.push_back({"labels magic",
                 idx_images(kN, kRows, kCols, px, 0x00000801),
                 {"has 1 dimension, expected 3"}});
  bad.push_back({"two dims", idx_images(kN, kRows, kCols, px, 0x00000802), {"2 dimensions"}});
  bad.push_back(
      {"float type", idx_images(kN, kRows, kCols, px, 0x00000D03), {"element type 0x0D"}});
  bad.push_back(
      {"not idx", idx_images(kN, kRows, kCols, px, 0x12340803), {"not an IDX file", "0x12340803"}});
  // Truncated inside the magic, inside the dims, right after the header, inside the data.
  for (std::size_t len : {std::size_t{0}, std::size_t{3}, std::size_t{4}, std::size_t{10},
                          std::size_t{15}, std::size_t{16}, std::size_t{17}, good.size() - 1}) {
    bad.push_back({"truncated at " + std::to_string(len),
                   Bytes(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(len)),
                   {"truncated"}});
  }
  bad.back().pieces = {
      "truncated: header says 5 images of 4x3 (60 bytes), file holds 59 bytes of data"};
  Bytes trailing = good;
  trailing.push_back(0);
  bad.push_back({"1 trailing byte", trailing, {"trailing data: 1 byte after the 5 images of 4x3"}});
  trailing.resize(trailing.size() + 5000);
  bad.push_back({"many trailing bytes", trailing, {"trailing data: 5001 bytes"}});
  bad.push_back(
      {"overflowing dims", idx_images(0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, px), {"overflows"}});
  bad.push_back({"overflowing dims 2",
                 idx_images(0x10000, 0x10000, 0x10000, px),  // 2^48 fits u64
                 {"truncated: header says 65536 images of 65536x65536"}});
  bad.push_back(
      {"overflow past int64/4", idx_images(0x80000000, 0x80000000, 4, px), {"overflows"}});
  bad.push_back({"zero rows", idx_images(kN, 0, kCols, {}), {"empty"}});
  return bad;
}

TEST(DataIdx, RejectsMalformedImageFiles) {
  TempDir dir;
  for (const BadFile& b : bad_image_files()) {
    for (const bool gz : {false, true}) {
      SCOPED_TRACE(b.what + (gz ? " (gz)" : ""));
      const fs::path p = dir / (gz ? "bad-images.gz" : "bad-images");
      (gz ? write_gz : write_plain)(p, b.bytes);
      auto pieces = b.pieces;
      pieces.push_back(p.string() + ": ");
      expect_invalid([&] { read_idx_images(p); }, pieces);
    }
  }
}

TEST(DataIdx, RejectsMalformedLabelFiles) {
  TempDir dir;
  const Bytes good = idx_labels({1, 2, 3, 4});
  Bytes trailing = good;
  trailing.push_back(9);
  std::vector<BadFile> bad = {
      {"images magic", idx_labels({1, 2}, 0x00000803), {"3 dimensions", "expected 1"}},
      {"label 10", idx_labels({1, 10, 2}), {"label 10 at index 1 is out of range (10 classes)"}},
      {"label 255", idx_labels({255}), {"label 255 at index 0"}},
      {"trailing", trailing, {"trailing data: 1 byte after the 4 labels"}},
      {"short header",
       Bytes(good.begin(), good.begin() + 6),
       {"truncated: the IDX header needs 8 bytes, file holds 6"}},
      {"short data",
       Bytes(good.begin(), good.end() - 1),
       {"truncated: header says 4 labels, file holds 3 bytes of data"}},
      {"empty", {}, {"truncated: 0 bytes"}},
  };
  for (const BadFile& b : bad) {
    for (const bool gz : {false, true}) {
      SCOPED_TRACE(b.what + (gz ? " (gz)" : ""));
      const fs::path p = dir / (gz ? "bad-labels.gz" : "bad-labels");
      (gz ? write_gz : write_plain)(p, b.bytes);
      auto pieces = b.pieces;
      pieces.push_back(p.string() + ": ");
      expect_invalid([&] { read_idx_labels(p); }, pieces);
    }
  }
}

TEST(DataIdx, RejectsDamagedGzipStreams) {
  TempDir dir;
  const fs::path good = dir / "good.gz";
  write_gz(good, idx_images(kN, kRows, kCols, pattern(kN * kRows * kCols, 4)));
  const Bytes gz = read_plain(good);
  ASSERT_GT(gz.size(), 30u);
  const fs::path p = dir / "train-images-idx3-ubyte.gz";
  // Cut the compressed stream (losing the CRC trailer or deflate data).
  for (std::size_t len : {gz.size() - 1, gz.size() - 8, gz.size() / 2, std::size_t{12}}) {
    SCOPED_TRACE(len);
    write_plain(p, Bytes(gz.begin(), gz.begin() + static_cast<std::ptrdiff_t>(len)));
    expect_invalid([&] { read_idx_images(p); }, {p.string() + ": damaged or truncated gzip data"});
  }
  // A flipped byte inside the deflate data or the CRC.
  for (std::size_t at : {gz.size() - 6, gz.size() / 2}) {
    SCOPED_TRACE(at);
    Bytes flipped = gz;
    flipped[at] ^= 0x55;
    write_plain(p, flipped);
    expect_invalid([&] { read_idx_images(p); }, {p.string() + ": "});
  }
}

TEST(DataIdx, RejectsMismatchedImageAndLabelCounts) {
  TempDir dir;
  write_plain(dir / "train-images-idx3-ubyte",
              idx_images(kN, kRows, kCols, pattern(kN * kRows * kCols, 5)));
  write_gz(dir / "train-labels-idx1-ubyte.gz", idx_labels({1, 2, 3, 4}));
  expect_invalid([&] { load_mnist(dir.path(), Split::kTrain); },
                 {(dir / "train-images-idx3-ubyte").string() + ": holds 5 images but " +
                  (dir / "train-labels-idx1-ubyte.gz").string() + " holds 4 labels"});
}

TEST(DataIdx, RejectsAnEmptySplit) {
  TempDir dir;
  write_plain(dir / "t10k-images-idx3-ubyte", idx_images(0, kRows, kCols, {}));
  write_plain(dir / "t10k-labels-idx1-ubyte", idx_labels({}));
  expect_invalid(
      [&] { load_mnist(dir.path(), Split::kTest); },
      {(dir / "t10k-images-idx3-ubyte").string() + ": holds no images: the test split is empty"});
}

TEST(DataIdx, MissingDirectoryOrFileSaysHowToGetIt) {
  TempDir dir;
  const fs::path none = dir / "no-such-dir";
  expect_invalid([&] { load_fashion_mnist(none, Split::kTrain); },
                 {none.string(), "not found", "dataset-fashion-mnist", "--data-dir"});
  expect_invalid([&] { load_mnist(none, Split::kTest); },
                 {none.string(), "not found", "--data-dir"});
  expect_invalid([&] { load_mnist({}, Split::kTest); }, {"load_mnist", "--data-dir"});
  // Images present, labels missing.
  write_plain(dir / "train-images-idx3-ubyte",
              idx_images(kN, kRows, kCols, pattern(kN * kRows * kCols, 6)));
  expect_invalid(
      [&] { load_fashion_mnist(dir.path(), Split::kTrain); },
      {(dir / "train-labels-idx1-ubyte").string() + "[.gz]: not found", "dataset-fashion-mnist"});
  expect_invalid([&] { load_mnist(dir.path(), Split::kTest); },
                 {(dir / "t10k-images-idx3-ubyte").string() + "[.gz]: not found"});
  expect_invalid([&] { read_idx_images(dir / "nothing-here"); },
                 {(dir / "nothing-here").string() + ": not found"});
  expect_invalid([&] { read_idx_images(dir.path()); }, {dir.path().string() + ": is a directory"});
}

// ---- CIFAR-10 -----------------------------------------------------------------

constexpr std::size_t kRecord = 3073;

Bytes cifar_batch(std::size_t records, unsigned salt) {
  Bytes b = pattern(records * kRecord, salt);
  for (std::size_t i = 0; i < records; ++i)
    b[i * kRecord] = static_cast<std::uint8_t>((i + salt) % 10);
  return b;
}

TEST(DataCifar, BatchRoundTripsExactly) {
  TempDir dir;
  const Bytes raw = cifar_batch(3, 1);
  for (const bool gz : {false, true}) {
    const fs::path p = dir / (gz ? "b.bin.gz" : "b.bin");
    (gz ? write_gz : write_plain)(p, raw);
    const U8Labelled b = read_cifar10_batch(p);
    EXPECT_EQ(b.images.n, 3);
    EXPECT_EQ(b.images.c, 3);
    EXPECT_EQ(b.images.h, 32);
    EXPECT_EQ(b.images.w, 32);
    EXPECT_EQ(b.labels, (Bytes{1, 2, 3}));
    ASSERT_EQ(b.images.pixels.size(), 3u * 3072);
    for (std::size_t i = 0; i < 3; ++i) {
      EXPECT_TRUE(std::equal(raw.begin() + static_cast<std::ptrdiff_t>(i * kRecord + 1),
                             raw.begin() + static_cast<std::ptrdiff_t>((i + 1) * kRecord),
                             b.images.pixels.begin() + static_cast<std::ptrdiff_t>(i * 3072)));
    }
  }
}

TEST(DataCifar, LoadConcatenatesBatchesAndNormalisesPerChannel) {
  TempDir dir;
  std::vector<Bytes> batches;
  for (int b = 1; b <= 5; ++b) {
    batches.push_back(cifar_batch(static_cast<std::size_t>(b), static_cast<unsigned>(b)));
    write_plain(dir / ("data_batch_" + std::to_string(b) + ".bin"), batches.back());
  }
  write_plain(dir / "test_batch.bin", cifar_batch(2, 9));
  const Dataset tr = load_cifar10(dir.path(), Split::kTrain);
  EXPECT_EQ(tr.name, "cifar10/train");
  ASSERT_EQ(tr.n, 15);
  EXPECT_EQ(tr.c, 3);
  EXPECT_EQ(tr.num_classes, 10);
  std::int64_t i = 0;
  for (const Bytes& raw : batches) {
    for (std::size_t r = 0; r < raw.size() / kRecord; ++r, ++i) {
      EXPECT_EQ(tr.labels[static_cast<std::size_t>(i)], raw[r * kRecord]);
      const auto img = tr.image(i);
      for (std::size_t j = 0; j < 3072; ++j) {
        ASSERT_EQ(img[j], normalised(raw[r * kRecord + 1 + j], kCifar10Stats[j / 1024]))
            << i << " " << j;
      }
    }
  }
  const Dataset te = load_cifar10(dir.path(), Split::kTest);
  EXPECT_EQ(te.n, 2);
  EXPECT_EQ(te.labels, (std::vector<std::int64_t>{9, 0}));
}

TEST(DataCifar, RejectsMalformedBatches) {
  TempDir dir;
  const fs::path p = dir / "data_batch_1.bin";
  for (std::size_t size : {std::size_t{1}, std::size_t{3072}, kRecord + 1, 2 * kRecord - 1}) {
    SCOPED_TRACE(size);
    write_plain(p, Bytes(size, 0));
    expect_invalid([&] { read_cifar10_batch(p); },
                   {p.string() + ": size " + std::to_string(size) +
                    " bytes is not a positive multiple of the 3073-byte record"});
  }
  write_plain(p, {});
  expect_invalid([&] { read_cifar10_batch(p); }, {p.string() + ": size 0 bytes"});
  Bytes bad = cifar_batch(3, 0);
  bad[kRecord] = 10;
  write_plain(p, bad);
  expect_invalid([&] { read_cifar10_batch(p); },
                 {p.string() + ": label 10 of record 1 (byte offset 3073) is out of range"});
  // Missing directory and a missing batch.
  expect_invalid([&] { load_cifar10({}, Split::kTrain); }, {"load_cifar10", "--data-dir"});
  expect_invalid([&] { load_cifar10(dir / "nope", Split::kTrain); },
                 {(dir / "nope").string(), "not found", "--data-dir"});
  for (int b = 1; b <= 5; ++b) {
    if (b != 3) write_plain(dir / ("data_batch_" + std::to_string(b) + ".bin"), cifar_batch(1, 0));
  }
  expect_invalid([&] { load_cifar10(dir.path(), Split::kTrain); },
                 {(dir / "data_batch_3.bin").string() + ": not found", "cifar-10-batches-bin"});
  expect_invalid([&] { load_cifar10(dir.path(), Split::kTest); },
                 {(dir / "test_batch.bin").string() + ": not found"});
}

// ---- normalisation, slicing, sharding, shuffling --------------------------------

TEST(DataNormalize, MatchesTheFormulaAndChecksShapes) {
  Bytes px(2 * 3 * 4);
  std::iota(px.begin(), px.end(), std::uint8_t{250});  // wraps through 255 to 0
  const std::array<ChannelStats, 3> st{{{0.1f, 0.5f}, {0.2f, 0.25f}, {0.9f, 2.0f}}};
  const auto out = normalize_u8(px, 4, st);
  ASSERT_EQ(out.size(), px.size());
  for (std::size_t i = 0; i < px.size(); ++i) EXPECT_EQ(out[i], normalised(px[i], st[(i / 4) % 3]));
  EXPECT_EQ(normalised(0, {0.0f, 1.0f}), 0.0f);
  EXPECT_EQ(normalised(255, {0.0f, 1.0f}), 1.0f);
  EXPECT_THROW(normalize_u8(px, 5, st), InvalidArgument);
  EXPECT_THROW(normalize_u8(px, 4, {}), InvalidArgument);
}

Dataset numbered(std::int64_t n) {
  // Sample i's two values are 2i, 2i + 1; label i % 3.
  Dataset d;
  d.name = "numbered";
  d.n = n;
  d.c = 1;
  d.h = 1;
  d.w = 2;
  d.num_classes = 3;
  for (std::int64_t i = 0; i < n; ++i) {
    d.images.push_back(static_cast<float>(2 * i));
    d.images.push_back(static_cast<float>(2 * i + 1));
    d.labels.push_back(i % 3);
  }
  return d;
}

TEST(DataShard, ShardsPartitionTheSamples) {
  for (const std::int64_t n : {0, 1, 7, 10}) {
    const Dataset d = numbered(n);
    for (int world = 1; world <= 5; ++world) {
      SCOPED_TRACE("n=" + std::to_string(n) + " world=" + std::to_string(world));
      std::vector<int> owner(static_cast<std::size_t>(n), 0);
      std::int64_t next = 0, smallest = n, largest = 0;
      for (int rank = 0; rank < world; ++rank) {
        const SampleRange r = shard_range(n, rank, world);
        EXPECT_EQ(r.begin, next);  // contiguous, in rank order
        next = r.end;
        smallest = std::min(smallest, r.end - r.begin);
        largest = std::max(largest, r.end - r.begin);
        const Dataset s = shard(d, rank, world);
        ASSERT_EQ(s.n, r.end - r.begin);
        EXPECT_EQ(s.name, "numbered[" + std::to_string(rank) + "/" + std::to_string(world) + "]");
        ASSERT_EQ(s.images.size(), static_cast<std::size_t>(2 * s.n));
        ASSERT_EQ(s.labels.size(), static_cast<std::size_t>(s.n));
        for (std::int64_t j = 0; j < s.n; ++j) {
          const std::int64_t i =
              static_cast<std::int64_t>(s.images[static_cast<std::size_t>(2 * j)]) / 2;
          ASSERT_GE(i, 0);
          ASSERT_LT(i, n);
          ++owner[static_cast<std::size_t>(i)];
          EXPECT_EQ(s.images[static_cast<std::size_t>(2 * j + 1)], static_cast<float>(2 * i + 1));
          EXPECT_EQ(s.labels[static_cast<std::size_t>(j)], i % 3);
        }
      }
      EXPECT_EQ(next, n);
      EXPECT_LE(largest - smallest, 1);
      for (const int o : owner) EXPECT_EQ(o, 1);
    }
  }
}

TEST(DataShard, RejectsBadRankAndWorld) {
  const Dataset d = numbered(4);
  expect_invalid([&] { shard(d, 0, 0); }, {"shard: rank 0 not in [0, world 0)"});
  expect_invalid([&] { shard(d, 2, 2); }, {"shard: rank 2 not in [0, world 2)"});
  expect_invalid([&] { shard(d, -1, 3); }, {"rank -1"});
  expect_invalid([&] { shard_range(5, 0, -1); }, {"world -1"});
  Dataset broken = d;
  broken.labels.pop_back();
  expect_invalid([&] { shard(broken, 0, 1); }, {"inconsistent"});
  expect_invalid([&] { slice(d, 3, 5); }, {"slice: range [3, 5) not within [0, 4)"});
  expect_invalid([&] { slice(d, 2, 1); }, {"slice"});
  EXPECT_EQ(slice(d, 1, 3).labels, (std::vector<std::int64_t>{1, 2}));
}

bool is_permutation_of_iota(const std::vector<std::int64_t>& v) {
  std::vector<std::int64_t> s = v;
  std::sort(s.begin(), s.end());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != static_cast<std::int64_t>(i)) return false;
  }
  return true;
}

TEST(DataShuffle, EpochOrdersArePermutationsDeterministicInSeedAndEpoch) {
  for (const std::int64_t n : {0, 1, 2, 7, 1000}) {
    for (std::uint64_t epoch = 0; epoch < 4; ++epoch) {
      const auto a = epoch_order(n, 42, epoch);
      ASSERT_EQ(a.size(), static_cast<std::size_t>(n));
      EXPECT_TRUE(is_permutation_of_iota(a));
      EXPECT_EQ(a, epoch_order(n, 42, epoch));
    }
  }
  const auto e0 = epoch_order(1000, 42, 0);
  EXPECT_NE(e0, epoch_order(1000, 42, 1));
  EXPECT_NE(e0, epoch_order(1000, 43, 0));
  std::vector<std::int64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(e0, identity);
  EXPECT_THROW(epoch_order(-1, 0, 0), InvalidArgument);
  EXPECT_THROW(epoch_order(std::int64_t{1} << 32, 0, 0), InvalidArgument);
}

TEST(DataShuffle, AllOrdersOfThreeAreEquallyLikely) {
  // An off-by-one in Fisher-Yates (e.g. picking from [0, i) instead of [0, i]) makes
  // some of the 6 orders impossible or twice as likely.
  constexpr int kEpochs = 6000;
  std::map<std::vector<std::int64_t>, int> counts;
  for (int e = 0; e < kEpochs; ++e) ++counts[epoch_order(3, 7, static_cast<std::uint64_t>(e))];
  ASSERT_EQ(counts.size(), 6u);
  const double expected = kEpochs / 6.0;
  const double sigma = std::sqrt(kEpochs * (1.0 / 6) * (5.0 / 6));
  for (const auto& [order, count] : counts) EXPECT_LT(std::abs(count - expected), 5 * sigma);
}

// ---- synthetic ----------------------------------------------------------------

// Accuracy of the nearest class mean (fit on `train`) on `test`.
double nearest_mean_accuracy(const Dataset& train, const Dataset& test) {
  const std::size_t per = train.sample_elements();
  const auto k = static_cast<std::size_t>(train.num_classes);
  std::vector<double> mean(k * per, 0.0);
  std::vector<double> count(k, 0.0);
  for (std::int64_t i = 0; i < train.n; ++i) {
    const auto label = static_cast<std::size_t>(train.labels[static_cast<std::size_t>(i)]);
    const auto img = train.image(i);
    count[label] += 1;
    for (std::size_t j = 0; j < per; ++j) mean[label * per + j] += img[j];
  }
  for (std::size_t c = 0; c < k; ++c) {
    for (std::size_t j = 0; j < per; ++j) mean[c * per + j] /= count[c];
  }
  std::int64_t right = 0;
  for (std::int64_t i = 0; i < test.n; ++i) {
    const auto img = test.image(i);
    std::size_t best = 0;
    double best_d = INFINITY;
    for (std::size_t c = 0; c < k; ++c) {
      double d = 0;
      for (std::size_t j = 0; j < per; ++j)
        d += (img[j] - mean[c * per + j]) * (img[j] - mean[c * per + j]);
      if (d < best_d) best_d = d, best = c;
    }
    right += static_cast<std::int64_t>(best) == test.labels[static_cast<std::size_t>(i)];
  }
  return static_cast<double>(right) / static_cast<double>(test.n);
}

TEST(DataSynthetic, ShapeLabelsAndDeterminism) {
  const Dataset a = make_synthetic(50, 4, 2, 5, 7, 9);
  EXPECT_EQ(a.name, "synthetic");
  EXPECT_EQ(a.n, 50);
  EXPECT_EQ(a.c, 2);
  EXPECT_EQ(a.h, 5);
  EXPECT_EQ(a.w, 7);
  EXPECT_EQ(a.num_classes, 4);
  ASSERT_EQ(a.images.size(), 50u * 2 * 5 * 7);
  ASSERT_EQ(a.stats.size(), 2u);
  for (std::int64_t i = 0; i < a.n; ++i) EXPECT_EQ(a.labels[static_cast<std::size_t>(i)], i % 4);
  for (const float v : a.images) ASSERT_TRUE(std::isfinite(v));
  EXPECT_EQ(a.images, make_synthetic(50, 4, 2, 5, 7, 9).images);
  EXPECT_NE(a.images, make_synthetic(50, 4, 2, 5, 7, 10).images);
  // Sample i does not depend on n: a shorter set is a prefix.
  const Dataset b = make_synthetic(20, 4, 2, 5, 7, 9);
  EXPECT_TRUE(std::equal(b.images.begin(), b.images.end(), a.images.begin()));
  EXPECT_EQ(make_synthetic(0, 3, 1, 2, 2, 0).images.size(), 0u);
  expect_invalid([] { make_synthetic(10, 0, 1, 2, 2, 0); }, {"make_synthetic"});
  expect_invalid([] { make_synthetic(10, 2, 1, 0, 2, 0); }, {"make_synthetic"});
  expect_invalid([] { make_synthetic(-1, 2, 1, 2, 2, 0); }, {"make_synthetic"});
  expect_invalid([] { make_synthetic(1 << 20, 2, 1, 1 << 16, 1 << 16, 0); }, {"too large"});
}

TEST(DataSynthetic, IsLearnableButNotTrivial) {
  // Unit-scale values, and a nearest-class-mean classifier far above chance (0.1).
  for (const auto& [c, side] : {std::pair{1, 12}, std::pair{3, 16}}) {
    SCOPED_TRACE(c);
    const Dataset all = make_synthetic(1200, 10, c, side, side, 5);
    double sum = 0, sq = 0;
    for (const float v : all.images) sum += v, sq += double{v} * v;
    const double n = static_cast<double>(all.images.size());
    EXPECT_NEAR(sum / n, 0.0, 0.3);
    EXPECT_NEAR(std::sqrt(sq / n - (sum / n) * (sum / n)), 1.0, 0.4);
    const double acc = nearest_mean_accuracy(slice(all, 0, 1000), slice(all, 1000, 1200));
    EXPECT_GT(acc, 0.6);
    EXPECT_LT(acc, 1.0);
  }
}

// ---- the real Fashion-MNIST, when installed -------------------------------------

TEST(FashionMnist, RealFilesLoadWithExpectedShapeBalanceAndStats) {
  if (!fs::is_directory(std::string(kFashionMnistDefaultDir))) {
    GTEST_SKIP() << kFashionMnistDefaultDir << " absent (Debian package dataset-fashion-mnist)";
  }
  for (const Split split : {Split::kTrain, Split::kTest}) {
    const Dataset d = load_fashion_mnist({}, split);
    const std::int64_t n = split == Split::kTrain ? 60000 : 10000;
    EXPECT_EQ(d.n, n);
    EXPECT_EQ(d.c, 1);
    EXPECT_EQ(d.h, 28);
    EXPECT_EQ(d.w, 28);
    EXPECT_EQ(d.num_classes, 10);
    ASSERT_EQ(d.images.size(), static_cast<std::size_t>(n * 784));
    std::vector<std::int64_t> per_class(10, 0);
    for (const std::int64_t l : d.labels) ++per_class[static_cast<std::size_t>(l)];
    for (const std::int64_t count : per_class) EXPECT_EQ(count, n / 10);
    if (split == Split::kTrain) {
      // kFashionMnistStats are the train split's: normalised pixels have mean 0, std 1.
      double sum = 0, sq = 0;
      for (const float v : d.images) sum += v, sq += double{v} * v;
      const double m = sum / static_cast<double>(d.images.size());
      EXPECT_NEAR(m, 0.0, 1e-3);
      EXPECT_NEAR(std::sqrt(sq / static_cast<double>(d.images.size()) - m * m), 1.0, 1e-3);
    }
  }
}

// ---- text ----------------------------------------------------------------------

// 0, 1, ..., n-1 (mod 256) as a stand-in text.
Bytes counting(std::size_t n) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::uint8_t>(i % 256);
  return b;
}

TEST(Text, SplitIsTheFirstNinetyAndTheLastTenPercent) {
  EXPECT_EQ(text_split(1000, Split::kTrain).begin, 0u);
  EXPECT_EQ(text_split(1000, Split::kTrain).end, 900u);
  EXPECT_EQ(text_split(1000, Split::kTest).begin, 900u);
  EXPECT_EQ(text_split(1000, Split::kTest).end, 1000u);
  // Rounded towards train; the two always meet.
  EXPECT_EQ(text_split(1009, Split::kTrain).end, 909u);
  EXPECT_EQ(text_split(1009, Split::kTest).begin, 909u);
}

TEST(Text, WindowsShareOneByteAndCoverEveryTargetOnce) {
  const Bytes text = counting(1001);
  const Dataset d = text_windows(text, 10, 0, "t");
  EXPECT_TRUE(d.text);
  EXPECT_EQ(d.n, 100);  // (1001 - 1) / 10
  EXPECT_EQ(d.c, 1);
  EXPECT_EQ(d.h, 1);
  EXPECT_EQ(d.w, 11);
  EXPECT_EQ(d.num_classes, 256);
  ASSERT_EQ(d.images.size(), 100u * 11u);
  std::vector<int> targeted(text.size(), 0);
  for (std::int64_t i = 0; i < d.n; ++i) {
    const auto win = d.image(i);
    for (std::size_t j = 0; j < 11; ++j) {
      EXPECT_EQ(win[j], static_cast<float>(text[static_cast<std::size_t>(i) * 10 + j]));
    }
    EXPECT_EQ(d.labels[static_cast<std::size_t>(i)], static_cast<std::int64_t>(win[10]));
    for (std::size_t j = 1; j < 11; ++j) ++targeted[static_cast<std::size_t>(i) * 10 + j];
  }
  EXPECT_EQ(targeted[0], 0);
  for (std::size_t b = 1; b < text.size(); ++b) EXPECT_EQ(targeted[b], 1) << b;

  // A fixed subset spreads over the windows: window i * 100 / 7.
  const Dataset sub = text_windows(text, 10, 7, "t");
  ASSERT_EQ(sub.n, 7);
  for (std::int64_t i = 0; i < 7; ++i) {
    EXPECT_EQ(sub.image(i)[0], d.image(i * 100 / 7)[0]) << i;
  }
  EXPECT_EQ(text_windows(text, 10, 500, "t").n, 100);  // more than there are: all

  EXPECT_THROW(text_windows(text, 0, 0, "t"), InvalidArgument);
  EXPECT_THROW(text_windows(text, kMaxContext + 1, 0, "t"), InvalidArgument);
  EXPECT_THROW(text_windows(counting(10), 10, 0, "t"), InvalidArgument);  // no full window
}

TEST(Text, ShardsAreContiguousRunsOfTheText) {
  const Bytes text = counting(4097);
  const Dataset d = text_windows(text, 16, 0, "t");  // 256 windows
  std::int64_t next = 0;
  for (int rank = 0; rank < 3; ++rank) {
    const Dataset s = shard(d, rank, 3);
    EXPECT_TRUE(s.text);
    EXPECT_EQ(s.w, 17);
    // Each rank reads its own stretch of the text, in order.
    for (std::int64_t i = 0; i < s.n; ++i, ++next) {
      EXPECT_EQ(s.image(i)[0], d.image(next)[0]) << rank << " " << i;
      if (i > 0) {
        EXPECT_EQ(s.image(i)[0], s.image(i - 1)[16]);
      }
    }
  }
  EXPECT_EQ(next, d.n);
}

TEST(Text, UnigramCrossEntropyIsTheSmoothedByteDistributions) {
  // Train targets: 3 x 'a' and 1 x 'b' (window "xaaab" minus its first byte), test targets
  // "ab": -(ln((3+1)/(4+256)) + ln((1+1)/(4+256))) / 2.
  const Bytes train = {'x', 'a', 'a', 'a', 'b'};
  const Bytes test = {'y', 'a', 'b'};
  const double want = -(std::log(4.0 / 260.0) + std::log(2.0 / 260.0)) / 2.0;
  EXPECT_NEAR(unigram_cross_entropy(text_windows(train, 4, 0, "a"), text_windows(test, 2, 0, "b")),
              want, 1e-12);
  EXPECT_THROW(
      unigram_cross_entropy(make_synthetic(4, 2, 1, 2, 2, 1), text_windows(test, 2, 0, "b")),
      InvalidArgument);
}

TEST(Text, MissingFortunesFileIsNamed) {
  TempDir dir;
  write_plain(dir / "art", counting(100));
  try {
    (void)read_fortunes(dir.path());
    FAIL() << "read an incomplete fortunes directory";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("ascii-art"), std::string::npos) << e.what();
  }
}

TEST(Text, RealFortunesCorpus) {
  if (!fs::is_directory(std::string(kFortunesDefaultDir))) {
    GTEST_SKIP() << kFortunesDefaultDir << " absent (Debian package fortunes)";
  }
  const Bytes text = read_fortunes({});
  EXPECT_EQ(text.size(), 2576674u);  // fortunes + fortunes-min 1:1.99.1-7.3
  // Plain English: printable ASCII, tabs and newlines make up almost all of it.
  const auto plain = std::count_if(text.begin(), text.end(), [](std::uint8_t c) {
    return (c >= 32 && c < 127) || c == '\n' || c == '\t';
  });
  EXPECT_GT(static_cast<double>(plain) / static_cast<double>(text.size()), 0.999);
  const TextRange test = text_split(text.size(), Split::kTest);
  EXPECT_EQ(test.end - test.begin, 257667u);
}

}  // namespace
}  // namespace gradcomp::data
