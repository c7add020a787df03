// IDX files (MNIST, Fashion-MNIST), as LeCun et al. define them on the MNIST page:
//   bytes 0-1  zero
//   byte  2    element type (0x08 = unsigned byte)
//   byte  3    number of dimensions d
//   then d big-endian u32 sizes, then the elements, row-major, nothing after them.
// Images: 0x00000803 (n x rows x cols); labels: 0x00000801 (n), each label < 10.
#include <array>
#include <cinttypes>
#include <limits>
#include <string>

#include "gradcomp/data/dataset.h"
#include "input_file.h"

namespace gradcomp::data {

namespace {

using detail::format;

constexpr std::uint64_t kMaxTrailingReported = std::uint64_t{1} << 20;
constexpr int kIdxClasses = 10;

// Reads the 4-byte magic plus `dims` sizes and checks the magic; returns the sizes.
std::array<std::uint32_t, 3> read_idx_header(detail::InputFile& f, int dims, const char* what) {
  std::uint8_t hdr[16] = {};
  const std::size_t header_bytes = 4 + 4 * static_cast<std::size_t>(dims);
  const std::size_t got = f.read({hdr, header_bytes});
  if (got < 4) {
    detail::fail(f.path(), format("truncated: %zu bytes, too short for an IDX header", got));
  }
  const std::uint32_t magic = detail::load_be32(hdr);
  const std::uint32_t expected = 0x0800u | static_cast<std::uint32_t>(dims);
  if (magic != expected) {
    if (hdr[0] != 0 || hdr[1] != 0) {
      detail::fail(f.path(),
                   format("not an IDX file: magic 0x%08" PRIX32 " (expected 0x%08" PRIX32 ", %s)",
                          magic, expected, what));
    }
    if (hdr[2] != 0x08) {
      detail::fail(f.path(), format("IDX element type 0x%02X, expected 0x08 (unsigned byte)",
                                    unsigned{hdr[2]}));
    }
    detail::fail(f.path(), format("IDX file has %u dimension%s, expected %d (%s)", unsigned{hdr[3]},
                                  hdr[3] == 1 ? "" : "s", dims, what));
  }
  if (got < header_bytes) {
    detail::fail(f.path(), format("truncated: the IDX header needs %zu bytes, file holds %zu",
                                  header_bytes, got));
  }
  std::array<std::uint32_t, 3> sizes{};
  for (std::size_t d = 0; d < static_cast<std::size_t>(dims); ++d) {
    sizes[d] = detail::load_be32(hdr + 4 + 4 * d);
  }
  return sizes;
}

void reject_trailing(detail::InputFile& f, const std::string& described) {
  const std::uint64_t extra = f.count_remaining(kMaxTrailingReported);
  if (extra == 0) return;
  const std::string amount = extra > kMaxTrailingReported
                                 ? format("more than %" PRIu64 " bytes", kMaxTrailingReported)
                                 : format("%" PRIu64 " byte%s", extra, extra == 1 ? "" : "s");
  detail::fail(f.path(),
               "trailing data: " + amount + " after the " + described + " the header describes");
}

}  // namespace

U8Images read_idx_images(const std::filesystem::path& file) {
  detail::InputFile f(file);
  const auto [n, rows, cols] = read_idx_header(f, 3, "u8 images with 3 dims");
  if (rows == 0 || cols == 0) {
    detail::fail(
        file, format("header says images of %" PRIu32 "x%" PRIu32 ", which are empty", rows, cols));
  }
  // Bounded so that n*rows*cols floats, as int64 element counts, cannot overflow later.
  std::uint64_t bytes = 0;
  if (!detail::checked_mul(n, rows, bytes) || !detail::checked_mul(bytes, cols, bytes) ||
      bytes >
          static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) / sizeof(float)) {
    detail::fail(file, format("header says %" PRIu32 " images of %" PRIu32 "x%" PRIu32
                              ", a size that overflows",
                              n, rows, cols));
  }
  const std::string described = format("%" PRIu32 " images of %" PRIu32 "x%" PRIu32, n, rows, cols);
  U8Images out;
  const std::size_t got = f.read_up_to(out.pixels, bytes);
  if (got < bytes) {
    detail::fail(
        file, format("truncated: header says %s (%" PRIu64 " bytes), file holds %zu bytes of data",
                     described.c_str(), bytes, got));
  }
  reject_trailing(f, described);
  out.n = n;
  out.c = 1;
  out.h = rows;
  out.w = cols;
  return out;
}

std::vector<std::uint8_t> read_idx_labels(const std::filesystem::path& file) {
  detail::InputFile f(file);
  const std::uint32_t n = read_idx_header(f, 1, "u8 labels with 1 dim")[0];
  std::vector<std::uint8_t> labels;
  const std::size_t got = f.read_up_to(labels, n);
  if (got < n) {
    detail::fail(
        file,
        format("truncated: header says %" PRIu32 " labels, file holds %zu bytes of data", n, got));
  }
  reject_trailing(f, format("%" PRIu32 " labels", n));
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] >= kIdxClasses) {
      detail::fail(file, format("label %u at index %zu is out of range (%d classes)",
                                unsigned{labels[i]}, i, kIdxClasses));
    }
  }
  return labels;
}

}  // namespace gradcomp::data
