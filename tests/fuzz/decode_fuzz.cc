// libFuzzer target for every registered decoder.
//
// Input layout: byte 0 picks the codec spec (index into all_codec_specs()) and, by its
// top bit, the mode; bytes 1-2 give n (little-endian, low 12 bits: < 4096); the rest is
// the message. In "framed" mode the fuzzer's bytes become the payload behind a correct
// header and checksum for that codec and n, so mutations reach each codec's payload
// validation instead of dying on the magic, the config tag or the CRC. In raw mode the
// bytes are the whole message; when byte 2's top bit is set its checksum is fixed up
// (reseal_message), so mutated header fields reach their own checks too, and the rest
// exercise the checksum itself. The only acceptable failure is CorruptMessage; anything
// else (a crash, a sanitizer report, another exception) is a bug.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gradcomp/error.h"
#include "gradcomp/registry.h"
#include "gradcomp/wire.h"
#include "support/test_support.h"

namespace {

const std::vector<std::shared_ptr<const gradcomp::Codec>>& codecs() {
  static const auto list = [] {
    std::vector<std::shared_ptr<const gradcomp::Codec>> out;
    for (const auto& spec : gradcomp::test::all_codec_specs()) {
      out.push_back(gradcomp::builtin_registry().make_codec(spec));
    }
    return out;
  }();
  return list;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  const auto& list = codecs();
  const gradcomp::Codec& codec = *list[(data[0] & 0x7F) % list.size()];
  const bool framed = (data[0] & 0x80) != 0;
  const bool fix_crc = (data[2] & 0x80) != 0;
  const std::size_t n = (data[1] | std::size_t{data[2]} << 8) % 4096;
  const auto* body = reinterpret_cast<const std::byte*>(data + 3);
  const std::size_t body_size = size - 3;

  std::vector<std::byte> msg;
  if (framed) {
    msg.resize(gradcomp::kHeaderBytes + body_size);
    std::copy(body, body + body_size, msg.begin() + gradcomp::kHeaderBytes);
    gradcomp::write_header(msg, codec.wire_id(), codec.config_tag(), n, body_size);
  } else {
    msg.assign(body, body + body_size);
    if (fix_crc && msg.size() >= gradcomp::kHeaderBytes) gradcomp::reseal_message(msg);
  }
  std::vector<float> out(n, 0.0f);
  try {
    codec.decode_add(msg, out, 0.5f);
  } catch (const gradcomp::CorruptMessage&) {
  }
  return 0;
}
