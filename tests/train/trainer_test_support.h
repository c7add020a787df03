// What the trainer tests share: a gradient sync for one process (a LocalReducer after
// backward), a synthetic train/test split, and a fresh per-process scratch directory.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>

#include "gradcomp/registry.h"
#include "train/local_reducer.h"
#include "train/trainer.h"

namespace gradcomp::train::test {

inline SyncFactory local(std::string spec) {
  return reducer_sync(
      [spec](std::span<const BucketShape> shapes) {
        return std::make_unique<LocalReducer>(Method::parse(spec), shapes);
      },
      Method::parse(spec));
}

struct Data {
  data::Dataset train;
  data::Dataset test;
};

// n_train + n_test synthetic h x h images of 10 classes, split in that order.
inline Data synthetic(std::int64_t n_train, std::int64_t n_test, int h) {
  const data::Dataset all = data::make_synthetic(n_train + n_test, 10, 1, h, h, 11);
  return {data::slice(all, 0, n_train), data::slice(all, n_train, n_train + n_test)};
}

// An empty directory <tmp>/gradcomp_<prefix>_<pid>_<tag> (emptied if it exists).
inline std::filesystem::path temp_dir(const std::string& prefix, const std::string& tag) {
  std::filesystem::path d = std::filesystem::temp_directory_path() /
                            ("gradcomp_" + prefix + "_" + std::to_string(::getpid()) + "_" + tag);
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace gradcomp::train::test
