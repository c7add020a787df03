#include "input_file.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>

#include "gradcomp/error.h"

namespace gradcomp::data::detail {

namespace {
constexpr std::uint64_t kFirstGzipChunk = std::uint64_t{64} << 20;
}  // namespace

void fail(const std::filesystem::path& file, std::string_view problem) {
  std::string msg = file.string();
  msg += ": ";
  msg += problem;
  throw InvalidArgument(msg);
}

InputFile::InputFile(const std::filesystem::path& file) : path_(file) {
  std::error_code ec;
  const auto status = std::filesystem::status(file, ec);
  if (!std::filesystem::exists(status)) fail(file, "not found");
  if (std::filesystem::is_directory(status)) fail(file, "is a directory, expected a file");
  disk_bytes_ = std::filesystem::file_size(file, ec);
  if (ec) disk_bytes_ = 0;
  errno = 0;
  file_ = gzopen(file.c_str(), "rb");
  if (file_ == nullptr) {
    fail(file,
         std::string("cannot open: ") + (errno != 0 ? std::strerror(errno) : "out of memory"));
  }
  // zlib's default 8 KiB input buffer costs ~5% more CPU on the 26 MB Fashion-MNIST file.
  gzbuffer(file_, 1u << 18);
}

InputFile::~InputFile() {
  if (file_ != nullptr) gzclose_r(file_);
}

std::size_t InputFile::read(std::span<std::uint8_t> out) {
  std::size_t done = 0;
  while (done < out.size()) {
    // gzread takes an unsigned count and returns an int.
    const auto chunk =
        static_cast<unsigned>(std::min<std::size_t>(out.size() - done, std::size_t{1} << 30));
    const int got = gzread(file_, out.data() + done, chunk);
    int err = Z_OK;
    const char* what = gzerror(file_, &err);
    // A truncated gzip stream returns the bytes it could inflate and sets Z_BUF_ERROR
    // ("unexpected end of file"); a bad checksum or invalid data sets Z_DATA_ERROR.
    if (got < 0 || err != Z_OK) {
      // zlib prefixes its message with the path, which fail() already gives.
      std::string_view zmsg = what != nullptr && *what != '\0' ? what : "read error";
      const std::string prefix = path_.string() + ": ";
      if (zmsg.starts_with(prefix)) zmsg.remove_prefix(prefix.size());
      fail(path_, "damaged or truncated gzip data (zlib: " + std::string(zmsg) + ")");
    }
    if (got == 0) break;
    done += static_cast<std::size_t>(got);
  }
  return done;
}

std::size_t InputFile::read_up_to(std::vector<std::uint8_t>& buf, std::uint64_t want) {
  const std::uint64_t limit =
      std::min<std::uint64_t>(want, std::numeric_limits<std::size_t>::max() / 2);
  // gzdirect looks at the first bytes if nothing was read yet: 1 for a plain file,
  // whose bytes on disk are then exactly what is left to read (or more).
  const bool plain = gzdirect(file_) == 1 && disk_bytes_ > 0;
  const std::uint64_t first = plain ? disk_bytes_ + 1 : kFirstGzipChunk;
  std::size_t size = 0;
  std::size_t capacity = static_cast<std::size_t>(std::min(limit, first));
  buf.resize(capacity);
  while (size < limit) {
    if (size == capacity) {
      capacity =
          static_cast<std::size_t>(std::min<std::uint64_t>(limit, std::uint64_t{capacity} * 2));
      buf.resize(capacity);
    }
    const std::size_t got = read({buf.data() + size, capacity - size});
    size += got;
    if (size < capacity) break;  // end of data
  }
  buf.resize(size);
  return size;
}

std::uint64_t InputFile::count_remaining(std::uint64_t cap) {
  std::uint8_t scratch[1 << 16];
  std::uint64_t total = 0;
  while (total <= cap) {
    const std::size_t got = read(scratch);
    if (got == 0) break;
    total += got;
  }
  return std::min(total, cap + 1);
}

}  // namespace gradcomp::data::detail
