#include "train/datasets.h"

#include "gradcomp/error.h"

namespace gradcomp::train {

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
  throw InvalidArgument("--dataset " + d.dataset +
                        ": unknown; known: fashion-mnist, mnist, cifar10, synthetic");
}

}  // namespace gradcomp::train
