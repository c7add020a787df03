// libFuzzer target for the checkpoint reader (train/checkpoint_file.h, torch-free).
//
// Input layout: byte 0 holds flags, the rest is the checkpoint file. The reader is given
// the arrays the file itself declares (scanned leniently here), so that mutations get
// past the "expected arrays" checks and reach the copy; flags alter that expectation:
//   bit 0: fix up the header's body length and CRC, so that mutations of the body reach
//          its own checks instead of dying on the CRC;
//   bit 1: subset mode (read_checkpoint_subset, as the evaluator reads);
//   bit 2: expect only every other array (with bit 1: skipping arrays);
//   bit 3: expect one element more in the first array (a size mismatch);
//   bit 4: expect the first array as int64 where it is float32 and vice versa.
// The only acceptable failure is InvalidArgument; anything else is a bug, and so is a
// write to a destination array when the reader failed, and (whole-file mode) a success
// whose destinations do not hold the file's data.
//
// Speed (scripts/fuzz.sh runs this with -max_len=4096): the sentinel check compares
// whole buffers with memcmp (a byte loop here was most of the time per input: every
// comparison is coverage-instrumented), and declared arrays are limited to 2^16
// elements (512 KiB): no input of max_len bytes holds more than 1024, so a larger count
// reaches the reader's checks exactly as one of 2^20 would, without allocating, filling
// and comparing megabytes per input.
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gradcomp/error.h"
#include "train/checkpoint_file.h"

namespace {

using gradcomp::train::ArrayType;
using gradcomp::train::ArrayView;

constexpr std::size_t kHeader = 24;
constexpr std::size_t kMaxElements = 1 << 16;

struct Declared {
  std::string name;
  std::uint8_t type;
  std::uint64_t count;
  std::size_t data_offset;  // where its data starts in the file (may lie past the end)
};

// Whether all n bytes at p are `value`.
bool all_bytes(const std::byte* p, std::size_t n, std::byte value) {
  return n == 0 || (p[0] == value && std::memcmp(p, p + 1, n - 1) == 0);
}

// The arrays the body declares, as far as it can be read (no validation beyond bounds).
std::vector<Declared> scan(const std::vector<std::byte>& f) {
  std::vector<Declared> out;
  std::size_t pos = kHeader + 36;
  auto have = [&](std::size_t n) { return n <= f.size() && pos <= f.size() - n; };
  if (!have(4)) return out;
  std::uint32_t count;
  std::memcpy(&count, f.data() + pos, 4);
  pos += 4;
  for (std::uint32_t i = 0; i < count && i < 64; ++i) {
    std::uint32_t name_len;
    if (!have(4)) break;
    std::memcpy(&name_len, f.data() + pos, 4);
    pos += 4;
    if (!have(name_len)) break;
    Declared d;
    d.name.assign(reinterpret_cast<const char*>(f.data() + pos), name_len);
    pos += name_len;
    if (!have(9)) break;
    d.type = static_cast<std::uint8_t>(f[pos]);
    std::memcpy(&d.count, f.data() + pos + 1, 8);
    pos += 9;
    d.data_offset = pos;
    const std::uint64_t width = d.type == 2 ? 8 : 4;
    if (d.count > kMaxElements) break;
    out.push_back(d);
    if (!have(d.count * width)) break;
    pos += d.count * width;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t flags = data[0];
  std::vector<std::byte> file(reinterpret_cast<const std::byte*>(data + 1),
                              reinterpret_cast<const std::byte*>(data + size));
  if ((flags & 1) && file.size() >= kHeader) {
    const std::uint64_t body = file.size() - kHeader;
    const auto crc = static_cast<std::uint32_t>(crc32_z(
        crc32_z(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(file.data() + kHeader), body));
    std::memcpy(file.data() + 12, &crc, 4);
    std::memcpy(file.data() + 16, &body, 8);
  }
  std::vector<Declared> declared = scan(file);
  if (flags & 4) {
    std::vector<Declared> kept;
    for (std::size_t i = 0; i < declared.size(); i += 2) kept.push_back(declared[i]);
    declared = std::move(kept);
  }
  if (!declared.empty() && (flags & 8)) ++declared[0].count;
  if (!declared.empty() && (flags & 16)) declared[0].type = declared[0].type == 2 ? 1 : 2;

  // Destinations, filled with a sentinel to detect writes on failure.
  std::vector<std::vector<std::byte>> storage;
  std::vector<ArrayView> arrays;
  for (const Declared& d : declared) {
    const ArrayType type = d.type == 2 ? ArrayType::kInt64 : ArrayType::kFloat32;
    const std::size_t width = type == ArrayType::kInt64 ? 8 : 4;
    storage.emplace_back(d.count * width, std::byte{0xA5});
    arrays.push_back({d.name, type, storage.back().data(), static_cast<std::size_t>(d.count)});
  }
  const bool subset = (flags & 2) != 0;
  try {
    (void)gradcomp::train::parse_checkpoint(file, "fuzz.ckpt", arrays, subset);
  } catch (const gradcomp::InvalidArgument&) {
    for (const auto& s : storage) {
      if (!all_bytes(s.data(), s.size(), std::byte{0xA5})) {
        __builtin_trap();  // written before validation finished
      }
    }
    return 0;
  }
  // Read in whole-file mode: array i is the file's array i, as scanned.
  if (!subset) {
    for (std::size_t i = 0; i < declared.size(); ++i) {
      const std::size_t bytes = storage[i].size();
      if (declared[i].data_offset > file.size() || file.size() - declared[i].data_offset < bytes ||
          (bytes > 0 &&
           std::memcmp(storage[i].data(), file.data() + declared[i].data_offset, bytes) != 0)) {
        __builtin_trap();  // accepted, but the destination does not hold the file's data
      }
    }
  }
  return 0;
}
