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
void write_floats_atomic(const std::string& path, std::span<const float> data);

bool file_exists(const std::string& path);

}  // namespace gradcomp::bench
