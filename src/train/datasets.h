// The data sets `gradcomp train` and `gradcomp eval` read, by --dataset name.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "gradcomp/data/dataset.h"

namespace gradcomp::train {

struct DataOptions {
  std::string dataset = "fashion-mnist";  // fashion-mnist | mnist | cifar10 | synthetic
  std::filesystem::path data_dir;         // empty: the dataset's default location
  std::int64_t synthetic_train = 8192;    // synthetic: samples (train / test)
  std::int64_t synthetic_test = 2048;
};

// The data set named by `d` (train or test split); InvalidArgument for an unknown name
// or a missing --data-dir.
data::Dataset load_dataset(const DataOptions& d, data::Split split, std::uint64_t seed);

}  // namespace gradcomp::train
