// MNIST and Fashion-MNIST: a pair of IDX files per split, same names for both data sets.
#include <cinttypes>
#include <string>

#include "gradcomp/data/dataset.h"
#include "gradcomp/error.h"
#include "input_file.h"

namespace gradcomp::data {

namespace {

using detail::format;

struct IdxSource {
  const char* title;       // "Fashion-MNIST"
  const char* name;        // "fashion-mnist"
  const char* how_to_get;  // appended to "not found" errors
  ChannelStats stats;
};

constexpr IdxSource kFashion{"Fashion-MNIST", "fashion-mnist",
                             "install the Debian package dataset-fashion-mnist "
                             "(scripts/install-deps.sh), or pass --data-dir",
                             kFashionMnistStats};
constexpr IdxSource kMnist{"MNIST", "mnist",
                           "MNIST is not packaged: put the four IDX files of the MNIST "
                           "distribution (.gz or not) in a directory and pass --data-dir",
                           kMnistStats};

// dir/base if it exists, else dir/base.gz if that exists, else a "not found" error.
std::filesystem::path find_file(const std::filesystem::path& dir, const std::string& base,
                                const IdxSource& src) {
  std::error_code ec;
  std::filesystem::path plain = dir / base;
  if (std::filesystem::exists(plain, ec)) return plain;
  std::filesystem::path gz = plain;
  gz += ".gz";
  if (std::filesystem::exists(gz, ec)) return gz;
  detail::fail(plain.string() + "[.gz]", std::string("not found (") + src.how_to_get + ")");
}

Dataset load_idx_pair(const std::filesystem::path& dir, Split split, const IdxSource& src) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    detail::fail(dir, std::string(src.title) + " directory not found (" + src.how_to_get + ")");
  }
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  const auto images_path = find_file(dir, prefix + "-images-idx3-ubyte", src);
  const auto labels_path = find_file(dir, prefix + "-labels-idx1-ubyte", src);
  U8Images images = read_idx_images(images_path);
  const std::vector<std::uint8_t> labels = read_idx_labels(labels_path);
  if (static_cast<std::size_t>(images.n) != labels.size()) {
    detail::fail(images_path, format("holds %" PRId64 " images but ", images.n) +
                                  labels_path.string() +
                                  format(" holds %zu labels", labels.size()));
  }
  if (images.n == 0) {
    // Readable, but nothing to train on or to measure accuracy with (an empty test set
    // reported accuracy 0).
    detail::fail(images_path,
                 "holds no images: the " + std::string(to_string(split)) + " split is empty");
  }
  Dataset d;
  d.name = std::string(src.name) + "/" + std::string(to_string(split));
  d.n = images.n;
  d.c = images.c;
  d.h = images.h;
  d.w = images.w;
  d.num_classes = 10;
  d.stats = {src.stats};
  d.images = normalize_u8(images.pixels, static_cast<std::size_t>(d.h * d.w), d.stats);
  d.labels.assign(labels.begin(), labels.end());
  return d;
}

}  // namespace

Dataset load_fashion_mnist(const std::filesystem::path& dir, Split split) {
  return load_idx_pair(dir.empty() ? std::filesystem::path(kFashionMnistDefaultDir) : dir, split,
                       kFashion);
}

Dataset load_mnist(const std::filesystem::path& dir, Split split) {
  if (dir.empty()) {
    throw InvalidArgument(std::string("load_mnist: no data directory given (") + kMnist.how_to_get +
                          ")");
  }
  return load_idx_pair(dir, split, kMnist);
}

}  // namespace gradcomp::data
