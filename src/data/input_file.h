// A file read through zlib (gzip decompressed, anything else read as it is), and the
// one-line error every reader throws. Internal to gradcomp_data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

struct gzFile_s;

namespace gradcomp::data::detail {

// Throws InvalidArgument("<file>: <problem>").
[[noreturn]] void fail(const std::filesystem::path& file, std::string_view problem);

class InputFile {
 public:
  // Opens `file`; InvalidArgument if it is missing, a directory, or unreadable.
  explicit InputFile(const std::filesystem::path& file);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::filesystem::path& path() const { return path_; }

  // Reads up to out.size() bytes; fewer only at the end of the data. A damaged or
  // truncated gzip stream throws.
  std::size_t read(std::span<std::uint8_t> out);

  // Reads until `want` bytes or the end of the data, into a buffer that grows with
  // the bytes actually present, so a header claiming terabytes costs no more than
  // the file holds: the first allocation is min(want, file size + 1) for a plain file,
  // min(want, 64 MiB) for gzip (whose inflated size is unknown), then it doubles.
  // Returns the bytes read; buf.size() equals it.
  std::size_t read_up_to(std::vector<std::uint8_t>& buf, std::uint64_t want);

  // Counts the bytes left, stopping after cap + 1 (so the result is at most cap + 1).
  std::uint64_t count_remaining(std::uint64_t cap);

 private:
  std::filesystem::path path_;
  std::uint64_t disk_bytes_ = 0;  // size on disk (0 if unknown)
  gzFile_s* file_ = nullptr;
};

// printf-style formatting of one short message line (no file names: those go
// through fail(), whatever their length).
template <class... Args>
std::string format(const char* fmt, Args... args) {
  char buf[256];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

// Big-endian u32 at p[0..3] (IDX headers).
inline std::uint32_t load_be32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} << 24 | std::uint32_t{p[1]} << 16 | std::uint32_t{p[2]} << 8 |
         std::uint32_t{p[3]};
}

// a * b, or false on overflow of std::uint64_t.
inline bool checked_mul(std::uint64_t a, std::uint64_t b, std::uint64_t& out) {
  return !__builtin_mul_overflow(a, b, &out);
}

}  // namespace gradcomp::data::detail
