#include "train/server_checkpoints.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <string>
#include <system_error>
#include <vector>

#include "gradcomp/error.h"

namespace gradcomp::train {

namespace {

namespace fs = std::filesystem;

// step -> file, for this server's checkpoints in dir (other names are ignored).
std::map<std::uint64_t, fs::path> server_files(const fs::path& dir, const std::string& prefix) {
  std::map<std::uint64_t, fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file(ec) || !name.starts_with(prefix) || !name.ends_with(".ckpt")) continue;
    const std::string_view digits(name.data() + prefix.size(),
                                  name.size() - prefix.size() - std::string_view(".ckpt").size());
    std::uint64_t step = 0;
    const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), step);
    if (r.ec == std::errc() && r.ptr == digits.data() + digits.size() && !digits.empty()) {
      files[step] = e.path();
    }
  }
  return files;
}

std::vector<ArrayView> views(std::span<const StateBuffer> arrays,
                             std::span<const std::int64_t> counters) {
  std::vector<ArrayView> v;
  for (const StateBuffer& b : arrays) {
    v.push_back({b.name, ArrayType::kFloat32, b.data.data(), b.data.size()});
  }
  if (!counters.empty()) {
    // read_checkpoint writes through data; save only reads it.
    v.push_back({"counters", ArrayType::kInt64, const_cast<std::int64_t*>(counters.data()),
                 counters.size()});
  }
  return v;
}

}  // namespace

dist::PsServerCheckpoints server_checkpoints(const fs::path& dir, int server_index,
                                             const CheckpointMeta& identity, bool resume) {
  const std::string prefix = "server-" + std::to_string(server_index) + ".step-";
  dist::PsServerCheckpoints c;
  c.save = [=](std::uint64_t step, std::span<const StateBuffer> arrays,
               std::span<const std::int64_t> counters) {
    fs::create_directories(dir);
    CheckpointMeta meta = identity;
    meta.step = step;
    write_checkpoint(dir / (prefix + std::to_string(step) + ".ckpt"), meta,
                     views(arrays, counters));
    const auto files = server_files(dir, prefix);
    std::size_t keep = 2;  // the newest two
    for (auto it = files.rbegin(); it != files.rend(); ++it) {
      if (keep > 0) {
        --keep;
      } else {
        std::error_code ec;
        fs::remove(it->second, ec);
      }
    }
  };
  if (!resume) return c;
  c.load = [=](std::optional<std::uint64_t> step, std::span<const StateBuffer> arrays,
               std::span<std::int64_t> counters) {
    const auto files = server_files(dir, prefix);
    if (files.empty()) return false;
    const auto it = step ? files.find(*step) : std::prev(files.end());
    if (it == files.end()) return false;
    const CheckpointMeta meta = read_checkpoint(it->second, views(arrays, counters));
    if (meta.seed != identity.seed || meta.rank != identity.rank || meta.world != identity.world) {
      throw InvalidArgument("checkpoint " + it->second.string() + ": written by seed " +
                            std::to_string(meta.seed) + " rank " + std::to_string(meta.rank) + "/" +
                            std::to_string(meta.world) + ", this server is seed " +
                            std::to_string(identity.seed) + " rank " +
                            std::to_string(identity.rank) + "/" + std::to_string(identity.world));
    }
    return true;
  };
  return c;
}

}  // namespace gradcomp::train
