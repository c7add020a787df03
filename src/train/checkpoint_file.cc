#include "train/checkpoint_file.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <string_view>
#include <vector>

#include "gradcomp/error.h"

namespace gradcomp::train {

namespace {

static_assert(std::endian::native == std::endian::little, "checkpoints are little-endian");

constexpr char kMagic[8] = {'G', 'R', 'A', 'D', 'C', 'K', 'P', 'T'};
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kHeaderBytes = 24;

std::size_t element_bytes(ArrayType t) { return t == ArrayType::kInt64 ? 8 : 4; }

template <typename T>
void put(std::vector<std::byte>& out, T v) {
  const std::size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

[[noreturn]] void fail(const std::filesystem::path& file, const std::string& what) {
  throw InvalidArgument("checkpoint " + file.string() + ": " + what);
}

void write_all(int fd, const std::byte* p, std::size_t n, const std::filesystem::path& file) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail(file, std::string("write failed: ") + std::strerror(errno));
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

std::uint32_t crc_of(const std::byte* p, std::size_t n) {
  return static_cast<std::uint32_t>(
      crc32_z(crc32_z(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(p), n));
}

// A bounds-checked reader over the body.
class Cursor {
 public:
  Cursor(std::span<const std::byte> buf, std::size_t pos, const std::filesystem::path& file)
      : buf_(buf), pos_(pos), file_(file) {}
  template <typename T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, buf_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  const std::byte* take(std::size_t n, const char* what) {
    need(n, what);
    const std::byte* p = buf_.data() + pos_;
    pos_ += n;
    return p;
  }
  std::size_t remaining() const { return buf_.size() - pos_; }

 private:
  void need(std::size_t n, const char* what) {
    if (n > buf_.size() - pos_) {
      fail(file_, std::string("truncated in ") + what + " (" + std::to_string(n) +
                      " bytes needed, " + std::to_string(buf_.size() - pos_) + " left)");
    }
  }
  std::span<const std::byte> buf_;
  std::size_t pos_;
  const std::filesystem::path& file_;
};

// For a file whose arrays are not the ones this run expects: where the two lists first
// part, e.g. ": the file's array 12 is 'memory/bucket0.accumulator', this run's is
// 'memory/bucket0.error' (written by a run with another --compressor, model or layout?)".
// c stands at the first array; the file has passed its CRC, but any parse error only ends
// the description.
std::string first_difference(Cursor c, std::uint32_t count, std::span<const ArrayView> arrays) {
  std::string file_name;
  std::size_t i = 0;
  try {
    for (; i < count; ++i) {
      const auto name_len = c.get<std::uint32_t>("array name length");
      const std::byte* name_p = c.take(name_len, "array name");
      file_name.assign(reinterpret_cast<const char*>(name_p), name_len);
      if (i >= arrays.size() || file_name != arrays[i].name) break;
      const auto type = c.get<std::uint8_t>("array type");
      const auto n = c.get<std::uint64_t>("array size");
      const std::uint64_t width = type == 2 ? 8 : 4;
      if (n > c.remaining() / width) return "";
      (void)c.take(static_cast<std::size_t>(n * width), "array data");
    }
  } catch (const InvalidArgument&) {
    return "";
  }
  const std::string hint = " (written by a run with another --compressor, model or layout?)";
  if (i < count && i < arrays.size()) {
    return ": the file's array " + std::to_string(i) + " is '" + file_name + "', this run's is '" +
           arrays[i].name + "'" + hint;
  }
  if (i < count) return ": the file has '" + file_name + "' beyond this run's arrays" + hint;
  if (i < arrays.size()) return ": the file ends before this run's '" + arrays[i].name + "'" + hint;
  return "";
}

// The optimizer an array's state belongs to, from the names Optimizer::state gives
// (optimizer.h): "momentum/..." is SGD's, "adamw...." AdamW's; null for anything else.
const char* optimizer_of(std::string_view name) {
  if (name.starts_with("momentum/")) return "sgd";
  if (name.starts_with("adamw.")) return "adamw";
  return nullptr;
}

// The optimizer whose state the file holds (its first optimizer array's), null if none or
// the arrays do not parse (the caller's own checks then say what is wrong). c stands at
// the first array.
const char* file_optimizer(Cursor c, std::uint32_t count) {
  try {
    for (std::uint32_t i = 0; i < count; ++i) {
      const auto name_len = c.get<std::uint32_t>("array name length");
      const std::byte* name_p = c.take(name_len, "array name");
      const std::string_view name(reinterpret_cast<const char*>(name_p), name_len);
      if (const char* o = optimizer_of(name)) return o;
      const auto type = c.get<std::uint8_t>("array type");
      const auto n = c.get<std::uint64_t>("array size");
      const std::uint64_t width = type == 2 ? 8 : 4;
      if (n > c.remaining() / width) return nullptr;
      (void)c.take(static_cast<std::size_t>(n * width), "array data");
    }
  } catch (const InvalidArgument&) {
  }
  return nullptr;
}

}  // namespace

void write_checkpoint(const std::filesystem::path& file, const CheckpointMeta& meta,
                      std::span<const ArrayView> arrays,
                      const std::filesystem::path& keep_previous) {
  std::vector<std::byte> body;
  std::size_t total = 40;
  for (const ArrayView& a : arrays) total += 13 + a.name.size() + a.count * element_bytes(a.type);
  body.reserve(total);
  put(body, meta.step);
  put(body, meta.epoch);
  put(body, meta.seed);
  put(body, meta.rank);
  put(body, meta.world);
  put(body, static_cast<std::uint32_t>(arrays.size()));
  for (const ArrayView& a : arrays) {
    put(body, static_cast<std::uint32_t>(a.name.size()));
    const auto* name = reinterpret_cast<const std::byte*>(a.name.data());
    body.insert(body.end(), name, name + a.name.size());
    put(body, static_cast<std::uint8_t>(a.type));
    put(body, static_cast<std::uint64_t>(a.count));
    const auto* data = static_cast<const std::byte*>(a.data);
    if (a.count > 0) body.insert(body.end(), data, data + a.count * element_bytes(a.type));
  }
  std::vector<std::byte> header;
  header.insert(header.end(), reinterpret_cast<const std::byte*>(kMagic),
                reinterpret_cast<const std::byte*>(kMagic) + 8);
  put(header, kVersion);
  put(header, crc_of(body.data(), body.size()));
  put(header, static_cast<std::uint64_t>(body.size()));

  std::filesystem::path tmp = file;
  tmp += ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(tmp, std::string("cannot create: ") + std::strerror(errno));
  try {
    write_all(fd, header.data(), header.size(), tmp);
    write_all(fd, body.data(), body.size(), tmp);
    if (::fsync(fd) != 0) fail(tmp, std::string("fsync failed: ") + std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    fail(tmp, std::string("close failed: ") + std::strerror(errno));
  }
  // Only now, with the new checkpoint safely in FILE.tmp, does the old one move aside.
  if (!keep_previous.empty() && ::rename(file.c_str(), keep_previous.c_str()) != 0 &&
      errno != ENOENT) {
    const int e = errno;
    ::unlink(tmp.c_str());
    fail(file, "rename to " + keep_previous.string() + " failed: " + std::strerror(e));
  }
  if (::rename(tmp.c_str(), file.c_str()) != 0) {
    fail(file, std::string("rename failed: ") + std::strerror(errno));
  }
  // The rename itself is durable once the directory is synced.
  std::filesystem::path dir = file.parent_path();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

namespace {

// subset: the file may hold other arrays between the wanted ones (the evaluator wants
// the model and skips the optimizer and memories); the wanted ones keep their order.
CheckpointMeta read_arrays(const std::filesystem::path& file, std::span<const ArrayView> arrays,
                           bool subset) {
  std::ifstream in(file, std::ios::binary);
  if (!in) fail(file, "cannot open");
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(0, std::ios::beg);
  if (size < 0) fail(file, "cannot determine the size");
  // The whole file, whatever its header claims: a corrupt length cannot make us
  // allocate more than the file holds.
  std::vector<std::byte> buf(static_cast<std::size_t>(size));
  if (!in.read(reinterpret_cast<char*>(buf.data()), size)) fail(file, "read failed");
  return parse_checkpoint(buf, file, arrays, subset);
}

}  // namespace

CheckpointMeta parse_checkpoint(std::span<const std::byte> buf, const std::filesystem::path& file,
                                std::span<const ArrayView> arrays, bool subset) {
  if (buf.size() < kHeaderBytes) {
    fail(file, "truncated: " + std::to_string(buf.size()) + " bytes, header needs " +
                   std::to_string(kHeaderBytes));
  }
  if (std::memcmp(buf.data(), kMagic, 8) != 0) fail(file, "bad magic (not a gradcomp checkpoint)");
  Cursor header(buf, 8, file);
  const auto version = header.get<std::uint32_t>("header");
  if (version != kVersion) {
    fail(file,
         "version " + std::to_string(version) + ", this build reads " + std::to_string(kVersion));
  }
  const auto crc = header.get<std::uint32_t>("header");
  const auto body_len = header.get<std::uint64_t>("header");
  if (body_len != buf.size() - kHeaderBytes) {
    fail(file, "body length " + std::to_string(body_len) + " in the header, " +
                   std::to_string(buf.size() - kHeaderBytes) + " in the file (truncated?)");
  }
  const std::uint32_t actual = crc_of(buf.data() + kHeaderBytes, buf.size() - kHeaderBytes);
  if (actual != crc) {
    fail(file, "CRC mismatch: header " + std::to_string(crc) + ", body " + std::to_string(actual));
  }

  Cursor c(buf, kHeaderBytes, file);
  CheckpointMeta meta;
  meta.step = c.get<std::uint64_t>("meta");
  meta.epoch = c.get<std::uint64_t>("meta");
  meta.seed = c.get<std::uint64_t>("meta");
  meta.rank = c.get<std::uint32_t>("meta");
  meta.world = c.get<std::uint32_t>("meta");
  const auto count = c.get<std::uint32_t>("meta");
  if (!subset) {
    // A run resumed with another --optimizer: said in those words rather than as the
    // first array name that differs.
    const char* ours = nullptr;
    for (const ArrayView& a : arrays) {
      if ((ours = optimizer_of(a.name)) != nullptr) break;
    }
    const char* theirs = file_optimizer(c, count);
    if (ours != nullptr && theirs != nullptr && std::string_view(ours) != theirs) {
      throw InvalidArgument(optimizer_mismatch(file, theirs, ours));
    }
  }
  if (subset ? count < arrays.size() : count != arrays.size()) {
    fail(file, std::to_string(count) + " arrays, the model and optimizer expect " +
                   std::to_string(arrays.size()) + first_difference(c, count, arrays));
  }
  // Pass 1: validate every array and remember where its data is.
  std::vector<const std::byte*> sources(arrays.size());
  std::size_t matched = 0;
  for (std::uint32_t in_file = 0; in_file < count; ++in_file) {
    const auto name_len = c.get<std::uint32_t>("array name length");
    const std::byte* name_p = c.take(name_len, "array name");
    const std::string name(reinterpret_cast<const char*>(name_p), name_len);
    if (subset && (matched == arrays.size() || name != arrays[matched].name)) {
      // Not wanted: skip it (its type and size still have to make sense).
      const auto type = c.get<std::uint8_t>("array type");
      if (type != 1 && type != 2)
        fail(file, "array '" + name + "' has unknown type " + std::to_string(type));
      const auto n = c.get<std::uint64_t>("array size");
      const std::uint64_t width = type == 1 ? 4 : 8;
      if (n > c.remaining() / width) fail(file, "array '" + name + "' runs past the end");
      (void)c.take(static_cast<std::size_t>(n * width), "array data");
      continue;
    }
    const std::size_t i = matched++;
    const ArrayView& want = arrays[i];
    if (name != want.name) {
      fail(file, "array " + std::to_string(i) + " is '" + name + "', expected '" + want.name + "'");
    }
    const auto type = c.get<std::uint8_t>("array type");
    if (type != static_cast<std::uint8_t>(want.type)) {
      fail(file, "array '" + name + "' has type " + std::to_string(type) + ", expected " +
                     std::to_string(static_cast<int>(want.type)));
    }
    const auto n = c.get<std::uint64_t>("array size");
    if (n != want.count) {
      fail(file, "array '" + name + "' holds " + std::to_string(n) + " elements, expected " +
                     std::to_string(want.count));
    }
    // n == want.count, a real in-memory size, so n * element size does not overflow.
    sources[i] = c.take(static_cast<std::size_t>(n) * element_bytes(want.type), "array data");
  }
  if (matched != arrays.size()) {
    fail(file, "array '" + arrays[matched].name + "' is missing");
  }
  if (c.remaining() != 0) fail(file, std::to_string(c.remaining()) + " trailing bytes");
  // Pass 2: everything matched; copy.
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    if (arrays[i].count > 0) {
      std::memcpy(arrays[i].data, sources[i], arrays[i].count * element_bytes(arrays[i].type));
    }
  }
  return meta;
}

CheckpointMeta read_checkpoint(const std::filesystem::path& file,
                               std::span<const ArrayView> arrays) {
  return read_arrays(file, arrays, false);
}

CheckpointMeta read_checkpoint_subset(const std::filesystem::path& file,
                                      std::span<const ArrayView> arrays) {
  return read_arrays(file, arrays, true);
}

std::string optimizer_mismatch(const std::filesystem::path& file, std::string_view theirs,
                               std::string_view ours) {
  return "checkpoint " + file.string() + ": written by an --optimizer " + std::string(theirs) +
         " run, this run's is " + std::string(ours) +
         " (the optimizer's state cannot carry over: resume with --optimizer " +
         std::string(theirs) + ", or start afresh in another --checkpoint-dir)";
}

std::optional<std::string> checkpoint_optimizer(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  char header[kHeaderBytes + 36];  // the header, then the meta up to the array count
  if (!in.read(header, sizeof header) || std::memcmp(header, kMagic, 8) != 0) return std::nullopt;
  std::uint32_t count = 0;
  std::memcpy(&count, header + kHeaderBytes + 32, 4);
  std::string name;
  for (std::uint32_t i = 0; i < count; ++i) {
    std::uint32_t len = 0;
    if (!in.read(reinterpret_cast<char*>(&len), 4) || len > 4096) return std::nullopt;
    name.resize(len);
    if (!in.read(name.data(), len)) return std::nullopt;
    if (const char* o = optimizer_of(name)) return std::string(o);
    std::uint8_t type = 0;
    std::uint64_t n = 0;
    if (!in.read(reinterpret_cast<char*>(&type), 1) || !in.read(reinterpret_cast<char*>(&n), 8) ||
        n > (std::uint64_t{1} << 40)) {
      return std::nullopt;
    }
    in.seekg(static_cast<std::streamoff>(n * (type == 2 ? 8 : 4)), std::ios::cur);
    if (!in) return std::nullopt;
  }
  return std::nullopt;
}

std::filesystem::path rank_checkpoint_file(const std::filesystem::path& dir, int rank) {
  return dir / ("rank-" + std::to_string(rank) + ".ckpt");
}

std::filesystem::path previous_checkpoint_file(const std::filesystem::path& file) {
  std::filesystem::path prev = file;
  prev += ".prev";
  return prev;
}

std::optional<std::uint64_t> checkpoint_step(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  char buf[kHeaderBytes + 8];
  if (!in.read(buf, sizeof buf) || std::memcmp(buf, kMagic, 8) != 0) return std::nullopt;
  std::uint64_t step = 0;
  std::memcpy(&step, buf + kHeaderBytes, 8);
  return step;
}

}  // namespace gradcomp::train
