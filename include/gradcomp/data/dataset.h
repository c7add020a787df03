// Image-classification data sets as plain arrays, with no LibTorch: the readers are
// pure parsing and are tested without it; the trainer wraps the arrays in tensors
// (torch::from_blob(images.data(), {n, c, h, w}) and labels as kLong).
//
// Every reader validates its file completely before returning (magic, dimension
// counts, sizes with overflow-checked arithmetic, exact data length, label range)
// and throws gradcomp::InvalidArgument with one line naming the file and the problem.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gradcomp::data {

// Mean and standard deviation of one channel's pixels after scaling u8 to [0, 1].
// A normalised pixel is (p / 255 - mean) / stddev.
struct ChannelStats {
  float mean = 0.0f;
  float stddev = 1.0f;
};

// Per-data-set constants, computed over the TRAIN split (all pixels of all images,
// population std), as torchvision's examples use them.
// Fashion-MNIST: measured here on /usr/share/datasets/fashion-mnist (mean 0.286041,
// std 0.353024); the data set's test checks them.
inline constexpr ChannelStats kFashionMnistStats{0.2860f, 0.3530f};
// MNIST: the constants of PyTorch's MNIST example (MNIST is not packaged; not re-measured).
inline constexpr ChannelStats kMnistStats{0.1307f, 0.3081f};
// CIFAR-10, channels R, G, B: per-pixel population std over the 50000 train images
// (not 0.2023/0.1994/0.2010, which is the std of per-image means that some code copies).
inline constexpr std::array<ChannelStats, 3> kCifar10Stats{
    {{0.4914f, 0.2470f}, {0.4822f, 0.2435f}, {0.4465f, 0.2616f}}};

// A labelled image set held in memory. Shapes are std::int64_t, LibTorch's size type.
struct Dataset {
  std::string name;                  // "fashion-mnist/train", "synthetic", ...
  std::int64_t n = 0;                // samples
  std::int64_t c = 0;                // channels
  std::int64_t h = 0;                // rows
  std::int64_t w = 0;                // columns
  std::int64_t num_classes = 0;      // labels are in [0, num_classes)
  std::vector<float> images;         // n x c x h x w, row-major, normalised (see `stats`)
  std::vector<std::int64_t> labels;  // n
  std::vector<ChannelStats> stats;   // per channel, what was subtracted / divided (c entries)
  // Text (text_windows): a sample is a window of w = context + 1 byte values held as
  // floats (exact), c = h = 1, num_classes = 256; a language model reads the first
  // `context` and predicts each next byte. The label is the window's last byte.
  bool text = false;

  std::size_t sample_elements() const { return static_cast<std::size_t>(c * h * w); }
  std::span<const float> image(std::int64_t i) const {
    return std::span<const float>(images).subspan(static_cast<std::size_t>(i) * sample_elements(),
                                                  sample_elements());
  }
};

enum class Split { kTrain, kTest };
// "train" or "test" (anything else: InvalidArgument listing both).
Split parse_split(std::string_view s);
std::string_view to_string(Split s);

// ---- sharding and shuffling ----------------------------------------------------

// Half-open sample range [begin, end).
struct SampleRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;
};

// The CONTIGUOUS block of rank `rank` among `world`: the first n % world ranks hold
// n / world + 1 samples, the rest n / world. Every sample is in exactly one shard and
// sizes differ by at most 1. Contiguous (not strided) so that a data set whose labels
// cycle with the index (make_synthetic) stays class-balanced on every rank; the real
// files are stored in no class order. InvalidArgument unless world >= 1 and
// 0 <= rank < world.
SampleRange shard_range(std::int64_t n, int rank, int world);
// The samples of shard_range(d.n, rank, world), copied into a Dataset of their own
// (name gets "[rank/world]" appended).
Dataset shard(const Dataset& d, int rank, int world);
// Samples [begin, end) of d (e.g. to split a synthetic set into train and test).
Dataset slice(const Dataset& d, std::int64_t begin, std::int64_t end);

// A permutation of 0..n-1, a pure function of (n, seed, epoch): Fisher-Yates driven by
// CounterRng::below with a key derived from (seed, epoch). Ranks that want different
// orders mix their rank into `seed`. n must be < 2^32.
std::vector<std::int64_t> epoch_order(std::int64_t n, std::uint64_t seed, std::uint64_t epoch);

// ---- raw file readers (no normalisation) ---------------------------------------

// Files are read through zlib: gzip files are decompressed, other files read as they
// are (so `x.gz` and its decompressed `x` give the same result).
struct U8Images {
  std::int64_t n = 0, c = 0, h = 0, w = 0;
  std::vector<std::uint8_t> pixels;  // n x c x h x w
};
// IDX images: magic 0x00000803 (u8, 3 dims), dims n, rows, cols as big-endian u32,
// then exactly n*rows*cols bytes. c is 1.
U8Images read_idx_images(const std::filesystem::path& file);
// IDX labels: magic 0x00000801 (u8, 1 dim), count as big-endian u32, then exactly
// count bytes, each < 10.
std::vector<std::uint8_t> read_idx_labels(const std::filesystem::path& file);

// One CIFAR-10 binary batch: records of 1 label byte (< 10) + 3072 pixel bytes
// (channel-major 3x32x32); the size must be a positive multiple of 3073.
struct U8Labelled {
  U8Images images;
  std::vector<std::uint8_t> labels;
};
U8Labelled read_cifar10_batch(const std::filesystem::path& file);

// Scales u8 pixels (n x c x plane, channel-major) to [0, 1] and normalises channel k
// with stats[k]: out = (float(p) / 255.0f - mean) / stddev, evaluated in float exactly
// as written (a 256-entry table per channel).
std::vector<float> normalize_u8(std::span<const std::uint8_t> pixels, std::size_t plane,
                                std::span<const ChannelStats> stats);

// ---- data sets -----------------------------------------------------------------

// Where the Debian package dataset-fashion-mnist installs the files.
inline constexpr std::string_view kFashionMnistDefaultDir = "/usr/share/datasets/fashion-mnist";

// {train,t10k}-images-idx3-ubyte and {train,t10k}-labels-idx1-ubyte, each either
// uncompressed or with a .gz suffix (the uncompressed one is used when both exist).
// An empty `dir` means kFashionMnistDefaultDir. 10 classes, 1x28x28,
// normalised with kFashionMnistStats.
Dataset load_fashion_mnist(const std::filesystem::path& dir, Split split);
// The same file names in `dir` (required: MNIST is not packaged), normalised with
// kMnistStats.
Dataset load_mnist(const std::filesystem::path& dir, Split split);
// CIFAR-10 binary version (the cifar-10-batches-bin directory): data_batch_1..5.bin
// for train, test_batch.bin for test. 10 classes, 3x32x32, normalised with kCifar10Stats.
Dataset load_cifar10(const std::filesystem::path& dir, Split split);

// A learnable synthetic problem for tests and smoke runs. Class k has a template: in
// each channel, two Gaussian blobs of random position, width and sign. Sample i has
// label i % classes and is its class's template scaled by a random factor in
// [0.6, 1.4], shifted by up to +-h/8 rows and +-w/8 columns, plus unit-variance pixel
// noise (Irwin-Hall, near-Gaussian). Blob peaks are scaled so a template's energy is
// the same for every shape: a nearest-class-mean classifier scores ~0.85-0.97 with 10
// classes (1x8x8 .. 3x32x32), so a small model is far above chance after one epoch
// but not trivially perfect. Values are roughly zero-mean with unit scale already; no pixel stats
// apply
// (`stats` are {0, 1}). Deterministic in (n, classes, c, h, w, seed); sample i does not
// depend on n, so make_synthetic(n1) is a prefix of make_synthetic(n2 > n1).
Dataset make_synthetic(std::int64_t n, int classes, int c, int h, int w, std::uint64_t seed);

// ---- text (byte-level language modelling) ---------------------------------------

// Where the Debian packages fortunes and fortunes-min install their text.
inline constexpr std::string_view kFortunesDefaultDir = "/usr/share/games/fortunes";
// The longest window text_windows cuts (a bound on memory, not on any model).
inline constexpr std::int64_t kMaxContext = 4096;

// The fortunes corpus: the 43 plain-text files of Debian's fortunes and fortunes-min
// packages (1:1.99.1-7.3; listed by name, so files other packages put in the same
// directory do not change it), read in sorted name order and concatenated as they are:
// 2,576,674 bytes of English quotations, jokes and verse, with the "%" lines that
// separate the fortunes. An empty `dir` means kFortunesDefaultDir. InvalidArgument naming
// the file when one is missing or empty.
std::vector<std::uint8_t> read_fortunes(const std::filesystem::path& dir);

// Byte range [begin, end) of a split of `bytes` of text: train is the first
// bytes - bytes / 10, test the last bytes / 10 (by byte, wherever that cuts).
struct TextRange {
  std::size_t begin = 0;
  std::size_t end = 0;
};
TextRange text_split(std::size_t bytes, Split split);

// Windows of context + 1 bytes, starting every `context` bytes (consecutive windows share
// one byte, so every byte but the first is a target exactly once): (size - 1) / context
// of them. max_windows > 0 keeps that many, spread evenly over them (window
// i * all / max_windows), a fixed subset (the test set's, so that evaluating is cheap).
// InvalidArgument for a context outside [1, kMaxContext] or text too short for a window.
Dataset text_windows(std::span<const std::uint8_t> text, std::int64_t context,
                     std::int64_t max_windows, std::string name);

// The cross-entropy in nats per byte, on test's targets (every byte of each window but the
// first), of the unigram byte distribution of train's targets with add-one smoothing: the
// figure a language model has to beat. InvalidArgument unless both are text.
double unigram_cross_entropy(const Dataset& train, const Dataset& test);

}  // namespace gradcomp::data
