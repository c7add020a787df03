// The data sets `gradcomp train` and `gradcomp eval` read, by --dataset name.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "gradcomp/data/dataset.h"

namespace gradcomp::train {

struct DataOptions {
  // fashion-mnist | mnist | cifar10 | synthetic | fortunes (text)
  std::string dataset = "fashion-mnist";
  std::filesystem::path data_dir;       // empty: the dataset's default location
  std::int64_t synthetic_train = 8192;  // synthetic: samples (train / test)
  std::int64_t synthetic_test = 2048;
  // Text (fortunes): bytes a window's model reads (--context), and how many windows of
  // the test split are evaluated (a fixed subset, spread evenly over it: the whole test
  // split of 257,667 bytes would take a 2-core machine ~10 s per evaluation).
  std::int64_t context = 64;
  std::int64_t test_windows = 256;
};

// A text data set: its windows are a language model's samples (data::Dataset::text).
bool is_text_dataset(std::string_view name);

// The data set named by `d` (train or test split); InvalidArgument for an unknown name
// or a missing --data-dir.
data::Dataset load_dataset(const DataOptions& d, data::Split split, std::uint64_t seed);

}  // namespace gradcomp::train
