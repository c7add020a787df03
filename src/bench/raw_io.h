// Files the CLI reads and writes: raw little-endian float32 arrays (gradients,
// decoded outputs, error-feedback residuals) and wire messages (bytes as encoded).
// Errors are InvalidArgument with one line that names the file. Writes are atomic:
// the data goes to FILE.tmp, which is flushed to disk and renamed over FILE, so a
// failure (full disk, bad directory) never leaves a truncated FILE behind and an
// existing good FILE is only replaced by a complete new one.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace gradcomp::bench {

// The whole file; throws if it is missing, not a regular file or unreadable.
std::vector<std::byte> read_bytes(const std::string& path);

// A float32 file: its size must be a multiple of 4 bytes.
std::vector<float> read_floats(const std::string& path);

void write_bytes_atomic(const std::string& path, std::span<const std::byte> data);

// The first half of write_bytes_atomic, for outputs that must change together: the data
// is written in full to PATH.tmp (and synced) by the constructor, which throws on any
// failure; commit() renames it over PATH. One destroyed uncommitted removes PATH.tmp, so
// writing every output's PendingFile before committing any leaves the old outputs in
// place when one of the writes fails. A PATH that is a directory is refused up front.
class PendingFile {
 public:
  PendingFile(std::string path, std::span<const std::byte> data);
  ~PendingFile();
  PendingFile(const PendingFile&) = delete;
  PendingFile& operator=(const PendingFile&) = delete;
  void commit();

 private:
  std::string path_;
  std::string tmp_;
  bool pending_ = true;
};
void write_floats_atomic(const std::string& path, std::span<const float> data);

bool file_exists(const std::string& path);

}  // namespace gradcomp::bench
