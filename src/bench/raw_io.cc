#include "bench/raw_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "gradcomp/error.h"
#include "gradcomp/wire.h"  // the little-endian host assertion: floats are written as-is

namespace gradcomp::bench {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw InvalidArgument("'" + path + "': " + what);
}

[[noreturn]] void fail_errno(const std::string& path, const std::string& what, int err) {
  fail(path, what + ": " + std::strerror(err));
}

// Closes a descriptor on every path out of a function.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Closes now and reports close's error (it can carry a delayed write error).
  int close_checked() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

// Reads exactly dst.size() bytes from fd.
void read_all(int fd, std::span<std::byte> dst, const std::string& path) {
  std::size_t done = 0;
  while (done < dst.size()) {
    const ssize_t r = ::read(fd, dst.data() + done, dst.size() - done);
    if (r < 0) {
      if (errno == EINTR) continue;
      fail_errno(path, "read failed", errno);
    }
    if (r == 0) {
      fail(path, "file shrank while reading (" + std::to_string(done) + " of " +
                     std::to_string(dst.size()) + " bytes)");
    }
    done += static_cast<std::size_t>(r);
  }
}

// The size of the open file; throws for directories and special files.
std::size_t regular_file_size(const std::string& path, Fd& fd) {
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail_errno(path, "cannot stat", errno);
  if (!S_ISREG(st.st_mode)) {
    fail(path, S_ISDIR(st.st_mode) ? "is a directory, not a file" : "is not a regular file");
  }
  return static_cast<std::size_t>(st.st_size);
}

int open_for_read(const std::string& path) {
  if (path.empty()) throw InvalidArgument("empty file name");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_errno(path, "cannot open", errno);
  return fd;
}

}  // namespace

std::vector<std::byte> read_bytes(const std::string& path) {
  Fd fd(open_for_read(path));
  const std::size_t size = regular_file_size(path, fd);
  std::vector<std::byte> data(size);
  read_all(fd.get(), data, path);
  return data;
}

std::vector<float> read_floats(const std::string& path) {
  Fd fd(open_for_read(path));
  const std::size_t size = regular_file_size(path, fd);
  if (size % sizeof(float) != 0) {
    fail(path, std::to_string(size) +
                   " bytes is not a whole number of float32 values (a multiple of 4 bytes)");
  }
  std::vector<float> data(size / sizeof(float));
  read_all(fd.get(), std::as_writable_bytes(std::span<float>(data)), path);
  return data;
}

PendingFile::PendingFile(std::string path, std::span<const std::byte> data)
    : path_(std::move(path)), tmp_(path_ + ".tmp") {
  if (path_.empty()) throw InvalidArgument("empty file name");
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    fail(path_, "is a directory, not a file");
  }
  Fd fd(::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) fail_errno(path_, "cannot create '" + tmp_ + "'", errno);
  // On any failure below, remove the partial temporary; `path` is never touched.
  auto abandon = [&](const std::string& what, int err) {
    fd.close_checked();
    ::unlink(tmp_.c_str());
    fail_errno(path_, what, err);
  };
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t w = ::write(fd.get(), data.data() + done, data.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      abandon("write failed", errno);
    }
    done += static_cast<std::size_t>(w);
  }
  if (::fsync(fd.get()) != 0) abandon("fsync failed", errno);
  if (fd.close_checked() != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    fail_errno(path_, "close failed", err);
  }
}

PendingFile::~PendingFile() {
  if (pending_) ::unlink(tmp_.c_str());
}

void PendingFile::commit() {
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    fail_errno(path_, "cannot replace with '" + tmp_ + "'", err);  // the destructor unlinks
  }
  pending_ = false;
}

void write_bytes_atomic(const std::string& path, std::span<const std::byte> data) {
  PendingFile(path, data).commit();
}

void write_floats_atomic(const std::string& path, std::span<const float> data) {
  write_bytes_atomic(path, std::as_bytes(data));
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace gradcomp::bench
