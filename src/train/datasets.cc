#include "train/datasets.h"

#include <span>
#include <vector>

#include "gradcomp/error.h"

namespace gradcomp::train {

bool is_text_dataset(std::string_view name) { return name == "fortunes"; }

data::Dataset load_dataset(const DataOptions& d, data::Split split, std::uint64_t seed) {
  if (d.dataset == "fashion-mnist") return data::load_fashion_mnist(d.data_dir, split);
  if (d.dataset == "mnist") {
    if (d.data_dir.empty()) throw InvalidArgument("--dataset mnist needs --data-dir");
    return data::load_mnist(d.data_dir, split);
  }
  if (d.dataset == "cifar10") {
    if (d.data_dir.empty()) throw InvalidArgument("--dataset cifar10 needs --data-dir");
    return data::load_cifar10(d.data_dir, split);
  }
  if (d.dataset == "synthetic") {
    // One generated set, cut into train and test (make_synthetic's samples do not
    // depend on n).
    const auto all =
        data::make_synthetic(d.synthetic_train + d.synthetic_test, 10, 1, 28, 28, seed);
    return split == data::Split::kTrain
               ? data::slice(all, 0, d.synthetic_train)
               : data::slice(all, d.synthetic_train, d.synthetic_train + d.synthetic_test);
  }
  if (d.dataset == "fortunes") {
    const std::vector<std::uint8_t> text = data::read_fortunes(d.data_dir);
    const data::TextRange r = data::text_split(text.size(), split);
    const std::span<const std::uint8_t> part(text.data() + r.begin, r.end - r.begin);
    return split == data::Split::kTrain
               ? data::text_windows(part, d.context, 0, "fortunes/train")
               : data::text_windows(part, d.context, d.test_windows, "fortunes/test");
  }
  throw InvalidArgument("--dataset " + d.dataset +
                        ": unknown; known: fashion-mnist, mnist, cifar10, synthetic, fortunes");
}

}  // namespace gradcomp::train
